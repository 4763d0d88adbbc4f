"""torch.nn.functional's other names for pooling and upsampling against torch 2.13: the
`*_with_indices` forms of max and adaptive max pooling (always (output, indices)) and the
deprecated upsample / upsample_nearest / upsample_bilinear (interpolate, bilinear with
align_corners=True): values, indices, gradients, node names, warnings and every block forward
and backward as torch's CPU profiler shows it."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import engine
from tests.engine.test_memory_vs_torch import assert_steps_as_torch, forward_backward

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(5)
X3, X4, X5 = (RNG.standard_normal(s) for s in ((2, 3, 9), (2, 3, 8, 8), (1, 2, 5, 6, 6)))
F = "nn.functional."

CASES = {  # name -> (input, call(F, x)); pools return (output, indices)
    "max_pool1d_with_indices": (X3, lambda f, x: f.max_pool1d_with_indices(x, 3, 2, 1)),
    "max_pool2d_with_indices": (X4, lambda f, x: f.max_pool2d_with_indices(x, 2)),
    "max_pool2d_with_indices_ceil": (
        X4,
        lambda f, x: f.max_pool2d_with_indices(x, 3, 2, 1, 1, True, False),
    ),
    "max_pool3d_with_indices": (X5, lambda f, x: f.max_pool3d_with_indices(x, 2, 2)),
    "adaptive_max_pool1d_with_indices": (
        X3,
        lambda f, x: f.adaptive_max_pool1d_with_indices(x, 4),
    ),
    "adaptive_max_pool2d_with_indices": (
        X4,
        lambda f, x: f.adaptive_max_pool2d_with_indices(x, (3, 5)),
    ),
    "adaptive_max_pool3d_with_indices": (
        X5,
        lambda f, x: f.adaptive_max_pool3d_with_indices(x, 3),
    ),
    "upsample_nearest": (X4, lambda f, x: (f.upsample(x, scale_factor=2),)),
    "upsample_bilinear_mode": (
        X4,
        lambda f, x: (f.upsample(x, size=(5, 7), mode="bilinear", align_corners=False),),
    ),
    "upsample_linear": (X3, lambda f, x: (f.upsample(x, scale_factor=1.5, mode="linear"),)),
    "upsample_nearest_fn": (X4, lambda f, x: (f.upsample_nearest(x, size=11),)),
    "upsample_bilinear_fn": (X4, lambda f, x: (f.upsample_bilinear(x, scale_factor=2),)),
}


def _run(m, name):
    arr, call = CASES[name]
    x = m.tensor(arr, requires_grad=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = call(m.nn.functional, x)
    y = out[0] * 1.5
    y.backward(m.tensor(np.random.default_rng(2).standard_normal(tuple(y.shape))))
    node = y.grad_fn.next_functions[0][0].name()
    indices = out[1].numpy() if len(out) > 1 else None
    messages = [(w.category.__name__, str(w.message)) for w in caught]
    return y.detach().numpy(), indices, x.grad.numpy(), node, messages


@pytest.mark.parametrize("name", sorted(CASES))
def test_values_indices_gradients_nodes_and_warnings_as_torch(name):
    (ey, ei, eg, en, ew), (ty, ti, tg, tn, tw) = _run(engine, name), _run(torch, name)
    np.testing.assert_allclose(ey, ty, rtol=1e-13, atol=1e-14)
    if ti is not None:
        np.testing.assert_array_equal(ei, ti)
    np.testing.assert_allclose(eg, tg, rtol=1e-13, atol=1e-14)
    assert en == tn
    assert ew == tw


@pytest.mark.parametrize("name", sorted(CASES))
def test_allocations_forward_and_backward_as_torch(name):
    arr, call = CASES[name]

    def make(m):
        x = m.tensor(arr.astype(np.float32), requires_grad=True)
        held = {}

        def run():
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                out = call(m.nn.functional, x)
            held["rest"] = out[1:]  # the indices stay alive, as a caller's would
            return out[0]

        return forward_backward(m, run)

    assert_steps_as_torch(make)


def test_return_indices_argument_is_ignored_as_in_torch():
    for m in (engine, torch):
        out = m.nn.functional.max_pool2d_with_indices(m.ones(1, 1, 4, 4), 2, return_indices=False)
        assert isinstance(out, tuple) and len(out) == 2
        out = m.nn.functional.adaptive_max_pool1d_with_indices(m.ones(1, 2, 4), 2)
        assert isinstance(out, tuple) and len(out) == 2


def test_meta_shapes():
    f = engine.nn.functional
    y, i = f.max_pool3d_with_indices(engine.empty(1, 2, 4, 4, 4, device="meta"), 2)
    assert tuple(y.shape) == tuple(i.shape) == (1, 2, 2, 2, 2) and str(i.dtype) == "engine.int64"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        z = f.upsample_bilinear(engine.empty(1, 2, 3, 4, device="meta"), scale_factor=2)
    assert tuple(z.shape) == (1, 2, 6, 8)
