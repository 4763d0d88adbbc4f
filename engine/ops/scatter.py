"""Indexing writes: scatter / scatter_add / scatter_reduce, index_add, index_copy, index_fill,
masked_scatter, put (each with its in-place form) and take.

What backward keeps follows PyTorch's derivatives.yaml: the index (or mask) only, never the
tensor written into, so every in-place form is free (no clone). The out-of-place forms copy the
input once and write into the copy. Gradients (as in PyTorch):
- scatter:        self <- g.scatter(dim, index, 0);   src <- g.gather(dim, index)
- scatter_add:    self <- g;                          src <- g.gather(dim, index)
- index_add:      self <- g;                          source <- alpha * g.index_select(dim, index)
- index_copy:     self <- g.index_fill(dim, index, 0); source <- g.index_select(dim, index)
- index_fill:     self <- g.index_fill(dim, index, 0)
- masked_scatter: self <- g.masked_fill(mask, 0);     source <- g[mask], zero-padded
- put:            self <- g (accumulate) or g.put(index, 0); source <- g.take(index)
scatter(..., reduce='add'|'multiply') has no derivative in PyTorch ("derivative for aten::scatter
is not implemented"); scatter_reduce has one for sum, mean, amax and amin here.
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np

from engine import dtypes, kernels
from engine.autograd.function import Function
from engine.ops import registry as _registry
from engine.tensor import Tensor, _wrap_dim


def _live(dev) -> bool:
    return dev.type != "meta"


def _check_index(index, opname, dtypes_ok=(dtypes.int64,)):
    if not isinstance(index, Tensor):
        raise TypeError(f"{opname}(): argument 'index' must be Tensor, not {type(index).__name__}")
    if index._dtype not in dtypes_ok:
        raise RuntimeError(f"{opname}(): Expected dtype int64 for index")


def _start(x: Tensor, out):
    """The tensor written into: `out` (in place, x itself) or a copy of x."""
    if out is not None:
        return out
    return kernels.copy_new(x)


def _scatter_coords(xp, index_arr, dim):
    """Coordinates addressing x at index's positions with index's values along `dim`."""
    nd = index_arr.ndim
    coords = [
        xp.arange(n).reshape([-1 if k == i else 1 for k in range(nd)])
        for i, n in enumerate(index_arr.shape)
    ]
    coords[dim] = index_arr
    return tuple(coords)


def _check_scatter_shapes(x, index, src, d, opname):
    if index.ndim != x.ndim and index.numel() > 0:
        raise RuntimeError(
            f"{opname}(): Index tensor must have the same number of dimensions as self tensor"
        )
    if isinstance(src, Tensor) and src.ndim != index.ndim and index.numel() > 0:
        raise RuntimeError(
            f"{opname}(): Index tensor must have the same number of dimensions as src tensor"
        )
    for i in range(index.ndim):
        if i != d and index.shape[i] > x.shape[i]:
            raise RuntimeError(
                f"Size does not match at dimension {i} expected index {list(index.shape)} to be "
                f"no larger than self {list(x.shape)} apart from dimension {d}"
            )
        if isinstance(src, Tensor) and index.shape[i] > src.shape[i]:
            raise RuntimeError(
                f"Size does not match at dimension {i} expected index {list(index.shape)} to be "
                f"no larger than src {list(src.shape)}"
            )


def _check_bounds(index_arr, n, opname, dim):
    if index_arr.size:
        lo, hi = int(index_arr.min()), int(index_arr.max())
        if lo < -n or hi >= n:
            bad = hi if hi >= n else lo
            raise RuntimeError(
                f"{opname}(): index {bad} is out of bounds for dimension {dim} with size {n}"
            )


def _src_block(src, index_shape):
    return src._data[tuple(slice(0, k) for k in index_shape)]


def _same_dtype(x, src, opname):
    if isinstance(src, Tensor) and src._dtype is not x._dtype:
        a = x._dtype.scalar_name
        b = src._dtype.scalar_name
        raise RuntimeError(
            f"{opname}(): Expected self.dtype to be equal to src.dtype (got {a} and {b})"
        )


def _grad_to_shape(gi: Tensor, shape) -> Tensor:
    """A gradient of index's shape placed in a zero tensor of `shape` (src larger than index)."""
    if gi.shape == tuple(shape):
        return gi
    full = kernels.zeros(tuple(shape), gi._dtype, gi._device)
    if _live(gi._device):
        full._data[tuple(slice(0, k) for k in gi.shape)] = gi._data
    return full


