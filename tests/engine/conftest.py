"""Fixtures of the engine's tests."""

from __future__ import annotations

import pytest

from engine import kernels

NATIVE = kernels.native  # engine._native, or None (not built, or MEMPROF_NATIVE=0)


@pytest.fixture(params=["numpy", "native"])
def kernel_form(request, monkeypatch):
    """Which form a kernel with a compiled loop runs: numpy's passes, or engine._native's loop
    (skipped where it is off). The two must give the same bits."""
    if request.param == "native":
        if NATIVE is None:
            pytest.skip("engine._native is off (not built, or MEMPROF_NATIVE=0): numpy form only")
        monkeypatch.setattr(kernels, "native", NATIVE)
    else:
        monkeypatch.setattr(kernels, "native", None)
    return request.param


@pytest.fixture(autouse=True)
def _blas_not_held():
    """Each test starts with BLAS's own thread count: a stall that kernels.gemm's guard saw in
    an earlier test (a busy machine running the suite) would otherwise hold BLAS to one thread
    for CONTENDED_S into this one, which tests reading BLAS's count would see."""
    kernels._end_contention()
    kernels._stalls = 0
