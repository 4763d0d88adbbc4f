"""torch.nn.utils.parametrize and parametrizations.weight_norm / spectral_norm against torch
2.13: values and gradients (float64), node chains, state_dict keys, class names, the blocks its
CPU profiler shows forward and backward (the weight recomputed on each read, once under
cached()), and refusals."""

from __future__ import annotations

import numpy as np
import pytest

import engine
from engine.nn.utils import parametrizations as EP
from engine.nn.utils import parametrize as EZ
from tests.conftest import assert_raises_as_torch, node_chain
from tests.engine.test_memory_vs_torch import assert_steps_as_torch, forward_backward

torch = pytest.importorskip("torch")
from torch.nn.utils import parametrizations as TP  # noqa: E402
from torch.nn.utils import parametrize as TZ  # noqa: E402

RNG = np.random.default_rng(5)
LIN_W, LIN_B = RNG.standard_normal((32, 64)), RNG.standard_normal(32)
CONV_W, CONV_B = RNG.standard_normal((8, 3, 3, 3)), RNG.standard_normal(8)
X_LIN, X_CONV = RNG.standard_normal((16, 64)), RNG.standard_normal((2, 3, 10, 10))


def _mods(m):
    return (m, EP, EZ) if m is engine else (m, TP, TZ)


def _layer(m, kind, dim, dtype):
    m, P, _ = _mods(m)
    if kind == "linear":
        layer, w, b = m.nn.Linear(64, 32), LIN_W, LIN_B
    else:
        layer, w, b = m.nn.Conv2d(3, 8, 3), CONV_W, CONV_B
    layer = layer.to(dtype=getattr(m, dtype))
    with m.no_grad():
        layer.weight.copy_(m.tensor(w.astype(dtype)))
        layer.bias.copy_(m.tensor(b.astype(dtype)))
    if dim == "spectral":
        P.spectral_norm(layer)
        sn = layer.parametrizations.weight[0]
        with m.no_grad():  # the same power-iteration start on both sides
            sn._u.copy_(m.tensor(np.ones(tuple(sn._u.shape), dtype) / np.sqrt(sn._u.shape[0])))
            sn._v.copy_(m.tensor(np.ones(tuple(sn._v.shape), dtype) / np.sqrt(sn._v.shape[0])))
    else:
        P.weight_norm(layer, dim=dim)
    return layer


CASES = [("linear", 0), ("linear", 1), ("conv", 0), ("conv", 3), ("linear", "spectral"),
         ("conv", "spectral")]  # fmt: skip


def _x(m, kind, dtype):
    return m.tensor((X_LIN if kind == "linear" else X_CONV).astype(dtype), requires_grad=True)


def _run(m, kind, dim, train=True):
    layer = _layer(m, kind, dim, "float64")
    layer.train(train)
    x = _x(m, kind, "float64")
    y = layer(x)
    y.backward(m.tensor(np.random.default_rng(2).standard_normal(tuple(y.shape))))
    grads = {n: p.grad.numpy() for n, p in layer.named_parameters()}
    bufs = {n: b.numpy() for n, b in layer.named_buffers()}
    return (y.detach().numpy(), x.grad.numpy(), grads, bufs, list(layer.state_dict()),
            type(layer).__name__, node_chain(layer.weight.grad_fn))  # fmt: skip


