"""conv3d, conv_transpose1d/3d, the 3-D pools, adaptive max pooling (1-D/2-D/3-D) and
BatchNorm3d against torch 2.13: values, gradients, node names, refusals, reprs, and every block
torch's CPU profiler shows forward and backward (float64 for the convolutions, where torch runs
its slow kernels and their column buffers are charged; float32 and float64 for the pools)."""

from __future__ import annotations

import numpy as np
import pytest

import engine
from tests.conftest import assert_raises_as_torch
from tests.engine.test_memory_vs_torch import assert_steps_as_torch, forward_backward

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(7)
X5 = RNG.standard_normal((2, 3, 5, 6, 7))
X5B = RNG.standard_normal((2, 3, 6, 7, 8))
X5B[0, 0, 1, 1, 1] = np.nan  # a NaN wins its windows, as in torch
X4 = RNG.standard_normal((2, 3, 7, 8))
X3 = RNG.standard_normal((2, 3, 9))

CONV = {  # name -> (input shape, weight shape, bias, kwargs)
    "pad1": ((2, 3, 5, 6, 7), (4, 3, 3, 3, 3), True, dict(padding=1)),
    "stride_pad": (
        (2, 3, 5, 6, 7),
        (16, 3, 3, 2, 3),
        True,
        dict(stride=(2, 1, 2), padding=(1, 0, 1)),
    ),
    "dilated": ((2, 3, 5, 6, 7), (16, 3, 3, 3, 3), True, dict(dilation=2, padding=2)),
    "groups": ((2, 6, 5, 6, 7), (6, 2, 3, 3, 3), False, dict(groups=3, padding=1)),
    "pointwise": ((2, 3, 5, 6, 7), (4, 3, 1, 1, 1), True, dict()),
    "pointwise_s2": ((2, 3, 5, 6, 7), (4, 3, 1, 1, 1), False, dict(stride=2)),
    "same_even": ((2, 3, 5, 6, 7), (4, 3, 2, 2, 2), False, dict(padding="same")),
    "valid_unbatched": ((3, 5, 6, 7), (4, 3, 3, 3, 3), True, dict(padding="valid")),
}
CONVT = {
    "t1_s2": ((2, 3, 7), (3, 4, 3), dict(stride=2)),
    "t1_all": ((2, 3, 7), (3, 4, 3), dict(stride=3, padding=1, output_padding=2, dilation=2)),
    "t1_1x1": ((2, 3, 7), (3, 4, 1), dict()),
    "t1_groups": ((2, 4, 7), (4, 3, 3), dict(groups=2, padding=1)),
    "t3_s2": ((2, 3, 4, 5, 6), (3, 4, 3, 3, 3), dict(stride=2)),
    "t3_all": ((2, 3, 4, 5, 6), (3, 2, 3, 2, 3),
               dict(stride=(2, 1, 3), padding=(1, 0, 1), output_padding=(1, 0, 2), dilation=(1, 2, 1))),
    "t3_groups": ((2, 4, 4, 5, 6), (4, 3, 3, 3, 3), dict(groups=2)),
    "t3_unbatched": ((3, 4, 5, 6), (3, 2, 2, 2, 2), dict(stride=2)),
}  # fmt: skip
POOL = {  # name -> (input, function name, kwargs)
    "max": (X5B, "max_pool3d", dict(kernel_size=2)),
    "max_pad_idx": (X5B, "max_pool3d", dict(kernel_size=3, stride=2, padding=1, return_indices=True)),
    "max_dil_ceil": (X5B, "max_pool3d", dict(kernel_size=2, stride=2, dilation=2, ceil_mode=True)),
    "max_unbatched": (X5B[0], "max_pool3d", dict(kernel_size=(2, 3, 2), stride=(1, 2, 2))),
    "avg": (X5B, "avg_pool3d", dict(kernel_size=2)),
    "avg_exclude_pad": (X5B, "avg_pool3d",
                        dict(kernel_size=3, stride=2, padding=1, ceil_mode=True, count_include_pad=False)),
    "avg_ceil": (X5B, "avg_pool3d", dict(kernel_size=3, stride=2, padding=1, ceil_mode=True)),
    "avg_divisor": (X5B, "avg_pool3d", dict(kernel_size=3, stride=2, padding=1, divisor_override=5)),
    "avg_unbatched": (X5B[1], "avg_pool3d", dict(kernel_size=(1, 2, 3))),
    "aavg": (X5B, "adaptive_avg_pool3d", dict(output_size=(2, 3, 5))),
    "aavg_one": (X5B, "adaptive_avg_pool3d", dict(output_size=1)),
    "aavg_none": (X5B[0], "adaptive_avg_pool3d", dict(output_size=(4, None, 3))),
    "amax3": (X5B, "adaptive_max_pool3d", dict(output_size=(2, 3, 5), return_indices=True)),
    "amax3_unbatched": (X5B[0], "adaptive_max_pool3d", dict(output_size=4)),
    "amax2": (X4, "adaptive_max_pool2d", dict(output_size=(3, 5), return_indices=True)),
    "amax2_unbatched": (X4[0], "adaptive_max_pool2d", dict(output_size=(5, 3))),
    "amax1": (X3, "adaptive_max_pool1d", dict(output_size=4)),
    "amax1_unbatched": (X3[0], "adaptive_max_pool1d", dict(output_size=5, return_indices=True)),
}  # fmt: skip


