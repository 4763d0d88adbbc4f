"""Matrix products on engine._native's threads when the engine owns the thread budget
(set_num_threads(n, own_blas=True)): numpy's own cblas gemm called from the loops' threads, a
part each, for contiguous, transposed and batched operands; anything else goes to numpy."""

from __future__ import annotations

import numpy as np
import pytest

from engine import kernels

from .conftest import NATIVE

pytestmark = pytest.mark.skipif(NATIVE is None, reason="engine._native is not built")


@pytest.fixture
def owned():
    pytest.importorskip("threadpoolctl")
    before = kernels.get_num_threads()
    kernels.set_num_threads(2, own_blas=True)
    if not kernels._load_native_gemm():
        kernels.set_num_threads(before, own_blas=False)
        pytest.skip("numpy's BLAS is not an OpenBLAS whose gemm ctypes can find")
    yield
    kernels.set_num_threads(before, own_blas=False)


def _cases(dtype):
    rng = np.random.default_rng(0)

    def r(*shape):
        return rng.standard_normal(shape).astype(dtype)

    return {
        "plain": (r(64, 288), r(288, 3000)),
        "batched_a": (r(3, 64, 288), r(288, 864)),
        "b_transposed": (r(512, 512), r(10, 512).T),
        "a_transposed": (r(512, 64).T, r(512, 300)),
        "both_batched_a_t": (r(4, 64, 128).transpose(0, 2, 1), r(4, 64, 128)),
        "both_batched_b_t": (r(4, 128, 64), r(4, 128, 64).transpose(0, 2, 1)),
        "one_batch": (r(1, 300, 200), r(200, 300)),
        "broadcast_b": (r(4, 300, 200), r(1, 200, 300)),
        "rows_of_one": (r(4, 1, 200), r(200, 3000)),
        "k_one": (r(3000, 1), r(1, 4000)),
    }


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", list(_cases(np.float32)))
def test_products_on_the_loops_threads_equal_numpys(owned, name, dtype):
    a, b = _cases(dtype)[name]
    ref = a @ b
    out = np.full(ref.shape, np.nan, dtype)
    assert kernels._gemm_operands(a, b, out) is not None  # the compiled path takes it
    kernels.gemm(a, b, out)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(out, ref, rtol=tol, atol=tol * 10)


def test_other_layouts_go_to_numpy(owned):
    rng = np.random.default_rng(1)
    a = rng.standard_normal((3, 100, 100))
    b = rng.standard_normal((100, 100))[:, ::2]  # strided columns
    out = np.empty((3, 100, 50))
    assert kernels._gemm_operands(a, b, out) is None
    kernels.gemm(a, b, out)
    np.testing.assert_allclose(out, a @ b, rtol=1e-12)
    a4 = rng.standard_normal((2, 3, 40, 50))  # 4-D
    out4 = np.empty((2, 3, 40, 60))
    assert kernels._gemm_operands(a4, rng.standard_normal((50, 60)), out4) is None
    mixed = np.empty((64, 300), np.float32)
    assert kernels._gemm_operands(a[0, :64], b.astype(np.float32), mixed) is None


def test_the_compiled_gemm_refuses_wrong_sizes(owned):
    a = np.ones((4, 5), np.float32)
    b = np.ones((5, 6), np.float32)
    out = np.empty((4, 6), np.float32)
    with pytest.raises(ValueError, match="hold"):
        NATIVE.gemm(a, b, out, 1, 4, 7, 5, 0, 0, False, False, 2)
    with pytest.raises(ValueError, match="invalid"):
        NATIVE.gemm(a, b, out, 1, 4, 6, 5, 3, 0, False, False, 2)
    NATIVE.gemm(a, b, out, 1, 4, 6, 5, 0, 0, False, False, 2)
    assert np.array_equal(out, a @ b)
