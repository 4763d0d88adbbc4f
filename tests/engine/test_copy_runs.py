"""kernels.copy_runs: a strided copy (or copy plus a bias along axis 1) of runs along a contiguous
last axis, compiled (engine._native) or numpy's. It gives numpy's result bit for bit for any
layout it takes, on any number of threads, and refuses what it cannot take."""

from __future__ import annotations

import numpy as np
import pytest

from engine import kernels

from .conftest import NATIVE

rng = np.random.default_rng(0)


def _layouts(dtype):
    """(src, dst) pairs: the layouts of a convolution's product and columns, and others."""
    a = rng.standard_normal((5, 6, 7, 9)).astype(dtype)
    a.flat[0], a.flat[1] = -0.0, np.nan
    padded = rng.standard_normal((6, 5, 7, 12)).astype(dtype)
    out = []
    # samples and channels swapped, the outputs cut from a padded width
    out.append((padded[..., :9].transpose(1, 0, 2, 3), np.empty((5, 6, 7, 9), dtype)))
    # into a strided window of a larger buffer
    big = np.zeros((8, 7, 9, 11), dtype)
    out.append((a, big[1:6, :6, 2:9, 1:10]))
    # negative strides on the outer axes
    out.append((a[::-1, :, ::-2], np.empty((5, 6, 4, 9), dtype)))
    # as_strided windows (overlapping reads), 5-D like the wide columns
    flat = rng.standard_normal(3 * 200).astype(dtype).reshape(3, 200)
    s0, s1 = flat.strides
    win = np.lib.stride_tricks.as_strided(flat, (3, 3, 3, 2, 40), (s0, 10 * s1, s1, 60 * s1, s1))
    out.append((win, np.empty(win.shape, dtype)))
    # 1-D, 2-D, and a last axis of one element (any stride)
    out.append((a.reshape(-1)[:50], np.empty(50, dtype)))
    out.append((a[:, 0, 0, :], np.empty((5, 9), dtype)))
    out.append((a[..., :1], np.empty((5, 6, 7, 1), dtype)))
    return out


def _expected(src, dst, bias):
    ref = np.array(dst, copy=True)
    if bias is None:
        np.copyto(ref, src)
    else:
        np.add(src, bias.reshape((-1,) + (1,) * (src.ndim - 2)), out=ref)
    return ref


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("with_bias", [False, True])
def test_copies_give_numpys_bits(kernel_form, dtype, with_bias):
    for src, dst in _layouts(dtype):
        bias = None
        if with_bias:
            if src.ndim < 3:
                continue
            bias = rng.standard_normal(src.shape[1]).astype(dtype)
        ref = _expected(src, dst, bias)
        kernels.copy_runs(src, dst, bias)
        assert dst.tobytes() == ref.tobytes()


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_the_same_on_any_number_of_threads(kernel_form, monkeypatch, threads):
    monkeypatch.setattr(kernels, "_blas_last", -float("inf"))  # the threads take the work
    src = rng.standard_normal((64, 33, 16, 18)).astype(np.float32)[..., :16].transpose(1, 0, 2, 3)
    bias = rng.standard_normal(64).astype(np.float32)
    before = kernels.get_num_threads()
    try:
        kernels.set_num_threads(threads)
        dst = np.empty(src.shape, np.float32)
        kernels.copy_runs(src, dst, bias)
        assert dst.tobytes() == _expected(src, dst, bias).tobytes()
    finally:
        kernels.set_num_threads(before)


def test_what_the_loop_cannot_take_goes_to_numpy(monkeypatch):
    calls = []
    if NATIVE is not None:
        monkeypatch.setattr(kernels, "native", _Counting(NATIVE, calls))
    a = rng.standard_normal((4, 5, 6)).astype(np.float32)
    for src, dst in [
        (a[:, :, ::2], np.empty((4, 5, 3), np.float32)),  # last axis strided
        (a.astype(np.float16), np.empty((4, 5, 6), np.float16)),  # another dtype
        (a, np.empty((4, 5, 6), np.float64)),  # mixed dtypes
    ]:
        kernels.copy_runs(src, dst)
        np.testing.assert_array_equal(dst, src.astype(dst.dtype))
    assert calls == []


class _Counting:
    def __init__(self, real, calls):
        self.real, self.calls = real, calls

    def copy_runs(self, *args):
        self.calls.append(args)
        return self.real.copy_runs(*args)


def test_the_compiled_loop_refuses_bad_buffers():
    if NATIVE is None:
        pytest.skip("engine._native is not built")
    a = np.ones((2, 3, 4), np.float32)
    with pytest.raises(ValueError, match="one shape"):
        NATIVE.copy_runs(a, np.empty((2, 3, 5), np.float32), None)
    with pytest.raises(ValueError, match="contiguous"):
        NATIVE.copy_runs(a[:, :, ::2], np.empty((2, 3, 2), np.float32), None)
    with pytest.raises(ValueError, match="float32 or float64 alike"):
        NATIVE.copy_runs(a, np.empty((2, 3, 4)), None)
    with pytest.raises(ValueError, match="per index of axis 1"):
        NATIVE.copy_runs(a, np.empty_like(a), np.ones(2, np.float32))
    with pytest.raises(ValueError, match="3 with bias"):
        NATIVE.copy_runs(a[0], np.empty((3, 4), np.float32), np.ones(3, np.float32))
    with pytest.raises((ValueError, BufferError)):  # read-only destination
        ro = np.empty_like(a)
        ro.flags.writeable = False
        NATIVE.copy_runs(a, ro, None)
