"""Elementwise math, bitwise ops and operators, tensor introspection, and the splitting and
rearranging composites the engine adds (engine/ops/mathops.py, engine/ops/composites.py)
against torch 2.13: values (float64 to 1e-13), gradients (and central differences), node
chains, dtypes of integer and bool inputs, in-place forms, the blocks torch's CPU profiler
shows forward and backward, refusals."""

from __future__ import annotations

import numpy as np
import pytest

import engine
from tests.conftest import assert_raises_as_torch, node_chain
from tests.engine.test_memory_vs_torch import assert_steps_as_torch, forward_backward

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(11)
N = RNG.standard_normal((8, 6))  # any sign
N[0, 0] = 0.0
U = RNG.uniform(0.05, 0.95, (8, 6))  # in (0, 1)
G = RNG.uniform(1.2, 3.0, (8, 6))  # > 1
P = RNG.uniform(0.3, 4.0, (8, 6))  # > 0
OTHER = RNG.uniform(1.0, 2.0, (8, 6)) * np.sign(RNG.standard_normal((8, 6)))
OTHER_NAN = OTHER.copy()
OTHER_NAN[1, :2] = np.nan
N_NAN = N.copy()
N_NAN[2, 3] = np.nan

UNARY = {  # name -> (input, call)
    "asinh": (N, lambda m, x: x.asinh()),
    "arcsinh": (N, lambda m, x: m.arcsinh(x)),
    "acosh": (G, lambda m, x: m.acosh(x)),
    "arccosh": (G, lambda m, x: x.arccosh()),
    "atanh": (U, lambda m, x: x.atanh()),
    "arctanh": (U, lambda m, x: m.arctanh(x)),
    "sinc": (N, lambda m, x: x.sinc()),
    "deg2rad": (N, lambda m, x: m.deg2rad(x)),
    "rad2deg": (N, lambda m, x: x.rad2deg()),
    "logit": (U, lambda m, x: x.logit()),
    "logit_eps": (N, lambda m, x: m.logit(x, 0.2)),
    "lgamma": (P, lambda m, x: x.lgamma()),
    "lgamma_negative": (-P + 0.01, lambda m, x: m.lgamma(x)),
    "digamma": (P, lambda m, x: x.digamma()),
    "digamma_negative": (-P + 0.01, lambda m, x: m.digamma(x)),
}

BINARY = {  # name -> (self, other, call)
    "hypot": (N, OTHER, lambda m, a, b: m.hypot(a, b)),
    "logaddexp": (N, OTHER, lambda m, a, b: a.logaddexp(b)),
    "logaddexp2": (N, OTHER, lambda m, a, b: m.logaddexp2(a, b)),
    "fmax": (N_NAN, OTHER_NAN, lambda m, a, b: m.fmax(a, b)),
    "fmin": (N_NAN, OTHER_NAN, lambda m, a, b: a.fmin(b)),
    "fmax_ties": (N, N, lambda m, a, b: m.fmax(a, b)),
    "copysign": (N, OTHER, lambda m, a, b: m.copysign(a, b)),
    "copysign_number": (N, OTHER, lambda m, a, b: a.copysign(-1.5) + b),
    "hypot_broadcast": (N, OTHER[:1], lambda m, a, b: m.hypot(a, b)),
    "logaddexp_broadcast": (N, OTHER[:, :1], lambda m, a, b: m.logaddexp(a, b)),
    "cross": (N[:, :3], OTHER[:, :3], lambda m, a, b: m.cross(a, b, dim=1)),
    "cross_broadcast": (N[:, :3], OTHER[:1, :3], lambda m, a, b: m.cross(a, b, dim=-1)),
    "kron": (N[:3, :2], OTHER[:2], lambda m, a, b: m.kron(a, b)),
    "inner_vectors": (N[0], OTHER[1], lambda m, a, b: m.inner(a, b)),
    "inner_matrices": (N, OTHER[:3], lambda m, a, b: a.inner(b)),
    "diff_prepend_append": (N, OTHER[:, :2], lambda m, a, b: m.diff(a, 2, 1, prepend=b, append=b)),
}

