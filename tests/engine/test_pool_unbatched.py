"""2-D pooling of an unbatched [C, H, W] input is one node, as torch's kernels take it (no
unsqueeze/squeeze around it; the 1-D composites keep torch's own pair): values, gradients,
node chains, every block forward and backward as torch's profiler shows it, and torch's
refusals of other ranks."""

from __future__ import annotations

import numpy as np
import pytest

import engine
from tests.conftest import assert_raises_as_torch, node_chain
from tests.engine.test_memory_vs_torch import assert_steps_as_torch, forward_backward

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(21)
X = RNG.standard_normal((3, 11, 9))
X1 = RNG.standard_normal((4, 17))

CASES = {  # name -> (input, call(F, x))
    "max_tiled": (X, lambda F, x: F.max_pool2d(x, 2)),
    "max_overlap": (X, lambda F, x: F.max_pool2d(x, 3, stride=2, padding=1, ceil_mode=True)),
    "max_indices": (X, lambda F, x: F.max_pool2d(x, 2, return_indices=True)[0]),
    "avg": (X, lambda F, x: F.avg_pool2d(x, 3, stride=2)),
    "avg_no_pad_count": (
        X,
        lambda F, x: F.avg_pool2d(x, 3, stride=2, padding=1, count_include_pad=False),
    ),
    "adaptive": (X, lambda F, x: F.adaptive_avg_pool2d(x, (4, 3))),
    "adaptive_global": (X, lambda F, x: F.adaptive_avg_pool2d(x, 1)),  # torch: a mean
    "adaptive_global_batched": (
        RNG.standard_normal((8, 16, 10, 10)),
        lambda F, x: F.adaptive_avg_pool2d(x, (1, 1)),
    ),
    "max_1d": (X1, lambda F, x: F.max_pool1d(x, 3, stride=2)),
    "avg_1d": (X1, lambda F, x: F.avg_pool1d(x, 4)),
    "adaptive_1d": (X1, lambda F, x: F.adaptive_avg_pool1d(x, 5)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_values_gradients_and_nodes_as_torch(name):
    arr, call = CASES[name]
    out = {}
    for m in (engine, torch):
        x = m.tensor(arr, requires_grad=True)
        y = call(m.nn.functional, x)
        y.backward(m.tensor(np.random.default_rng(3).standard_normal(tuple(y.shape))))
        out[m] = (y.detach().numpy(), x.grad.numpy(), node_chain(y.grad_fn))
    (ey, eg, en), (ty, tg, tn) = out[engine], out[torch]
    np.testing.assert_allclose(ey, ty, rtol=1e-13, atol=1e-14)
    np.testing.assert_allclose(eg, tg, rtol=1e-13, atol=1e-14)
    assert en == tn
    if arr.ndim == 3:
        assert len(en) == 1  # one node: the pooling (or, to 1x1, torch's mean)


@pytest.mark.parametrize("name", sorted(CASES))
def test_allocations_forward_and_backward_as_torch(name):
    arr, call = CASES[name]

    def make(m):
        x = m.tensor(arr.astype(np.float32), requires_grad=True)
        return forward_backward(m, lambda: call(m.nn.functional, x) * 2.0)

    assert_steps_as_torch(make)


def test_unbatched_on_meta():
    x = engine.ones(3, 11, 9, device="meta", requires_grad=True)
    y = engine.nn.functional.max_pool2d(x, 2)
    assert tuple(y.shape) == (3, 5, 4) and y.grad_fn.name() == "MaxPool2DWithIndicesBackward0"
    y.backward(engine.ones_like(y))
    assert tuple(x.grad.shape) == (3, 11, 9)


@pytest.mark.parametrize(
    "call",
    [
        lambda m: m.nn.functional.max_pool2d(m.ones(8, 8), 2),
        lambda m: m.nn.functional.max_pool2d(m.ones(1, 2, 3, 8, 8), 2),
        lambda m: m.nn.functional.avg_pool2d(m.ones(8, 8), 2),
        lambda m: m.nn.functional.avg_pool2d(m.ones(1, 2, 3, 8, 8), 2),
        lambda m: m.nn.functional.adaptive_avg_pool2d(m.ones(8, 8), 2),
        lambda m: m.nn.functional.adaptive_avg_pool2d(m.ones(1, 2, 3, 8, 8), 2),
    ],
)
def test_refusals_as_torch(call):
    assert_raises_as_torch(call)
