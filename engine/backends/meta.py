"""The meta backend: arrays that have a shape, dtype and strides but no data.

Used as `xp` for tensors on device "meta". Only metadata operations exist here (views, empty);
compute ops skip their kernel on meta. Reading values raises a clear error.
"""

from __future__ import annotations

import math

import numpy as np

from engine.backends.strided import contiguous_strides, normalize_index, view_strides
from engine.errors import MetaDataError

__name__meta__ = "meta"


_new = object.__new__
_STRIDES: dict[tuple, tuple] = {}  # (shape, itemsize) -> C-contiguous strides
_MADE: dict[tuple, tuple] = {}  # (shape, dtype) as given -> (shape, dtype, strides), normalised


class MetaArray:
    __slots__ = ("shape", "strides", "dtype", "offset", "contig")

    def __init__(self, shape, dtype, strides=None, offset: int = 0):
        self.shape = tuple(int(s) for s in shape)
        self.dtype = np.dtype(dtype)
        self.strides = (
            tuple(strides)
            if strides is not None
            else contiguous_strides(self.shape, self.dtype.itemsize)
        )
        self.offset = offset
        self.contig = None  # C-contiguous or not: worked out when first asked

    @staticmethod
    def contiguous(shape: tuple, dtype: np.dtype) -> MetaArray:
        """A new C-contiguous array: the storage path's constructor (`shape` a tuple of ints,
        `dtype` a numpy dtype already), with the strides of recent shapes remembered."""
        a = _new(MetaArray)
        made = _MADE.get((shape, dtype))
        if made is None:  # normalised once per (shape, dtype): ints, a numpy dtype, C strides
            norm_shape, norm_dtype = tuple(map(int, shape)), np.dtype(dtype)
            key = (norm_shape, norm_dtype.itemsize)
            strides = _STRIDES.get(key)
            if strides is None:
                strides = _STRIDES[key] = contiguous_strides(norm_shape, norm_dtype.itemsize)
            if len(_MADE) > 4096:
                _MADE.clear()
                _STRIDES.clear()
            made = _MADE[(shape, dtype)] = (norm_shape, norm_dtype, strides)
        a.shape, a.dtype, a.strides = made
        a.offset = 0
        a.contig = True
        return a

    # --- numpy-like metadata -------------------------------------------------------------
    @property
    def c_contiguous(self) -> bool:
        """C-contiguous strides exactly, or at most one element (kernels.empty_for asks)."""
        contig = self.contig
        if contig is None:
            key = (self.shape, self.dtype.itemsize)
            strides = _STRIDES.get(key)
            if strides is None:
                strides = contiguous_strides(*key)
            contig = self.contig = self.strides == strides or math.prod(self.shape) <= 1
        return contig

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    @property
    def T(self):  # noqa: N802
        return self.transpose()

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    # --- views ------------------------------------------------------------------------------
    def transpose(self, axes=None):
        if axes is None:
            axes = tuple(reversed(range(len(self.shape))))
        shape, strides = self.shape, self.strides
        a = _new(MetaArray)  # (the fields are normalised already: no __init__)
        a.shape = tuple([shape[i] for i in axes])
        a.strides = tuple([strides[i] for i in axes])
        a.dtype, a.offset, a.contig = self.dtype, self.offset, None
        return a

    def __getitem__(self, index):
        # Ints and slices, one per leading dim (a trailing ... for the rest): split's, select's
        # and most indexing's form, worked out here; anything else (None, ..., a bad index) goes
        # through normalize_index, which also gives its errors.
        items = index if type(index) is tuple else (index,)
        if items and items[-1] is Ellipsis:
            items = items[:-1]
        shape, strides = self.shape, self.strides
        if len(items) <= len(shape):
            new_shape, new_strides, offset = [], [], self.offset
            for dim, item in enumerate(items):
                kind = type(item)
                if kind is slice:
                    start, stop, step = item.indices(shape[dim])
                    if step <= 0:
                        break
                    new_shape.append(max(0, (stop - start + step - 1) // step))
                    new_strides.append(strides[dim] * step)
                    offset += start * strides[dim]
                elif kind is int and -shape[dim] <= item < shape[dim]:
                    offset += (item % shape[dim]) * strides[dim]
                else:
                    break
            else:
                n = len(items)
                a = _new(MetaArray)
                a.shape = (*new_shape, *shape[n:])
                a.strides = (*new_strides, *strides[n:])
                a.dtype, a.offset, a.contig = self.dtype, offset, None
                return a
        parts = normalize_index(index, self.shape)
        shape, strides, offset, dim = [], [], self.offset, 0
        for kind, start, step, length in parts:
            if kind == "new":
                shape.append(1)
                strides.append(0)
                continue
            offset += start * self.strides[dim]
            if kind == "slice":
                shape.append(length)
                strides.append(self.strides[dim] * step)
            dim += 1
        return MetaArray(shape, self.dtype, strides, offset)

    def view_as_shape(self, shape):
        if math.prod(self.shape) > 1 and self.c_contiguous:
            # a C-contiguous array views as any shape of its size with C strides (what
            # view_strides works out, without its walk); the storage path's cache has them
            view = MetaArray.contiguous(tuple(shape), self.dtype)
            view.offset = self.offset
            return view
        strides = view_strides(self.shape, self.strides, shape)
        if strides is None:
            return None
        return MetaArray(shape, self.dtype, strides, self.offset)

    def astype(self, dtype, copy=True):
        return MetaArray(self.shape, dtype)

    # --- reading values is an error ----------------------------------------------------------
    def _no_data(self, *args, **kwargs):
        raise MetaDataError(
            "cannot read the values of a tensor on the meta device: it has a shape and a dtype "
            "but no data. Run on device 'cpu' or 'cuda' to get values."
        )

    __array__ = tolist = item = __float__ = __int__ = __bool__ = __iter__ = _no_data

    def __repr__(self) -> str:
        return f"MetaArray(shape={self.shape}, dtype={self.dtype})"


def empty(shape, dtype=np.float32):
    if isinstance(shape, int):
        shape = (shape,)
    return MetaArray(shape, dtype)


def broadcast_to(a: MetaArray, shape):
    shape = tuple(shape)
    if shape == a.shape:  # a new array of the same layout (numpy's is a new array too)
        b = _new(MetaArray)
        b.shape, b.strides, b.dtype, b.offset = a.shape, a.strides, a.dtype, a.offset
        b.contig = a.contig
        return b
    lead = len(shape) - a.ndim
    strides = [0] * lead
    for i, (n, s) in enumerate(zip(a.shape, a.strides, strict=True)):
        target = shape[lead + i]
        if n == target:
            strides.append(s)
        elif n == 1:
            strides.append(0)
        else:
            raise ValueError(f"cannot broadcast shape {a.shape} to {shape}")
    return MetaArray(shape, a.dtype, strides, a.offset)


def expand_dims(a: MetaArray, axis: int):
    shape = list(a.shape)
    strides = list(a.strides)
    stride = strides[axis] * shape[axis] if axis < len(shape) else a.itemsize
    shape.insert(axis, 1)
    strides.insert(axis, stride)
    return MetaArray(shape, a.dtype, strides, a.offset)


def squeeze(a: MetaArray, axis=None):
    if axis is None:
        axes = {i for i, n in enumerate(a.shape) if n == 1}
    else:
        axes = {axis} if isinstance(axis, int) else set(axis)
    shape = [n for i, n in enumerate(a.shape) if i not in axes]
    strides = [s for i, s in enumerate(a.strides) if i not in axes]
    return MetaArray(shape, a.dtype, strides, a.offset)


def as_strided(a: MetaArray, shape, strides):
    return MetaArray(shape, a.dtype, strides, a.offset)


def shares_memory(a, b) -> bool:
    return a is b
