"""max_pool2d on the general path (overlapping windows, padding, dilation, ceil mode): values,
indices and gradients are PyTorch's bit for bit. Forward keeps a byte per output (the last
kernel offset that took over) instead of masked copies; backward adds the gradients at the
argmax positions in output order, as torch's kernel does, so that an input that is the maximum
of several windows gets the same float32 sum."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import engine
from engine.ops.nn.pool import _pool_geometry, _tiled

CASES = [
    (k, s, p, d, ceil)
    for k, s, p, d, ceil in itertools.product([1, 2, 3, 4], [1, 2, 3], [0, 1, 2], [1, 2], [0, 1])
    if p <= (d * (k - 1) + 1) // 2
]


def _input(kind: str, seed: int) -> np.ndarray:
    a = np.random.default_rng(seed).standard_normal((2, 3, 11, 9)).astype(np.float32)
    if kind == "ties":
        a = np.round(a)  # many equal values: the first maximum of a window wins
    elif kind == "nan":
        a[a > 1.2] = np.nan  # the last NaN of a window wins
    elif kind == "zeros":
        a = np.where(np.abs(a) < 0.8, np.copysign(np.float32(0), a), a)  # ties of +0 and -0
    elif kind == "ninf":
        a[a < 0.3] = -np.inf  # all -inf windows: the first in-bounds position
    return a


@pytest.mark.parametrize("kind", ["rand", "ties", "zeros", "nan", "ninf"])
def test_values_and_indices_are_torchs_on_every_geometry(kind, torch, kernel_form):
    checked = general = 0
    for i, (k, s, p, d, ceil) in enumerate(CASES):
        a = _input(kind, i)
        try:
            ty, ti = torch.nn.functional.max_pool2d(
                torch.from_numpy(a), k, s, p, d, bool(ceil), return_indices=True
            )
        except RuntimeError:  # torch refuses the geometry (output too small)
            continue
        x = engine.tensor(a)
        ey, ei = engine.nn.functional.max_pool2d(x, k, s, p, d, bool(ceil), return_indices=True)
        # bits: a tie of +0 and -0 gives the first one's sign, a NaN the last NaN's payload
        assert ey.numpy().tobytes() == ty.numpy().tobytes(), (k, s, p, d, ceil)
        assert np.array_equal(ei.numpy(), ti.numpy()), (k, s, p, d, ceil)
        checked += 1
        general += not _tiled(_pool_geometry(x, k, s, p, d, bool(ceil), "max_pool2d"))
    assert (checked, general) == (96, 92)  # every geometry torch takes; 4 of them tile


@pytest.mark.parametrize("kind", ["rand", "ties", "zeros"])
def test_gradients_are_torchs_bit_for_bit(kind, torch, kernel_form):
    for i, (k, s, p, d, ceil) in enumerate(CASES):
        a = _input(kind, 100 + i)
        tx = torch.from_numpy(a.copy()).requires_grad_()
        try:
            ty = torch.nn.functional.max_pool2d(tx, k, s, p, d, bool(ceil))
        except RuntimeError:
            continue
        g = np.random.default_rng(i).standard_normal(tuple(ty.shape)).astype(np.float32)
        ty.backward(torch.from_numpy(g))
        ex = engine.tensor(a, requires_grad=True)
        engine.nn.functional.max_pool2d(ex, k, s, p, d, bool(ceil)).backward(engine.tensor(g))
        assert ex.grad.numpy().tobytes() == tx.grad.numpy().tobytes(), (k, s, p, d, ceil)


def test_overlapping_windows_by_hand():
    # 1x1x1x5 row, kernel 3 stride 1: 5 is the maximum of all three windows
    x = engine.tensor(np.array([[[[1.0, 5.0, 2.0, 0.0, 3.0]]]], np.float32), requires_grad=True)
    y, idx = engine.nn.functional.max_pool2d(x, (1, 3), 1, return_indices=True)
    assert y.tolist() == [[[[5.0, 5.0, 3.0]]]] and idx.tolist() == [[[[1, 1, 4]]]]
    y.backward(engine.tensor(np.array([[[[1.0, 2.0, 4.0]]]], np.float32)))
    assert x.grad.tolist() == [[[[0.0, 3.0, 0.0, 0.0, 4.0]]]]


WIDE_CASES = [
    (k, s, p, d)
    for k, s, p, d in itertools.product([1, 2, 3], [1, 2, 3], [0, 1], [1, 2])
    if p <= (d * (k - 1) + 1) // 2
]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("kind", ["rand", "ties", "zeros", "nan", "ninf"])
def test_wide_rows_are_torchs(kind, dtype, torch, kernel_form):
    # rows of 53: most windows lie wholly inside, which the compiled loop scans 8 at a time
    # side by side (the rest, and the padded borders, one by one); each window's value bits
    # and index are torch's all the same
    for i, (k, s, p, d) in enumerate(WIDE_CASES):
        a = _input(kind, 200 + i)  # (2, 3, 11, 9): tiled out to rows of 53
        a = np.concatenate([a] * 6, axis=-1)[..., :53].astype(dtype)
        a[..., 9:] = np.roll(a[..., 9:], i + 1, axis=-2)  # not periodic
        ty, ti = torch.nn.functional.max_pool2d(
            torch.from_numpy(a), k, s, p, d, return_indices=True
        )
        ey, ei = engine.nn.functional.max_pool2d(engine.tensor(a), k, s, p, d, return_indices=True)
        assert ey.numpy().tobytes() == ty.numpy().tobytes(), (k, s, p, d)
        assert np.array_equal(ei.numpy(), ti.numpy()), (k, s, p, d)
