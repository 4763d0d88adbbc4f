"""Adadelta (Zeiler): PyTorch's single-tensor and foreach updates, with their memory."""

from __future__ import annotations

from engine.autograd.grad_mode import no_grad
from engine.optim import foreach
from engine.optim.optimizer import Optimizer, by_device_and_dtype, number
from engine.tensor import Tensor


class Adadelta(Optimizer):
    """Adadelta. State per parameter, made at its first step: a float32 `step` (a 0-d cpu
    tensor), `square_avg` and `acc_delta` (its size).

    Single-tensor allocates per parameter `std = square_avg.add(eps).sqrt_()` and
    `delta = acc_delta.add(eps).sqrt_()`; foreach both for a whole group at once."""

    def __init__(
        self,
        params,
        lr: float = 1.0,
        rho: float = 0.9,
        eps: float = 1e-6,
        weight_decay: float = 0.0,
        foreach: bool | None = None,
        *,
        capturable: bool = False,
        maximize: bool = False,
        differentiable: bool = False,
    ):
        if isinstance(lr, Tensor) and lr.numel() != 1:
            raise ValueError("Tensor lr must be 1-element")
        if not 0.0 <= lr:
            raise ValueError(f"Invalid learning rate: {lr}")
        if not 0.0 <= rho <= 1.0:
            raise ValueError(f"Invalid rho value: {rho}")
        if not 0.0 <= eps:
            raise ValueError(f"Invalid epsilon value: {eps}")
        if not 0.0 <= weight_decay:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        defaults = dict(
            lr=lr,
            rho=rho,
            eps=eps,
            weight_decay=weight_decay,
            maximize=maximize,
            capturable=capturable,
            foreach=foreach,
            differentiable=differentiable,
        )
        super().__init__(params, defaults)
        self._check_flags(foreach, None, differentiable, capturable)

    @no_grad()
    def step(self, closure=None):
        return self._step_groups(
            closure, lambda p, group: self._lazy_state(p, "square_avg", "acc_delta")
        )

    @staticmethod
    def _single(group, params, states) -> None:
        """torch.optim.adadelta._single_tensor_adadelta."""
        lr, rho, eps = number(group["lr"]), group["rho"], group["eps"]
        weight_decay = group["weight_decay"]
        for param, state in zip(params, states, strict=True):
            grad, square_avg, acc_delta = param.grad, state["square_avg"], state["acc_delta"]
            state["step"] += 1
            grad = grad if not group["maximize"] else -grad
            if weight_decay != 0:
                grad = grad.add(param, alpha=weight_decay)
            square_avg.mul_(rho).addcmul_(grad, grad, value=1 - rho)
            std = square_avg.add(eps).sqrt_()
            delta = acc_delta.add(eps).sqrt_()
            delta.div_(std).mul_(grad)
            acc_delta.mul_(rho).addcmul_(delta, delta, value=1 - rho)
            param.add_(delta, alpha=-lr)

    @staticmethod
    def _foreach(group, params, states) -> None:
        """torch.optim.adadelta._multi_tensor_adadelta (engine.optim.foreach)."""
        lr, rho, eps = number(group["lr"]), group["rho"], group["eps"]
        weight_decay, maximize = group["weight_decay"], group["maximize"]
        for device_params, device_states in by_device_and_dtype(params, states):
            device_grads = [p.grad for p in device_params]
            device_square_avgs = [s["square_avg"] for s in device_states]
            device_acc_deltas = [s["acc_delta"] for s in device_states]
            foreach.step_counters([s["step"] for s in device_states])
            if maximize:
                device_grads = foreach.neg(device_grads)
            if weight_decay != 0:
                if maximize:
                    foreach.add_(device_grads, device_params, alpha=weight_decay)
                else:
                    device_grads = foreach.add(device_grads, device_params, alpha=weight_decay)
            foreach.mul_(device_square_avgs, rho)
            foreach.addcmul_(device_square_avgs, device_grads, device_grads, value=1 - rho)
            std = foreach.add(device_square_avgs, eps)
            foreach.sqrt_(std)
            deltas = foreach.add(device_acc_deltas, eps)
            foreach.sqrt_(deltas)
            foreach.div_(deltas, std)
            foreach.mul_(deltas, device_grads)
            foreach.mul_(device_acc_deltas, rho)
            foreach.addcmul_(device_acc_deltas, deltas, deltas, value=1 - rho)
            foreach.add_(device_params, deltas, alpha=-lr)
