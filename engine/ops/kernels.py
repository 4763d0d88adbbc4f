"""Raw kernels: allocate through the tracked allocator and compute with `xp`. No autograd here.

Every result buffer comes from `empty()` (so the allocator sees it). Hidden numpy temporaries
are avoided where possible; where a kernel needs scratch space it says so:
- `axpy`: blocked loop with a scratch of at most SCRATCH_ELEMS elements, not charged (PyTorch's
  fused kernels keep the same values in registers; charging it would misstate the program).
- anything larger is allocated with `empty()` and therefore charged (it shows as a temporary).
Large contiguous elementwise work is split across threads (numpy releases the GIL in ufuncs).
"""

from __future__ import annotations

import math
import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from engine.backends import get_xp
from engine.storage import new_storage
from engine.tensor import Tensor

SCRATCH_ELEMS = 1 << 14
PARALLEL_MIN_ELEMS = 1 << 18
_threads = max(1, min(os.cpu_count() or 1, 8))
_pool: ThreadPoolExecutor | None = None


def set_num_threads(n: int) -> None:
    """Threads for large elementwise kernels on cpu (like torch.set_num_threads)."""
    global _threads, _pool
    _threads = max(1, int(n))
    if _pool is not None:
        _pool.shutdown(wait=False)
        _pool = None


def get_num_threads() -> int:
    return _threads


def _get_pool() -> ThreadPoolExecutor:
    global _pool
    if _pool is None:
        _pool = ThreadPoolExecutor(max_workers=_threads, thread_name_prefix="engine-kernel")
    return _pool


def empty(shape, dtype, device) -> Tensor:
    s = new_storage(tuple(shape), dtype.np, device)
    return Tensor._make(s.data, s, dtype, device)


def zeros(shape, dtype, device) -> Tensor:
    t = empty(shape, dtype, device)
    if device.type != "meta":
        t._data.fill(0)
    return t


def full(shape, value, dtype, device) -> Tensor:
    t = empty(shape, dtype, device)
    if device.type != "meta":
        t._data.fill(value)
    return t


def ones_like_new(t: Tensor) -> Tensor:
    return full(t.shape, 1, t._dtype, t._device)


def xp_of(t: Tensor):
    return get_xp(t._device.type)


def xp_of_device(dev):
    return get_xp(dev.type)


def _flat(a):
    """A 1-d view of a C-contiguous array, or None."""
    if a.flags.c_contiguous:
        return a.reshape(-1)
    return None


def ufunc(f, *args, out):
    """out[...] = f(*args) for numpy ufuncs, splitting big contiguous same-shape work across threads.

    `args` are arrays or Python scalars; `out` is an array. Results are identical to one call.
    """
    n = out.size
    if _threads > 1 and n >= PARALLEL_MIN_ELEMS and type(out) is np.ndarray:
        flats = []
        ok = True
        for a in args:
            if isinstance(a, np.ndarray):
                if a.shape != out.shape:
                    ok = False
                    break
                fa = _flat(a)
                if fa is None:
                    ok = False
                    break
                flats.append(fa)
            else:
                flats.append(a)
        fo = _flat(out) if ok else None
        if fo is not None:
            k = _threads
            step = -(-n // k)
            bounds = [(i, min(i + step, n)) for i in range(0, n, step)]

            def part(b):
                lo, hi = b
                f(*[x[lo:hi] if isinstance(x, np.ndarray) else x for x in flats], out=fo[lo:hi])

            list(_get_pool().map(part, bounds))
            return out
    f(*args, out=out)
    return out


def run_parallel(func, out, *arrays):
    """Call func(*chunks, out_chunk) over contiguous equal-shape arrays split across threads."""
    n = out.size
    if _threads > 1 and n >= PARALLEL_MIN_ELEMS and type(out) is np.ndarray:
        fo = _flat(out)
        flats = [_flat(a) if isinstance(a, np.ndarray) and a.shape == out.shape else None for a in arrays]
        if fo is not None and all(f is not None for f in flats):
            step = -(-n // _threads)
            bounds = [(i, min(i + step, n)) for i in range(0, n, step)]
            list(_get_pool().map(lambda b: func(*[f[b[0]:b[1]] for f in flats], fo[b[0]:b[1]]), bounds))
            return out
    func(*arrays, out)
    return out


def copy_new(t: Tensor, contiguous: bool = True) -> Tensor:
    out = empty(t.shape, t._dtype, t._device)
    if t._device.type != "meta":
        xp_of(t).copyto(out._data, t._data)
    return out


def copy_into(dst: Tensor, src) -> None:
    if dst._device.type == "meta":
        return
    data = src._data if isinstance(src, Tensor) else src
    xp_of(dst).copyto(dst._data, data, casting="unsafe")


def fill_(t: Tensor, value) -> None:
    if t._device.type != "meta":
        t._data[...] = value


def add_into(dst: Tensor, src: Tensor) -> None:
    if dst._device.type != "meta":
        xp = xp_of(dst)
        if xp is np:
            ufunc(np.add, dst._data, src._data, out=dst._data)
        else:
            xp.add(dst._data, src._data, out=dst._data)


def add_new(a: Tensor, b: Tensor) -> Tensor:
    shape = np.broadcast_shapes(a.shape, b.shape)
    out = empty(shape, a._dtype, a._device)
    if a._device.type != "meta":
        xp = xp_of(a)
        if xp is np:
            ufunc(np.add, a._data, b._data, out=out._data)
        else:
            xp.add(a._data, b._data, out=out._data)
    return out


def axpy(out, a, b, alpha, xp=np):
    """out = a + alpha * b without a full-size temporary (a, b, out arrays; b broadcastable)."""
    if alpha == 1:
        xp.add(a, b, out=out)
        return out
    if not isinstance(b, (np.ndarray,)) and xp is np:
        xp.add(a, alpha * b, out=out)
        return out
    if xp is not np:
        xp.add(a, b * alpha, out=out)  # CuPy's temporary shows through the memory hook
        return out
    if b.shape == out.shape and a.shape == out.shape:
        fo, fa, fb = _flat(out), _flat(a), _flat(b)
        if fo is not None and fa is not None and fb is not None:
            n = fo.size
            step = SCRATCH_ELEMS

            def part(bounds):
                lo, hi = bounds
                scratch = np.empty(min(step, hi - lo), dtype=fo.dtype)
                for i in range(lo, hi, step):
                    j = min(i + step, hi)
                    s = scratch[: j - i]
                    np.multiply(fb[i:j], alpha, out=s)
                    np.add(fa[i:j], s, out=fo[i:j])

            if _threads > 1 and n >= PARALLEL_MIN_ELEMS:
                per = -(-n // _threads)
                list(_get_pool().map(part, [(i, min(i + per, n)) for i in range(0, n, per)]))
            else:
                part((0, n))
            return out
    # General broadcast case: a charged temporary of b's size (visible as "temporary").
    tmp = empty(b.shape, _dtype_of(b), _CPU())
    np.multiply(b, alpha, out=tmp._data)
    np.add(a, tmp._data, out=out)
    return out


def _CPU():  # noqa: N802
    from engine.device import CPU

    return CPU


def _dtype_of(arr):
    from engine.dtypes import from_numpy_dtype

    return from_numpy_dtype(arr.dtype)


def numel(shape) -> int:
    return math.prod(shape)
