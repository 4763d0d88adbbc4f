"""engine/ops/pointwise.py against torch: values, gradients (derivatives.yaml), node names, the
in-place forms (what they keep decides whether they clone), integer inputs, the bool
predicates, and meta charging as cpu."""

from __future__ import annotations

import numpy as np
import pytest

import engine
from tests.engine.test_memory_vs_torch import assert_peak_as_torch

torch = pytest.importorskip("torch")

X = np.array([-2.5, -1.5, -0.7, -0.3, 0.0, 0.4, 0.5, 1.5, 2.5, 3.7])
# each op's inputs inside its domain
DOMAIN = {
    "log1p": np.abs(X) * 0.9,
    "log2": np.abs(X) + 0.1,
    "log10": np.abs(X) + 0.1,
    "asin": X / 4,
    "acos": X / 4,
    "tan": X / 3,
}
DIFFERENTIABLE = (
    "floor ceil round trunc frac log1p expm1 log2 log10 exp2 tan asin acos atan sinh cosh "
    "erfc".split()
)
PREDICATES = ["isnan", "isinf", "isfinite", "signbit"]


def _run(lib, name, inplace=False, dtype=np.float64):
    arr = DOMAIN.get(name, X).astype(dtype)
    x = lib.tensor(arr, requires_grad=True)
    w = lib.tensor(np.linspace(1.0, 2.0, arr.size).astype(dtype))
    if inplace:
        y = x * 1
        version = y._version
        out = getattr(y, name + "_")()
        assert out is y and y._version == version + 1
    else:
        y = getattr(x, name)()
    (y * w).sum().backward()
    return y.detach().numpy(), x.grad.numpy(), y.grad_fn.name()


@pytest.mark.parametrize("inplace", [False, True])
@pytest.mark.parametrize("name", DIFFERENTIABLE)
def test_values_gradients_and_node_as_torch(name, inplace):
    (ey, eg, en), (ty, tg, tn) = _run(engine, name, inplace), _run(torch, name, inplace)
    np.testing.assert_allclose(ey, ty, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(eg, tg, rtol=1e-12, atol=1e-15)
    assert en == tn


@pytest.mark.parametrize("name", DIFFERENTIABLE)
def test_float32_values_as_torch(name):
    ey = getattr(engine.tensor(DOMAIN.get(name, X).astype(np.float32)), name)()
    ty = getattr(torch.tensor(DOMAIN.get(name, X).astype(np.float32)), name)()
    assert ey.dtype == engine.float32
    np.testing.assert_allclose(ey.numpy(), ty.numpy(), rtol=2e-7, atol=1e-7)


@pytest.mark.parametrize("name", ["floor", "ceil", "round", "trunc", "log1p", "exp2", "erfc"])
def test_integer_inputs_as_torch(name):
    arr = np.array([-3, -1, 0, 2, 5])
    ey, ty = getattr(engine.tensor(arr), name)(), getattr(torch.tensor(arr), name)()
    assert str(ey.dtype).split(".")[-1] == str(ty.dtype).split(".")[-1]
    np.testing.assert_allclose(ey.numpy(), ty.numpy(), rtol=1e-6)


@pytest.mark.parametrize("name", PREDICATES)
def test_predicates_as_torch(name):
    arr = np.array([np.nan, -np.inf, np.inf, -0.0, 0.0, -2.0, 3.5])
    for data in (arr, arr.astype(np.float32), np.array([-2, 0, 3])):
        x = engine.tensor(data, requires_grad=data.dtype.kind == "f")
        y = getattr(x, name)()
        assert y.dtype == engine.bool and y.grad_fn is None and not y.requires_grad
        np.testing.assert_array_equal(y.numpy(), getattr(torch.tensor(data), name)().numpy())
        np.testing.assert_array_equal(getattr(engine, name)(x).numpy(), y.numpy())


def test_round_decimals_as_torch():
    arr = np.array([1.2345, -2.5551, 0.125, 1005.5])
    for d in (0, 1, 2, -1):
        np.testing.assert_allclose(
            engine.round(engine.tensor(arr), decimals=d).numpy(),
            torch.round(torch.tensor(arr), decimals=d).numpy(),
        )
    t = engine.tensor(arr)
    assert t.round_(decimals=1) is t
    np.testing.assert_allclose(t.numpy(), torch.tensor(arr).round_(decimals=1).numpy())


def test_inplace_clones_what_backward_keeps():
    # tan keeps its result: tan_ is free; log1p keeps its input: log1p_ clones it first
    def extra(name):
        x = engine.randn(256, 256, requires_grad=True)
        y = (x * 0.1).abs()
        engine.memory.reset_peak_memory_stats()
        before = engine.memory.memory_allocated()
        getattr(y, name + "_")()
        return engine.memory.max_memory_allocated() - before

    assert extra("tan") == 0
    assert extra("log1p") == 256 * 256 * 4


@pytest.mark.parametrize("name", DIFFERENTIABLE + PREDICATES)
def test_meta_charges_as_cpu(name):
    def run(device):
        engine.memory.reset_peak_memory_stats(device)
        x = engine.ones(64, 33, device=device, requires_grad=True) * 0.5
        base = engine.memory.memory_allocated(device)
        y = getattr(x, name)()
        if y.requires_grad:
            y.sum().backward()
        peak = engine.memory.max_memory_allocated(device) - base
        return tuple(y.shape), str(y.dtype), peak

    assert run("meta") == run("cpu")


@pytest.mark.parametrize("dtype,ulps", [(np.float64, 16), (np.float32, 1)])
def test_erfc_keeps_its_relative_precision_in_the_tail(dtype, ulps):
    # 1 - erf(x) rounds to 0 from x ~ 6 (float64) on, where erfc is still 2e-17 ... 1e-300
    x = np.concatenate([np.linspace(-6, 27, 4001), np.linspace(0.9, 2.1, 1201)]).astype(dtype)
    ours, theirs = engine.tensor(x).erfc().numpy(), torch.tensor(x).erfc().numpy()
    normal = theirs >= np.finfo(dtype).tiny
    assert normal.sum() > 3000
    off = np.abs(ours[normal] - theirs[normal]) / np.spacing(theirs[normal])
    assert off.max() <= ulps
    special = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0], dtype=dtype)
    np.testing.assert_array_equal(
        engine.tensor(special).erfc().numpy(), torch.tensor(special).erfc().numpy()
    )


