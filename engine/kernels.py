"""Raw kernels: allocate through the tracked allocator and compute with `xp`. No autograd here.

Every result buffer comes from `empty()` (so the allocator sees it). Hidden numpy temporaries
are avoided where possible; where a kernel needs scratch space it says so:
- bounded scratch (at most SCRATCH_ELEMS elements per block, see `blocked`) is not charged:
  `axpy`, `erf_into`. PyTorch's fused kernels keep the same values in registers; charging
  them would misstate the program.
- anything larger is allocated with `empty()` and therefore charged (it shows as a temporary),
  unless PyTorch's kernel does not allocate it or it is device-specific workspace (softmax's
  per-row max and sum, a convolution's columns): that is a `Scratch`, reported apart from
  memory_allocated (engine.memory.memory_scratch) so the allocated figures stay PyTorch's.

Speed: work of PARALLEL_MIN_ELEMS elements or more is split across `get_num_threads()` threads
(numpy releases the GIL in ufuncs), in CHUNKS_PER_THREAD chunks per thread so that a thread
slowed by a busy core takes fewer (`ufunc`, `run_parallel`, `extremum_scalar`, `axpy`).
One owner of the cores at a time (`pool_threads`): while BLAS's own threads are still spinning
after a matrix product (OpenBLAS keeps them busy-waiting for a while), the engine's kernels run
on the calling thread instead of putting two more threads on the same cores.
"""

from __future__ import annotations

import itertools
import math
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from engine import _blas_env, host_cache
from engine.allocator import tracked as _tracked
from engine.allocator.tracked import _storage_ids
from engine.backends import get_xp
from engine.backends.meta import MetaArray
from engine.backends.strided import is_dense
from engine.errors import OutOfMemoryError
from engine.storage import (
    Storage,
    _MetaStorage,
    allocator_for,
    cuda_array,
)
from engine.tensor import Tensor

_ndarray = np.ndarray
_np_empty = np.empty
_CACHE_MIN = host_cache.MIN_BYTES
_cache_take = host_cache.take
_prod = math.prod
_INT64_MAX = (1 << 63) - 1

SCRATCH_ELEMS = 1 << 14
# Python's pool pays off from about 4M elements: a map costs ~100 us on a 2-core VM (two GIL
# hand-offs per wake), and from 256K to 1M float32 elements a split relu, exp or add took 1.1-4x
# one thread's time (4M: even; 16M: 1.6-1.9x sooner). engine._native's loops split from far
# less on threads of their own (NATIVE_PARALLEL_MIN).
PARALLEL_MIN_ELEMS = 1 << 22


def _timeout_n(value) -> int:
    """The exponent of OpenBLAS's thread timeout for an OPENBLAS_THREAD_TIMEOUT value (an int
    or the variable's text; OpenBLAS clamps a positive one to 4..30, else keeps 28)."""
    try:
        n = int(value or 0)
    except ValueError:
        n = 0
    return min(max(n, 4), 30) if n > 0 else 28


def _spin_s(n: int) -> float:
    """How long OpenBLAS's threads keep the cores after a product that ran on them: they spin
    2**n cycles before they sleep (n: _timeout_n), here at 2.5 GHz (28: ~0.1 s)."""
    return 2.0**n / 2.5e9


# engine/_blas_env.py sets OPENBLAS_THREAD_TIMEOUT to 4 (6 ns) unless the user set it; where
# numpy loaded OpenBLAS before, it holds its default until _quiet_blas has it take the value
# (before the engine's first product on its threads)
BLAS_SPIN_S = _spin_s(
    _timeout_n(os.environ.get("OPENBLAS_THREAD_TIMEOUT") if _blas_env.TOLD else None)
)
_blas_quiet = False  # True once _quiet_blas ran
# OpenBLAS runs a product on one thread up to this m*n*k (65536 * GEMM_MULTITHREAD_THRESHOLD 4)
BLAS_THREADED_MNK = 1 << 18
_blas_last = -math.inf  # perf_counter() when the last BLAS-threaded product ended
_perf = time.perf_counter
_threads = max(1, min(os.cpu_count() or 1, 8))
_pool: ThreadPoolExecutor | None = None


# Set on the pool's own threads: work they run that would split again (a convolution's parts
# calling gemm, an activation inside a part) runs on that thread, never waits on the pool it
# is part of (with every pool thread waiting for queued work, nothing would run it).
class _PoolMark(threading.local):
    yes = False  # True on the pool's threads (_mark_pool_thread)


_on_pool = _PoolMark()


def set_num_threads(n: int, *, own_blas: bool | None = None) -> None:
    """Threads for the engine's cpu kernels (like torch.set_num_threads).

    own_blas=True makes the engine the one owner of the thread budget: numpy's BLAS runs
    single-threaded and large matrix products are split across the engine's pool (gemm below);
    False (the default) leaves BLAS its own threads. Measured on this 2-core machine
    (bench/bench_training.py): owning the budget makes loaded steps 1.5-4x faster (MLP 108 ->
    26 ms with two busy processes) and quiet ones up to 1.5-2x slower (small CNN 37 -> 56-71
    ms), so it is a choice, not the default."""
    global _threads, _pool, _own_blas, _contended
    _threads = max(1, int(n))
    if own_blas is not None:
        _own_blas = bool(own_blas)
        _contended = None  # (BLAS's count is set here either way)
        _set_blas_threads(1 if _own_blas else None)
    if _pool is not None:
        _pool.shutdown(wait=False)
        _pool = None


# --- matrix products on the engine's pool ---------------------------------------------------
# numpy's BLAS (OpenBLAS) has threads of its own, which spin for up to ~0.1 s after every
# product; next to the engine's pool or a busy machine they oversubscribe the cores (a 2-core
# machine with two busy processes ran the MLP step 4x slower than with BLAS single-threaded).
# With set_num_threads(n, own_blas=True) the engine owns the budget: BLAS single-threaded and
# large products split across the engine's pool, whose idle threads sleep. The limit goes
# through threadpoolctl (a dependency of memprof; the engine alone runs without it).
GEMM_SPLIT_MACS = 1 << 21  # multiply-adds below which one call is quicker than a split
_own_blas = False
_blas_default = None  # BLAS's own thread count, to give back


def _set_blas_threads(n: int | None) -> None:
    global _blas_default
    try:
        from threadpoolctl import threadpool_info, threadpool_limits
    except ImportError:
        return
    if _blas_default is None:
        counts = [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]
        _blas_default = max(counts) if counts else 1
    threadpool_limits(n if n is not None else _blas_default, user_api="blas")


# --- per-sample work on the pool, BLAS single-threaded meanwhile ----------------------------
# A convolution runs one product per sample. With BLAS's own threads each product is a hand-off
# between two threads, and when other processes share the cores every hand-off waits for a
# descheduled thread (a 3x3 convolution step 2.4x torch's with two busy processes). When each
# sample's product is large, the samples are split across the engine's pool instead, each part's
# products single-threaded on its own thread: one hand-off per op. Small products stay on
# BLAS's threads: a part's short numpy calls between them would wait on the GIL.
SPLIT_SAMPLE_MACS = 1 << 24  # multiply-adds of one sample's product from which parts pay
_blas_ctl = None  # threadpoolctl's controllers of numpy's BLAS; False: none to be had


def _blas_controllers():
    global _blas_ctl
    if _blas_ctl is None:
        try:
            from threadpoolctl import ThreadpoolController

            ctls = [c for c in ThreadpoolController().lib_controllers if c.user_api == "blas"]
        except Exception:  # threadpoolctl missing, or it cannot read the libraries
            ctls = []
        _blas_ctl = ctls or False
    return _blas_ctl


def _blas_to_one(ctls) -> list:
    """Hold these BLAS controllers to one thread; returns [(controller, its count)] for
    _blas_back."""
    held = [(c, c.get_num_threads()) for c in ctls]
    for c in ctls:
        c.set_num_threads(1)
    return held


def _blas_back(held) -> None:
    """Give the controllers of _blas_to_one their thread counts back."""
    for c, count in held:
        c.set_num_threads(count)


