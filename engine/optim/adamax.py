"""Adamax (Kingma & Ba, the infinity norm): PyTorch's single-tensor and foreach updates."""

from __future__ import annotations

from engine.autograd.grad_mode import no_grad
from engine.ops import _ns as _op_table
from engine.optim import foreach
from engine.optim._checks import check_lr_eps_betas
from engine.optim.optimizer import Optimizer, by_device_and_dtype, number

_maximum = _op_table["maximum"]


def _abs_(ts) -> None:
    """torch._foreach_abs_ (no loop variable left holding the last tensor)."""
    for t in ts:
        t.abs_()


class Adamax(Optimizer):
    """Adamax. State per parameter, made at its first step: a float32 `step` (a 0-d cpu
    tensor), `exp_avg` and `exp_inf` (its size).

    Single-tensor allocates per parameter `grad.abs()` (plus the gradient copy with maximize or
    weight_decay); foreach the absolute values of a whole group at once."""

    def __init__(
        self,
        params,
        lr: float = 2e-3,
        betas=(0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        foreach: bool | None = None,
        *,
        maximize: bool = False,
        differentiable: bool = False,
        capturable: bool = False,
    ):
        check_lr_eps_betas(lr, eps, betas, weight_decay)
        defaults = dict(
            lr=lr,
            betas=tuple(betas),
            eps=eps,
            weight_decay=weight_decay,
            foreach=foreach,
            maximize=maximize,
            differentiable=differentiable,
            capturable=capturable,
        )
        super().__init__(params, defaults)
        self._check_flags(foreach, None, differentiable, capturable)

    @no_grad()
    def step(self, closure=None):
        return self._step_groups(
            closure, lambda p, group: self._lazy_state(p, "exp_avg", "exp_inf")
        )

    @staticmethod
    def _single(group, params, states) -> None:
        """torch.optim.adamax._single_tensor_adamax."""
        lr, eps, weight_decay = number(group["lr"]), group["eps"], group["weight_decay"]
        beta1, beta2 = group["betas"]
        for param, state in zip(params, states, strict=True):
            grad = param.grad
            grad = grad if not group["maximize"] else -grad
            exp_avg, exp_inf, step_t = state["exp_avg"], state["exp_inf"], state["step"]
            step_t += 1
            if weight_decay != 0:
                grad = grad.add(param, alpha=weight_decay)
            exp_avg.lerp_(grad, 1 - beta1)
            _maximum(exp_inf.mul_(beta2), grad.abs().add_(eps), out=exp_inf)
            bias_correction = 1 - beta1 ** float(step_t.item())
            clr = lr / bias_correction
            param.addcdiv_(exp_avg, exp_inf, value=-clr)

    @staticmethod
    def _foreach(group, params, states) -> None:
        """torch.optim.adamax._multi_tensor_adamax (engine.optim.foreach)."""
        lr, eps, weight_decay = number(group["lr"]), group["eps"], group["weight_decay"]
        beta1, beta2 = group["betas"]
        maximize = group["maximize"]
        for grouped_params, grouped_states in by_device_and_dtype(params, states):
            grouped_grads = [p.grad for p in grouped_params]
            grouped_exp_avgs = [s["exp_avg"] for s in grouped_states]
            grouped_exp_infs = [s["exp_inf"] for s in grouped_states]
            grouped_state_steps = [s["step"] for s in grouped_states]
            grouped_grads = foreach.gradients(
                grouped_params,
                grouped_grads,
                grouped_state_steps,
                maximize=maximize,
                weight_decay=weight_decay,
            )
            foreach.lerp_(grouped_exp_avgs, grouped_grads, 1 - beta1)
            foreach.mul_(grouped_exp_infs, beta2)
            if not maximize and weight_decay == 0:
                grouped_grads = [g.abs() for g in grouped_grads]
            else:  # the gradients are the update's own copies
                _abs_(grouped_grads)
            foreach.add_(grouped_grads, eps)
            foreach.maximum_(grouped_exp_infs, grouped_grads)
            step_size = [(lr / (1 - beta1 ** float(s.item()))) * -1 for s in grouped_state_steps]
            foreach.addcdiv_(grouped_params, grouped_exp_avgs, grouped_exp_infs, step_size)