# ---------------------------------------------------------------------------------------------
# scatter family
# ---------------------------------------------------------------------------------------------
_REDUCE_UFUNC = {
    "add": "add",
    "multiply": "multiply",
    "sum": "add",
    "prod": "multiply",
    "amax": "maximum",
    "amin": "minimum",
}


def _at(xp, op: str, a, index, values) -> None:
    """a[index] op= values, repeated indexes applied one after the other (ufunc.at).

    numpy: np.<op>.at. CuPy: add through its add.at (or cupyx.scatter_add); multiply, maximum
    and minimum in rounds (_at_rounds): CuPy has no multiply.at, and its maximum.at / minimum.at
    on float64 gave float32-rounded results (seen on an H100, CuPy 14.2)."""
    if xp is np:
        getattr(np, op).at(a, index, values)
        return
    if op == "add":
        if hasattr(xp.add, "at"):
            xp.add.at(a, index, values)
        else:
            import cupyx

            cupyx.scatter_add(a, index, values)
        return
    _at_rounds(xp, getattr(xp, op), a, index, values)


def _at_rounds(xp, uf, a, index, values) -> None:
    """ufunc.at by rounds: each round applies the first remaining value of every place at once,
    so the values of one place meet in index order, exactly as ufunc.at applies them; as many
    rounds as the most values that meet at one place. For an array module without ufunc.at."""
    index = index if isinstance(index, tuple) else (index,)
    parts = xp.broadcast_arrays(*[xp.asarray(i) for i in index])
    lin = xp.ravel_multi_index(tuple(p.ravel() for p in parts), a.shape)
    vals = xp.broadcast_to(xp.asarray(values, dtype=a.dtype), parts[0].shape).ravel()
    flat = a.reshape(-1) if a.flags.c_contiguous else a.ravel()  # (a copy when strided)
    while lin.size:
        places, first = xp.unique(lin, return_index=True)
        flat[places] = uf(flat[places], vals[first])
        rest = xp.ones(lin.size, dtype=bool)
        rest[first] = False
        lin, vals = lin[rest], vals[rest]
    if not a.flags.c_contiguous:
        a[...] = flat.reshape(a.shape)


class Scatter(Function):
    """scatter (src tensor or value), scatter_add (`add=True`), scatter(reduce='add'|'multiply')."""

    def to_save(self, tensors):
        return (1,)  # the index

    def forward(self, x, index, src=None, out=None, dim=0, value=None, add=False, reduce=None):
        opname = "scatter_add" if add else "scatter"
        _check_index(index, opname)
        d = _wrap_dim(dim, x.ndim)
        _check_scatter_shapes(x, index, src, d, opname)
        _same_dtype(x, src, opname)
        if reduce is not None and reduce not in ("add", "multiply"):
            raise RuntimeError(f"reduce argument must be either add or multiply, got {reduce!r}")
        self.dim, self.add, self.reduce = d, add, reduce
        self.src_shape = src.shape if isinstance(src, Tensor) else None
        y = _start(x, out)
        if _live(x._device) and index.numel():
            xp = kernels.xp_of(x)
            ia = index._data
            _check_bounds(ia, x.shape[d], opname, d)
            coords = _scatter_coords(xp, ia, d)
            vals = _src_block(src, ia.shape) if isinstance(src, Tensor) else value
            if add or reduce == "add":
                _at(xp, "add", y._data, coords, vals)
            elif reduce == "multiply":
                _at(xp, "multiply", y._data, coords, vals)
            else:
                y._data[coords] = vals
        return y

    def backward(self, g):
        if self.reduce is not None:
            raise RuntimeError("derivative for aten::scatter is not implemented")
        (index,) = self.saved_tensors
        nf = self._edges
        gx = None
        if nf[0] is not None:
            gx = g if self.add else scatter(g, self.dim, index, 0.0)
        if self.src_shape is None:
            return (gx, None)
        gs = None
        if nf[2] is not None:
            gs = _grad_to_shape(g.gather(self.dim, index), self.src_shape)
        return (gx, None, gs)

    def name(self):
        return (
            "ScatterAddBackward0"
            if self.add
            else ("ScatterBackward0" if self.src_shape is not None else "ScatterBackward1")
        )


