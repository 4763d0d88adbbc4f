"""Two layouts torch's mm backward cares about, block for block against its CPU profiler.

- A column-major operand (`x @ w.t()`, `x.t() @ w`, a batch folded into one mm against `w.t()`):
  torch's mm_mat1/mm_mat2_backward compute its gradient transposed, so that the `.t()`'s
  TBackward0 hands AccumulateGrad a contiguous gradient, which it takes over instead of copying
  (for a tied embedding's `h @ emb.weight.t()` that copy would be the vocabulary's size).
- A broadcast (stride-0) gradient reaching a Linear layer (`y.sum()`, `y.mean()`): torch's CPU
  mm copies it for BLAS once per product, after allocating the product's result, and frees the
  copy when the product is made.
"""

from __future__ import annotations

import numpy as np
import pytest

import engine
from tests.engine.test_memory_vs_torch import assert_steps_as_torch

torch = pytest.importorskip("torch")


def _t(m, shape, seed=0, dtype=np.float32):
    return m.tensor(np.random.default_rng(seed).standard_normal(shape).astype(dtype))


def _tr(t):
    return t.transpose(-1, -2)


def _same(t):
    return t


MATMULS = {
    "x @ w.t()": (_same, _tr, (32, 64), (128, 64)),
    "x.t() @ w": (_tr, _same, (64, 32), (64, 128)),
    "x.t() @ w.t()": (_tr, _tr, (64, 32), (128, 64)),
    "x3 @ w.t() (folded)": (_same, _tr, (4, 8, 64), (128, 64)),
    "x @ w": (_same, _same, (32, 64), (64, 128)),
}
GRADS = {"both": (True, True), "w only": (False, True), "x only": (True, False)}


@pytest.mark.parametrize("grads", GRADS.values(), ids=GRADS.keys())
@pytest.mark.parametrize("name", MATMULS)
def test_matmul_backward_blocks_as_torch(name, grads):
    fa, fb, sa, sb = MATMULS[name]

    def make(m):
        x = _t(m, sa).requires_grad_(grads[0])
        w = _t(m, sb, 1).requires_grad_(grads[1])

        def step():
            (fa(x) @ fb(w)).sum().backward()

        return [step]

    assert_steps_as_torch(make)


@pytest.mark.parametrize("name", MATMULS)
def test_matmul_gradients_values_and_strides_as_torch(name):
    fa, fb, sa, sb = MATMULS[name]
    got = {}
    for m in (engine, torch):
        x = _t(m, sa, dtype=np.float64).requires_grad_()
        w = _t(m, sb, 1, dtype=np.float64).requires_grad_()
        (fa(x) @ fb(w)).sin().sum().backward()
        got[m] = (x.grad, w.grad)
    for e, t in zip(got[engine], got[torch], strict=True):
        np.testing.assert_allclose(e.numpy(), t.numpy(), rtol=1e-12, atol=1e-12)
        assert e.stride() == t.stride()


LINEARS = [
    ((8, 64), True),
    ((8, 64), False),
    ((4, 8, 64), True),
    ((4, 8, 64), False),
    ((64,), True),
]


@pytest.mark.parametrize("reduce", ["sum", "mean"])
@pytest.mark.parametrize(("shape", "bias"), LINEARS, ids=[f"{s}-bias{b}" for s, b in LINEARS])
def test_linear_backward_of_a_broadcast_gradient_as_torch(shape, bias, reduce):
    def make(m):
        lin = m.nn.Linear(64, 256, bias=bias)
        x = _t(m, shape).requires_grad_()

        def step():
            y = lin(x)
            (y.sum() if reduce == "sum" else y.mean()).backward()

        return [step]

    assert_steps_as_torch(make)
