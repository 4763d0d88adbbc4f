"""F.max_unpool1d / max_unpool2d and nn.MaxUnpool1d / MaxUnpool2d: max pooling's partial inverse,
as torch's native max_unpool2d (the 1-D form torch's composite: unsqueeze, the 2-D op,
squeeze). Forward makes the zero-filled output and writes each value at its index; the node keeps
the indices (not the input); backward gathers the gradient at the indices: one input-sized
block (MaxUnpool2DBackward0)."""

from __future__ import annotations

import math

from engine import dtypes, kernels
from engine.autograd.function import Function
from engine.ops.nn.common import _live


class MaxUnpool2d(Function):
    def forward(self, x, indices, out=None, output_size=()):
        if indices._dtype is not dtypes.int64:
            raise RuntimeError(
                f"elements in indices should be type int64 but got: {indices._dtype.scalar_name}"
            )
        if tuple(indices.shape) != tuple(x.shape):
            raise RuntimeError(
                "Expected shape of indices to be same as that of the input tensor "
                f"({list(x.shape)}) but got indices tensor with shape: {list(indices.shape)}"
            )
        if x.ndim not in (3, 4):
            raise RuntimeError(
                "Input to max_unpooling2d should be a 3d or 4d Tensor, but got a tensor with "
                f"{x.ndim} dimensions."
            )
        oh, ow = output_size
        self.x_shape = tuple(x.shape)
        planes = math.prod(x.shape[:-2])
        y = kernels.zeros(tuple(x.shape[:-2]) + (oh, ow), x._dtype, x._device)
        if _live(x._device):
            xp = kernels.xp_of(x)
            flat_idx = indices._data.reshape(planes, -1)
            invalid = (flat_idx < 0) | (flat_idx >= oh * ow)
            if invalid.any():  # (the first, in the order torch's kernel scans them)
                bad = int(flat_idx[invalid][0])
                raise RuntimeError(
                    f"Found an invalid max index: {bad} (output volumes are of size {oh}x{ow})"
                )
            yd = y._data.reshape(planes, oh * ow)
            xp.put_along_axis(yd, flat_idx, x._data.reshape(planes, -1), axis=1)
        self.save(indices=indices)
        return y

    def to_save(self, tensors):
        return ()

    def backward(self, g):
        idx = self.kept("indices")
        planes = math.prod(self.x_shape[:-2])
        return (gather_planes(g, idx, self.x_shape, planes), None)

    def name(self):
        return "MaxUnpool2DBackward0"


def gather_planes(g, idx, x_shape, planes):
    """max_unpool's backward: the input-shaped gradient, each element gathered from g at its
    index within its plane (grad.view(planes, -1).gather(-1, indices.view(planes, -1)))."""
    gx = kernels.empty(x_shape, g._dtype, g._device)
    if _live(g._device) and planes and gx.numel():
        xp = kernels.xp_of(g)
        g2 = g._data.reshape(planes, -1)
        gx._data[...] = xp.take_along_axis(g2, idx._data.reshape(planes, -1), axis=1).reshape(
            x_shape
        )
    return gx


def _tuple(v, n: int) -> tuple:
    return tuple(int(e) for e in v) if isinstance(v, (tuple, list)) else (int(v),) * n


def _output_size(input, kernel, stride, padding, output_size) -> tuple:
    """torch's _unpool_output_size (its words)."""
    k = len(kernel)
    default = [(input.shape[-k + d] - 1) * stride[d] + kernel[d] - 2 * padding[d] for d in range(k)]
    if output_size is None:
        return tuple(default)
    size = list(output_size)
    if len(size) == k + 2:
        size = size[2:]
    if len(size) != k:
        raise ValueError(
            f"output_size should be a sequence containing {k} or {k + 2} elements, but it has a "
            f"length of '{len(size)}'"
        )
    for d in range(k):
        lo, hi = default[d] - stride[d], default[d] + stride[d]
        if not lo < size[d] < hi:
            raise ValueError(
                f'invalid output_size "{output_size}" (dim {d} must be between {lo} and {hi})'
            )
    return tuple(int(s) for s in size)


def max_unpool2d(input, indices, kernel_size, stride=None, padding=0, output_size=None):
    """Each value of input written at its index (from max_pool2d(return_indices=True)) in a
    zero-filled output."""
    kernel = _tuple(kernel_size, 2)
    stride = _tuple(stride if stride is not None else kernel_size, 2)
    size = _output_size(input, kernel, stride, _tuple(padding, 2), output_size)
    return MaxUnpool2d.apply(input, indices, op="max_unpool2d", output_size=size)


def max_unpool1d(input, indices, kernel_size, stride=None, padding=0, output_size=None):
    """The 1-D form: torch's composite through max_unpool2d (unsqueeze, squeeze)."""
    kernel = _tuple(kernel_size, 1)
    stride = _tuple(stride if stride is not None else kernel_size, 1)
    size = _output_size(input, kernel, stride, _tuple(padding, 1), output_size)
    y = MaxUnpool2d.apply(
        input.unsqueeze(-1), indices.unsqueeze(-1), op="max_unpool2d", output_size=size + (1,)
    )
    return y.squeeze(-1)
