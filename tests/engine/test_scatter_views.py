"""index_put / index_put_ (accumulate, bool masks), select_scatter, slice_scatter,
diagonal_scatter, as_strided_scatter and as_strided against torch 2.13: values, gradients,
node names, refusals, and the blocks its CPU profiler shows forward and backward."""

from __future__ import annotations

import numpy as np
import pytest

import engine
from tests.conftest import assert_raises_as_torch
from tests.engine.test_memory_vs_torch import assert_steps_as_torch, forward_backward

torch = pytest.importorskip("torch")


def _i(m, *v):
    return m.tensor(list(v))


CASES = {  # name -> (input shapes, call(m, *inputs))
    "index_put": ([(6, 5), (3, 5)], lambda m, x, v: x.index_put((_i(m, 0, 4, 2),), v)),
    "index_put_dup_acc": (
        [(6, 5), (3, 5)],
        lambda m, x, v: x.index_put((_i(m, 1, 4, 1),), v, accumulate=True),
    ),
    "index_put_broadcast_acc": (
        [(6, 5), (5,)],
        lambda m, x, v: m.index_put(x, (_i(m, 1, 1, 3),), v, True),
    ),
    "index_put_two_idx": (
        [(6, 5), (3,)],
        lambda m, x, v: x.index_put((_i(m, 0, 5, 0), _i(m, 1, 2, 1)), v, accumulate=True),
    ),
    "index_put_mask": ([(6, 5), ()], lambda m, x, v: x.index_put((x > 0.3,), v)),
    "index_put_mask_acc": ([(6, 5), ()], lambda m, x, v: x.index_put((x > 0.3,), v, True)),
    "index_put_inplace": (
        [(6, 5), (2, 5)],
        lambda m, x, v: (x * 2).index_put_((_i(m, 3, 3),), v, accumulate=True),
    ),
    "index_put_inplace_set": (
        [(6, 5), (2, 5)],
        lambda m, x, v: (x * 2).index_put_((_i(m, 3, 0),), v),
    ),
    "select_scatter": ([(6, 5), (6,)], lambda m, x, v: m.select_scatter(x, v, 1, -2)),
    "slice_scatter": ([(6, 5), (6, 2)], lambda m, x, v: m.slice_scatter(x, v, 1, 1, 5, 2)),
    "slice_scatter_default": ([(6, 5), (4, 5)], lambda m, x, v: x.slice_scatter(v, start=2)),
    "diagonal_scatter": ([(6, 5), (4,)], lambda m, x, v: m.diagonal_scatter(x, v, 1)),
    "diagonal_scatter_3d": (
        [(3, 4, 5), (4, 3)],
        lambda m, x, v: m.diagonal_scatter(x, v, -1, 2, 0),
    ),
    "as_strided_scatter": (
        [(6, 5), (2, 3)],
        lambda m, x, v: m.as_strided_scatter(x, v, (2, 3), (1, 5), 2),
    ),
    "as_strided": ([(6, 5)], lambda m, x: x.as_strided((3, 2), (1, 5), 2)),
    "as_strided_overlap": ([(6, 5)], lambda m, x: m.as_strided(x, (4, 4), (1, 1))),
    "as_strided_expanded": ([(6, 5)], lambda m, x: x.as_strided((3, 4), (0, 2))),
    "as_strided_of_view": ([(6, 5)], lambda m, x: x[1:].t().as_strided((2, 3), (1, 4))),
    "as_strided_noncontig": (
        [(6, 5)],
        lambda m, x: (x.t() * 1).as_strided((2, 5), (6, 1), 1),
    ),
}


def _inputs(m, shapes, dtype):
    rng = np.random.default_rng(7)
    return [m.tensor(rng.standard_normal(s).astype(dtype), requires_grad=True) for s in shapes]


def _run(m, name, dtype=np.float64):
    shapes, call = CASES[name]
    ins = _inputs(m, shapes, dtype)
    y = call(m, *ins)
    y.backward(m.tensor(np.random.default_rng(2).standard_normal(tuple(y.shape)).astype(dtype)))
    grads = [t.grad.numpy() for t in ins]
    return y.detach().numpy(), grads, y.grad_fn.name(), tuple(y.stride())


@pytest.mark.parametrize("name", sorted(CASES))
def test_values_gradients_and_node_as_torch(name):
    (ey, eg, en, es), (ty, tg, tn, ts) = _run(engine, name), _run(torch, name)
    np.testing.assert_allclose(ey, ty, rtol=1e-13, atol=1e-14)
    for a, b in zip(eg, tg, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-13, atol=1e-14)
    assert (en, es) == (tn, ts)


