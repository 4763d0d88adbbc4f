"""The piecewise activations' gradients are torch's bits: its backward kernels select (the
gradient, or a product with it, inside; a literal +0 outside), which a product with a 0/1
derivative does not give for a NaN or infinite gradient outside (NaN, not 0), a negative one
(-0, not +0), or a NaN input. ReLU's and Threshold's select runs engine._native's loop where it
is built (kernel_form: both forms, the same bits).

Inputs are 64 elements (whole vectors for torch's cpu kernels: their scalar forms, which torch
runs on a loop's last elements, treat a NaN input of hardtanh and hardswish otherwise)."""

from __future__ import annotations

import numpy as np
import pytest

import engine
from tests.conftest import requires_cuda

_NAN, _INF = float("nan"), float("inf")
# every boundary of the activations below, both zeros, NaN and infinities
VALUES = [_NAN, 0.0, -0.0, -1.0, 1.0, 2.0, 0.5, -3.0, 3.0, -4.0, 4.0, 6.0, 7.0, _INF, -_INF, 1.5]
GRADS = [
    3.0,
    -1.0,
    -1.0,
    _NAN,
    5.0,
    _INF,
    -2.0,
    _NAN,
    -_INF,
    -1.0,
    _NAN,
    2.0,
    _INF,
    -1.0,
    -0.0,
    0.5,
]

CASES = [
    ("relu", ()),
    ("threshold", (0.5, 0.0)),
    ("threshold", (0.0, 2.0)),
    ("hardtanh", ()),
    ("hardtanh", (-3.0, 3.0)),
    ("relu6", ()),
    ("hardsigmoid", ()),
    ("hardswish", ()),
    ("leaky_relu", ()),
    ("leaky_relu", (0.3,)),
    ("leaky_relu", (-0.7,)),
]


def _pairs(dtype, seed):
    rng = np.random.default_rng(seed)
    x = np.array(VALUES * 4, dtype)
    g = np.array(GRADS * 4, dtype)[rng.permutation(64)]  # every gradient meets every value
    return x, g


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name, args", CASES)
def test_gradient_bits_are_torchs(name, args, dtype, torch, kernel_form):
    for seed in range(3):
        x, g = _pairs(dtype, seed)
        tx = torch.from_numpy(x.copy()).requires_grad_()
        getattr(torch.nn.functional, name)(tx, *args).backward(torch.from_numpy(g))
        ex = engine.tensor(x, requires_grad=True)
        getattr(engine.nn.functional, name)(ex, *args).backward(engine.tensor(g))
        assert ex.grad.numpy().tobytes() == tx.grad.numpy().tobytes(), (name, args, seed)


@pytest.mark.cuda
@requires_cuda
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name, args", CASES)
def test_gradient_bits_on_cuda_are_torch_cudas(name, args, dtype, torch):
    # CuPy's form (kernels.zero_where's copy-then-zero) against torch.cuda's kernels
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA here")
    for seed in range(3):
        x, g = _pairs(dtype, seed)
        tx = torch.from_numpy(x.copy()).cuda().requires_grad_()
        getattr(torch.nn.functional, name)(tx, *args).backward(torch.from_numpy(g).cuda())
        ex = engine.tensor(x, device="cuda", requires_grad=True)
        getattr(engine.nn.functional, name)(ex, *args).backward(engine.tensor(g, device="cuda"))
        ours, theirs = ex.grad.cpu().numpy(), tx.grad.cpu().numpy()
        assert ours.tobytes() == theirs.tobytes(), (name, args, seed, ours, theirs, x, g)


@pytest.mark.parametrize("name, args", [("relu", ()), ("threshold", (0.5, 0.0)), ("hardtanh", ())])
def test_in_place_forms_too(name, args, torch, kernel_form):
    x, g = _pairs("float32", 7)
    tx = torch.from_numpy(x.copy()).requires_grad_()
    getattr(torch.nn.functional, name)(tx * 1, *args, inplace=True).backward(torch.from_numpy(g))
    ex = engine.tensor(x, requires_grad=True)
    getattr(engine.nn.functional, name)(ex * 1, *args, inplace=True).backward(engine.tensor(g))
    assert ex.grad.numpy().tobytes() == tx.grad.numpy().tobytes()


