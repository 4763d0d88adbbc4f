"""F.ctc_loss / nn.CTCLoss against torch 2.13's CPU kernels: losses and gradients (reductions
none / mean / sum, zero_infinity, padded and concatenated targets, int32 targets, tensor
lengths, unbatched input, another blank, empty inputs and targets), float64 central
differences, node chains, every block forward and backward as torch's profiler shows it,
refusals, meta."""

from __future__ import annotations

import numpy as np
import pytest

import engine
from tests.conftest import assert_raises_as_torch
from tests.engine.test_memory_vs_torch import assert_steps_as_torch, forward_backward

torch = pytest.importorskip("torch")

# name -> (T, B, C, S, input lengths, target lengths, options)
CASES = {
    "none": (12, 3, 5, 4, [12, 10, 7], [4, 2, 3], {"reduction": "none"}),
    "mean": (12, 3, 5, 4, [12, 10, 7], [4, 2, 3], {}),
    "sum": (12, 3, 5, 4, [12, 10, 7], [4, 2, 0], {"reduction": "sum"}),
    "concatenated": (12, 3, 5, 4, [12, 10, 7], [4, 2, 3], {"concat": True}),
    "int32_targets": (10, 2, 4, 3, [10, 9], [3, 3], {"targets": "int32", "reduction": "sum"}),
    "tensor_lengths": (10, 2, 4, 3, [10, 9], [3, 2], {"tensors": "int64"}),
    "int32_lengths": (10, 2, 4, 3, [10, 9], [3, 2], {"tensors": "int32", "reduction": "none"}),
    "blank_last": (15, 2, 6, 5, [15, 11], [5, 4], {"blank": 5, "concat": True}),
    "repeats": (20, 2, 3, 6, [20, 18], [6, 5], {"repeats": True, "reduction": "none"}),
    "impossible_zeroed": (6, 3, 5, 4, [6, 2, 0], [4, 2, 3],
                          {"zero_infinity": True, "reduction": "none"}),
    "impossible_mean_zeroed": (6, 3, 5, 4, [6, 2, 5], [4, 2, 3], {"zero_infinity": True}),
    "empty_input_and_target": (6, 3, 5, 4, [6, 0, 4], [4, 0, 0], {"reduction": "none"}),
    "unbatched": (9, 1, 4, 3, [9], [3], {"unbatched": True, "reduction": "none"}),
    "unbatched_mean": (9, 1, 4, 3, [9], [3], {"unbatched": True, "tensors": "int64"}),
}  # fmt: skip


def _chain(fn) -> list[str]:
    """Node names along each node's first edge that has a node (where's condition has none)."""
    names = []
    while fn is not None and "AccumulateGrad" not in fn.name():
        names.append(fn.name())
        # (an edge without a node: torch's (None, 0), the engine's None)
        fn = next((e[0] for e in fn.next_functions if e is not None and e[0] is not None), None)
    return names


def _data(name, dtype=np.float64):
    T, B, C, S, il, tl, opt = CASES[name]
    rng = np.random.default_rng(abs(hash(name)) % 1000)
    x = rng.standard_normal((T, B, C)).astype(dtype)
    blank = opt.get("blank", 0)
    labels = [c for c in range(C) if c != blank]
    tg = rng.choice(labels, size=(B, S))
    if opt.get("repeats"):
        tg[:, 1] = tg[:, 0]  # a repeated label: the recursion's skip is not taken there
    if opt.get("concat") or opt.get("unbatched"):
        tg = np.concatenate([tg[b, : tl[b]] for b in range(B)])
    g = rng.standard_normal(B).astype(dtype)
    return x, tg, g


