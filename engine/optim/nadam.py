"""NAdam (Dozat): PyTorch's single-tensor and foreach updates, with their memory."""

from __future__ import annotations

from engine import dtypes
from engine.autograd.grad_mode import no_grad
from engine.creation import tensor
from engine.optim import foreach
from engine.optim._checks import check_lr_eps_betas
from engine.optim.optimizer import Optimizer, by_device_and_dtype, number


class NAdam(Optimizer):
    """NAdam. State per parameter, made at its first step in PyTorch's order: a float32 `step`
    and a float32 `mu_product` (0-d cpu tensors), `exp_avg` and `exp_avg_sq` (its size).

    Single-tensor allocates per parameter `exp_avg_sq.div(bias_correction2)` and its `sqrt()`
    (the first freed at once); foreach the square roots of a whole group at once."""

    def __init__(
        self,
        params,
        lr: float = 2e-3,
        betas=(0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        momentum_decay: float = 4e-3,
        decoupled_weight_decay: bool = False,
        *,
        foreach: bool | None = None,
        maximize: bool = False,
        capturable: bool = False,
        differentiable: bool = False,
    ):
        check_lr_eps_betas(lr, eps, betas, weight_decay)
        if not 0.0 <= momentum_decay:
            raise ValueError(f"Invalid momentum_decay value: {momentum_decay}")
        defaults = dict(
            lr=lr,
            betas=tuple(betas),
            eps=eps,
            weight_decay=weight_decay,
            momentum_decay=momentum_decay,
            decoupled_weight_decay=decoupled_weight_decay,
            maximize=maximize,
            foreach=foreach,
            capturable=capturable,
            differentiable=differentiable,
        )
        super().__init__(params, defaults)
        self._check_flags(foreach, None, differentiable, capturable)

    def _init_state(self, param) -> dict:
        state = self.state[param]
        if not state:
            from engine.creation import zeros_like

            with self._state_context():
                state["step"] = tensor(0.0, dtype=dtypes.float32)
                state["mu_product"] = tensor(1.0, dtype=dtypes.float32)
                state["exp_avg"] = zeros_like(param)
                state["exp_avg_sq"] = zeros_like(param)
        return state

    @no_grad()
    def step(self, closure=None):
        return self._step_groups(closure, lambda p, group: self._init_state(p))

    @staticmethod
    def _single(group, params, states) -> None:
        """torch.optim.nadam._single_tensor_nadam."""
        lr, eps, weight_decay = number(group["lr"]), group["eps"], group["weight_decay"]
        beta1, beta2 = group["betas"]
        momentum_decay = group["momentum_decay"]
        for param, state in zip(params, states, strict=True):
            grad = param.grad if not group["maximize"] else -param.grad
            exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
            mu_product, step_t = state["mu_product"], state["step"]
            step_t += 1
            step = float(step_t.item())
            bias_correction2 = 1 - beta2**step
            if weight_decay != 0:
                if group["decoupled_weight_decay"]:
                    param.mul_(1 - lr * weight_decay)
                else:
                    grad = grad.add(param, alpha=weight_decay)
            mu = beta1 * (1.0 - 0.5 * (0.96 ** (step * momentum_decay)))
            mu_next = beta1 * (1.0 - 0.5 * (0.96 ** ((step + 1) * momentum_decay)))
            mu_product *= mu
            exp_avg.lerp_(grad, 1 - beta1)
            exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
            denom = exp_avg_sq.div(bias_correction2).sqrt()
            mu_product_value = float(mu_product.item())
            mu_product_next = mu_product_value * mu_next
            denom.add_(eps)
            param.addcdiv_(grad, denom, value=(-lr * (1.0 - mu) / (1.0 - mu_product_value)))
            param.addcdiv_(exp_avg, denom, value=(-lr * mu_next) / (1.0 - mu_product_next))

    @staticmethod
    def _foreach(group, params, states) -> None:
        """torch.optim.nadam._multi_tensor_nadam (engine.optim.foreach)."""
        lr, eps, weight_decay = number(group["lr"]), group["eps"], group["weight_decay"]
        beta1, beta2 = group["betas"]
        momentum_decay, decoupled = group["momentum_decay"], group["decoupled_weight_decay"]
        for grouped_params, grouped_states in by_device_and_dtype(params, states):
            grouped_grads = [p.grad for p in grouped_params]
            grouped_exp_avgs = [s["exp_avg"] for s in grouped_states]
            grouped_exp_avg_sqs = [s["exp_avg_sq"] for s in grouped_states]
            grouped_mu_products = [s["mu_product"] for s in grouped_states]
            grouped_state_steps = [s["step"] for s in grouped_states]
            grouped_grads = foreach.gradients(
                grouped_params,
                grouped_grads,
                grouped_state_steps,
                maximize=group["maximize"],
                weight_decay=0 if decoupled else weight_decay,
            )
            if decoupled and weight_decay != 0:
                foreach.mul_(grouped_params, 1 - lr * weight_decay)
            foreach.lerp_(grouped_exp_avgs, grouped_grads, 1 - beta1)
            foreach.mul_(grouped_exp_avg_sqs, beta2)
            foreach.addcmul_(grouped_exp_avg_sqs, grouped_grads, grouped_grads, 1 - beta2)
            exp_avg_sq_sqrt = foreach.sqrt(grouped_exp_avg_sqs)
            counts = [float(s.item()) for s in grouped_state_steps]
            bias_correction_sqrt = [(1 - beta2**c) ** 0.5 for c in counts]
            mus = [beta1 * (1.0 - 0.5 * (0.96 ** (c * momentum_decay))) for c in counts]
            mu_nexts = [beta1 * (1.0 - 0.5 * (0.96 ** ((c + 1) * momentum_decay))) for c in counts]
            foreach.mul_(grouped_mu_products, mus)
            foreach.div_(exp_avg_sq_sqrt, bias_correction_sqrt)
            foreach.add_(exp_avg_sq_sqrt, eps)
            products = [float(m.item()) for m in grouped_mu_products]
            step_size_grads = [
                (lr * (1.0 - mu) / (1.0 - mp)) * -1 for mp, mu in zip(products, mus, strict=True)
            ]
            step_size_expavg = [
                (lr * mu_next / (1.0 - mp * mu_next)) * -1
                for mp, mu_next in zip(products, mu_nexts, strict=True)
            ]
            foreach.addcdiv_(grouped_params, grouped_grads, exp_avg_sq_sqrt, step_size_grads)
            foreach.addcdiv_(grouped_params, grouped_exp_avgs, exp_avg_sq_sqrt, step_size_expavg)
