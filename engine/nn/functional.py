"""engine.nn.functional: the functional forms of the layers (PyTorch's names and signatures).

Primitives live in engine/ops (engine/ops/nn/ for the nn ones); this module adds the composites,
which need no backward of their own: cross_entropy = nll_loss(log_softmax(x)), label smoothing,
class-probability targets.
"""

from __future__ import annotations

from engine.ops import _ns as _op_table
from engine.ops.activations import FUNCTIONAL as _ACTIVATIONS
from engine.ops.nn import (
    adaptive_avg_pool2d,
    avg_pool2d,
    batch_norm,
    conv2d,
    dropout,
    embedding,
    gelu,
    layer_norm,
    linear,
    max_pool2d,
    mse_loss,
    nll_loss,
)
from engine.ops.nn.loss import _legacy_reduction
from engine.tensor import Tensor

globals().update(_ACTIVATIONS)  # silu, mish, leaky_relu(_), elu(_), celu(_), selu(_), relu6, ...

_relu, _relu_ = _op_table["relu"], _op_table["relu_"]
_sigmoid, _tanh = _op_table["sigmoid"], _op_table["tanh"]
_softmax, _log_softmax = _op_table["softmax"], _op_table["log_softmax"]


def relu(input: Tensor, inplace: bool = False) -> Tensor:
    """max(x, 0); inplace=True overwrites input (free: backward keeps the result, not the input)."""
    return _relu_(input) if inplace else _relu(input)


def relu_(input: Tensor) -> Tensor:
    return _relu_(input)


def sigmoid(input: Tensor) -> Tensor:
    return _sigmoid(input)


def tanh(input: Tensor) -> Tensor:
    return _tanh(input)


def _softmax_dim(ndim: int) -> int:
    # PyTorch's implicit choice (deprecated there, kept for the same results)
    return 0 if ndim in (0, 1, 3) else 1


def softmax(input: Tensor, dim: int | None = None, _stacklevel: int = 3, dtype=None) -> Tensor:
    return _softmax(input, _softmax_dim(input.ndim) if dim is None else dim, dtype=dtype)


def log_softmax(input: Tensor, dim: int | None = None, _stacklevel: int = 3, dtype=None) -> Tensor:
    return _log_softmax(input, _softmax_dim(input.ndim) if dim is None else dim, dtype=dtype)


def cross_entropy(
    input: Tensor,
    target: Tensor,
    weight: Tensor | None = None,
    size_average=None,
    ignore_index: int = -100,
    reduce=None,
    reduction: str = "mean",
    label_smoothing: float = 0.0,
) -> Tensor:
    """Cross-entropy of logits `input` [N, C, *] against class indices or class probabilities."""
    reduction = _legacy_reduction(size_average, reduce, reduction)
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"label_smoothing must be between 0.0 and 1.0. Got: {label_smoothing}")
    class_dim = 1 if input.ndim >= 2 else 0
    n_classes = input.shape[class_dim]
    logp = log_softmax(input, class_dim)
    wshape = [1] * input.ndim
    wshape[class_dim] = n_classes
    if target.is_floating_point():
        if target.shape != input.shape:
            raise RuntimeError(
                f"Expected target size {list(input.shape)}, got {list(target.shape)}"
            )
        if label_smoothing > 0:
            target = target * (1 - label_smoothing) + label_smoothing / n_classes
        prod = logp * target
        if weight is not None:
            prod = prod * weight.reshape(wshape)
        loss = -prod.sum(class_dim)
        if reduction == "none":
            return loss
        if reduction == "sum":
            return loss.sum()
        return loss.sum() / (input.numel() / n_classes)
    nll = nll_loss(logp, target, weight, ignore_index=ignore_index, reduction=reduction)
    if label_smoothing <= 0:
        return nll
    # PyTorch: (1 - eps) * nll + eps/C * (sum over classes of -logp, weighted, ignoring ignore_index)
    smooth = (
        -(logp * weight.reshape(wshape)).sum(class_dim)
        if weight is not None
        else -logp.sum(class_dim)
    )
    ignored = target == ignore_index
    smooth = smooth.masked_fill(ignored, 0.0)
    if reduction == "sum":
        smooth = smooth.sum()
    elif reduction == "mean":
        if weight is None:
            smooth = smooth.sum() / (~ignored).sum()
        else:
            picked = weight.index_select(0, target.masked_fill(ignored, 0).reshape(-1))
            smooth = smooth.sum() / (picked * (~ignored).reshape(-1)).sum()
    return nll * (1 - label_smoothing) + smooth * (label_smoothing / n_classes)


__all__ = [
    "adaptive_avg_pool2d",
    "avg_pool2d",
    "batch_norm",
    "conv2d",
    "cross_entropy",
    "dropout",
    "embedding",
    "gelu",
    "layer_norm",
    "linear",
    "log_softmax",
    "max_pool2d",
    "mse_loss",
    "nll_loss",
    "relu",
    "relu_",
    "sigmoid",
    "softmax",
    "tanh",
    *sorted(_ACTIVATIONS),
]
