"""Smaller tensor methods torch has beside the core rows, part three: new_tensor /
new_empty_strided, narrow_copy (a copy, NarrowCopyBackward0), unsafe_chunk / unsafe_split /
unsafe_split_with_sizes (pieces sharing the input's memory without a view relation:
UnsafeSplitBackward0 / UnsafeSplitWithSizesBackward0), byte, and the layout object `strided`
(Tensor.layout; Tensor.is_cpu and Tensor.output_nr are properties of engine/tensor.py).
"""

from __future__ import annotations

import builtins

from engine import dtypes, kernels
from engine.autograd.function import Function
from engine.creation import _finish, _size
from engine.device import as_device
from engine.ops.nn.rnn import UnsafeSplit
from engine.ops.registry import register
from engine.tensor import Tensor, _wrap_dim
from engine.tensor import layout as _tensor_layout
from engine.tensor import strided as _tensor_strided

# ---------------------------------------------------------------------------------------------
# layout
# ---------------------------------------------------------------------------------------------
# (torch.layout and torch.strided live in engine/tensor.py, below the ops)
layout, strided = _tensor_layout, _tensor_strided


# ---------------------------------------------------------------------------------------------
# new_tensor / new_empty_strided (dtype and device default to the tensor's)
# ---------------------------------------------------------------------------------------------
def new_tensor(self, data, *, dtype=None, device=None, requires_grad=False):
    """A new tensor holding a copy of `data`, of this tensor's dtype and device unless given."""
    from engine.creation import tensor

    if isinstance(data, Tensor):
        data = data.detach()
    return tensor(
        data,
        dtype=dtype if dtype is not None else self._dtype,
        device=device if device is not None else self._device,
        requires_grad=requires_grad,
    )


def new_empty_strided(self, size, stride, *, dtype=None, device=None, requires_grad=False):
    """An uninitialised tensor of `size` laid out with `stride` (elements) on a storage just big
    enough for it (torch's computeStorageNbytes: 1 + sum((size - 1) * stride), 0 if empty)."""
    size, stride = _size((size,)), tuple(int(s) for s in stride)
    if len(size) != len(stride):
        raise RuntimeError(
            f"dimensionality of sizes ({len(size)}) must match dimensionality of strides "
            f"({len(stride)})"
        )
    dt = dtypes.from_any(dtype) if dtype is not None else self._dtype
    dev = as_device(device) if device is not None else self._device
    n = (
        0
        if 0 in size
        else 1 + builtins.sum((s - 1) * st for s, st in zip(size, stride, strict=True))
    )
    t = kernels.empty((n,), dt, dev)
    item = t._data.itemsize
    t._data = kernels.as_strided(t._data, size, tuple(st * item for st in stride))
    return _finish(t, requires_grad)


# ---------------------------------------------------------------------------------------------
# narrow_copy
# ---------------------------------------------------------------------------------------------
class NarrowCopy(Function):
    """narrow's entries in a new contiguous tensor; backward torch's slice_backward: input-sized
    zeros with the gradient copied into the slice (one allocation)."""

    def forward(self, x, out=None, index=()):
        self.in_shape, self.index = x.shape, index
        # torch's CPU kernel reads a contiguous input: a strided one is copied whole first (its
        # expect_contiguous), freed once the slice is copied out; cuda (and meta) copy the slice
        whole = kernels.copy_new(x) if x._device.type == "cpu" and not x.is_contiguous() else x
        src = whole._data[index]
        y = kernels.empty(src.shape, x._dtype, x._device)
        if x._device.type != "meta":
            y._data[...] = src
        del whole, src
        return y

    def backward(self, g):
        gx = kernels.zeros(self.in_shape, g._dtype, g._device)
        if g._device.type != "meta":
            gx._data[self.index] = g._data
        return (gx,)

    def name(self):
        return "NarrowCopyBackward0"