@pytest.mark.parametrize("train", [True, False])
@pytest.mark.parametrize("kind,dim", CASES)
def test_values_gradients_keys_and_nodes_as_torch(kind, dim, train):
    e, t = _run(engine, kind, dim, train), _run(torch, kind, dim, train)
    np.testing.assert_allclose(e[0], t[0], rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(e[1], t[1], rtol=1e-13, atol=1e-13)
    assert e[2].keys() == t[2].keys()
    for k in e[2]:
        np.testing.assert_allclose(e[2][k], t[2][k], rtol=1e-12, atol=1e-12)
    for k in t[3]:
        np.testing.assert_allclose(e[3][k], t[3][k], rtol=1e-12, atol=1e-13)
    assert e[4:] == t[4:]


def test_weight_norm_gradients_against_central_differences():
    layer = _layer(engine, "linear", 1, "float64")
    g = layer.parametrizations.weight.original0
    v = layer.parametrizations.weight.original1
    x = _x(engine, "linear", "float64")
    layer(x).pow(2).sum().backward()
    for p in (g, v):
        flat = p.detach().numpy().reshape(-1)
        for i in (0, 3, flat.size - 1):
            keep = float(flat[i])
            vals = []
            for h in (1e-6, -1e-6):
                with engine.no_grad():
                    p.view(-1)[i] = keep + h
                    vals.append(float(layer(x).pow(2).sum()))
            with engine.no_grad():
                p.view(-1)[i] = keep
            fd = (vals[0] - vals[1]) / 2e-6
            assert abs(fd - float(p.grad.numpy().reshape(-1)[i])) < 1e-5 * max(1.0, abs(fd))


@pytest.mark.parametrize("kind,dim", CASES)
def test_blocks_forward_and_backward_as_torch(kind, dim):
    # (float64 for the convolution: torch's float32 one runs oneDNN, whose reorders the
    # engine does not model)
    dtype = "float32" if kind == "linear" else "float64"

    def make(m):
        layer = _layer(m, kind, dim, dtype)
        x = _x(m, kind, dtype)
        return forward_backward(m, lambda: layer(x))

    assert_steps_as_torch(make)


@pytest.mark.parametrize("kind,dim", [("linear", 0), ("linear", 1), ("linear", "spectral")])
def test_cached_computes_the_weight_once_per_context_as_torch(kind, dim):
    def make(m):
        layer = _layer(m, kind, dim, "float32")
        x = _x(m, kind, "float32")
        held = {}

        def forward():
            with _mods(m)[2].cached():
                held["y"] = layer(x) + layer(x)

        def backward():
            held["y"].backward(m.ones_like(held["y"]))

        return forward, backward

    assert_steps_as_torch(make)
    layer = _layer(engine, kind, dim, "float32")
    with EZ.cached():
        assert layer.weight is layer.weight
    assert layer.weight is not layer.weight


def test_register_and_remove_a_custom_parametrization_as_torch():
    def run(m):
        _, _, Z = _mods(m)

        class Symmetric(m.nn.Module):
            def forward(self, X):
                return X.triu() + X.triu(1).transpose(-1, -2)

        layer = m.nn.Linear(4, 4).double()
        with m.no_grad():
            layer.weight.copy_(m.tensor(LIN_W[:4, :4]))
        before = Z.is_parametrized(layer)
        Z.register_parametrization(layer, "weight", Symmetric())
        sym = layer.weight.detach().numpy().copy()
        keys = list(layer.state_dict())
        Z.remove_parametrizations(layer, "weight")
        return (before, Z.is_parametrized(layer), type(layer).__name__, sym,
                layer.weight.detach().numpy(), keys, [n for n, _ in layer.named_parameters()])  # fmt: skip

    e, t = run(engine), run(torch)
    assert e[:3] == t[:3]
    np.testing.assert_array_equal(e[3], t[3])
    np.testing.assert_array_equal(e[4], t[4])
    assert e[5:] == t[5:]


def test_refusals_as_torch():
    def missing(m):
        _mods(m)[2].register_parametrization(m.nn.Linear(2, 2), "nope", m.nn.Identity())

    def not_parametrized(m):
        _mods(m)[2].remove_parametrizations(m.nn.Linear(2, 2), "weight")

    def bad_dim(m):
        _mods(m)[1].spectral_norm(m.nn.Linear(2, 2), dim=3)

    def no_weight(m):
        _mods(m)[1].spectral_norm(m.nn.Linear(2, 2), name="nope")

    assert_raises_as_torch(missing, ValueError)
    assert_raises_as_torch(bad_dim, IndexError)
    assert_raises_as_torch(no_weight, ValueError)
    with pytest.raises(ValueError) as theirs:
        not_parametrized(torch)
    with pytest.raises(ValueError) as ours:
        not_parametrized(engine)
    assert str(ours.value).endswith("does not have a parametrization on weight")
    assert str(theirs.value).endswith("does not have a parametrization on weight")


def test_weight_norm_over_a_middle_dim_is_refused_clearly():
    with pytest.raises(NotImplementedError, match="dim=0 and dim=weight.dim"):
        EP.weight_norm(engine.nn.Conv2d(3, 8, 3), dim=1)
    with pytest.raises(NotImplementedError):
        EP.weight_norm(engine.nn.Linear(3, 8), dim=None)


def test_meta_shapes():
    layer = EP.weight_norm(engine.nn.Linear(64, 32, device="meta"))
    y = layer(engine.empty(16, 64, device="meta"))
    assert tuple(y.shape) == (16, 32) and y.dtype == engine.float32
    assert tuple(layer.parametrizations.weight.original0.shape) == (32, 1)
