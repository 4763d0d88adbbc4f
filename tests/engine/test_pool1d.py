"""1-D pooling (max_pool1d, avg_pool1d, adaptive_avg_pool1d: torch's unsqueeze, 2-D kernel,
squeeze) and the 2-D average pool's per-window divisors, against torch 2.13: values, gradients,
node chains, the blocks its CPU profiler shows forward and backward, module reprs, refusals."""

from __future__ import annotations

import numpy as np
import pytest

import engine
from tests.conftest import assert_raises_as_torch, node_chain
from tests.engine.test_memory_vs_torch import assert_steps_as_torch, forward_backward

torch = pytest.importorskip("torch")

X3 = np.random.default_rng(4).standard_normal((4, 8, 64))
X4 = np.random.default_rng(5).standard_normal((4, 8, 16, 16))

CASES = {
    "max_pool1d": (X3, lambda m, x: m.nn.functional.max_pool1d(x, 3, 2, 1)),
    "max_pool1d_ceil_dilated": (
        X3,
        lambda m, x: m.nn.functional.max_pool1d(x, 4, 3, 1, 2, ceil_mode=True),
    ),
    "max_pool1d_indices": (
        X3,
        lambda m, x: m.nn.functional.max_pool1d(x, 2, return_indices=True)[0],
    ),
    "avg_pool1d": (X3, lambda m, x: m.nn.functional.avg_pool1d(x, 3, 2, 1)),
    "avg_pool1d_exclude_pad": (
        X3,
        lambda m, x: m.nn.functional.avg_pool1d(x, 3, 2, 1, count_include_pad=False),
    ),
    "adaptive_avg_pool1d": (X3, lambda m, x: m.nn.functional.adaptive_avg_pool1d(x, 5)),
    "avg_pool2d_exclude_pad": (
        X4,
        lambda m, x: m.nn.functional.avg_pool2d(x, 3, 2, 1, count_include_pad=False),
    ),
    "avg_pool2d_ceil": (X4, lambda m, x: m.nn.functional.avg_pool2d(x, 3, 2, ceil_mode=True)),
    "modules": (
        X3,
        lambda m, x: m.nn.MaxPool1d(2)(x) + m.nn.AvgPool1d(2)(x) + m.nn.AdaptiveAvgPool1d(32)(x),
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_values_gradients_and_nodes_as_torch(name):
    arr, call = CASES[name]
    out = []
    for m in (engine, torch):
        x = m.tensor(arr, requires_grad=True)
        y = call(m, x) * 1.5
        y.backward(m.tensor(np.random.default_rng(6).standard_normal(tuple(y.shape))))
        out.append((y.detach().numpy(), x.grad.numpy(), node_chain(y.grad_fn.next_functions[0][0])))
    (ey, eg, en), (ty, tg, tn) = out
    np.testing.assert_allclose(ey, ty, rtol=1e-13, atol=1e-14)
    np.testing.assert_allclose(eg, tg, rtol=1e-13, atol=1e-14)
    assert en == tn


@pytest.mark.parametrize("name", sorted(CASES))
def test_allocations_forward_and_backward_as_torch(name):
    arr, call = CASES[name]

    def make(m):
        x = m.tensor(arr.astype(np.float32), requires_grad=True)
        return forward_backward(m, lambda: call(m, x) * 1.5)

    assert_steps_as_torch(make)


def test_module_reprs_as_torch():
    for name, args in [
        ("MaxPool1d", (3,)),
        ("MaxPool1d", (3, 2, 1, 2, True, True)),
        ("AvgPool1d", (3,)),
        ("AvgPool1d", (4, 2, 1)),
        ("AdaptiveAvgPool1d", (7,)),
    ]:
        assert repr(getattr(engine.nn, name)(*args)) == repr(getattr(torch.nn, name)(*args))


@pytest.mark.parametrize(
    "call",
    [
        lambda m: m.nn.functional.max_pool1d(m.ones(1, 1, 1, 4), 2),
        lambda m: m.nn.functional.max_pool1d(m.ones(4), 2),
        lambda m: m.nn.functional.avg_pool1d(m.ones(1, 1, 1, 4), 2),
        lambda m: m.nn.functional.adaptive_avg_pool1d(m.ones(1, 1, 1, 4), 2),
    ],
)
def test_refusals_as_torch(call):
    assert_raises_as_torch(call)
