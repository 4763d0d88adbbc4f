"""torch.nn.functional's other names for existing ops: the `*_with_indices` forms of max and
adaptive max pooling (always the (output, indices) pair, `return_indices` ignored as in torch)
and the deprecated `upsample`, `upsample_nearest`, `upsample_bilinear` (interpolate; bilinear
with align_corners=True), each with torch's deprecation warning. They allocate exactly what the
op they name allocates."""

from __future__ import annotations

import warnings

from engine.ops.nn.pool import max_pool1d, max_pool2d
from engine.ops.nn.pool3d import (
    adaptive_max_pool1d,
    adaptive_max_pool2d,
    adaptive_max_pool3d,
    max_pool3d,
)
from engine.ops.nn.upsample import interpolate


def _with_indices(pool):
    def with_indices(
        input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
        return_indices=False,
    ):  # fmt: skip
        return pool(input, kernel_size, stride, padding, dilation, ceil_mode, return_indices=True)

    with_indices.__name__ = pool.__name__ + "_with_indices"
    with_indices.__doc__ = f"{pool.__name__}(..., return_indices=True): (output, indices)."
    return with_indices


def _adaptive_with_indices(pool):
    def with_indices(input, output_size, return_indices=False):
        return pool(input, output_size, return_indices=True)

    with_indices.__name__ = pool.__name__ + "_with_indices"
    with_indices.__doc__ = f"{pool.__name__}(..., return_indices=True): (output, indices)."
    return with_indices


max_pool1d_with_indices = _with_indices(max_pool1d)
max_pool2d_with_indices = _with_indices(max_pool2d)
max_pool3d_with_indices = _with_indices(max_pool3d)
adaptive_max_pool1d_with_indices = _adaptive_with_indices(adaptive_max_pool1d)
adaptive_max_pool2d_with_indices = _adaptive_with_indices(adaptive_max_pool2d)
adaptive_max_pool3d_with_indices = _adaptive_with_indices(adaptive_max_pool3d)


def _deprecated(name):
    warnings.warn(
        f"`nn.functional.{name}` is deprecated. Use `nn.functional.interpolate` instead.",
        stacklevel=3,
    )


def upsample(input, size=None, scale_factor=None, mode="nearest", align_corners=None):
    """Deprecated: interpolate(input, size, scale_factor, mode, align_corners)."""
    _deprecated("upsample")
    return interpolate(input, size, scale_factor, mode, align_corners)


def upsample_nearest(input, size=None, scale_factor=None):
    """Deprecated: interpolate(input, size, scale_factor, mode="nearest")."""
    _deprecated("upsample_nearest")
    return interpolate(input, size, scale_factor, mode="nearest")


def upsample_bilinear(input, size=None, scale_factor=None):
    """Deprecated: interpolate(input, size, scale_factor, mode="bilinear", align_corners=True)."""
    _deprecated("upsample_bilinear")
    return interpolate(input, size, scale_factor, mode="bilinear", align_corners=True)