def test_relu_select_by_hand(kernel_form):
    # the result NaN: its gradient passes; the result 0: a literal +0 whatever the gradient
    x = engine.tensor(np.array([_NAN, 0.0, -2.0, 3.0], np.float32), requires_grad=True)
    engine.relu(x).backward(engine.tensor(np.array([4.0, _NAN, -_INF, -5.0], np.float32)))
    grad = x.grad.numpy()
    assert grad.tolist() == [4.0, 0.0, 0.0, -5.0]
    assert not np.signbit(grad[:3]).any()


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_large_gradients_split_over_threads_are_torchs(dtype, torch, kernel_form):
    # 600K elements: the pool's chunks (engine) and torch's own parallel chunks alike
    rng = np.random.default_rng(3)
    x = rng.standard_normal(600_000).astype(dtype)
    x[rng.integers(0, x.size, 5000)] = 0.0
    x[rng.integers(0, x.size, 500)] = np.nan
    g = rng.standard_normal(x.size).astype(dtype)
    g[rng.integers(0, x.size, 5000)] = np.inf
    for name, args in [("relu", ()), ("threshold", (0.25, -1.0))]:
        tx = torch.from_numpy(x.copy()).requires_grad_()
        getattr(torch.nn.functional, name)(tx, *args).backward(torch.from_numpy(g))
        ex = engine.tensor(x, requires_grad=True)
        getattr(engine.nn.functional, name)(ex, *args).backward(engine.tensor(g))
        assert ex.grad.numpy().tobytes() == tx.grad.numpy().tobytes(), name


def test_native_loop_refuses_what_it_cannot_read():
    from engine import kernels

    if kernels.native is None:
        pytest.skip("engine._native is off (not built, or MEMPROF_NATIVE=0)")
    a = np.zeros(4, np.float32)
    with pytest.raises(TypeError):
        kernels.native.threshold_backward(a, a.astype(np.float64), a, 0.0)
    with pytest.raises(ValueError):
        kernels.native.threshold_backward(a, np.zeros(5, np.float32), a, 0.0)
    with pytest.raises((ValueError, BufferError)):
        kernels.native.threshold_backward(a, a, np.zeros((4, 2), np.float32)[:, 0], 0.0)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("threads", [1, 2])
def test_relu_forward_select_is_numpys_maximum(kernel_form, dtype, threads):
    """ReLU's forward from 4K elements is engine._native's strict select x < 0 ? 0 : x where
    built (kernels.relu_into), numpy's maximum(0, x) otherwise: the same bits, -0 and NaN
    payloads included, out of place and in place, on any thread count."""
    from engine import kernels

    payloads = np.array([0x7FC00001, 0xFFC00005, 0x7F800001, 0xFF812345], np.uint32)
    if dtype is np.float32:
        special = payloads.view(np.float32)
    else:
        special = np.array([np.nan, -np.nan], dtype)
    parts = [np.array(VALUES, dtype), special, np.array([1e-45, -1e-45], dtype)]
    x = np.tile(np.concatenate(parts), 512)
    with np.errstate(all="ignore"):
        want = np.maximum(dtype(0), x)
    before = kernels.get_num_threads()
    try:
        engine.set_num_threads(threads)
        got = engine.tensor(x).relu().numpy()
        t = engine.tensor(x.copy())
        t.relu_()
        inplace = t.numpy()
    finally:
        engine.set_num_threads(before)
    assert got.tobytes() == want.tobytes()
    assert inplace.tobytes() == want.tobytes()
    out = np.empty_like(x)
    assert kernels.relu_into(x, out) == (kernel_form == "native")
