"""Elementwise ops, activations and their gradients on IEEE special values against torch, on
each device: the same NaNs, the same signs of zero, the same infinities, and finite values within
a tolerance (libm's and SLEEF's last bits differ; a float64 result must be float64-accurate).

Inputs: both zeros, NaN, both infinities, the activations' boundaries (0, ±3, 6, ±0.5, 1) and
tails (±20, ±1e-8); gradients with NaN, infinities and both zeros. NaN payloads are not
compared (torch's own cpu and cuda kernels disagree on them)."""

from __future__ import annotations

import numpy as np
import pytest

import engine
from tests.conftest import DATA_DEVICES

_NAN, _INF = float("nan"), float("inf")
VALUES = [_NAN, 0.0, -0.0, -1.0, 1.0, 2.0, 0.5, -3.0, 3.0, -4.0, 4.0, 6.0, 7.0, _INF, -_INF, 1.5]
VALUES += [-0.5, 20.0, -20.0, 1e-8, -1e-8, 0.25, -2.5, 9.0]
GRADS = [3.0, -1.0, -1.0, _NAN, 5.0, _INF, -2.0, _NAN, -_INF, -1.0, _NAN, 2.0, _INF, -1.0, -0.0]
GRADS += [0.5, 0.75, -0.25, 1.0, 2.0, -3.0, 4.0, 0.0, -0.0]
TOL = {"float32": 2e-6, "float64": 1e-12}

# (name, "F" for torch.nn.functional / "T" for the torch namespace, function, keywords)
UNARY = [
    *[
        (n, "F", n, {})
        for n in (
            "relu relu6 hardtanh leaky_relu elu celu selu gelu silu mish softplus hardswish "
            "hardsigmoid sigmoid tanh logsigmoid softsign tanhshrink hardshrink softshrink"
        ).split()
    ],
    ("gelu_tanh", "F", "gelu", {"approximate": "tanh"}),
    ("threshold", "F", "threshold", {"threshold": 0.5, "value": 2.0}),
    ("elu_alpha", "F", "elu", {"alpha": 0.5}),
    *[
        (n, "T", n, {})
        for n in (
            "abs neg exp log sqrt rsqrt sin cos reciprocal square sign expm1 log1p erf atan "
            "sinh cosh asinh trunc floor frac"
        ).split()
    ],
    ("clamp", "T", "clamp", {"min": -1.0, "max": 2.0}),
    ("clamp_min0", "T", "clamp", {"min": 0.0}),
    ("clamp_max0", "T", "clamp", {"max": 0.0}),
    ("pow1", "T", "pow", {"exponent": 1.0}),
    ("pow2", "T", "pow", {"exponent": 2.0}),
    ("pow3", "T", "pow", {"exponent": 3.0}),
    ("pow_half", "T", "pow", {"exponent": 0.5}),
]
BINARY = (
    "maximum minimum fmax fmin atan2 pow div remainder fmod copysign hypot mul add sub div_floor"
).split()


def _binary_fn(mod, name):
    if name == "div_floor":  # floor_divide has no derivative in torch; div(floor) has zeros
        return lambda a, b: mod.div(a, b, rounding_mode="floor")
    return getattr(mod, name)


def assert_same_values(ours, theirs, tol, scale, what):
    """NaN where torch has NaN, the same infinities and signs of zero, finite values within
    tol (relative) + tol * scale (absolute)."""
    a, b = np.asarray(ours).reshape(-1), np.asarray(theirs).reshape(-1)
    assert a.dtype == b.dtype and a.shape == b.shape, what
    nan = np.isnan(b)
    bad = np.isnan(a) != nan
    same = ~nan & ~np.isnan(a)
    bad |= same & (np.isinf(a) != np.isinf(b))
    bad |= same & (a == 0) & (b == 0) & (np.signbit(a) != np.signbit(b))
    fin = same & np.isfinite(a) & np.isfinite(b)
    bad[fin] |= np.abs(a[fin] - b[fin]) > tol * (np.abs(b[fin]) + scale[fin])
    bad |= same & np.isinf(b) & (a != b)
    i = np.nonzero(bad)[0]
    assert not i.size, (
        f"{what}: {i.size} differ, first at {i[0]}: ours {a[i[0]]!r}, torch {b[i[0]]!r}"
    )


def _inputs(dtype, seed=0):
    rng = np.random.default_rng(seed)
    n = len(VALUES) * 8
    x = np.array(VALUES * 8, dtype)
    g = np.array(GRADS * 8, dtype)[rng.permutation(n)]  # every gradient meets every value
    return x, g


def _scale(x, g):
    """The absolute part of the tolerance: a gradient's magnitude (outputs scale with it)."""
    return np.maximum(1.0, np.nan_to_num(np.abs(g), posinf=0.0) * np.maximum(1.0, np.abs(x)))