SHAPES = {  # name -> (input, call): views and composites of one tensor
    "tensor_split": (N, lambda m, x: m.tensor_split(x, 4, 1)[1] * 2.0),
    "tensor_split_indices": (N, lambda m, x: x.tensor_split([1, -3], dim=0)[1] * 2.0),
    "hsplit": (N, lambda m, x: m.hsplit(x, 3)[2] * 2.0),
    "vsplit": (N, lambda m, x: x.vsplit([2, 5])[1] * 2.0),
    "dsplit": (N.reshape(2, 4, 6), lambda m, x: m.dsplit(x, 2)[0] * 2.0),
    "split_with_sizes": (N, lambda m, x: x.split_with_sizes([3, x.shape[0] - 3])[1] * 2.0),
    "diff": (N, lambda m, x: m.diff(x)),
    "diff_n3_dim0": (N, lambda m, x: x.diff(3, 0)),
    "rot90": (N, lambda m, x: m.rot90(x)),
    "rot90_k2": (N, lambda m, x: x.rot90(2)),
    "rot90_k3_dims": (N.reshape(2, 4, 6), lambda m, x: m.rot90(x, -1, (2, 0))),
    "diagflat": (N[:2], lambda m, x: m.diagflat(x)),
    "diagflat_offset": (N[0], lambda m, x: x.diagflat(-2)),
}


def _grad(shape, seed=2):
    return np.random.default_rng(seed).standard_normal(shape) if shape else np.array(1.3)


def _unary(m, name):
    arr, call = UNARY[name]
    x = m.tensor(arr, requires_grad=True)
    y = call(m, x)
    y.backward(m.tensor(_grad(tuple(y.shape))))
    return y.detach().numpy(), x.grad.numpy(), node_chain(y.grad_fn)


def _binary(m, name):
    a_arr, b_arr, call = BINARY[name]
    a, b = m.tensor(a_arr, requires_grad=True), m.tensor(b_arr, requires_grad=True)
    y = call(m, a, b)
    y.backward(m.tensor(_grad(tuple(y.shape))))
    return y.detach().numpy(), a.grad.numpy(), b.grad.numpy(), node_chain(y.grad_fn)


def _shaped(m, name):
    arr, call = SHAPES[name]
    x = m.tensor(arr, requires_grad=True)
    y = call(m, x)
    y.backward(m.tensor(_grad(tuple(y.shape))))
    return y.detach().numpy(), x.grad.numpy(), node_chain(y.grad_fn)


def _same(e, t):
    *ev, en = e
    *tv, tn = t
    for p, q in zip(ev, tv, strict=True):
        np.testing.assert_allclose(p, q, rtol=1e-13, atol=1e-14, equal_nan=True)
    assert en == tn


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_values_gradients_and_nodes_as_torch(name):
    _same(_unary(engine, name), _unary(torch, name))


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_values_gradients_and_nodes_as_torch(name):
    _same(_binary(engine, name), _binary(torch, name))


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_composites_values_gradients_and_nodes_as_torch(name):
    _same(_shaped(engine, name), _shaped(torch, name))


