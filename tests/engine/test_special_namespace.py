"""engine.special (torch.special's aliases of engine ops) against torch 2.13: values in float64
and float32, gradients (and float64 central differences), node names, blocks forward and
backward as torch's CPU profiler shows them, meta shapes."""

from __future__ import annotations

import numpy as np
import pytest

import engine
from tests.conftest import node_chain
from tests.engine.test_memory_vs_torch import assert_steps_as_torch, forward_backward

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(21)
X = RNG.standard_normal((4, 7))
P = RNG.uniform(0.05, 0.95, (4, 7))  # logit, erfinv (|x| < 1)
POS = RNG.uniform(0.3, 4.0, (4, 7))  # gammaln, digamma, xlogy's y

CASES = {  # torch.special name -> (input, call(special, x))
    "expit": (X, lambda s, x: s.expit(x)),
    "logit": (P, lambda s, x: s.logit(x)),
    "logit_eps": (P, lambda s, x: s.logit(x, eps=0.2)),
    "erf": (X, lambda s, x: s.erf(x)),
    "erfc": (X, lambda s, x: s.erfc(x)),
    "erfinv": (P, lambda s, x: s.erfinv(x)),
    "xlogy": (POS, lambda s, x: s.xlogy(x, x.detach() + 1.5)),
    "xlogy_scalar_self": (POS, lambda s, x: s.xlogy(2.0, x)),
    "xlogy_scalar_other": (POS, lambda s, x: s.xlogy(x, 3.0)),
    "log_softmax": (X, lambda s, x: s.log_softmax(x, 1)),
    "softmax": (X, lambda s, x: s.softmax(x, 0)),
    "gammaln": (POS, lambda s, x: s.gammaln(x)),
    "digamma": (POS, lambda s, x: s.digamma(x)),
    "psi": (POS, lambda s, x: s.psi(x)),
    "sinc": (X, lambda s, x: s.sinc(x)),
    "logsumexp": (X, lambda s, x: s.logsumexp(x, 1)),
    "logsumexp_keepdim": (X, lambda s, x: s.logsumexp(x, (0, 1), keepdim=True)),
    "exp2": (X, lambda s, x: s.exp2(x)),
    "expm1": (X, lambda s, x: s.expm1(x)),
    "log1p": (POS, lambda s, x: s.log1p(x)),
}


def _mod(m):
    return m.special


def _run(m, name, dtype):
    arr, call = CASES[name]
    x = m.tensor(arr.astype(dtype), requires_grad=True)
    y = call(_mod(m), x)
    g = np.random.default_rng(3).standard_normal(tuple(y.shape)).astype(dtype)
    y.backward(m.tensor(g))
    return y.detach().numpy(), x.grad.numpy(), node_chain(y.grad_fn)


@pytest.mark.parametrize("name", sorted(CASES))
def test_values_gradients_nodes_as_torch(name):
    ours = _run(engine, name, np.float64)
    theirs = _run(torch, name, np.float64)
    np.testing.assert_allclose(ours[0], theirs[0], rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(ours[1], theirs[1], rtol=1e-12, atol=1e-13)
    assert ours[2] == theirs[2]


@pytest.mark.parametrize("name", sorted(CASES))
def test_float32_as_torch(name):
    ours = _run(engine, name, np.float32)
    theirs = _run(torch, name, np.float32)
    assert ours[0].dtype == theirs[0].dtype == np.float32
    np.testing.assert_allclose(ours[0], theirs[0], rtol=2e-5, atol=2e-6)
    np.testing.assert_allclose(ours[1], theirs[1], rtol=2e-4, atol=2e-5)


@pytest.mark.parametrize("name", ["expit", "logit", "erfinv", "gammaln", "sinc", "logsumexp"])
def test_gradient_central_differences(name):
    arr, call = CASES[name]
    x = engine.tensor(arr, requires_grad=True)
    call(engine.special, x).sum().backward()
    h = 1e-6
    numeric = np.empty_like(arr)
    for idx in np.ndindex(arr.shape):
        up, down = arr.copy(), arr.copy()
        up[idx] += h
        down[idx] -= h
        f_up = call(engine.special, engine.tensor(up)).sum().item()
        f_down = call(engine.special, engine.tensor(down)).sum().item()
        numeric[idx] = (f_up - f_down) / (2 * h)
    np.testing.assert_allclose(x.grad.numpy(), numeric, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize(
    "name", ["expit", "logit", "xlogy", "softmax", "log_softmax", "logsumexp", "logsumexp_keepdim"]
)
def test_blocks_as_torch(name):
    arr, call = CASES[name]

    def make(m):
        x = m.tensor(arr, requires_grad=True)
        return forward_backward(m, lambda: call(_mod(m), x))

    assert_steps_as_torch(make)


@pytest.mark.parametrize("name", sorted(CASES))
def test_meta_shapes(name):
    arr, call = CASES[name]
    x = torch.tensor(arr, device="meta")
    y = engine.tensor(arr).to("meta")
    ours, theirs = call(engine.special, y), call(torch.special, x)
    assert tuple(ours.shape) == tuple(theirs.shape)
    assert str(ours.dtype).removeprefix("engine.") == str(theirs.dtype).removeprefix("torch.")
    assert ours.device.type == "meta"


def test_aliases_are_the_ops():
    assert engine.special.expit is engine.sigmoid
    assert engine.special.gammaln is engine.lgamma
    assert engine.special.psi is engine.digamma
    assert set(engine.special.__all__) <= set(dir(torch.special))
