"""The cuda backend's float4 kernels (engine/backends/cuda_fast.py) against CuPy's own ufuncs.

They run only where CuPy sees a GPU; elsewhere the dispatch rules (what falls back to CuPy's
ufuncs) are checked without one.
"""

from __future__ import annotations

import numpy as np
import pytest

from engine.backends import cuda_fast
from tests.conftest import requires_cuda

# sizes around the float4 body and its tail, and one that takes several grid strides
SIZES = [1, 3, 4, 5, 17, 1024, 4099, 4 * 256 * 4096 + 7]


def test_numpy_arrays_and_other_dtypes_are_left_to_the_caller():
    x = np.ones(8, np.float32)
    assert cuda_fast.unary("exp", x, x.copy()) is False
    assert cuda_fast.binary("add", x, 1.0, x.copy()) is False
    assert cuda_fast.unary("no-such-op", x, x) is False


def test_every_kernel_source_names_its_function_and_reads_its_operands():
    for name, expr in cuda_fast.UNARY.items():
        src = cuda_fast._source(f"k_{name}", expr, "u")
        assert f"__global__ void k_{name}(const float* __restrict__ x," in src
        assert src.count(expr) == 5  # four float4 lanes and the tail
    for expr in cuda_fast.BINARY.values():
        for operands in ("tt", "ts", "st"):
            src = cuda_fast._source("k", expr, operands)
            assert src.count(expr) == 5
            assert ("const float s" in src) == (operands != "tt")


@pytest.mark.cuda
@requires_cuda
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("name", sorted(cuda_fast.UNARY))
def test_unary_equals_cupy(name, n):
    import cupy as cp

    rng = np.random.default_rng(n)
    x = cp.asarray(rng.standard_normal(n).astype(np.float32))
    if name in ("log", "sqrt"):
        x = cp.abs(x) + 0.1
    out = cp.empty_like(x)
    assert cuda_fast.unary(name, x, out)
    ref = {"relu": lambda v: cp.maximum(v, 0), "sigmoid": lambda v: 1 / (1 + cp.exp(-v))}
    expected = ref.get(name, getattr(cp, name, None))(x)
    cp.testing.assert_allclose(out, expected, rtol=2e-6, atol=1e-7)


@pytest.mark.cuda
@requires_cuda
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("name", sorted(cuda_fast.BINARY))
def test_binary_equals_cupy_for_arrays_and_scalars(name, n):
    import cupy as cp

    rng = np.random.default_rng(n)
    a = cp.asarray(rng.standard_normal(n).astype(np.float32))
    b = cp.asarray((rng.standard_normal(n) + 3).astype(np.float32))
    f = getattr(cp, name)
    for left, right in ((a, b), (a, 1.5), (2, b), (0.25, a)):
        out = cp.empty(n, cp.float32)
        assert cuda_fast.binary(name, left, right, out)
        cp.testing.assert_allclose(out, f(left, right), rtol=2e-6, atol=1e-7)


@pytest.mark.cuda
@requires_cuda
def test_in_place_nan_and_what_falls_back():
    import cupy as cp

    x = cp.asarray(np.array([-1, 0, 2, np.nan, -np.inf, np.inf, -3, 4, 5], np.float32))
    assert cuda_fast.unary("relu", x, x)  # in place: out is x
    np.testing.assert_array_equal(cp.asnumpy(x)[[0, 2, 4, 5, 6]], [0, 2, 0, np.inf, 0])
    assert np.isnan(cp.asnumpy(x)[3])
    big = cp.ones(64, cp.float32)
    assert not cuda_fast.unary("exp", big[1:33], cp.empty(32, cp.float32))  # 4-byte offset
    assert not cuda_fast.unary("exp", big[::2], cp.empty(32, cp.float32))  # strided
    assert not cuda_fast.unary("exp", big.astype(cp.float64), cp.empty(64, cp.float64))
    assert not cuda_fast.binary("add", big, big[:1], cp.empty(64, cp.float32))  # broadcast
    assert not cuda_fast.binary("add", big, True, cp.empty(64, cp.float32))  # bool scalar
