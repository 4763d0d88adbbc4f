"""Writes through an index or a view, out of place and in place, and the as_strided view:
index_put / index_put_ (accumulate too), select_scatter, slice_scatter, diagonal_scatter,
as_strided_scatter, as_strided.

index_put_ is `x[indices] = values` (engine/ops/views.py's IndexPut, the same node and kernel);
accumulate=True adds, duplicates included (IndexPutBackward0: self's gradient is the gradient
itself). The out-of-place forms are torch's: a clone of the input written in the same node.
The *_scatter ops are torch's composites in one node each (SelectScatterBackward0 ...): the
clone, the source copied into its view; backward scatters zeros_like(src) into a copy of the
gradient for self and hands src the gradient's view. as_strided views the input's storage with
element strides from the storage's start (torch's, whatever the input's own layout); its
backward is torch's as_strided_backward (a zeros "storage" of the extent both geometries need,
the gradient written through the output geometry, index_add_ where that overlaps).
"""

from __future__ import annotations

import numpy as np

from engine import dtypes, kernels
from engine.autograd.function import Function
from engine.ops import views as V
from engine.ops.common import data
from engine.ops.registry import register
from engine.tensor import Tensor, _wrap_dim


# ---------------------------------------------------------------------------------------------
# index_put / index_put_
# ---------------------------------------------------------------------------------------------
def _index_tuple(indices):
    """torch's `Tensor?[] indices` as a Python index: None is a whole dim."""
    if isinstance(indices, Tensor):
        indices = (indices,)
    return tuple(slice(None) if i is None else i for i in indices)


def _check_values(x, values):
    if isinstance(values, Tensor) and values._dtype != x._dtype:
        raise RuntimeError(
            "Index put requires the source and destination dtypes match, got "
            f"{x._dtype.scalar_name} for the destination and {values._dtype.scalar_name} "
            "for the source."
        )


def _check_broadcast(target_shape, values):
    shape = values.shape if isinstance(values, Tensor) else ()
    try:
        np.broadcast_shapes(shape, target_shape)
        ok = len(shape) <= len(target_shape) or all(s == 1 for s in shape[: -len(target_shape)])
    except ValueError:
        ok = False
    if not ok:
        raise RuntimeError(
            f"shape mismatch: value tensor of shape {list(shape)} cannot be broadcast to "
            f"indexing result of shape {list(target_shape)}"
        )


def _index_shape(x, idx):
    """The shape x[idx] has, refusing an index out of bounds as torch does."""
    if x._device.type == "meta":
        raise RuntimeError(
            "index_put with tensor indices is not supported on the meta device (the result "
            "shape depends on values)"
        )
    idx = tuple(kernels.host(i) if hasattr(i, "dtype") else i for i in idx)  # (CuPy's: copied)
    for dim, i in enumerate(idx):
        if isinstance(i, np.ndarray) and i.dtype != np.bool_ and i.size:
            size = x.shape[dim]
            bad = i[(i >= size) | (i < -size)]
            if bad.size:
                raise IndexError(
                    f"index {int(bad.flat[0])} is out of bounds for dimension {dim} with size {size}"
                )
    return np.empty(x.shape, dtype=np.bool_)[idx].shape


class IndexPutAccumulate(V.IndexPut):
    """x.index_put_(indices, values, accumulate=True): duplicates add up (torch's CPU kernel
    accumulates in place, nothing allocated but a bool mask's coordinates)."""

    def forward(self, x, values, out=None, index=None):
        self.v_t = isinstance(values, Tensor)
        self.v_shape = values.shape if self.v_t else None
        self._keep_index(index, V._recording(x, values))
        idx = V._np_index(index)
        coords = self._coordinates(idx, x._device)
        kernels.xp_of(x).add.at(x._data, idx, data(values))
        del coords
        return x

    def backward(self, g):
        # derivatives.yaml: self: grad (accumulate); values: grad[indices]
        return (g, self._values_grad(g, self._backward_index())) if self.v_t else (g,)