def _both(torch, device, fn_t, fn_e, arrays, g):
    ts = [torch.from_numpy(a.copy()).to(device).requires_grad_() for a in arrays]
    yt = fn_t(*ts)
    yt.backward(torch.from_numpy(g).to(device))
    es = [engine.tensor(a, device=device, requires_grad=True) for a in arrays]
    ye = fn_e(*es)
    ye.backward(engine.tensor(g, device=device))
    return (ye, yt), [(e.grad, t.grad) for e, t in zip(es, ts, strict=True)]


def _np(t):
    return None if t is None else t.detach().cpu().numpy()


@pytest.mark.parametrize("device", DATA_DEVICES)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("case", UNARY, ids=[c[0] for c in UNARY])
def test_unary_special_values_are_torchs(case, dtype, device, torch):
    name, where, fn, kw = case
    x, g = _inputs(dtype)
    mod_t = torch.nn.functional if where == "F" else torch
    mod_e = engine.nn.functional if where == "F" else engine
    (ye, yt), [(ge, gt)] = _both(
        torch,
        device,
        lambda a: getattr(mod_t, fn)(a, **kw),
        lambda a: getattr(mod_e, fn)(a, **kw),
        [x],
        g,
    )
    scale = np.maximum(1.0, np.abs(x))
    assert_same_values(_np(ye), _np(yt), TOL[dtype], scale, f"{name} forward")
    assert_same_values(_np(ge), _np(gt), TOL[dtype], _scale(x, g), f"{name} gradient")


@pytest.mark.parametrize("device", DATA_DEVICES)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", BINARY)
def test_binary_special_values_are_torchs(name, dtype, device, torch):
    x, g = _inputs(dtype, seed=1)
    y = np.array(VALUES * 8, dtype)[np.random.default_rng(2).permutation(x.size)]
    fns = _binary_fn(torch, name), _binary_fn(engine, name)
    (ye, yt), grads = _both(torch, device, *fns, [x, y], g)
    scale = np.maximum(1.0, np.maximum(np.abs(x), np.abs(y)))
    scale[~np.isfinite(scale)] = 1.0
    assert_same_values(_np(ye), _np(yt), TOL[dtype], scale, f"{name} forward")
    for which, (ge, gt) in zip("xy", grads, strict=True):
        assert (ge is None) == (gt is None), which
        if gt is not None:
            gs = _scale(np.maximum(np.abs(x), np.abs(y)), g)
            assert_same_values(_np(ge), _np(gt), TOL[dtype], gs, f"{name} gradient of {which}")


@pytest.mark.parametrize("device", DATA_DEVICES)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_on_cuda_is_torch_cudas_bits(approximate, dtype, device, torch):
    # on cuda the engine runs torch's own kernel text (engine/backends/cuda_fast.py): the same
    # bits; on cpu float64 is float64-accurate (within 1e-12 of torch's, relative)
    rng = np.random.default_rng(5)
    x = np.concatenate([_inputs(dtype)[0], rng.standard_normal(4000).astype(dtype) * 4])
    g = rng.standard_normal(x.size).astype(dtype)
    fn_t = lambda a: torch.nn.functional.gelu(a, approximate=approximate)  # noqa: E731
    fn_e = lambda a: engine.nn.functional.gelu(a, approximate=approximate)  # noqa: E731
    (ye, yt), [(ge, gt)] = _both(torch, device, fn_t, fn_e, [x], g)
    if device == "cuda":
        for ours, theirs in ((_np(ye), _np(yt)), (_np(ge), _np(gt))):
            # CuPy builds its kernels flushing float32 subnormals (-ftz=true): 0 where torch's
            # result is subnormal; every other result the same bits
            sub = (theirs != 0) & (np.abs(theirs) < np.finfo(theirs.dtype).tiny)
            if dtype == "float64":  # -ftz flushes single precision only
                sub[:] = False
            assert (ours[sub] == 0).all()
            assert ours[~sub].tobytes() == theirs[~sub].tobytes()
    else:
        tol = TOL[dtype]
        assert_same_values(_np(ye), _np(yt), tol, np.maximum(1.0, np.abs(x)), "forward")
        assert_same_values(_np(ge), _np(gt), tol, _scale(x, g), "gradient")


