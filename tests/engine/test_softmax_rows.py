"""The fused attention's softmax passes (kernels.softmax_rows): the compiled loop (engine._native)
gives the numpy forms' bits for every kind, row length (numpy's pairwise sum recurses above 128
values) and special value, on one thread and on several; and the passes are a softmax."""

from __future__ import annotations

import numpy as np
import pytest

from engine import kernels

from .conftest import NATIVE

LENGTHS = [1, 2, 7, 8, 9, 15, 16, 17, 64, 127, 128, 129, 130, 200, 255, 256, 257, 300, 1000, 4099]


def _scores(rows, L, dtype, seed):
    """Scores of any size, with the rows a masked attention meets: a fully masked row (-inf), a
    row with a NaN, +-inf, signed zeros, a row of one repeated value."""
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((rows, L)) * rng.uniform(0.01, 30, (rows, 1))).astype(dtype)
    x[0] = -np.inf
    x[1, L // 2] = np.nan
    x[2, 0] = np.inf
    x[3, :] = -0.0
    x[3, L - 1] = 0.0
    x[4] = dtype(1.5)
    x[5, ::3] = -np.inf
    x[6, 0] = dtype(-np.inf) if L > 1 else dtype(2.0)
    return x


def _passes(x, p):
    """Every kind in turn, as the attention runs them (exp between 0 and 1), and each result."""
    x = x.copy()
    v = np.empty(x.shape[:-1] + (1,), x.dtype)
    t = np.empty_like(v)
    out = []
    with np.errstate(all="ignore"):
        kernels.softmax_rows(x, v, 0)
        out += [x.copy(), v.copy()]
        np.exp(x, out=x)
        kernels.softmax_rows(x, t, 1)
        out += [x.copy(), t.copy()]
        kernels.softmax_rows(x, v, 2)
        out.append(x.copy())
        kernels.softmax_rows(x, t, 3, p)
        out.append(x.copy())
    return b"".join(a.tobytes() for a in out)


@pytest.mark.skipif(NATIVE is None, reason="engine._native is not built")
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("L", LENGTHS)
def test_compiled_loop_gives_the_numpy_forms_bits(monkeypatch, dtype, L):
    x = _scores(8 + L % 5, L, dtype, seed=L)
    p = np.random.default_rng(L + 1).standard_normal(x.shape).astype(dtype)
    monkeypatch.setattr(kernels, "native", None)
    numpy_form = _passes(x, p)
    monkeypatch.setattr(kernels, "native", NATIVE)
    assert _passes(x, p) == numpy_form
    monkeypatch.setattr(kernels, "native_threads", lambda n: 2)  # rows split across threads
    assert _passes(x, p) == numpy_form


@pytest.mark.skipif(NATIVE is None, reason="engine._native is not built")
def test_compiled_sum_is_numpys_sum_in_its_order(monkeypatch):
    """Kind 1's sums are numpy's own, bit for bit, over many magnitudes (a sum in another order
    differs in the last bits for most of these rows)."""
    rng = np.random.default_rng(7)
    for L in (9, 100, 129, 1000, 20000):
        x = (rng.standard_normal((6, L)) * 10.0 ** rng.integers(-3, 6, (6, 1))).astype(np.float32)
        x = np.abs(x)
        v = np.empty((6, 1), np.float32)
        kernels.softmax_rows(x.copy(), v, 1)
        assert v.tobytes() == x.sum(axis=-1, keepdims=True).tobytes()


def test_the_passes_make_a_softmax(kernel_form):
    x = _scores(9, 33, np.float64, seed=3)[7:]  # two rows of plain values
    v = np.empty((2, 1))
    t = np.empty((2, 1))
    y = x.copy()
    kernels.softmax_rows(y, v, 0)
    np.exp(y, out=y)
    kernels.softmax_rows(y, t, 1)
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    np.testing.assert_allclose(y, e / e.sum(axis=-1, keepdims=True), rtol=1e-15)
    np.testing.assert_allclose(v[:, 0] + np.log(t[:, 0]), np.log(np.exp(x).sum(axis=-1)))
    # a fully masked row: probabilities 0 (its maximum and sum replaced by 0 and 1)
    m = np.full((1, 5), -np.inf)
    kernels.softmax_rows(m, v[:1], 0)
    np.exp(m, out=m)
    kernels.softmax_rows(m, t[:1], 1)
    assert (m == 0).all() and v[0, 0] == 0 and t[0, 0] == 1
    # backward's two: x - v, and (x - v) * p
    z = np.arange(6.0).reshape(2, 3)
    kernels.softmax_rows(z, np.array([[1.0], [2.0]]), 2)
    assert z.tolist() == [[-1.0, 0.0, 1.0], [1.0, 2.0, 3.0]]
    kernels.softmax_rows(z, np.array([[1.0], [1.0]]), 3, np.full((2, 3), 2.0))
    assert z.tolist() == [[-4.0, -2.0, 0.0], [0.0, 2.0, 4.0]]
