"""Selecting by a mask or by indices: nonzero (as_tuple), argwhere, masked_select,
take_along_dim.

nonzero's result has one row per true element, so its size comes from the values: on meta,
where there are none, nonzero and masked_select refuse (torch's meta kernels refuse too).
masked_select allocates what torch's CPU kernel does: the mask's count (an int64 copy of the
mask, summed), the result, and, off its serial path, an int64 copy of the mask and its prefix
sum. Its backward is torch's masked_select_backward: zeros of the broadcast shape with the
gradient scattered in (masked_scatter_), summed back to the input's shape when broadcast.
"""

from __future__ import annotations

import math

import numpy as np

from engine import dtypes, kernels
from engine.autograd.function import Function, specialised_apply
from engine.creation import tensor
from engine.ops.common import infer_size as _infer_size
from engine.ops.common import sum_to
from engine.ops.registry import register
from engine.tensor import Tensor, _wrap_dim

_GRAIN_SIZE = 32768  # at::internal::GRAIN_SIZE


def _need_values(t: Tensor, opname: str) -> None:
    if t._device.type == "meta":
        raise NotImplementedError(
            f"{opname}: the result's size depends on the values, which a meta tensor does not have"
        )


class Nonzero(Function):
    """The [n, ndim] int64 coordinates of the nonzero elements, in row-major order."""

    differentiable = False
    apply = specialised_apply(1)  # one tensor argument

    def forward(self, x, out=None):
        _need_values(x, "nonzero")
        xp = kernels.xp_of(x)
        xd = x._data
        coords = xp.nonzero(xd) if xd.ndim else xp.nonzero(xd.reshape(1))[:0]
        n = int(coords[0].size) if xd.ndim else int(bool(xd))
        y = kernels.empty((n, xd.ndim), dtypes.int64, x._device)
        for k, c in enumerate(coords):
            y._data[:, k] = c
        return y


def nonzero(input, *, out=None, as_tuple=False):
    """Coordinates of the nonzero elements: [n, ndim] int64, or one 1-D tensor per dim."""
    y = Nonzero.apply(input, out=None, op="nonzero")
    if out is not None:
        raise NotImplementedError("nonzero: out= is not supported")
    if not as_tuple:
        return y
    if not input.ndim:  # torch: a 0-d input counts as a 1-element vector
        return (kernels.zeros((y.shape[0],), dtypes.int64, input._device),)
    return y.unbind(1)


def argwhere(input):
    """torch.argwhere: nonzero(input)."""
    return Nonzero.apply(input, out=None, op="argwhere")


# ---------------------------------------------------------------------------------------------
# masked_select
# ---------------------------------------------------------------------------------------------
class MaskedSelect(Function):
    """input[mask] as a 1-D tensor (mask bool, broadcast with input)."""

    apply = specialised_apply(2)  # input, mask

    def to_save(self, tensors):
        return (1,)  # the mask

    def forward(self, x, mask, out=None):
        if mask._dtype is not dtypes.bool_:
            raise RuntimeError("masked_select: expected BoolTensor for mask")
        shape = _infer_size(mask.shape, x.shape)
        self.in_shape = x.shape
        _need_values(x, "masked_select")
        xp = kernels.xp_of(x)
        m = xp.broadcast_to(mask._data, shape)
        copy = kernels.empty(shape, dtypes.int64, x._device)  # mask.sum(): its int64 copy
        del copy
        k = int(m.sum())
        y = kernels.empty((k,), x._dtype, x._device)
        serial = (
            (math.prod(shape) < _GRAIN_SIZE or kernels.get_num_threads() == 1)
            and x.shape == shape
            and mask.shape == shape
            and x.is_contiguous()
            and mask.is_contiguous()
        )
        buffers = (
            ()
            if serial
            else (
                kernels.empty(shape, dtypes.int64, x._device),  # the mask as int64
                kernels.empty(shape, dtypes.int64, x._device),  # its prefix sum
            )
        )
        y._data[...] = xp.broadcast_to(x._data, shape)[m]
        del buffers
        return y

    def backward(self, g, *_):
        (mask,) = self.saved_tensors
        shape = _infer_size(self.in_shape, mask.shape)
        result = kernels.zeros(shape, g._dtype, g._device)
        if g._device.type != "meta":
            xp = kernels.xp_of(g)
            m = xp.broadcast_to(mask._data, shape)
            result._data[m] = g._data
        return (sum_to(result, self.in_shape), None)

    def name(self):
        return "MaskedSelectBackward0"