@pytest.mark.parametrize(
    "name", ["asinh", "acosh", "atanh", "sinc", "logit", "lgamma", "digamma", "logit_eps"]
)
def test_unary_gradients_against_central_differences(name):
    arr, call = UNARY[name]
    arr = arr[:2, :3].copy()
    x = engine.tensor(arr, requires_grad=True)
    call(engine, x).sum().backward()
    eps = 1e-6
    num = (
        call(engine, engine.tensor(arr + eps)).numpy()
        - call(engine, engine.tensor(arr - eps)).numpy()
    ) / (2 * eps)
    np.testing.assert_allclose(x.grad.numpy(), num, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("name", ["hypot", "logaddexp", "logaddexp2", "copysign", "cross"])
def test_binary_gradients_against_central_differences(name):
    a_arr, b_arr, call = BINARY[name]
    a_arr, b_arr = a_arr[:3].copy(), b_arr[:3].copy()
    a, b = engine.tensor(a_arr, requires_grad=True), engine.tensor(b_arr, requires_grad=True)
    call(engine, a, b).sum().backward()
    eps = 1e-6
    for arr, grad, which in ((a_arr, a.grad, 0), (b_arr, b.grad, 1)):
        num = np.zeros_like(arr)
        for i in np.ndindex(arr.shape):
            hi, lo = arr.copy(), arr.copy()
            hi[i] += eps
            lo[i] -= eps
            ops = [(hi, b_arr), (lo, b_arr)] if which == 0 else [(a_arr, hi), (a_arr, lo)]
            f = [call(engine, engine.tensor(p), engine.tensor(q)).numpy().sum() for p, q in ops]
            num[i] = (f[0] - f[1]) / (2 * eps)
        np.testing.assert_allclose(grad.numpy(), num, rtol=1e-6, atol=1e-8)


def test_digamma_and_trigamma_to_float64_tolerance():
    xs = np.concatenate(
        [
            np.array([0.0, -0.0, -1.0, -2.5, 1e-300, 1e-8, 0.5, 1.0, 10.0, 1e17, 1e20]),
            np.linspace(-20.3, 60.7, 999),
        ]
    )
    np.testing.assert_allclose(
        engine.tensor(xs).digamma().numpy(), torch.tensor(xs).digamma().numpy(), rtol=1e-13
    )
    np.testing.assert_allclose(
        engine.tensor(xs).lgamma().numpy(), torch.tensor(xs).lgamma().numpy(), rtol=1e-13
    )
    x = engine.tensor(xs[4:], requires_grad=True)
    t = torch.tensor(xs[4:], requires_grad=True)
    x.digamma().sum().backward()
    t.digamma().sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), rtol=1e-12)


MEMORY_UNARY = ["asinh", "acosh", "atanh", "sinc", "deg2rad", "logit", "logit_eps", "lgamma"]
MEMORY_UNARY += ["digamma"]
MEMORY_BINARY = ["hypot", "logaddexp", "logaddexp2", "fmax", "fmin", "copysign"]
MEMORY_BINARY += ["copysign_number", "hypot_broadcast", "logaddexp_broadcast", "cross"]
MEMORY_BINARY += ["cross_broadcast", "diff_prepend_append"]  # inner: see the report
MEMORY_SHAPES = ["tensor_split", "hsplit", "split_with_sizes", "diff", "diff_n3_dim0", "rot90"]
MEMORY_SHAPES += ["rot90_k3_dims", "diagflat"]


def _big(arr):
    return np.tile(arr, (4, 4) if arr.ndim == 2 else (4,) * arr.ndim).astype(np.float32)


@pytest.mark.parametrize("name", MEMORY_UNARY)
def test_unary_blocks_as_torch(name):
    arr, call = UNARY[name]

    def make(m):
        x = m.tensor(_big(arr), requires_grad=True)
        return forward_backward(m, lambda: call(m, x))

    assert_steps_as_torch(make)


@pytest.mark.parametrize("name", MEMORY_BINARY)
def test_binary_blocks_as_torch(name):
    a_arr, b_arr, call = BINARY[name]

    a_big, b_big = _big_pair(a_arr, b_arr)

    def make(m):
        a = m.tensor(a_big, requires_grad=True)
        b = m.tensor(b_big, requires_grad=True)
        return forward_backward(m, lambda: call(m, a, b))

    assert_steps_as_torch(make)


def _big_pair(a, b):
    """Both operands tiled to blocks above the scalar slack, keeping how they broadcast (and a
    cross product's dim of 3)."""
    cols = 1 if a.shape[-1] == 3 else 4
    a_big = np.tile(a, (4, cols))
    b_big = np.tile(
        b, (4 if b.shape[0] == a.shape[0] else 1, cols if b.shape[-1] == a.shape[-1] else 1)
    )
    return a_big.astype(np.float32), b_big.astype(np.float32)


@pytest.mark.parametrize("name", MEMORY_SHAPES)
def test_composite_blocks_as_torch(name):
    arr, call = SHAPES[name]

    def make(m):
        x = m.tensor(_big(arr), requires_grad=True)
        return forward_backward(m, lambda: call(m, x))

    assert_steps_as_torch(make)


