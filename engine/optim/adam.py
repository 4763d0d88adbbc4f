"""Adam and AdamW: PyTorch's single-tensor, foreach and fused updates, with their memory."""

from __future__ import annotations

from engine.allocator.tracked import tracking
from engine.autograd.grad_mode import no_grad
from engine.ops import _ns as _op_table
from engine.optim import foreach
from engine.optim.optimizer import (
    Optimizer,
    by_device_and_dtype,
    check_fused_param,
    implementation,
    number,
)
from engine.tensor import Tensor

_maximum = _op_table["maximum"]


class Adam(Optimizer):
    """Adam (Kingma & Ba). State per parameter, made at its first step: a float32 `step` counter,
    `exp_avg` and `exp_avg_sq` (each the parameter's size; `max_exp_avg_sq` too with amsgrad).

    Which update runs, and so what it allocates, is PyTorch's choice (foreach / fused, see
    engine.optim.optimizer.implementation): single-tensor (cpu's default) allocates one `denom`
    per parameter in turn, `(exp_avg_sq.sqrt() / sqrt(1 - beta2**t)).add_(eps)`; foreach
    (cuda's default) allocates the square roots of every exp_avg_sq of a (device, dtype) group
    at once (plus a copy of the gradients with maximize, or with weight_decay in Adam); fused
    allocates nothing and keeps its step counters on the parameter's device.
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
        foreach: bool | None = None,
        maximize: bool = False,
        capturable: bool = False,
        differentiable: bool = False,
        fused: bool | None = None,
        decoupled_weight_decay: bool | None = None,
    ):
        if isinstance(lr, Tensor):
            if foreach and not capturable:
                raise ValueError(
                    "lr as a Tensor is not supported for capturable=False and foreach=True"
                )
            if lr.numel() != 1:
                raise ValueError("Tensor lr must be 1-element")
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
            foreach=foreach,
            capturable=capturable,
            differentiable=differentiable,
            fused=fused,
            decoupled_weight_decay=decoupled,
        )
        super().__init__(params, defaults)
        self._check_flags(foreach, fused, differentiable, capturable)

    def _init_state(self, group, param, fused: bool) -> dict:
        if fused and not self.state[param]:
            check_fused_param(param)
        fields = ("exp_avg", "exp_avg_sq") + (("max_exp_avg_sq",) if group["amsgrad"] else ())
        return self._lazy_state(param, *fields, step_on_device=fused)

    @no_grad()
    def step(self, closure=None):
        loss = self._closure_loss(closure)
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            how = implementation(group, params)
            # all state first, as torch's _init_group
            states = [self._init_state(group, p, how == "fused") for p in params]
            if params:
                getattr(self, "_" + how)(group, params, states)
        return loss

    def _single(self, group, params, states, *, counted: bool = False) -> None:
        """torch.optim.adam._single_tensor_adam: one loop, as torch's, so a parameter's `denom`
        is still alive while the next one's is made. counted: the step counters are already
        advanced (the fused update runs this with its temporaries uncharged)."""
        lr, eps, weight_decay = number(group["lr"]), group["eps"], group["weight_decay"]
        beta1, beta2 = group["betas"]
        amsgrad, maximize, decoupled = (
            group["amsgrad"],
            group["maximize"],
            group["decoupled_weight_decay"],
        )
        for param, state in zip(params, states, strict=True):
            grad = param.grad if not maximize else -param.grad
            exp_avg, exp_avg_sq, step_t = state["exp_avg"], state["exp_avg_sq"], state["step"]
            if not counted:
                step_t += 1
            step = 1.0 if step_t.device.type == "meta" else float(step_t.item())
            if weight_decay != 0:
                if decoupled:
                    param.mul_(1 - lr * weight_decay)
                else:
                    grad = grad.add(param, alpha=weight_decay)
            exp_avg.lerp_(grad, 1 - beta1)
            exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
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

    def _fused(self, group, params, states) -> None:
        """torch.optim.adam._fused_adam: per (device, dtype) group the counters, then one kernel
        that reads and writes in place, allocating nothing."""
        for device_params, device_states in by_device_and_dtype(params, states):
            foreach.add_([s["step"] for s in device_states], 1)
            with tracking(False):  # the kernel's temporaries are registers
                self._single(group, device_params, device_states, counted=True)

    def _foreach(self, group, params, states) -> None:
        """torch.optim.adam._multi_tensor_adam, line for line (engine.optim.foreach)."""
        lr, eps, weight_decay = number(group["lr"]), group["eps"], group["weight_decay"]
        beta1, beta2 = group["betas"]
        maximize, amsgrad = group["maximize"], group["amsgrad"]
        exp_avg_sq_sqrt = None  # as torch's local: a group's list lives until the next replaces it
        for device_params, device_states in by_device_and_dtype(params, states):
            device_grads = [p.grad for p in device_params]
            device_exp_avgs = [s["exp_avg"] for s in device_states]
            device_exp_avg_sqs = [s["exp_avg_sq"] for s in device_states]
            device_state_steps = [s["step"] for s in device_states]
            decoupled = group["decoupled_weight_decay"]
            device_grads = foreach.gradients(
                device_params,
                device_grads,
                device_state_steps,
                maximize=maximize,
                weight_decay=0 if decoupled else weight_decay,
            )
            if decoupled and weight_decay != 0:
                foreach.mul_(device_params, 1 - lr * weight_decay)
            foreach.lerp_(device_exp_avgs, device_grads, 1 - beta1)
            foreach.mul_(device_exp_avg_sqs, beta2)
            foreach.addcmul_(device_exp_avg_sqs, device_grads, device_grads, 1 - beta2)
            del device_grads
            counts = [float(s.item()) for s in device_state_steps]
            step_size = [(lr / (1 - beta1**c)) * -1 for c in counts]
            bias_correction2_sqrt = [(1 - beta2**c) ** 0.5 for c in counts]
            if amsgrad:
                device_max_exp_avg_sqs = [s["max_exp_avg_sq"] for s in device_states]
                foreach.maximum_(device_max_exp_avg_sqs, device_exp_avg_sqs)
                exp_avg_sq_sqrt = foreach.sqrt(device_max_exp_avg_sqs)
            else:
                exp_avg_sq_sqrt = foreach.sqrt(device_exp_avg_sqs)
            foreach.div_(exp_avg_sq_sqrt, bias_correction2_sqrt)
            foreach.add_(exp_avg_sq_sqrt, eps)
            foreach.addcdiv_(device_params, device_exp_avgs, exp_avg_sq_sqrt, step_size)


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
        foreach: bool | None = None,
        maximize: bool = False,
        capturable: bool = False,
        differentiable: bool = False,
        fused: bool | None = None,
    ):
        super().__init__(
            params,
            lr,
            betas,
            eps,
            weight_decay,
            amsgrad,
            foreach=foreach,
            maximize=maximize,
            capturable=capturable,
            differentiable=differentiable,
            fused=fused,
            decoupled_weight_decay=True,
        )
