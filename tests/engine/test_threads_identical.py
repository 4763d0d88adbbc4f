"""Kernels that split large work across the engine's thread pool give bitwise the same results
with 1 and N threads (work is cut into fixed chunks, never into per-thread reductions)."""

from __future__ import annotations

import numpy as np
import pytest

import engine
from engine import kernels

N = kernels.PARALLEL_MIN_ELEMS  # the pool is used (and engine._native's threads)
assert N % (1 << 16) == 0

PROGRAMS = {
    "gelu": lambda x: engine.nn.functional.gelu(x),
    "gelu_tanh": lambda x: engine.nn.functional.gelu(x, approximate="tanh"),
    "exp_mul_add": lambda x: (x.exp() * 0.5 + x).sigmoid(),
    "relu_maxpool": lambda x: engine.nn.functional.max_pool2d(
        x.view(N >> 16, 16, 64, 64).relu(), 2
    ),
    "batch_norm": lambda x: engine.nn.functional.batch_norm(
        x.view(N >> 16, 16, 64, 64), None, None, training=True
    ),
    "softmax": lambda x: x.view(N >> 10, 1024).softmax(-1),
    # full reductions add fixed blocks on the pool; last-axis reductions split rows
    "sum_mean": lambda x: x * x.sum() + x * x.mean(),
    "row_sums": lambda x: x.view(N >> 10, 1024).sum(-1) + x.view(N >> 10, 1024).mean(-1),
}


def _run(name: str, threads: int):
    kernels.set_num_threads(threads)
    a = np.random.default_rng(0).standard_normal(N).astype(np.float32)
    x = engine.tensor(a, requires_grad=True)
    y = PROGRAMS[name](x)
    y.backward(engine.tensor(np.linspace(-1, 1, y.numel(), dtype=np.float32).reshape(y.shape)))
    return y.detach().numpy().copy(), x.grad.numpy().copy()


@pytest.fixture(autouse=True)
def _cores_free(monkeypatch):
    # no BLAS product just ran: the pool takes large work (kernels.pool_threads)
    monkeypatch.setattr(kernels, "_blas_last", -float("inf"))


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_results_are_bitwise_equal_with_one_and_two_threads(name):
    before = kernels.get_num_threads()
    try:
        y1, g1 = _run(name, 1)
        y2, g2 = _run(name, 2)
    finally:
        kernels.set_num_threads(before)
    assert y1.tobytes() == y2.tobytes()
    assert g1.tobytes() == g2.tobytes()


def test_owning_the_blas_budget_splits_products_and_gives_blas_back():
    threadpoolctl = pytest.importorskip("threadpoolctl")

    def blas_threads():
        return max(
            i["num_threads"] for i in threadpoolctl.threadpool_info() if i["user_api"] == "blas"
        )

    before, n = blas_threads(), kernels.get_num_threads()
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((256, 384)), rng.standard_normal((384, 200))
    try:
        kernels.set_num_threads(2, own_blas=True)
        assert blas_threads() == 1
        for x, y in ((a, b), (a[None].repeat(3, 0), b), (a[:, :7].T @ a[:, :7], a[:7])):
            out = np.empty(
                np.broadcast_shapes(x.shape[:-1], (1,))[:-1] + (x.shape[-2], y.shape[-1])
            )
            kernels.gemm(x, y, out)
            np.testing.assert_allclose(out, x @ y, rtol=1e-12, atol=1e-12)
        y = engine.nn.functional.linear(engine.tensor(a), engine.tensor(b.T.copy()))
        np.testing.assert_allclose(y.numpy(), a @ b, rtol=1e-12)
    finally:
        kernels.set_num_threads(n, own_blas=False)
    assert blas_threads() == before


def test_the_pool_steps_aside_while_blas_threads_spin(monkeypatch):
    before = kernels.get_num_threads()
    try:
        kernels.set_num_threads(2)
        # engine/_blas_env.py has OpenBLAS's threads sleep at once: the pool has both cores
        # right after a product
        a = np.ones((256, 256), np.float32)
        kernels.gemm(a, a, np.empty_like(a))
        if kernels._openblas_libraries():
            assert kernels.BLAS_SPIN_S < 1e-6
            assert kernels.pool_threads(kernels.PARALLEL_MIN_ELEMS) == 2
        # OpenBLAS's default timeout (2**28 cycles) where a user keeps it
        monkeypatch.setattr(kernels, "BLAS_SPIN_S", kernels._spin_s(28))
        monkeypatch.setattr(kernels, "_blas_last", -float("inf"))
        big = kernels.PARALLEL_MIN_ELEMS
        assert kernels.pool_threads(big) == 2 and kernels.pool_threads(big - 1) == 1
        small = np.ones((64, 64), np.float32)  # m*n*k = 2**18: BLAS runs it on one thread
        kernels.gemm(small, small, np.empty_like(small))
        assert kernels.pool_threads(big) == 2
        a = np.ones((128, 128), np.float32)  # 2**21: on this thread alone (BLAS_SOLO_MNK)
        kernels.gemm(a, a, np.empty_like(a))
        assert kernels.pool_threads(big) == 2 or kernels._blas_solo() is None
        a = np.ones((256, 256), np.float32)
        kernels.gemm(a, a, np.empty_like(a))  # BLAS's own threads ran a product just now
        assert kernels.pool_threads(big) == 1
        monkeypatch.setattr(kernels, "_blas_last", kernels._perf() - kernels.BLAS_SPIN_S)
        assert kernels.pool_threads(big) == 2  # their spin is over: the pool has the cores
        kernels.set_num_threads(1)
        assert kernels.pool_threads(big) == 1
    finally:
        kernels.set_num_threads(before)


_NESTED = """
import numpy as np, engine
from engine import kernels
kernels.set_num_threads(2, own_blas=True)
kernels.SPLIT_SAMPLE_MACS = 0  # every convolution runs in parts on the pool
x = engine.tensor(np.ones((4, 8, 16, 16), np.float32), requires_grad=True)
conv = engine.nn.Conv2d(8, 512, 3, padding=1)  # each part's products are large enough to split
conv(x).sum().backward()
a = engine.tensor(np.ones((1 << 19,), np.float32))
kernels.run_parts(lambda i, lo, hi: engine.nn.functional.gelu(a), [(0, 1), (1, 2)])
print("done", float(x.grad.sum()) != 0)
"""


def test_work_on_the_pool_that_would_split_again_runs_on_its_own_thread():
    # a convolution's parts run on the pool; with own_blas each part's gemm and activation
    # would split on the same pool and wait for threads that are all waiting (a hang before)
    import subprocess
    import sys

    pytest.importorskip("threadpoolctl")
    run = subprocess.run(
        [sys.executable, "-c", _NESTED], capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["done", "True"]


def test_the_loops_threads_poll_a_while_then_sleep():
    """After a job the compiled loops' threads poll for the next for a few ms
    (set_pool_spin), then sleep: an idle engine does not keep a core busy."""
    import time

    native = kernels.native
    if native is None or not hasattr(native, "set_pool_spin"):
        pytest.skip("engine._native not built")
    with pytest.raises(ValueError):
        native.set_pool_spin(-1)
    g = np.ones(1 << 20, np.float32)
    out = np.empty_like(g)
    native.threshold_backward(g, g, out, 0.0, 2)  # a job on two threads
    start = time.process_time()
    time.sleep(0.2)
    assert time.process_time() - start < 0.1  # (the polling: 5 ms; then asleep)