@pytest.mark.parametrize("name", sorted(CASES))
def test_allocations_forward_and_backward_as_torch(name):
    shapes, call = CASES[name]

    def make(m):
        ins = _inputs(m, shapes, np.float32)
        return forward_backward(m, lambda: call(m, *ins) * 1.5)

    assert_steps_as_torch(make)


@pytest.mark.parametrize("name", ["index_put_dup_acc", "slice_scatter", "as_strided_overlap"])
def test_gradients_against_central_differences(name):
    shapes, call = CASES[name]
    ins = _inputs(engine, shapes, np.float64)
    w = np.random.default_rng(3).standard_normal(tuple(call(engine, *ins).shape))
    call(engine, *ins).backward(engine.tensor(w))
    for k, t in enumerate(ins):
        base = [a.detach().numpy().copy() for a in ins]
        num = np.zeros_like(base[k])
        for pos in np.ndindex(base[k].shape):
            vals = []
            for h in (1e-6, -1e-6):
                arrs = [a.copy() for a in base]
                arrs[k][pos] += h
                y = call(engine, *[engine.tensor(a) for a in arrs]).numpy()
                vals.append((y * w).sum())
            num[pos] = (vals[0] - vals[1]) / 2e-6
        np.testing.assert_allclose(t.grad.numpy(), num, rtol=1e-6, atol=1e-8)


def test_as_strided_is_a_view_of_the_storage_and_writes_reach_the_base():
    for m in (engine, torch):
        x = m.zeros(4, 3)
        v = x.t().as_strided((2, 2), (3, 1), 1)
        v.fill_(1.0)
        assert v._base is x
        assert x.sum().item() == 4.0
        assert v.storage_offset() == 1


def test_index_put_inplace_is_the_tensor_and_bumps_its_version():
    x = engine.zeros(5)
    before = x._version
    assert x.index_put_((engine.tensor([1, 1]),), engine.tensor(2.0), accumulate=True) is x
    assert x._version == before + 1
    np.testing.assert_array_equal(x.numpy(), [0, 4, 0, 0, 0])


def test_meta_shapes():
    x = engine.empty(6, 5, device="meta")
    assert engine.select_scatter(x, engine.empty(5, device="meta"), 0, 1).shape == (6, 5)
    assert engine.slice_scatter(x, engine.empty(2, 5, device="meta"), 0, 0, 2).shape == (6, 5)
    assert engine.diagonal_scatter(x, engine.empty(5, device="meta")).shape == (6, 5)
    y = x.as_strided((2, 2), (1, 5), 3)
    assert (y.shape, y.stride(), y.storage_offset()) == ((2, 2), (1, 5), 3)
    s = engine.as_strided_scatter(x, engine.empty(2, 2, device="meta"), (2, 2), (1, 5))
    assert s.shape == (6, 5) and s.device.type == "meta"


REFUSALS = {
    "select_scatter_size": lambda m: m.select_scatter(m.zeros(4, 3), m.zeros(4), 0, 1),
    "select_scatter_index": lambda m: m.select_scatter(m.zeros(4, 3), m.zeros(3), 0, 9),
    "slice_scatter_size": lambda m: m.slice_scatter(m.zeros(4, 3), m.zeros(2, 2), 0, 0, 2),
    "diagonal_scatter_size": lambda m: m.diagonal_scatter(m.zeros(4, 3), m.zeros(4)),
    "as_strided_scatter_size": lambda m: m.as_strided_scatter(
        m.zeros(4, 3), m.zeros(4), (3,), (1,)
    ),
    "as_strided_bounds": lambda m: m.zeros(4, 3).as_strided((20,), (1,)),
    "index_put_bounds": lambda m: m.zeros(4, 3).index_put((m.tensor([5]),), m.tensor(1.0)),
    "index_put_shape": lambda m: m.zeros(4, 3).index_put((m.tensor([1]),), m.zeros(2)),
    "index_put_dtype": lambda m: m.zeros(4, 3).index_put_(
        (m.tensor([1]),), m.zeros(3, dtype=m.float64)
    ),
}


@pytest.mark.parametrize("name", sorted(REFUSALS))
def test_refusals_as_torch(name):
    assert_raises_as_torch(REFUSALS[name])
