"""RAdam (Liu et al.): PyTorch's single-tensor and foreach updates, with their memory."""

from __future__ import annotations

from engine.autograd.grad_mode import no_grad
from engine.optim import foreach
from engine.optim._checks import check_lr_eps_betas
from engine.optim.optimizer import Optimizer, by_device_and_dtype, number


def _reciprocal_(ts) -> None:
    """torch._foreach_reciprocal_ (no loop variable left holding the last tensor)."""
    for t in ts:
        t.reciprocal_()


class RAdam(Optimizer):
    """RAdam. State per parameter, made at its first step: a float32 `step` (a 0-d cpu
    tensor), `exp_avg` and `exp_avg_sq` (its size).

    Single-tensor allocates per parameter `exp_avg / bias_correction1`, then (once the variance
    is tractable, rho_t > 5) `exp_avg_sq.sqrt()` and the adaptive lr, and a product chain of
    parameter-sized temporaries; foreach a group's `sqrt(exp_avg_sq)` buffers at once."""

    def __init__(
        self,
        params,
        lr: float = 1e-3,
        betas=(0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        decoupled_weight_decay: bool = False,
        *,
        foreach: bool | None = None,
        maximize: bool = False,
        capturable: bool = False,
        differentiable: bool = False,
    ):
        check_lr_eps_betas(lr, eps, betas, weight_decay)
        defaults = dict(
            lr=lr,
            betas=tuple(betas),
            eps=eps,
            weight_decay=weight_decay,
            maximize=maximize,
            foreach=foreach,
            capturable=capturable,
            decoupled_weight_decay=decoupled_weight_decay,
            differentiable=differentiable,
        )
        super().__init__(params, defaults)
        self._check_flags(foreach, None, differentiable, capturable)

    @no_grad()
    def step(self, closure=None):
        return self._step_groups(
            closure, lambda p, group: self._lazy_state(p, "exp_avg", "exp_avg_sq")
        )

    @staticmethod
    def _single(group, params, states) -> None:
        """torch.optim.radam._single_tensor_radam."""
        lr, eps, weight_decay = number(group["lr"]), group["eps"], group["weight_decay"]
        beta1, beta2 = group["betas"]
        for param, state in zip(params, states, strict=True):
            grad = param.grad if not group["maximize"] else -param.grad
            exp_avg, exp_avg_sq, step_t = state["exp_avg"], state["exp_avg_sq"], state["step"]
            step_t += 1
            step = float(step_t.item())
            if weight_decay != 0:
                if group["decoupled_weight_decay"]:
                    param.mul_(1 - lr * weight_decay)
                else:
                    grad = grad.add(param, alpha=weight_decay)
            exp_avg.lerp_(grad, 1 - beta1)
            exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
            bias_correction1 = 1 - beta1**step
            bias_correction2 = 1 - beta2**step
            bias_corrected_exp_avg = exp_avg / bias_correction1
            rho_inf = 2 / (1 - beta2) - 1
            rho_t = rho_inf - 2 * step * (beta2**step) / bias_correction2

            def _compute_rect(rho_t=rho_t, rho_inf=rho_inf):
                return (
                    (rho_t - 4) * (rho_t - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho_t)
                ) ** 0.5

            def _compute_adaptive_lr(exp_avg_sq=exp_avg_sq, bias_correction2=bias_correction2):
                exp_avg_sq_sqrt = exp_avg_sq.sqrt()
                exp_avg_sq_sqrt = exp_avg_sq_sqrt.add_(eps)
                return (bias_correction2**0.5) / exp_avg_sq_sqrt

            if rho_t > 5.0:
                param.add_(
                    bias_corrected_exp_avg * lr * _compute_adaptive_lr() * _compute_rect(),
                    alpha=-1.0,
                )
            else:
                param.add_(bias_corrected_exp_avg * lr, alpha=-1.0)

    @staticmethod
    def _foreach(group, params, states) -> None:
        """torch.optim.radam._multi_tensor_radam (engine.optim.foreach)."""
        lr, eps, weight_decay = number(group["lr"]), group["eps"], group["weight_decay"]
        beta1, beta2 = group["betas"]
        maximize, decoupled = group["maximize"], group["decoupled_weight_decay"]
        for grouped_params, grouped_states in by_device_and_dtype(params, states):
            grouped_grads = [p.grad for p in grouped_params]
            grouped_exp_avgs = [s["exp_avg"] for s in grouped_states]
            grouped_exp_avg_sqs = [s["exp_avg_sq"] for s in grouped_states]
            grouped_state_steps = [s["step"] for s in grouped_states]
            foreach.step_counters(grouped_state_steps)
            if maximize:
                grouped_grads = foreach.neg(grouped_grads)
            rho_inf = 2 / (1 - beta2) - 1
            counts = [float(s.item()) for s in grouped_state_steps]
            rho_t_list = [rho_inf - 2 * c * (beta2**c) / (1 - beta2**c) for c in counts]
            if weight_decay != 0:
                if decoupled:
                    foreach.mul_(grouped_params, 1 - lr * weight_decay)
                elif maximize:
                    foreach.add_(grouped_grads, grouped_params, alpha=weight_decay)
                else:
                    grouped_grads = foreach.add(grouped_grads, grouped_params, alpha=weight_decay)
            foreach.lerp_(grouped_exp_avgs, grouped_grads, 1 - beta1)
            foreach.mul_(grouped_exp_avg_sqs, beta2)
            foreach.addcmul_(grouped_exp_avg_sqs, grouped_grads, grouped_grads, 1 - beta2)
            del grouped_grads
            rect = [
                ((rho_t - 4) * (rho_t - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho_t))
                ** 0.5
                if rho_t > 5
                else 0
                for rho_t in rho_t_list
            ]
            unrectified = [0 if r > 0 else 1.0 for r in rect]
            bias_correction1 = [1 - beta1**c for c in counts]
            unrect_step_size = [
                (lr * r / bc) * -1 for r, bc in zip(unrectified, bias_correction1, strict=True)
            ]
            bias_correction2 = [
                ((1 - beta2**c) ** 0.5) * (lr * r / bc) * -1
                for c, r, bc in zip(counts, rect, bias_correction1, strict=True)
            ]
            buffer = foreach.sqrt(grouped_exp_avg_sqs)
            foreach.add_(buffer, eps)
            foreach.div_(buffer, bias_correction2)
            _reciprocal_(buffer)
            foreach.add_(buffer, unrect_step_size)
            foreach.addcmul_(grouped_params, grouped_exp_avgs, buffer)
