"""Margin, embedding and likelihood losses against torch 2.13: MarginRankingLoss,
HingeEmbeddingLoss, CosineEmbeddingLoss, SoftMarginLoss, MultiLabelSoftMarginLoss,
MultiMarginLoss, MultiLabelMarginLoss, TripletMarginLoss, TripletMarginWithDistanceLoss,
PoissonNLLLoss, GaussianNLLLoss, each with reduction none / mean / sum (and weights where torch
takes them): values, gradients of every differentiable input (float64; central differences for
the native kernels), node chains, every block torch's CPU profiler shows forward and backward,
and refusals."""

from __future__ import annotations

import numpy as np
import pytest

import engine
from tests.conftest import assert_raises_as_torch
from tests.engine.test_memory_vs_torch import assert_steps_as_torch, forward_backward

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(11)
N, C = 24, 10  # per-sample results of 96 float32 bytes: above the scalar slack
A = RNG.standard_normal((N, C))
B = RNG.standard_normal((N, C))
D = RNG.standard_normal((N, C))
V = RNG.standard_normal(N)
SIGN = np.where(RNG.standard_normal(N) > 0, 1.0, -1.0)
SIGN2 = np.where(RNG.standard_normal((N, C)) > 0, 1.0, -1.0)
BITS = (RNG.standard_normal((N, C)) > 0).astype(np.float64)
CLS = RNG.integers(0, C, N)
LABELS = np.where(np.arange(C)[None] < 3, RNG.integers(0, C, (N, C)), -1)
LABELS[2, 0] = -1  # a row without targets
COUNTS = RNG.poisson(2.0, (N, C)).astype(np.float64)
W = RNG.uniform(0.5, 1.5, C)
VAR = RNG.uniform(0.1, 2.0, (N, C))

# name -> (differentiable inputs, constant inputs, call(m, *diff, *const))
CASES = {
    "margin_ranking": (
        (V, V[::-1].copy()),
        (SIGN,),
        lambda m, a, b, t, r: m.nn.MarginRankingLoss(0.2, reduction=r)(a, b, t),
    ),
    "hinge_embedding": (
        (A,),
        (SIGN2,),
        lambda m, a, t, r: m.nn.HingeEmbeddingLoss(0.5, reduction=r)(a, t),
    ),
    "cosine_embedding": (
        (A, B),
        (SIGN,),
        lambda m, a, b, t, r: m.nn.CosineEmbeddingLoss(0.1, reduction=r)(a, b, t),
    ),
    "soft_margin": ((A,), (SIGN2,), lambda m, a, t, r: m.nn.SoftMarginLoss(reduction=r)(a, t)),
    "multilabel_soft_margin": (
        (A,),
        (BITS,),
        lambda m, a, t, r: m.nn.MultiLabelSoftMarginLoss(reduction=r)(a, t),
    ),
    "multilabel_soft_margin_weight": (
        (A,),
        (BITS, W),
        lambda m, a, t, w, r: m.nn.functional.multilabel_soft_margin_loss(
            a, t, weight=w, reduction=r
        ),
    ),
    "multi_margin": (
        (A,),
        (CLS,),
        lambda m, a, t, r: m.nn.MultiMarginLoss(reduction=r)(a, t),
    ),
    "multi_margin_p2_weight": (
        (A,),
        (CLS, W),
        lambda m, a, t, w, r: m.nn.functional.multi_margin_loss(
            a, t, p=2, margin=0.7, weight=w, reduction=r
        ),
    ),
    "multilabel_margin": (
        (A,),
        (LABELS,),
        lambda m, a, t, r: m.nn.MultiLabelMarginLoss(reduction=r)(a, t),
    ),
    "triplet_margin": (
        (A, B, D),
        (),
        lambda m, a, p, n, r: m.nn.TripletMarginLoss(1.5, reduction=r)(a, p, n),
    ),
    "triplet_margin_swap_p1": (
        (A, B, D),
        (),
        lambda m, a, p, n, r: m.nn.functional.triplet_margin_loss(
            a, p, n, p=1, swap=True, reduction=r
        ),
    ),
    "triplet_with_distance": (
        (A, B, D),
        (),
        lambda m, a, p, n, r: m.nn.TripletMarginWithDistanceLoss(margin=1.5, reduction=r)(a, p, n),
    ),
    "triplet_with_distance_swap_l1": (
        (A, B, D),
        (),
        lambda m, a, p, n, r: m.nn.functional.triplet_margin_with_distance_loss(
            a,
            p,
            n,
            distance_function=lambda x, y: (x - y).abs().sum(-1),
            swap=True,
            reduction=r,
        ),
    ),
    "poisson_nll": ((A,), (COUNTS,), lambda m, a, t, r: m.nn.PoissonNLLLoss(reduction=r)(a, t)),
    "poisson_nll_rate_full": (
        (VAR,),
        (COUNTS,),
        lambda m, a, t, r: m.nn.functional.poisson_nll_loss(
            a, t, log_input=False, full=True, reduction=r
        ),
    ),
    "gaussian_nll": (
        (A, B, VAR),
        (),
        lambda m, a, t, v, r: m.nn.GaussianNLLLoss(reduction=r)(a, t, v),
    ),
    "gaussian_nll_full_homoscedastic": (
        (A, B, VAR[:, 0].copy()),
        (),
        lambda m, a, t, v, r: m.nn.functional.gaussian_nll_loss(a, t, v, full=True, reduction=r),
    ),
}
REDUCTIONS = ("none", "mean", "sum")
ALL = [(n, r) for n in sorted(CASES) for r in REDUCTIONS]