def _conv_args(m, name, dtype, requires_grad=True):
    xs, ws, bias, kw = CONV[name]
    rng = np.random.default_rng(3)
    x = m.tensor(rng.standard_normal(xs).astype(dtype), requires_grad=requires_grad)
    w = m.tensor(rng.standard_normal(ws).astype(dtype), requires_grad=True)
    b = m.tensor(rng.standard_normal(ws[0]).astype(dtype), requires_grad=True) if bias else None
    return x, w, b, kw


def _convt_args(m, name, dtype):
    xs, ws, kw = CONVT[name]
    rng = np.random.default_rng(4)
    x = m.tensor(rng.standard_normal(xs).astype(dtype), requires_grad=True)
    w = m.tensor(rng.standard_normal(ws).astype(dtype), requires_grad=True)
    b = m.tensor(rng.standard_normal(ws[1] * kw.get("groups", 1)).astype(dtype), requires_grad=True)
    return x, w, b, kw


def _grads(y, leaves, dtype):
    gy = np.random.default_rng(5).standard_normal(tuple(y.shape)).astype(dtype)
    y.backward(type(y)(gy) if False else _as(y, gy))
    return [t.grad.numpy() for t in leaves if t is not None]


def _as(y, arr):
    return engine.tensor(arr) if isinstance(y, engine.Tensor) else torch.tensor(arr)


TOL = {np.float64: 1e-12, np.float32: 2e-4}


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("name", sorted(CONV))
def test_conv3d_values_gradients_and_node_as_torch(name, dtype):
    out = {}
    for m in (engine, torch):
        x, w, b, kw = _conv_args(m, name, dtype)
        y = m.nn.functional.conv3d(x, w, b, **kw)
        out[m] = (y.detach().numpy(), _grads(y, (x, w, b), dtype), y.grad_fn.name())
    (ey, eg, en), (ty, tg, tn) = out[engine], out[torch]
    np.testing.assert_allclose(ey, ty, rtol=TOL[dtype], atol=TOL[dtype])
    for a, b in zip(eg, tg, strict=True):
        np.testing.assert_allclose(a, b, rtol=TOL[dtype], atol=TOL[dtype])
    assert en == tn


@pytest.mark.parametrize("name", sorted(CONV))
def test_conv3d_float64_blocks_as_torch(name):
    # torch's slow_conv3d: the batch's columns around the output, grad_input with its columns,
    # grad_weight with its columns; slow_conv_dilated3d: one sample's columns after the output
    def make(m):
        x, w, b, kw = _conv_args(m, name, np.float64)
        return forward_backward(m, lambda: m.nn.functional.conv3d(x, w, b, **kw))

    assert_steps_as_torch(make)


