"""F.max_unpool3d: max pooling's partial inverse over volumes, as torch's native max_unpool3d
(the 1-D/2-D forms are in unpool.py). Forward makes the zero-filled output and writes each value
at its index; the node keeps the indices (not the input); backward gathers the gradient at the
indices (torch's max_pool_double_backward): one input-sized block (MaxUnpool3DBackward0)."""

from __future__ import annotations

import math

from engine import dtypes, kernels
from engine.autograd.function import Function
from engine.ops.nn.common import _live
from engine.ops.nn.unpool import _output_size, _tuple, gather_planes


class MaxUnpool3d(Function):
    def forward(self, x, indices, out=None, output_size=(), stride=()):
        # torch's max_unpooling3d_shape_check, in its order, then the dtype dispatch
        if indices._dtype is not dtypes.int64:
            raise RuntimeError("elements in indices should be type int64")
        if x.ndim not in (4, 5):
            raise RuntimeError(
                "Input to max_unpooling3d should be a 4d or 5d Tensor, but got a tensor with "
                f"{x.ndim} dimensions."
            )
        if tuple(indices.shape) != tuple(x.shape):
            raise RuntimeError(
                "Expected shape of indices to be same as that of the input tensor "
                f"({list(x.shape)}) but got indices tensor with shape: {list(indices.shape)}"
            )
        for d in range(1, x.ndim):
            if x.shape[d] == 0:
                raise RuntimeError(
                    "max_unpooling3d_forward_out_cpu(): Expected input to have non-zero size for "
                    f"non-batch dimensions, but got {list(x.shape)} with dimension {d} being "
                    "empty."
                )
        if not all(s > 0 for s in stride):
            raise RuntimeError(
                f"strides should be greater than zero, but got stride: {list(stride)}"
            )
        if not x._dtype.is_floating_point:
            kind = x._dtype.scalar_name
            raise NotImplementedError(f"\"max_unpool3d\" not implemented for '{kind}'")
        od, oh, ow = output_size
        self.x_shape = tuple(x.shape)
        planes = math.prod(x.shape[:-3])
        saved = indices
        # torch's kernel reads contiguous copies of a strided input and indices (made before
        # the output, freed when it returns)
        x = x if x.is_contiguous() else kernels.copy_new(x)
        indices = indices if indices.is_contiguous() else kernels.copy_new(indices)
        y = kernels.zeros(tuple(x.shape[:-3]) + (od, oh, ow), x._dtype, x._device)
        if _live(x._device) and planes and x.numel():
            xp = kernels.xp_of(x)
            flat_idx = indices._data.reshape(planes, -1)
            invalid = (flat_idx < 0) | (flat_idx >= od * oh * ow)
            if invalid.any():  # (the first in scan order; torch's names one its threads meet)
                bad = int(flat_idx[invalid][0])
                raise RuntimeError(
                    f"Found an invalid max index: {bad} (output volumes are of size {od}x{oh}x{ow})"
                )
            yd = y._data.reshape(planes, od * oh * ow)
            xp.put_along_axis(yd, flat_idx, x._data.reshape(planes, -1), axis=1)
        self.save(indices=saved)
        del indices, x  # (the copies, if any, go here: the indices given are what is kept)
        return y

    def to_save(self, tensors):
        return ()

    def backward(self, g):
        idx = self.kept("indices")
        planes = math.prod(self.x_shape[:-3])
        # torch's max_pool_double_backward: indices.view(..., -1) (strided indices are refused
        # there, in view's words), grad.contiguous().view(..., -1).gather(-1, that)
        idx.view(tuple(self.x_shape[:-3]) + (-1,))
        g = g if g.is_contiguous() else kernels.copy_new(g)
        return (gather_planes(g, idx, self.x_shape, planes), None)

    def name(self):
        return "MaxUnpool3DBackward0"


def max_unpool3d(input, indices, kernel_size, stride=None, padding=0, output_size=None):
    """Each value of input written at its index (from max_pool3d(return_indices=True)) in a
    zero-filled output."""
    kernel = _tuple(kernel_size, 3)
    stride = _tuple(stride if stride is not None else kernel_size, 3)
    size = _output_size(input, kernel, stride, _tuple(padding, 3), output_size)
    return MaxUnpool3d.apply(input, indices, op="max_unpool3d", output_size=size, stride=stride)
