"""F.linear_cross_entropy (torch 2.13): linear then cross_entropy, and LinearCrossEntropyOptions.

The reference path (options=None) is torch's own composite: linear(input, W, b) (W and b
flattened for a K-dimensional loss), the logits reshaped to (*N, C, *out_features), then
cross_entropy; it allocates exactly what those two allocate, forward and backward.

torch's chunked path (options given) is a Python custom op that precomputes the gradients in
forward over batch chunks; it is not implemented here (NotImplementedError), see _chunked.
"""

from __future__ import annotations

import dataclasses
import math
import warnings

_AUTO_FALLBACK = ("compact", "aspect_ratio:2")
_AUTO_DEFAULTS = {  # (device type, dtype name) -> (acc_policy, chunking_method), as torch's
    ("cuda", "bfloat16"): ("compact", "aspect_ratio:2"),
    ("cuda", "float16"): ("compact", "aspect_ratio:2"),
    ("cpu", "bfloat16"): ("accurate", "aspect_ratio"),
    ("cpu", "float16"): ("accurate", "aspect_ratio"),
}
_ACC_DTYPES = ("float16", "bfloat16", "float32", "float64")


def _dtype_name(dtype) -> str:
    return str(dtype).removeprefix("engine.").removeprefix("torch.")


@dataclasses.dataclass(slots=True, frozen=True)
class LinearCrossEntropyOptions:
    """torch.nn.LinearCrossEntropyOptions: the chunking strategy of linear_cross_entropy's
    chunked path (validated as torch validates it)."""

    allow_retain_graph: bool = False
    batch_chunk_size: int | None = None
    chunking_method: str | None = "auto"
    acc_policy: str = "auto"
    acc_dtype: object = None

    def __post_init__(self):
        if self.acc_policy not in {"auto", "accurate", "balanced", "compact"}:
            raise ValueError(f"invalid acc_policy: {self.acc_policy!r}")
        if self.chunking_method is not None and self.chunking_method != "auto":
            name, sep, factor = self.chunking_method.partition(":")
            if not sep:
                factor = "1"
            if not (name == "aspect_ratio" and factor.isdigit() and int(factor) > 0):
                raise ValueError(f"invalid chunking_method: {self.chunking_method!r}")
        if not (
            self.batch_chunk_size is None
            or (isinstance(self.batch_chunk_size, int) and self.batch_chunk_size > 0)
        ):
            raise ValueError(
                f"batch_chunk_size must be positive int or None, got {self.batch_chunk_size!r}"
            )
        if self.acc_dtype is not None and _dtype_name(self.acc_dtype) not in _ACC_DTYPES:
            raise ValueError(
                f"acc_dtype must be one of {{None, torch.float16, torch.bfloat16, "
                f"torch.float32, torch.float64}}, got {self.acc_dtype!r}. Pass "
                "acc_dtype=None to let the op pick automatically."
            )


def _check(input, linear_weight, target, linear_bias, ignore_index):
    if input.ndim < 1 or input.ndim > 2:
        raise RuntimeError(f"expected input with dimensionality 1 or 2, got {input.ndim}")
    if linear_weight.ndim < 2:
        raise RuntimeError(
            f"expected linear_weight with dimensionality at least 2, got {linear_weight.ndim}"
        )
    num_batches = tuple(input.shape[:-1])
    in_features = input.shape[-1]
    if in_features != linear_weight.shape[-1]:
        raise RuntimeError(
            "expected equal input and linear_weight last dimensions (in_features), "
            f"got {input.shape[-1]} and {linear_weight.shape[-1]}, respectively"
        )
    num_classes = linear_weight.shape[0]
    out_features = tuple(linear_weight.shape[1:-1])
    if linear_bias is not None and tuple(linear_bias.shape) != (num_classes, *out_features):
        raise RuntimeError(
            "expected linear_bias shape "
            f"{(num_classes, *out_features)}, got {tuple(linear_bias.shape)}"
        )
    if out_features and not num_batches:
        raise RuntimeError(
            f"K-dimensional loss defined by linear_weight shape {tuple(linear_weight.shape)} "
            f"requires batched input, (N, {in_features}), got unbatched"
            f" input with shape {tuple(input.shape)}"
        )
    logits_shape = (*num_batches, num_classes, *out_features)
    if tuple(target.shape) == logits_shape and ignore_index is not None:
        raise RuntimeError("ignore_index cannot be specified when target contains probabilities")
    return in_features, num_classes, out_features, logits_shape


def linear_cross_entropy(
    input,
    linear_weight,
    target,
    *,
    linear_bias=None,
    weight=None,
    reduction: str = "mean",
    ignore_index: int | None = None,
    label_smoothing: float = 0.0,
    options: LinearCrossEntropyOptions | None = None,
):
    """cross_entropy(linear(input, linear_weight, linear_bias), target, ...) (torch 2.13's
    F.linear_cross_entropy; options=None, the reference path, only)."""
    from engine.ops.nn.linear import linear
    from engine.ops.nn.loss import cross_entropy

    in_features, num_classes, out_features, logits_shape = _check(
        input, linear_weight, target, linear_bias, ignore_index
    )
    ignore_index = -100 if ignore_index is None else ignore_index
    if options is not None:
        chunked = (
            not out_features
            and reduction in {"mean", "sum", "none"}
            and label_smoothing == 0.0
            and _dtype_name(target.dtype) == "int64"
        )
        if not chunked:
            warnings.warn(
                "linear_cross_entropy: ``options`` ignored; chunked path needs "
                "reduction in {'mean','sum','none'}, label_smoothing == 0, target.dtype"
                " == int64, out_features == (). Got "
                f"reduction={reduction!r}, label_smoothing={label_smoothing}, "
                f"target.dtype=torch.{_dtype_name(target.dtype)}, "
                f"out_features={tuple(out_features)}, tracing=False, linear_bias.shape="
                f"{tuple(linear_bias.shape) if linear_bias is not None else None}.",
                stacklevel=2,
            )
        else:
            raise NotImplementedError(
                "linear_cross_entropy: the chunked path (options not None) is not supported "
                "by the engine; pass options=None (the reference path: linear then "
                "cross_entropy)"
            )
    if out_features:
        flat = math.prod(out_features, start=num_classes)
        linear_weight = linear_weight.reshape((flat, in_features))
        if linear_bias is not None:
            linear_bias = linear_bias.reshape(flat)
    logits = linear(input, linear_weight, linear_bias).reshape(logits_shape)
    return cross_entropy(
        logits,
        target,
        weight=weight,
        reduction=reduction,
        ignore_index=ignore_index,
        label_smoothing=label_smoothing,
    )