# ---------------------------------------------------------------------------------------------
# integers, bools, bitwise ops and operators
# ---------------------------------------------------------------------------------------------
IA = np.random.default_rng(5).integers(-20, 20, (4, 6))
IB = np.random.default_rng(6).integers(0, 9, (4, 6))

INT_CALLS = {
    "and": lambda m, a, b: a & b,
    "or": lambda m, a, b: a | b,
    "xor": lambda m, a, b: a ^ b,
    "invert": lambda m, a, b: ~a,
    "lshift": lambda m, a, b: a << b,
    "rshift": lambda m, a, b: a >> b,
    "rand": lambda m, a, b: 3 & a,
    "ror": lambda m, a, b: 5 | a,
    "rxor": lambda m, a, b: 6 ^ a,
    "rlshift": lambda m, a, b: 1 << b,
    "rrshift": lambda m, a, b: 1024 >> b,
    "bitwise_and": lambda m, a, b: m.bitwise_and(a, 12),
    "bitwise_or": lambda m, a, b: a.bitwise_or(b),
    "bitwise_xor": lambda m, a, b: m.bitwise_xor(a, b),
    "bitwise_not": lambda m, a, b: m.bitwise_not(a),
    "bitwise_left_shift_wide": lambda m, a, b: m.bitwise_left_shift(a, 70),
    "bitwise_right_shift_wide": lambda m, a, b: a.bitwise_right_shift(70),
    "shift_int32_by_int64": lambda m, a, b: a.int() >> b,
    "shift_uint8": lambda m, a, b: a.to(m.uint8) << b,
    "bool_and": lambda m, a, b: (a > 0) & (b > 3),
    "bool_invert": lambda m, a, b: ~(a > 0),
    "bool_xor_number": lambda m, a, b: (a > 0) ^ True,
    "floor_divide": lambda m, a, b: m.floor_divide(a, 3),
    "floor_divide_float": lambda m, a, b: a.double().floor_divide(-2.5),
    "heaviside": lambda m, a, b: m.heaviside(a.double(), m.tensor([0.5], dtype=m.float64)),
    "float_power_ints": lambda m, a, b: m.float_power(a, 2),
    "float_power_number_base": lambda m, a, b: m.float_power(2, b),
    "copysign_int": lambda m, a, b: m.copysign(a, -1),
    "deg2rad_int": lambda m, a, b: m.deg2rad(a),
    "sgn_int": lambda m, a, b: m.sgn(a),
    "sgn_bool": lambda m, a, b: (a > 0).sgn(),
    "logit_int": lambda m, a, b: m.logit(b),
    "lgamma_int": lambda m, a, b: b.lgamma(),
    "asinh_bool": lambda m, a, b: (a > 0).asinh(),
    "fmax_mixed": lambda m, a, b: m.fmax(a, b.double()),
    "isposinf": lambda m, a, b: m.isposinf(m.tensor([1.0, float("inf"), -float("inf")])),
    "isneginf": lambda m, a, b: m.tensor([1.0, float("inf"), -float("inf")]).isneginf(),
    "isposinf_int": lambda m, a, b: m.isposinf(a),
    "isreal": lambda m, a, b: m.isreal(a),
    "positive": lambda m, a, b: m.positive(a),
}


@pytest.mark.parametrize("name", sorted(INT_CALLS))
def test_integer_and_bool_results_as_torch(name):
    call = INT_CALLS[name]
    e = call(engine, engine.tensor(IA), engine.tensor(IB))
    t = call(torch, torch.tensor(IA), torch.tensor(IB))
    assert str(e.dtype).split(".")[1] == str(t.dtype).split(".")[1]
    np.testing.assert_array_equal(e.numpy(), t.numpy())


def test_in_place_bitwise_operators_as_torch():
    for m in (engine, torch):
        a = m.tensor(IA)
        a &= m.tensor(IB)
        a |= 64
        a ^= m.tensor(IB)
        a <<= 2
        a >>= 1
        m.bitwise_not(a).bitwise_and_(m.tensor(IB))
        a.bitwise_xor_(3)
        if m is engine:
            ours = a.numpy().copy()
    np.testing.assert_array_equal(ours, a.numpy())


