"""Op values against numpy (and PyTorch when installed).

Each op runs over several shapes, broadcasting, non-contiguous inputs, 0-d tensors and each dtype
that applies; the result's dtype must be PyTorch's (type promotion included).
"""

from __future__ import annotations

import numpy as np
import pytest

import engine
from tests.conftest import DATA_DEVICES

SHAPES = [(), (5,), (3, 4), (2, 3, 4)]
LAYOUTS = ["contiguous", "transposed", "strided"]
FLOATS = ["float16", "float32", "float64"]
INTS = ["int32", "int64"]
TOL = {"float16": (2e-3, 2e-3), "float32": (1e-5, 1e-6), "float64": (1e-11, 1e-12)}


def sample(shape, dtype, *, domain="any", seed=0):
    """Numpy values of `shape`/`dtype` in a domain: any, positive, or unit (|x| < 1)."""
    rng = np.random.default_rng(seed)
    if dtype == "bool":
        return rng.random(shape) > 0.5 if shape else np.bool_(rng.random() > 0.5)
    if dtype in INTS or dtype == "uint8":
        lo = 1 if domain == "positive" else -5
        return np.asarray(rng.integers(lo, 6, size=shape), dtype=dtype)
    x = rng.standard_normal(shape)
    if domain == "positive":
        x = np.abs(x) + 0.5
    elif domain == "unit":
        x = np.tanh(x) * 0.9
    return np.asarray(x, dtype=dtype)


def layout(values: np.ndarray, kind: str, device="cpu"):
    """An engine tensor holding `values`, laid out contiguous, transposed or strided."""
    if kind == "contiguous" or values.ndim == 0:
        return engine.tensor(values, device=device)
    if kind == "transposed":
        base = engine.tensor(np.ascontiguousarray(values.transpose()), device=device)
        t = base.permute(*reversed(range(values.ndim)))
    else:  # every other element of a wider tensor
        wide = np.repeat(values, 2, axis=-1)
        t = engine.tensor(wide, device=device)[..., ::2]
    if all(n > 1 for n in values.shape) and (values.ndim >= 2 or kind == "strided"):
        assert not t.is_contiguous()
    return t


def values_of(t: engine.Tensor) -> np.ndarray:
    arr = t.detach().cpu().numpy()
    return np.asarray(arr)


def check(result, expected, dtype_name, torch_result=None):
    rtol, atol = TOL.get(dtype_name, (0, 0))
    got = values_of(result)
    assert got.shape == np.shape(expected), (got.shape, np.shape(expected))
    np.testing.assert_allclose(
        got.astype(np.float64),
        np.asarray(expected, dtype=np.float64),
        rtol=rtol,
        atol=atol,
        equal_nan=True,
    )
    if torch_result is not None:
        assert str(result.dtype).removeprefix("engine.") == str(torch_result.dtype).removeprefix(
            "torch."
        )
        tv = torch_result.detach().numpy()
        np.testing.assert_allclose(
            got.astype(np.float64), tv.astype(np.float64), rtol=rtol, atol=atol, equal_nan=True
        )


def maybe_torch():
    try:
        import torch
    except ImportError:
        return None
    return torch


TORCH = maybe_torch()


def t_of(values):
    return TORCH.from_numpy(np.array(values)) if TORCH is not None else None


# ---------------------------------------------------------------------------------------------
# unary
def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


UNARY = {
    # name: (numpy reference, domain, dtypes)
    "neg": (np.negative, "any", FLOATS + INTS),
    "abs": (np.abs, "any", FLOATS + INTS),
    "exp": (np.exp, "any", FLOATS + INTS),
    "log": (np.log, "positive", FLOATS + INTS),
    "sqrt": (np.sqrt, "positive", FLOATS + INTS),
    "sin": (np.sin, "any", FLOATS + INTS),
    "cos": (np.cos, "any", FLOATS + INTS),
    "tanh": (np.tanh, "any", FLOATS + INTS),
    "sigmoid": (_sigmoid, "any", FLOATS + INTS),
    "relu": (lambda x: np.maximum(x, 0), "any", FLOATS + INTS),
    "sign": (np.sign, "any", FLOATS + INTS),
}


def _unary_cases():
    for name, (_, _, dts) in UNARY.items():
        for dt in dts:
            yield name, dt


