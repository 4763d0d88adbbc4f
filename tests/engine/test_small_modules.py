"""Small torch.nn modules and their functional forms against torch 2.13: PReLU, RReLU (eval),
Softmax2d, ChannelShuffle, LocalResponseNorm, AlphaDropout / FeatureAlphaDropout (eval and
p = 0 / 1), LPPool1d/2d: values, gradients of every differentiable input (float64, and central
differences for the native kernels), node chains, the blocks torch's CPU profiler shows forward
and backward, reprs and refusals."""

from __future__ import annotations

import numpy as np
import pytest

import engine
from tests.conftest import assert_raises_as_torch, node_chain
from tests.engine.test_memory_vs_torch import assert_steps_as_torch, forward_backward

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(7)
X4 = RNG.standard_normal((2, 8, 6, 6))
X3 = RNG.standard_normal((4, 6, 10))
X2 = RNG.standard_normal((5, 8))
W8 = RNG.uniform(0.05, 0.5, 8)
W1 = np.array([0.3])


def _prelu_module(m, x):
    mod = m.nn.PReLU(6, dtype=x.dtype)
    with m.no_grad():
        mod.weight.copy_(m.tensor(W8[:6]))
    return mod(x)


# name -> (inputs, call(m, *tensors)); every input requires grad
CASES = {
    "prelu_channels": ((X4, W8), lambda m, x, w: m.nn.functional.prelu(x, w)),
    "prelu_one": ((X4, W1), lambda m, x, w: m.nn.functional.prelu(x, w)),
    "prelu_2d_input": ((X2, W8), lambda m, x, w: m.nn.functional.prelu(x, w)),
    "prelu_1d_input_1d_weight": ((X2[0], W1), lambda m, x, w: m.prelu(x, w)),
    "prelu_module": ((X3,), _prelu_module),
    "rrelu_eval": ((X4,), lambda m, x: m.nn.functional.rrelu(x, 0.1, 0.3)),
    "rrelu_module_eval": ((X3,), lambda m, x: m.nn.RReLU(0.2, 0.4).eval()(x)),
    "softmax2d": ((X4,), lambda m, x: m.nn.Softmax2d()(x)),
    "softmax2d_3d": ((X4[0],), lambda m, x: m.nn.Softmax2d()(x)),
    "channel_shuffle": ((X4,), lambda m, x: m.nn.ChannelShuffle(4)(x)),
    "channel_shuffle_3d": ((X3,), lambda m, x: m.nn.functional.channel_shuffle(x, 3)),
    "local_response_norm_3d": ((X3,), lambda m, x: m.nn.LocalResponseNorm(3, 0.1, 0.6, 2.0)(x)),
    "local_response_norm_4d": ((X4,), lambda m, x: m.nn.LocalResponseNorm(2, 0.1, 0.6, 2.0)(x)),
    "lp_pool1d": ((X3,), lambda m, x: m.nn.LPPool1d(2, 3)(x)),
    "lp_pool1d_p3_stride": ((X3,), lambda m, x: m.nn.functional.lp_pool1d(x, 3, 2, 1)),
    "lp_pool1d_inf": ((X3,), lambda m, x: m.nn.functional.lp_pool1d(x, float("inf"), 2)),
    "lp_pool2d": ((X4,), lambda m, x: m.nn.LPPool2d(2, (2, 3))(x)),
    "lp_pool2d_ceil": ((X4,), lambda m, x: m.nn.LPPool2d(1.5, 4, 2, ceil_mode=True)(x.abs())),
    "lp_pool2d_neg_inf": ((X4,), lambda m, x: m.nn.functional.lp_pool2d(x, -float("inf"), 2)),
    "alpha_dropout_eval": ((X2,), lambda m, x: m.nn.AlphaDropout(0.3).eval()(x) * 2.0),
    "alpha_dropout_p1": ((X2,), lambda m, x: m.nn.functional.alpha_dropout(x, 1.0, True)),
    "feature_alpha_dropout_p1": (
        (X4,),
        lambda m, x: m.nn.functional.feature_alpha_dropout(x, 1.0, True),
    ),
}


def _run(m, name, dtype=np.float64):
    arrays, call = CASES[name]
    xs = [m.tensor(a.astype(dtype), requires_grad=True) for a in arrays]
    y = call(m, *xs)
    g = np.random.default_rng(3).standard_normal(tuple(y.shape)).astype(dtype)
    y.backward(m.tensor(g))
    return y.detach().numpy(), [x.grad.numpy() for x in xs], node_chain(y.grad_fn)