def _loss(m, name, x, tg):
    """x: a leaf on module m; the loss of log_softmax(x) as the case asks."""
    T, B, C, S, il, tl, opt = CASES[name]
    lp = x.log_softmax(-1)
    if opt.get("unbatched"):
        lp = lp[:, 0] if lp.ndim == 3 else lp
    targets = m.tensor(tg).to(getattr(m, opt.get("targets", "int64")))
    if "tensors" in opt:
        dt = getattr(m, opt["tensors"])
        il = m.tensor(il[0] if opt.get("unbatched") else il, dtype=dt)
        tl = m.tensor(tl[0] if opt.get("unbatched") else tl, dtype=dt)
    kw = {k: opt[k] for k in ("reduction", "zero_infinity", "blank") if k in opt}
    return m.nn.functional.ctc_loss(lp, targets, il, tl, **kw)


@pytest.mark.parametrize("name", sorted(CASES))
def test_values_gradients_and_nodes_as_torch(name):
    x, tg, g = _data(name)
    out = {}
    for m in (torch, engine):
        xt = m.tensor(x, requires_grad=True)
        y = _loss(m, name, xt, tg)
        y.backward(m.tensor(g[: y.numel()].reshape(tuple(y.shape))))
        out[m] = (y.detach().numpy(), xt.grad.numpy(), _chain(y.grad_fn))
    (ey, eg, en), (ty, tg_, tn) = out[engine], out[torch]
    np.testing.assert_allclose(ey, ty, rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(eg, tg_, rtol=1e-12, atol=1e-13)
    assert en == tn


def test_float32_as_torch():
    x, tg, _ = _data("mean", np.float32)
    out = []
    for m in (torch, engine):
        xt = m.tensor(x, requires_grad=True)
        y = _loss(m, "mean", xt, tg)
        y.backward()
        out.append((y.detach().numpy(), xt.grad.numpy()))
    np.testing.assert_allclose(out[0][0], out[1][0], rtol=1e-5)
    np.testing.assert_allclose(out[0][1], out[1][1], rtol=1e-4, atol=1e-6)


def test_gradient_against_central_differences():
    x0, tg, g = _data("none")
    x0 = x0[:6]
    il, tl = [6, 5, 4], [3, 2, 1]

    def f(a):
        lp = engine.tensor(a).log_softmax(2)
        y = engine.nn.functional.ctc_loss(lp, engine.tensor(tg), il, tl, reduction="none")
        return float((y.numpy() * g).sum())

    x = engine.tensor(x0, requires_grad=True)
    y = engine.nn.functional.ctc_loss(x.log_softmax(2), engine.tensor(tg), il, tl, reduction="none")
    y.backward(engine.tensor(g))
    num = np.zeros_like(x0)
    for idx in np.ndindex(x0.shape):
        d = np.zeros_like(x0)
        d[idx] = 1e-6
        num[idx] = (f(x0 + d) - f(x0 - d)) / 2e-6
    np.testing.assert_allclose(x.grad.numpy(), num, rtol=1e-6, atol=1e-8)


# batch 16: the per-sample blocks (likelihoods, lengths) are larger than the scalar slack
BIG = {
    "none": {"reduction": "none"},
    "mean": {},
    "sum": {"reduction": "sum"},
    "mean_zero_infinity": {"zero_infinity": True},
    "none_zero_infinity_tensors": {"reduction": "none", "zero_infinity": True, "tensors": "int64"},
    "int32_targets": {"reduction": "none", "targets": torch.int32},
    "int32_lengths_mean": {"tensors": "int32"},
    "int32_lengths_sum": {"tensors": "int32", "reduction": "sum"},
    "concatenated": {"concat": True},
}


@pytest.mark.parametrize("name", sorted(BIG))
def test_blocks_forward_and_backward_as_torch(name):
    opt = BIG[name]
    T, B, C, S = 12, 16, 5, 4
    rng = np.random.default_rng(3)
    x = rng.standard_normal((T, B, C))
    tg = rng.integers(1, C, (B, S))
    il, tl = list(rng.integers(S * 2, T + 1, B)), list(rng.integers(0, S + 1, B))
    if opt.get("concat"):
        tg = np.concatenate([tg[b, : tl[b]] for b in range(B)])

    def make(m):
        lp = m.tensor(x).log_softmax(2).detach().requires_grad_()
        targets = m.tensor(tg)
        if "targets" in opt:
            targets = targets.to(m.int32)
        lengths = (il, tl)
        if "tensors" in opt:
            dt = getattr(m, opt["tensors"])
            lengths = (m.tensor(il, dtype=dt), m.tensor(tl, dtype=dt))
        kw = {k: opt[k] for k in ("reduction", "zero_infinity") if k in opt}
        return forward_backward(m, lambda: m.nn.functional.ctc_loss(lp, targets, *lengths, **kw))

    assert_steps_as_torch(make)


def test_module_as_torch():
    x, tg, _ = _data("mean")
    T, B, C, S, il, tl, _ = CASES["mean"]
    out = []
    for m in (torch, engine):
        loss = m.nn.CTCLoss(blank=0, reduction="sum", zero_infinity=True)
        out.append((repr(loss), loss(m.tensor(x).log_softmax(2), m.tensor(tg), il, tl).item()))
    assert out[0][0] == out[1][0]
    assert out[0][1] == pytest.approx(out[1][1], rel=1e-13)


def test_meta_shapes_and_backward():
    x = engine.ones(12, 3, 5, device="meta", requires_grad=True)
    tg = engine.zeros(3, 4, dtype=engine.int64, device="meta")
    y = engine.nn.functional.ctc_loss(x, tg, [12, 10, 7], [4, 2, 3], reduction="none")
    assert tuple(y.shape) == (3,) and y.grad_fn.name() == "CtcLossBackward0"
    y.sum().backward()
    assert tuple(x.grad.shape) == (12, 3, 5)
    assert tuple(engine.nn.functional.ctc_loss(x, tg, [12] * 3, [4] * 3).shape) == ()


T0, B0, C0, S0 = 6, 2, 4, 3
LP = np.log(np.full((T0, B0, C0), 1 / C0))
TG = np.array([[1, 2, 3], [3, 2, 1]])


def _c(m, lp=LP, tg=TG, il=(6, 6), tl=(3, 3), **kw):
    lp = m.tensor(lp) if isinstance(lp, np.ndarray) else lp
    tg = m.tensor(tg) if isinstance(tg, np.ndarray) else tg
    return m.nn.functional.ctc_loss(lp, tg, il, tl, **kw)


@pytest.mark.parametrize(
    "call",
    [
        lambda m: _c(m, blank=4),
        lambda m: _c(m, blank=-1),
        lambda m: _c(m, il=(6,)),
        lambda m: _c(m, tl=(3,)),
        lambda m: _c(m, tl=(4, 3)),
        lambda m: _c(m, tl=(-1, 3)),
        lambda m: _c(m, il=(7, 6)),
        lambda m: _c(m, il=(-1, 6)),
        lambda m: _c(m, tg=TG[:1]),
        lambda m: _c(m, tg=TG.reshape(-1)[:5]),
        lambda m: _c(m, tg=TG[None]),
        lambda m: _c(m, lp=LP[None]),
        lambda m: _c(m, lp=m.tensor(LP).long()),
        lambda m: _c(m, lp=m.tensor(LP).half()),
        lambda m: _c(m, il=m.tensor([6.0, 6.0]), tl=m.tensor([3, 3])),
        lambda m: _c(m, il=m.tensor([6, 6]), tl=m.tensor([3.0, 3.0])),
        lambda m: _c(m, reduction="avg"),
    ],
)
def test_refusals_as_torch(call):
    assert_raises_as_torch(call)


def test_batch_first_log_probs_blocks_as_torch():
    """log_probs as a transposed view of [N, T, C]: the kernel reads it in place; its gradient
    is made contiguous (full_like), as torch's."""
    rng = np.random.default_rng(4)
    x = rng.standard_normal((16, 12, 5))
    tg = rng.integers(1, 5, (16, 4))

    def make(m):
        leaf = m.tensor(x, requires_grad=True)
        return forward_backward(
            m,
            lambda: m.nn.functional.ctc_loss(
                leaf.log_softmax(2).transpose(0, 1), m.tensor(tg), [12] * 16, [4] * 16
            ),
        )

    assert_steps_as_torch(make)
