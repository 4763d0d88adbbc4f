"""Stride arithmetic shared by every backend (numpy, cupy and meta views are built from it)."""

from __future__ import annotations

import math


def contiguous_strides(shape: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    """Byte strides of a C-contiguous array of this shape."""
    strides = []
    acc = itemsize
    for n in reversed(shape):
        strides.append(acc)
        acc *= max(n, 1)
    return tuple(reversed(strides))


def is_dense(shape, strides, unit: int = 1) -> bool:
    """PyTorch's is_non_overlapping_and_dense: the strides (in units of `unit`: 1 for element
    strides, the itemsize for numpy's byte strides) are a contiguous layout of some permutation
    of the dims; dims of fewer than 2 elements do not count."""
    need = unit
    for n, st in sorted(zip(shape, strides, strict=True), key=lambda p: abs(p[1])):
        if n < 2:
            continue
        if st != need:
            return False
        need *= n
    return True


# view_strides' answers for the (old shape, old strides, new shape) tuples asked lately: a
# model asks the same few views in every layer (GPT-2 small's step on meta: 480 walks of ~260
# bytecodes each, for a dozen distinct questions).
_VIEWS: dict[tuple, tuple[int, ...] | None] = {}


def view_strides(old_shape, old_strides, new_shape) -> tuple[int, ...] | None:
    """Strides for viewing (old_shape, old_strides) as new_shape without copying, or None.

    A port of PyTorch's `computeStride` (aten/src/ATen/TensorUtils.cpp): walk the old dims from
    the back in chunks that are contiguous among themselves and map them onto new dims.
    """
    if type(old_shape) is tuple and type(old_strides) is tuple and type(new_shape) is tuple:
        key = (old_shape, old_strides, new_shape)
        found = _VIEWS.get(key, _VIEWS)
        if found is not _VIEWS:
            return found
        if len(_VIEWS) > 4096:
            _VIEWS.clear()
        found = _VIEWS[key] = _walk(old_shape, old_strides, new_shape)
        return found
    return _walk(old_shape, old_strides, new_shape)


def _walk(old_shape, old_strides, new_shape) -> tuple[int, ...] | None:
    """view_strides' answer, worked out."""
    numel = math.prod(old_shape)
    if numel == 0:
        if tuple(old_shape) == tuple(new_shape):
            return tuple(old_strides)
        return contiguous_strides(tuple(new_shape), 1)  # any strides work for an empty view
    new_strides = [0] * len(new_shape)
    if not old_shape:  # 0-d -> all ones
        return tuple(0 for _ in new_shape) if new_shape else ()
    view_d = len(new_shape) - 1
    chunk_base_stride = old_strides[-1]
    tensor_numel = 1
    view_numel = 1
    for tensor_d in range(len(old_shape) - 1, -1, -1):
        tensor_numel *= old_shape[tensor_d]
        if tensor_d == 0 or (
            old_shape[tensor_d - 1] != 1
            and old_strides[tensor_d - 1] != tensor_numel * chunk_base_stride
        ):
            while view_d >= 0 and (view_numel < tensor_numel or new_shape[view_d] == 1):
                new_strides[view_d] = view_numel * chunk_base_stride
                view_numel *= new_shape[view_d]
                view_d -= 1
            if view_numel != tensor_numel:
                return None
            if tensor_d > 0:
                chunk_base_stride = old_strides[tensor_d - 1]
                tensor_numel = 1
                view_numel = 1
    if view_d != -1:
        return None
    return tuple(new_strides)


def infer_shape(shape, numel: int) -> tuple[int, ...]:
    """Resolve one -1 in a requested shape; raise with both sizes when it cannot work."""
    for s in shape:  # the common case first, without a generator (this runs on every view)
        if type(s) is not int or s < 0:
            break
    else:
        if math.prod(shape) == numel:
            return tuple(shape)
    if shape.count(-1) == 1 and numel:  # one dimension to infer from ints (view(-1), ...)
        rest = 1
        for s in shape:
            if type(s) is not int or (s < 0 and s != -1):
                break
            rest *= s
        else:
            rest = -rest
            if rest and not numel % rest:
                i = shape.index(-1)
                return (*shape[:i], numel // rest, *shape[i + 1 :])
    shape = tuple(int(s) for s in shape)
    neg = [i for i, s in enumerate(shape) if s == -1]
    if len(neg) > 1:
        raise RuntimeError("only one dimension can be inferred")
    known = math.prod(s for s in shape if s != -1)
    if neg:
        if known == 0 or numel % known:
            raise RuntimeError(f"shape '{list(shape)}' is invalid for input of size {numel}")
        shape = shape[: neg[0]] + (numel // known,) + shape[neg[0] + 1 :]
    if any(s < 0 for s in shape):
        raise RuntimeError(f"invalid shape dimension in {list(shape)}")
    if math.prod(shape) != numel:
        raise RuntimeError(f"shape '{list(shape)}' is invalid for input of size {numel}")
    return shape


def is_contiguous(shape, strides, itemsize) -> bool:
    """torch's is_contiguous on numpy-style byte strides: C-contiguous, size-1 dims aside; no
    elements at all is contiguous whatever the strides."""
    if 0 in shape:
        return True
    expected = itemsize
    for n, s in zip(reversed(shape), reversed(strides), strict=True):
        if n != 1 and s != expected:
            return False
        expected *= n
    return True


def normalize_index(index, shape):
    """Turn a basic index (ints, slices, None, Ellipsis) into per-dim parts.

    Returns (new_shape, per-dim list of (kind, start, step, length)) where kind is 'int', 'slice'
    or 'new'. Raises IndexError for out-of-range ints, TypeError for advanced indexing.
    """
    if not isinstance(index, tuple):
        index = (index,)
    n_ell = sum(1 for i in index if i is Ellipsis)
    if n_ell > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    consumed = sum(1 for i in index if i is not None and i is not Ellipsis)
    if consumed > len(shape):
        raise IndexError(f"too many indices for tensor of dimension {len(shape)}")
    if n_ell:
        pos = index.index(Ellipsis)
        index = index[:pos] + (slice(None),) * (len(shape) - consumed) + index[pos + 1 :]
    else:
        index = index + (slice(None),) * (len(shape) - consumed)
    parts = []
    dim = 0
    for item in index:
        if item is None:
            parts.append(("new", 0, 1, 1))
            continue
        size = shape[dim]
        if (
            isinstance(item, bool)
            or not isinstance(item, (int, slice))
            and not hasattr(item, "__index__")
        ):
            raise TypeError(
                f"unsupported index {item!r}: only integers, slices, None and ... are supported"
            )
        if isinstance(item, slice):
            start, stop, step = item.indices(size)
            if step <= 0:
                raise ValueError("step must be greater than zero")
            length = max(0, (stop - start + step - 1) // step)
            parts.append(("slice", start, step, length))
        else:
            i = int(item)
            if i < -size or i >= size:
                raise IndexError(f"index {i} is out of bounds for dimension {dim} with size {size}")
            parts.append(("int", i % size, 1, 1))
        dim += 1
    return parts