def test_float_power_square_and_rsqrt_values_and_gradients_as_torch():
    # values and gradients only (the engine's rsqrt_ is a pow: its node differs from torch's)
    for call in (
        lambda m, a, b: m.float_power(a, b),
        lambda m, a, b: a.float_power(2.5) + b,
        lambda m, a, b: m.float_power(3, b),
        lambda m, a, b: (a * 1.0).square_() * b,
        lambda m, a, b: (a * 1.0).rsqrt_() * b,
    ):
        res = []
        for m in (engine, torch):
            a, b = m.tensor(P, requires_grad=True), m.tensor(OTHER, requires_grad=True)
            y = call(m, a, b)
            y.backward(m.tensor(_grad(tuple(y.shape))))
            res.append((y.detach().numpy(), a.grad, b.grad.numpy(), str(y.dtype).split(".")[1]))
        (ey, ea, eb, edt), (ty, ta, tb, tdt) = res
        np.testing.assert_allclose(ey, ty, rtol=1e-13)
        np.testing.assert_allclose(eb, tb, rtol=1e-12)
        assert (ea is None) == (ta is None) and edt == tdt
        if ea is not None:
            np.testing.assert_allclose(ea.numpy(), ta.numpy(), rtol=1e-12)


@pytest.mark.parametrize(
    "name, arr",
    [
        ("asinh_", N),
        ("acosh_", G),
        ("atanh_", U),
        ("sinc_", N),
        ("deg2rad_", N),
        ("rad2deg_", N),
        ("logit_", U),
        ("lgamma_", P),
        ("digamma_", P),
        ("sgn_", N),
        ("square_", N),
        ("rsqrt_", P),
    ],
)
def test_in_place_values_as_torch(name, arr):
    e, t = engine.tensor(arr), torch.tensor(arr)
    assert getattr(e, name)() is e and getattr(t, name)() is t
    np.testing.assert_allclose(e.numpy(), t.numpy(), rtol=1e-13)
    assert hasattr(engine, name) == hasattr(torch, name)  # torch.<name>_ where torch has one
    if hasattr(torch, name):
        for m, x in ((engine, e), (torch, t)):
            assert getattr(m, name)(x) is x


def test_binary_in_place_forms_as_torch():
    for name, other in (("hypot_", OTHER), ("copysign_", OTHER), ("float_power_", 2.0)):
        e, t = engine.tensor(N), torch.tensor(N)
        eo = engine.tensor(other) if isinstance(other, np.ndarray) else other
        to = torch.tensor(other) if isinstance(other, np.ndarray) else other
        getattr(e, name)(eo)
        getattr(t, name)(to)
        np.testing.assert_allclose(e.numpy(), t.numpy(), rtol=1e-13)


def test_introspection_as_torch():
    for m in (engine, torch):
        x = m.ones(2, 3, dtype=m.int64)
        got = (
            x.is_complex(),
            m.is_complex(x),
            x.is_signed(),
            m.ones(2, dtype=m.uint8).is_signed(),
            m.ones(2, dtype=m.bool).is_signed(),
            m.tensor([2.5]).is_nonzero(),
            m.is_nonzero(m.tensor([[0.0]])),
            x.is_same_size(m.zeros(2, 3)),
            m.is_same_size(x, m.zeros(3, 2)),
            x.ndimension(),
            m.numel(x),
            m.is_floating_point(x),
            m.is_floating_point(x.double()),
            m.positive(x) is x,
        )
        if m is engine:
            ours = got
    assert ours == got


def test_torch_level_fill_and_zero_as_torch():
    for m in (engine, torch):
        x = m.ones(2, 3)
        assert m.fill_(x, 2.5) is x and x.numpy().tolist() == [[2.5] * 3] * 2
        assert m.zero_(x) is x and not x.numpy().any()