def _scatter(input, dim, index, src, value, out, reduce, op):
    if isinstance(src, Tensor):
        return Scatter.apply(input, index, src, out=out, op=op, dim=dim, reduce=reduce)
    return Scatter.apply(
        input, index, out=out, op=op, dim=dim, value=src if value is None else value, reduce=reduce
    )


def scatter(input, dim, index, src=None, value=None, *, reduce=None):
    if src is None and value is None:
        raise TypeError("scatter() missing 1 required argument: 'src' (a tensor or a number)")
    return _scatter(input, dim, index, src, value, None, reduce, "scatter")


def scatter_(input, dim, index, src=None, value=None, *, reduce=None):
    if src is None and value is None:
        raise TypeError("scatter_() missing 1 required argument: 'src' (a tensor or a number)")
    return _scatter(input, dim, index, src, value, input, reduce, "scatter_")


def scatter_add(input, dim, index, src):
    return Scatter.apply(input, index, src, op="scatter_add", dim=dim, add=True)


def scatter_add_(input, dim, index, src):
    return Scatter.apply(input, index, src, out=input, op="scatter_add_", dim=dim, add=True)


class ScatterReduce(Function):
    """scatter_reduce(dim, index, src, reduce, include_self): sum, prod, mean, amax, amin."""

    def to_save(self, tensors):
        return (0, 1, 2)  # self (its original values: a clone when in place), index, src

    retain_output = True

    def forward(self, x, index, src, out=None, dim=0, reduce="sum", include_self=True):
        _check_index(index, "scatter_reduce")
        if reduce not in ("sum", "prod", "mean", "amax", "amin"):
            raise RuntimeError(
                f"reduce argument must be either sum, prod, mean, amax or amin, got {reduce}"
            )
        d = _wrap_dim(dim, x.ndim)
        _check_scatter_shapes(x, index, src, d, "scatter_reduce")
        _same_dtype(x, src, "scatter_reduce")
        self.dim, self.reduce, self.include_self = d, reduce, include_self
        self.src_shape = src.shape
        y = _start(x, out)
        if _live(x._device) and index.numel():
            xp = kernels.xp_of(x)
            ia = index._data
            _check_bounds(ia, x.shape[d], "scatter_reduce", d)
            coords = _scatter_coords(xp, ia, d)
            vals = _src_block(src, ia.shape)
            if not include_self:
                ident = {"sum": 0, "mean": 0, "prod": 1}.get(reduce)
                if ident is None:
                    big = np.inf if x._dtype.is_floating_point else np.iinfo(x._dtype.np).max
                    ident = -big if reduce == "amax" else big
                y._data[coords] = ident
            _at(xp, _REDUCE_UFUNC["sum" if reduce == "mean" else reduce], y._data, coords, vals)
            if reduce == "mean":
                counts = self._counts(xp, y, coords)
                if x._dtype.is_floating_point:
                    xp.divide(y._data, counts._data, out=y._data)
                else:
                    xp.floor_divide(y._data, counts._data, out=y._data)
        return y

    def _counts(self, xp, y, coords):
        """How many values (self included when include_self) met at each place: a charged temp."""
        counts = kernels.full(y.shape, 1 if self.include_self else 0, y._dtype, y._device)
        _at(xp, "add", counts._data, coords, 1)
        xp.maximum(counts._data, 1, out=counts._data)
        return counts

    def backward(self, g):
        x, index, src, result = self.saved_tensors
        d = self.dim
        nf = self._edges
        gx = gs = None
        if self.reduce == "sum":
            gx = g if self.include_self else scatter(g, d, index, 0.0)
            gs = g.gather(d, index)
        elif self.reduce == "mean":  # PyTorch's scatter_reduce_backward, op for op
            n = kernels.full(g.shape, 1 if self.include_self else 0, g._dtype, g._device)
            n = scatter_add(n, d, index, kernels.full(src.shape, 1, g._dtype, g._device))
            n.masked_fill_(n == 0, 1)
            gx = g / n
            n_src = n.gather(d, index)
            gs = g.gather(d, index) / n_src
            del n, n_src
            if not self.include_self:
                gx = scatter(gx, d, index, 0.0)
        elif self.reduce in ("amax", "amin"):
            # the gradient is shared equally among the values equal to the result (PyTorch's
            # formula, its named temporaries alive until backward returns as in C++; an
            # excluded self that happens to equal the result is not counted, unlike PyTorch's)
            value = result.gather(d, index)
            self_is_result = (x == result).to(g._dtype)
            if not self.include_self:
                self_is_result.scatter_(d, index, 0.0)
            src_is_result = (src == value).to(g._dtype)
            n = scatter_add(self_is_result, d, index, src_is_result)
            share = g / n
            gx = (x == result) * share
            gs = (src == value) * share.gather(d, index)
            if not self.include_self:
                gx = scatter(gx, d, index, 0.0)
        else:
            raise RuntimeError(
                "scatter_reduce: the derivative for reduce='prod' is not supported by the engine"
            )
        gx = gx if nf[0] is not None else None
        gs = _grad_to_shape(gs, self.src_shape) if nf[2] is not None else None
        return (gx, None, gs)

    def name(self):
        return "ScatterReduceBackward0"