@pytest.mark.parametrize("device", DATA_DEVICES)
@pytest.mark.parametrize("kind", LAYOUTS)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("name, dtype", list(_unary_cases()))
def test_unary_matches_numpy_and_torch(name, dtype, shape, kind, device):
    ref, domain, _ = UNARY[name]
    x = sample(shape, dtype, domain=domain)
    t = layout(x, kind, device)
    result = getattr(engine, name)(t)
    method = getattr(t, name)()
    xf = x.astype(np.float64) if dtype in INTS and name not in ("neg", "abs", "relu", "sign") else x
    expected = ref(xf)
    tr = getattr(TORCH, name)(t_of(x)) if TORCH is not None else None
    out_dtype = str(result.dtype).removeprefix("engine.")
    check(result, expected, out_dtype, tr)
    check(method, expected, out_dtype)


@pytest.mark.parametrize("dtype", FLOATS + INTS)
@pytest.mark.parametrize("exponent", [2, 3, 0, 1, 0.5, -1, -2.5, 2.0])
def test_pow_scalar_exponent(dtype, exponent):
    if dtype in INTS and isinstance(exponent, int) and exponent < 0:
        pytest.skip("integers to negative integer powers are an error (tested below)")
    x = sample((3, 4), dtype, domain="positive")
    t = engine.tensor(x)
    result = t**exponent
    expected = np.power(x.astype(np.float64), exponent)
    tr = t_of(x) ** exponent if TORCH is not None else None
    check(result, expected, str(result.dtype).removeprefix("engine."), tr)


def test_int_to_negative_int_power_raises():
    with pytest.raises(RuntimeError, match="Integers to negative integer powers are not allowed"):
        engine.tensor([1, 2]) ** -1


@pytest.mark.parametrize("dtype", FLOATS + INTS)
@pytest.mark.parametrize("lo, hi", [(-0.5, 0.5), (None, 0.3), (-0.2, None), (1, 3)])
def test_clamp_scalars(dtype, lo, hi):
    x = sample((4, 5), dtype)
    t = layout(x, "transposed")
    result = engine.clamp(t, lo, hi)
    ref = np.clip(x.astype(np.float64), -np.inf if lo is None else lo, np.inf if hi is None else hi)
    tr = TORCH.clamp(t_of(x), lo, hi) if TORCH is not None else None
    check(result, ref, str(result.dtype).removeprefix("engine."), tr)
    assert t.clip(lo, hi).shape == t.shape


def test_clamp_tensor_bounds_broadcast():
    x = sample((3, 4), "float32")
    lo, hi = sample((4,), "float32", seed=1) - 1, sample((3, 1), "float32", seed=2) + 1
    result = engine.clamp(engine.tensor(x), engine.tensor(lo), engine.tensor(hi))
    np.testing.assert_allclose(values_of(result), np.minimum(np.maximum(x, lo), hi), rtol=1e-6)


def test_clamp_needs_a_bound():
    with pytest.raises(RuntimeError, match="At least one of 'min' or 'max'"):
        engine.clamp(engine.ones(3))


@pytest.mark.parametrize("s, b, after", [(2.0, 0.0, True), (0.5, 1.5, True), (3.0, -1.0, False)])
def test_scale_is_paddles_scale(s, b, after):
    x = sample((3, 4), "float32")
    t = engine.tensor(x)
    expected = x * s + b if after else (x + b) * s
    check(t.scale(s, b, after), expected, "float32")
    check(engine.scale(t, s, bias=b, bias_after_scale=after), expected, "float32")


# ---------------------------------------------------------------------------------------------
# binary
BINARY = {
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "div": np.true_divide,
    "maximum": np.maximum,
    "minimum": np.minimum,
    "eq": np.equal,
    "ne": np.not_equal,
    "lt": np.less,
    "le": np.less_equal,
    "gt": np.greater,
    "ge": np.greater_equal,
}

BROADCAST = [
    ((3, 4), (3, 4)),
    ((3, 4), (4,)),
    ((2, 1, 4), (3, 1)),
    ((), (3,)),
    ((2, 3), ()),
    ((), ()),
    ((5, 1), (1, 6)),
]


