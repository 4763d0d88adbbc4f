"""erf on float32/float16 (a rational approximation evaluated in float64) against float64 erf:
as accurate as torch's own float32 kernel; float64 keeps the series (to ~1e-15). The float32
tests run on both forms of the loop: numpy's passes and engine._native's compiled loop (where it
was built), which must give the same bits."""

from __future__ import annotations

import math
import os
import subprocess
import sys

import numpy as np
import pytest

import engine
from engine import kernels

NATIVE = kernels.native


def _erf64(x: np.ndarray) -> np.ndarray:
    return np.array([math.erf(v) for v in x.astype(np.float64).tolist()])


def test_float32_erf_is_within_half_an_ulp_of_float64_erf(kernel_form):
    x = np.concatenate(
        [np.linspace(-8, 8, 200_001, dtype=np.float32), np.float32([0, -0.0, 1e-30, -1e-7, 4, -4])]
    )
    got = engine.erf(engine.tensor(x)).numpy()
    assert got.dtype == np.float32
    ref = _erf64(x)
    err = np.abs(got.astype(np.float64) - ref)
    ulp = np.spacing(np.abs(ref).astype(np.float32)).astype(np.float64)
    assert (err <= 0.5 * ulp + 2e-9).all(), float((err / ulp).max())
    assert float(err.max()) < 3.5e-8  # torch 2.13's float32 erf: 3.25e-8 on the same points
    assert np.array_equal(np.sign(got), np.sign(x))  # odd, sign of zero kept
    assert got[-2] == 1.0 and got[-1] == -1.0


def test_float32_erf_is_the_same_on_one_and_many_threads(kernel_form):
    x = engine.randn(1 << 19) * 3
    before = engine.get_num_threads()
    try:
        engine.set_num_threads(1)
        one = engine.erf(x).numpy()
        engine.set_num_threads(2)
        two = engine.erf(x).numpy()
    finally:
        engine.set_num_threads(before)
    assert np.array_equal(one, two)


def test_float32_erf_of_strided_and_odd_sized_tensors_is_elementwise(kernel_form):
    """Blocks and per-thread scratch must not show: a transposed tensor (the strided path), and
    lengths either side of a block's, give each element what it gives alone."""
    x = engine.randn(700, 500) * 3
    want = engine.erf(x.contiguous()).numpy()
    assert np.array_equal(engine.erf(x.t()).numpy(), want.T)
    flat = x.reshape(-1)
    for n in (1, 65535, 65536, 65537, 3 * 65536 + 7):
        assert np.array_equal(engine.erf(flat[:n]).numpy(), want.reshape(-1)[:n])


def test_float16_erf_is_float64_erf_rounded():
    x = np.linspace(-5, 5, 20_001).astype(np.float16)
    got = engine.erf(engine.tensor(x)).numpy()
    assert got.dtype == np.float16
    assert np.array_equal(got, _erf64(x).astype(np.float16))


def test_float64_erf_keeps_float64_precision():
    x = np.linspace(-6, 6, 20_001)
    got = engine.erf(engine.tensor(x)).numpy()
    assert np.abs(got - _erf64(x)).max() < 1e-15


def test_float32_erf_matches_torch(kernel_form):
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(0).standard_normal(100_000).astype(np.float32) * 3
    ours = engine.erf(engine.tensor(x)).numpy()
    theirs = torch.erf(torch.from_numpy(x)).numpy()
    assert np.abs(ours - theirs).max() <= 6e-8  # each within half an ulp of the true value


_EDGES = np.float32(
    [np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-45, -1e-45, 1.2e-38, 1e-30, 0.5, 3.9999998]
    + [4.0, 4.0000005, -4.0, -4.0000005, 10.0, 1e30, -1e30, 3.4e38, -3.4e38]
)


@pytest.mark.skipif(NATIVE is None, reason="engine._native is off (not built, or MEMPROF_NATIVE=0)")
def test_the_compiled_loop_gives_the_numpy_forms_bits(monkeypatch):
    rng = np.random.default_rng(1)
    x = np.concatenate(
        [
            _EDGES,
            np.linspace(-6, 6, 300_001, dtype=np.float32),
            (rng.standard_normal(300_000) * 3).astype(np.float32),
            rng.integers(0, 2**32, 300_000, dtype=np.uint32).view(np.float32),  # any bits
        ]
    )
    monkeypatch.setattr(kernels, "native", NATIVE)
    native = engine.erf(engine.tensor(x)).numpy()
    inplace = engine.tensor(x)
    inplace.erf_()
    monkeypatch.setattr(kernels, "native", None)
    numpy_form = engine.erf(engine.tensor(x)).numpy()
    assert np.array_equal(native.view(np.uint32), numpy_form.view(np.uint32))
    assert np.array_equal(inplace.numpy().view(np.uint32), numpy_form.view(np.uint32))


@pytest.mark.skipif(NATIVE is None, reason="engine._native is off (not built, or MEMPROF_NATIVE=0)")
def test_the_compiled_loop_refuses_what_it_cannot_read():
    x = np.zeros(4, np.float32)
    with pytest.raises(TypeError, match="float32"):
        NATIVE.erf_f32(np.zeros(4), x)
    with pytest.raises(ValueError, match="same number"):
        NATIVE.erf_f32(np.zeros(3, np.float32), x)
    with pytest.raises(ValueError, match="contiguous"):
        NATIVE.erf_f32(np.zeros(8, np.float32)[::2], x)


def test_memprof_native_0_turns_the_compiled_loops_off():
    code = "from engine import kernels; print(kernels.native is None)"
    env = {**os.environ, "MEMPROF_NATIVE": "0"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.stdout.strip() == "True", out.stderr
