"""Rprop (resilient backpropagation): PyTorch's single-tensor and foreach updates, with their
memory."""

from __future__ import annotations

from engine import dtypes
from engine.autograd.grad_mode import no_grad
from engine.creation import full_like, tensor, zeros_like
from engine.optim import foreach
from engine.optim.optimizer import Optimizer, by_device_and_dtype, number
from engine.tensor import Tensor


class Rprop(Optimizer):
    """Rprop. State per parameter, made at its first step in PyTorch's order: a float32 `step`
    (a 0-d cpu tensor), `prev` (zeros) and `step_size` (filled with lr), both its size.

    Each step writes the sign of grad * prev through boolean masks (torch's
    `sign[sign.gt(0)] = etaplus`: a bool mask and the nonzero indices behind each write).
    Single-tensor allocates per parameter the sign, a copy of the gradient and its sign;
    foreach the signs of the whole group at once and writes the gradients into `prev`."""

    def __init__(
        self,
        params,
        lr: float = 1e-2,
        etas=(0.5, 1.2),
        step_sizes=(1e-6, 50),
        *,
        capturable: bool = False,
        foreach: bool | None = None,
        maximize: bool = False,
        differentiable: bool = False,
    ):
        if isinstance(lr, Tensor) and lr.numel() != 1:
            raise ValueError("Tensor lr must be 1-element")
        if not 0.0 <= lr:
            raise ValueError(f"Invalid learning rate: {lr}")
        if not 0.0 < etas[0] < 1.0 < etas[1]:
            raise ValueError(f"Invalid eta values: {etas[0]}, {etas[1]}")
        defaults = dict(
            lr=lr,
            etas=etas,
            step_sizes=step_sizes,
            foreach=foreach,
            maximize=maximize,
            differentiable=differentiable,
            capturable=capturable,
        )
        super().__init__(params, defaults)
        self._check_flags(foreach, None, differentiable, capturable)

    def _init_state(self, param, lr) -> dict:
        state = self.state[param]
        if not state:
            if param.is_complex():
                raise NotImplementedError(
                    "Rprop on complex parameters (torch's view_as_real update) is not modelled "
                    "by engine.optim; real floating parameters are supported"
                )
            with self._state_context():
                state["step"] = tensor(0.0, dtype=dtypes.float32)
                state["prev"] = zeros_like(param)
                state["step_size"] = full_like(param.grad, number(lr))
        return state

    @no_grad()
    def step(self, closure=None):
        return self._step_groups(closure, lambda p, group: self._init_state(p, group["lr"]))

    @staticmethod
    def _single(group, params, states) -> None:
        """torch.optim.rprop._single_tensor_rprop."""
        etaminus, etaplus = group["etas"]
        step_size_min, step_size_max = group["step_sizes"]
        for param, state in zip(params, states, strict=True):
            grad = param.grad
            grad = grad if not group["maximize"] else -grad
            prev, step_size, step = state["prev"], state["step_size"], state["step"]
            step += 1
            sign = grad.mul(prev).sign()
            sign[sign.gt(0)] = etaplus
            sign[sign.lt(0)] = etaminus
            sign[sign.eq(0)] = 1
            step_size.mul_(sign).clamp_(step_size_min, step_size_max)
            grad = grad.clone()
            grad[sign.eq(etaminus)] = 0
            param.addcmul_(grad.sign(), step_size, value=-1)
            prev.copy_(grad)

    @staticmethod
    def _foreach(group, params, states) -> None:
        """torch.optim.rprop._multi_tensor_rprop (engine.optim.foreach)."""
        etaminus, etaplus = group["etas"]
        step_size_min, step_size_max = group["step_sizes"]
        for grouped_params, grouped_states in by_device_and_dtype(params, states):
            grouped_grads = [p.grad for p in grouped_params]
            grouped_prevs = [s["prev"] for s in grouped_states]
            grouped_step_sizes = [s["step_size"] for s in grouped_states]
            foreach.step_counters([s["step"] for s in grouped_states])
            signs = foreach.mul(grouped_grads, grouped_prevs)
            if group["maximize"]:
                foreach.neg_(signs)
            # prev holds the new gradients from here on (torch reuses its memory)
            foreach.copy_(grouped_prevs, grouped_grads)
            if group["maximize"]:
                foreach.neg_(grouped_prevs)
            grouped_grads = grouped_prevs
            for sign in signs:
                sign.sign_()
            for sign in signs:
                sign[sign.gt(0)] = etaplus
                sign[sign.lt(0)] = etaminus
                sign[sign.eq(0)] = 1
            foreach.mul_(grouped_step_sizes, signs)
            for step_size in grouped_step_sizes:
                step_size.clamp_(step_size_min, step_size_max)
            grouped_grads = list(grouped_grads)
            for i in range(len(grouped_grads)):
                grouped_grads[i].copy_(_where_zero(signs[i].eq(etaminus), grouped_grads[i]))
            del signs
            grad_signs = [grad.sign() for grad in grouped_grads]
            foreach.addcmul_(grouped_params, grad_signs, grouped_step_sizes, value=-1)


def _where_zero(condition, other):
    """torch.where(condition, 0, other)."""
    from engine.ops import _ns as ops

    return ops["where"](condition, 0, other)