@pytest.mark.parametrize("device", DATA_DEVICES)
@pytest.mark.parametrize("kind", ["contiguous", "transposed", "strided"])
@pytest.mark.parametrize("sa, sb", BROADCAST, ids=str)
@pytest.mark.parametrize("name", list(BINARY))
def test_binary_broadcasting(name, sa, sb, kind, device):
    a = sample(sa, "float32", seed=1)
    b = sample(sb, "float32", domain="positive", seed=2)
    ta, tb = layout(a, kind, device), layout(b, kind, device)
    result = getattr(engine, name)(ta, tb)
    method = getattr(ta, name)(tb)
    expected = BINARY[name](a, b)
    tr = getattr(TORCH, name)(t_of(a), t_of(b)) if TORCH is not None else None
    dt = str(result.dtype).removeprefix("engine.")
    check(result, expected, dt, tr)
    check(method, expected, dt)


OPERATORS = [
    ("+", lambda a, b: a + b),
    ("-", lambda a, b: a - b),
    ("*", lambda a, b: a * b),
    ("/", lambda a, b: a / b),
    ("**", lambda a, b: a**b),
    ("//", lambda a, b: a // b),
    ("%", lambda a, b: a % b),
    ("==", lambda a, b: a == b),
    ("!=", lambda a, b: a != b),
    ("<", lambda a, b: a < b),
    ("<=", lambda a, b: a <= b),
    (">", lambda a, b: a > b),
    (">=", lambda a, b: a >= b),
]


@pytest.mark.parametrize("sym, op", OPERATORS, ids=[s for s, _ in OPERATORS])
@pytest.mark.parametrize("other", [2, 2.5, True, "tensor"], ids=str)
def test_python_operators_both_sides(sym, op, other):
    a = sample((3, 4), "float32", domain="positive")
    ta = engine.tensor(a)
    o = (
        engine.tensor(sample((4,), "float32", domain="positive", seed=3))
        if other == "tensor"
        else other
    )
    on = values_of(o) if other == "tensor" else other
    if sym == "-" and other is True:
        with pytest.raises(RuntimeError, match="with a bool tensor is not supported"):
            op(ta, o)
        return
    check(op(ta, o), op(a, on), "float32")
    if other != "tensor":
        check(op(o, ta), op(on, a), "float32")
        if TORCH is not None:
            tr = op(on, TORCH.from_numpy(a))
            assert str(op(o, ta).dtype).removeprefix("engine.") == str(tr.dtype).removeprefix(
                "torch."
            )


PROMOTION = ["bool", "uint8", "int32", "int64", "float16", "float32", "float64"]


@pytest.mark.parametrize("da", PROMOTION)
@pytest.mark.parametrize("db", PROMOTION)
@pytest.mark.parametrize("zero_d", ["none", "a", "b"])
def test_type_promotion_matches_torch(da, db, zero_d, torch):
    sa = () if zero_d == "a" else (3,)
    sb = () if zero_d == "b" else (3,)
    a, b = sample(sa, da, domain="positive"), sample(sb, db, domain="positive", seed=1)
    ta, tb = engine.tensor(a, dtype=da), engine.tensor(b, dtype=db)
    pa, pb = torch.tensor(np.array(a)), torch.tensor(np.array(b))
    for name in ("add", "mul", "div", "maximum", "eq"):
        if name == "add" and da == db == "bool":
            continue
        r, tr = getattr(engine, name)(ta, tb), getattr(torch, name)(pa, pb)
        assert str(r.dtype).removeprefix("engine.") == str(tr.dtype).removeprefix("torch."), name
        np.testing.assert_allclose(
            values_of(r).astype(np.float64), tr.numpy().astype(np.float64), rtol=2e-3
        )


@pytest.mark.parametrize("dt", PROMOTION)
@pytest.mark.parametrize("scalar", [True, 3, 2.5])
def test_scalar_promotion_matches_torch(dt, scalar, torch):
    a = sample((3,), dt, domain="positive")
    ta, pa = engine.tensor(a, dtype=dt), torch.tensor(a)
    for name in ("add", "mul", "div", "sub"):
        if name == "sub" and (dt == "bool" or scalar is True):
            with pytest.raises(RuntimeError, match="Subtraction, the `-` operator, with a bool"):
                engine.sub(ta, scalar)
            continue
        r, tr = getattr(engine, name)(ta, scalar), getattr(torch, name)(pa, scalar)
        assert str(r.dtype).removeprefix("engine.") == str(tr.dtype).removeprefix("torch."), name
        np.testing.assert_allclose(
            values_of(r).astype(np.float64), tr.numpy().astype(np.float64), rtol=2e-3
        )


@pytest.mark.parametrize("alpha", [1, 2, -0.5])
@pytest.mark.parametrize("sb", [(3, 4), (4,), ()], ids=str)
def test_add_sub_alpha(alpha, sb):
    a, b = sample((3, 4), "float32"), sample(sb, "float32", seed=1)
    ta, tb = engine.tensor(a), engine.tensor(b)
    check(engine.add(ta, tb, alpha=alpha), a + alpha * b, "float32")
    check(engine.sub(ta, tb, alpha=alpha), a - alpha * b, "float32")
    check(ta.subtract(tb, alpha=alpha), a - alpha * b, "float32")
    check(engine.add(ta, 2.0, alpha=alpha), a + alpha * 2.0, "float32")


@pytest.mark.parametrize("mode", [None, "floor", "trunc"])
@pytest.mark.parametrize("dtype", ["float32", "int64"])
def test_div_rounding_modes(mode, dtype, torch):
    a = np.array([7, -7, 5, -3, 0], dtype=dtype)
    b = np.array([2, 2, -2, 3, 4], dtype=dtype)
    r = engine.div(engine.tensor(a), engine.tensor(b), rounding_mode=mode)
    tr = torch.div(torch.tensor(a), torch.tensor(b), rounding_mode=mode)
    assert str(r.dtype).removeprefix("engine.") == str(tr.dtype).removeprefix("torch.")
    np.testing.assert_allclose(values_of(r), tr.numpy())


@pytest.mark.parametrize("sa, sb", [((3, 4), (3, 4)), ((3, 1), (4,)), ((), (2, 2))], ids=str)
def test_pow_tensor_tensor(sa, sb):
    a, b = sample(sa, "float64", domain="positive"), sample(sb, "float64", seed=1)
    check(engine.pow(engine.tensor(a), engine.tensor(b)), np.power(a, b), "float64")
    check(2.0 ** engine.tensor(b), np.power(2.0, b), "float64")


def test_logical_ops():
    a = np.array([True, False, True, False])
    b = np.array([True, True, False, False])
    ta, tb = engine.tensor(a), engine.tensor(b)
    assert (engine.logical_and(ta, tb).numpy() == (a & b)).all()
    assert ((ta | tb).numpy() == (a | b)).all()
    assert ((~ta).numpy() == ~a).all()
    assert (engine.logical_not(engine.tensor([0.0, 2.0])).numpy() == [True, False]).all()


@pytest.mark.parametrize(
    "sc, sx, sy", [((3, 4),) * 3, ((3, 1), (4,), ()), ((4,), (3, 4), (3, 1))], ids=str
)
def test_where(sc, sx, sy):
    c = sample(sc, "bool")
    x, y = sample(sx, "float32"), sample(sy, "float32", seed=1)
    r = engine.where(engine.tensor(c), engine.tensor(x), engine.tensor(y))
    check(r, np.where(c, x, y), "float32")
    check(engine.tensor(x).where(engine.tensor(c), 0.5), np.where(c, x, 0.5), "float32")


def test_where_promotes_like_torch(torch):
    c = np.array([True, False])
    r = engine.where(engine.tensor(c), engine.tensor([1, 2]), 2.5)
    tr = torch.where(torch.tensor(c), torch.tensor([1, 2]), 2.5)
    assert str(r.dtype) == str(tr.dtype).replace("torch", "engine")
    np.testing.assert_allclose(values_of(r), tr.numpy())


# ---------------------------------------------------------------------------------------------
# reductions
DIMS = [None, 0, -1, (0, 2), (1,)]


@pytest.mark.parametrize("device", DATA_DEVICES)
@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("dim", DIMS, ids=str)
@pytest.mark.parametrize("name", ["sum", "mean", "amax", "amin"])
@pytest.mark.parametrize("dtype", ["float32", "float64", "int64"])
def test_reductions(name, dim, keepdim, dtype, device):
    if name == "mean" and dtype == "int64":
        pytest.skip("mean of an int tensor is an error (tested below)")
    x = sample((2, 3, 4), dtype)
    t = layout(x, "transposed", device)
    ref = {"sum": np.sum, "mean": np.mean, "amax": np.amax, "amin": np.amin}[name]
    axis = dim if dim is not None else None
    expected = ref(x, axis=axis, keepdims=keepdim)
    if name in ("amax", "amin"):
        r = getattr(engine, name)(t, dim if dim is not None else (), keepdim)
    else:
        r = getattr(t, name)(dim, keepdim)
    tr = None
    if TORCH is not None:
        tx = TORCH.from_numpy(x)
        if name in ("amax", "amin"):
            tr = getattr(TORCH, name)(tx, dim if dim is not None else (), keepdim)
        elif dim is None and not keepdim:
            tr = getattr(TORCH, name)(tx)
        else:
            tr = getattr(TORCH, name)(tx, dim if dim is not None else (0, 1, 2), keepdim)
    check(r, expected, dtype if dtype != "int64" else "int64", tr)


def test_sum_of_bool_and_int32_is_int64(torch):
    for values in ([True, False, True], np.array([1, 2], dtype=np.int32)):
        r, tr = engine.tensor(values).sum(), torch.tensor(values).sum()
        assert str(r.dtype) == str(tr.dtype).replace("torch", "engine")
        assert r.item() == tr.item()


def test_mean_of_ints_raises():
    with pytest.raises(RuntimeError, match="mean\\(\\): could not infer output dtype"):
        engine.tensor([1, 2]).mean()


def test_reductions_of_0d():
    t = engine.tensor(3.5)
    assert t.sum().item() == 3.5
    assert t.mean().item() == 3.5
    assert t.amax().item() == 3.5
    assert t.sum(0).item() == 3.5
    assert t.max().item() == 3.5


@pytest.mark.parametrize("dim", [0, 1, -1])
@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("name", ["max", "min"])
def test_max_min_with_dim_give_values_and_indices(name, dim, keepdim, torch):
    x = sample((3, 4), "float32")
    t = layout(x, "transposed")
    r = getattr(t, name)(dim, keepdim)
    tr = getattr(torch, name)(torch.from_numpy(x), dim, keepdim)
    values, indices = r
    assert r.values is values and r.indices is indices
    np.testing.assert_allclose(values_of(values), tr.values.numpy())
    np.testing.assert_array_equal(values_of(indices), tr.indices.numpy())
    assert indices.dtype is engine.int64


def test_max_min_full_and_binary_forms():
    x = sample((3, 4), "float32")
    t = engine.tensor(x)
    assert t.max().item() == pytest.approx(x.max())
    assert engine.min(t).item() == pytest.approx(x.min())
    other = engine.tensor(sample((4,), "float32", seed=1))
    check(engine.max(t, other), np.maximum(x, values_of(other)), "float32")
    check(t.min(other), np.minimum(x, values_of(other)), "float32")
    assert t.argmax().item() == int(np.argmax(x))
    np.testing.assert_array_equal(values_of(t.argmax(1)), np.argmax(x, 1))


@pytest.mark.parametrize("dim", [0, 1, -1])
@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_softmax(name, dim, dtype, torch):
    x = sample((3, 4, 5), dtype) * 10
    t = layout(x, "strided")
    r = getattr(engine, name)(t, dim)
    tr = getattr(torch, name)(torch.from_numpy(x), dim)
    check(r, tr.numpy(), dtype, tr)
    check(getattr(t, name)(dim=dim), tr.numpy(), dtype)


def test_softmax_of_0d_and_large_values():
    assert engine.softmax(engine.tensor(3.0), 0).item() == 1.0
    r = engine.softmax(engine.tensor([1000.0, 1000.0]), 0)
    np.testing.assert_allclose(r.numpy(), [0.5, 0.5])


MATMUL = [
    ((3,), (3,)),
    ((2, 3), (3,)),
    ((3,), (3, 4)),
    ((2, 3), (3, 4)),
    ((5, 2, 3), (3, 4)),
    ((5, 2, 3), (5, 3, 4)),
    ((2, 1, 2, 3), (4, 3, 2)),
    ((3,), (2, 3, 4)),
]


@pytest.mark.parametrize("device", DATA_DEVICES)
@pytest.mark.parametrize("kind", ["contiguous", "transposed"])
@pytest.mark.parametrize("sa, sb", MATMUL, ids=str)
@pytest.mark.parametrize("dtype", ["float32", "float64", "int64"])
def test_matmul(sa, sb, kind, dtype, device):
    a, b = sample(sa, dtype), sample(sb, dtype, seed=1)
    ta, tb = layout(a, kind, device), layout(b, kind, device)
    expected = np.matmul(a, b)
    tr = TORCH.matmul(t_of(a), t_of(b)) if TORCH is not None else None
    check(ta @ tb, expected, dtype, tr)
    check(engine.matmul(ta, tb), expected, dtype)


def test_matmul_shape_error_names_both_shapes():
    with pytest.raises(
        RuntimeError, match=r"mat1 and mat2 shapes cannot be multiplied \(2x3 and 4x5\)"
    ):
        engine.ones(2, 3) @ engine.ones(4, 5)
    # torch's words from its bmm (matmul of batches reshapes both to [batch, n, m] first)
    with pytest.raises(
        RuntimeError,
        match=r"Expected size for first two dimensions of batch2 tensor to be: \[5, 3\] but "
        r"got: \[5, 4\]\.",
    ):
        engine.ones(5, 2, 3) @ engine.ones(5, 4, 3)
    with pytest.raises(RuntimeError, match="at least 1D"):
        engine.tensor(2.0) @ engine.ones(2)


# ---------------------------------------------------------------------------------------------
# out=
@pytest.mark.parametrize(
    "call",
    [
        lambda a, b, out: engine.add(a, b, out=out),
        lambda a, b, out: engine.sub(a, b, alpha=2, out=out),
        lambda a, b, out: engine.mul(a, b, out=out),
        lambda a, b, out: engine.div(a, b, out=out),
        lambda a, b, out: engine.maximum(a, b, out=out),
        lambda a, b, out: engine.exp(a, out=out),
        lambda a, b, out: engine.relu(a, out=out),
        lambda a, b, out: engine.clamp(a, -0.1, 0.1, out=out),
        lambda a, b, out: engine.matmul(a, b.t(), out=out),
        lambda a, b, out: engine.where(a > 0, a, b, out=out),
    ],
)
def test_out_writes_into_the_given_tensor(call):
    a = engine.tensor(sample((4, 4), "float32"))
    b = engine.tensor(sample((4, 4), "float32", domain="positive", seed=1))
    expected = values_of(call(a, b, None))
    out = engine.empty(4, 4)
    v = out._version
    before = engine.memory.memory_allocated()
    r = call(a, b, out)
    assert r is out
    assert out._version == v + 1
    assert engine.memory.memory_allocated() == before
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-6)


