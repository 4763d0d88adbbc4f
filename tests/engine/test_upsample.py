"""F.interpolate (nearest, nearest-exact, linear, bilinear; size or scale_factor; align_corners)
and nn.Upsample against torch 2.13: values (float32 to torch's kernel's rounding, float64),
gradients, node names, the blocks its CPU profiler shows forward and backward (the 2-D kernel's
channels-last copies, the 1-D index and weight buffers), refusals, and central differences."""

from __future__ import annotations

import numpy as np
import pytest

import engine
from tests.conftest import assert_raises_as_torch
from tests.engine.test_memory_vs_torch import (
    assert_sequence_as_torch,
    assert_steps_as_torch,
    forward_backward,
)

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(8)
X2 = RNG.standard_normal((2, 4, 16, 16))
X1 = RNG.standard_normal((2, 4, 64))

CASES = {  # name -> (input, kwargs)
    "nearest_x2": (X2, {"scale_factor": 2}),
    "nearest_size": (X2, {"size": (20, 37)}),
    "nearest_down": (X2, {"size": (7, 5)}),
    "nearest_scale_1_5": (X2, {"scale_factor": 1.5}),
    "nearest_exact": (X2, {"size": (23, 9), "mode": "nearest-exact"}),
    "bilinear_x2": (X2, {"scale_factor": 2, "mode": "bilinear"}),
    "bilinear_size": (X2, {"size": (40, 21), "mode": "bilinear"}),
    "bilinear_corners": (X2, {"size": (31, 9), "mode": "bilinear", "align_corners": True}),
    "bilinear_scale_recompute": (
        X2,
        {"scale_factor": (1.7, 0.6), "mode": "bilinear", "recompute_scale_factor": True},
    ),
    "bilinear_down": (X2, {"scale_factor": 0.37, "mode": "bilinear"}),
    "nearest_1d": (X1, {"scale_factor": 2}),
    "nearest_1d_size": (X1, {"size": 100}),
    "nearest_exact_1d": (X1, {"size": 50, "mode": "nearest-exact"}),
    "linear_1d": (X1, {"size": 100, "mode": "linear"}),
    "linear_1d_corners": (X1, {"scale_factor": 2.5, "mode": "linear", "align_corners": True}),
}


def _run(m, name, dtype):
    arr, kw = CASES[name]
    x = m.tensor(arr.astype(dtype), requires_grad=True)
    y = m.nn.functional.interpolate(x, **kw)
    g = m.tensor(np.random.default_rng(1).standard_normal(tuple(y.shape)).astype(dtype))
    y.backward(g)
    return y.detach().numpy(), x.grad.numpy(), y.grad_fn.name()


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("name", sorted(CASES))
def test_values_gradients_and_node_as_torch(name, dtype):
    (ey, eg, en), (ty, tg, tn) = _run(engine, name, dtype), _run(torch, name, dtype)
    assert ey.shape == ty.shape and en == tn
    tol = 1e-12 if dtype == np.float64 else 2e-6
    np.testing.assert_allclose(ey, ty, rtol=tol, atol=tol)
    np.testing.assert_allclose(eg, tg, rtol=tol * 10, atol=tol * 10)


@pytest.mark.parametrize("name", sorted(CASES))
def test_allocations_forward_and_backward_as_torch(name):
    arr, kw = CASES[name]

    def make(m):
        x = m.tensor(arr.astype(np.float32), requires_grad=True)
        return forward_backward(m, lambda: m.nn.functional.interpolate(x, **kw))

    assert_steps_as_torch(make)


def test_a_channels_last_input_needs_no_copies():
    def make(m):
        x = m.tensor(X2.astype(np.float32)).permute(0, 2, 3, 1).contiguous().permute(0, 3, 1, 2)
        return lambda: m.nn.functional.interpolate(x, scale_factor=2)

    assert_sequence_as_torch(make)


def test_gradients_match_central_differences():
    from tests.engine.test_nn import gradcheck

    def fn(m, x):
        return m.nn.functional.interpolate(
            x, size=(4, 3), mode="bilinear"
        ) + m.nn.functional.interpolate(x, scale_factor=1.5)

    gradcheck(fn, [RNG.standard_normal((1, 2, 3, 2))], torch=torch)


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_peaks_by_hand(device):
    engine.memory.reset_peak_memory_stats(device)
    base = engine.memory.memory_allocated(device)
    x = engine.ones(2, 4, 16, 16, device=device, requires_grad=True)
    y = engine.nn.functional.interpolate(x, scale_factor=2, mode="bilinear")
    y.sum().backward()
    peak = engine.memory.max_memory_allocated(device) - base
    if device == "cpu":  # forward: x, y, and the cpu kernel's channels-last copies of x and y
        assert peak == 8192 + 32768 + 8192 + 32768
    else:  # meta plans a GPU run (cuda's kernel writes y directly): x, y, the sum and its
        # seed, then x's gradient
        assert peak == 8192 + 32768 + 4 + 4 + 8192


def test_upsample_modules_as_torch():
    x = X2.astype(np.float32)
    for name, kw in [
        ("Upsample", {"scale_factor": 2}),
        ("Upsample", {"size": (9, 11), "mode": "bilinear"}),
        ("UpsamplingNearest2d", {"scale_factor": 3}),
        ("UpsamplingBilinear2d", {"size": (12, 7)}),
    ]:
        e = getattr(engine.nn, name)(**kw)
        t = getattr(torch.nn, name)(**kw)
        assert repr(e) == repr(t)
        np.testing.assert_allclose(
            e(engine.tensor(x)).numpy(), t(torch.tensor(x)).numpy(), rtol=2e-6, atol=2e-6
        )


@pytest.mark.parametrize(
    "call",
    [
        lambda m: m.nn.functional.interpolate(m.ones(1, 1, 4, 4)),
        lambda m: m.nn.functional.interpolate(m.ones(1, 1, 4, 4), size=3, scale_factor=2),
        lambda m: m.nn.functional.interpolate(m.ones(1, 1, 4, 4), size=(3, 3, 3)),
        lambda m: m.nn.functional.interpolate(m.ones(1, 1, 4), scale_factor=(2, 2)),
        lambda m: m.nn.functional.interpolate(m.ones(1, 1, 4, 4), size=8, align_corners=True),
        lambda m: m.nn.functional.interpolate(m.ones(4, 4), size=8),
    ],
)
def test_refusals_as_torch(call):
    assert_raises_as_torch(call)
