"""Float64 convolutions on cpu (torch's slow kernels: slow_conv2d, slow_conv_dilated2d,
slow_conv_transpose2d, and at::_convolution's per-group loop around them), the transposed
batched matmul that does not fold, and F.linear on a vector, against torch 2.13: values,
gradients, nodes, and every block torch's CPU profiler shows forward and backward, in order."""

from __future__ import annotations

import numpy as np
import pytest

import engine
from tests.conftest import node_chain
from tests.engine.test_memory_vs_torch import (
    assert_steps_as_torch,
    engine_sequence,
    forward_backward,
    torch_sequence,
)

torch = pytest.importorskip("torch")

CONV = {  # name -> (function, input shape, weight shape, bias, kwargs)
    "c2": ("conv2d", (2, 3, 7, 8), (4, 3, 3, 3), True, {}),
    "c2_pad_stride": ("conv2d", (2, 3, 7, 8), (16, 3, 3, 2), True, dict(stride=(2, 1), padding=1)),
    "c2_dilated": ("conv2d", (2, 3, 7, 8), (16, 3, 3, 3), True, dict(dilation=2, padding=1)),
    "c2_groups": ("conv2d", (2, 4, 7, 8), (6, 2, 3, 3), True, dict(groups=2, padding=1)),
    "c2_groups_dilated": ("conv2d", (2, 6, 7, 8), (9, 2, 3, 3), True, dict(groups=3, dilation=2)),
    "c2_groups_batch1": ("conv2d", (1, 4, 7, 8), (6, 2, 3, 3), True, dict(groups=2)),
    "c2_1x1": ("conv2d", (2, 3, 7, 8), (4, 3, 1, 1), True, {}),
    "c2_1x1_s2": ("conv2d", (2, 3, 7, 8), (4, 3, 1, 1), False, dict(stride=2)),
    "c2_unbatched": ("conv2d", (3, 7, 8), (4, 3, 3, 3), True, dict(padding=2)),
    "c1": ("conv1d", (2, 3, 9), (4, 3, 3), True, dict(padding=1)),
    "c1_dilated": ("conv1d", (2, 3, 9), (4, 3, 3), True, dict(dilation=2)),
    "c1_groups": ("conv1d", (2, 4, 9), (8, 2, 3), True, dict(groups=2, stride=2)),
    "t2_s2": ("conv_transpose2d", (2, 3, 5, 6), (3, 4, 3, 3), True, dict(stride=2)),
    "t2_all": ("conv_transpose2d", (2, 3, 5, 6), (3, 4, 3, 2), True,
               dict(stride=2, padding=1, output_padding=1, dilation=2)),
    "t2_1x1": ("conv_transpose2d", (2, 3, 5, 6), (3, 4, 1, 1), False, {}),
}  # fmt: skip


def _conv(m, name, dtype, needs=(True, True, True)):
    fn, xs, ws, bias, kw = CONV[name]
    rng = np.random.default_rng(3)
    x = m.tensor(rng.standard_normal(xs).astype(dtype), requires_grad=needs[0])
    w = m.tensor(rng.standard_normal(ws).astype(dtype), requires_grad=needs[1])
    outs = ws[1] * kw.get("groups", 1) if fn.startswith("conv_t") else ws[0]
    b = m.tensor(rng.standard_normal(outs).astype(dtype), requires_grad=needs[2]) if bias else None
    return (lambda: getattr(m.nn.functional, fn)(x, w, b, **kw)), (x, w, b)


@pytest.mark.parametrize("name", sorted(CONV))
def test_float64_conv_blocks_as_torch(name):
    assert_steps_as_torch(lambda m: forward_backward(m, _conv(m, name, np.float64)[0]))


@pytest.mark.parametrize("needs", [(False, True, True), (True, False, False)])
@pytest.mark.parametrize("name", ["c2", "c2_dilated", "c2_groups", "t2_s2"])
def test_float64_conv_blocks_with_some_gradients_as_torch(name, needs):
    assert_steps_as_torch(lambda m: forward_backward(m, _conv(m, name, np.float64, needs)[0]))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("name", sorted(CONV))
def test_conv_values_gradients_and_node_as_torch(name, dtype):
    out = {}
    for m in (engine, torch):
        run, leaves = _conv(m, name, dtype)
        y = run()
        gy = np.random.default_rng(5).standard_normal(tuple(y.shape)).astype(dtype)
        y.backward(m.tensor(gy))
        grads = [t.grad.numpy() for t in leaves if t is not None]
        out[m] = (y.detach().numpy(), grads, node_chain(y.grad_fn))
    tol = 1e-12 if dtype == np.float64 else 2e-4
    (ey, eg, en), (ty, tg, tn) = out[engine], out[torch]
    np.testing.assert_allclose(ey, ty, rtol=tol, atol=tol)
    for a, b in zip(eg, tg, strict=True):
        np.testing.assert_allclose(a, b, rtol=tol, atol=tol)
    if CONV[name][0] != "conv1d":  # (the engine's conv1d is views around conv2d: their nodes)
        assert en == tn


