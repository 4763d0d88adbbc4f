"""Creating tensors: tensor, zeros, ones, empty, full, rand, randn, arange, *_like, from_numpy."""

from __future__ import annotations

import math

import numpy as np

from engine import dtypes, kernels
from engine.backends import get_xp
from engine.backends.strided import is_dense
from engine.device import as_device
from engine.storage import wrap_storage
from engine.tensor import Tensor

_generator = np.random.default_rng(0)
_seed = 0


def manual_seed(seed: int):
    """Seed the engine's random generator (cpu and meta; cuda uses CuPy's generator)."""
    global _generator, _seed
    _seed = int(seed)
    _generator = np.random.default_rng(_seed)
    try:
        import sys

        if "cupy" in sys.modules:
            sys.modules["cupy"].random.seed(_seed)
    except Exception:
        pass
    return _generator


def initial_seed() -> int:
    return _seed


def get_generator() -> np.random.Generator:
    return _generator


def _size(size) -> tuple[int, ...]:
    if len(size) == 1 and isinstance(size[0], (tuple, list)):
        size = tuple(size[0])
    size = tuple(int(s) for s in size)
    if any(s < 0 for s in size):
        raise RuntimeError(
            f"Trying to create tensor with negative dimension {min(size)}: {list(size)}"
        )
    return size


def _finish(t: Tensor, requires_grad: bool) -> Tensor:
    if t._dtype.emulated and t._device.type != "meta":
        dtypes.round_to_bfloat16_(t._data)
    if requires_grad:
        if not t._dtype.is_floating_point:  # a factory's words (requires_grad_ has its own)
            raise RuntimeError(
                "Only Tensors of floating point and complex dtype can require gradients"
            )
        t.requires_grad_(True)
    return t


def empty(*size, dtype=None, device=None, requires_grad=False) -> Tensor:
    return _finish(
        kernels.empty(_size(size), dtypes.from_any(dtype), as_device(device)), requires_grad
    )


def zeros(*size, dtype=None, device=None, requires_grad=False) -> Tensor:
    return _finish(
        kernels.zeros(_size(size), dtypes.from_any(dtype), as_device(device)), requires_grad
    )


def ones(*size, dtype=None, device=None, requires_grad=False) -> Tensor:
    return full(
        _size(size), 1, dtype=dtypes.from_any(dtype), device=device, requires_grad=requires_grad
    )


def full(size, fill_value, *, dtype=None, device=None, requires_grad=False) -> Tensor:
    if dtype is None:
        dtype = dtypes.result_dtype_for_scalar(fill_value)
    return _finish(
        kernels.full(_size((size,)), fill_value, dtypes.from_any(dtype), as_device(device)),
        requires_grad,
    )


def rand(*size, dtype=None, device=None, requires_grad=False, generator=None) -> Tensor:
    """Uniform [0, 1)."""
    return _random("uniform", _size(size), dtype, device, requires_grad, generator)


def randn(*size, dtype=None, device=None, requires_grad=False, generator=None) -> Tensor:
    """Standard normal."""
    return _random("normal", _size(size), dtype, device, requires_grad, generator)


def _random(kind, size, dtype, device, requires_grad, generator):
    dt = dtypes.from_any(dtype)
    if not dt.is_floating_point:
        raise RuntimeError(
            f"\"{'check_uniform_bounds' if kind == 'uniform' else 'normal_kernel_cpu'}\" not implemented for '{dt.scalar_name}'"
        )
    dev = as_device(device)
    t = kernels.empty(size, dt, dev)
    fill_random_(t, kind, generator, bump_version=False)  # a new tensor starts at version 0
    return _finish(t, requires_grad)


def fill_random_(
    t: Tensor,
    kind: str,
    generator=None,
    low=0.0,
    high=1.0,
    mean=0.0,
    std=1.0,
    bump_version: bool = True,
) -> Tensor:
    """Fill t in place with uniform [low, high) or normal(mean, std) values (no temporaries)."""
    dev = t._device
    if dev.type == "meta":
        return t
    if dev.type == "cuda":
        cp = get_xp("cuda")
        vals = (
            cp.random.random(t.shape) if kind == "uniform" else cp.random.standard_normal(t.shape)
        )
        t._data[...] = vals
    else:
        gen = generator or _generator
        arr = t._data
        if arr.dtype in (np.float32, np.float64) and arr.flags.c_contiguous:
            if kind == "uniform":
                gen.random(out=arr, dtype=arr.dtype)
            else:
                gen.standard_normal(out=arr, dtype=arr.dtype)
        else:
            vals = gen.random(arr.shape) if kind == "uniform" else gen.standard_normal(arr.shape)
            arr[...] = vals
    xp = get_xp(dev.type)
    if kind == "uniform" and (low != 0.0 or high != 1.0):
        xp.multiply(t._data, high - low, out=t._data)
        xp.add(t._data, low, out=t._data)
    if kind == "normal" and (mean != 0.0 or std != 1.0):
        xp.multiply(t._data, std, out=t._data)
        xp.add(t._data, mean, out=t._data)
    if bump_version:
        t._storage.version += 1
    return t


