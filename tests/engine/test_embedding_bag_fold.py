"""F.embedding_bag / nn.EmbeddingBag against torch 2.13: values, gradients of weight and
per_sample_weights, the node (EmbeddingBagBackward0), the blocks its CPU profiler shows forward
and backward (offset2bag, bag_size, max_indices kept by the node; backward's sort, gathers,
nonzero and per-column clones), float64 numerical gradients, refusals and the module."""

from __future__ import annotations

import numpy as np
import pytest

import engine
from tests.conftest import assert_raises_as_torch
from tests.engine.test_memory_vs_torch import assert_steps_as_torch, forward_backward

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(7)
IDX = RNG.integers(0, 100, 24)
OFF = np.array([0, 4, 9, 15, 20])
OFF_LAST = np.array([0, 4, 9, 9, 20, 24])  # an empty bag too
W = RNG.standard_normal((100, 16))
PSW = RNG.random(24)
PAD = int(IDX[3])

CASES = {  # name -> (mode, keyword arguments; "psw" / "two_d" / "last" are the test's)
    "sum": ("sum", {}),
    "mean": ("mean", {}),
    "max": ("max", {}),
    "sum_padding": ("sum", {"padding_idx": PAD}),
    "mean_padding": ("mean", {"padding_idx": PAD}),
    "max_padding": ("max", {"padding_idx": PAD}),
    "sum_2d": ("sum", {"two_d": True}),
    "mean_2d": ("mean", {"two_d": True}),
    "max_2d": ("max", {"two_d": True}),
    "sum_weighted": ("sum", {"psw": True}),
    "sum_weighted_2d": ("sum", {"psw": True, "two_d": True}),
    "sum_last_offset": ("sum", {"last": True}),
    "mean_last_offset": ("mean", {"last": True}),
    "max_last_offset": ("max", {"last": True}),
    "mean_negative_padding": ("mean", {"padding_idx": PAD - 100}),
}


def _call(m, name, dtype):
    mode, kw = CASES[name]
    kw = dict(kw)
    weight = m.tensor(W.astype(dtype), requires_grad=True)
    idx = m.tensor(IDX)
    extra = {}
    if kw.pop("psw", False):
        extra["per_sample_weights"] = m.tensor(PSW.astype(dtype), requires_grad=True)
    F = m.nn.functional
    if kw.pop("two_d", False):
        if "per_sample_weights" in extra:
            extra["per_sample_weights"] = m.tensor(
                PSW.astype(dtype).reshape(4, 6), requires_grad=True
            )
        y = F.embedding_bag(idx.reshape(4, 6), weight, mode=mode, **extra, **kw)
    elif kw.pop("last", False):
        y = F.embedding_bag(
            idx, weight, m.tensor(OFF_LAST), mode=mode, include_last_offset=True, **extra, **kw
        )
    else:
        y = F.embedding_bag(idx, weight, m.tensor(OFF), mode=mode, **extra, **kw)
    return weight, extra.get("per_sample_weights"), y


def _run(m, name, dtype):
    weight, psw, y = _call(m, name, dtype)
    g = np.random.default_rng(3).standard_normal(tuple(y.shape)).astype(dtype)
    (y * 1.0).backward(m.tensor(g))
    return (
        y.detach().numpy(),
        weight.grad.numpy(),
        None if psw is None else psw.grad.numpy(),
        y.grad_fn.name(),
    )


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_values_gradients_and_node_as_torch(name, dtype):
    ours, theirs = _run(engine, name, dtype), _run(torch, name, dtype)
    tol = dict(rtol=1e-13, atol=1e-13) if dtype == np.float64 else dict(rtol=1e-5, atol=1e-6)
    for a, b in zip(ours[:3], theirs[:3], strict=True):
        if b is None:
            assert a is None
        else:
            np.testing.assert_allclose(a, b, **tol)
    assert ours[3] == theirs[3] == "EmbeddingBagBackward0"


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_allocations_forward_and_backward_as_torch(name, dtype):
    """float32 sum without padding is torch's fast path: offset2bag left empty in forward and
    rebuilt in backward (per_sample_weights' gradient rebuilds its own)."""

    def make(m):
        return forward_backward(m, lambda: _call(m, name, dtype)[2])

    assert_steps_as_torch(make)


@pytest.mark.parametrize("mode", ["sum", "mean"])
def test_gradients_match_central_differences(mode):
    rng = np.random.default_rng(1)
    w0, p0 = rng.standard_normal((6, 3)), rng.random(7)
    idx, off = engine.tensor([0, 2, 5, 2, 1, 1, 4]), engine.tensor([0, 3, 3, 5])
    g = rng.standard_normal((4, 3))

    def f(w, p):
        psw = engine.tensor(p) if mode == "sum" else None
        y = engine.nn.functional.embedding_bag(
            idx, engine.tensor(w), off, mode=mode, per_sample_weights=psw
        )
        return float((y.numpy() * g).sum())

    w = engine.tensor(w0, requires_grad=True)
    p = engine.tensor(p0, requires_grad=True) if mode == "sum" else None
    y = engine.nn.functional.embedding_bag(idx, w, off, mode=mode, per_sample_weights=p)
    y.backward(engine.tensor(g))
    eps = 1e-6
    num_w = np.zeros_like(w0)
    for i in np.ndindex(w0.shape):
        d = np.zeros_like(w0)
        d[i] = eps
        num_w[i] = (f(w0 + d, p0) - f(w0 - d, p0)) / (2 * eps)
    np.testing.assert_allclose(w.grad.numpy(), num_w, atol=1e-8)
    if p is not None:
        num_p = np.array(
            [
                (f(w0, p0 + eps * np.eye(7)[i]) - f(w0, p0 - eps * np.eye(7)[i])) / (2 * eps)
                for i in range(7)
            ]
        )
        np.testing.assert_allclose(p.grad.numpy(), num_p, atol=1e-8)