def node_chain(fn) -> list[str]:
    """The node names from `fn` along each node's first input edge that has a node (engine's
    where lists its condition as a bare None edge; torch's lists no edge for it)."""
    names = []
    while fn is not None and "AccumulateGrad" not in fn.name():
        names.append(fn.name())
        edges = [e[0] for e in fn.next_functions if e is not None and e[0] is not None]
        fn = edges[0] if edges else None
    return names


def _tensor(m, a, dtype):
    if a.dtype.kind == "i":
        return m.tensor(a)
    return m.tensor(a.astype(dtype))


def _run(m, name, reduction, dtype=np.float64):
    diff, const, call = CASES[name]
    xs = [m.tensor(a.astype(dtype), requires_grad=True) for a in diff]
    cs = [_tensor(m, a, dtype) for a in const]
    y = call(m, *xs, *cs, reduction)
    g = np.random.default_rng(3).standard_normal(tuple(y.shape)).astype(dtype)
    y.backward(m.tensor(g))
    return y.detach().numpy(), [x.grad.numpy() for x in xs], node_chain(y.grad_fn)


@pytest.mark.parametrize("name, reduction", ALL)
def test_values_and_gradients_as_torch(name, reduction):
    (ey, egs, _), (ty, tgs, _) = _run(engine, name, reduction), _run(torch, name, reduction)
    np.testing.assert_allclose(ey, ty, rtol=1e-12, atol=1e-13)
    for eg, tg in zip(egs, tgs, strict=True):
        np.testing.assert_allclose(eg, tg, rtol=1e-11, atol=1e-13)


@pytest.mark.parametrize("name, reduction", ALL)
def test_node_chain_as_torch(name, reduction):
    assert _run(engine, name, reduction)[2] == _run(torch, name, reduction)[2]


@pytest.mark.parametrize("name, reduction", ALL)
def test_allocations_forward_and_backward_as_torch(name, reduction):
    diff, const, call = CASES[name]

    def make(m):
        xs = [m.tensor(a.astype(np.float32), requires_grad=True) for a in diff]
        cs = [_tensor(m, a, np.float32) for a in const]
        return forward_backward(m, lambda: call(m, *xs, *cs, reduction))

    assert_steps_as_torch(make)


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: engine.nn.functional.soft_margin_loss(x, engine.tensor(SIGN2[:3, :4])),
        lambda x: engine.nn.functional.multi_margin_loss(
            x, engine.tensor(CLS[:3] % 4), p=2, weight=engine.tensor(W[:4])
        ),
        lambda x: engine.nn.functional.multilabel_margin_loss(
            x, engine.tensor(LABELS[:3, :4] % 4 * (LABELS[:3, :4] >= 0) - (LABELS[:3, :4] < 0))
        ),
    ],
)
def test_native_gradients_match_central_differences(fn):
    x0 = A[:3, :4].copy()
    x = engine.tensor(x0, requires_grad=True)
    fn(x).backward()
    expected = np.zeros_like(x0)
    eps = 1e-6
    for idx in np.ndindex(x0.shape):
        hi, lo = x0.copy(), x0.copy()
        hi[idx] += eps
        lo[idx] -= eps
        expected[idx] = (fn(engine.tensor(hi)).item() - fn(engine.tensor(lo)).item()) / (2 * eps)
    np.testing.assert_allclose(x.grad.numpy(), expected, rtol=1e-6, atol=1e-8)


