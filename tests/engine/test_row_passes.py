"""Batch normalization's per-channel passes (kernels.row_sums, kernels.row_affine): the compiled
loops (engine._native) give the numpy forms' bits, on one thread and on several, and the sums
are the float64 sums they claim to be. Batch norm through them still matches torch."""

from __future__ import annotations

import numpy as np
import pytest

import engine
from engine import kernels

from .conftest import NATIVE

SHAPES = [(32, 32, 1024), (3, 5, 1), (4, 3, 7), (2, 2, 8), (5, 4, 9), (7, 3, 23), (2, 6, 0),
          (8, 16, 55 * 55), (1, 1, 17), (300, 4, 1)]  # fmt: skip


def _operands(shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(shape) * 3).astype(dtype)
    g = rng.standard_normal(shape).astype(dtype)
    if x.size:
        x.flat[0] = -0.0
        x.flat[-1] = 1e30 if dtype == np.float64 else 1e18
    m = rng.standard_normal(shape[1]).astype(dtype)
    return x, g, m


def _bits(arrays):
    return b"".join(np.ascontiguousarray(a).tobytes() for a in arrays)


def _all_passes(x, g, m):
    """Every kind of sum and both affine passes, as bytes."""
    out = []
    for kind in (0, 1, 2):
        r = kernels.row_sums(kind, g if kind == 2 else x, m, x)
        out += list(r) if kind == 2 else [r]
    p = [m, m[::-1].copy(), (m * 0.5).astype(m.dtype), (m + 1).astype(m.dtype)]
    for grad in (False, True):
        for last in (False, True):
            y = np.empty_like(x)
            kernels.row_affine(x, p[0], p[1], y, p[2] if (last or grad) else None,
                               g if grad else None, p[3] if grad else None)  # fmt: skip
            out.append(y)
    return _bits(out)


@pytest.mark.skipif(NATIVE is None, reason="engine._native is not built")
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_compiled_loops_give_the_numpy_forms_bits(monkeypatch, shape, dtype):
    x, g, m = _operands(shape, dtype)
    monkeypatch.setattr(kernels, "native", None)
    numpy_form = _all_passes(x, g, m)
    monkeypatch.setattr(kernels, "native", NATIVE)
    assert _all_passes(x, g, m) == numpy_form


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_passes_are_the_same_on_any_number_of_threads(kernel_form, monkeypatch, threads):
    monkeypatch.setattr(kernels, "_blas_last", -float("inf"))  # the threads take the work
    x, g, m = _operands((16, 24, 3000), np.float32, seed=1)
    before = kernels.get_num_threads()
    try:
        kernels.set_num_threads(1)
        one = _all_passes(x, g, m)
        kernels.set_num_threads(threads)
        assert kernels.native_threads(x.size) == threads
        assert _all_passes(x, g, m) == one
    finally:
        kernels.set_num_threads(before)


