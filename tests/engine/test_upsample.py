"""F.interpolate (nearest, nearest-exact, area on 3-D/4-D/5-D inputs, linear, bilinear, bicubic,
trilinear; size or scale_factor; align_corners) and nn.Upsample against torch 2.13: values
(float32 to torch's kernel's rounding, float64), gradients, node names, the blocks its CPU
profiler shows forward and backward (the 2-D kernel's channels-last copies, the separable
kernel's index and weight buffers per dim and tap), refusals, and central differences."""

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
X3 = RNG.standard_normal((2, 3, 5, 6, 7))

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
    "bicubic_size": (X2, {"size": (23, 9), "mode": "bicubic"}),
    "bicubic_x2": (X2, {"scale_factor": 2, "mode": "bicubic"}),
    "bicubic_corners": (X2, {"size": (31, 12), "mode": "bicubic", "align_corners": True}),
    "bicubic_down": (X2, {"scale_factor": 0.4, "mode": "bicubic"}),
    "trilinear_size": (X3, {"size": (8, 4, 13), "mode": "trilinear"}),
    "trilinear_corners": (X3, {"scale_factor": 1.5, "mode": "trilinear", "align_corners": True}),
    "trilinear_same": (X3, {"size": (5, 6, 7), "mode": "trilinear"}),
    "nearest_3d": (X3, {"size": (9, 4, 14)}),
    "nearest_3d_x2": (X3, {"scale_factor": 2}),
    "nearest_exact_3d": (X3, {"scale_factor": (1.5, 0.7, 2.2), "mode": "nearest-exact"}),
    "area_2d": (X2, {"size": (5, 7), "mode": "area"}),
    "area_1d": (X1, {"size": 20, "mode": "area"}),
    "area_3d": (X3, {"size": (3, 4, 2), "mode": "area"}),
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
        lambda m: m.nn.functional.interpolate(m.ones(1, 1, 4), size=8, mode="bicubic"),
        lambda m: m.nn.functional.interpolate(m.ones(1, 1, 4, 4), size=8, mode="trilinear"),
        lambda m: m.nn.functional.interpolate(m.ones(1, 1, 2, 2, 2), size=8, mode="bilinear"),
        lambda m: m.nn.functional.interpolate(m.ones(1, 1, 4, 4), size=8, mode="cubic"),
        lambda m: m.nn.functional.interpolate(
            m.ones(1, 1, 4, 4), size=2, mode="area", align_corners=False
        ),
        lambda m: m.nn.functional.interpolate(m.ones(1, 1, 4), size=8, antialias=True),
    ],
)
def test_refusals_as_torch(call):
    assert_raises_as_torch(call)


def test_bicubic_and_trilinear_gradients_match_central_differences():
    from tests.engine.test_nn import gradcheck

    def fn(m, x):
        return m.nn.functional.interpolate(x, size=(3, 5, 2), mode="trilinear")

    gradcheck(fn, [RNG.standard_normal((1, 2, 2, 3, 4))], torch=torch)

    def fn2(m, x):
        return m.nn.functional.interpolate(x, size=(5, 3), mode="bicubic", align_corners=True)

    gradcheck(fn2, [RNG.standard_normal((1, 2, 4, 4))], torch=torch)


@pytest.mark.parametrize(
    "kw", [{"mode": "trilinear"}, {"mode": "nearest"}, {"mode": "nearest-exact"}]
)
def test_5d_on_meta_plans_the_output_alone(kw):
    # meta plans a GPU run: cuda's kernels write the output directly, no index buffers
    x = engine.ones(2, 3, 4, 5, 6, device="meta", requires_grad=True)
    before = engine.memory.memory_allocated("meta")
    engine.memory.reset_peak_memory_stats("meta")
    y = engine.nn.functional.interpolate(x, size=(8, 10, 3), **kw)
    assert tuple(y.shape) == (2, 3, 8, 10, 3) and y.device.type == "meta"
    assert engine.memory.max_memory_allocated("meta") - before == 2 * 3 * 8 * 10 * 3 * 4
    y.backward(engine.ones_like(y))
    assert tuple(x.grad.shape) == (2, 3, 4, 5, 6)


def test_cpu_trilinear_index_and_weight_buffers_by_hand():
    # the output, then per dim (d, h, w) and per tap an int64 index and a float32 weight
    # buffer of that dim's output length, all alive together before they are freed
    x = engine.ones(2, 3, 4, 5, 6)
    base = engine.memory.memory_allocated("cpu")
    engine.memory.reset_peak_memory_stats("cpu")
    engine.nn.functional.interpolate(x, size=(8, 10, 3), mode="trilinear")
    out = 2 * 3 * 8 * 10 * 3 * 4
    buffers = sum(2 * n * (8 + 4) for n in (8, 10, 3))
    assert engine.memory.max_memory_allocated("cpu") - base == out + buffers


@pytest.mark.parametrize(
    "kw",
    [
        {"scale_factor": 2, "mode": "trilinear"},
        {"size": (3, 4, 5), "mode": "nearest"},
        {"scale_factor": 1.5, "mode": "trilinear", "align_corners": True},
    ],
)
def test_upsample_module_on_5d_inputs_as_torch(kw):
    x = X3.astype(np.float32)
    e, t = engine.nn.Upsample(**kw), torch.nn.Upsample(**kw)
    assert repr(e) == repr(t)
    np.testing.assert_allclose(
        e(engine.tensor(x)).numpy(), t(torch.tensor(x)).numpy(), rtol=2e-6, atol=2e-6
    )


def test_bicubic_module_as_torch():
    x = X2.astype(np.float64)
    e = engine.nn.Upsample(scale_factor=1.5, mode="bicubic")
    t = torch.nn.Upsample(scale_factor=1.5, mode="bicubic")
    assert repr(e) == repr(t)
    np.testing.assert_allclose(
        e(engine.tensor(x)).numpy(), t(torch.tensor(x)).numpy(), rtol=1e-13, atol=1e-13
    )