A = np.array([5.5, -5.5, 3.0, -2.25, 7.0, 0.75])
B = np.array([2.0, 2.0, -1.5, 1.0, -3.0, 0.5])
BINARY = {
    "remainder": lambda m, a, b: m.remainder(a, b),
    "remainder number": lambda m, a, b: a.remainder(2.5),
    "remainder_": lambda m, a, b: (a * 1).remainder_(b),
    "fmod": lambda m, a, b: m.fmod(a, b),
    "fmod number": lambda m, a, b: a.fmod(-2.5),
    "atan2": lambda m, a, b: m.atan2(a, b),
    "atan2 broadcast": lambda m, a, b: m.atan2(a, b[:1]),
    "atan2_": lambda m, a, b: (a * 1).atan2_(b),
    "clamp_min": lambda m, a, b: a.clamp_min(0.5),
    "clamp_min tensor": lambda m, a, b: m.clamp_min(a, b),
    "clamp_min_": lambda m, a, b: (a * 1).clamp_min_(0.0),
    "clamp_max tensor": lambda m, a, b: a.clamp_max(b),
    "clamp tensor": lambda m, a, b: a.clamp(min=b),
}


@pytest.mark.parametrize("name", list(BINARY))
def test_binary_values_gradients_and_node_as_torch(name):
    out = []
    for lib in (engine, torch):
        a, b = lib.tensor(A, requires_grad=True), lib.tensor(B, requires_grad=True)
        y = BINARY[name](lib, a, b)
        (y * lib.tensor(np.linspace(1.0, 2.0, y.numel()))).sum().backward()
        gb = None if b.grad is None else b.grad.numpy()
        out.append((y.detach().numpy(), a.grad.numpy(), gb, y.grad_fn.name()))
    (ey, ea, eb, en), (ty, ta, tb, tn) = out
    np.testing.assert_allclose(ey, ty, rtol=1e-12)
    np.testing.assert_allclose(ea, ta, rtol=1e-12)
    assert (eb is None) == (tb is None)
    if eb is not None:
        np.testing.assert_allclose(eb, tb, rtol=1e-12)
    assert en == tn


def test_integer_modulo_and_logical_xor_as_torch():
    for f in (
        lambda m: m.remainder(m.tensor([5, -5, 7]), 3),
        lambda m: m.fmod(m.tensor([5, -5, 7]), m.tensor([3, 3, -2])),
        lambda m: m.logical_xor(m.tensor([True, False, True]), m.tensor([True, True, False])),
        lambda m: m.tensor([0.0, 2.0, 0.0]).logical_xor(m.tensor([1, 0, 0])),
    ):
        ours, theirs = f(engine), f(torch)
        assert str(ours.dtype).split(".")[-1] == str(theirs.dtype).split(".")[-1]
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())


def _binary_step(m):
    rng = np.random.default_rng(4)
    a, b = (m.tensor(rng.standard_normal((64, 256)).astype(np.float32)) for _ in range(2))
    for t in (a, b):
        t.requires_grad_(True)

    def region():
        a.grad = b.grad = None
        h = m.atan2(a, b) * m.remainder(a, b.abs() + 0.5) + m.fmod(b, 0.75)
        (h.clamp_min(-0.5) + a.clamp_max(b)).mean().backward()

    region()
    return region


@pytest.mark.torch
def test_binary_step_peaks_as_pytorch_profiler():
    assert_peak_as_torch(_binary_step)


