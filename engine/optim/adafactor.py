"""Adafactor (Shazeer & Stern): PyTorch's single-tensor and foreach updates, with their memory.

Its state is what makes it a memory-saver: a parameter of two or more dimensions keeps a factored
second moment, `row_var` (the shape with the last dimension 1) and `col_var` (the shape with the
next-to-last dimension 1), instead of one parameter-sized tensor; a vector keeps `variance`, its
size. The step materialises the full estimate anyway (`row_var @ col_var`), one parameter-sized
temporary per parameter in turn (single-tensor) or per (device, dtype, is-matrix) group at once
(foreach).
"""

from __future__ import annotations

import numpy as np

from engine.autograd.grad_mode import no_grad
from engine.creation import tensor
from engine.optim import foreach
from engine.optim.optimizer import Optimizer, by_device_and_dtype, number
from engine.tensor import Tensor

# torch.finfo(dtype).eps by dtype name (bfloat16 has no numpy type)
_EPS = {"bfloat16": 0.0078125}


def finfo_eps(dtype) -> float:
    """torch.finfo(dtype).eps."""
    return _EPS.get(dtype.name, None) or float(np.finfo(dtype.np).eps)


def _value(t) -> float:
    """A 0-d tensor's number; 1.0 on meta, which has shapes only (the update's scale factors
    change no shape)."""
    return 1.0 if t.device.type == "meta" else float(t.item())


def _clamp_min_(ts, value) -> None:
    """torch._foreach_clamp_min_ (no loop variable left holding the last tensor)."""
    for t in ts:
        t.clamp_(min=value)


def _rsqrt_(ts) -> None:
    """torch._foreach_rsqrt_."""
    for t in ts:
        t.rsqrt_()


