"""engine/ops/nn/pointwise_loss.py against torch 2.13: l1_loss, smooth_l1_loss, huber_loss,
binary_cross_entropy, binary_cross_entropy_with_logits and kl_div (and xlogy, which kl_div is
built from): values, both operands' gradients, node names, refusals, the allocation sequence
torch's CPU profiler shows forward and backward, and meta charging as cpu."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import engine
from tests.conftest import assert_raises_as_torch
from tests.engine.test_memory_vs_torch import assert_steps_as_torch, forward_backward

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(3)
SHAPE = (64, 128)  # 32 KiB float32 blocks: the profiler's events stand out of its scalars
PROB = RNG.uniform(0.02, 0.98, SHAPE)
TARGET = RNG.uniform(0.0, 1.0, SHAPE)
LOGIT = RNG.standard_normal(SHAPE) * 3
WEIGHT = RNG.uniform(0.5, 1.5, SHAPE[1:])

# name -> (input, call(F, x, t, w, reduction))
CASES = {
    "l1": (LOGIT, lambda F, x, t, w, r: F.l1_loss(x, t, reduction=r)),
    "smooth_l1": (LOGIT, lambda F, x, t, w, r: F.smooth_l1_loss(x, t, reduction=r, beta=0.5)),
    "smooth_l1_beta0": (LOGIT, lambda F, x, t, w, r: F.smooth_l1_loss(x, t, reduction=r, beta=0)),
    "huber": (LOGIT, lambda F, x, t, w, r: F.huber_loss(x, t, reduction=r, delta=0.7)),
    "huber_weighted": (
        LOGIT,
        lambda F, x, t, w, r: F.huber_loss(x, t, reduction=r, delta=0.7, weight=w.expand(x.shape)),
    ),
    "bce": (PROB, lambda F, x, t, w, r: F.binary_cross_entropy(x, t, reduction=r)),
    "bce_weight": (PROB, lambda F, x, t, w, r: F.binary_cross_entropy(x, t, w, reduction=r)),
    "bce_logits": (
        LOGIT,
        lambda F, x, t, w, r: F.binary_cross_entropy_with_logits(x, t, reduction=r),
    ),
    "bce_logits_weights": (
        LOGIT,
        lambda F, x, t, w, r: F.binary_cross_entropy_with_logits(
            x, t, weight=w, pos_weight=w * 2, reduction=r
        ),
    ),
    "kl_div": (LOGIT, lambda F, x, t, w, r: F.kl_div(x, t, reduction=r)),
    "kl_div_log_target": (
        LOGIT,
        lambda F, x, t, w, r: F.kl_div(x, t.log(), reduction=r, log_target=True),
    ),
}
REDUCTIONS = ["mean", "sum", "none"]


def _run(m, name, reduction, target_grad, dtype=np.float64):
    arr, call = CASES[name]
    x = m.tensor(arr.astype(dtype), requires_grad=True)
    t = m.tensor(TARGET.astype(dtype), requires_grad=target_grad)
    w = m.tensor(WEIGHT.astype(dtype))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's kl_div 'mean' warning
        y = call(m.nn.functional, x, t, w, reduction)
    g = m.tensor(np.random.default_rng(7).standard_normal(tuple(y.shape)) if y.ndim else 1.5)
    y.backward(g.to(y.dtype))
    return (
        y.detach().numpy(),
        x.grad.numpy(),
        t.grad.numpy() if target_grad else None,
        y.grad_fn.name(),
    )


@pytest.mark.parametrize("target_grad", [False, True])
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("name", sorted(CASES))
def test_values_gradients_and_node_as_torch(name, reduction, target_grad):
    ey, egx, egt, en = _run(engine, name, reduction, target_grad)
    ty, tgx, tgt, tn = _run(torch, name, reduction, target_grad)
    np.testing.assert_allclose(ey, ty, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(egx, tgx, rtol=1e-10, atol=1e-14)
    if target_grad:
        np.testing.assert_allclose(egt, tgt, rtol=1e-10, atol=1e-14)
    assert en == tn


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("name", sorted(CASES))
def test_float32_values_as_torch(name, reduction):
    ey, egx, _, _ = _run(engine, name, reduction, False, np.float32)
    ty, tgx, _, _ = _run(torch, name, reduction, False, np.float32)
    assert ey.dtype == ty.dtype == np.float32
    np.testing.assert_allclose(ey, ty, rtol=2e-5, atol=1e-6)
    np.testing.assert_allclose(egx, tgx, rtol=2e-5, atol=1e-6)


def _program(name, reduction):
    arr, call = CASES[name]

    def make(m):
        x = m.tensor(arr.astype(np.float32), requires_grad=True)
        t, w = m.tensor(TARGET.astype(np.float32)), m.tensor(WEIGHT.astype(np.float32))

        def run():
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                return call(m.nn.functional, x, t, w, reduction)

        return forward_backward(m, run)

    return make


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("name", sorted(CASES))
def test_allocations_forward_and_backward_as_torch(name, reduction):
    """Every block torch's profiler shows (size, order, which frees which), forward then
    backward; a weighted or pos-weighted loss included."""
    assert_steps_as_torch(_program(name, reduction))


@pytest.mark.parametrize("name", sorted(CASES))
def test_meta_charges_as_cpu(name):
    arr, call = CASES[name]

    def run(device):
        engine.memory.reset_peak_memory_stats(device)
        base = engine.memory.memory_allocated(device)
        x = engine.tensor(arr.astype(np.float32), device=device, requires_grad=True)
        t = engine.tensor(TARGET.astype(np.float32), device=device)
        w = engine.tensor(WEIGHT.astype(np.float32), device=device)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            y = call(engine.nn.functional, x, t, w, "mean")
        y.backward()
        peak = engine.memory.max_memory_allocated(device) - base
        return tuple(y.shape), str(y.dtype), peak

    assert run("meta") == run("cpu")


@pytest.mark.parametrize(
    "call",
    [
        lambda m: m.nn.functional.binary_cross_entropy(m.tensor([0.5, 1.5]), m.tensor([0.0, 1.0])),
        lambda m: m.nn.functional.binary_cross_entropy(m.tensor([0.5, 0.2]), m.tensor([1.0])),
        lambda m: m.nn.functional.binary_cross_entropy_with_logits(
            m.tensor([0.5, 0.2]), m.tensor([[1.0, 0.0]])
        ),
        lambda m: m.nn.functional.binary_cross_entropy(
            m.tensor([0.5]), m.tensor([1.0]), m.tensor([2.0], requires_grad=True)
        ),
        lambda m: m.nn.functional.binary_cross_entropy_with_logits(
            m.tensor([0.5]), m.tensor([1.0]), pos_weight=m.tensor([2.0], requires_grad=True)
        ),
        lambda m: m.nn.functional.smooth_l1_loss(m.tensor([0.5]), m.tensor([1.0]), beta=-1.0),
        lambda m: m.nn.functional.huber_loss(m.tensor([0.5]), m.tensor([1.0]), delta=0.0),
        lambda m: m.nn.functional.l1_loss(m.tensor([0.5]), m.tensor([1.0]), reduction="avg"),
        lambda m: m.nn.functional.huber_loss(m.tensor([0.5]), m.tensor([1.0]), reduction="avg"),
        lambda m: m.nn.functional.huber_loss(
            m.tensor([0.5]), m.tensor([1.0]), reduction="avg", weight=m.tensor([2.0])
        ),
        lambda m: m.nn.functional.huber_loss(
            m.tensor([0.5, 1.0]), m.tensor([1.0, 2.0]), weight=m.tensor([2.0])
        ),
        lambda m: m.nn.functional.kl_div(m.tensor([0.5]), m.tensor([1.0]), reduction="avg"),
    ],
)
def test_refusals_as_torch(call):
    assert_raises_as_torch(call)


def test_kl_div_mean_warns_as_torch():
    with pytest.warns(UserWarning, match="batchmean"):
        engine.nn.functional.kl_div(engine.tensor([0.5]), engine.tensor([1.0]))


def test_loss_modules_as_torch():
    x, t = RNG.uniform(0.05, 0.95, (4, 3)), RNG.uniform(0, 1, (4, 3))
    for name, kw in [
        ("L1Loss", {}),
        ("SmoothL1Loss", {"beta": 0.3}),
        ("HuberLoss", {"delta": 0.2, "reduction": "sum"}),
        ("BCELoss", {}),
        ("BCEWithLogitsLoss", {"pos_weight": "pw"}),
        ("KLDivLoss", {"reduction": "batchmean", "log_target": True}),
    ]:
        outs = []
        for m in (engine, torch):
            args = {k: (m.tensor([1.0, 2.0, 0.5]) if v == "pw" else v) for k, v in kw.items()}
            loss = getattr(m.nn, name)(**args)
            outs.append(loss(m.tensor(x), m.tensor(t)).item())
        assert outs[0] == pytest.approx(outs[1], rel=1e-12), name


@pytest.mark.parametrize(
    "operands",
    ["tensors", "scalar_self", "zero_self", "scalar_other", "zero_other", "nan_other", "neg_other"],
)
def test_xlogy_as_torch(operands):
    """0 where self is 0 (NaN where other is NaN); self's gradient log(other), but 0 where self
    is 0 and other <= 0; other's self / other; the three node names."""

    def run(m):
        x = m.tensor([0.0, 1.0, 2.0, 0.0, 3.0, 0.0], requires_grad=True)
        y = m.tensor([0.0, float("nan"), 3.0, 2.0, -1.0, -2.0], requires_grad=True)
        a, b = {
            "tensors": (x, y),
            "scalar_self": (2.0, y),
            "zero_self": (0.0, y),
            "scalar_other": (x, 2.0),
            "zero_other": (x, 0.0),
            "nan_other": (x, float("nan")),
            "neg_other": (x, -1.0),
        }[operands]
        z = m.xlogy(a, b)
        (z * m.tensor([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])).sum().backward()
        grads = [None if v.grad is None else v.grad.numpy() for v in (x, y)]
        return z.detach().numpy(), grads, z.grad_fn.name()

    (ez, eg, en), (tz, tg, tn) = run(engine), run(torch)
    np.testing.assert_allclose(ez, tz, rtol=1e-7)
    for a, b in zip(eg, tg, strict=True):
        assert (a is None) == (b is None)
        if a is not None:
            np.testing.assert_allclose(a, b, rtol=1e-7)
    assert en == tn


def test_xlogy_integers_compute_in_the_default_float():
    for m in (engine, torch):
        z = m.xlogy(m.tensor([1, 2]), m.tensor([3, 4]))
        assert str(z.dtype).endswith("float32")
    x = engine.tensor([1.0, 2.0])
    assert x.xlogy(engine.tensor([3.0, 4.0])).tolist() == pytest.approx([np.log(3), 2 * np.log(4)])
    x.xlogy_(engine.tensor([3.0, 4.0]))
    assert x.tolist() == pytest.approx([np.log(3), 2 * np.log(4)])
