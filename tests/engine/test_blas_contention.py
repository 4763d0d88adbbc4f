"""kernels.gemm's stall guard: a product on BLAS's own threads that takes far longer than the
best rate seen (a thread descheduled by another process) holds BLAS to one thread for
CONTENDED_S, then gives its threads back; quiet products and the engine's own pool threads
leave BLAS alone, and the values never change."""

from __future__ import annotations

import numpy as np
import pytest

from engine import kernels

threadpoolctl = pytest.importorskip("threadpoolctl")


def _blas_threads() -> int:
    return max(c.get_num_threads() for c in kernels._blas_controllers())


@pytest.fixture
def guard(monkeypatch):
    """A clean guard, BLAS on two threads, and a clock the test sets: each _perf() call
    returns the next of `ticks` (then the last one again)."""
    if not kernels._blas_controllers():
        pytest.skip("numpy's BLAS cannot be limited here (threadpoolctl found none)")
    before_threads, before_blas = kernels.get_num_threads(), _blas_threads()
    kernels.set_num_threads(2, own_blas=False)
    for c in kernels._blas_controllers():
        c.set_num_threads(2)
    monkeypatch.setattr(kernels, "_blas_best_rate", 1e11)  # 100 G multiply-adds a second
    monkeypatch.setattr(kernels, "_contended", None)
    monkeypatch.setattr(kernels, "_contended_until", -float("inf"))
    monkeypatch.setattr(kernels, "_stalls", 0)
    ticks = []

    def clock():
        return ticks.pop(0) if len(ticks) > 1 else ticks[0]

    monkeypatch.setattr(kernels, "_perf", clock)
    yield ticks
    kernels._end_contention()
    kernels.set_num_threads(before_threads, own_blas=False)
    for c in kernels._blas_controllers():
        c.set_num_threads(before_blas)


def _product():
    a = np.random.default_rng(0).standard_normal((256, 256)).astype(np.float32)
    out = np.empty_like(a)
    return a, out  # 2**24 multiply-adds: BLAS's threads take it; 0.17 ms at the best rate


def test_stalled_products_in_a_row_hold_blas_to_one_thread_for_a_while(guard):
    a, out = _product()
    guard[:] = [9.0, 9.05]  # the product took 50 ms: a stall, but a lone one could be a fault
    kernels.gemm(a, a, out)
    assert kernels._contended is None and _blas_threads() == 2
    guard[:] = [10.0, 10.05]  # a second in a row: contention
    kernels.gemm(a, a, out)
    np.testing.assert_array_equal(out, a @ a)
    assert kernels._contended is not None and _blas_threads() == 1
    assert kernels._contended_until == pytest.approx(10.05 + kernels.CONTENDED_S)
    guard[:] = [10.3]  # within CONTENDED_S: still one thread, whatever this product takes
    kernels.gemm(a, a, out)
    assert _blas_threads() == 1
    later = 10.05 + kernels.CONTENDED_S + 0.01
    guard[:] = [later, later + 1e-4]  # past it, and a quiet product
    kernels.gemm(a, a, out)
    np.testing.assert_array_equal(out, a @ a)
    assert kernels._contended is None and _blas_threads() == 2


def test_a_quiet_product_leaves_blas_its_threads_and_learns_the_rate(guard):
    a, out = _product()
    guard[:] = [5.0, 5.0001]  # 0.1 ms: 168 G multiply-adds a second, faster than the best
    kernels.gemm(a, a, out)
    assert kernels._contended is None and _blas_threads() == 2
    assert kernels._blas_best_rate == pytest.approx(a.shape[0] ** 3 / 1e-4)
    guard[:] = [6.0, 6.0009]  # a proportional slowdown (a fair share of the cores): no stall
    kernels.gemm(a, a, out)
    assert kernels._contended is None and _blas_threads() == 2
    for t in (7.0, 8.0, 9.0):  # stalls with a quiet product between them: never two in a row
        guard[:] = [t, t + 0.05]
        kernels.gemm(a, a, out)
        guard[:] = [t + 0.5, t + 0.5001]
        kernels.gemm(a, a, out)
    assert kernels._contended is None and _blas_threads() == 2


def test_small_products_and_the_pools_threads_are_not_timed(guard, monkeypatch):
    small = np.ones((64, 64), np.float32)  # m*n*k = 2**18: one BLAS thread anyway
    guard[:] = [1.0, 2.0]
    kernels.gemm(small, small, np.empty_like(small))
    assert kernels._contended is None and guard == [1.0, 2.0]  # the clock was not read
    a, out = _product()
    monkeypatch.setattr(kernels._on_pool, "yes", True)  # inside run_parts: BLAS already at 1
    kernels.gemm(a, a, out)
    assert kernels._contended is None and guard == [1.0, 2.0]


def test_setting_the_budget_ends_the_hold(guard):
    a, out = _product()
    for t in (9.0, 10.0):
        guard[:] = [t, t + 0.05]
        kernels.gemm(a, a, out)
    assert _blas_threads() == 1
    kernels.set_num_threads(2, own_blas=False)  # BLAS gets its own count back
    assert kernels._contended is None and _blas_threads() == kernels._blas_default


