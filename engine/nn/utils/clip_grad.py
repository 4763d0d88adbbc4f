"""clip_grad_norm_ and clip_grad_value_ (torch.nn.utils.clip_grad), in place under no_grad.

Memory as PyTorch's foreach path: one 0-d norm per gradient, their stack, the total norm and the
clip coefficient (a few bytes each); the gradients are scaled or clamped in place. The per-element
work of a norm is done in bounded scratch (PyTorch's fused norm keeps it in registers).
"""

from __future__ import annotations

import math

import numpy as np

from engine.autograd.grad_mode import no_grad
from engine.tensor import Tensor


def _grads(parameters) -> list[Tensor]:
    if isinstance(parameters, Tensor):
        parameters = [parameters]
    return [p.grad for p in parameters if p.grad is not None]


def _scalar(value, like: Tensor) -> Tensor:
    from engine.creation import empty

    t = empty((), dtype=like._dtype, device=like._device)
    if like._device.type != "meta":
        t._data[...] = value
    return t


def _norm_value(g: Tensor, p: float) -> float:
    """||g||_p of a gradient's values (numpy/cupy), without a full-size charged temporary."""
    arr = g._data.reshape(-1) if g._data.flags.c_contiguous else g._data.ravel()
    if p == math.inf:
        return float(abs(arr).max()) if arr.size else 0.0
    if p == -math.inf:
        return float(abs(arr).min()) if arr.size else 0.0
    if p == 2:
        a64 = arr.astype(np.float64, copy=False)
        return float(math.sqrt(float(a64 @ a64)))
    if p == 0:
        return float((arr != 0).sum())
    return float((abs(arr.astype(np.float64)) ** p).sum() ** (1.0 / p))


def _norm(g: Tensor, p: float) -> Tensor:
    out = _scalar(0.0, g)
    if g._device.type != "meta":
        out._data[...] = _norm_value(g, p)
    return out


def get_total_norm(tensors, norm_type=2.0, error_if_nonfinite=False, foreach=None) -> Tensor:
    """The norm of the norms of `tensors` (each a gradient), as a 0-d tensor."""
    norm_type = float(norm_type)
    if isinstance(tensors, Tensor):
        tensors = [tensors]
    tensors = list(tensors)
    if not tensors:
        from engine.creation import tensor

        return tensor(0.0)
    from engine.creation import empty

    with no_grad():
        norms = [_norm(g, norm_type) for g in tensors]
        # torch.stack(norms): one 1-d buffer, then the norm of it
        stacked = empty(len(norms), dtype=tensors[0]._dtype, device=tensors[0]._device)
        if stacked._device.type != "meta":
            for i, n in enumerate(norms):
                stacked._data[i] = n._data
        del norms
        total = _norm(stacked, norm_type)
        del stacked
    if error_if_nonfinite and total._device.type != "meta":
        value = float(total._data)
        if math.isnan(value) or math.isinf(value):
            raise RuntimeError(
                f"The total norm of order {norm_type} for gradients from `parameters` is "
                "non-finite, so it cannot be clipped. To disable this error and scale the "
                "gradients by the non-finite norm anyway, set `error_if_nonfinite=False`"
            )
    return total


def clip_grad_norm_(
    parameters, max_norm, norm_type=2.0, error_if_nonfinite=False, foreach=None
) -> Tensor:
    """Scale the gradients in place so that their total norm is at most max_norm.

    Returns the total norm before clipping (a 0-d tensor), like PyTorch.
    """
    grads = _grads(parameters)
    if not grads:
        from engine.creation import tensor

        return tensor(0.0)
    total = get_total_norm(grads, norm_type, error_if_nonfinite, foreach)
    clip_grads_with_norm_(parameters, max_norm, total, foreach)
    return total


def clip_grads_with_norm_(parameters, max_norm, total_norm, foreach=None) -> None:
    """Scale the gradients in place by min(max_norm / (total_norm + 1e-6), 1) (clip_grad_norm_
    after get_total_norm, as torch splits it)."""
    grads = _grads(parameters)
    if not grads:
        return
    with no_grad():
        # clip_coef = max_norm / (total + 1e-6); clamp(max=1); grads *= clip_coef
        coef = _scalar(0.0, total_norm)
        if coef._device.type != "meta":
            coef._data[...] = min(float(max_norm) / (float(total_norm._data) + 1e-6), 1.0)
        for g in grads:
            g.mul_(coef.to(g._device) if g._device != coef._device else coef)
        del coef


def clip_grad_value_(parameters, clip_value, foreach=None) -> None:
    """Clamp every gradient in place to [-clip_value, clip_value]."""
    clip_value = float(clip_value)
    with no_grad():
        for g in _grads(parameters):
            g.clamp_(-clip_value, clip_value)


__all__ = ["clip_grad_norm_", "clip_grad_value_", "clip_grads_with_norm_", "get_total_norm"]
