"""Layer normalization's passes (kernels.layer_norm_forward, kernels.layer_norm_backward): the
compiled loops (engine._native) give the numpy forms' bits, on one thread and on several; the
sums are float64 sums, every other operation rounded in the dtype; LayerNorm through them
matches torch (values and gradients) in either form."""

from __future__ import annotations

import numpy as np
import pytest

import engine
from engine import kernels

from .conftest import NATIVE

SHAPES = [(1024, 256), (5, 1), (3, 7), (2, 8), (4, 9), (7, 23), (0, 6), (1, 17), (300, 1),
          (33, 200), (2, 1000)]  # fmt: skip


def _operands(shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(shape) * 3 + 1).astype(dtype)
    g = rng.standard_normal(shape).astype(dtype)
    if x.size:
        x.flat[0] = -0.0
    w = rng.standard_normal(shape[1]).astype(dtype)
    b = rng.standard_normal(shape[1]).astype(dtype)
    return x, g, w, b


def _all_passes(x, g, w, b, eps=1e-5):
    """Forward with and without weight and bias, backward with and without weight and with each
    gradient alone, as bytes."""
    rows, d = x.shape
    out = []
    for ww, bb in ((w, b), (w, None), (None, b), (None, None)):
        y, m, r = np.empty_like(x), np.empty(rows, x.dtype), np.empty(rows, x.dtype)
        kernels.layer_norm_forward(x, ww, bb, y, m, r, eps)
        out += [y, m, r]
    for ww in (w, None):
        for want in ((1, 1, 1), (1, 0, 0), (0, 1, 0), (0, 0, 1)):
            gx = np.empty_like(x) if want[0] else None
            gw = np.empty(d, x.dtype) if want[1] else None
            gb = np.empty(d, x.dtype) if want[2] else None
            kernels.layer_norm_backward(x, g, ww, m, r, gx, gw, gb)
            out += [a for a in (gx, gw, gb) if a is not None]
    return b"".join(a.tobytes() for a in out)


@pytest.mark.skipif(NATIVE is None, reason="engine._native is not built")
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_compiled_loops_give_the_numpy_forms_bits(monkeypatch, shape, dtype):
    x, g, w, b = _operands(shape, dtype)
    monkeypatch.setattr(kernels, "native", None)
    numpy_form = _all_passes(x, g, w, b)
    monkeypatch.setattr(kernels, "native", NATIVE)
    assert _all_passes(x, g, w, b) == numpy_form


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_passes_are_the_same_on_any_number_of_threads(kernel_form, monkeypatch, threads):
    monkeypatch.setattr(kernels, "_blas_last", -float("inf"))  # the threads take the work
    x, g, w, b = _operands((700, 300), np.float32, seed=1)
    before = kernels.get_num_threads()
    try:
        kernels.set_num_threads(1)
        one = _all_passes(x, g, w, b)
        kernels.set_num_threads(threads)
        assert kernels.native_threads(x.size) == threads
        assert _all_passes(x, g, w, b) == one
    finally:
        kernels.set_num_threads(before)


