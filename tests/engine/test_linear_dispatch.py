"""F.linear dispatched as torch's at::linear: addmm for a 2-D input with a bias and for a
contiguous N-d one viewed as 2-D; otherwise matmul(input, weight.t()) (MmBackward0 through
TBackward0, an N-d input folded by reshape and _unsafe_view back, a copy for one that cannot be
viewed) and the bias added in place. Node chains, values, gradients and every block forward and
backward against torch 2.13 (bias-free projections are every linear layer of LLaMA-style
models)."""

from __future__ import annotations

import numpy as np
import pytest

import engine
from tests.conftest import node_chain
from tests.engine.test_memory_vs_torch import assert_steps_as_torch, forward_backward

torch = pytest.importorskip("torch")

X = np.random.default_rng(0).standard_normal((32, 16))
W = np.random.default_rng(1).standard_normal((24, 16))
B = np.random.default_rng(2).standard_normal(24)

CASES = {  # name -> call(F, x, w, b) with x [32, 16]
    "2d": lambda F, x, w, b: F.linear(x, w),
    "2d_bias": lambda F, x, w, b: F.linear(x, w, b),
    "3d": lambda F, x, w, b: F.linear(x.reshape(4, 8, 16), w),
    "3d_bias": lambda F, x, w, b: F.linear(x.reshape(4, 8, 16), w, b),
    "transposed": lambda F, x, w, b: F.linear(x.reshape(4, 8, 16).transpose(0, 1), w),
    "transposed_bias": lambda F, x, w, b: F.linear(x.reshape(4, 8, 16).transpose(0, 1), w, b),
}


def _run(m, name, dtype=np.float64):
    x = m.tensor(X.astype(dtype), requires_grad=True)
    w = m.tensor(W.astype(dtype), requires_grad=True)
    b = m.tensor(B.astype(dtype), requires_grad=True)
    y = CASES[name](m.nn.functional, x * 1.0, w, b)
    y.backward(m.tensor(np.random.default_rng(3).standard_normal(tuple(y.shape)).astype(dtype)))
    return y, x, w, b


@pytest.mark.parametrize("name", sorted(CASES))
def test_nodes_values_and_gradients_as_torch(name):
    (ey, ex, ew, eb), (ty, tx, tw, tb) = _run(engine, name), _run(torch, name)
    if "bias" not in name:  # (addmm's first edge is its bias in torch's graph)
        assert node_chain(ey.grad_fn) == node_chain(ty.grad_fn)
    assert ey.grad_fn.name() == ty.grad_fn.name()
    np.testing.assert_allclose(ey.detach().numpy(), ty.detach().numpy(), rtol=1e-12)
    for e, t in ((ex, tx), (ew, tw)):
        np.testing.assert_allclose(e.grad.numpy(), t.grad.numpy(), rtol=1e-12)
    if "bias" in name:
        np.testing.assert_allclose(eb.grad.numpy(), tb.grad.numpy(), rtol=1e-12)
    else:
        assert eb.grad is None and tb.grad is None


@pytest.mark.parametrize("name", sorted(CASES))
def test_allocations_forward_and_backward_as_torch(name):
    def make(m):
        x = m.tensor(X.astype(np.float32), requires_grad=True)
        w = m.tensor(W.astype(np.float32), requires_grad=True)
        b = m.tensor(B.astype(np.float32), requires_grad=True)
        return forward_backward(m, lambda: CASES[name](m.nn.functional, x * 1.0, w, b))

    assert_steps_as_torch(make)


def test_a_bias_free_linear_layer_as_torch():
    def make(m):
        torch.manual_seed(0)
        layer = torch.nn.Linear(16, 24, bias=False)
        mod = layer if m is torch else engine.nn.Linear(16, 24, bias=False)
        if m is engine:
            mod.load_state_dict({"weight": layer.weight.detach().numpy()})
        x = m.tensor(X.reshape(2, 16, 16).astype(np.float32), requires_grad=True)
        return forward_backward(m, lambda: mod(x * 1.0))

    assert_steps_as_torch(make)