def _src_block_t(src: Tensor, index_shape) -> Tensor:
    if src.shape == tuple(index_shape):
        return src
    return src[tuple(slice(0, k) for k in index_shape)]


def scatter_reduce(input, dim, index, src, reduce, *, include_self=True):
    return ScatterReduce.apply(
        input, index, src, op="scatter_reduce", dim=dim, reduce=reduce, include_self=include_self
    )


def scatter_reduce_(input, dim, index, src, reduce, *, include_self=True):
    return ScatterReduce.apply(
        input,
        index,
        src,
        out=input,
        op="scatter_reduce_",
        dim=dim,
        reduce=reduce,
        include_self=include_self,
    )


# ---------------------------------------------------------------------------------------------
# index_add / index_copy / index_fill
# ---------------------------------------------------------------------------------------------
def _check_index_vector(index, opname):
    _check_index(index, opname, (dtypes.int64, dtypes.int32))
    if index.ndim > 1:
        raise IndexError(f"{opname}(): Index is supposed to be a vector")


def _check_source(x, source, index, d, opname):
    want = list(x.shape)
    if x.ndim:
        want[d] = index.numel()
    got = list(source.shape)
    if source.ndim == 0 and index.numel() == 1:
        return
    if got != want:
        raise RuntimeError(
            f"{opname}(): source {got} must have the shape of self {list(x.shape)} with "
            f"dimension {d} of size len(index) = {index.numel()}"
        )


class IndexWrite(Function):
    """index_add (`kind='add'`, with alpha), index_copy (`'copy'`), index_fill (`'fill'`)."""

    def to_save(self, tensors):
        return (1,)

    def forward(self, x, index, source=None, out=None, dim=0, kind="add", alpha=1, value=None):
        opname = f"index_{kind}"
        _check_index_vector(index, opname)
        d = _wrap_dim(dim, max(x.ndim, 1))
        if isinstance(source, Tensor) and kind != "fill":
            _check_source(x, source, index, d, opname)
            _same_dtype(x, source, opname)
        if kind == "fill" and isinstance(source, Tensor) and source.ndim:
            raise RuntimeError(
                "index_fill_ only supports a 0-dimensional value tensor, but got tensor with "
                f"{source.ndim} dimension(s)."
            )
        self.dim, self.kind, self.alpha = d, kind, alpha
        self.src_shape = source.shape if isinstance(source, Tensor) else None
        y = _start(x, out)
        if _live(x._device) and index.numel():
            xp = kernels.xp_of(x)
            ia = index._data.reshape(-1).astype(np.int64, copy=False)
            n = x.shape[d] if x.ndim else 1
            _check_bounds(ia, n, opname, d)
            where = (slice(None),) * d + (ia,) if x.ndim else ()
            if kind == "fill":
                y._data[where] = source._data if isinstance(source, Tensor) else value
            else:
                src = source._data
                if source.ndim == 0 and x.ndim:
                    src = src.reshape((1,) * x.ndim)
                if kind == "copy":
                    y._data[where] = src
                elif alpha == 1:
                    _at(xp, "add", y._data, where, src)
                else:
                    _at(xp, "add", y._data, where, src * alpha)
        return y

    def backward(self, g):
        (index,) = self.saved_tensors
        nf = self._edges
        d = self.dim
        gx = None
        if nf[0] is not None:
            gx = g if self.kind == "add" else index_fill(g, d, index, 0.0)
        if self.src_shape is None:
            return (gx, None)
        gs = None
        if nf[2] is not None:
            picked = g.index_select(d, index.reshape(-1)) if g.ndim else g
            if self.kind == "fill":  # a 0-d value tensor: the sum of the filled places' grads
                gs = picked.sum()
            else:
                if self.kind == "add" and self.alpha != 1:
                    picked = picked * self.alpha
                gs = picked.reshape(self.src_shape)
        return (gx, None, gs)

    def name(self):
        return {
            "add": "IndexAddBackward0",
            "copy": "IndexCopyBackward0",
            "fill": "IndexFillBackward0" if self.src_shape is None else "IndexFillBackward1",
        }[self.kind]