def narrow_copy(input, dim, start, length):
    """A copy of `length` entries of dim `dim` from `start` on (negative: from the end)."""
    if input.ndim == 0:
        raise RuntimeError("narrow() cannot be applied to a 0-dim tensor.")
    if dim >= input.ndim:
        raise RuntimeError(
            "Expected dim < static_cast<int64_t>(self_sizes.size()) to be true, but got false.  "
            "(Could this error message be improved?  If so, please report an enhancement "
            "request to PyTorch.)"
        )
    from engine.ops import narrow_start

    d, size, start = narrow_start(input, dim, start)
    length = int(length)
    if length < 0 or start + length > size:
        raise RuntimeError(f"start ({start}) + length ({length}) exceeds dimension size ({size}).")
    index = (slice(None),) * d + (slice(start, start + length),)
    return NarrowCopy.apply(input, op="narrow_copy", index=index)


# ---------------------------------------------------------------------------------------------
# unsafe_split / unsafe_split_with_sizes / unsafe_chunk (rnn's UnsafeSplit: no view relation)
# ---------------------------------------------------------------------------------------------
class UnsafeSplitWithSizes(UnsafeSplit):
    def name(self):
        return "UnsafeSplitWithSizesBackward0"


def _split_sizes(input, d, split_size):
    n = input.shape[d]
    if split_size < 0:
        raise RuntimeError(
            f"split expects split_size be non-negative, but got split_size={split_size}"
        )
    if split_size == 0:
        if n:
            raise RuntimeError(
                f"split_size can only be 0 if dimension size is 0, but got dimension size of {n}"
            )
        return [0]
    return [builtins.min(split_size, n - i) for i in range(0, n, split_size)] or [0]


def unsafe_split(input, split_size, dim=0):
    """Pieces of `split_size` along dim (the last smaller) sharing input's memory, no views."""
    if input.ndim == 0:
        raise RuntimeError("split expects at least a 1-dimensional tensor")
    d = _wrap_dim(dim, input.ndim)
    sizes = _split_sizes(input, d, int(split_size))
    return UnsafeSplit.apply(input, op="unsafe_split", dim=d, sizes=tuple(sizes))


def unsafe_split_with_sizes(input, split_sizes, dim=0):
    """Pieces of the given sizes along dim sharing input's memory, no views."""
    d = _wrap_dim(dim, input.ndim)
    n = input.shape[d]
    sizes = [int(s) for s in split_sizes]
    for s in sizes:
        if s < 0:
            raise RuntimeError(
                f"split_with_sizes expects split_sizes have only non-negative entries, but got "
                f"split_sizes={sizes}"
            )
    if builtins.sum(sizes) != n:
        raise RuntimeError(
            f"split_with_sizes expects split_sizes to sum exactly to {n} (input tensor's size at "
            f"dimension {d}), but got split_sizes={sizes}"
        )
    return UnsafeSplitWithSizes.apply(
        input, op="unsafe_split_with_sizes", dim=d, sizes=tuple(sizes)
    )