def test_conv3d_float64_blocks_when_only_weight_wants_a_gradient():
    def make(m):
        x, w, b, kw = _conv_args(m, "pad1", np.float64, requires_grad=False)
        return forward_backward(m, lambda: m.nn.functional.conv3d(x, w, b, **kw))

    assert_steps_as_torch(make)


def test_conv3d_gradcheck_float64():
    x = engine.tensor(RNG.standard_normal((1, 2, 3, 4, 3)), requires_grad=True)
    w = engine.tensor(RNG.standard_normal((2, 2, 2, 2, 2)), requires_grad=True)
    f = lambda: (engine.nn.functional.conv3d(x, w, padding=1, stride=(1, 2, 1)) ** 2).sum()  # noqa: E731
    f().backward()
    for t in (x, w):
        flat, grad, eps = t._data.reshape(-1), t.grad.numpy().reshape(-1), 1e-6
        for i in (0, 5, flat.size - 1):
            keep = flat[i]
            flat[i] = keep + eps
            up = float(f().item())
            flat[i] = keep - eps
            down = float(f().item())
            flat[i] = keep
            assert abs((up - down) / (2 * eps) - grad[i]) < 1e-6


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("name", sorted(CONVT))
def test_conv_transpose_values_gradients_and_node_as_torch(name, dtype):
    rank = len(CONVT[name][1]) - 2
    out = {}
    for m in (engine, torch):
        x, w, b, kw = _convt_args(m, name, dtype)
        y = getattr(m.nn.functional, f"conv_transpose{rank}d")(x, w, b, **kw)
        out[m] = (y.detach().numpy(), _grads(y, (x, w, b), dtype), y.grad_fn.name())
    (ey, eg, en), (ty, tg, tn) = out[engine], out[torch]
    np.testing.assert_allclose(ey, ty, rtol=TOL[dtype], atol=TOL[dtype])
    for a, b in zip(eg, tg, strict=True):
        np.testing.assert_allclose(a, b, rtol=TOL[dtype], atol=TOL[dtype])
    assert en == tn


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("name", ["t1_s2", "t1_all", "t1_1x1", "t3_s2", "t3_all"])
def test_conv_transpose_float64_blocks_as_torch(name, bias):
    # groups > 1 is left out: torch runs each group apart and concatenates (see the report)
    rank = len(CONVT[name][1]) - 2

    def make(m):
        x, w, b, kw = _convt_args(m, name, np.float64)
        fn = getattr(m.nn.functional, f"conv_transpose{rank}d")
        return forward_backward(m, lambda: fn(x, w, b if bias else None, **kw))

    assert_steps_as_torch(make)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("name", sorted(POOL))
def test_pool_values_gradients_indices_and_node_as_torch(name, dtype):
    arr, fn, kw = POOL[name]
    out = {}
    for m in (engine, torch):
        x = m.tensor(arr.astype(dtype), requires_grad=True)
        res = getattr(m.nn.functional, fn)(x, **kw)
        y = res[0] if isinstance(res, tuple) else res
        idx = res[1].numpy() if isinstance(res, tuple) else None
        out[m] = (y.detach().numpy(), idx, _grads(y, (x,), dtype)[0], y.grad_fn.name())
    (ey, ei, eg, en), (ty, ti, tg, tn) = out[engine], out[torch]
    tol = 1e-13 if dtype == np.float64 else 1e-6
    np.testing.assert_allclose(ey, ty, rtol=tol, atol=tol, equal_nan=True)
    np.testing.assert_allclose(eg, tg, rtol=tol, atol=tol, equal_nan=True)
    if ei is not None:
        np.testing.assert_array_equal(ei, ti)
    assert en == tn


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", sorted(POOL))
def test_pool_blocks_as_torch(name, dtype):
    arr, fn, kw = POOL[name]

    def make(m):
        x = m.tensor(np.nan_to_num(arr).astype(dtype), requires_grad=True)
        return forward_backward(m, lambda: _first(getattr(m.nn.functional, fn)(x, **kw)))

    assert_steps_as_torch(make)