def test_float64_conv2d_central_differences():
    rng = np.random.default_rng(11)
    x = engine.tensor(rng.standard_normal((1, 4, 5, 5)), requires_grad=True)
    w = engine.tensor(rng.standard_normal((2, 2, 3, 3)), requires_grad=True)

    def f():
        return (engine.nn.functional.conv2d(x, w, None, 1, 1, 2, 2) ** 2).sum()

    f().backward()
    eps = 1e-6
    for t in (x, w):
        flat, grad = t.detach().numpy().reshape(-1), t.grad.numpy().reshape(-1)
        for i in range(0, flat.size, 7):
            keep = flat[i]
            flat[i] = keep + eps
            up = float(f().item())
            flat[i] = keep - eps
            down = float(f().item())
            flat[i] = keep
            assert abs((up - down) / (2 * eps) - grad[i]) < 1e-6


def test_float32_conv2d_columns_stay_scratch():
    """oneDNN's float32 path is not modelled: the columns are uncharged scratch, as before."""
    run, _ = _conv(engine, "c2", np.float32)
    forward, backward = forward_backward(engine, run)
    assert engine_sequence(forward) == ["+960#0"]
    assert engine_sequence(backward) == ["+960#0", "+1344#1", "+432#2", "-960#0"]


def test_float64_conv_on_meta_shapes():
    x = engine.empty((2, 4, 7, 8), dtype=engine.float64, device="meta", requires_grad=True)
    w = engine.empty((6, 2, 3, 3), dtype=engine.float64, device="meta", requires_grad=True)
    y = engine.nn.functional.conv2d(x, w, groups=2, padding=1)
    assert tuple(y.shape) == (2, 6, 7, 8) and y.dtype == engine.float64
    y.sum().backward()
    assert tuple(x.grad.shape) == (2, 4, 7, 8) and tuple(w.grad.shape) == (6, 2, 3, 3)


# --- a batch's transpose times a matrix (no fold: bmm over an expanded matrix) ---------------
@pytest.mark.parametrize("w_grad", [False, True])
def test_transposed_batch_times_matrix_blocks_as_torch(w_grad):
    def make(m):
        rng = np.random.default_rng(0)
        x = m.tensor(rng.standard_normal((4, 64, 8)).astype(np.float32), requires_grad=True)
        w = m.tensor(rng.standard_normal((64, 128)).astype(np.float32), requires_grad=True)
        return forward_backward(m, lambda: x.transpose(-1, -2) @ (w if w_grad else w.detach()))

    assert_steps_as_torch(make)


# --- F.linear on a vector --------------------------------------------------------------------
def _linear(m, bias, n_in=64, n_out=128):
    rng = np.random.default_rng(0)
    x = m.tensor(rng.standard_normal((n_in,)).astype(np.float32), requires_grad=True)
    w = m.tensor(rng.standard_normal((n_out, n_in)).astype(np.float32), requires_grad=True)
    b = m.tensor(rng.standard_normal((n_out,)).astype(np.float32), requires_grad=True)
    return (lambda: m.nn.functional.linear(x, w, b if bias else None)), (x, w, b)


@pytest.mark.parametrize("bias", [False, True])
def test_linear_on_a_vector_blocks_as_torch(bias):
    # without a bias: MmBackward0 makes the weight's gradient (32 KiB) before the input's
    def make(m):
        return forward_backward(m, _linear(m, bias)[0])

    assert_steps_as_torch(make)
    forward, backward = make(torch)
    forward()
    assert torch_sequence(backward, 0)[1:3] == (
        ["+256#1", "+32768#2"] if bias else ["+32768#1", "+256#2"]
    )


@pytest.mark.parametrize("bias", [False, True])
def test_linear_on_a_vector_values_gradients_and_nodes_as_torch(bias):
    out = {}
    for m in (engine, torch):
        run, (x, w, b) = _linear(m, bias)
        y = run()
        y.backward(m.ones_like(y))
        grads = [t.grad.numpy() for t in ((x, w, b) if bias else (x, w))]
        fn = y.grad_fn
        out[m] = (y.detach().numpy(), grads, fn.name(), fn.next_functions[0][0].name())
    (ey, eg, *en), (ty, tg, *tn) = out[engine], out[torch]
    np.testing.assert_allclose(ey, ty, rtol=1e-5, atol=1e-5)
    for a, b in zip(eg, tg, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
    assert en == tn


def test_linear_on_a_vector_without_bias_node_chain_as_torch():
    chains = {}
    for m in (engine, torch):
        y = _linear(m, False)[0]()
        chains[m] = node_chain(y.grad_fn)
    assert (
        chains[engine] == chains[torch] == ["SqueezeBackward4", "MmBackward0", "UnsqueezeBackward0"]
    )
