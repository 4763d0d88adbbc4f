"""F.max_unpool1d / max_unpool2d and nn.MaxUnpool1d / MaxUnpool2d against torch 2.13: values,
gradients, node chains (the 1-D form is torch's unsqueeze, 2-D op, squeeze), every block
forward and backward as torch's CPU profiler shows it (the zero-filled output; backward one
input-sized gather; the node keeps the indices, not the input), reprs, refusals, meta."""

from __future__ import annotations

import numpy as np
import pytest

import engine
from tests.conftest import assert_raises_as_torch, node_chain
from tests.engine.test_memory_vs_torch import assert_steps_as_torch, forward_backward

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(23)
X2 = RNG.standard_normal((2, 3, 8, 8))
X1 = RNG.standard_normal((2, 3, 11))

CASES = {  # name -> (input, pool(F, x) -> (values, indices), unpool(F, v, i))
    "2d": (X2, lambda F, x: F.max_pool2d(x, 2, return_indices=True),
           lambda F, v, i: F.max_unpool2d(v, i, 2)),
    "2d_output_size": (X2, lambda F, x: F.max_pool2d(x, 2, return_indices=True),
                       lambda F, v, i: F.max_unpool2d(v, i, 2, output_size=[2, 3, 8, 8])),
    "2d_overlapping": (X2, lambda F, x: F.max_pool2d(x, 3, stride=2, padding=1, return_indices=True),
                       lambda F, v, i: F.max_unpool2d(v, i, 3, stride=2, padding=1, output_size=(8, 8))),
    "2d_unbatched": (X2[0], lambda F, x: F.max_pool2d(x, 2, return_indices=True),
                     lambda F, v, i: F.max_unpool2d(v, i, 2)),
    "1d": (X1, lambda F, x: F.max_pool1d(x, 2, return_indices=True),
           lambda F, v, i: F.max_unpool1d(v, i, 2, output_size=[11])),
    "1d_strided": (X1, lambda F, x: F.max_pool1d(x, 3, stride=2, return_indices=True),
                   lambda F, v, i: F.max_unpool1d(v, i, 3, stride=2)),
}  # fmt: skip


def _pooled(m, name):
    arr, pool, _ = CASES[name]
    values, indices = pool(m.nn.functional, m.tensor(arr))
    return values.detach(), indices


@pytest.mark.parametrize("name", sorted(CASES))
def test_values_gradients_and_nodes_as_torch(name):
    out = {}
    for m in (engine, torch):
        v, i = _pooled(m, name)
        v = v.clone().requires_grad_()
        y = CASES[name][2](m.nn.functional, v * 1.0, i)
        y.backward(m.tensor(np.random.default_rng(1).standard_normal(tuple(y.shape))))
        out[m] = (y.detach().numpy(), v.grad.numpy(), node_chain(y.grad_fn))
    (ey, eg, en), (ty, tg, tn) = out[engine], out[torch]
    np.testing.assert_array_equal(ey, ty)
    np.testing.assert_array_equal(eg, tg)
    assert en == tn


@pytest.mark.parametrize("name", sorted(CASES))
def test_allocations_forward_and_backward_as_torch(name):
    def make(m):
        v, i = _pooled(m, name)
        v = v.float().requires_grad_()
        return forward_backward(m, lambda: CASES[name][2](m.nn.functional, v * 2.0, i))

    assert_steps_as_torch(make)


def test_modules_as_torch():
    for args, kw in [((2,), {}), ((3,), {"stride": 2, "padding": 1}), (((2, 3),), {})]:
        e, t = engine.nn.MaxUnpool2d(*args, **kw), torch.nn.MaxUnpool2d(*args, **kw)
        assert repr(e) == repr(t)
    assert repr(engine.nn.MaxUnpool1d(3, stride=2)) == repr(torch.nn.MaxUnpool1d(3, stride=2))
    outs = []
    for m in (engine, torch):
        pool, unpool = m.nn.MaxPool2d(2, return_indices=True), m.nn.MaxUnpool2d(2)
        v, i = pool(m.tensor(X2))
        outs.append(unpool(v, i).numpy())
    np.testing.assert_array_equal(*outs)


def test_meta_shapes_and_backward():
    v = engine.ones(2, 3, 4, 4, device="meta", requires_grad=True)
    i = engine.zeros(2, 3, 4, 4, dtype=engine.int64, device="meta")
    y = engine.nn.functional.max_unpool2d(v, i, 2)
    assert tuple(y.shape) == (2, 3, 8, 8) and y.grad_fn.name() == "MaxUnpool2DBackward0"
    y.backward(engine.ones_like(y))
    assert tuple(v.grad.shape) == (2, 3, 4, 4)


def _pair(m):
    return m.nn.functional.max_pool2d(m.tensor(X2[:, :, :4, :4]), 2, return_indices=True)


@pytest.mark.parametrize(
    "call",
    [
        lambda m: m.nn.functional.max_unpool2d(_pair(m)[0], _pair(m)[1].int(), 2),
        lambda m: m.nn.functional.max_unpool2d(_pair(m)[0], _pair(m)[1][:, :, :1], 2),
        lambda m: m.nn.functional.max_unpool2d(_pair(m)[0][0, 0], _pair(m)[1][0, 0], 2),
        lambda m: m.nn.functional.max_unpool2d(*_pair(m), 2, output_size=(9, 9)),
        lambda m: m.nn.functional.max_unpool2d(*_pair(m), 2, output_size=(4, 4, 4)),
    ],
)
def test_refusals_as_torch(call):
    assert_raises_as_torch(call)


def test_an_index_out_of_the_output_is_refused_as_torch():
    # (which invalid index the message names depends on torch's threads: the words around it)
    for m in (engine, torch):
        v, i = _pair(m)
        with pytest.raises(RuntimeError, match=r"^Found an invalid max index: \d+ \(output "):
            m.nn.functional.max_unpool2d(v, i + 100, 2)