@pytest.mark.parametrize("name", sorted(CASES))
def test_values_and_gradients_as_torch(name):
    (ey, egs, _), (ty, tgs, _) = _run(engine, name), _run(torch, name)
    np.testing.assert_allclose(ey, ty, rtol=1e-13, atol=1e-14)
    for eg, tg in zip(egs, tgs, strict=True):
        np.testing.assert_allclose(eg, tg, rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("name", sorted(CASES))
def test_node_chain_as_torch(name):
    assert _run(engine, name)[2] == _run(torch, name)[2]


@pytest.mark.parametrize("name", sorted(CASES))
def test_allocations_forward_and_backward_as_torch(name):
    arrays, call = CASES[name]

    def make(m):
        xs = [m.tensor(a.astype(np.float32), requires_grad=True) for a in arrays]
        return forward_backward(m, lambda: call(m, *xs))

    assert_steps_as_torch(make)


def _numeric_grads(fn, arrays, eps=1e-6):
    """Central differences of sum(fn(*arrays) * g) for a fixed random g (float64)."""
    base = fn(*[engine.tensor(a) for a in arrays]).numpy()
    g = np.random.default_rng(5).standard_normal(base.shape)
    out = []
    for i, a in enumerate(arrays):
        grad = np.zeros_like(a)
        for idx in np.ndindex(a.shape):
            hi, lo = a.copy(), a.copy()
            hi[idx] += eps
            lo[idx] -= eps
            f = [engine.tensor(b) for b in arrays]
            f[i] = engine.tensor(hi)
            fh = (fn(*f).numpy() * g).sum()
            f[i] = engine.tensor(lo)
            fl = (fn(*f).numpy() * g).sum()
            grad[idx] = (fh - fl) / (2 * eps)
        out.append(grad)
    return g, out


@pytest.mark.parametrize(
    "fn, arrays",
    [
        (lambda x, w: engine.nn.functional.prelu(x, w), (X4[:1, :3, :2] + 0.01, W8[:3])),
        (lambda x: engine.nn.functional.rrelu(x, 0.1, 0.3), (X2[:2] + 0.01,)),
    ],
)
def test_gradients_match_central_differences(fn, arrays):
    g, expected = _numeric_grads(fn, arrays)
    xs = [engine.tensor(a, requires_grad=True) for a in arrays]
    fn(*xs).backward(engine.tensor(g))
    for x, e in zip(xs, expected, strict=True):
        np.testing.assert_allclose(x.grad.numpy(), e, rtol=1e-6, atol=1e-8)


def test_rrelu_training_draws_slopes_in_range_and_backward_reuses_them():
    x = engine.tensor(X4, requires_grad=True)
    y = engine.nn.functional.rrelu(x, 0.1, 0.3, training=True)
    assert y.grad_fn.name() == "RreluWithNoiseBackward0"
    neg = X4 <= 0
    slope = y.detach().numpy()[neg] / X4[neg]
    assert ((slope >= 0.1) & (slope <= 0.3)).all() and np.ptp(slope) > 0.05
    np.testing.assert_array_equal(y.detach().numpy()[~neg], X4[~neg])
    y.backward(engine.ones_like(y))
    grad = x.grad.numpy()
    np.testing.assert_allclose(grad[neg], slope)
    np.testing.assert_array_equal(grad[~neg], 1.0)


@pytest.mark.parametrize(
    "call",
    [
        lambda m, x: m.nn.functional.rrelu(x, training=True),
        lambda m, x: m.nn.AlphaDropout(0.3)(x),
        lambda m, x: m.nn.FeatureAlphaDropout(0.4)(x),
        lambda m, x: m.nn.functional.alpha_dropout(x * 1.0, 0.2, True, inplace=True),
        lambda m, x: m.nn.functional.rrelu(x * 1.0, training=True, inplace=True),
        lambda m, x: m.nn.functional.rrelu_(x * 1.0, 0.1, 0.3),
        lambda m, x: m.nn.RReLU(inplace=True)(x * 1.0),
    ],
)
def test_random_forms_allocations_and_nodes_as_torch(call):
    def make(m):
        x = m.tensor(X4.astype(np.float32), requires_grad=True)
        return forward_backward(m, lambda: call(m, x))

    assert_steps_as_torch(make)
    chains = []
    for m in (engine, torch):
        x = m.tensor(X4, requires_grad=True)
        chains.append(node_chain(call(m, x).grad_fn))
    assert chains[0] == chains[1]


def test_rrelu_in_place_as_torch():
    """rrelu_with_noise_: eval values and gradients as torch's (RreluWithNoiseBackward1, from the
    result); in training the slopes drawn and backward reusing them; a leaf refused."""
    got = {}
    for m in (engine, torch):
        x = m.tensor(X4, requires_grad=True)
        h = x * 1.0
        y = m.nn.functional.rrelu(h, 0.1, 0.3, inplace=True)
        assert y is h and y.grad_fn.name() == "RreluWithNoiseBackward1"
        y.backward(m.tensor(X4 + 2.0))
        got[m] = (y.detach().numpy().copy(), x.grad.numpy().copy())
    for e, t in zip(got[engine], got[torch], strict=True):
        np.testing.assert_allclose(e, t, rtol=1e-12)
    x = engine.tensor(X4, requires_grad=True)
    y = engine.nn.functional.rrelu_(x * 1.0, 0.1, 0.3, training=True)
    neg = X4 <= 0
    slope = y.detach().numpy()[neg] / X4[neg]
    assert ((slope >= 0.1) & (slope <= 0.3)).all()
    y.backward(engine.ones_like(y))
    np.testing.assert_allclose(x.grad.numpy()[neg], slope)
    assert_raises_as_torch(
        lambda m: m.nn.functional.rrelu(m.tensor(X4, requires_grad=True), inplace=True)
    )


@pytest.mark.parametrize("feature", [False, True])
def test_alpha_dropout_keeps_mean_and_variance(feature):
    engine.manual_seed(1)
    x = engine.randn(64, 32, 32)
    fn = (
        engine.nn.functional.feature_alpha_dropout
        if feature
        else engine.nn.functional.alpha_dropout
    )
    y = fn(x, 0.3, True).numpy()
    assert abs(y.mean()) < 0.05 and abs(y.std() - 1) < 0.05
    # a dropped unit takes a' = -alpha * a + b for every dropped element (one value)
    a = 1 / np.sqrt((1.7580993408473766**2 * 0.3 + 1) * 0.7)
    dropped = np.isclose(y, -1.7580993408473766 * a + 1.7580993408473766 * a * 0.3)
    assert 0.25 < dropped.mean() < 0.35
    if feature:  # whole channels
        per_channel = dropped.reshape(64, 32, -1).mean(-1)
        assert set(np.unique(per_channel)) <= {0.0, 1.0} or per_channel.max() == 1.0


def test_meta_shapes():
    x = engine.empty(2, 8, 6, 6, device="meta", requires_grad=True)
    w = engine.empty(8, device="meta", requires_grad=True)
    for y in (
        engine.nn.functional.prelu(x, w),
        engine.nn.functional.rrelu(x, training=True),
        engine.nn.Softmax2d()(x),
        engine.nn.functional.channel_shuffle(x, 2),
        engine.nn.functional.alpha_dropout(x, 0.5, True),
        engine.nn.functional.feature_alpha_dropout(x, 0.5, True),
    ):
        assert tuple(y.shape) == (2, 8, 6, 6) and y.device.type == "meta"
        y.sum().backward()


def test_module_reprs_as_torch():
    for name, args in [
        ("PReLU", ()),
        ("PReLU", (8,)),
        ("RReLU", ()),
        ("RReLU", (0.1, 0.3)),
        ("Softmax2d", ()),
        ("ChannelShuffle", (2,)),
        ("LocalResponseNorm", (3,)),
        ("LocalResponseNorm", (2, 0.1, 0.5, 2.0)),
        ("AlphaDropout", ()),
        ("FeatureAlphaDropout", (0.2,)),
        ("LPPool1d", (2, 3)),
        ("LPPool2d", (1.5, (2, 3), 1, True)),
    ]:
        assert repr(getattr(engine.nn, name)(*args)) == repr(getattr(torch.nn, name)(*args))


@pytest.mark.parametrize(
    "call",
    [
        lambda m: m.nn.functional.prelu(m.ones(2, 3, 4), m.ones(4)),
        lambda m: m.nn.functional.prelu(m.ones(2, 3), m.ones(3, dtype=m.float64)),
        lambda m: m.nn.functional.prelu(m.ones(2, 3), m.ones(1, 3)),
        lambda m: m.nn.functional.prelu(m.ones(()), m.ones(3)),
        lambda m: m.nn.Softmax2d()(m.ones(2, 3)),
        lambda m: m.nn.functional.channel_shuffle(m.ones(2, 4), 2),
        lambda m: m.nn.functional.channel_shuffle(m.ones(2, 4, 3), 3),
        lambda m: m.nn.functional.channel_shuffle(m.ones(2, 4, 3), 0),
        lambda m: m.nn.functional.local_response_norm(m.ones(2, 4), 2),
        lambda m: m.nn.functional.alpha_dropout(m.ones(2, 4), 1.5),
        lambda m: m.nn.functional.feature_alpha_dropout(m.ones(4), 0.5, True),
    ],
)
def test_refusals_as_torch(call):
    assert_raises_as_torch(call)