class IndexPutOutOfPlace(V.IndexPut):
    """index_put(indices, values, accumulate): a clone of x written in the same node."""

    accumulate = False

    def forward(self, x, values, out=None, index=None):
        y = kernels.copy_new(x)
        rec = V._recording(x, values)
        self.v_t = isinstance(values, Tensor)
        self.v_shape = values.shape if self.v_t else None
        self._keep_index(index, rec)
        idx = V._np_index(index)
        fill = not self.accumulate and len(idx) == 1 and (not self.v_t or values.ndim == 0)
        coords = () if fill else self._coordinates(idx, x._device)
        if self.accumulate:
            kernels.xp_of(x).add.at(y._data, idx, data(values))
        else:
            y._data[idx] = data(values)
        del coords
        return y


class IndexPutOutOfPlaceAccumulate(IndexPutOutOfPlace):
    accumulate = True
    backward = IndexPutAccumulate.backward


def _index_put_checks(input, indices, values):
    idx = _index_tuple(indices)
    _check_values(input, values)
    if input._device.type != "meta":
        _check_broadcast(_index_shape(input, V._np_index(idx)), values)
    return idx


def index_put_(input, indices, values, accumulate=False):
    """input[indices] = values (or += with accumulate=True, duplicates summed), in place."""
    idx = _index_put_checks(input, indices, values)
    if accumulate:
        return IndexPutAccumulate.apply(input, values, out=input, op="index_put_", index=idx)
    return V.IndexPut.apply(input, values, out=input, op="index_put_", index=idx)


def index_put(input, indices, values, accumulate=False):
    """A copy of input with input[indices] = values (+= with accumulate=True)."""
    idx = _index_put_checks(input, indices, values)
    cls = IndexPutOutOfPlaceAccumulate if accumulate else IndexPutOutOfPlace
    return cls.apply(input, values, op="index_put", index=idx)


# ---------------------------------------------------------------------------------------------
# select_scatter / slice_scatter / diagonal_scatter / as_strided_scatter
# ---------------------------------------------------------------------------------------------
class _Scatter(Function):
    """out = input.clone(); view(out).copy_(src). Subclasses say what the view is (`view`, on
    a tensor) and torch's node name."""

    node = ""

    def forward(self, x, src, out=None, args=()):
        self.args, self.src_shape, self.src_dtype = args, src.shape, src._dtype
        y = kernels.copy_new(x)
        target = self.view(y, *args)
        if target.shape != src.shape:
            raise RuntimeError(
                "expected src to have a size equal to the slice of self. src size = "
                f"{list(src.shape)}, slice size = {list(target.shape)}"
            )
        kernels.copy_into(target, src)
        return y

    def backward(self, g):
        # derivatives.yaml: self: <op>(grad, zeros_like(src), ...); src: <view>(grad)
        gx = None
        if self._edges[0] is not None:
            zeros = kernels.zeros(self.src_shape, g._dtype, g._device)
            gx = kernels.copy_new(g)
            kernels.copy_into(self.view(gx, *self.args), zeros)
            del zeros
        gs = self.view(g.detach(), *self.args) if self._edges[1] is not None else None
        if gs is not None and self.src_dtype != g._dtype:
            gs = gs.to(self.src_dtype)
        return gx, gs

    def name(self):
        return self.node

    @staticmethod
    def view(t, *args):
        raise NotImplementedError


def _plain_view(t: Tensor, arr) -> Tensor:
    """A tensor over `arr`, a view of t's storage, with no history (backward's own views)."""
    return Tensor._make(arr, t._storage, t._dtype, t._device)


class SelectScatter(_Scatter):
    node = "SelectScatterBackward0"

    @staticmethod
    def view(t, dim, index):
        return _plain_view(t, t._data[(slice(None),) * dim + (index, Ellipsis)])


class SliceScatter(_Scatter):
    node = "SliceScatterBackward0"

    @staticmethod
    def view(t, dim, start, end, step):
        return _plain_view(t, t._data[(slice(None),) * dim + (slice(start, end, step), Ellipsis)])


class DiagonalScatter(_Scatter):
    node = "DiagonalScatterBackward0"

    @staticmethod
    def view(t, offset, d1, d2):
        return _plain_view(t, V._diagonal_array(t._data, offset, d1, d2))


def select_scatter(input, src, dim, index):
    """A copy of input with src written at `index` along `dim` (torch.select_scatter)."""
    from engine.ops import select_position

    return SelectScatter.apply(
        input, src, op="select_scatter", args=select_position(input, dim, index)
    )


