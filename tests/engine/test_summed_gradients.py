"""Gradients summed into a node's input buffer, against torch 2.13's CPU profiler.

torch's InputBuffer::add moves a first gradient into the buffer; one summed into it is only read
(old + var, or old.add_(var)) and stays in the running node's outputs until every edge is served,
then dies with them, first to last. at::linear's weight goes through weight.t()'s TBackward0, a
node of its own that runs after AddmmBackward0, so the weight's sum comes after that node's other
gradients are freed (the engine's node records no TBackward0: the walk runs one, Function.t_edges).
"""

from __future__ import annotations

import numpy as np
import pytest

import engine
from tests.engine.test_memory_vs_torch import assert_steps_as_torch, forward_backward

torch = pytest.importorskip("torch")


def _leaves(m):
    rng = np.random.default_rng(0)
    return [
        m.tensor(rng.standard_normal((16, 32)).astype(np.float32), requires_grad=True)
        for _ in range(2)
    ]


@pytest.mark.parametrize(
    "expr",
    [
        lambda x, y: (x * y) + x + y,  # MulBackward0's two gradients each summed out of place
        lambda x, y: (x * y) * 2 + x * 3 + y,
        lambda x, y: x.tanh() * y.tanh() + (x * y),
    ],
)
def test_summed_gradient_lives_until_its_node_served_every_edge(expr):
    def make(m):
        a, b = _leaves(m)
        return forward_backward(m, lambda: expr(a.exp(), b.sin()))

    assert_steps_as_torch(make)


@pytest.mark.parametrize("bias", [True, False])
def test_linear_weight_summed_in_its_tbackward(bias):
    """One Linear applied three times: its weight's gradients summed where torch's TBackward0
    sums them (without bias the engine's node computes x's gradient before the weight's, torch's
    MmBackward0 the weight's first: the forward only, there)."""

    def make(m):
        torch.manual_seed(0)
        lin = m.nn.Linear(32, 32, bias=bias)
        x = _leaves(m)[0]
        steps = forward_backward(m, lambda: lin(lin(lin(x).tanh()).tanh()))
        return steps if bias else steps[:1]

    assert_steps_as_torch(make)


def test_gradients_through_the_walks_tbackward_as_torch():
    """autograd.grad and backward(inputs=) reach a weight through the walk's TBackward0."""
    got = {}
    torch.manual_seed(0)
    mods = {torch: torch.nn.Linear(8, 8).double(), engine: engine.nn.Linear(8, 8).double()}
    mods[engine].load_state_dict(
        {k: v.detach().numpy() for k, v in mods[torch].state_dict().items()}
    )
    for m, lin in mods.items():
        x = m.tensor(np.random.default_rng(1).standard_normal((4, 8)), requires_grad=True)
        loss = (lin(lin(x).tanh()) ** 2).sum()
        (gw,) = m.autograd.grad(loss, [lin.weight], retain_graph=True)
        loss.backward(inputs=[lin.weight])
        got[m] = (gw.detach().numpy(), lin.weight.grad.numpy(), lin.bias.grad, x.grad)
    e, t = got[engine], got[torch]
    np.testing.assert_allclose(e[0], t[0], rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(e[1], t[1], rtol=1e-13, atol=1e-13)
    assert e[2] is None and t[2] is None and e[3] is None and t[3] is None


ACCUMULATED = {
    # the buffer's gradient dense, the incoming one a sum()'s broadcast: added in place
    "x - x.sum(1)": lambda m, x: (x - x.sum(1).unsqueeze(1)).sin().sum(),
    "x.sum() + (x*x).sum()": lambda m, x: x.sum() + (x * x).sum(),
    "y.sum() + y.sin().sum()": lambda m, x: (lambda y: y.sum() + y.sin().sum())(x * 2),
    # the buffer's gradient the broadcast one: summed out of place, as torch
    "(x*x).sum() + x.sum()": lambda m, x: (x * x).sum() + x.sum(),
    "y.sin().sum() + y.sum()": lambda m, x: (lambda y: y.sin().sum() + y.sum())(x * 2),
}


@pytest.mark.parametrize("name", list(ACCUMULATED))
def test_a_broadcast_gradient_is_added_into_a_dense_one_in_place_as_torch(name):
    """torch's InputBuffer accumulate: `old.add_(new)` when the buffer's gradient is a plain dense
    tensor nobody else holds, whatever the incoming gradient's layout (an expanded sum()
    gradient); the engine used to add out of place unless the strides were equal (one more
    input-sized block)."""
    fn = ACCUMULATED[name]

    def make(m):
        x = m.tensor(np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32))
        x.requires_grad_()
        return [lambda: fn(m, x).backward()]

    assert_steps_as_torch(make)