def _first(res):
    return res[0] if isinstance(res, tuple) else res


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_batchnorm3d_values_and_blocks_as_torch(dtype):
    out = {}
    for m in (engine, torch):
        bn = m.nn.BatchNorm3d(3).to(getattr(m, np.dtype(dtype).name))
        x = m.tensor(X5.astype(dtype), requires_grad=True)
        y = bn(x)
        g = _grads(y, (x, bn.weight, bn.bias), dtype)
        out[m] = (y.detach().numpy(), g, bn.running_var.numpy(), y.grad_fn.name())
    tol = 1e-12 if dtype == np.float64 else 1e-5
    (ey, eg, er, en), (ty, tg, tr, tn) = out[engine], out[torch]
    for u, v in zip([ey, *eg, er], [ty, *tg, tr], strict=True):
        np.testing.assert_allclose(u, v, rtol=tol, atol=tol)
    assert en == tn

    def make(m):
        bn = m.nn.BatchNorm3d(3).to(getattr(m, np.dtype(dtype).name))
        x = m.tensor(X5.astype(dtype), requires_grad=True)
        return forward_backward(m, lambda: bn(x))

    assert_steps_as_torch(make)


def test_module_parameters_and_reprs_as_torch():
    for name, args, kw in [
        ("Conv3d", (2, 4, 3), dict(padding="same")),
        ("Conv3d", (4, 6, (1, 2, 3)), dict(stride=2, padding=1, dilation=2, groups=2, bias=False)),
        ("ConvTranspose1d", (2, 3, 2), dict(stride=2, output_padding=1)),
        ("ConvTranspose3d", (4, 2, 3), dict(groups=2, dilation=2, bias=False)),
        ("MaxPool3d", (2,), dict(stride=1, padding=1, ceil_mode=True)),
        ("AvgPool3d", ((2, 3, 1),), dict(count_include_pad=False)),
        ("AdaptiveAvgPool3d", ((2, None, 3),), {}),
        ("AdaptiveMaxPool1d", (3,), dict(return_indices=True)),
        ("AdaptiveMaxPool2d", ((3, 5),), {}),
        ("AdaptiveMaxPool3d", (2,), {}),
        ("BatchNorm3d", (5,), dict(momentum=None)),
    ]:
        e, t = getattr(engine.nn, name)(*args, **kw), getattr(torch.nn, name)(*args, **kw)
        assert repr(e) == repr(t)
        for (en, ep), (tn, tp) in zip(e.named_parameters(), t.named_parameters(), strict=True):
            assert en == tn and tuple(ep.shape) == tuple(tp.shape)
        if name.startswith("Conv"):  # kaiming_uniform(a=sqrt(5)): |w| <= 1/sqrt(fan_in)
            bound = 1 / np.sqrt(np.prod(t.weight.shape[1:]))
            assert np.abs(e.weight.detach().numpy()).max() <= bound


def test_modules_forward_as_functional():
    x = engine.tensor(X5.astype(np.float32))
    assert engine.nn.MaxPool3d(2)(x).shape == (2, 3, 2, 3, 3)
    assert engine.nn.AdaptiveMaxPool3d(2, return_indices=True)(x)[1].dtype == engine.int64
    assert engine.nn.Conv3d(3, 4, 3)(x).shape == (2, 4, 3, 4, 5)
    assert engine.nn.ConvTranspose3d(3, 2, 2, stride=2)(x).shape == (2, 2, 10, 12, 14)
    assert engine.nn.ConvTranspose1d(3, 2, 3)(engine.tensor(X3.astype(np.float32))).shape == (
        2,
        2,
        11,
    )