def slice_scatter(input, src, dim=0, start=None, end=None, step=1):
    """A copy of input with src written into input[start:end:step] along `dim`."""
    d = _wrap_dim(dim, input.ndim)
    if step <= 0:
        raise RuntimeError("slice step must be positive")
    return SliceScatter.apply(input, src, op="slice_scatter", args=(d, start, end, step))


def diagonal_scatter(input, src, offset=0, dim1=0, dim2=1):
    """A copy of input with src written on its diagonal (torch.diagonal_scatter)."""
    if input.ndim < 2:
        raise RuntimeError(f"diagonal dimensions requires ndim larger than 1, but got {input.ndim}")
    d1, d2 = _wrap_dim(dim1, input.ndim), _wrap_dim(dim2, input.ndim)
    if d1 == d2:
        raise RuntimeError(f"diagonal dimensions cannot be identical {dim1}, {dim2}")
    return DiagonalScatter.apply(input, src, op="diagonal_scatter", args=(offset, d1, d2))


# ---------------------------------------------------------------------------------------------
# as_strided
# ---------------------------------------------------------------------------------------------
def _storage_array(t: Tensor, size, stride, offset):
    """The backend array viewing t's storage with element `stride` from element `offset` of the
    storage (torch's setStorage bounds check first)."""
    size, stride = tuple(int(s) for s in size), tuple(int(s) for s in stride)
    if len(size) != len(stride):
        raise RuntimeError(
            f"mismatch in length of strides and shape: sizes {len(size)}, strides {len(stride)}"
        )
    if any(s < 0 for s in stride):
        raise RuntimeError(
            "as_strided: Negative strides are not supported at the moment, got strides: "
            f"{list(stride)}"
        )
    item = t._dtype.itemsize
    need = (
        0
        if 0 in size
        else (offset + sum((n - 1) * s for n, s in zip(size, stride, strict=True)) + 1)
    )
    have = t._storage.nbytes
    if need * item > have:
        raise RuntimeError(
            f"setStorage: sizes {list(size)}, strides {list(stride)}, storage offset {offset}, "
            f"and itemsize {item} requiring a storage size of {need * item} are out of bounds "
            f"for storage of size {have}"
        )
    arr = t._data
    step = arr.itemsize  # the array's own (bfloat16 is held in float32)
    byte_strides = tuple(s * step for s in stride)
    if t._device.type == "meta":
        from engine.backends import meta

        start = t._data.offset - t.storage_offset() * step + offset * step
        return meta.MetaArray(size, arr.dtype, byte_strides, start)
    root = t._storage.data.reshape(-1)
    if root.dtype != arr.dtype:
        root = root.view(arr.dtype)
    return kernels.as_strided(root[offset:], size, byte_strides)


def _extent(size, stride, offset):
    return offset + sum((n - 1) * s for n, s in zip(size, stride, strict=True)) + 1


def _maybe_overlapping(size, stride) -> bool:
    """torch's _maybe_overlapping_memory over dims already without size 0 / 1."""
    largest = 0
    for s, n in sorted(zip(stride, size, strict=True)):
        if s <= largest:
            return True
        largest += s * (n - 1)
    return False


class AsStrided(Function):
    """as_strided(size, stride, storage_offset): a view of the input's storage."""

    def forward(self, x, out=None, size=(), stride=(), offset=None):
        offset = x.storage_offset() if offset is None else int(offset)
        arr = _storage_array(x, size, stride, offset)
        self.geometry = (x.shape, x.stride(), x.storage_offset())
        self.out_geometry = (tuple(size), tuple(stride), offset)
        size, stride = tuple(size), tuple(stride)
        shift = offset - x.storage_offset()  # replayed on another tensor: relative to it

        def step(t):
            return t.as_strided(size, stride, t.storage_offset() + shift)

        return V.make_view(x, arr, step)

    def backward(self, g):
        return (as_strided_backward(g, self.geometry, *self.out_geometry),)

    def name(self):
        return "AsStridedBackward0"