def unsafe_chunk(input, chunks, dim=0):
    """`chunks` pieces along dim (fewer when they do not divide it) sharing input's memory."""
    if input.ndim == 0:
        raise RuntimeError("chunk expects at least a 1-dimensional tensor")
    if chunks <= 0:
        raise RuntimeError(f"chunk expects `chunks` to be greater than 0, got: {chunks}")
    d = _wrap_dim(dim, input.ndim)
    return unsafe_split(input, -(-input.shape[d] // chunks), d)


def byte(input):
    """input converted to uint8 (a copy; the same tensor when it already is)."""
    return input.to(dtypes.uint8)


register("new_tensor", new_tensor, function=False, method=True)
register("new_empty_strided", new_empty_strided, function=False, method=True)
register("narrow_copy", narrow_copy, method=True)
register("unsafe_split", unsafe_split, method=True)
register("unsafe_split_with_sizes", unsafe_split_with_sizes, method=True)
register("unsafe_chunk", unsafe_chunk, method=True)
register("byte", byte, function=False, method=True)


# ---------------------------------------------------------------------------------------------
# cov / corrcoef (torch's composites of Correlation.cpp, step by step)
# ---------------------------------------------------------------------------------------------
def _scalar_true(t) -> bool:
    """A 0-d boolean's value (True on meta, where there is none to read)."""
    return True if t._device.type == "meta" else bool(t.item())


def cov(input, *, correction=1, fweights=None, aweights=None):
    """The covariance matrix of the variables in input's rows (observations along dim 1; a 1-D
    input is one variable), weighted by fweights (integer) and aweights (floating point)."""
    from engine.creation import tensor

    if input.ndim > 2:
        raise RuntimeError(
            "cov(): expected input to have two or fewer dimensions but got an input with "
            f"{input.ndim} dimensions"
        )
    if input._dtype is dtypes.bool_:
        raise RuntimeError("cov(): bool dtype is not supported for input")
    x = input.view(1, -1) if input.ndim < 2 else input
    n = x.shape[1]
    w = None
    if fweights is not None:
        w = fweights
        if w.ndim > 1:
            raise RuntimeError(
                "cov(): expected fweights to have one or fewer dimensions but got fweights with "
                f"{w.ndim} dimensions"
            )
        if w._dtype.is_floating_point or w._dtype is dtypes.bool_:
            raise RuntimeError(
                "cov(): expected fweights to have integral dtype but got fweights with "
                f"{w._dtype.scalar_name} dtype"
            )
        if w.numel() != n:
            raise RuntimeError(
                "cov(): expected fweights to have the same numel as there are observations in "
                f"the input but got {w.numel()} != {n}"
            )
        if n and not _scalar_true(w.min().ge(0)):
            raise RuntimeError("cov(): fweights cannot be negative")
    if aweights is not None:
        aw = aweights
        if aw.ndim > 1:
            raise RuntimeError(
                "cov(): expected aweights to have one or fewer dimensions but got aweights with "
                f"{aw.ndim} dimensions"
            )
        if not aw._dtype.is_floating_point:
            raise RuntimeError(
                "cov(): expected aweights to have floating point dtype but got aweights with "
                f"{aw._dtype.scalar_name} dtype"
            )
        if aw.numel() != n:
            raise RuntimeError(
                "cov(): expected aweights to have the same numel as there are observations in "
                f"the input but got {aw.numel()} != {n}"
            )
        if n and not _scalar_true(aw.min().ge(0)):
            raise RuntimeError("cov(): aweights cannot be negative")
        w = aw if w is None else w * aw
    dev = x._device
    if w is not None:
        w_sum = w.sum()
        if not _scalar_true(w_sum.ne(0)):
            raise RuntimeError("cov(): weights sum to zero, can't be normalized")
    else:
        w_sum = tensor(n, dtype=dtypes.int64, device=dev)
    avg = (x if w is None else x * w).sum(1) / w_sum
    if w is None:
        norm = tensor(n - correction, dtype=dtypes.int64, device=dev)
    elif correction == 0:
        norm = w_sum
    elif aweights is None:
        norm = w_sum - correction
    elif fweights is None and n == 1 and correction == 1:
        norm = tensor(0, dtype=dtypes.int64, device=dev)
    else:
        norm = w_sum - correction * (w * aweights).sum() / w_sum
    if dev.type != "meta" and bool(norm.le(0).item()):
        import warnings

        warnings.warn(
            "cov(): degrees of freedom is <= 0. Correction should be strictly less than the "
            "number of observations.",
            UserWarning,
            stacklevel=2,
        )
        norm.zero_()
    if n == 1 and (fweights is None) != (aweights is None):
        x.zero_()
        if not x._dtype.is_floating_point:
            x = x.to(dtypes.float32)
    else:
        x = x - avg.unsqueeze(1)
    c = x.mm((x if w is None else x * w).t())
    result = (c / norm).squeeze()
    del c  # (freed before the centred input, as ATen's locals go out of scope)
    return result


def corrcoef(input):
    """Pearson's correlation coefficients of the variables in input's rows (cov normalised by
    the standard deviations, clipped to [-1, 1])."""
    if input.ndim > 2:
        raise RuntimeError(
            "corrcoef(): expected input to have two or fewer dimensions but got an input with "
            f"{input.ndim} dimensions"
        )
    c = cov(input)
    if c.ndim == 0:
        return c / c
    d = c.diagonal()  # (a view: holds cov's result until the end, as ATen's local does)
    stddev = d.sqrt()
    c = c / stddev.view(-1, 1)
    c = c / stddev.view(1, -1)
    return c.clip(-1, 1)


register("cov", cov, method=True)
register("corrcoef", corrcoef, method=True)