def test_atan2_gradient_at_the_origin_is_zero_as_torch():
    out = []
    for lib in (engine, torch):
        a = lib.zeros(2, requires_grad=True)
        b = lib.tensor([0.0, 1.0], requires_grad=True)
        lib.atan2(a, b).sum().backward()
        out.append((a.grad.numpy(), b.grad.numpy()))
    for x, y in zip(*out, strict=True):
        np.testing.assert_array_equal(x, y)


def test_nan_to_num_values_gradient_and_in_place_as_torch():
    arr = np.array([[1.0, np.nan, np.inf], [-np.inf, 0.0, 2.0]])
    for dtype in (np.float64, np.float32):
        out = []
        for lib in (engine, torch):
            x = lib.tensor(arr.astype(dtype), requires_grad=True)
            y = x.nan_to_num()
            z = lib.nan_to_num(x, nan=1.0, posinf=5.0, neginf=-7.0)
            (y * 2 + z).sum().backward()
            w = (x * 1).nan_to_num_(nan=-1.0)
            out.append((y.detach().numpy(), z.detach().numpy(), x.grad.numpy(), w.detach().numpy()))
            out.append(y.grad_fn.name())
        for a, b in zip(out[0], out[2], strict=True):
            np.testing.assert_array_equal(a, b)
        assert out[1] == out[3]


@pytest.mark.parametrize(
    "call",
    [
        lambda m: m.isclose(
            m.tensor([1.0, np.nan, 1e-9, 2.0]), m.tensor([1 + 1e-6, np.nan, 0.0, 2.1])
        ),
        lambda m: m.isclose(
            m.tensor([1.0, np.nan, np.inf]), m.tensor([1.0, np.nan, np.inf]), equal_nan=True
        ),
        lambda m: m.tensor([1, 2, 3]).isclose(m.tensor([1, 2, 4]), rtol=0.3),
        lambda m: m.isclose(m.tensor([1.0, 2.0]), m.tensor([1.0, 2.0001]), rtol=0, atol=0),
        lambda m: m.count_nonzero(m.tensor([[0, 1], [2, 0], [3, 3]])),
        lambda m: m.count_nonzero(m.tensor([[0.0, 1.5], [2.0, 0.0]]), dim=0),
        lambda m: m.tensor([[0, 1], [2, 0], [3, 3]]).count_nonzero(dim=(0, 1)),
    ],
)
def test_isclose_and_count_nonzero_as_torch(call):
    ours, theirs = call(engine), call(torch)
    assert str(ours.dtype).split(".")[-1] == str(theirs.dtype).split(".")[-1]
    np.testing.assert_array_equal(ours.numpy(), theirs.numpy())


def test_allclose_gives_a_python_bool_as_torch():
    for a, b in (([1.0, 2.0], [1.0, 2.0 + 1e-7]), ([1.0, 2.0], [1.0, 2.1])):
        ours = engine.allclose(engine.tensor(a), engine.tensor(b))
        assert ours is torch.allclose(torch.tensor(a), torch.tensor(b))


_XLOGY_X = np.abs(np.random.default_rng(0).standard_normal((16, 9))) + 0.1
_XLOGY_X[0, :3] = 0.0  # self's zeros: where the gradient is masked
_XLOGY_Y = np.random.default_rng(1).standard_normal((16, 9))
_XLOGY_Y[0, :2] = (-1.0, 0.0)


@pytest.mark.parametrize(
    "other",
    [2.0, -1.0, 0.0, float("nan"), "tensor", "broadcast", "same-leaf"],
)
def test_xlogy_backward_blocks_as_torch(other):
    """XlogyBackward0 computes other's gradient before self's, keeps its masks to the end and
    frees them last made first; XlogyBackward2 (a number other) masks self's zeros only when
    other is not > 0. Every block (the 1-byte masks included) as torch's profiler shows it."""
    from tests.engine.test_memory_vs_torch import (
        engine_sequence,
        forward_backward,
        torch_sequence,
    )

    def make(m):
        x = m.tensor(_XLOGY_X, requires_grad=True)
        y = m.tensor(_XLOGY_Y[:, :1] if other == "broadcast" else _XLOGY_Y, requires_grad=True)
        if other in ("tensor", "broadcast"):
            return forward_backward(m, lambda: m.xlogy(x, y)), (x, y)
        if other == "same-leaf":
            return forward_backward(m, lambda: m.xlogy(x, x * 2)), (x,)
        return forward_backward(m, lambda: m.xlogy(x, other)), (x,)

    (tf, tb), tleaves = make(torch)
    (ef, eb), eleaves = make(engine)
    assert engine_sequence(ef, min_bytes=8) == torch_sequence(tf, min_bytes=8)
    assert engine_sequence(eb, min_bytes=8) == torch_sequence(tb, min_bytes=8)
    for t, e in zip(tleaves, eleaves, strict=True):
        np.testing.assert_allclose(e.grad.numpy(), t.grad.numpy(), rtol=1e-15, atol=0)