def index_add(input, dim, index, source, *, alpha=1):
    return IndexWrite.apply(input, index, source, op="index_add", dim=dim, kind="add", alpha=alpha)


def index_add_(input, dim, index, source, *, alpha=1):
    return IndexWrite.apply(
        input, index, source, out=input, op="index_add_", dim=dim, kind="add", alpha=alpha
    )


def index_copy(input, dim, index, source):
    return IndexWrite.apply(input, index, source, op="index_copy", dim=dim, kind="copy")


def index_copy_(input, dim, index, source):
    return IndexWrite.apply(input, index, source, out=input, op="index_copy_", dim=dim, kind="copy")


def _fill(input, dim, index, value, out, op):
    if isinstance(value, Tensor):
        return IndexWrite.apply(input, index, value, out=out, op=op, dim=dim, kind="fill")
    return IndexWrite.apply(input, index, out=out, op=op, dim=dim, kind="fill", value=value)


def index_fill(input, dim, index, value):
    return _fill(input, dim, index, value, None, "index_fill")


def index_fill_(input, dim, index, value):
    return _fill(input, dim, index, value, input, "index_fill_")


# ---------------------------------------------------------------------------------------------
# masked_scatter, put, take
# ---------------------------------------------------------------------------------------------
class MaskedScatter(Function):
    def to_save(self, tensors):
        return (1,)

    def forward(self, x, mask, source, out=None):
        if not isinstance(mask, Tensor) or mask._dtype is not dtypes.bool_:
            raise RuntimeError("masked_scatter_ only supports boolean masks")
        _same_dtype(x, source, "masked_scatter_")
        try:
            np.broadcast_shapes(x.shape, mask.shape)
        except ValueError:
            raise RuntimeError(
                f"masked_scatter_: mask {list(mask.shape)} cannot be broadcast to self "
                f"{list(x.shape)}"
            ) from None
        if out is not None and np.broadcast_shapes(x.shape, mask.shape) != x.shape:
            raise RuntimeError(
                f"masked_scatter_: mask {list(mask.shape)} must broadcast to self "
                f"{list(x.shape)} in place"
            )
        self.src_shape = source.shape
        shape = np.broadcast_shapes(x.shape, mask.shape)
        if out is None:
            y = kernels.empty(shape, x._dtype, x._device)
            if _live(x._device):
                kernels.xp_of(x).copyto(y._data, x._data)
        else:
            y = out
        if _live(x._device):
            xp = kernels.xp_of(x)
            m = xp.broadcast_to(mask._data, shape)
            k = int(m.sum())
            if k > source.numel():
                raise RuntimeError(
                    f"masked_scatter_: expected source to have at least {k} elements (the "
                    f"number of True values of the mask), but it has {source.numel()}"
                )
            y._data[m] = source._data.reshape(-1)[:k]
        return y

    def backward(self, g):
        (mask,) = self.saved_tensors
        nf = self._edges
        gx = g.masked_fill(mask, 0.0) if nf[0] is not None else None
        gs = _masked_scatter_backward(g, mask, self.src_shape) if nf[2] is not None else None
        return (gx, None, gs)

    def name(self):
        return "MaskedScatterBackward0"


_GRAIN_SIZE = 32768  # at::internal::GRAIN_SIZE