def test_meta_shapes():
    a = engine.empty(N, C, device="meta", requires_grad=True)
    t = engine.empty(N, C, device="meta")
    cls = engine.zeros(N, dtype=engine.int64, device="meta")
    labels = engine.zeros(N, C, dtype=engine.int64, device="meta")
    F = engine.nn.functional
    for y, shape in (
        (F.soft_margin_loss(a, t), ()),
        (F.soft_margin_loss(a, t, reduction="none"), (N, C)),
        (F.multi_margin_loss(a, cls, reduction="none"), (N,)),
        (F.multi_margin_loss(a, cls), ()),
        (F.multilabel_margin_loss(a, labels, reduction="none"), (N,)),
        (F.hinge_embedding_loss(a, t), ()),
        (F.triplet_margin_loss(a, a, a, reduction="none"), (N,)),
    ):
        assert tuple(y.shape) == shape and y.device.type == "meta"
        y.sum().backward()


def test_module_reprs_as_torch():
    for name in (
        "MarginRankingLoss",
        "HingeEmbeddingLoss",
        "CosineEmbeddingLoss",
        "SoftMarginLoss",
        "MultiLabelSoftMarginLoss",
        "MultiMarginLoss",
        "MultiLabelMarginLoss",
        "TripletMarginLoss",
        "TripletMarginWithDistanceLoss",
        "PoissonNLLLoss",
        "GaussianNLLLoss",
    ):
        assert repr(getattr(engine.nn, name)()) == repr(getattr(torch.nn, name)())


@pytest.mark.parametrize(
    "call",
    [
        lambda m: m.nn.functional.margin_ranking_loss(m.ones(3), m.ones(3, 1), m.ones(3)),
        lambda m: m.nn.functional.multi_margin_loss(m.ones(2, 3), m.zeros(2).long(), p=3),
        lambda m: m.nn.functional.multi_margin_loss(
            m.ones(2, 3), m.zeros(2).long(), weight=m.ones(3, 1)
        ),
        lambda m: m.nn.functional.cosine_embedding_loss(m.ones(3, 2), m.ones(3, 2), m.ones(3, 1)),
        lambda m: m.nn.functional.cosine_embedding_loss(m.ones(3), m.ones(3), m.ones(3)),
        lambda m: m.nn.functional.triplet_margin_loss(m.ones(3), m.ones(3), m.ones(3), margin=0),
        lambda m: m.nn.functional.triplet_margin_loss(m.ones(3), m.ones(3, 1), m.ones(3)),
        lambda m: m.nn.functional.triplet_margin_with_distance_loss(
            m.ones(3), m.ones(3), m.ones(3, 1)
        ),
        lambda m: m.nn.functional.gaussian_nll_loss(m.ones(3, 2), m.ones(3, 2), m.ones(2, 3)),
        lambda m: m.nn.functional.gaussian_nll_loss(m.ones(3), m.ones(3), -m.ones(3)),
        lambda m: m.nn.functional.poisson_nll_loss(m.ones(3), m.ones(3), reduction="avg"),
        lambda m: m.nn.functional.soft_margin_loss(m.ones(3), m.ones(3), reduction="avg"),
        lambda m: m.nn.TripletMarginLoss(margin=-1.0),
        lambda m: m.nn.MultiMarginLoss(p=3),
    ],
)
def test_refusals_as_torch(call):
    assert_raises_as_torch(call)
