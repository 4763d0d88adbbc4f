"""Reuse of freed cpu memory: large storage and scratch arrays go back to a cache by size.

A training step frees and allocates the same sizes every step. Given back to malloc, a large
array's pages are often returned to the system (glibc trims the heap top, and maps big blocks
on their own), so the next step's array of that size starts on fresh pages, and the kernel
zeroes every page on first touch: a 2 MiB max-pool index array cost about as much in page
faults as the pooling itself. The cache keeps those arrays (at least MIN_BYTES) and hands them
back for the next request of the same byte size, as PyTorch's CUDA caching allocator does on a
GPU (PyTorch on cpu leaves this to malloc).

This changes no figure the engine reports: what the allocator's accounting model charges is
decided apart (engine.allocator); only where the numpy memory comes from changes.

An array is reused only when nothing else can reach its memory: the dying storage (or scratch
buffer) held the last reference to it and to the array that owns the memory (a numpy view keeps
its owner alive, so any view still held elsewhere, a `.numpy()` result kept by the user, a
`from_numpy` array the caller still has, shows as one more reference). Counts are measured once
at import on arrays known to be unshared, so the test does not depend on the interpreter's
reference-count details.

`engine.memory.empty_cache("cpu")` empties it; `set_limit(nbytes)` bounds it (default 1 GiB;
0 turns it off). Oldest sizes are dropped first when a new array would pass the limit.

Kernels' own numpy temporaries (workspace) come from buffers kept per thread for the same
reason: one of a megabyte or so is mapped fresh by malloc when glibc's mmap threshold is below
it, and glibc moves that threshold with what the process freed before, so a kernel's time
moved with unrelated allocations (attention's backward in the transformer step faulted in
~1400 pages, ~1.4 us each here, once the storages above stopped reaching malloc).
"""

from __future__ import annotations

import math
import sys
import threading
import weakref

import numpy as np

MIN_BYTES = 1 << 16
_limit = 1 << 30
_cached = 0
_free: dict[int, list] = {}  # nbytes -> flat uint8 arrays (each the only view of its owner)
_getrefcount = sys.getrefcount
_lock = threading.Lock()  # storages may die on any thread
_ndarray = np.ndarray
_uint8 = np.uint8
_prod = math.prod


def _counts(holder):
    """(references to holder.data, references to the array that owns its memory, seen through
    data.base; 0 when data owns it), or None for what is not a numpy array. Called with no other
    local reference to either, in give() as in the calibration."""
    data = holder.data
    if type(data) is not _ndarray:
        return None
    base = data.base
    if base is None:
        return _getrefcount(data), 0
    return _getrefcount(data), _getrefcount(base)


class _Probe:
    __slots__ = ("data",)


def _calibrate():
    owning, view = _Probe(), _Probe()
    owning.data = np.empty(8, np.float32)
    view.data = np.empty(8, np.uint8).view(np.float32).reshape(2, 1)
    return _counts(owning), _counts(view)


_OWNING, _VIEW = _calibrate()


def give(holder) -> None:
    """Keep holder.data's memory for reuse if nothing else can reach it (holder: a dying cpu
    Storage or Scratch whose `data` is a numpy array of at least MIN_BYTES)."""
    global _cached
    counts = _counts(holder)  # first, while no local here refers to the arrays
    if counts == _OWNING:
        owner = holder.data
    elif counts == _VIEW:
        owner = holder.data.base
        if type(owner) is not _ndarray or owner.base is not None:
            return
    else:
        return
    if not owner.flags.owndata:
        return
    if not (owner.flags.c_contiguous and owner.flags.writeable):
        return
    nbytes = owner.nbytes
    if nbytes > _limit:
        return
    flat = owner.reshape(-1).view(_uint8)
    with _lock:
        while _cached + nbytes > _limit and _free:
            _evict_oldest()
        _free.setdefault(nbytes, []).append(flat)
        _cached += nbytes


def _evict_oldest() -> None:
    """(with _lock held)"""
    global _cached
    size = next(iter(_free))
    arrays = _free[size]
    arrays.pop(0)
    _cached -= size
    if not arrays:
        del _free[size]


def take(shape, np_dtype):
    """A cached array of exactly the bytes of `shape` in `np_dtype`, viewed so, or None."""
    global _cached
    nbytes = _prod(shape) * np_dtype.itemsize
    if nbytes not in _free:
        return None
    with _lock:
        arrays = _free.get(nbytes)
        if not arrays:
            return None
        flat = arrays.pop()
        if not arrays:
            del _free[nbytes]
        _cached -= nbytes
    return flat.view(np_dtype).reshape(shape)


WORKSPACE_MAX_BYTES = 1 << 24  # a temporary larger than this is a new array each call


class _Buffers:
    """One thread's workspace buffers, `arrays`: key -> flat uint8 array (weakly listed in
    _threads, so that clear() reaches every live thread's)."""

    __slots__ = ("arrays", "__weakref__")

    def __init__(self):
        self.arrays = {}


class _PerThread(threading.local):
    def __init__(self):
        self.buffers = _Buffers()
        _threads.add(self.buffers)


_threads: weakref.WeakSet = weakref.WeakSet()  # every live thread's _Buffers
_per_thread = _PerThread()


def workspace(key, shape, np_dtype):
    """An uninitialised numpy array of `shape` on a buffer kept for this thread and `key`
    (grown when a larger one is asked for), or a new array past WORKSPACE_MAX_BYTES. For a
    kernel's temporaries: not charged to any allocator, as numpy temporaries are not (PyTorch's
    kernels keep such tiles in buffers of their own). The caller is done with the array before
    it asks for `key` again on the same thread. A thread's buffers go with the thread; clear()
    drops every thread's (one in use stays alive through its view until the kernel lets go)."""
    np_dtype = np.dtype(np_dtype)
    nbytes = _prod(shape) * np_dtype.itemsize
    if nbytes > WORKSPACE_MAX_BYTES:
        return np.empty(shape, np_dtype)
    buffers = _per_thread.buffers.arrays
    buf = buffers.get(key)
    if buf is None or buf.nbytes < nbytes:
        buf = buffers[key] = np.empty(max(nbytes, MIN_BYTES), _uint8)
    return buf[:nbytes].view(np_dtype).reshape(shape)


def workspace_bytes() -> int:
    """Bytes of workspace buffers held by the live threads."""
    return sum(b.nbytes for buffers in list(_threads) for b in list(buffers.arrays.values()))


def cached_bytes() -> int:
    return _cached


def clear() -> None:
    """Give every cached array and workspace buffer back to malloc."""
    global _cached
    with _lock:
        _free.clear()
        _cached = 0
    for buffers in list(_threads):
        buffers.arrays.clear()


def set_limit(nbytes: int) -> None:
    """At most `nbytes` cached (0: no caching); cached arrays past it are dropped now."""
    global _limit
    if nbytes < 0:
        raise ValueError(f"host cache limit must be >= 0, got {nbytes}")
    _limit = int(nbytes)
    with _lock:
        while _cached > _limit and _free:
            _evict_oldest()


def get_limit() -> int:
    return _limit