# rows of special values for the reductions and row ops (cpu: torch.cuda's scans and reductions
# take other orders)
ROWS = [
    [1.0, 2.0, 3.0, 4.0],
    [_NAN, 1.0, 2.0, 3.0],
    [_INF, 1.0, 2.0, 3.0],
    [-_INF, 1.0, 2.0, 3.0],
    [_INF, -_INF, 1.0, 2.0],
    [-_INF, -_INF, -_INF, -_INF],
    [_INF, _INF, 1.0, 0.0],
    [-0.0, -0.0, -0.0, -0.0],
    [_NAN, _NAN, 1.0, _INF],
    [1e38, 1e38, 1e38, 1e38],  # float32's sums overflow; torch's kernels accumulate in double
    [-1.0, -2.0, -0.0, 5.0],
]
ROW_CASES = {
    "sum": lambda m, x: x.sum(dim=1),
    "mean": lambda m, x: x.mean(dim=1),
    "prod": lambda m, x: x.prod(dim=1),
    "logsumexp": lambda m, x: x.logsumexp(dim=1),
    "softmax": lambda m, x: m.nn.functional.softmax(x, dim=1),
    "log_softmax": lambda m, x: m.nn.functional.log_softmax(x, dim=1),
    "softmin": lambda m, x: m.nn.functional.softmin(x, dim=1),
    "cumsum": lambda m, x: x.cumsum(dim=1),
    "cumprod": lambda m, x: x.cumprod(dim=1),
    "norm2": lambda m, x: x.norm(dim=1),
    "norm1": lambda m, x: x.norm(p=1, dim=1),
    "var": lambda m, x: x.var(dim=1),
    "std": lambda m, x: x.std(dim=1),
    "nansum": lambda m, x: x.nansum(dim=1),
    "nanmean": lambda m, x: x.nanmean(dim=1),
    "nan_to_num": lambda m, x: x.nan_to_num(),
    "pow_0": lambda m, x: x**0,
    "sgn": lambda m, x: m.sgn(x),
    "mse": lambda m, x: m.nn.functional.mse_loss(x, m.zeros_like(x)),
    "smooth_l1": lambda m, x: m.nn.functional.smooth_l1_loss(x, m.zeros_like(x)),
    "cross_entropy": lambda m, x: m.nn.functional.cross_entropy(x, m.arange(11) % 4),
    "bce_logits": lambda m, x: m.nn.functional.binary_cross_entropy_with_logits(
        x, m.ones_like(x) * 0.5
    ),
    "kl_div": lambda m, x: m.nn.functional.kl_div(
        m.nn.functional.log_softmax(x, 1), m.full_like(x, 0.25), reduction="batchmean"
    ),
    "normalize": lambda m, x: m.nn.functional.normalize(x, dim=1),
}


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", sorted(ROW_CASES))
def test_row_ops_on_special_rows_are_torchs(name, dtype, torch):
    fn = ROW_CASES[name]
    x = np.array(ROWS, dtype)
    tx = torch.from_numpy(x.copy()).requires_grad_()
    ex = engine.tensor(x, requires_grad=True)
    yt, ye = fn(torch, tx), fn(engine, ex)
    scale = np.ones(np.shape(_np(yt))).reshape(-1)
    assert_same_values(_np(ye), _np(yt), TOL[dtype], scale, f"{name} forward")
    g = np.random.default_rng(0).standard_normal(tuple(yt.shape)).astype(dtype)
    yt.backward(torch.from_numpy(g))
    ye.backward(engine.tensor(g))
    if name == "sgn":  # torch's gradient is a zero tensor without memory; the engine's None
        assert ex.grad is None and not tx.grad.any()
        return
    assert_same_values(_np(ex.grad), _np(tx.grad), TOL[dtype], np.ones(x.size), f"{name} grad")


def test_log_softmax_keeps_large_logits_precision(torch):
    # (x - max) - log(sum): x - (max + log sum) lost log sum's digits beside a max of 1e4
    # (4.8e-4 off in float32, now within 4.8e-7 of torch)
    x = (np.random.default_rng(0).standard_normal((8, 1000)) * 3 + 1e4).astype(np.float32)
    ours = engine.nn.functional.log_softmax(engine.tensor(x), 1).numpy()
    theirs = torch.nn.functional.log_softmax(torch.from_numpy(x), 1).numpy()
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-6)


def test_float32_scans_and_variance_accumulate_in_double(torch):
    # torch's cpu kernels run a double accumulator: cumsum's and cumprod's every step rounded
    # from it (the same bits), var's Welford in double (four 1e38 have variance 0, not inf)
    y = np.random.default_rng(1).standard_normal((3, 100_000)).astype(np.float32)
    for op in ("cumsum", "cumprod"):
        z = y if op == "cumsum" else (1 + y / 1e4).astype(np.float32)
        ours = getattr(engine.tensor(z), op)(1).numpy()
        theirs = getattr(torch.from_numpy(z), op)(1).numpy()
        assert ours.tobytes() == theirs.tobytes(), op
    big = np.full((2, 4), 1e38, np.float32)
    assert engine.tensor(big).var(1).tolist() == [0.0, 0.0]
    np.testing.assert_allclose(
        engine.tensor(y).var(1).numpy(), torch.from_numpy(y).var(1).numpy(), rtol=1e-6
    )


@pytest.mark.parametrize("width", [4, 40])
@pytest.mark.parametrize("op", ["max", "min"])
def test_max_min_along_a_dim_give_the_value_at_their_index(op, width, torch):
    # among equal values (0.0 and -0.0) the first, as torch's cpu kernel (numpy's max and min
    # give the last); NaN wins, at its first place
    rows = [
        [0.0, -0.0] * (width // 2),
        [-0.0, 0.0] * (width // 2),
        [1.0, _NAN, 2.0, _NAN] * (width // 4),
    ]
    x = np.array(rows, np.float32)
    for d in (0, 1):
        ev, ei = getattr(engine.tensor(x), op)(d)
        tv, ti = getattr(torch.from_numpy(x), op)(d)
        assert ev.numpy().tobytes() == tv.numpy().tobytes(), d
        assert ei.tolist() == ti.tolist(), d