def _masked_scatter_backward(g: Tensor, mask: Tensor, src_shape) -> Tensor:
    """PyTorch's masked_scatter_backward: g.masked_select(mask), then zeros and a cat up to the
    source's size. masked_select's CPU kernel counts the mask (a 0-d and a mask-sized int64
    temporary) and, unless it takes its serial path (fewer than 32768 elements, or one thread,
    with g and the mask contiguous and of one shape), builds an int64 copy of the mask and its
    prefix sum; all of these are charged here too."""
    dev, dt = g._device, g._dtype
    live = _live(dev)
    xp = kernels.xp_of(g) if live else None
    shape = tuple(np.broadcast_shapes(g.shape, mask.shape))
    if live:
        m = xp.broadcast_to(mask._data, shape)
        k = int(m.sum())
    else:
        raise RuntimeError(
            "masked_scatter's backward reads the mask's values (how many are True), which a "
            "meta tensor does not have"
        )
    total = kernels.empty((), dtypes.int64, dev)  # the count of the mask
    count = kernels.empty(shape, dtypes.int64, dev)
    del count, total
    serial = (
        (math.prod(shape) < _GRAIN_SIZE or kernels.get_num_threads() == 1)
        and g.shape == shape
        and mask.shape == shape
        and g.is_contiguous()
        and mask.is_contiguous()
    )
    selected = kernels.empty((k,), dt, dev)
    buffers = (
        ()
        if serial
        else (
            kernels.empty(shape, dtypes.int64, dev),  # the mask as int64
            kernels.empty(shape, dtypes.int64, dev),  # its prefix sum
        )
    )
    selected._data[...] = xp.broadcast_to(g._data, shape)[m]
    del buffers
    n = int(np.prod(src_shape))
    if n > k:
        zeros = kernels.zeros((n - k,), dt, dev)
        full = kernels.empty((n,), dt, dev)
        full._data[:k] = selected._data
        full._data[k:] = zeros._data
        del zeros, selected
        selected = full
    return selected.view(src_shape)


def masked_scatter(input, mask, source):
    return MaskedScatter.apply(input, mask, source, op="masked_scatter")


def masked_scatter_(input, mask, source):
    return MaskedScatter.apply(input, mask, source, out=input, op="masked_scatter_")


def _flat_coords(xp, index_arr, shape):
    n = int(np.prod(shape))
    flat = index_arr.reshape(-1).astype(np.int64, copy=False)
    if flat.size:
        lo, hi = int(flat.min()), int(flat.max())
        if lo < -n or hi >= n:
            bad = hi if hi >= n else lo
            raise IndexError(
                f"out of range: tried to access index {bad} on a tensor of {n} elements."
            )
    flat = xp.where(flat < 0, flat + n, flat)
    return xp.unravel_index(flat, shape) if len(shape) else ()


class Put(Function):
    def to_save(self, tensors):
        return (1,)

    def forward(self, x, index, source, out=None, accumulate=False):
        _check_index(index, "put_")
        _same_dtype(x, source, "put_")
        if index.numel() != source.numel():
            raise RuntimeError(
                f"put_(): Expected source and index to have the same number of elements, but got "
                f"source.numel() = {source.numel()}, index.numel() = {index.numel()}"
            )
        self.accumulate, self.src_shape = accumulate, source.shape
        y = _start(x, out)
        if _live(x._device) and index.numel():
            xp = kernels.xp_of(x)
            coords = _flat_coords(xp, index._data, x.shape)
            vals = source._data.reshape(-1)
            if accumulate:
                _at(xp, "add", y._data, coords, vals)
            else:
                y._data[coords] = vals
        return y

    def backward(self, g):
        (index,) = self.saved_tensors
        nf = self._edges
        gx = None
        if nf[0] is not None:
            if self.accumulate:
                gx = g
            else:
                zeros = kernels.zeros(self.src_shape, g._dtype, g._device)
                gx = put(g, index, zeros)
        gs = take(g, index).reshape(self.src_shape) if nf[2] is not None else None
        return (gx, None, gs)

    def name(self):
        return "PutBackward0"


def put(input, index, source, accumulate=False):
    return Put.apply(input, index, source, op="put", accumulate=accumulate)


def put_(input, index, source, accumulate=False):
    return Put.apply(input, index, source, out=input, op="put_", accumulate=accumulate)


class Take(Function):
    def to_save(self, tensors):
        return (1,)

    def forward(self, x, index, out=None):
        _check_index(index, "take")
        self.in_shape = x.shape
        y = kernels.empty(index.shape, x._dtype, x._device)
        if _live(x._device) and index.numel():
            xp = kernels.xp_of(x)
            coords = _flat_coords(xp, index._data, x.shape)
            y._data[...] = x._data[coords].reshape(index.shape)
        return y

    def backward(self, g):
        (index,) = self.saved_tensors
        gx = kernels.zeros(self.in_shape, g._dtype, g._device)
        return (put_(gx, index, g.reshape(-1) if g.ndim != 1 else g, accumulate=True), None)

    def name(self):
        return "TakeBackward0"