def arange(start, end=None, step=1, *, dtype=None, device=None, requires_grad=False) -> Tensor:
    if end is None:
        start, end = 0, start
    if step == 0:
        raise RuntimeError("step must be nonzero")
    n = max(0, math.ceil((end - start) / step))
    if dtype is None:
        dtype = (
            dtypes.int64
            if all(isinstance(v, int) for v in (start, end, step))
            else dtypes.get_default_dtype()
        )
    dt = dtypes.from_any(dtype)
    dev = as_device(device)
    t = kernels.empty((n,), dt, dev)
    if dev.type != "meta":
        xp = get_xp(dev.type)
        t._data[...] = (
            xp.arange(n, dtype=np.float64 if dt.is_floating_point else np.int64) * step + start
        )
    return _finish(t, requires_grad)


def _steps(steps) -> int:
    steps = int(steps)
    if steps < 0:
        raise RuntimeError("number of steps must be non-negative")
    return steps


def _spaced(xp, start, end, steps, np_dtype, integral=False):
    """torch's linspace kernel: start + i * step for the first half, end - (steps - 1 - i) *
    step for the rest (so both ends are exact), in the result's floating dtype (an integral
    result's ends are truncated to integers first, as torch's)."""
    if integral:
        start, end = int(start), int(end)
    if steps == 1:
        return xp.full((1,), start, dtype=np_dtype)
    step = (np_dtype.type(end) - np_dtype.type(start)) / np_dtype.type(steps - 1)
    i = xp.arange(steps, dtype=np_dtype)
    half = steps // 2
    out = xp.empty(steps, dtype=np_dtype)
    out[:half] = np_dtype.type(start) + step * i[:half]
    out[half:] = np_dtype.type(end) - step * (np_dtype.type(steps - 1) - i[half:])
    return out


def _one_dim(steps, dtype, device, requires_grad, values) -> Tensor:
    """A new 1-D tensor of `steps` elements, one allocation, filled with values(xp, dt) (a
    float array rounded to the result dtype; not called on meta or for no elements)."""
    steps = _steps(steps)
    dt = dtypes.from_any(dtype)
    dev = as_device(device)
    t = kernels.empty((steps,), dt, dev)
    if dev.type != "meta" and steps:
        t._data[...] = values(get_xp(dev.type), dt, steps).astype(dt.np, copy=False)
    return _finish(t, requires_grad)


def linspace(start, end, steps, *, dtype=None, device=None, requires_grad=False) -> Tensor:
    """`steps` values evenly spaced from start to end, both included (torch's formula)."""

    def values(xp, dt, n):
        work = np.dtype(dt.np) if dt.is_floating_point and not dt.emulated else np.dtype("f8")
        return _spaced(xp, start, end, n, work, not dt.is_floating_point)

    return _one_dim(steps, dtype, device, requires_grad, values)


def logspace(
    start, end, steps, base=10.0, *, dtype=None, device=None, requires_grad=False
) -> Tensor:
    """base ** linspace(start, end, steps): the exponents and the power in float64, then
    rounded to the result dtype (float32 results as torch's; float64 within an ulp of its
    std::pow)."""

    def values(xp, dt, n):
        exps = _spaced(xp, start, end, n, np.dtype("f8"), not dt.is_floating_point)
        return xp.power(np.float64(base), exps)

    return _one_dim(steps, dtype, device, requires_grad, values)


def eye(n, m=None, *, dtype=None, device=None, requires_grad=False) -> Tensor:
    """An n x m matrix with ones on the diagonal: one allocation, as torch's."""
    n = int(n)
    m = n if m is None else int(m)
    if n < 0:
        raise RuntimeError(f"n must be greater or equal to 0, got {n}")
    if m < 0:
        raise RuntimeError(f"m must be greater or equal to 0, got {m}")
    dt = dtypes.from_any(dtype)
    dev = as_device(device)
    t = kernels.zeros((n, m), dt, dev)
    if dev.type != "meta":
        diagonal = get_xp(dev.type).arange(min(n, m))
        t._data[diagonal, diagonal] = 1
    return _finish(t, requires_grad)


def _tri_indices(which, row, col, offset, dtype, device) -> Tensor:
    if row < 0:
        raise RuntimeError(f"row must be non-negative, got{row}")
    if col < 0:
        raise RuntimeError(f"col must be non-negative, got{col}")
    dt = dtypes.from_any(dtype) if dtype is not None else dtypes.int64
    if dt not in (dtypes.int64, dtypes.int32):
        raise RuntimeError(f"\"{which}_indices\" not implemented for '{dt.scalar_name}'")
    rows, cols = getattr(np, which + "_indices")(int(row), int(offset), int(col))
    return tensor(np.stack([rows, cols]), dtype=dt, device=device)


def tril_indices(row, col, offset=0, *, dtype=None, device=None, layout=None) -> Tensor:
    """[2, N]: the row and column of each element of a row x col matrix's lower triangle (on or
    below diagonal `offset`), in row-major order."""
    return _tri_indices("tril", row, col, offset, dtype, device)