def split_ranges(n: int, sample_macs: int, per_thread: int = 1) -> list[tuple[int, int]]:
    """Contiguous ranges of range(n) (samples, or output channels) for run_parts, about
    `per_thread` for each of the engine's threads (at most n): one range when each product is
    small (below SPLIT_SAMPLE_MACS), the pool has one thread, or BLAS's threads cannot be
    limited (threadpoolctl missing)."""
    if min(_threads, n) < 2 or sample_macs < SPLIT_SAMPLE_MACS:
        return [(0, n)]
    if not (_own_blas or _blas_controllers()):
        return [(0, n)]
    parts = min(_threads * per_thread, n)
    step = -(-n // parts)
    return [(lo, min(lo + step, n)) for lo in range(0, n, step)]


def run_parts(fn, ranges) -> None:
    """fn(i, lo, hi) for each (lo, hi) = ranges[i], BLAS single-threaded meanwhile: this thread
    and the pool's take the next part as each gets free (one thread runs each part; a part's
    values never depend on which), one range on this thread as is. What the allocator tracks
    must be made before, on this thread: the parts only compute."""
    count = len(ranges)
    if count == 1 or _on_pool.yes:
        for i, (lo, hi) in enumerate(ranges):
            fn(i, lo, hi)
        return
    ctls = () if _own_blas else _blas_controllers()
    held = _blas_to_one(ctls)
    claim = itertools.count().__next__  # (atomic under the GIL)
    failed = []

    def work():
        while not failed:
            i = claim()
            if i >= count:
                return
            try:
                fn(i, *ranges[i])
            except BaseException as e:  # the first error is raised once all have stopped
                failed.append(e)

    helpers = [_get_pool().submit(work) for _ in range(min(_threads, count) - 1)]
    _on_pool.yes = True  # (what a part calls stays on this thread, as on the pool's)
    try:
        work()
    finally:
        _on_pool.yes = False
        for h in helpers:
            h.result()
        _blas_back(held)
    if failed:
        raise failed[0]


_native_gemm = None  # engine._native.gemm with numpy's BLAS handed in; False: not to be had


def _quiet_blas() -> None:
    """Once, before the engine's first product on BLAS's threads. OpenBLAS reads
    OPENBLAS_THREAD_TIMEOUT when it loads and its threads take it when they start; where numpy
    loaded it before engine/_blas_env.py set the variable (a program that imports numpy first),
    it reads its environment again and stops its idle threads, which start again with the
    timeout at the next threaded product. BLAS_SPIN_S then follows the timeout OpenBLAS holds
    (unchanged without OpenBLAS's functions, another BLAS or no threadpoolctl: the default's
    where numpy loaded it first)."""
    global _blas_quiet, BLAS_SPIN_S
    _blas_quiet = True
    import ctypes

    for lib in _openblas_libraries():
        held = getattr(lib, "openblas_thread_timeout", None)
        if held is None:
            continue
        held.restype, held.argtypes = ctypes.c_int, []
        want = os.environ.get("OPENBLAS_THREAD_TIMEOUT")
        read = getattr(lib, "openblas_read_env", None)
        stop = getattr(lib, "blas_thread_shutdown_", None)
        if want and _timeout_n(held()) != _timeout_n(want) and read and stop:
            read.restype, read.argtypes = None, []
            stop.restype, stop.argtypes = ctypes.c_int, []
            read()
            stop()
        BLAS_SPIN_S = _spin_s(_timeout_n(held()))
        return


# Products up to this many multiply-adds run on the calling thread alone even where OpenBLAS
# would split them (above BLAS_THREADED_MNK): its second thread saves a few microseconds on
# them, then spins on a core for BLAS_SPIN_S, while the engine's own loops take one thread
# meanwhile (kernels.pool_threads) or share a core with it. The small CNN's head (32x4096 ->
# 10, 1.3M multiply-adds each way) left BLAS spinning through the whole backward.
BLAS_SOLO_MNK = 1 << 22
_blas_local = None  # OpenBLAS's openblas_set_num_threads_local, or False: not to be had


def _blas_solo():
    """OpenBLAS's openblas_set_num_threads_local (the calling thread's count for its next
    products; returns the count it replaces) from numpy's own OpenBLAS, or None."""
    global _blas_local
    if _blas_local is None:
        import ctypes

        _blas_local = False
        for lib in _openblas_libraries():
            fn = getattr(lib, "openblas_set_num_threads_local", None)
            if fn is not None:
                fn.restype, fn.argtypes = ctypes.c_int, [ctypes.c_int]
                _blas_local = fn
                break
    return _blas_local or None


def _openblas_libraries() -> list:
    """ctypes handles of the OpenBLAS libraries numpy loaded (threadpoolctl finds them); none
    where threadpoolctl is missing or a library cannot be opened."""
    try:
        import ctypes

        from threadpoolctl import threadpool_info

        paths = [i["filepath"] for i in threadpool_info() if i.get("internal_api") == "openblas"]
    except Exception:  # threadpoolctl missing, or it cannot read the libraries
        return []
    libs = []
    for path in paths:
        try:
            libs.append(ctypes.CDLL(path))
        except OSError:
            continue
    return libs


def _load_native_gemm():
    """engine._native.gemm, given the addresses of the cblas_sgemm and cblas_dgemm numpy itself
    calls (its OpenBLAS, found through threadpoolctl and ctypes), or False."""
    global _native_gemm
    if _native_gemm is None:
        _native_gemm = False
        try:
            config = str(getattr(np, "__config__", None) and np.show_config("dicts"))
        except Exception:
            config = None
        import ctypes

        for lib in _openblas_libraries() if native is not None and config is not None else ():
            # the 64_ suffix marks 64-bit integers; plain names only where numpy's build says
            # its OpenBLAS has 32-bit ones
            names = [(p, "64_", True) for p in ("scipy_cblas_", "cblas_")]
            if "USE64BITINT" not in config:
                names += [(p, "", False) for p in ("scipy_cblas_", "cblas_")]
            for prefix, suffix, ilp64 in names:
                try:
                    fs = getattr(lib, f"{prefix}sgemm{suffix}")
                    fd = getattr(lib, f"{prefix}dgemm{suffix}")
                except AttributeError:
                    continue
                address = ctypes.cast(fs, ctypes.c_void_p).value
                native.set_gemm(address, ctypes.cast(fd, ctypes.c_void_p).value, ilp64)
                _native_gemm = native.gemm
                return _native_gemm
    return _native_gemm


def _held(x, rows: int, cols: int):
    """(transposed, batch step) when x's matrices [rows, cols] are each C-contiguous, or each
    the transpose of a C-contiguous [cols, rows], one after another (or one matrix); else None."""
    st = x.strides
    size = x.itemsize
    if x.ndim == 2 or math.prod(x.shape[:-2]) == 1:
        step = 0
    elif x.ndim == 3 and st[0] == rows * cols * size:
        step = rows * cols
    else:
        return None
    if (st[-1] == size or cols == 1) and (st[-2] == cols * size or rows == 1):
        return False, step
    if (st[-2] == size or rows == 1) and (st[-1] == rows * size or cols == 1):
        return True, step
    return None


def _gemm_operands(a, b, out):
    """The arguments of engine._native.gemm for a @ b into out (a transposed operand passed as
    the C-contiguous array it is the transpose of), or None:
    numpy float32/float64 arrays alike; out C-contiguous; a and b 2-D or 3-D, each matrix
    C-contiguous or transposed, with one batch or a single matrix broadcast."""
    if not (
        type(a) is np.ndarray
        and type(b) is np.ndarray
        and type(out) is np.ndarray
        and a.dtype == b.dtype == out.dtype
        and out.dtype in (np.float32, np.float64)
        and out.flags.c_contiguous
        and 2 <= a.ndim <= 3
        and 2 <= b.ndim <= 3
        and out.ndim == max(a.ndim, b.ndim)
    ):
        return None
    m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
    batch = math.prod(out.shape[:-2])
    if k == 0 or b.shape[-2] != k or out.shape[-2:] != (m, n):
        return None
    for x in (a, b):
        if x.ndim == 3 and x.shape[0] not in (1, batch):
            return None
    ha, hb = _held(a, m, k), _held(b, k, n)
    if ha is None or hb is None:
        return None
    (ta, a_step), (tb, b_step) = ha, hb  # (a single matrix broadcast: step 0)
    a_held = np.swapaxes(a, -1, -2) if ta else a
    b_held = np.swapaxes(b, -1, -2) if tb else b
    return a_held, b_held, out, batch, m, n, k, a_step, b_step, ta, tb


# Beside other busy processes, a product on BLAS's threads waits whenever one of them is
# descheduled: a 1M multiply-add product that takes ~15 us quiet took ~3 ms (a scheduler time
# slice), and the small CNN's step went from 31 to 1050 ms next to one busy test process. gemm
# notices such stalls (a threaded product STALL_FACTOR times slower than the best rate seen,
# plus STALL_SLACK_S; STALLS_TO_HOLD of them in a row: a lone one is as likely a page fault or
# an interrupt, and quiet steps saw one in about 30) and runs BLAS single-threaded for
# CONTENDED_S, then tries its threads again. Proportional slowdowns (a fair share of the
# cores) are not stalls.
STALL_SLACK_S = 1e-3
STALL_FACTOR = 4.0
STALLS_TO_HOLD = 2
CONTENDED_S = 0.5
RATE_MIN_MACS = 1 << 22  # products from which the best rate is learnt (overheads small)
_blas_best_rate = 0.0  # multiply-adds per second: the best threaded product seen
_contended = None  # while BLAS is held to one thread: [(controller, its count)], until when
_contended_until = -math.inf
_stalls = 0  # stalled threaded products in a row


def _start_contention(now: float) -> None:
    global _contended, _contended_until
    ctls = _blas_controllers()
    if not ctls:
        return
    _contended = _blas_to_one(ctls)
    _contended_until = now + CONTENDED_S


def _end_contention() -> None:
    global _contended
    held, _contended = _contended, None
    _blas_back(held or ())


def gemm(a, b, out) -> None:
    """out = a @ b (numpy arrays, any leading batch dims). When the engine owns the thread
    budget, large products are split along the larger output dim (or across a batch of them)
    on engine._native's threads, each part one single-threaded BLAS call (or, without the
    compiled loops, on the Python pool); results can then differ in the last bits between
    thread counts, as with BLAS's own threads. Otherwise one BLAS call."""
    global _blas_last, _blas_best_rate, _stalls
    m, k = a.shape[-2], a.shape[-1]
    n = b.shape[-1]
    if not _own_blas:  # BLAS's own threads: they own the cores for a while (pool_threads)
        if m * n * k <= BLAS_THREADED_MNK or _on_pool.yes:
            np.matmul(a, b, out=out)
            return
        if m * n * k * (out.size // max(m * n, 1)) <= BLAS_SOLO_MNK:
            solo = _blas_solo()
            if solo is not None:  # on this thread alone: no BLAS thread left spinning
                before = solo(1)
                try:
                    np.matmul(a, b, out=out)
                finally:
                    solo(before)
                return
        if not _blas_quiet:
            _quiet_blas()
        start = _perf()
        if _contended is not None:  # held to one thread after stalls, for a while
            if start < _contended_until:
                np.matmul(a, b, out=out)
                return
            _end_contention()
        np.matmul(a, b, out=out)
        _blas_last = end = _perf()
        macs, took = m * n * k * (out.size // max(m * n, 1)), end - start
        if _blas_best_rate and took > STALL_SLACK_S + STALL_FACTOR * macs / _blas_best_rate:
            _stalls += 1
            if _stalls >= STALLS_TO_HOLD:
                _stalls = 0
                _start_contention(end)
            return
        _stalls = 0
        if macs >= RATE_MIN_MACS and took > 0:
            _blas_best_rate = max(_blas_best_rate, macs / took)
        return
    batch = out.size // max(m * n, 1)
    parts = _threads
    if parts == 1 or _on_pool.yes or batch * m * n * k < GEMM_SPLIT_MACS or max(m, n) < 2 * parts:
        np.matmul(a, b, out=out)
        return
    run = _load_native_gemm()
    operands = _gemm_operands(a, b, out) if run else None
    if operands is not None:
        run(*operands, parts)
        return
    if m >= n:
        step = -(-m // parts)
        ranges = [(r, min(r + step, m)) for r in range(0, m, step)]

        def part(r):
            np.matmul(a[..., r[0] : r[1], :], b, out=out[..., r[0] : r[1], :])
    else:
        step = -(-n // parts)
        ranges = [(c, min(c + step, n)) for c in range(0, n, step)]

        def part(r):
            np.matmul(a, b[..., :, r[0] : r[1]], out=out[..., :, r[0] : r[1]])

    list(_get_pool().map(part, ranges))


def matmul_into(xp, a, b, out) -> None:
    """out = a @ b on any backend: numpy's through gemm (the engine's pool), CuPy's as is."""
    if xp is np and a.ndim >= 2 and b.ndim >= 2:
        gemm(a, b, out)
    else:
        xp.matmul(a, b, out=out)


def einsum_into(xp, subscripts: str, *operands, out) -> None:
    """out[...] = einsum(subscripts, *operands) on any backend: numpy writes into `out`;
    CuPy's einsum takes no `out`, so its (small, reduced) result is copied in (CuPy's own
    temporary, seen by its memory hook as an external allocation)."""
    if xp is np:
        np.einsum(subscripts, *operands, out=out)
    else:
        out[...] = xp.einsum(subscripts, *operands)


def get_num_threads() -> int:
    return _threads


def pool_threads(n: int, least: int | None = None) -> int:
    """How many threads work of `n` elements is split across now: the engine's threads for
    work of at least `least` elements (PARALLEL_MIN_ELEMS, Python's pool, by default), unless
    this is one of the pool's own threads or BLAS's own threads ran a product less than
    BLAS_SPIN_S ago and are still spinning on the cores (then 1: the calling thread). The split
    never changes results: the kernels cut work into the same blocks whatever the thread count."""
    if _threads == 1 or n < (PARALLEL_MIN_ELEMS if least is None else least) or _on_pool.yes:
        return 1
    if not _own_blas and _perf() - _blas_last < BLAS_SPIN_S:
        return 1
    return _threads


# The compiled loops (engine._native) split their work on threads of their own, which poll for
# the next loop briefly before sleeping: worth it from far smaller work than the Python pool.
NATIVE_PARALLEL_MIN = 1 << 15


def native_threads(n: int) -> int:
    """How many threads engine._native's loop over `n` elements takes: the engine's threads
    (set_num_threads) from NATIVE_PARALLEL_MIN elements, else 1; 1 on the Python pool's own
    threads (already one of several), and while BLAS's own threads spin after a product (as
    pool_threads: beside them a second thread made batch norm's sums 1.7x slower in the small
    CNN step). A loop's values never depend on it."""
    return pool_threads(n, NATIVE_PARALLEL_MIN)


def _mark_pool_thread() -> None:
    _on_pool.yes = True


def _get_pool() -> ThreadPoolExecutor:
    global _pool
    if _pool is None:
        _pool = ThreadPoolExecutor(
            max_workers=_threads, thread_name_prefix="engine-kernel", initializer=_mark_pool_thread
        )
    return _pool


def empty(shape, dtype, device) -> Tensor:
    """A new tensor on a new C-contiguous storage, charged to the device's allocator; values
    uninitialised. The one allocation path of the engine: every storage an op makes (and so
    every byte the allocator sees) comes from here, the storage and its tensor in one step.

    An OutOfMemoryError (the model's limit, or the system refusing a cpu array) leaves nothing
    behind and no peak raised; with tracking off (engine.allocator.tracked.tracking(False))
    nothing is charged at all. The bytes charged per element are the dtype's: an emulated dtype
    (bfloat16, held in float32) is charged its own 2 bytes.
    """
    if type(shape) is not tuple:
        shape = tuple(shape)
    np_dtype = dtype.np
    nbytes = _prod(shape) * dtype.itemsize
    if nbytes > _INT64_MAX:  # PyTorch refuses it at creation, meta included
        raise RuntimeError(f"Storage size calculation overflowed with sizes={list(shape)}")
    cpu = device.type == "cpu"
    if cpu:
        # The system's memory first: when it refuses (MemoryError under `ulimit -v`, or past
        # what the OS will overcommit) nothing was charged, so the peak stays what the program
        # really held; observers get an "oom" event.
        data = _cache_take(shape, np_dtype) if nbytes >= _CACHE_MIN else None
        if data is None:
            try:
                data = _np_empty(shape, np_dtype)
            except MemoryError:
                _refused(device, nbytes)
    if _tracked.TRACKING:  # may raise the limit's OutOfMemoryError (a cpu array is then dropped)
        alloc = device._allocator or allocator_for(device)
        if alloc.observers:
            handle, sid, epoch = alloc.allocate(nbytes)
        else:  # TrackedAllocator.allocate with nobody to tell: the hot path, inline
            sid = next(_storage_ids)
            handle = alloc.model.charge(nbytes)
            epoch = alloc.epoch
    else:  # nothing charged; the storage still gets its own id (storages are told apart by it)
        alloc = handle = None
        sid, epoch = next(_storage_ids), 0
    if cpu:
        s = _new(Storage)
    elif device.type == "meta":  # (made before the charge: nothing to give back if it fails)
        data = _META_ARRAYS.get((shape, np_dtype))
        if data is None:
            data = _meta_array(shape, np_dtype)
        s = _new(_MetaStorage)
    else:
        data = cuda_array(shape, np_dtype, device, alloc, handle, sid, epoch, nbytes)
        s = _new(Storage)
    s.data = data
    s.nbytes = nbytes
    s.device = device
    s.handle = handle
    s.id = sid
    s.epoch = epoch
    s.version = 0
    s.allocator = alloc
    t = _new(Tensor)
    t._data = data
    t._storage = s
    t._dtype = dtype
    t._device = device
    t._base = None
    t.requires_grad = False
    t._grad = None
    t._grad_fn = None
    return t


def _refused(device, nbytes: int):
    if _tracked.TRACKING:
        (device._allocator or allocator_for(device)).refused(nbytes)
    raise OutOfMemoryError(
        f"{device} out of memory: the system refused {nbytes} bytes",
        device=str(device),
        requested=nbytes,
    ) from None


_new = object.__new__
# A meta storage's array has no data and is never changed in place (views are arrays of their
# own), so storages of one shape and dtype share it: (shape, numpy dtype) -> array.
_META_ARRAYS: dict[tuple, MetaArray] = {}


def _meta_array(shape: tuple, np_dtype) -> MetaArray:
    a = MetaArray.contiguous(shape, np_dtype)
    if len(_META_ARRAYS) >= 4096:
        _META_ARRAYS.clear()
    _META_ARRAYS[(shape, np_dtype)] = a
    return a


class Scratch:
    """Kernel workspace that PyTorch's kernel does not allocate (or that is device-specific):
    `data` is a plain backend array, reported to the allocator's `scratch` total and observers
    (on_scratch) but not charged to memory_allocated. Given back by `release()` or when the
    object dies."""

    __slots__ = ("data", "nbytes", "_alloc")

    def __init__(self, shape, dtype, device):
        shape = tuple(shape)
        self.nbytes = math.prod(shape) * dtype.itemsize
        if device.type == "meta":
            self.data = None
        elif device.type == "cpu":
            data = host_cache.take(shape, dtype.np) if self.nbytes >= _CACHE_MIN else None
            self.data = np.empty(shape, dtype=dtype.np) if data is None else data
        else:
            self.data = get_xp(device.type).empty(shape, dtype=dtype.np)
        self._alloc = (device._allocator or allocator_for(device)) if _tracked.TRACKING else None
        if self._alloc is not None:
            self._alloc.scratch("alloc", self.nbytes)

    def release(self) -> None:
        alloc, self._alloc = self._alloc, None
        if self.nbytes >= _CACHE_MIN:
            host_cache.give(self)  # (its memory is reused when nothing else holds it)
        self.data = None
        if alloc is not None:
            alloc.scratch("free", self.nbytes)

    def __del__(self):
        self.release()


def relayout(t: Tensor, strides: tuple) -> Tensor:
    """t (new, C-contiguous, its own storage) re-viewed with these dense strides (elements):
    the same storage, its elements in the order of the dims sorted by stride."""
    shape = t.shape
    order = sorted(range(len(shape)), key=lambda d: (-strides[d], d))
    arr = t._data
    permuted = tuple(shape[d] for d in order)
    arr = arr.reshape(permuted) if hasattr(arr, "reshape") else arr.view_as_shape(permuted)
    inverse = [0] * len(order)
    for i, d in enumerate(order):
        inverse[d] = i
    arr = arr.transpose(inverse)
    item = arr.itemsize
    if tuple(st // item for st in arr.strides) != tuple(strides):  # size-1 dims' strides
        arr = as_strided(arr, shape, tuple(w * item for w in strides))
    t._data = arr
    return t


def stride_order(shape, operands, reduction: bool = False) -> list[int]:
    """The dims fastest first, by the operands' strides (elements, 0 where broadcast), as
    PyTorch sorts them (TensorIterator's reorder_dimensions; with one operand,
    infer_dense_strides): an insertion sort from C order where the first operand that tells two
    dims apart decides, a 0 stride tells nothing, and equal strides put the larger dim later.
    `reduction`: operands[0] is a reduction's output, whose 0 strides mark the reduced dims;
    they go first (fastest)."""
    n = len(shape)
    perm = list(range(n - 1, -1, -1))

    def should_swap(d0, d1):
        for k, st in enumerate(operands):
            s0, s1 = st[d0], st[d1]
            if reduction and k == 0 and (s0 == 0) != (s1 == 0):
                return 1 if s1 == 0 else -1
            if s0 == 0 or s1 == 0:
                continue
            if s0 < s1:
                return -1
            if s0 > s1:
                return 1
            if shape[d0] > shape[d1]:
                return 1
        return 0

    for i in range(1, n):
        d1 = i
        for d0 in range(i - 1, -1, -1):
            c = should_swap(perm[d0], perm[d1])
            if c > 0:
                perm[d0], perm[d1] = perm[d1], perm[d0]
                d1 = d0
            elif c < 0:
                break
    return perm


def _dense_and_same(arrays, shape) -> tuple | None:
    """The common strides (elements) when every operand has `shape` and the same
    non-overlapping-and-dense strides (TensorIterator's fast setup), else None."""
    first = None
    for a in arrays:
        if a.shape != shape:
            return None
        st = tuple(x // a.itemsize for x in a.strides)
        if first is None:
            first = st
        elif st != first:
            return None
    if first is None or not is_dense(shape, first):  # engine.backends.strided
        return None
    return first


def iterator_strides(shape: tuple, arrays) -> tuple | None:
    """The strides (elements) PyTorch's TensorIterator gives a new output of `shape` computed
    from these input arrays, or None for C order: the inputs' common dense layout when they all
    have it (its fast setup), else the dims sorted by the inputs' strides (stride_order)."""
    n = len(shape)
    if n < 2:
        return None
    same = _dense_and_same(arrays, shape)
    if same is not None:
        return same
    ops = []
    for a in arrays:  # each input's strides over the output's dims (0 where broadcast)
        off = n - a.ndim
        st = [0] * n
        for i in range(a.ndim):
            if not (a.shape[i] == 1 and shape[off + i] != 1):
                st[off + i] = a.strides[i] // a.itemsize
        ops.append(st)
    perm = stride_order(shape, ops)
    if perm == list(range(n - 1, -1, -1)):
        return None
    out = [0] * n
    acc = 1
    for d in perm:
        out[d] = acc
        acc *= shape[d]
    return tuple(out)


def empty_for(shape, dtype, device, *arrays) -> Tensor:
    """A new result of an elementwise op on `arrays` (backend arrays or numbers), laid out as
    PyTorch's TensorIterator lays it out: C order when every input is C-contiguous (the common
    case, checked first), else the inputs' layout (a transposed input gives a transposed
    result, as in torch, so that a later .contiguous() or view behaves as there)."""
    for a in arrays:
        cls = a.__class__
        if cls is _ndarray:
            if a.ndim > 1 and not a.flags.c_contiguous:
                break
        elif cls is MetaArray:
            if a.contig is not True and len(a.shape) > 1 and not a.c_contiguous:
                break
        elif cls is float or cls is int or cls is bool:
            continue  # a Python number operand
        elif getattr(a, "ndim", 0) > 1 and not _c_contiguous(a):
            break
    else:
        return empty(shape, dtype, device)
    t = empty(shape, dtype, device)
    strides = iterator_strides(tuple(shape), [a for a in arrays if getattr(a, "ndim", 0) >= 1])
    return t if strides is None else relayout(t, strides)


def _c_contiguous(a) -> bool:
    flags = getattr(a, "flags", None)
    if flags is not None:
        return flags.c_contiguous
    from engine.backends.strided import contiguous_strides

    return tuple(a.strides) == contiguous_strides(a.shape, a.itemsize) or a.size <= 1


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


def as_strided(arr, shape, strides):
    """A view of a backend array (numpy's, CuPy's or a MetaArray) with these byte strides."""
    if isinstance(arr, np.ndarray):
        return np.lib.stride_tricks.as_strided(arr, shape, strides)
    if type(arr).__name__ == "MetaArray":
        from engine.backends import meta

        return meta.as_strided(arr, shape, strides)
    import cupy

    return cupy.lib.stride_tricks.as_strided(arr, shape, strides)


def xp_of(t: Tensor):
    return get_xp(t._device.type)


def xp_of_device(dev):
    return get_xp(dev.type)


def host(a) -> np.ndarray:
    """A numpy array of `a`'s values: a numpy array as it is, a CuPy array copied to the host
    (numpy refuses CuPy's implicit conversion)."""
    return a if isinstance(a, np.ndarray) else a.get()


def _flat(a):
    """A 1-d view of a C-contiguous array, or None."""
    if a.flags.c_contiguous:
        return a.reshape(-1)
    return None


CHUNKS_PER_THREAD = 4  # more chunks than threads: a thread slowed by a busy core gets fewer


def _chunks(n: int) -> list[tuple[int, int]]:
    """(lo, hi) bounds splitting n elements for the thread pool (each at least 64K elements)."""
    k = max(1, min(_threads * CHUNKS_PER_THREAD, n // (1 << 16)))
    step = -(-n // k)
    return [(i, min(i + step, n)) for i in range(0, n, step)]


def ufunc(f, *args, out, **kw):
    """out[...] = f(*args) for numpy ufuncs, splitting big work across threads.

    `args` are arrays or Python scalars; `out` is an array. Same-shape contiguous operands are
    cut into flat chunks; broadcasting ones along an axis of `out`. An input that overlaps `out`
    other than element for element is left to one call (numpy buffers it). Results are
    identical to one call.
    """
    n = out.size
    if type(out) is np.ndarray and n >= CONSTANT_MIN_ELEMS:
        if constant_ufunc(f, args, out, kw):
            return out
    if type(out) is np.ndarray and pool_threads(n) > 1:
        if _parallel_ufunc(f, args, out, kw):
            return out
    f(*args, out=out, **kw)
    return out


# An arithmetic ufunc whose array inputs are each one value broadcast (every stride zero: a
# gradient expanded from a scalar, as mean's and sum's backward make) has one result: it is
# computed once and written everywhere (a fill), where numpy's loop over zero strides costs
# about three times as much (1.5M float32: 0.76 -> 0.23 ms). Only correctly rounded operations
# (IEEE's +, -, *, /): their value does not depend on which loop numpy picks.
CONSTANT_MIN_ELEMS = 1 << 12
_EXACT_UFUNCS = frozenset((np.add, np.subtract, np.multiply, np.true_divide, np.negative))


def constant_ufunc(f, args, out, kw=None) -> bool:
    """out[...] = f(*args) by one evaluation and a fill when f is one of _EXACT_UFUNCS, every
    array in args is one broadcast value and out has no repeated element; False (nothing
    written) otherwise."""
    if kw is None:
        kw = {}
    if f not in _EXACT_UFUNCS or not all(out.strides) or not out.flags.writeable or "where" in kw:
        return False
    small = []
    for a in args:
        if isinstance(a, np.ndarray):
            if any(a.strides) or a.ndim > out.ndim:
                return False
            a = a[(slice(0, 1),) * a.ndim]
        elif not isinstance(a, (bool, int, float, complex, np.generic)):
            return False
        small.append(a)
    one = np.empty((1,) * out.ndim, out.dtype)
    f(*small, out=one, **kw)
    np.copyto(out, one)
    return True


def _same_elements(a: np.ndarray, out: np.ndarray) -> bool:
    return (
        a.shape == out.shape
        and a.strides == out.strides
        and a.__array_interface__["data"][0] == out.__array_interface__["data"][0]
    )


def _parallel_ufunc(f, args, out, kw) -> bool:
    flat = out.flags.c_contiguous
    for a in args:
        if isinstance(a, np.ndarray) and a.ndim:
            if np.may_share_memory(a, out) and not _same_elements(a, out):
                return False
            if flat and (a.shape != out.shape or not a.flags.c_contiguous):
                flat = False
    pool = _get_pool()
    if flat:
        fo = out.reshape(-1)
        flats = [a.reshape(-1) if isinstance(a, np.ndarray) and a.ndim else a for a in args]

        def part(b):
            lo, hi = b
            f(
                *[x[lo:hi] if isinstance(x, np.ndarray) and x.ndim else x for x in flats],
                out=fo[lo:hi],
                **kw,
            )

        list(pool.map(part, _chunks(out.size)))
        return True
    # broadcasting or strided: split along the first axis of out that is long enough
    axis = next((i for i, d in enumerate(out.shape) if d >= _threads), None)
    if axis is None:
        return False
    views = [
        np.broadcast_to(a, out.shape) if isinstance(a, np.ndarray) and a.ndim else a for a in args
    ]
    m = out.shape[axis]
    step = -(-m // min(m, _threads * CHUNKS_PER_THREAD))
    lead = (slice(None),) * axis

    def part_axis(lo):
        sl = lead + (slice(lo, lo + step),)
        f(*[v[sl] if isinstance(v, np.ndarray) and v.ndim else v for v in views], out=out[sl], **kw)

    list(pool.map(part_axis, range(0, m, step)))
    return True


# numpy's maximum/minimum against a Python scalar take a slow loop (about 3x an add); against
# a same-length array of the scalar they take the fast one. Large inputs go through blocks of
# BLOCK_ELEMS against a cached constant block (uncharged: it is small and shared).
BLOCK_ELEMS = 1 << 16
# The block of kernels that run a chain of numpy calls per block on the pool (GELU, the
# activations, erf, axpy, addcmul): every call takes the GIL to start, and a thread waiting for
# it wakes late on this machine, so each call must be long. 4M float32 GELU forward, 1 / 2
# threads: 16K-element blocks 12.4 / 20.1 ms (two threads slower than one), 64K 10.0 / 11.4,
# 256K 10.3 / 6.6. The per-thread scratch is not charged (bounded: threads x a few blocks).
POOL_BLOCK = 1 << 18
_const_blocks: dict = {}


def _const_block(dtype, value) -> np.ndarray:
    key = (dtype, value)
    block = _const_blocks.get(key)
    if block is None:
        if len(_const_blocks) > 64:
            _const_blocks.clear()
        block = np.full(BLOCK_ELEMS, value, dtype=dtype)
        block.flags.writeable = False
        _const_blocks[key] = block
    return block


def extremum_scalar(f, x, value, out):
    """out = f(value, x) for f in (np.maximum, np.minimum) and a Python number `value`: the
    value first, so a tie (-0.0 against 0) gives x, as torch's cpu clamp with a number bound."""
    n = out.size
    if (
        n < BLOCK_ELEMS
        or type(out) is not np.ndarray
        or x.shape != out.shape
        or not (x.flags.c_contiguous and out.flags.c_contiguous)
        or x.dtype != out.dtype
    ):
        return ufunc(f, value, x, out=out)
    fx, fo = x.reshape(-1), out.reshape(-1)
    block = _const_block(out.dtype, value)

    def part(bounds):
        lo, hi = bounds
        for i in range(lo, hi, BLOCK_ELEMS):
            j = min(i + BLOCK_ELEMS, hi)
            f(block[: j - i], fx[i:j], out=fo[i:j])

    if pool_threads(n) > 1:
        list(_get_pool().map(part, _chunks(n)))
    else:
        part((0, n))
    return out


SUM_BLOCK = 1 << 16  # a full reduction adds blocks of this many elements, then the partials


def add_reduce(x, axis, dtype, out, keepdims: bool = False) -> None:
    """out[...] = np.add.reduce(x, axis, dtype, keepdims=keepdims), on the pool when large.

    Two cases split, both with results that do not depend on the number of threads (one
    thread runs the same blocks in turn):
    - a full reduction (axis None) of a C-contiguous array: fixed blocks of SUM_BLOCK elements
      are summed (pairwise, by numpy) on the pool, then their partials in order, in `dtype`;
    - a reduction over the last axis only, of a C-contiguous array: rows are independent, so
      the pool takes row ranges and every row is summed exactly as one call would.
    Anything else is one numpy call."""
    n = x.size
    if n >= PARALLEL_MIN_ELEMS and type(x) is np.ndarray and x.flags.c_contiguous:
        run = _get_pool().map if pool_threads(n) > 1 else map  # (the same blocks either way)
        if axis is None:
            flat = x.reshape(-1)
            partials = np.empty(-(-n // SUM_BLOCK), dtype)
            lo_hi = [(i, min(i + SUM_BLOCK * 16, n)) for i in range(0, n, SUM_BLOCK * 16)]

            def part(b):
                lo, hi = b
                k0 = lo // SUM_BLOCK
                blocks = flat[lo:hi]
                full = (hi - lo) // SUM_BLOCK
                if full:
                    np.add.reduce(
                        blocks[: full * SUM_BLOCK].reshape(full, SUM_BLOCK),
                        1,
                        dtype,
                        partials[k0 : k0 + full],
                    )
                if full * SUM_BLOCK < hi - lo:
                    partials[k0 + full] = np.add.reduce(blocks[full * SUM_BLOCK :], None, dtype)

            list(run(part, lo_hi))
            np.add.reduce(partials, None, dtype, out, keepdims)
            return
        nd = x.ndim
        if nd >= 2 and (axis == nd - 1 or axis == (nd - 1,) or axis == -1 or axis == (-1,)):
            rows = x.reshape(-1, x.shape[-1])
            dest = out.reshape(-1) if out.flags.c_contiguous else None
            if dest is not None and dest.size == rows.shape[0]:
                k = max(1, min(_threads * CHUNKS_PER_THREAD, rows.shape[0]))
                step = -(-rows.shape[0] // k)
                list(
                    run(
                        lambda r: np.add.reduce(rows[r : r + step], 1, dtype, dest[r : r + step]),
                        range(0, rows.shape[0], step),
                    )
                )
                return
    np.add.reduce(x, axis, dtype, out, keepdims)


def run_parallel(func, out, *arrays):
    """Call func(*chunks, out_chunk) over contiguous equal-shape arrays split across threads."""
    n = out.size
    if type(out) is np.ndarray and pool_threads(n) > 1:
        fo = _flat(out)
        flats = [
            _flat(a) if isinstance(a, np.ndarray) and a.shape == out.shape else None for a in arrays
        ]
        if fo is not None and all(f is not None for f in flats):
            list(
                _get_pool().map(
                    lambda b: func(*[f[b[0] : b[1]] for f in flats], fo[b[0] : b[1]]), _chunks(n)
                )
            )
            return out
    func(*arrays, out)
    return out


def copy_new(t: Tensor, contiguous: bool = True) -> Tensor:
    """A contiguous copy of t on a new storage: on cpu by copy_runs (engine._native's threads
    where the last axis is a contiguous run: the transformer's q/k/v split made contiguous,
    3x128x8x256 float32, 0.32 -> 0.16 ms)."""
    out = empty(t.shape, t._dtype, t._device)
    if t._device.type != "meta":
        data = t._data
        if type(data) is np.ndarray:
            copy_runs(data, out._data)
        else:
            xp_of(t).copyto(out._data, data)
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

            def block(i, j, s):
                np.multiply(fb[i:j], alpha, out=s, casting="unsafe")
                np.add(fa[i:j], s, out=fo[i:j], casting="unsafe")

            _in_blocks(fo.size, POOL_BLOCK, fo.dtype, block)
            return out
    # Broadcasting or strided: the same in blocks of at most SCRATCH_ELEMS elements.
    blocked(_axpy_block, out, a, b, alpha)
    return out


# momentum_step_'s block: its four calls per block read and write the block while it is in L2
# (0.5M float32, one thread, medians: 8K elements 770-860 us, 16K 530-680, 32K 465-580, 64K
# 490-550; the three whole-array passes it replaces 690-710).
MOMENTUM_BLOCK = 1 << 15


def momentum_step_(param, buf, grad, momentum, alpha, lr) -> bool:
    """SGD's single-tensor update on numpy arrays, in place and in one pass of blocks:
    buf.mul_(momentum).add_(grad, alpha=alpha); param.add_(buf, alpha=-lr), each block through
    the same numpy calls (and so the same roundings) as those three ops. False, with nothing
    written, unless all three are C-contiguous arrays of one shape and one floating dtype."""
    fp, fb, fg = _flat(param), _flat(buf), _flat(grad)
    if (
        fp is None
        or fb is None
        or fg is None
        or not (param.shape == buf.shape == grad.shape)
        or not (param.dtype == buf.dtype == grad.dtype)
        or param.dtype.kind != "f"
    ):
        return False

    def block(i, j, s):
        b = fb[i:j]
        np.multiply(b, momentum, out=b)
        if alpha == 1:
            np.add(b, fg[i:j], out=b)
        else:  # (axpy's two calls)
            np.multiply(fg[i:j], alpha, out=s, casting="unsafe")
            np.add(b, s, out=b, casting="unsafe")
        np.multiply(b, -lr, out=s, casting="unsafe")
        np.add(fp[i:j], s, out=fp[i:j], casting="unsafe")

    _in_blocks(fp.size, MOMENTUM_BLOCK, fp.dtype, block)
    return True


def _in_blocks(n: int, step: int, dtype, block) -> None:
    """block(i, j, scratch) for the consecutive blocks [i, j) of at most `step` of n elements,
    with a scratch of the block's length (one per part); the parts on the pool when it is free.
    For elementwise work: where the parts and blocks are cut changes no value."""

    def part(bounds):
        lo, hi = bounds
        scratch = np.empty(min(step, hi - lo), dtype=dtype)
        for i in range(lo, hi, step):
            j = min(i + step, hi)
            block(i, j, scratch[: j - i])

    if pool_threads(n) > 1:
        list(_get_pool().map(part, _chunks(n)))
    elif n:
        part((0, n))


def _axpy_block(out, a, b, alpha):
    scaled = np.multiply(b, alpha, dtype=out.dtype, casting="unsafe")
    np.add(a, scaled, out=out, casting="unsafe")


def _CPU():  # noqa: N802
    from engine.device import CPU

    return CPU


def _dtype_of(arr):
    from engine.dtypes import from_numpy_dtype

    return from_numpy_dtype(arr.dtype)


def blocked(fn, out, *arrays, step: int = SCRATCH_ELEMS) -> None:
    """Call fn(out_block, *array_blocks) over blocks of at most `step` elements.

    `arrays` (numpy arrays or numbers) must broadcast to out's shape. Contiguous operands are
    cut into flat chunks, others along their leading axes, so any layout works. Kernels use this
    to bound their scratch memory (which is then not charged).
    """
    arrays = [np.broadcast_to(a, out.shape) if isinstance(a, np.ndarray) else a for a in arrays]
    n = out.size
    if out.ndim == 0 or n <= step:
        fn(out, *arrays)
        return
    flat = out.flags.c_contiguous and all(
        not isinstance(a, np.ndarray) or a.flags.c_contiguous for a in arrays
    )
    if flat:
        fo = out.reshape(-1)
        fa = [a.reshape(-1) if isinstance(a, np.ndarray) else a for a in arrays]
        for i in range(0, n, step):
            j = min(i + step, n)
            fn(fo[i:j], *[a[i:j] if isinstance(a, np.ndarray) else a for a in fa])
        return
    if out.shape[0] == 1:
        blocked(fn, out[0], *[a[0] if isinstance(a, np.ndarray) else a for a in arrays], step=step)
        return
    rows = max(1, step // max(1, n // out.shape[0]))
    for i in range(0, out.shape[0], rows):
        blocked(
            fn,
            out[i : i + rows],
            *[a[i : i + rows] if isinstance(a, np.ndarray) else a for a in arrays],
        )


_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)
_INV_SQRT_PI = 1.0 / math.sqrt(math.pi)
# erf(z) = 2/sqrt(pi) z exp(-z^2) sum_n (2 z^2)^n / (2n+1)!!  (all terms positive: no cancellation)
_ERF_SERIES = [1.0]
for _n in range(1, 40):
    _ERF_SERIES.append(_ERF_SERIES[-1] / (2 * _n + 1))
# (series terms, continued-fraction depth): float64 to ~5e-16, float32/16 to ~5e-9
_ERF_TERMS = {8: (32, 40), 4: (20, 20), 2: (20, 20)}


def _erf_near(zn, terms):
    """erf(z) for 0 <= z <= 2 by the series above, in Horner form (float64)."""
    w = zn * zn
    ez = np.exp(-w)
    w *= 2.0
    acc = np.full_like(zn, _ERF_SERIES[terms - 1])
    for n in range(terms - 2, -1, -1):
        acc *= w
        acc += _ERF_SERIES[n]
    acc *= zn
    acc *= ez
    acc *= _TWO_OVER_SQRT_PI
    return acc


def _erfc_far(zf, depth):
    """erfc(z) for z > 2 to float64's relative precision:
    exp(-z^2)/sqrt(pi) / (z + (1/2)/(z + 1/(z + (3/2)/(z + ...))))."""
    f = zf.copy()
    for k in range(depth, 0, -1):
        np.divide(k * 0.5, f, out=f)
        f += zf
    # exp(-z^2) as exp(-s^2) exp(-(z - s)(z + s)), s = z to 24 bits: s^2 is exact, so a large
    # z's rounded square (hundreds of ulps of erfc at z = 24) does not reach the exponent
    s = zf.astype(np.float32).astype(np.float64)
    tail = np.exp(-s * s)
    tail *= np.exp(-(zf - s) * (zf + s))
    tail[np.isinf(zf)] = 0.0  # erfc(inf) = 0 (inf - inf made a NaN above)
    tail *= _INV_SQRT_PI
    return tail / f


def _erf_block(out, x):
    z = np.abs(x, dtype=np.float64)
    terms, depth = _ERF_TERMS[out.dtype.itemsize]
    result = np.empty_like(z)
    near = z <= 2.0
    if near.all():
        result = _erf_near(z, terms)
    else:
        result[near] = _erf_near(z[near], terms)
        far = ~near
        result[far] = 1.0 - _erfc_far(z[far], depth)
    np.copysign(result, x, out=result)
    np.copyto(out, result, casting="unsafe")


# erfc's continued fraction from |x| > 1 on: 200 levels give float64 within 4 ulps of torch's
# there (at |x| = 1: 30,000 ulps off with 100, 8e8 with erf's 40)
_ERFC_DEPTH = 200


def _erfc_block(out, x):
    """erfc(x) = 1 - erf(x): by the series for |x| <= 1 (erfc >= 0.157 there: a few bits lost
    to the subtraction at most), by the continued fraction beyond, to its relative precision
    in the tail where 1 - erf would round to 0; erfc(-z) = 2 - erfc(z). Float64 within ~8 ulps
    of torch's, float32 within 1."""
    z = np.abs(x, dtype=np.float64)
    result = np.empty_like(z)
    near = z <= 1.0
    result[near] = 1.0 - _erf_near(z[near], _ERF_TERMS[8][0])
    far = ~near
    if far.any():
        result[far] = _erfc_far(z[far], _ERFC_DEPTH)
    neg = np.signbit(x) & ~np.isnan(x)
    result[neg] = 2.0 - result[neg]
    np.copyto(out, result, casting="unsafe")


# float32 and float16 results: erf(x) = x P(x^2) / Q(x^2) for |x| <= 4, computed in float64
# (P, Q fitted by iterated least squares on Chebyshev nodes against float64 erf; |error| < 2e-9
# there, so the float32 result is within half an ulp + 2e-9 of erf: 98.8% of float32 inputs give
# erf correctly rounded, torch's kernel 99.1%), and x clamped to +-4 beyond (erf(4) = 1 - 1.5e-8,
# which is 1.0 in float32 and float16, as erf of anything larger). About 8x faster than the
# float64 series below, which float64 results keep.
_ERF_P = (
    1.1283791820950761,
    0.1847110019910626,
    0.054332679704439786,
    0.0038395557887676503,
    0.0003826926532280731,
    4.780532839595618e-06,
    -1.3666787514326842e-08,
)
_ERF_Q = (
    1.0,
    0.4970294087790748,
    0.11382657545948907,
    0.015453570074791248,
    0.0013095851178017146,
    6.400921974496717e-05,
)


# erf's three float64 temporaries and the block's input and output stay within L2 (2 MiB per
# core on this Intel Xeon) at a quarter of POOL_BLOCK's elements, and its ~25 passes per block
# stream through L2 instead of memory. 4M float32 erf, per-thread scratch reused, medians: 128K
# elements 51.7 / 26.2 ms on 1 / 2 threads, 64K 42.1 / 23.2, 32K 41.4 / 27.7, 16K 44.2 / 44.3
# (more calls: each takes the GIL, and a thread waiting for it wakes late).
_ERF_BLOCK = POOL_BLOCK // 4


def _horner(u, coefs, out):
    np.multiply(u, coefs[-1], out=out)
    out += coefs[-2]
    for c in coefs[-3::-1]:
        out *= u
        out += c
    return out


def _erf_rational_block(out, x, z, u, p):
    """out = erf(x) by _ERF_P / _ERF_Q; z, u, p: float64 scratch of x's shape."""
    np.clip(x, -4.0, 4.0, out=z)
    np.multiply(z, z, out=u)
    _horner(u, _ERF_P, p)
    p *= z
    np.divide(p, _horner(u, _ERF_Q, z), out=out, casting="unsafe")


def _load_native():
    """engine._native (engine/_native.c) when it was built and MEMPROF_NATIVE is not 0, else None:
    its loops give the numpy forms' bits, without their passes over memory or the GIL."""
    if os.environ.get("MEMPROF_NATIVE", "1") == "0":
        return None
    try:
        from engine import _native
    except ImportError:
        return None
    _native.set_erf_coefficients(_ERF_P, _ERF_Q)
    return _native


# the compiled loops, or None: the numpy forms below (tests switch it to compare the two)
native = _load_native()


def native_f32(*arrays) -> bool:
    """engine._native's float32 loops can take these arrays: built, plain numpy arrays, float32
    all, C-contiguous."""
    return native is not None and all(
        type(a) is np.ndarray and a.dtype == np.float32 and a.flags.c_contiguous for a in arrays
    )


def _in_place_or_apart(x, out) -> bool:
    """For contiguous arrays of one size: x is out element for element (in place), or they
    share no memory (a shifted overlap is numpy's to buffer, not a compiled loop's). The
    cheap answers first: `ctypes` costs a microsecond an array."""
    if x is out or not np.may_share_memory(x, out):
        return True
    return x.__array_interface__["data"][0] == out.__array_interface__["data"][0]


def native_takes(*arrays) -> bool:
    """engine._native's loops can take these arrays: built, numpy, float32/float64 values (the
    first array's) and C-contiguous (the numpy forms take any other)."""
    return (
        native is not None
        and all(isinstance(a, np.ndarray) and a.flags.c_contiguous for a in arrays)
        and arrays[0].dtype in (np.float32, np.float64)
    )


_native_exp = None  # whether engine._native's float32 exp gives np.exp's bits here (checked once)


def native_exp_f32() -> bool:
    """Whether engine._native's float32 exp (npexp_f32, and the loops built on it) gives
    np.exp's bits on this machine: it repeats the SIMD loop numpy 2.x dispatches to on AVX2 +
    FMA3 and AVX512F, and a numpy without that loop (or a future one) may round otherwise.
    Checked once, on first use, over 2^16 values spanning exp's float32 range and 2^16 bit
    patterns spread over all of float32 (NaNs, infinities, subnormals); if any output differs,
    the numpy forms stay."""
    global _native_exp
    if native is None:  # (switched off after the check: tests compare the forms)
        return False
    if _native_exp is None:
        ok = hasattr(native, "exp_gelu_f32")
        if ok:
            span = np.linspace(-105.0, 90.0, 1 << 16, dtype=np.float32)
            spread = (np.arange(1 << 16, dtype=np.uint64) * 65537).astype(np.uint32)
            x = np.concatenate([span, spread.view(np.float32)])
            got = np.empty_like(x)
            native.exp_gelu_f32(x, None, got, 0, (0.0,) * 7, 1)
            with np.errstate(all="ignore"):
                ok = np.exp(x).tobytes() == got.tobytes()
        _native_exp = ok
    return _native_exp


def exp_f32(x, out) -> bool:
    """out = np.exp(x) through engine._native's loop on its threads, for contiguous float32
    arrays of one size that are one array or apart (True), when native_exp_f32(); else False
    (nothing written)."""
    if (
        not native_f32(x, out)
        or x.size != out.size
        or not out.flags.writeable
        or not native_exp_f32()
        or not _in_place_or_apart(x, out)
    ):
        return False
    native.exp_gelu_f32(x, None, out, 0, (0.0,) * 7, native_threads(x.size))
    return True


def exp_into(x, out) -> None:
    """out = np.exp(x) for numpy arrays: exp_f32's compiled loop where it takes them, else
    numpy's call (the same bits either way; below the size the loop threads at, numpy's call
    costs less than the compiled loop's checks)."""
    if x.size < NATIVE_PARALLEL_MIN or not exp_f32(x, out):
        np.exp(x, out=out)


def _erf_rational(out, x) -> None:
    """_erf_rational_block over blocks of _ERF_BLOCK elements, one set of scratch per thread
    (or engine._native's loop, for contiguous float32).

    Each thread makes its scratch once a call and reuses it for every block: fresh 1 MiB
    temporaries for every block went back to the operating system (glibc trims the heap's top
    when more than twice the mmap threshold is free) and page-faulted in again, which doubled
    the time (4M float32 on one thread, Intel Xeon: 47.7 -> 26 ms)."""

    fo = _flat(out)
    fx = _flat(x) if x.shape == out.shape else None
    if fo is None or fx is None:  # strided or broadcast: blocks along the leading axes
        blocked(
            lambda ob, xb: _erf_rational_block(ob, xb, *np.empty((3, *ob.shape))),
            out,
            x,
            step=_ERF_BLOCK,
        )
        return
    n = fo.size
    if (
        native is not None
        and fo.dtype == np.float32
        and fx.dtype == np.float32
        and _in_place_or_apart(fx, fo)
    ):
        native.erf_f32(fx, fo, native_threads(n))  # (its own threads)
        return
    scratch: dict[int, np.ndarray] = {}  # thread id -> its scratch, for this call

    def part(bounds):
        lo, hi = bounds
        s = scratch.get(threading.get_ident())
        if s is None:
            s = scratch[threading.get_ident()] = np.empty((3, min(_ERF_BLOCK, n)))
        for i in range(lo, hi, _ERF_BLOCK):
            j = min(i + _ERF_BLOCK, hi)
            _erf_rational_block(fo[i:j], fx[i:j], *s[:, : j - i])

    # (elementwise: where the chunks and blocks are cut does not change a value)
    if pool_threads(n) > 1:
        list(_get_pool().map(part, _chunks(n)))
    elif n:
        part((0, n))


def softmax_rows(x, v, kind: int, p=None) -> None:
    """The passes of a softmax over the last axis of x (numpy, contiguous), in place; v holds
    one value per row (shape x.shape[:-1] + (1,)). kind 0: v = each row's maximum (+0 where not
    finite or zero), x -= v; kind 1: v = each row's sum (1 where 0), x /= v; kind 2: x -= v; kind 3:
    x = (x - v) * p. engine._native's loop for contiguous float32/float64 arrays of one dtype
    (one pass per row, in cache), numpy's passes otherwise: the same bits (the maximum is exact;
    the sum is numpy's pairwise sum, repeated in its order)."""
    L = x.shape[-1] if x.ndim else 1
    rows = x.size // L if L else 0
    if (
        native_takes(x, v, *(() if p is None else (p,)))
        and v.dtype == x.dtype
        and v.size == rows
        and (p is None or (p.dtype == x.dtype and p.shape == x.shape))
        and L
    ):
        native.softmax_rows(x, v, x if p is None else p, rows, L, kind, native_threads(x.size))
        return
    if kind == 0:
        np.max(x, axis=-1, keepdims=True, out=v)
        v[~np.isfinite(v)] = 0.0
        v += 0.0  # a maximum of -0 as +0 (which zero numpy's maximum picks depends on its order)
        x -= v
    elif kind == 1:
        np.sum(x, axis=-1, keepdims=True, out=v)
        v[v == 0] = 1.0
        x /= v
    elif kind == 2:
        x -= v
    else:
        x -= v
        x *= p


def col2im_add(cols, stage, kh: int, kw: int, sh: int, sw: int, dh: int, dw: int) -> None:
    """A convolution's columns cols [C, kh, kw, S, OH, OW] added into its padded samples stage
    [S, C, Hp, Wp] (numpy, C-contiguous): stage[s, c, oh*sh + i*dh, ow*sw + j*dw] += cols[c, i,
    j, s, oh, ow], one kernel offset (i, j) after another. engine._native's loop for float32 and
    float64 (each plane's adds in one pass, on its threads), else one numpy add per offset over
    a strided view: the same bits (each element's terms in the same order)."""
    c, _, _, s, oh, ow = cols.shape
    hp, wp = stage.shape[2], stage.shape[3]
    if native_takes(cols, stage) and cols.dtype == stage.dtype:
        sizes = (s, c, kh, kw, oh, ow, hp, wp, sh, sw, dh, dw)
        native.col2im(cols, stage, sizes, native_threads(cols.size))
        return
    as_strided = np.lib.stride_tricks.as_strided
    s0, s1, s2, s3 = stage.strides
    for i in range(kh):
        for j in range(kw):
            region = as_strided(
                stage[:, :, i * dh :, j * dw :], (c, s, oh, ow), (s1, s0, sh * s2, sw * s3)
            )
            np.add(region, cols[:, i, j], out=region)


def zero_where(xp, out, g, below) -> None:
    """out = below ? 0 : g: a literal +0 where the mask `below` holds, g's own bits elsewhere
    (NaN payloads included); torch's gradient kernels that select write this. The mask is made
    before out is written (out may be an operand it was made from)."""
    if g is not out:
        xp.copyto(out, g)
    xp.copyto(out, 0.0, where=below)


def threshold_backward(xp, g, v, out, threshold: float = 0.0):
    """out = v <= threshold ? 0 : g, as torch's threshold_backward (ReLU's gradient from its
    result, Threshold's from its input): a literal +0 at or below the threshold, g's own bits
    elsewhere (a NaN input passes its gradient; a NaN or infinite gradient below is 0, where a
    product with a 0/1 mask would give NaN). engine._native's loop for contiguous float32 and
    float64 operands, numpy's passes otherwise (the same bits: a select)."""
    t = v.dtype.type

    def part(gc, vc, oc):
        zero_where(xp, oc, gc, xp.less_equal(vc, t(threshold)))

    if xp is not np:
        part(g, v, out)
    elif (
        native_takes(out, g, v)
        and g.dtype == v.dtype == out.dtype
        and g.shape == v.shape == out.shape
    ):
        native.threshold_backward(g, v, out, threshold, native_threads(out.size))
    else:
        run_parallel(part, out, np.broadcast_to(g, out.shape), np.broadcast_to(v, out.shape))
    return out


def relu_into(x, out) -> bool:
    """out = np.maximum(0, x) for contiguous float32/float64 arrays of one shape and dtype, one
    array or apart, by engine._native's select (threshold_backward, strict: x < 0 ? 0 : x) on
    its threads: numpy's bits, -0 and NaN payloads kept (True); False (nothing written)
    otherwise."""
    if (
        not native_takes(out, x)
        or x.dtype != out.dtype
        or x.shape != out.shape
        or not out.flags.writeable
        or not _in_place_or_apart(x, out)
    ):
        return False
    native.threshold_backward(x, x, out, 0.0, native_threads(out.size), True)
    return True


def erf_into(xp, x, out):
    """out = erf(x): to float64 precision for float64, within half an ulp + 2e-9 for float32 and
    float16 (_ERF_P); numpy has no erf, CuPy has cupyx.scipy.special.erf."""
    if xp is not np:
        import cupyx.scipy.special

        cupyx.scipy.special.erf(x, out=out)
        return out
    if out.dtype.itemsize < 8 and out.dtype.kind == "f":
        _erf_rational(out, x)
        return out
    blocked(_erf_block, out, x)
    return out


def erfc_into(xp, x, out):
    """out = erfc(x), to its relative precision in the tail (where 1 - erf(x) rounds to 0);
    CuPy has cupyx.scipy.special.erfc."""
    if xp is not np:
        import cupyx.scipy.special

        cupyx.scipy.special.erfc(x, out=out)
        return out
    blocked(_erfc_block, out, x)
    return out


def numel(shape) -> int:
    return math.prod(shape)


# --- per-channel passes (batch normalization) ------------------------------------------------
# Arrays [N, C, L]: N*C rows of L values, row (b, ch) of channel ch. engine._native's row_sums
# and row_affine take C-contiguous float32/float64 operands; the numpy forms below take any and
# give the same bits. Rows are independent, so the pool may take ranges of samples: a result
# never depends on the thread count.

ROW_SUM_ELEMS = 1 << 18  # the numpy form makes its float64 terms about this many at a time


def _lane_sums(t):
    """The sum of each row (last axis) of the float64 terms t in row_sums' order (engine/_native.c's
    LANE_SUM): eight lanes, each in order, joined pairwise, then the tail in order."""
    length = t.shape[-1]
    l8 = length - length % 8
    if l8:
        acc = t[..., 0:8].copy()
        for j in range(8, l8, 8):
            acc += t[..., j : j + 8]
        s = (acc[..., 0] + acc[..., 1]) + (acc[..., 2] + acc[..., 3])
        s += (acc[..., 4] + acc[..., 5]) + (acc[..., 6] + acc[..., 7])
        start = l8
    elif length:
        s, start = t[..., 0].copy(), 1
    else:
        return np.zeros(t.shape[:-1])
    for i in range(start, length):
        s += t[..., i]
    return s


def _sample_ranges(n: int, per_sample: int) -> list[tuple[int, int]]:
    """Sample ranges for the pool: one when the work is small or BLAS's threads hold the cores."""
    k = pool_threads(n * per_sample)
    if k < 2 or n < 2:
        return [(0, n)]
    parts = min(n, k * CHUNKS_PER_THREAD)
    step = -(-n // parts)
    return [(lo, min(lo + step, n)) for lo in range(0, n, step)]


def _over_samples(fn, n: int, per_sample: int) -> None:
    ranges = _sample_ranges(n, per_sample)
    if len(ranges) == 1:
        fn(*ranges[0])
    else:
        list(_get_pool().map(lambda b: fn(*b), ranges))


def _native_rows(*arrays) -> bool:
    return native_takes(*arrays) and all(a.dtype == arrays[0].dtype for a in arrays)


def row_sums(kind: int, a3, m=None, b3=None):
    """Float64 sums of each row of a3 [N, C, L], each in a fixed order (eight lanes,
    engine/_native.c's LANE_SUM), so that the compiled loop and the numpy form agree bit for bit
    and no sum depends on the thread count:
      kind 0: sum(a);  kind 1: sum(d * d), d = a - m[ch] in a's dtype;
      kind 2: (sum(a), sum(a * d)) with d = b - m[ch] (a the gradient, b the input).
    Returns one float64 [N, C] array (kinds 0, 1) or two (kind 2)."""
    n, c, length = a3.shape
    p1 = np.empty((n, c))
    p2 = np.empty((n, c)) if kind == 2 else p1
    operands = (a3,) + ((m,) if kind else ()) + ((b3,) if kind == 2 else ())
    if _native_rows(*operands):  # (its own threads)
        b, mm = (b3 if kind == 2 else a3), (m if kind else a3)
        native.row_sums(a3, b, mm, p1, p2, n * c, c, length, kind, native_threads(a3.size))
        return (p1, p2) if kind == 2 else p1
    mc = m[:, None] if kind else None
    step = max(1, ROW_SUM_ELEMS // max(c * length, 1))

    def part(lo, hi):
        for s0 in range(lo, hi, step):
            s1 = min(s0 + step, hi)
            a = a3[s0:s1]
            if kind == 1:
                d = (a - mc).astype(np.float64)
                p1[s0:s1] = _lane_sums(d * d)
                continue
            af = a.astype(np.float64)
            p1[s0:s1] = _lane_sums(af)
            if kind == 2:
                p2[s0:s1] = _lane_sums(af * (b3[s0:s1] - mc).astype(np.float64))

    _over_samples(part, n, c * length)
    return (p1, p2) if kind == 2 else p1


def row_affine(x3, p0, p1, out, p2=None, g3=None, p3=None):
    """Per-channel passes over [N, C, L] in x's dtype, each operation rounded as numpy rounds it:
      g3 None:  out = ((x - p0) * p1) [+ p2]        (batch norm's output; p2 may be None)
      g3 given: out = ((((x - p0) * p1) + g) - p2) * p3   (its input gradient)
    pK are [C] arrays; out may be x (element for element), never g."""
    n, c, length = x3.shape
    grad = g3 is not None
    params = [p for p in (p0, p1, p2, p3) if p is not None]
    if _native_rows(out, x3, *params, *((g3,) if grad else ())):  # (its own threads)
        g, q2, q3 = (g3 if grad else x3), (p1 if p2 is None else p2), (p3 if grad else p1)
        native.row_affine(x3, g, p0, p1, q2, q3, out, n * c, c, length, int(grad),
                          p2 is not None, native_threads(out.size))  # fmt: skip
        return out

    def part(lo, hi):
        o = out[lo:hi]
        np.subtract(x3[lo:hi], p0[:, None], out=o)
        np.multiply(o, p1[:, None], out=o)
        if grad:
            np.add(o, g3[lo:hi], out=o)
            np.subtract(o, p2[:, None], out=o)
            np.multiply(o, p3[:, None], out=o)
        elif p2 is not None:
            np.add(o, p2[:, None], out=o)

    _over_samples(part, n, c * length)
    return out


def layer_norm_forward(x2, w, b, y2, mean, rstd, eps: float) -> None:
    """Layer normalization of the rows of x2 [R, D] into y2, the rows' mean and rstd into mean
    and rstd [R] (x's dtype); w, b: [D] or None. Sums in float64 in row_sums' lane order, every
    other operation rounded in x's dtype, so the compiled loop (one pass a row, its own threads)
    and this numpy form agree bit for bit:
      mean = (sum(x) / D), rstd = 1 / sqrt(sum(c * c) / D + eps) with c = x - mean,
      y = ((c * rstd) [* w]) [+ b]."""
    rows, d = x2.shape
    if d == 0:  # (no row has values: nothing to normalize)
        return
    given = [a for a in (w, b) if a is not None]
    if _native_rows(x2, y2, mean, rstd, *given):
        native.layer_norm(x2, w, b, y2, mean, rstd, rows, d, eps, native_threads(x2.size))
        return
    dt = x2.dtype
    step = max(1, ROW_SUM_ELEMS // max(d, 1))
    for r0 in range(0, rows, step):
        r1 = min(r0 + step, rows)
        xs, ys = x2[r0:r1], y2[r0:r1]
        m = (_lane_sums(xs.astype(np.float64)) / d).astype(dt)
        c = (xs - m[:, None]).astype(np.float64)
        rs = (1.0 / np.sqrt(_lane_sums(c * c) / d + eps)).astype(dt)
        mean[r0:r1], rstd[r0:r1] = m, rs
        np.subtract(xs, m[:, None], out=ys)
        np.multiply(ys, rs[:, None], out=ys)
        if w is not None:
            np.multiply(ys, w, out=ys)
        if b is not None:
            np.add(ys, b, out=ys)


def layer_norm_backward(x2, g2, w, mean, rstd, gx2=None, gw=None, gb=None) -> None:
    """layer_norm_forward's gradients: with h = (x - mean) * rstd and u = g [* w] (each rounded
    in x's dtype), per row a1 = sum(u), a2 = sum(u * h) (float64, lane order), and
      gx = (((h * (-a2 / D)) - (a1 / D)) + u) * rstd,
      gw = sum over rows (in order) of g * h,  gb = sum over rows of g  (float64 sums);
    gx2, gw, gb: None when not wanted. The compiled loops split rows (columns for gw and gb)
    across the loops' threads; this numpy form gives the same bits."""
    rows, d = x2.shape
    outs = [a for a in (gx2, gw, gb) if a is not None]
    if not outs or d == 0:
        return
    if _native_rows(x2, g2, mean, rstd, *outs, *((w,) if w is not None else ())):
        native.layer_norm_backward(x2, g2, w, mean, rstd, gx2, gw, gb, rows, d,
                                   native_threads(x2.size))  # fmt: skip
        return
    dt = x2.dtype
    step = max(1, ROW_SUM_ELEMS // max(d, 1))
    aw = ab = None
    for r0 in range(0, rows, step):
        r1 = min(r0 + step, rows)
        xs, gs = x2[r0:r1], g2[r0:r1]
        h = np.subtract(xs, mean[r0:r1, None])
        np.multiply(h, rstd[r0:r1, None], out=h)
        if gw is not None:  # rows in order, each column one chain from the first row
            aw = _chain_rows(aw, gs.astype(np.float64) * h.astype(np.float64))
        if gb is not None:
            ab = _chain_rows(ab, gs.astype(np.float64))
        if gx2 is None:
            continue
        u = gs * w if w is not None else gs
        uf = u.astype(np.float64)
        a1 = _lane_sums(uf)
        a2 = _lane_sums(uf * h.astype(np.float64))
        o = gx2[r0:r1]
        np.multiply(h, (-a2 / d).astype(dt)[:, None], out=o)
        np.subtract(o, (a1 / d).astype(dt)[:, None], out=o)
        np.add(o, u, out=o)
        np.multiply(o, rstd[r0:r1, None], out=o)
    if gw is not None:
        gw[...] = aw if rows else 0
    if gb is not None:
        gb[...] = ab if rows else 0


def _chain_rows(acc, terms):
    """(((acc + terms[0]) + terms[1]) + ...) per column, or from terms[0] when acc is None: a
    running sum (np.add.reduce over axis 0 sums pairwise when the rows are one value wide)."""
    if acc is not None:
        terms = np.concatenate([acc[None], terms])
    return np.cumsum(terms, axis=0)[-1]


def copy_runs(src, dst, bias=None) -> None:
    """dst[...] = src (+ bias along axis 1) for arrays of one shape and dtype (1 to 9 dims; 3
    or more with a bias), not overlapping: on engine._native's threads when the last axis of
    both is a contiguous run (a convolution's columns cut from its padded input, its outputs
    from the padded width, samples and channels swapped: layouts numpy copies with a
    transposed, short-run iteration), else numpy's copy (add). The same bits either way."""
    if (
        native is not None
        and type(src) is np.ndarray
        and type(dst) is np.ndarray
        and 0 < src.ndim <= 9
        and src.shape == dst.shape
        and src.dtype == dst.dtype
        and src.dtype in (np.float32, np.float64)
        and (src.shape[-1] < 2 or src.strides[-1] == dst.strides[-1] == src.itemsize)
        and (
            bias is None
            or (type(bias) is np.ndarray and bias.dtype == src.dtype and bias.flags.c_contiguous)
        )
    ):
        native.copy_runs(src, dst, bias, native_threads(src.size))
    elif bias is None:
        np.copyto(dst, src)
    else:
        np.add(src, bias.reshape((-1,) + (1,) * (src.ndim - 2)), out=dst)