def take(input, index):
    return Take.apply(input, index, op="take")


# One row of the op table (engine/ops/registry.py) per public name
_row = _registry.register
_S = _registry.Scenario
_REQ = _registry.REQUIRED
_DIM = ("dim", int, _REQ, "")


def _scatter_call(ts, a, inplace):
    fn = scatter_ if inplace else scatter
    src = ts[2] if len(ts) > 2 else a.get("value")
    return fn(ts[0], a["dim"], ts[1], src, reduce=a.get("reduce"))


def _dim_first(fn, fn_):
    """A scenario call for fn(input, dim, index, ...): torch puts dim before the index."""

    def call(ts, a, inplace):
        rest = {k: v for k, v in a.items() if k != "dim"}
        return (fn_ if inplace else fn)(ts[0], a["dim"], *ts[1:], **rest)

    return call


_row(
    "scatter",
    scatter,
    method=True,
    inplace="scatter_",
    scenario=_S(
        inputs=("input", "index"),
        optional_inputs=("src",),
        args=(
            _DIM,
            ("value", float | None, None, "a number to write instead of src"),
            ("reduce", Literal["add", "multiply"] | None, None, "no gradient with reduce"),
        ),
        call=_scatter_call,
        doc="write src (or value) at index along dim; in place keeps only the index: free",
    ),
)
_row("scatter_", scatter_, function=False, method=True)
_row(
    "scatter_add",
    scatter_add,
    method=True,
    inplace="scatter_add_",
    scenario=_S(
        call=_dim_first(scatter_add, scatter_add_),
        inputs=("input", "index", "src"),
        args=(_DIM,),
        doc="add src at index along dim",
    ),
)
_row("scatter_add_", scatter_add_, function=False, method=True)
_row(
    "scatter_reduce",
    scatter_reduce,
    method=True,
    inplace="scatter_reduce_",
    scenario=_S(
        call=_dim_first(scatter_reduce, scatter_reduce_),
        inputs=("input", "index", "src"),
        args=(
            _DIM,
            ("reduce", Literal["sum", "prod", "mean", "amax", "amin"], _REQ, ""),
            ("include_self", bool, True, ""),
        ),
        doc="reduce src into input at index (keeps input, src and the result)",
    ),
)
_row("scatter_reduce_", scatter_reduce_, function=False, method=True)
_row(
    "index_add",
    index_add,
    method=True,
    inplace="index_add_",
    scenario=_S(
        call=_dim_first(index_add, index_add_),
        inputs=("input", "index", "source"),
        args=(_DIM, ("alpha", float, 1, "")),
        doc="add source's slices at index along dim",
    ),
)
_row("index_add_", index_add_, function=False, method=True)
_row(
    "index_copy",
    index_copy,
    method=True,
    inplace="index_copy_",
    scenario=_S(
        call=_dim_first(index_copy, index_copy_),
        inputs=("input", "index", "source"),
        args=(_DIM,),
        doc="copy slices at index",
    ),
)
_row("index_copy_", index_copy_, function=False, method=True)
_row(
    "index_fill",
    index_fill,
    method=True,
    inplace="index_fill_",
    scenario=_S(
        call=_dim_first(index_fill, index_fill_),
        inputs=("input", "index"),
        args=(_DIM, ("value", float, _REQ, "")),
        doc="fill slices at index with value",
    ),
)
_row("index_fill_", index_fill_, function=False, method=True)
_row(
    "masked_scatter",
    masked_scatter,
    method=True,
    inplace="masked_scatter_",
    scenario=_S(inputs=("input", "mask", "source"), doc="source's values where mask is True"),
)
_row("masked_scatter_", masked_scatter_, function=False, method=True)
_row(
    "put",
    put,
    method=True,
    inplace="put_",
    scenario=_S(
        inputs=("input", "index", "source"),
        args=(("accumulate", bool, False, ""),),
        doc="write source at flat indexes",
    ),
)
_row("put_", put_, function=False, method=True)
_row("take", take, method=True, scenario=_S(inputs=("input", "index"), doc="flat gather"))