def test_sums_are_float64_sums_of_their_terms(kernel_form):
    x, g, m = _operands((6, 5, 1000), np.float32, seed=2)
    x64, g64 = x.astype(np.float64), g.astype(np.float64)
    d64 = (x - m[:, None]).astype(np.float64)  # the centring is in x's dtype
    np.testing.assert_allclose(kernels.row_sums(0, x), x64.sum(-1), rtol=1e-13)
    np.testing.assert_allclose(kernels.row_sums(1, x, m), (d64 * d64).sum(-1), rtol=1e-13)
    s, dot = kernels.row_sums(2, g, m, x)
    np.testing.assert_allclose(s, g64.sum(-1), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(dot, (g64 * d64).sum(-1), rtol=1e-12, atol=1e-12)
    # an all -0.0 row sums to -0.0 (the first term starts each lane, as numpy's sum)
    z = np.full((1, 1, 20), -0.0, np.float32)
    assert np.signbit(kernels.row_sums(0, z)[0, 0])


def test_affine_pass_rounds_each_operation_in_the_dtype(kernel_form):
    x, g, m = _operands((4, 3, 100), np.float32, seed=3)
    s = np.array([3.0, 0.1, -7.0], np.float32)
    b = np.array([1e-3, 2.0, -0.5], np.float32)
    y = kernels.row_affine(x, m, s, np.empty_like(x), b)
    expect = ((x - m[:, None]) * s[:, None]) + b[:, None]  # numpy, float32 per operation
    assert y.tobytes() == expect.astype(np.float32).tobytes()
    y = kernels.row_affine(x, m, s, np.empty_like(x), b, g, m)
    expect = ((((x - m[:, None]) * s[:, None]) + g) - b[:, None]) * m[:, None]
    assert y.tobytes() == expect.tobytes()


def test_the_compiled_loops_refuse_bad_buffers():
    if NATIVE is None:
        pytest.skip("engine._native is not built")
    a = np.ones((2, 3, 4), np.float32)
    p = np.empty(6)
    with pytest.raises(ValueError, match="rows \\* L"):
        NATIVE.row_sums(a, a, a, p, p, 6, 3, 5, 0)
    with pytest.raises(ValueError, match="float32 or float64 alike"):
        NATIVE.row_sums(a, a, a.astype(np.float64), p, p, 6, 3, 4, 1)
    with pytest.raises(ValueError, match="float64"):
        NATIVE.row_sums(a, a, a, p.astype(np.float32), p, 6, 3, 4, 0)
    with pytest.raises(ValueError, match="invalid"):
        NATIVE.row_sums(a, a, a, p, p, 6, 3, 4, 7)
    c = np.ones(3, np.float32)
    with pytest.raises(ValueError, match="c values"):
        NATIVE.row_affine(a, a, c, c[:2], c, c, a.copy(), 6, 3, 4, 0, True)
    with pytest.raises(ValueError, match="contiguous"):
        NATIVE.row_affine(a[:, :, ::2], a, c, c, c, c, a.copy(), 6, 3, 2, 0, True)


@pytest.mark.parametrize("training", [True, False])
def test_batch_norm_through_the_passes_matches_torch(kernel_form, training):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(4)
    x = (rng.standard_normal((8, 6, 12, 12)) * 2 + 1).astype(np.float32)
    g = rng.standard_normal(x.shape).astype(np.float32)
    results = []
    for lib in (engine, torch):
        bn = lib.nn.BatchNorm2d(6)
        with lib.no_grad():
            bn.weight.copy_(lib.tensor(np.linspace(0.5, 2, 6, dtype=np.float32)))
            bn.bias.copy_(lib.tensor(np.linspace(-1, 1, 6, dtype=np.float32)))
        bn.train(training)
        xi = lib.tensor(x, requires_grad=True)
        y = bn(xi)
        y.backward(lib.tensor(g))
        results.append([t.detach().numpy().copy() for t in (y, xi.grad, bn.weight.grad,
                        bn.bias.grad, bn.running_mean, bn.running_var)])  # fmt: skip
    for ours, theirs in zip(*results, strict=True):
        np.testing.assert_allclose(ours, theirs, rtol=2e-5, atol=2e-5)


_FORKED = """
import os, numpy as np
from engine import kernels
kernels.set_num_threads(2)
kernels._blas_last = -float("inf")
x = np.random.default_rng(0).standard_normal((16, 8, 4096)).astype(np.float32)
m = np.zeros(8, np.float32)
parent = kernels.row_sums(2, x, m, x)  # the loops' threads start here
pid = os.fork()
if pid == 0:  # the child has none of them: its first threaded loop starts its own
    child = kernels.row_sums(2, x, m, x)
    same = all(a.tobytes() == b.tobytes() for a, b in zip(parent, child))
    os._exit(0 if same else 3)
_, status = os.waitpid(pid, 0)
print("child", os.waitstatus_to_exitcode(status))
"""


def test_a_forked_child_runs_threaded_loops():
    if NATIVE is None:
        pytest.skip("engine._native is not built")
    import subprocess
    import sys

    run = subprocess.run([sys.executable, "-c", _FORKED], capture_output=True, text=True,
                         timeout=60)  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["child", "0"]
