"""Adam and AdamW (PyTorch's single-tensor update, the one it uses on cpu)."""

from __future__ import annotations

from engine.autograd.grad_mode import no_grad
from engine.ops import _ns as _op_table
from engine.optim.optimizer import Optimizer

_maximum = _op_table["maximum"]


class Adam(Optimizer):
    """Adam (Kingma & Ba). State per parameter, made at its first step: a float32 `step` counter,
    `exp_avg` and `exp_avg_sq` (each the parameter's size; `max_exp_avg_sq` too with amsgrad).

    The update allocates one `denom` buffer per parameter, as PyTorch does:
    `denom = (exp_avg_sq.sqrt() / sqrt(1 - beta2**t)).add_(eps)`; everything else is in place.
    """

    _decoupled = False

    def __init__(
        self,
        params,
        lr: float = 1e-3,
        betas=(0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        amsgrad: bool = False,
        *,
        maximize: bool = False,
        decoupled_weight_decay: bool | None = None,
    ):
        self._check_non_negative(lr=lr, eps=eps)
        if not 0.0 <= betas[0] < 1.0:
            raise ValueError(f"Invalid beta parameter at index 0: {betas[0]}")
        if not 0.0 <= betas[1] < 1.0:
            raise ValueError(f"Invalid beta parameter at index 1: {betas[1]}")
        self._check_non_negative(weight_decay=weight_decay)
        decoupled = self._decoupled if decoupled_weight_decay is None else decoupled_weight_decay
        defaults = dict(
            lr=lr,
            betas=tuple(betas),
            eps=eps,
            weight_decay=weight_decay,
            amsgrad=amsgrad,
            maximize=maximize,
            decoupled_weight_decay=decoupled,
        )
        super().__init__(params, defaults)

    def _init_state(self, group, param) -> dict:
        fields = ("exp_avg", "exp_avg_sq") + (("max_exp_avg_sq",) if group["amsgrad"] else ())
        return self._lazy_state(param, *fields)

    @no_grad()
    def step(self, closure=None):
        loss = self._closure_loss(closure)
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            states = [self._init_state(group, p) for p in params]  # all state first, like torch
            self._update(group, params, states)
        return loss

    def _update(self, group, params, states) -> None:
        lr, eps, weight_decay = group["lr"], group["eps"], group["weight_decay"]
        beta1, beta2 = group["betas"]
        amsgrad, maximize, decoupled = (
            group["amsgrad"],
            group["maximize"],
            group["decoupled_weight_decay"],
        )
        for param, state in zip(params, states, strict=True):
            grad = param.grad if not maximize else -param.grad
            exp_avg, exp_avg_sq, step_t = state["exp_avg"], state["exp_avg_sq"], state["step"]
            step_t += 1
            if weight_decay != 0:
                if decoupled:
                    param.mul_(1 - lr * weight_decay)
                else:
                    grad = grad.add(param, alpha=weight_decay)
            exp_avg.lerp_(grad, 1 - beta1)
            exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
            step = float(step_t.item())
            bias_correction1 = 1 - beta1**step
            bias_correction2 = 1 - beta2**step
            step_size = lr / bias_correction1
            bias_correction2_sqrt = bias_correction2**0.5
            if amsgrad:
                max_sq = state["max_exp_avg_sq"]
                _maximum(max_sq, exp_avg_sq, out=max_sq)
                denom = (max_sq.sqrt() / bias_correction2_sqrt).add_(eps)
            else:
                denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps)
            param.addcdiv_(exp_avg, denom, value=-step_size)


class AdamW(Adam):
    """Adam with decoupled weight decay: param *= 1 - lr * weight_decay before the Adam step."""

    _decoupled = True

    def __init__(
        self,
        params,
        lr: float = 1e-3,
        betas=(0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 1e-2,
        amsgrad: bool = False,
        *,
        maximize: bool = False,
    ):
        super().__init__(
            params,
            lr,
            betas,
            eps,
            weight_decay,
            amsgrad,
            maximize=maximize,
            decoupled_weight_decay=True,
        )