def test_meta_shapes():
    x = engine.empty(2, 3, 5, 6, 7, device="meta", requires_grad=True)
    w = engine.empty(4, 3, 3, 3, 3, device="meta", requires_grad=True)
    F = engine.nn.functional
    for y, shape in [
        (F.conv3d(x, w, padding=1), (2, 4, 5, 6, 7)),
        (F.conv_transpose3d(x, engine.empty(3, 2, 2, 2, 2, device="meta"), stride=2), (2, 2, 10, 12, 14)),
        (F.max_pool3d(x, 2), (2, 3, 2, 3, 3)),
        (F.avg_pool3d(x, 2), (2, 3, 2, 3, 3)),
        (F.adaptive_avg_pool3d(x, 2), (2, 3, 2, 2, 2)),
        (F.adaptive_max_pool3d(x, 2), (2, 3, 2, 2, 2)),
    ]:  # fmt: skip
        assert y.shape == shape and y.dtype == engine.float32
        y.sum().backward()
        assert x.grad.shape == x.shape
        x.grad = None


@pytest.mark.parametrize(
    "call",
    [
        lambda m: m.nn.functional.max_pool3d(m.ones(1, 2, 4, 4, 4), 3, 1, 2),
        lambda m: m.nn.functional.max_pool3d(m.ones(1, 2, 4, 4, 4), (2, 2)),
        lambda m: m.nn.functional.max_pool3d(m.ones(1, 2, 4, 4, 4), 2, 0),
        lambda m: m.nn.functional.max_pool3d(m.ones(1, 2, 4, 4, 4), 5),
        lambda m: m.nn.functional.max_pool3d(m.ones(2, 3), 2),
        lambda m: m.nn.functional.max_pool3d(m.ones(1, 2, 4, 4, 4), 2, dilation=0),
        lambda m: m.nn.functional.avg_pool3d(m.ones(1, 2, 4, 4, 4), 5),
        lambda m: m.nn.functional.avg_pool3d(m.ones(1, 2, 4, 4, 4), 2, divisor_override=0),
        lambda m: m.nn.functional.adaptive_avg_pool3d(m.ones(2, 3), 2),
        lambda m: m.nn.functional.adaptive_avg_pool3d(m.ones(1, 2, 4, 4, 4), (2, 2)),
        lambda m: m.nn.functional.adaptive_max_pool3d(m.ones(1, 2, 4, 4, 4), (2, 2)),
        lambda m: m.nn.functional.adaptive_max_pool2d(m.ones(2, 3), 2),
        lambda m: m.nn.functional.adaptive_max_pool1d(m.ones(2, 3, 4, 5), 2),
        lambda m: m.nn.functional.conv3d(m.ones(2, 3), m.ones(4, 2, 3, 3, 3)),
        lambda m: m.nn.functional.conv3d(m.ones(1, 2, 4, 4, 4), m.ones(4, 2, 5, 5, 5)),
        lambda m: m.nn.functional.conv3d(m.ones(1, 2, 4, 4, 4), m.ones(4, 3, 3, 3, 3)),
        lambda m: m.nn.functional.conv3d(m.ones(1, 2, 4, 4, 4), m.ones(4, 2, 3, 3, 3), stride=0),
        lambda m: m.nn.functional.conv3d(m.ones(1, 2, 4, 4, 4), m.ones(4, 2, 3, 3, 3), padding=-1),
        lambda m: m.nn.functional.conv3d(
            m.ones(1, 2, 4, 4, 4), m.ones(4, 2, 3, 3, 3), padding="same", stride=2
        ),
        lambda m: m.nn.functional.conv3d(m.ones(1, 2, 4, 4, 4), m.ones(3, 1, 3, 3, 3), groups=2),
        lambda m: m.nn.functional.conv_transpose3d(m.ones(1, 2, 4, 4, 4), m.ones(3, 2, 3, 3, 3)),
        lambda m: m.nn.functional.conv_transpose1d(m.ones(2, 3, 4, 5), m.ones(3, 2, 3)),
        lambda m: m.nn.functional.conv_transpose1d(m.ones(2, 3, 4), m.ones(3, 2, 3), output_padding=1),
        lambda m: m.nn.functional.conv_transpose3d(
            m.ones(1, 3, 4, 4, 4), m.ones(3, 2, 3, 3, 3), output_padding=(0, 1, 0)
        ),
        lambda m: m.nn.BatchNorm3d(2)(m.ones(2, 2, 3, 3)),
    ],
)  # fmt: skip
def test_refusals_as_torch(call):
    assert_raises_as_torch(call)