def masked_select(input, mask, *, out=None):
    """The elements of input where mask (bool, broadcast) is True, as a 1-D tensor."""
    if out is not None:
        raise NotImplementedError("masked_select: out= is not supported")
    return MaskedSelect.apply(input, mask, op="masked_select")


# ---------------------------------------------------------------------------------------------
# take_along_dim
# ---------------------------------------------------------------------------------------------
def take_along_dim(input, indices, dim=None, *, out=None):
    """torch's composite: input and indices broadcast (but along dim; the index copied), then
    gather; without dim the flattened input gathered at the flattened indices."""
    if indices._dtype not in (dtypes.int64, dtypes.int32):
        raise RuntimeError("gather(): Expected dtype int32/int64 for index")
    if out is not None:
        raise NotImplementedError("take_along_dim: out= is not supported")
    if dim is None:
        return input.view(-1).gather(0, indices.view(-1))
    if input.ndim != indices.ndim:
        raise RuntimeError(
            "torch.take_along_dim(): input and indices should have the same number of "
            f"dimensions, but got {input.ndim} dimensions for input, and {indices.ndim} "
            "dimensions for indices"
        )
    d = _wrap_dim(dim, input.ndim)
    self_sizes = list(input.shape)
    self_sizes[d] = indices.shape[d]
    broadcast = list(_infer_size(tuple(self_sizes), indices.shape))
    idx = indices.expand(*broadcast).clone()  # torch's helper hands gather a copy of the index
    broadcast[d] = input.shape[d]
    src = input.expand(*broadcast)
    return src.gather(d, idx)


# ---------------------------------------------------------------------------------------------
# bincount, histc (counts: no gradient)
# ---------------------------------------------------------------------------------------------
def bincount(input, weights=None, minlength=0):
    """Counts of each value of a 1-D non-negative integer tensor (or sums of their weights):
    [max(input) + 1] at least minlength long, int64 (the weights' float dtype, float64 for others),
    the weights added in the input's order, in their dtype (as torch's cpu kernel)."""
    if not isinstance(input, Tensor):
        raise TypeError(f"bincount(): argument 'input' must be Tensor, not {type(input).__name__}")
    if input._dtype.is_floating_point or input._dtype is dtypes.bool_:
        raise NotImplementedError(
            f"\"bincount_cpu\" not implemented for '{input._dtype.scalar_name}'"
        )
    _need_values(input, "bincount")
    if minlength < 0:
        raise RuntimeError("minlength should be >= 0")
    x = kernels.host(input._data)
    if input.ndim != 1 or (x.size and int(x.min()) < 0):
        raise RuntimeError("bincount only supports 1-d non-negative integral inputs.")
    if weights is not None and (weights.ndim != 1 or weights.shape[0] != input.shape[0]):
        raise RuntimeError("weights should be 1-d and have the same length as input")
    n = max(minlength, int(x.max()) + 1 if x.size else 0)
    if weights is None:
        dt, ones = dtypes.int64, 1
    else:
        dt = weights._dtype if weights._dtype.is_floating_point else dtypes.float64
        ones = kernels.host(weights._data).astype(dt.np, copy=False)
    counts = np.zeros(n, dt.np)
    np.add.at(counts, x, ones)
    return tensor(counts, dtype=dt, device=input._device)


def histc(input, bins=100, min=0, max=0, *, out=None):  # noqa: A002 - torch's names
    """A histogram of a float tensor's values in `bins` equal bins over [min, max] (the data's
    range when min == max, widened by 1 each side when that is one value); values outside (NaN
    too) are left out, the right edge falls in the last bin. A value's bin is torch's cpu kernel's:
    (x - min) * bins / (max - min) in the input's dtype, truncated. No gradient (torch has none)."""
    if not input._dtype.is_floating_point:
        raise NotImplementedError(
            f"\"histogram_cpu\" not implemented for '{input._dtype.scalar_name}'"
        )
    if bins <= 0:
        raise RuntimeError(f"torch.histogram(): bins must be > 0, but got {bins} for dimension 0")
    if out is not None:
        raise NotImplementedError("histc: out= is not supported")
    _need_values(input, "histc")
    x = kernels.host(input._data).reshape(-1)
    t = x.dtype.type
    lo, hi = float(min), float(max)
    if lo == hi and x.size:
        lo, hi = float(x.min()), float(x.max())
    if not (math.isfinite(lo) and math.isfinite(hi)):
        raise RuntimeError(f"torch.histc: range of [{lo}, {hi}] is not finite")
    if lo == hi:
        lo, hi = lo - 1, hi + 1
    if lo > hi:
        raise RuntimeError("torch.histc: max must be larger than min")
    left, right = t(lo), t(hi)
    inside = x[(x >= left) & (x <= right)]
    pos = ((inside - left) * t(bins) / (right - left)).astype(np.int64)
    pos[pos == bins] = bins - 1
    counts = np.bincount(pos, minlength=bins)
    return tensor(counts, dtype=input._dtype, device=input._device)