def test_a_small_product_runs_on_the_calling_thread_alone(guard, monkeypatch):
    """Between BLAS_THREADED_MNK and BLAS_SOLO_MNK a product runs with OpenBLAS held to the
    calling thread (openblas_set_num_threads_local), given back after; it leaves no BLAS
    thread spinning (not timed, not noted as BLAS's), and its values are numpy's."""
    real = kernels._blas_solo()
    if real is None:
        pytest.skip("numpy's OpenBLAS has no openblas_set_num_threads_local")
    guard.append(5.0)
    counts = []

    def recorded(n):
        counts.append(n)
        return real(n)

    monkeypatch.setattr(kernels, "_blas_solo", lambda: recorded)
    monkeypatch.setattr(kernels, "_blas_last", -1.0)
    rng = np.random.default_rng(1)
    a = rng.standard_normal((32, 4096)).astype(np.float32)  # the small CNN's head: 1.3M
    b = rng.standard_normal((4096, 10)).astype(np.float32)
    out = np.empty((32, 10), np.float32)
    kernels.gemm(a, b, out)
    assert counts[0] == 1 and len(counts) == 2  # held to one, then given its count back
    assert real(counts[1]) == counts[1]  # (what was given back is what it had)
    assert kernels._blas_last == -1.0  # not noted as BLAS's threads spinning
    assert out.tobytes() == np.matmul(a, b).tobytes()
    assert _blas_threads() == 2  # the global count untouched
    counts.clear()
    big, big_out = _product()  # 2**24: above BLAS_SOLO_MNK, BLAS's threads
    kernels.gemm(big, big, big_out)
    assert counts == []


_IDLE_CPU = """
import os, resource, sys, time
import numpy as np  # loaded first: OpenBLAS has read its environment before the engine's
import engine
from engine import kernels

a = np.ones((1024, 1024), np.float32)
out = np.empty_like(a)
kernels.gemm(a, a, out)  # a product on BLAS's threads (the first: kernels._quiet_blas)
assert (out == 1024).all()
r0 = resource.getrusage(resource.RUSAGE_SELF)
time.sleep(0.1)
r1 = resource.getrusage(resource.RUSAGE_SELF)
busy = r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime
print(kernels.BLAS_SPIN_S, busy)
"""


def _idle_after_a_product(env_timeout):
    import os
    import subprocess
    import sys

    if (os.cpu_count() or 1) < 2 or not kernels._openblas_libraries():
        pytest.skip("needs numpy's OpenBLAS (threadpoolctl) and two cores")
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_THREAD_TIMEOUT"}
    env["OPENBLAS_NUM_THREADS"] = "2"
    if env_timeout is not None:
        env["OPENBLAS_THREAD_TIMEOUT"] = str(env_timeout)
    done = subprocess.run(
        [sys.executable, "-c", _IDLE_CPU], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    spin, busy = map(float, done.stdout.split())
    return spin, busy


def test_blas_threads_sleep_after_a_product_even_when_numpy_loaded_first():
    """engine/_blas_env.py sets OPENBLAS_THREAD_TIMEOUT=4; numpy loaded OpenBLAS before, so the
    first threaded product has it read the variable again and restart its threads: they sleep
    at once after a product (not ~0.1 s of spinning), and the engine's loops take both cores
    right away (BLAS_SPIN_S ~0)."""
    spin, busy = _idle_after_a_product(None)
    assert spin < 1e-6
    assert busy < 0.03  # of 0.1 s idle; spinning took ~0.1 s of a core


def test_a_thread_timeout_the_user_set_is_kept():
    spin, busy = _idle_after_a_product(28)
    assert spin == pytest.approx(2**28 / 2.5e9)
    assert busy > 0.03  # its default: the second thread spins through (most of) the idle time


def test_without_openblas_functions_the_spin_stays_what_openblas_read(monkeypatch):
    """_quiet_blas with no OpenBLAS functions to call (another BLAS, no threadpoolctl) leaves
    BLAS_SPIN_S as it was, not what the environment now says (OPENBLAS_THREAD_TIMEOUT=4)."""
    monkeypatch.setattr(kernels, "_openblas_libraries", lambda: [])
    monkeypatch.setattr(kernels, "BLAS_SPIN_S", kernels._spin_s(28))
    monkeypatch.setattr(kernels, "_blas_quiet", False)
    kernels._quiet_blas()
    assert kernels.BLAS_SPIN_S == kernels._spin_s(28) and kernels._blas_quiet


@pytest.mark.parametrize("numpy_first", [True, False])
def test_the_spin_before_any_product_is_what_openblas_read(numpy_first):
    """Before the first product: OpenBLAS's default (2**28 cycles) where numpy loaded it before
    the engine set the variable; the engine's 4 where the engine came first."""
    import os
    import subprocess
    import sys

    code = (
        "import numpy\n" if numpy_first else ""
    ) + "import engine\nfrom engine import kernels\nprint(repr(kernels.BLAS_SPIN_S))\n"
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_THREAD_TIMEOUT"}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert float(done.stdout) == kernels._spin_s(28 if numpy_first else 4)