def test_frozen_weight_forward_as_torch():
    """A weight that needs no gradient: torch's _embedding_bag_forward_only, no node."""

    def make(m):
        weight = m.tensor(W)
        return (lambda: m.nn.functional.embedding_bag(m.tensor(IDX), weight, m.tensor(OFF)),)

    assert_steps_as_torch(make)
    y = engine.nn.functional.embedding_bag(
        engine.tensor(IDX), engine.tensor(W), engine.tensor(OFF), mode="max"
    )
    t = torch.nn.functional.embedding_bag(
        torch.tensor(IDX), torch.tensor(W), torch.tensor(OFF), mode="max"
    )
    np.testing.assert_array_equal(y.numpy(), t.numpy())
    assert y.grad_fn is None


def test_module_and_from_pretrained_as_torch():
    for m in (engine, torch):
        m.manual_seed(0)
    bags = {
        m: m.nn.EmbeddingBag.from_pretrained(m.tensor(W), freeze=False, mode="sum", padding_idx=3)
        for m in (engine, torch)
    }
    assert repr(bags[engine]) == repr(bags[torch])
    ys = {
        m: bag(m.tensor(IDX), m.tensor(OFF), per_sample_weights=m.tensor(PSW))
        for m, bag in bags.items()
    }
    np.testing.assert_allclose(ys[engine].detach().numpy(), ys[torch].detach().numpy(), 1e-13)
    frozen = engine.nn.EmbeddingBag.from_pretrained(engine.tensor(W))
    assert not frozen.weight.requires_grad and frozen.mode == "mean"
    bag = engine.nn.EmbeddingBag(10, 4, mode="max", padding_idx=-1)
    assert bag.weight.shape == (10, 4) and bag.padding_idx == 9
    assert float(bag.weight[9].abs().sum()) == 0.0
    assert repr(bag) == repr(torch.nn.EmbeddingBag(10, 4, mode="max", padding_idx=-1))


def test_meta_shapes():
    w = engine.empty(100, 16, device="meta", requires_grad=True)
    idx = engine.zeros(24, dtype=engine.int64, device="meta")
    off = engine.zeros(5, dtype=engine.int64, device="meta")
    for mode in ("sum", "mean", "max"):
        y = engine.nn.functional.embedding_bag(idx, w, off, mode=mode)
        assert y.shape == (5, 16) and y.device.type == "meta"
        y.backward(engine.ones_like(y))
        assert w.grad.shape == (100, 16)
        w.grad = None


REFUSALS = {
    "offsets_2d": lambda m: m.nn.functional.embedding_bag(
        m.tensor(IDX), m.tensor(W), m.tensor(OFF).reshape(5, 1)
    ),
    "no_offsets": lambda m: m.nn.functional.embedding_bag(m.tensor(IDX), m.tensor(W)),
    "input_3d": lambda m: m.nn.functional.embedding_bag(
        m.tensor(IDX).reshape(2, 3, 4), m.tensor(W)
    ),
    "weight_1d": lambda m: m.nn.functional.embedding_bag(
        m.tensor(IDX), m.tensor(W[0]), m.tensor(OFF)
    ),
    "bad_mode": lambda m: m.nn.functional.embedding_bag(
        m.tensor(IDX), m.tensor(W), m.tensor(OFF), mode="min"
    ),
    "psw_mean": lambda m: m.nn.functional.embedding_bag(
        m.tensor(IDX), m.tensor(W), m.tensor(OFF), mode="mean", per_sample_weights=m.tensor(PSW)
    ),
    "psw_shape": lambda m: m.nn.functional.embedding_bag(
        m.tensor(IDX), m.tensor(W), m.tensor(OFF), mode="sum", per_sample_weights=m.tensor(W[0])
    ),
    "first_offset": lambda m: m.nn.functional.embedding_bag(
        m.tensor(IDX), m.tensor(W), m.tensor(OFF + 1)
    ),
    "last_offset": lambda m: m.nn.functional.embedding_bag(
        m.tensor(IDX), m.tensor(W), m.tensor(np.array([0, 30]))
    ),
    "index_range": lambda m: m.nn.functional.embedding_bag(
        m.tensor(IDX + 100), m.tensor(W), m.tensor(OFF), mode="max"
    ),
    "padding_range": lambda m: m.nn.functional.embedding_bag(
        m.tensor(IDX), m.tensor(W), m.tensor(OFF), padding_idx=100
    ),
    "float_offsets": lambda m: m.nn.functional.embedding_bag(
        m.tensor(IDX), m.tensor(W), m.tensor(OFF * 1.0)
    ),
}


@pytest.mark.parametrize("name", sorted(REFUSALS))
def test_refusals_as_torch(name):
    assert_raises_as_torch(REFUSALS[name])


def test_offsets_with_a_2d_input_refused_as_torch():
    """torch's words name the offsets' class (torch.Tensor; here engine's Tensor)."""
    for m in (engine, torch):
        with pytest.raises(ValueError, match="if input is 2D, then offsets has to be None"):
            m.nn.functional.embedding_bag(m.tensor(IDX).reshape(4, 6), m.tensor(W), m.tensor(OFF))


def test_max_norm_is_refused_clearly():
    with pytest.raises(NotImplementedError, match="max_norm"):
        engine.nn.functional.embedding_bag(
            engine.tensor(IDX), engine.tensor(W), engine.tensor(OFF), max_norm=1.0
        )
    with pytest.raises(NotImplementedError, match="max_norm"):
        engine.nn.EmbeddingBag(10, 3, max_norm=1.0)
