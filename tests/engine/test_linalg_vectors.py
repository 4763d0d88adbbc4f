"""Products with vectors as torch dispatches them: dot (DotBackward0), mv (MvBackward0), a
vector times a matrix as unsqueeze(0) / mm / squeeze_(0), outer as a broadcast product; values,
gradients, nodes, refusals and peaks against torch."""

from __future__ import annotations

import numpy as np
import pytest

import engine
from tests.conftest import assert_raises_as_torch
from tests.engine.test_memory_vs_torch import assert_peak_as_torch

torch = pytest.importorskip("torch")

A = np.arange(3.0) - 1.0
B = np.arange(3.0) * 0.5 + 1.0
M = np.arange(6.0).reshape(2, 3) * 0.25

CALLS = {
    "vec @ vec": lambda m, a, b, w: a @ b,
    "mat @ vec": lambda m, a, b, w: w @ a,
    "vec @ mat": lambda m, a, b, w: a @ w.t(),
    "dot": lambda m, a, b, w: m.dot(a, b),
    "Tensor.dot": lambda m, a, b, w: a.dot(b),
    "mv": lambda m, a, b, w: m.mv(w, b),
    "outer": lambda m, a, b, w: m.outer(a, b),
    "ger": lambda m, a, b, w: a.ger(b),
}


@pytest.mark.parametrize("name", list(CALLS))
def test_values_gradients_and_nodes_as_torch(name):
    out = []
    for lib in (engine, torch):
        a, b, w = (lib.tensor(v, requires_grad=True) for v in (A, B, M))
        y = CALLS[name](lib, a, b, w)
        weights = lib.tensor(np.linspace(1.0, 2.0, y.numel()).reshape(tuple(y.shape)))
        (y * weights).sum().backward()
        grads = [t.grad.numpy() if t.grad is not None else None for t in (a, b, w)]
        out.append((y.detach().numpy(), grads, y.grad_fn.name(), tuple(y.shape)))
    (ey, eg, en, es), (ty, tg, tn, ts) = out
    np.testing.assert_allclose(ey, ty, rtol=1e-12)
    for x, y in zip(eg, tg, strict=True):
        assert (x is None) == (y is None)
        if x is not None:
            np.testing.assert_allclose(x, y, rtol=1e-12)
    assert (en, es) == (tn, ts)


@pytest.mark.parametrize(
    "call",
    [
        lambda m: m.dot(m.ones(2, 3), m.ones(3)),
        lambda m: m.dot(m.ones(3), m.ones(4)),
        lambda m: m.dot(m.ones(3, dtype=m.float64), m.ones(4)),
        lambda m: m.mv(m.ones(3), m.ones(3)),
    ],
)
def test_refusals_as_torch(call):
    assert_raises_as_torch(call, RuntimeError)


def _step(m):
    rng = np.random.default_rng(3)
    a, b = (m.tensor(rng.standard_normal(512).astype(np.float32)) for _ in range(2))
    w = m.tensor(rng.standard_normal((256, 512)).astype(np.float32))
    for t in (a, b, w):
        t.requires_grad_(True)

    def region():
        for t in (a, b, w):
            t.grad = None
        h = m.mv(w, a) + (b @ w.t())
        (h.sum() * m.dot(a, b) + m.outer(h, a).mean()).backward()

    region()
    return region


@pytest.mark.torch
def test_peak_matches_pytorch_profiler():
    assert_peak_as_torch(_step)


RNG = np.random.default_rng(1)
BIAS, X, W = RNG.standard_normal(4), RNG.standard_normal((3, 2)), RNG.standard_normal((2, 4))
ADDMM = {
    "bias": lambda m, b, x, w: m.addmm(b, x, w),
    "beta and alpha": lambda m, b, x, w: m.addmm(b, x, w, beta=0.5, alpha=2.0),
    "2-D input": lambda m, b, x, w: m.addmm(b.expand(3, 4) * 1, x, w),
    "row input": lambda m, b, x, w: m.addmm(b.reshape(1, 4), x, w),
    "column-major mat2": lambda m, b, x, w: m.addmm(b, x, (w.t() * 1).t()),
    "column-major mat1": lambda m, b, x, w: m.addmm(b, (x.t() * 1).t(), w),
    "beta 0": lambda m, b, x, w: m.addmm(b, x, w, beta=0),
    "method": lambda m, b, x, w: b.addmm(x, w),
}


@pytest.mark.parametrize("name", list(ADDMM))
def test_addmm_values_gradients_and_node_as_torch(name):
    out = []
    for lib in (engine, torch):
        b, x, w = (lib.tensor(v, requires_grad=True) for v in (BIAS, X, W))
        y = ADDMM[name](lib, b, x, w)
        (y * lib.tensor(np.linspace(1.0, 2.0, 12).reshape(3, 4))).sum().backward()
        grads = [None if t.grad is None else t.grad.numpy() for t in (b, x, w)]
        out.append((y.detach().numpy(), grads, y.grad_fn.name()))
    (ey, eg, en), (ty, tg, tn) = out
    np.testing.assert_allclose(ey, ty, rtol=1e-12)
    for a, b in zip(eg, tg, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-12)
    assert en == tn


@pytest.mark.parametrize(
    "call",
    [
        lambda m: m.addmm(m.ones(4), m.ones(3, 2), m.ones(3, 4)),
        lambda m: m.addmm(m.ones(2), m.ones(3, 2), m.ones(2, 4)),
        lambda m: m.addmm(m.ones(4), m.ones(3), m.ones(2, 4)),
    ],
)
def test_addmm_refuses_as_torch(call):
    assert_raises_as_torch(call, RuntimeError)


def _conv1d_step(m):
    # GPT-2's Conv1D (Hugging Face): addmm(bias, x.view(-1, nx), weight), weight [nx, nf]
    rng = np.random.default_rng(8)
    x = m.tensor(rng.standard_normal((4, 32, 64)).astype(np.float32)).requires_grad_(True)
    w = m.tensor(rng.standard_normal((64, 192)).astype(np.float32)).requires_grad_(True)
    b = m.tensor(rng.standard_normal(192).astype(np.float32)).requires_grad_(True)

    def region():
        for t in (x, w, b):
            t.grad = None
        h = m.addmm(b, x.view(-1, 64), w).view(4, 32, 192)
        h.relu().mean().backward()

    region()
    return region


@pytest.mark.torch
def test_addmm_step_peaks_as_pytorch_profiler():
    assert_peak_as_torch(_conv1d_step)