class Adafactor(Optimizer):
    """Adafactor, as torch.optim.Adafactor. State per parameter, made at its first step: a float32
    `step` (a cpu tensor), then `row_var` and `col_var` (dim > 1) or `variance` (a vector)."""

    def __init__(
        self,
        params,
        lr: float = 1e-2,
        beta2_decay: float = -0.8,
        eps=(None, 1e-3),
        d: float = 1.0,
        weight_decay: float = 0.0,
        *,
        foreach: bool | None = None,
        maximize: bool = False,
    ):
        if isinstance(lr, Tensor) and lr.numel() != 1:
            raise ValueError("Tensor lr must be 1-element")
        if not 0.0 <= lr:
            raise ValueError(f"Learning rate should be >= 0 but is: {lr}")
        if not 0.0 >= beta2_decay:
            raise ValueError(f"beta2_decay should be <= 0 but is: {beta2_decay}")
        if eps[0] is not None and not 0.0 <= eps[0]:
            raise ValueError(f"epsilon1 should be >= 0 but is: {eps[0]}")
        if not 0.0 <= eps[1]:
            raise ValueError(f"epsilon2 should be >= 0 but is: {eps[1]}")
        if not 1.0 <= d:
            raise ValueError(f"Clipping threshold d should be >= 1 but is: {d}")
        if not 0.0 <= weight_decay:
            raise ValueError(f"weight_decay should be >= 0 but is: {weight_decay}")
        defaults = dict(
            lr=lr,
            beta2_decay=beta2_decay,
            eps=tuple(eps),
            d=d,
            weight_decay=weight_decay,
            foreach=foreach,
            maximize=maximize,
        )
        super().__init__(params, defaults)

    def _init_state(self, param) -> dict:
        state = self.state[param]
        if state:
            return state
        from engine import dtypes
        from engine.creation import zeros, zeros_like

        grad = param.grad
        with self._state_context():
            state["step"] = tensor(0.0, dtype=dtypes.float32)
            if grad.dim() > 1:
                row_shape = list(grad.shape)
                row_shape[-1] = 1
                state["row_var"] = zeros(row_shape, dtype=grad.dtype, device=grad.device)
                col_shape = list(grad.shape)
                col_shape[-2] = 1
                state["col_var"] = zeros(col_shape, dtype=grad.dtype, device=grad.device)
            else:
                state["variance"] = zeros_like(grad)
        return state

    @no_grad()
    def step(self, closure=None):
        return self._step_groups(closure, self._checked_state)

    def _checked_state(self, p, group):
        if p.is_complex():
            raise RuntimeError("Adafactor does not support complex parameters")
        return self._init_state(p)

    @staticmethod
    def _single(group, params, states) -> None:
        """torch.optim._adafactor._single_tensor_adafactor: as its loop, a parameter's temporaries
        live until the next parameter's replace them."""
        lr, beta2_decay, d = number(group["lr"]), group["beta2_decay"], group["d"]
        eps1, eps2 = group["eps"]
        weight_decay = group["weight_decay"]
        for param, state in zip(params, states, strict=True):
            grad = param.grad if not group["maximize"] else -param.grad
            step_t = state["step"]
            if eps1 is None:
                eps1 = finfo_eps(param.dtype)
            step_t += 1
            step_float = step_t.item()
            one_minus_beta2_t = step_float**beta2_decay
            rho_t = min(lr, 1 / (step_float**0.5))
            alpha = max(eps2, _value(param.norm(2)) / (param.numel() ** 0.5)) * rho_t
            if weight_decay != 0:
                param.mul_(1 - lr * weight_decay)
            if grad.dim() > 1:
                row_var, col_var = state["row_var"], state["col_var"]
                row_mean = grad.norm(dim=-1, keepdim=True).square_().div_(grad.size(-1))
                row_var.lerp_(row_mean, one_minus_beta2_t)
                col_mean = grad.norm(dim=-2, keepdim=True).square_().div_(grad.size(-2))
                col_var.lerp_(col_mean, one_minus_beta2_t)
                var_estimate = row_var @ col_var
                var_estimate.div_(row_var.mean(dim=-2, keepdim=True).clamp_(min=eps1))
            else:
                variance = state["variance"]
                grad_squared = grad * grad
                variance.lerp_(grad_squared, one_minus_beta2_t)
                var_estimate = variance.clone()
            update = var_estimate.clamp_(min=eps1 * eps1).rsqrt_()
            update.mul_(grad)
            denom = max(1.0, _value(update.norm(2)) / ((update.numel() ** 0.5) * d))
            param.add_(update, alpha=-alpha / denom)

    @staticmethod
    def _foreach(group, params, states) -> None:
        """torch.optim._adafactor._multi_tensor_adafactor: per (device, dtype) group, matrices
        and vectors apart (torch's _group_tensors_by_device_dtype_and_is_multidim)."""
        lr, beta2_decay, d = number(group["lr"]), group["beta2_decay"], group["d"]
        eps1, eps2 = group["eps"]
        weight_decay, maximize = group["weight_decay"], group["maximize"]
        groups = []
        for device_params, device_states in by_device_and_dtype(params, states):
            split: dict = {}
            for p, s in zip(device_params, device_states, strict=True):
                cut = split.setdefault(p.grad.dim() > 1, ([], []))
                cut[0].append(p)
                cut[1].append(s)
            groups += [(multidim, *lists) for multidim, lists in split.items()]
        for is_multidim, device_params, device_states in groups:
            device_grads = [p.grad for p in device_params]
            device_state_steps = [s["step"] for s in device_states]
            if eps1 is None:
                eps1 = finfo_eps(device_params[0].dtype)
            if maximize:
                device_grads = foreach.neg(device_grads)
            foreach.step_counters(device_state_steps)
            one_minus_beta2_ts = []
            rho_ts = []
            for s in device_state_steps:
                one_minus_beta2_ts.append(s.item() ** beta2_decay)
                rho_ts.append(min(lr, 1 / (s.item() ** 0.5)))
            alphas = [
                max(eps2, _value(p.norm(2)) / (p.numel() ** 0.5)) * r
                for p, r in zip(device_params, rho_ts, strict=True)
            ]
            if weight_decay != 0:
                foreach.mul_(device_params, 1 - lr * weight_decay)
            if is_multidim:
                device_row_vars = [s["row_var"] for s in device_states]
                device_col_vars = [s["col_var"] for s in device_states]
                row_means = [g.norm(dim=-1, keepdim=True) for g in device_grads]
                foreach.mul_(row_means, row_means)
                foreach.div_(row_means, [g.size(-1) for g in device_grads])
                foreach.lerp_(device_row_vars, row_means, one_minus_beta2_ts)
                del row_means
                col_means = [g.norm(dim=-2, keepdim=True) for g in device_grads]
                foreach.mul_(col_means, col_means)
                foreach.div_(col_means, [g.size(-2) for g in device_grads])
                foreach.lerp_(device_col_vars, col_means, one_minus_beta2_ts)
                del col_means
                var_estimates = [
                    r @ c for r, c in zip(device_row_vars, device_col_vars, strict=True)
                ]
                row_var_means = [r.mean(dim=-2, keepdim=True) for r in device_row_vars]
                _clamp_min_(row_var_means, eps1)
                foreach.div_(var_estimates, row_var_means)
                del row_var_means
            else:
                device_variances = [s["variance"] for s in device_states]
                grads_squared = foreach.mul(device_grads, device_grads)
                foreach.lerp_(device_variances, grads_squared, one_minus_beta2_ts)
                del grads_squared
                var_estimates = [v.clone() for v in device_variances]
            _clamp_min_(var_estimates, eps1 * eps1)
            _rsqrt_(var_estimates)
            foreach.mul_(var_estimates, device_grads)
            updates = var_estimates
            alphas = [
                -a / (max(1.0, _value(u.norm(2)) / ((u.numel() ** 0.5) * d)))
                for a, u in zip(alphas, updates, strict=True)
            ]
            foreach.mul_(updates, alphas)
            foreach.add_(device_params, updates)