def test_the_passes_compute_what_they_claim(kernel_form):
    x, g, w, b = _operands((50, 300), np.float32, seed=2)
    rows, d = x.shape
    y, m, r = np.empty_like(x), np.empty(rows, np.float32), np.empty(rows, np.float32)
    kernels.layer_norm_forward(x, w, b, y, m, r, 1e-5)
    x64 = x.astype(np.float64)
    mean = (x64.sum(1) / d).astype(np.float32)
    np.testing.assert_array_equal(m, mean)  # a float64 sum, rounded once
    c = (x - mean[:, None]).astype(np.float64)  # the centring in float32
    rstd = (1 / np.sqrt((c * c).sum(1) / d + 1e-5)).astype(np.float32)
    np.testing.assert_allclose(r, rstd, rtol=1e-7, atol=0)
    expect = ((x - m[:, None]) * r[:, None]) * w + b  # each operation rounded in float32
    assert y.tobytes() == expect.tobytes()
    gx, gw, gb = np.empty_like(x), np.empty(d, np.float32), np.empty(d, np.float32)
    kernels.layer_norm_backward(x, g, w, m, r, gx, gw, gb)
    h = (x - m[:, None]) * r[:, None]
    np.testing.assert_allclose(gw, (g.astype(np.float64) * h).sum(0), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(gb, g.astype(np.float64).sum(0), rtol=1e-6, atol=1e-6)
    u = (g * w).astype(np.float64)
    a1, a2 = u.sum(1, keepdims=True), (u * h).sum(1, keepdims=True)
    ref = (u - a1 / d - h * a2 / d) * r[:, None]
    np.testing.assert_allclose(gx, ref, rtol=1e-4, atol=1e-5)


def test_the_compiled_loops_refuse_bad_buffers():
    if NATIVE is None:
        pytest.skip("engine._native is not built")
    x = np.ones((4, 6), np.float32)
    v = np.ones(6, np.float32)
    r = np.ones(4, np.float32)
    with pytest.raises(ValueError, match="operand 1 must hold 6"):
        NATIVE.layer_norm(x, v[:5], None, x.copy(), r.copy(), r.copy(), 4, 6, 1e-5)
    with pytest.raises(ValueError, match="float32 or float64 alike"):
        NATIVE.layer_norm(x, v.astype(np.float64), None, x.copy(), r.copy(), r.copy(), 4, 6, 1e-5)
    with pytest.raises(ValueError, match="contiguous"):
        NATIVE.layer_norm(x[:, ::2], None, None, x.copy(), r.copy(), r.copy(), 4, 3, 1e-5)
    with pytest.raises(ValueError, match="missing"):
        NATIVE.layer_norm(x, None, None, None, r.copy(), r.copy(), 4, 6, 1e-5)
    with pytest.raises(ValueError, match="x, g, mean and rstd"):
        NATIVE.layer_norm_backward(x, None, None, r, r, x.copy(), None, None, 4, 6)
    with pytest.raises(ValueError, match="operand 5 must hold 24"):
        NATIVE.layer_norm_backward(x, x, None, r, r, x[:2].copy(), None, None, 4, 6)
    with pytest.raises(ValueError, match="invalid sizes"):
        NATIVE.layer_norm_backward(x, x, None, r, r, x.copy(), None, None, 4, 0)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("affine", [True, False])
def test_layer_norm_through_the_passes_matches_torch(kernel_form, dtype, affine):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(5)
    x = (rng.standard_normal((4, 9, 48)) * 2 + 3).astype(dtype)
    g = rng.standard_normal(x.shape).astype(dtype)
    mods = {
        m: m.nn.LayerNorm((9, 48), elementwise_affine=affine, dtype=getattr(m, dtype))
        for m in (engine, torch)
    }
    if affine:
        for name in ("weight", "bias"):
            values = rng.standard_normal((9, 48)).astype(dtype)
            for m, mod in mods.items():
                with m.no_grad():
                    getattr(mod, name).copy_(m.tensor(values))
    results = {}
    for m, mod in mods.items():
        xt = m.tensor(x, requires_grad=True)
        y = mod(xt)
        y.backward(m.tensor(g))
        grads = [xt.grad] + ([mod.weight.grad, mod.bias.grad] if affine else [])
        results[m] = [t.detach().numpy() for t in [y, *grads]]
    tol = dict(rtol=1e-4, atol=1e-4) if dtype == "float32" else dict(rtol=1e-10, atol=1e-10)
    for mine, theirs in zip(results[engine], results[torch], strict=True):
        np.testing.assert_allclose(mine, theirs, **tol)


@pytest.mark.parametrize("shape, normalized", [((2, 0), (0,)), ((0, 4), (4,)), ((3, 0, 5), (5,))])
def test_empty_inputs_normalize_as_torchs(kernel_form, shape, normalized):
    torch = pytest.importorskip("torch")
    out = {}
    for m in (engine, torch):
        x = m.ones(*shape, requires_grad=True)
        ln = m.nn.LayerNorm(normalized)
        y = ln(x)
        y.sum().backward()
        out[m] = [tuple(t.shape) for t in (y, x.grad, ln.weight.grad, ln.bias.grad)]
        out[m].append(ln.weight.grad.detach().numpy().tolist())
    assert out[engine] == out[torch]
