"""max_pool2d over windows that tile the input (kernel == stride, no padding or dilation):
the engine's fast path (no masked index writes forward; one scatter backward) gives PyTorch's
values, indices (the first maximum of a window in row-major order) and gradients; a plane with
a NaN takes the general path, where the last NaN wins as in torch."""

from __future__ import annotations

import numpy as np
import pytest

import engine
from engine.ops.nn.pool import _pool_geometry, _tiled

GEOMETRIES = [
    ((2, 3, 8, 8), 2, 2, 0, False),  # tiled
    ((2, 3, 9, 7), 2, 2, 0, False),  # tiled, the last row/column left out
    ((2, 3, 9, 9), 3, 3, 0, False),  # tiled 3x3
    ((1, 2, 6, 6), (2, 3), (2, 3), 0, False),  # tiled, rectangular
    ((2, 3, 8, 8), 3, 2, 1, False),  # overlapping: the general path
    ((2, 3, 9, 9), 2, 2, 0, True),  # ceil mode with a partial window: the general path
]


def _input(shape, nan, seed=0):
    a = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    a[0, 0, :2, :2] = 1.0  # a tie inside the first window
    a[0, 1, :3, :3] = -2.0  # a tie of a whole window
    a[-1, 0, 2:4, 2:4] = [[-0.0, 0.0], [0.0, -0.0]]  # +0 and -0: the first one's sign
    a[-1, -1, 4:6, 4:6] = [[0.0, -0.0], [-0.0, 0.0]]
    if nan:
        a[-1, -1, 1, 1] = np.nan
        a[-1, -1, 0, 0] = np.nan
    return a


def test_which_geometries_tile():
    x = engine.zeros(2, 3, 9, 9, device="meta")
    tiled = [
        _tiled(_pool_geometry(x, k, s, p, 1, ceil, "max_pool2d")) for _, k, s, p, ceil in GEOMETRIES
    ]
    assert tiled == [True, True, True, True, False, False]


@pytest.mark.parametrize("nan", [False, True])
@pytest.mark.parametrize("shape, k, s, p, ceil", GEOMETRIES)
def test_values_indices_and_gradients_are_torchs(shape, k, s, p, ceil, nan, kernel_form):
    torch = pytest.importorskip("torch")
    a = _input(shape, nan)
    et, tt = engine.tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)
    ey, ei = engine.nn.functional.max_pool2d(et, k, s, p, ceil_mode=ceil, return_indices=True)
    ty, ti = torch.nn.functional.max_pool2d(tt, k, s, p, ceil_mode=ceil, return_indices=True)
    assert ey.detach().numpy().tobytes() == ty.detach().numpy().tobytes()
    assert np.array_equal(ei.numpy(), ti.numpy())
    g = np.random.default_rng(1).standard_normal(tuple(ty.shape)).astype(np.float32)
    ey.backward(engine.tensor(g))
    ty.backward(torch.tensor(g))
    np.testing.assert_allclose(et.grad.numpy(), tt.grad.numpy(), rtol=1e-6, atol=1e-6)


def test_the_tiled_path_charges_what_the_general_path_charges():
    x = engine.randn(4, 8, 16, 16, requires_grad=True)
    before = engine.memory.memory_allocated()
    y = engine.nn.functional.max_pool2d(x, 2, 2)
    out, idx = 4 * 8 * 8 * 8 * 4, 4 * 8 * 8 * 8 * 8
    assert engine.memory.memory_allocated() - before == out + idx  # values and kept indices
    y.sum().backward()
    assert x.grad.shape == x.shape


@pytest.mark.parametrize("accumulate", [False, True])
def test_the_compiled_backward_zeroes_each_plane_it_is_asked_to(accumulate):
    from .conftest import NATIVE

    if NATIVE is None:
        pytest.skip("engine._native is not built")
    rng = np.random.default_rng(1)
    planes, in_n, out_n = 5, 36, 9
    g = rng.standard_normal((planes, out_n)).astype(np.float32)
    idx = rng.integers(0, in_n, (planes, out_n)).astype(np.int64)
    expected = np.zeros((planes, in_n), np.float32)
    NATIVE.max_pool2d_backward(g, idx, expected, planes, in_n, out_n, accumulate)
    stale = np.full((planes, in_n), np.nan, np.float32)  # kernels.empty's leftovers
    NATIVE.max_pool2d_backward(g, idx, stale, planes, in_n, out_n, accumulate, 2, True)
    assert stale.tobytes() == expected.tobytes()