def as_strided_backward(grad, input_geometry, size, stride, offset):
    """torch's as_strided_backward (FunctionsManual.cpp), step for step."""
    in_size, in_stride, in_offset = input_geometry
    dev, dt = grad._device, grad._dtype
    out_size, out_stride = [], []
    for i in reversed(range(len(size))):
        if size[i] == 0:
            return kernels.zeros(in_size, dt, dev)
        if size[i] == 1:
            grad = grad.squeeze(i)
        elif stride[i] == 0:
            grad = grad.sum(i)
        else:
            out_size.insert(0, size[i])
            out_stride.insert(0, stride[i])
    out_overlap = _maybe_overlapping(out_size, out_stride)
    inp_size, inp_stride = [], []
    for i in reversed(range(len(in_size))):
        if in_size[i] == 0:
            return kernels.zeros(in_size, dt, dev)
        if in_size[i] != 1:
            inp_size.insert(0, in_size[i])
            inp_stride.insert(0, in_stride[i])
    inp_overlap = _maybe_overlapping(inp_size, inp_stride)
    shared = min(in_offset, offset)
    in_eff, out_eff = in_offset - shared, offset - shared
    base = max(_extent(inp_size, inp_stride, in_eff), _extent(out_size, out_stride, out_eff))
    storage = kernels.zeros((base,), dt, dev)
    full = None
    if inp_overlap or out_overlap:
        full = kernels.empty((base,), dtypes.int64, dev)
        if dev.type != "meta":
            full._data[...] = kernels.xp_of(full).arange(base)
    if out_overlap:
        out_idx = full.as_strided(out_size, out_stride, out_eff).reshape(-1)
        storage.index_add_(0, out_idx, grad.reshape(-1))
        del out_idx
    else:
        target = storage.as_strided(out_size, out_stride, out_eff)
        kernels.copy_into(target, grad)
        del target
    if inp_overlap:
        count = kernels.zeros((base,), dt, dev)
        in_idx = full.as_strided(inp_size, inp_stride, in_eff).reshape(-1)
        ones = kernels.empty((1,), dt, dev)
        kernels.fill_(ones, 1)
        count.index_add_(0, in_idx, ones.expand(in_idx.shape))
        del ones, in_idx
        storage.div_(count)
        del count
    del full
    return storage.as_strided(in_size, in_stride, in_eff)


def as_strided(input, size, stride, storage_offset=None):
    """A view of input's storage with these sizes and element strides (from the storage's
    start, whatever input's own layout; storage_offset defaults to input's)."""
    return AsStrided.apply(
        input, op="as_strided", size=tuple(size), stride=tuple(stride), offset=storage_offset
    )


class AsStridedScatter(_Scatter):
    """as_strided_scatter: the clone's own storage viewed with the given geometry."""

    node = "AsStridedScatterBackward0"

    @staticmethod
    def view(t, size, stride, offset):
        off = t.storage_offset() if offset is None else offset
        return _plain_view(t, _storage_array(t, size, stride, off))

    def backward(self, g):
        # derivatives.yaml: self: as_strided_scatter_backward; src: grad.contiguous()
        # .as_strided(size, stride, storage_offset)
        # (torch's as_strided_scatter_backward writes the gradient's slice into zeros: self's
        # gradient is the slice's, not the rest's; kept as torch computes it)
        gx = gs = None
        c = g.detach().contiguous()
        if self._edges[0] is not None:
            gx = kernels.zeros(g.shape, g._dtype, g._device)
            target = self.view(gx, *self.args)
            kernels.copy_into(target, self.view(c, *self.args))
            del target
        if self._edges[1] is not None:
            gs = self.view(c, *self.args)
            if self.src_dtype != g._dtype:
                gs = gs.to(self.src_dtype)
        return gx, gs


def as_strided_scatter(input, src, size, stride, storage_offset=None):
    """A copy of input with src written through as_strided(size, stride, storage_offset)."""
    args = (tuple(size), tuple(stride), storage_offset)
    return AsStridedScatter.apply(input, src, op="as_strided_scatter", args=args)


register("index_put", index_put, method=True, inplace="index_put_")
register("index_put_", index_put_, method=True)
register("select_scatter", select_scatter, method=True)
register("slice_scatter", slice_scatter, method=True)
register("diagonal_scatter", diagonal_scatter, method=True)
register("as_strided_scatter", as_strided_scatter, method=True)
register("as_strided", as_strided, method=True)