# ---------------------------------------------------------------------------------------------
# refusals and missing derivatives
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "call",
    [
        lambda m: m.hypot(m.ones(2, dtype=m.int64), m.ones(2, dtype=m.int64)),
        lambda m: m.logaddexp(m.ones(2, dtype=m.int64), m.ones(2, dtype=m.int64)),
        lambda m: m.ones(2) & m.ones(2),
        lambda m: m.ones(2) | m.ones(2, dtype=m.int64),
        lambda m: m.bitwise_xor(m.ones(2), 1),
        lambda m: m.ones(2, dtype=m.int64) << m.ones(2),
        lambda m: m.bitwise_right_shift(m.ones(2), 1),
        lambda m: m.bitwise_not(m.ones(2)),
        lambda m: ~m.ones(2),
        lambda m: m.heaviside(m.ones(2), m.ones(2, dtype=m.float64)),
        lambda m: m.positive(m.ones(2, dtype=m.bool)),
        lambda m: m.ones(2).float_power_(2),
        lambda m: m.ones(2).is_nonzero(),
        lambda m: m.ones(0).is_nonzero(),
        lambda m: m.rot90(m.ones(2, 3), 1, (0, 1, 2)),
        lambda m: m.rot90(m.ones(3), 1),
        lambda m: m.rot90(m.ones(2, 3), 1, (1, 1)),
        lambda m: m.rot90(m.ones(2, 3), 1, (0, 2)),
        lambda m: m.vsplit(m.ones(4), 2),
        lambda m: m.hsplit(m.ones(4, 5), 2),
        lambda m: m.dsplit(m.ones(2, 2, 3), 2),
        lambda m: m.split_with_sizes(m.ones(4, 3), [1, 2]),
        lambda m: m.tensor_split(m.ones(4), 0),
        lambda m: m.diff(m.tensor(1.0)),
        lambda m: m.diff(m.ones(3), -1),
        lambda m: m.cross(m.ones(2, 4), m.ones(2, 4), dim=1),
        lambda m: m.cross(m.ones(2, 3), m.ones(3), dim=-1),
        lambda m: m.inner(m.ones(2, 3), m.ones(4)),
        lambda m: m.heaviside(m.ones(2, requires_grad=True), m.ones(2)).sum().backward(),
        lambda m: m.floor_divide(m.ones(2, requires_grad=True), 2).sum().backward(),
        lambda m: (m.ones(2, requires_grad=True) * 1.0).asinh_().sum().backward(),
        lambda m: (m.ones(2, requires_grad=True) * 2.0).acosh_().sum().backward(),
        lambda m: (m.ones(2, requires_grad=True) * 0.5).atanh_().sum().backward(),
    ],
)
def test_refusals_as_torch(call):
    assert_raises_as_torch(call)


def test_sgn_has_no_memory_for_its_gradient_as_torch():
    def make(m):
        x = m.tensor(_big(N), requires_grad=True)
        return forward_backward(m, lambda: x.sgn())

    assert_steps_as_torch(make)
    assert engine.ones(2, requires_grad=True).sgn().grad_fn.name() == "SgnBackward0"


def test_cross_without_dim_warns_and_takes_the_first_dim_of_size_3():
    a, b = RNG.standard_normal((3, 5)), RNG.standard_normal((3, 5))
    with pytest.warns(UserWarning, match="without specifying the dim"):
        e = engine.cross(engine.tensor(a), engine.tensor(b))
    with pytest.warns(UserWarning):
        t = torch.cross(torch.tensor(a), torch.tensor(b))
    np.testing.assert_allclose(e.numpy(), t.numpy(), rtol=1e-13)


@pytest.mark.parametrize(
    "call, shape",
    [
        (lambda m, x: m.hypot(x, x), (4, 6)),
        (lambda m, x: m.fmax(x, x[:1]), (4, 6)),
        (lambda m, x: x.lgamma(), (4, 6)),
        (lambda m, x: x.digamma(), (4, 6)),
        (lambda m, x: m.rot90(x), (6, 4)),
        (lambda m, x: m.kron(x, x), (16, 36)),
        (lambda m, x: m.diff(x, 2), (4, 4)),
        (lambda m, x: m.inner(x, x), (4, 4)),
        (lambda m, x: m.cross(x[:, :3], x[:, 3:], dim=1), (4, 3)),
    ],
)
def test_meta_shapes(call, shape):
    x = engine.empty(4, 6, device="meta", requires_grad=True)
    y = call(engine, x)
    assert tuple(y.shape) == shape
    y.sum().backward()
    assert tuple(x.grad.shape) == (4, 6)