# ---------------------------------------------------------------------------------------------
# isin, searchsorted, bucketize (bool / index results: no gradient)
# ---------------------------------------------------------------------------------------------
def _values_of(x, opname: str):
    """(array, device, is_tensor) of a tensor or a Python number."""
    if isinstance(x, Tensor):
        _need_values(x, opname)
        return kernels.host(x._data), x._device, True
    return np.asarray(x), None, False


def isin(elements, test_elements, *, assume_unique=False, invert=False):
    """Whether each element is among test_elements (NaN is among nothing), as a bool tensor of
    elements' shape; a number as elements gives a 0-d tensor."""
    a, dev_a, _ = _values_of(elements, "isin")
    b, dev_b, _ = _values_of(test_elements, "isin")
    return tensor(np.isin(a, b, invert=invert), dtype=dtypes.bool_, device=dev_a or dev_b)


def searchsorted(
    sorted_sequence, input, *, out_int32=False, right=False, side=None, sorter=None, out=None
):
    """Where each value of input would go in sorted_sequence to keep it sorted (its innermost
    dim; the leading dims match input's): the first such place, or the last with right=True or
    side='right'. int64, int32 with out_int32."""
    if side is not None:
        if side not in ("left", "right"):
            raise RuntimeError(
                f"torch.searchsorted(): side can only be 'left' or 'right' but got {side}"
            )
        if right and side == "left":
            raise RuntimeError(
                "torch.searchsorted(): side and right can't be set to opposites, got side of "
                "left while right was True"
            )
        right = side == "right"
    if out is not None:
        raise NotImplementedError("searchsorted: out= is not supported")
    seq, dev, _ = _values_of(sorted_sequence, "searchsorted")
    vals, _, is_tensor = _values_of(input, "searchsorted")
    if sorter is not None:
        seq = np.take_along_axis(seq, kernels.host(sorter._data), axis=-1)
    how = "right" if right else "left"
    if seq.ndim <= 1:
        idx = np.searchsorted(seq, vals, side=how)
    else:
        if not is_tensor or vals.shape[:-1] != seq.shape[:-1]:
            raise RuntimeError(
                "torch.searchsorted(): boundaries tensor should be 1 dimension or the first N-1 "
                "dimensions of boundaries tensor and input value tensor must match, but we got "
                f"boundaries tensor {list(seq.shape)} and input value tensor {list(vals.shape)}"
            )
        lead = seq.reshape(-1, seq.shape[-1])
        v = vals.reshape(lead.shape[0], -1)
        idx = np.stack([np.searchsorted(r, w, side=how) for r, w in zip(lead, v, strict=True)])
        idx = idx.reshape(vals.shape)
    return tensor(idx, dtype=dtypes.int32 if out_int32 else dtypes.int64, device=dev)


def bucketize(input, boundaries, *, out_int32=False, right=False, out=None):
    """The bucket of each value among 1-D boundaries: i with boundaries[i-1] < x <= boundaries[i]
    (boundaries[i-1] <= x < boundaries[i] with right=True)."""
    if isinstance(boundaries, Tensor) and boundaries.ndim != 1:
        raise RuntimeError(f"boundaries tensor must be 1 dimension, but got dim({boundaries.ndim})")
    return searchsorted(boundaries, input, out_int32=out_int32, right=right, out=out)


register("isin", isin)
register("searchsorted", searchsorted)
register("bucketize", bucketize)
register("nonzero", nonzero, method=True)
register("bincount", bincount, method=True)
register("histc", histc, method=True)
register("argwhere", argwhere, method=True)
register("masked_select", masked_select, method=True)
register("take_along_dim", take_along_dim, method=True)