def test_seed_004_add_out_keeps_the_object():
    x, y = engine.tensor([1, 2]), engine.tensor([3, 4])
    ident = id(y)
    engine.add(x, y, out=y)
    assert id(y) == ident and y.tolist() == [4, 6]
    y += x
    assert id(y) == ident and y.tolist() == [5, 8]
    y = y + x
    assert id(y) != ident
    z = engine.tensor([3, 4])
    zid = id(z)
    z[:] = z + x
    assert id(z) == zid and z.tolist() == [4, 6]


def test_out_with_wrong_shape_names_both_shapes():
    with pytest.raises(RuntimeError, match=r"\[2\].*\[3\]"):
        engine.add(engine.ones(3), engine.ones(3), out=engine.empty(2))


def test_out_of_lower_category_dtype_raises():
    with pytest.raises(
        RuntimeError, match="result type Float can't be cast to the desired output type Long"
    ):
        engine.add(engine.ones(3), 1.5, out=engine.zeros(3, dtype=engine.int64))


def test_remainder_operators_in_place_and_number_first(torch):
    x = np.array([5.0, -5.0, 7.5, -0.0], np.float32)
    t = engine.tensor(x.copy())
    t %= 3
    ref = torch.from_numpy(x.copy())
    ref %= 3
    assert t.numpy().tobytes() == ref.numpy().tobytes()
    a = engine.tensor([1.5, -2.0], requires_grad=True)
    y = 7.0 % a
    assert y.tolist() == (7.0 % torch.tensor([1.5, -2.0])).tolist()
    assert y.grad_fn.name() == "NotImplemented"  # as torch's remainder(Scalar, Tensor)
    with pytest.raises(RuntimeError, match="derivative for aten::remainder is not implemented"):
        y.sum().backward()
