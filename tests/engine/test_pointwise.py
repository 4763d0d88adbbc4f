"""engine/ops/pointwise.py against torch: values, gradients (derivatives.yaml), node names, the
in-place forms (what they keep decides whether they clone), integer inputs, the bool
predicates, and meta charging as cpu."""

from __future__ import annotations

import numpy as np
import pytest

import engine

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
