"""cross_entropy as ATen's composites, op for op: soft (probability) targets as
cross_entropy_loss_prob_target (mul, sum, neg, div by the Scalar N: DivBackward1; label
smoothing's mul/add by Scalars), label smoothing on class indices as
cross_entropy_loss_label_smoothing (nll, -logp.sum(class_dim), the ignore mask filled in place,
the weighted mean's statement evaluated right to left, C++'s locals freed in reverse), and
nll_loss_nd's view of a 3-D or 5-D input to nll_loss2d. Node chains, values, gradients, and
every block of 9 bytes or more forward and backward as torch's CPU profiler shows them."""

from __future__ import annotations

import numpy as np
import pytest

import engine
from tests.conftest import assert_raises_as_torch, node_chain
from tests.engine.test_memory_vs_torch import engine_sequence, forward_backward, torch_sequence

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.torch

_RNG = np.random.default_rng(0)
_X = _RNG.standard_normal((64, 50))
_T = _RNG.integers(0, 50, 64)
_T[:3] = -100
_W = _RNG.random(50) + 0.5
_P = _RNG.dirichlet(np.ones(50), 64)
_X3 = _RNG.standard_normal((8, 50, 6))
_T3 = _RNG.integers(0, 50, (8, 6))
_T3[0, :2] = -100

CASES = {
    "smoothing": (_X, _T, {"label_smoothing": 0.1}),
    "smoothing_weight": (_X, _T, {"label_smoothing": 0.1, "weight": _W}),
    "smoothing_weight_sum": (_X, _T, {"label_smoothing": 0.1, "weight": _W, "reduction": "sum"}),
    "smoothing_weight_none": (_X, _T, {"label_smoothing": 0.1, "weight": _W, "reduction": "none"}),
    "smoothing_sum": (_X, _T, {"label_smoothing": 0.2, "reduction": "sum"}),
    "smoothing_none": (_X, _T, {"label_smoothing": 0.2, "reduction": "none"}),
    "smoothing_3d": (_X3, _T3, {"label_smoothing": 0.1}),
    "indices_3d": (_X3, _T3, {}),
    "indices_3d_none": (_X3, _T3, {"reduction": "none"}),
    "indices_5d_none": (
        _RNG.standard_normal((2, 50, 3, 2, 2)),
        _RNG.integers(0, 50, (2, 3, 2, 2)),
        {"reduction": "none"},
    ),
    "probabilities": (_X, _P, {}),
    "probabilities_smoothing_weight": (_X, _P, {"label_smoothing": 0.1, "weight": _W}),
    "probabilities_none": (_X, _P, {"reduction": "none"}),
    "probabilities_sum_weight": (_X, _P, {"reduction": "sum", "weight": _W}),
    "probabilities_1d": (_X[0], _P[0], {"label_smoothing": 0.3}),
    "indices": (_X, _T, {}),
}


def _call(m, x, t, kw):
    kw = dict(kw)
    if "weight" in kw:
        kw["weight"] = m.tensor(kw["weight"])
    return m.nn.functional.cross_entropy(x, t, **kw)


@pytest.mark.parametrize("name", sorted(CASES))
def test_cross_entropy_as_atens_composite(name):
    x_arr, t_arr, kw = CASES[name]
    seen = {}
    for m in (torch, engine):
        x, t = m.tensor(x_arr, requires_grad=True), m.tensor(t_arr)
        y = _call(m, x, t, kw)
        chain = node_chain(y.grad_fn)
        forward, backward = forward_backward(m, lambda m=m, x=x, t=t: _call(m, x, t, kw))
        sequence = torch_sequence if m is torch else engine_sequence
        blocks = (sequence(forward, min_bytes=8), sequence(backward, min_bytes=8))
        seen[m] = (chain, blocks, y.detach().numpy(), x.grad.numpy())
    (tc, tb, ty, tg), (ec, eb, ey, eg) = seen[torch], seen[engine]
    assert ec == tc
    assert eb == tb
    np.testing.assert_allclose(ey, ty, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(eg, tg, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize(
    "call",
    [
        lambda m: m.nn.functional.nll_loss(
            m.zeros(4, 5, 7), m.zeros(3, 7, dtype=m.int64), reduction="none"
        ),
        lambda m: m.nn.functional.nll_loss(m.zeros(4, 5, 7), m.zeros(4, 6, dtype=m.int64)),
        lambda m: m.nn.functional.cross_entropy(m.zeros(4, 5), m.zeros(4, 5, dtype=m.int64)),
        lambda m: m.nn.functional.cross_entropy(m.zeros(4, 5), m.zeros(4, 5), ignore_index=1),
        lambda m: m.nn.functional.cross_entropy(m.zeros(4, 5), m.ones(4, 5), weight=m.ones(4)),
    ],
    ids=["batch", "target-size", "int-soft-target", "soft-ignore-index", "soft-weight-size"],
)
def test_refusals_as_torch(call):
    assert_raises_as_torch(call)


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_ignored_targets_add_nothing_whatever_their_logits(reduction, torch):
    # torch's nll_loss skips an ignored target: its term and its gradient are +0.0, also where
    # the row's log-probabilities are -inf (the engine had read class 0 there: -inf * 0 = NaN)
    inf = float("inf")
    x = np.array([[0.0, -inf, 1.0], [-inf, -inf, 0.0], [1e4, 0.0, -1e4]], np.float32)
    target = np.array([0, 2, 1])
    tx = torch.from_numpy(x.copy()).requires_grad_()
    yt = torch.nn.functional.cross_entropy(
        tx, torch.from_numpy(target), ignore_index=2, reduction=reduction
    )
    ex = engine.tensor(x, requires_grad=True)
    ye = engine.nn.functional.cross_entropy(
        ex, engine.tensor(target), ignore_index=2, reduction=reduction
    )
    assert ye.detach().numpy().tobytes() == yt.detach().numpy().tobytes()
    yt.sum().backward()
    ye.sum().backward()
    np.testing.assert_allclose(ex.grad.numpy(), tx.grad.numpy(), rtol=1e-6, atol=1e-7)
    assert not np.signbit(ex.grad.numpy()[1]).any()  # the ignored row: +0.0


def test_every_target_ignored_gives_nan_and_zero_gradients(torch):
    x = np.array([[0.0, 1.0, 2.0]], np.float32)
    ex = engine.tensor(x, requires_grad=True)
    y = engine.nn.functional.cross_entropy(ex, engine.tensor([0]), ignore_index=0)
    assert np.isnan(y.item())
    y.backward()  # (a Python ZeroDivisionError before)
    assert ex.grad.tolist() == [[0.0, 0.0, 0.0]]
