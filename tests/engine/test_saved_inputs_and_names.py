"""What torch's nodes keep and what they are called, where the engine once differed: pooling and
convolution nodes keep their input until backward (a frozen layer's input too), sign has
SignBackward0 (a zero gradient), rsqrt is its own node keeping its result, and number - tensor,
pow and where have torch's node names. Against torch 2.13's CPU profiler and its graph."""

from __future__ import annotations

import numpy as np
import pytest

import engine
from tests.engine.test_memory_vs_torch import (
    assert_steps_as_torch,
    engine_sequence,
    forward_backward,
    torch_sequence,
)

torch = pytest.importorskip("torch")

X = np.random.default_rng(5).standard_normal((2, 3, 8, 8))


def _F(m):
    return m.nn.functional


POOLS = {
    "max_pool2d": lambda m, y: _F(m).max_pool2d(y, 2),
    "max_pool2d_overlap": lambda m, y: _F(m).max_pool2d(y, 3, stride=2, padding=1),
    "avg_pool2d": lambda m, y: _F(m).avg_pool2d(y, 2),
    "adaptive_avg_pool2d": lambda m, y: _F(m).adaptive_avg_pool2d(y, 3),
    "max_pool1d": lambda m, y: _F(m).max_pool1d(y.flatten(2), 4),
}


@pytest.mark.parametrize("name", sorted(POOLS))
def test_a_pooling_node_keeps_its_input_until_backward(name):
    # the input (x * 2) is held by nothing else: torch's node keeps it, freed when it runs
    def make(m):
        x = m.tensor(X, requires_grad=True)
        return forward_backward(m, lambda: POOLS[name](m, x * 2.0))

    assert_steps_as_torch(make)


def test_a_pooling_node_refuses_an_input_changed_in_place_as_torch():
    for m in (engine, torch):
        x = m.tensor(X, requires_grad=True)
        y = x * 2.0
        z = _F(m).avg_pool2d(y, 2)
        y.add_(1.0)
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            z.sum().backward()


@pytest.mark.parametrize("frozen", ["weight", "input"])
def test_a_convolution_keeps_input_and_weight_whichever_needs_a_gradient(frozen):
    # torch's ConvolutionBackward0 keeps both: a frozen layer's input lives until backward
    x32 = X.astype(np.float32)
    w32 = np.ones((4, 3, 3, 3), np.float32)
    seqs = {}
    for m in (engine, torch):
        x = m.tensor(x32, requires_grad=frozen == "weight")
        w = m.tensor(w32, requires_grad=frozen == "input")
        fwd, bwd = forward_backward(m, lambda m=m, x=x, w=w: _F(m).conv2d(x * 2.0, w * 1.0))
        measure = engine_sequence if m is engine else torch_sequence
        seqs[m] = (measure(fwd), measure(bwd))  # both operands are held by the node alone
    for m in (engine, torch):
        fwd, bwd = seqs[m]
        for nbytes in (x32.nbytes, w32.nbytes):  # made in forward, freed in backward
            assert f"-{nbytes}#?" in bwd, (m.__name__, bwd)
            assert not any(e.startswith(f"-{nbytes}#") for e in fwd), (m.__name__, fwd)


NAMES = {
    "number_minus_tensor": lambda m, x, y: 1.0 - x,
    "tensor_minus_tensor": lambda m, x, y: x - y,
    "pow_int": lambda m, x, y: x**2,
    "pow_float": lambda m, x, y: x.pow(2.5),
    "pow_tensor": lambda m, x, y: x**y,
    "number_pow_tensor": lambda m, x, y: 2.0**x,
    "where": lambda m, x, y: m.where(x > 0, x, y),
    "sign": lambda m, x, y: m.sign(x),
    "rsqrt": lambda m, x, y: x.rsqrt(),
    "rsqrt_in_place": lambda m, x, y: (x * 1.0).rsqrt_(),
}


@pytest.mark.parametrize("name", sorted(NAMES))
def test_node_names_and_gradients_as_torch(name):
    out = {}
    for m in (engine, torch):
        x = m.tensor(np.abs(X[0, 0]) + 0.5, requires_grad=True)
        y = m.tensor(X[0, 1], requires_grad=True)
        r = NAMES[name](m, x, y)
        r.backward(m.ones_like(r))
        out[m] = (r.grad_fn.name(), x.grad.numpy(), None if y.grad is None else y.grad.numpy())
    (en, ex, ey), (tn, tx, ty) = out[engine], out[torch]
    assert en == tn
    np.testing.assert_allclose(ex, tx, rtol=1e-13)
    assert (ey is None) == (ty is None)
    if ey is not None:
        np.testing.assert_allclose(ey, ty, rtol=1e-13)


def test_signs_zero_gradient_is_a_block_of_its_own_as_torch():
    def make(m):
        x = m.tensor(X, requires_grad=True)
        return forward_backward(m, lambda: m.sign(x * 2.0) * x)

    assert_steps_as_torch(make)


def test_rsqrt_keeps_its_result_not_its_input_as_torch():
    def make(m):
        x = m.tensor(np.abs(X) + 0.5, requires_grad=True)
        return forward_backward(m, lambda: (x * 2.0).rsqrt())

    assert_steps_as_torch(make)
