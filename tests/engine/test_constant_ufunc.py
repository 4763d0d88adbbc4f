"""kernels.constant_ufunc: an arithmetic op whose tensor inputs are each one value broadcast
(mean's and sum's backward expand a scalar gradient) is evaluated once and filled; the result
is the plain ufunc's, bit for bit, and the op's memory is unchanged."""

import numpy as np
import pytest

import engine
from engine import kernels

SHAPE = (4, 8, 16, 16)  # 8192 elements: above CONSTANT_MIN_ELEMS

VALUES = [2.5, -0.0, 0.0, np.inf, -np.inf, np.nan, 1e-45, 3.4e38, 7.0]


def _broadcast(value, dtype, shape=SHAPE, lead=1):
    return np.broadcast_to(np.array(value, dtype).reshape((1,) * lead), shape)


@pytest.mark.parametrize("f", [np.add, np.subtract, np.multiply, np.true_divide])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, np.int32, np.int64])
@pytest.mark.parametrize("other", [3, 0.1, -2.0, "array"])
def test_fill_is_the_ufunc_bits(f, dtype, other):
    assert np.prod(SHAPE) >= kernels.CONSTANT_MIN_ELEMS
    for value in VALUES:
        if np.issubdtype(dtype, np.integer) and not np.isfinite(value):
            continue
        if np.issubdtype(dtype, np.integer) and f is np.true_divide:
            continue  # (the engine divides integers in a float dtype: not this path's case)
        with np.errstate(all="ignore"):
            a = _broadcast(np.array(value).astype(dtype), dtype)
            b = (
                _broadcast(np.array(1.5).astype(dtype), dtype, lead=2)
                if other == "array"
                else other
            )
            want = f(a, b)
            got = np.empty(SHAPE, want.dtype)
            assert kernels.constant_ufunc(f, (a, b), got)
            swapped = np.empty(SHAPE, want.dtype)
            assert kernels.constant_ufunc(f, (b, a), swapped)
            want_swapped = f(b, a)
        assert got.tobytes() == want.tobytes(), (f, dtype, value)
        assert swapped.tobytes() == want_swapped.tobytes(), (f, dtype, value)


def test_negative_and_zero_d_inputs():
    a = _broadcast(-0.0, np.float32)
    got = np.empty(SHAPE, np.float32)
    assert kernels.constant_ufunc(np.negative, (a,), got)
    assert got.tobytes() == np.negative(a).tobytes()
    z = np.array(4.0, np.float32)  # a 0-d array is one value too
    got = np.empty(SHAPE, np.float32)
    assert kernels.constant_ufunc(np.multiply, (z, a), got)
    assert got.tobytes() == np.multiply(z, a).tobytes()


def test_refused_cases_write_nothing():
    a = _broadcast(2.0, np.float32)
    full = np.arange(np.prod(SHAPE), dtype=np.float32).reshape(SHAPE)
    out = np.full(SHAPE, 9.0, np.float32)
    # an input that varies, an op that is not correctly rounded, a mask, an out with a repeat
    assert not kernels.constant_ufunc(np.add, (a, full), out)
    assert not kernels.constant_ufunc(np.exp, (a,), out)
    assert not kernels.constant_ufunc(np.add, (a, 1.0), out, {"where": full > 3})
    rep = np.broadcast_to(np.zeros(1, np.float32), SHAPE)
    assert not kernels.constant_ufunc(np.add, (a, 1.0), rep)
    assert not kernels.constant_ufunc(np.add, (a, object()), out)
    assert (out == 9.0).all()


def test_kernels_ufunc_takes_it_with_a_dtype():
    a = _broadcast(3.0, np.float32)
    out = np.empty(SHAPE, np.float64)
    kernels.ufunc(np.multiply, a, 0.1, out=out, dtype=np.float64, casting="unsafe")
    want = np.multiply(a, 0.1, dtype=np.float64, casting="unsafe")
    assert out.tobytes() == want.tobytes()


@pytest.mark.parametrize("reduce", ["mean", "sum"])
def test_mean_and_sum_backward_values_and_memory(reduce):
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(0).standard_normal((8, 16, 12, 12)).astype(np.float32)
    xe = engine.tensor(x, requires_grad=True)
    xt = torch.tensor(x, requires_grad=True)
    (getattr(xe, reduce)() * 3.0).backward()
    (getattr(xt, reduce)() * 3.0).backward()
    assert xe.grad.numpy().tobytes() == xt.grad.numpy().tobytes()
    # the division's result is a new tensor of the input's size, as torch's mean_backward
    ge = engine.tensor(np.float32(2.0)).reshape(1, 1).expand(64, 128)
    before = engine.memory.memory_allocated()
    y = ge / 7
    assert engine.memory.memory_allocated() - before == 64 * 128 * 4
    assert y.stride() == (128, 1)
    assert (y.numpy() == np.float32(2.0) / np.float32(7)).all()