def triu_indices(row, col, offset=0, *, dtype=None, device=None, layout=None) -> Tensor:
    """[2, N]: the upper triangle's indices (on or above diagonal `offset`), row-major."""
    return _tri_indices("triu", row, col, offset, dtype, device)


def dense_strides_like(shape, strides) -> tuple[int, ...]:
    """The strides of `empty_like(x)` (memory_format=torch.preserve_format) for a tensor of
    this shape and these strides: its own when it is non-overlapping and dense, else a dense
    layout with its dims in the same order (PyTorch's infer_dense_strides)."""
    n = len(shape)
    if is_dense(shape, strides):
        return tuple(strides)
    perm = kernels.stride_order(shape, [strides])  # fastest first
    out = [0] * n
    cur = 1
    for d in perm:
        out[d] = cur
        if shape[d] > 1:
            cur *= shape[d]
    return tuple(out)


def _like_layout(t: Tensor, input, memory_format) -> Tensor:
    """t (a new C-contiguous tensor of input's shape) laid out as `memory_format` asks:
    preserve_format (the default) follows the input's layout, as PyTorch's empty_like."""
    if memory_format is None:
        # the common case: a C-contiguous input of t's itemsize gives t's layout as it is
        src, new = input._data, t._data
        if src.strides == new.strides and src.itemsize == new.itemsize:
            return t
    elif memory_format != "preserve_format":
        if memory_format == "contiguous_format":
            return t
        raise RuntimeError(f"memory_format {memory_format!r} is not supported by the engine")
    from engine.backends.strided import contiguous_strides

    shape = tuple(input.shape)
    want = dense_strides_like(shape, input.stride())
    if want == contiguous_strides(shape, 1):
        return t
    return kernels.relayout(t, want)


def _like(fn, fill=None):
    def like(input, *, dtype=None, device=None, requires_grad=False, memory_format=None, **kw):
        t = fn(
            input.shape,
            dtype=dtype or input._dtype,
            device=device or input._device,
            **kw,
        )
        return _finish(_like_layout(t, input, memory_format), requires_grad)

    like.__name__ = fn.__name__ + "_like"
    return like


zeros_like = _like(zeros)
ones_like = _like(ones)
empty_like = _like(empty)
rand_like = _like(rand)
randn_like = _like(randn)


def full_like(
    input, fill_value, *, dtype=None, device=None, requires_grad=False, memory_format=None
):
    t = full(input.shape, fill_value, dtype=dtype or input._dtype, device=device or input._device)
    return _finish(_like_layout(t, input, memory_format), requires_grad)


def _infer_dtype(arr: np.ndarray, data) -> dtypes.dtype:
    if isinstance(data, np.ndarray) or isinstance(data, np.generic):
        return dtypes.from_numpy_dtype(arr.dtype)
    kind = arr.dtype.kind
    if kind == "f":
        return dtypes.get_default_dtype()
    if kind in "iu":
        return dtypes.int64
    if kind == "b":
        return dtypes.bool_
    raise TypeError(f"can't make a tensor from values of type {arr.dtype}")


def tensor(data, *, dtype=None, device=None, requires_grad=False) -> Tensor:
    """A new tensor holding a copy of `data` (nested lists, numbers, numpy arrays, tensors)."""
    if isinstance(data, Tensor):
        data = data.detach().numpy() if data._device.type == "cpu" else data._data
    try:
        arr = np.asarray(data)
    except ValueError as exc:
        raise ValueError(f"can't make a tensor from {type(data).__name__}: {exc}") from None
    if arr.dtype == object:
        raise TypeError("can't make a tensor from ragged nested sequences or objects")
    dt = dtypes.from_any(dtype) if dtype is not None else _infer_dtype(arr, data)
    dev = as_device(device)
    t = kernels.empty(arr.shape, dt, dev)
    if dev.type == "cpu":
        np.copyto(t._data, arr, casting="unsafe")
    elif dev.type == "cuda":
        t._data[...] = get_xp("cuda").asarray(arr.astype(dt.np))
    return _finish(t, requires_grad)


def as_tensor(data, dtype=None, device=None) -> Tensor:
    if isinstance(data, Tensor):
        return data.to(dtype=dtype, device=device) if (dtype or device) else data
    if (
        isinstance(data, np.ndarray)
        and dtype is None
        and (device is None or as_device(device).type == "cpu")
    ):
        return from_numpy(data)
    return tensor(data, dtype=dtype, device=device)


def from_numpy(array: np.ndarray) -> Tensor:
    """A cpu tensor sharing memory with `array` (writes show on both sides)."""
    if not isinstance(array, np.ndarray):
        raise TypeError(f"expected np.ndarray (got {type(array).__name__})")
    dt = dtypes.from_numpy_dtype(array.dtype)
    dev = as_device("cpu")
    s = wrap_storage(array, dev)
    return Tensor._make(array, s, dt, dev)
