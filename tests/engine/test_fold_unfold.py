"""F.unfold (im2col) and F.fold (col2im), nn.Unfold / nn.Fold against torch 2.13: values,
gradients (float64, central differences too), node names, every block forward and backward as
torch's CPU profiler shows it (the result made as empty_like(input) and resized: an
input-sized block first, a smaller result living in it; a non-contiguous input's copy),
reprs, refusals, meta."""

from __future__ import annotations

import numpy as np
import pytest

import engine
from tests.conftest import assert_raises_as_torch
from tests.engine.test_memory_vs_torch import assert_steps_as_torch, forward_backward

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(17)
IMG = RNG.standard_normal((2, 3, 8, 9))
COLS = RNG.standard_normal((2, 12, 30))

CASES = {  # name -> (input, call(F, x))
    "unfold": (IMG, lambda F, x: F.unfold(x, (3, 2), dilation=(1, 2), padding=1, stride=(2, 1))),
    "unfold_square": (IMG, lambda F, x: F.unfold(x, 3)),
    "unfold_smaller_than_input": (IMG, lambda F, x: F.unfold(x, 2, stride=3)),
    "unfold_unbatched": (IMG[0], lambda F, x: F.unfold(x, 3, padding=1)),
    "unfold_transposed": (IMG, lambda F, x: F.unfold(x.transpose(2, 3), 3)),
    "fold": (COLS, lambda F, x: F.fold(x, (6, 7), (2, 2))),
    "fold_unbatched": (COLS[0], lambda F, x: F.fold(x, (6, 7), 2)),
    "fold_padded_strided": (
        RNG.standard_normal((2, 27, 4)),
        lambda F, x: F.fold(x, (4, 4), 3, stride=2, padding=1),
    ),
    "fold_transposed": (
        COLS.transpose(0, 2, 1).copy(),
        lambda F, x: F.fold(x.transpose(1, 2), (6, 7), 2),
    ),
    "fold_dilated": (
        RNG.standard_normal((1, 8, 24)),
        lambda F, x: F.fold(x, (6, 7), 2, dilation=(2, 1)),
    ),
}


def _run(m, name):
    arr, call = CASES[name]
    x = m.tensor(arr, requires_grad=True)
    y = call(m.nn.functional, x)
    y.backward(m.tensor(np.random.default_rng(2).standard_normal(tuple(y.shape))))
    return y.detach().numpy(), x.grad.numpy(), y.grad_fn.name()


@pytest.mark.parametrize("name", sorted(CASES))
def test_values_gradients_and_node_as_torch(name):
    (ey, eg, en), (ty, tg, tn) = _run(engine, name), _run(torch, name)
    np.testing.assert_allclose(ey, ty, rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(eg, tg, rtol=1e-13, atol=1e-13)
    assert en == tn


@pytest.mark.parametrize("name", sorted(CASES))
def test_allocations_forward_and_backward_as_torch(name):
    arr, call = CASES[name]

    def make(m):
        x = m.tensor(arr.astype(np.float32), requires_grad=True)
        return forward_backward(m, lambda: call(m.nn.functional, x * 2.0))

    assert_steps_as_torch(make)


def test_gradients_match_central_differences():
    from tests.engine.test_nn import gradcheck

    def fn(m, x):
        cols = m.nn.functional.unfold(x, 2, padding=1, stride=(1, 2))
        return m.nn.functional.fold(cols, (3, 4), 2, padding=1, stride=(1, 2))

    gradcheck(fn, [RNG.standard_normal((1, 2, 3, 4))], torch=torch)


def test_modules_as_torch():
    for e, t, arr in [
        (engine.nn.Unfold(3, padding=1), torch.nn.Unfold(3, padding=1), IMG),
        (engine.nn.Fold((6, 7), (2, 2)), torch.nn.Fold((6, 7), (2, 2)), COLS),
    ]:
        assert repr(e) == repr(t)
        np.testing.assert_allclose(
            e(engine.tensor(arr)).numpy(), t(torch.tensor(arr)).numpy(), rtol=1e-13
        )


def test_tensor_unfold_is_still_the_window_view():
    x = engine.arange(10.0)
    assert x.unfold(0, 3, 2).shape == (4, 3) and x.unfold(0, 3, 2)._base is not None


def test_meta_shapes_and_backward():
    x = engine.ones(2, 3, 8, 9, device="meta", requires_grad=True)
    cols = engine.nn.functional.unfold(x, 3)
    y = engine.nn.functional.fold(cols, (8, 9), 3)
    assert tuple(cols.shape) == (2, 27, 42) and tuple(y.shape) == (2, 3, 8, 9)
    y.backward(engine.ones_like(y))
    assert tuple(x.grad.shape) == (2, 3, 8, 9)


@pytest.mark.parametrize(
    "call",
    [
        lambda m: m.nn.functional.unfold(m.ones(8, 9), 3),
        lambda m: m.nn.functional.unfold(m.ones(1, 2, 8, 9, 3), 3),
        lambda m: m.nn.functional.unfold(m.ones(1, 2, 2, 2), 3),
        lambda m: m.nn.functional.unfold(m.ones(1, 2, 8, 8), 3, stride=0),
        lambda m: m.nn.functional.unfold(m.ones(1, 2, 8, 8), 0),
        lambda m: m.nn.functional.unfold(m.ones(1, 2, 8, 8), 3, dilation=0),
        lambda m: m.nn.functional.unfold(m.ones(1, 2, 8, 8), 3, padding=-1),
        lambda m: m.nn.functional.fold(m.ones(2, 12, 20), (6, 7), (2, 2)),
        lambda m: m.nn.functional.fold(m.ones(2, 13, 30), (6, 7), (2, 2)),
        lambda m: m.nn.functional.fold(m.ones(12), (6, 7), (2, 2)),
    ],
)
def test_refusals_as_torch(call):
    assert_raises_as_torch(call)
