"""addmm_, addmv / addmv_, addr / addr_, addbmm / addbmm_ and the smaller tensor methods of
engine/ops/methods_extra.py against torch 2.13: values, gradients, node chains, refusals, and
the blocks its CPU profiler shows forward and backward."""

from __future__ import annotations

import numpy as np
import pytest

import engine
from tests.conftest import assert_raises_as_torch, node_chain
from tests.engine.test_memory_vs_torch import assert_steps_as_torch, forward_backward

torch = pytest.importorskip("torch")


def _ip(fn):
    """An in-place call on a non-leaf copy of the first input."""
    return lambda m, x, *rest: fn(m, x * 1.0, *rest)


CASES = {  # name -> (input shapes, call(m, *inputs))
    "addmv": ([(4,), (4, 3), (3,)], lambda m, x, a, b: m.addmv(x, a, b)),
    "addmv_scalars": (
        [(1,), (4, 3), (3,)],
        lambda m, x, a, b: x.addmv(a, b, beta=0.5, alpha=-2.0),
    ),
    "addmv_beta0": ([(4,), (4, 3), (3,)], lambda m, x, a, b: m.addmv(x, a, b, beta=0)),
    "addmv_": ([(4,), (4, 3), (3,)], _ip(lambda m, x, a, b: x.addmv_(a, b, alpha=3))),
    "addr": ([(4, 3), (4,), (3,)], lambda m, x, a, b: m.addr(x, a, b)),
    "addr_broadcast": ([(3,), (4,), (3,)], lambda m, x, a, b: x.addr(a, b, beta=2, alpha=0.5)),
    "addr_": ([(4, 3), (4,), (3,)], _ip(lambda m, x, a, b: x.addr_(a, b, beta=0.25))),
    "addbmm": ([(4, 5), (2, 4, 3), (2, 3, 5)], lambda m, x, a, b: m.addbmm(x, a, b)),
    "addbmm_scalars": (
        [(5,), (2, 4, 3), (2, 3, 5)],
        lambda m, x, a, b: x.addbmm(a, b, beta=-1.5, alpha=2),
    ),
    "addbmm_": ([(4, 5), (3, 4, 3), (3, 3, 5)], _ip(lambda m, x, a, b: x.addbmm_(a, b))),
    "addmm_": ([(4, 5), (4, 3), (3, 5)], _ip(lambda m, x, a, b: x.addmm_(a, b))),
    "addmm_scalars": (
        [(4, 5), (4, 3), (3, 5)],
        _ip(lambda m, x, a, b: x.addmm_(a, b, beta=0.5, alpha=2.0)),
    ),
    "addmm_colmajor": (
        [(4, 5), (3, 4), (5, 3)],
        _ip(lambda m, x, a, b: x.addmm_(a.t(), b.t())),
    ),
}


def _inputs(m, shapes, dtype):
    rng = np.random.default_rng(11)
    return [m.tensor(rng.standard_normal(s).astype(dtype), requires_grad=True) for s in shapes]


def run_case(m, case, dtype=np.float64):
    """case = (input shapes, call(m, *inputs)): the result, every input's gradient for a seeded
    cotangent, and the node chain."""
    shapes, call = case
    ins = _inputs(m, shapes, dtype)
    y = call(m, *ins)
    y.backward(m.tensor(np.random.default_rng(2).standard_normal(tuple(y.shape)).astype(dtype)))
    chain = [n.removeprefix("torch::autograd::") for n in node_chain(y.grad_fn)]
    return y.detach().numpy(), [t.grad.numpy() for t in ins], chain


def assert_case_as_torch(case) -> None:
    """float64 values and gradients to 1e-13 and the node chain, engine against torch."""
    (ey, eg, en), (ty, tg, tn) = run_case(engine, case), run_case(torch, case)
    np.testing.assert_allclose(ey, ty, rtol=1e-13, atol=1e-13)
    for a, b in zip(eg, tg, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-13, atol=1e-13)
    assert en == tn


def assert_case_blocks_as_torch(case) -> None:
    """Every block forward and backward (float32) as torch's profiler shows it."""
    shapes, call = case

    def make(m):
        ins = _inputs(m, shapes, np.float32)
        return forward_backward(m, lambda: call(m, *ins) * 1.5)

    assert_steps_as_torch(make)


def _run(m, name, dtype=np.float64):
    return run_case(m, CASES[name], dtype)


@pytest.mark.parametrize("name", sorted(CASES))
def test_values_gradients_and_nodes_as_torch(name):
    assert_case_as_torch(CASES[name])


@pytest.mark.parametrize("name", sorted(CASES))
def test_float32_values_as_torch(name):
    (ey, eg, _), (ty, tg, _) = _run(engine, name, np.float32), _run(torch, name, np.float32)
    np.testing.assert_allclose(ey, ty, rtol=1e-5, atol=1e-5)
    for a, b in zip(eg, tg, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", sorted(CASES))
def test_allocations_forward_and_backward_as_torch(name):
    assert_case_blocks_as_torch(CASES[name])


def test_beta_zero_ignores_nan_input():
    x = engine.full((4,), float("nan"))
    y = engine.addmv(x, engine.ones(4, 3), engine.ones(3), beta=0)
    np.testing.assert_array_equal(y.numpy(), [3.0] * 4)


def test_inplace_returns_the_tensor_and_allocates_nothing():
    x = engine.zeros(4, 5)
    a, b = engine.ones(4, 3), engine.ones(3, 5)
    before = engine.memory.memory_allocated()
    assert x.addmm_(a, b) is x
    assert engine.memory.memory_allocated() == before
    np.testing.assert_array_equal(x.numpy(), np.full((4, 5), 3.0))


def test_meta_shapes():
    def e(*s):
        return engine.empty(*s, device="meta")

    assert engine.addmv(e(4), e(4, 3), e(3)).shape == (4,)
    assert engine.addr(e(4, 3), e(4), e(3)).shape == (4, 3)
    assert engine.addbmm(e(4, 5), e(2, 4, 3), e(2, 3, 5)).shape == (4, 5)
    assert e(4, 5).addmm_(e(4, 3), e(3, 5)).shape == (4, 5)


REFUSALS = {
    "addmv_vec": lambda m: m.addmv(m.zeros(4), m.zeros(4, 3), m.zeros(2)),
    "addmv_input": lambda m: m.addmv(m.zeros(5), m.zeros(4, 3), m.zeros(3)),
    "addmv_dims": lambda m: m.addmv(m.zeros(4), m.zeros(4, 3, 1), m.zeros(3)),
    "addmv_inplace": lambda m: m.zeros(1).addmv_(m.zeros(4, 3), m.zeros(3)),
    "addr_expand": lambda m: m.addr(m.zeros(4, 3), m.zeros(4), m.zeros(2)),
    "addr_dims": lambda m: m.addr(m.zeros(4, 3), m.zeros(4, 1), m.zeros(3)),
    "addbmm_batches": lambda m: m.addbmm(m.zeros(4, 5), m.zeros(2, 4, 3), m.zeros(3, 3, 5)),
    "addbmm_sizes": lambda m: m.addbmm(m.zeros(4, 5), m.zeros(2, 4, 3), m.zeros(2, 2, 5)),
    "addbmm_expand": lambda m: m.addbmm(m.zeros(4, 6), m.zeros(2, 4, 3), m.zeros(2, 3, 5)),
    "addmm_inplace": lambda m: m.zeros(4, 1).addmm_(m.zeros(4, 3), m.zeros(3, 5)),
    "addmm_sizes": lambda m: m.zeros(4, 5).addmm_(m.zeros(4, 3), m.zeros(2, 5)),
}


@pytest.mark.parametrize("name", sorted(REFUSALS))
def test_refusals_as_torch(name):
    assert_raises_as_torch(REFUSALS[name])


def _fill_diag(value, wrap=False):
    def call(m, x):
        y = x * 1.0
        y.fill_diagonal_(value, wrap=wrap)
        return y

    return call


SMALL = {  # name -> (input shapes, call(m, *inputs))
    "vdot": ([(5,), (5,)], lambda m, a, b: m.vdot(a, b)),
    "msort": ([(5, 3)], lambda m, x: m.msort(x)),
    "msort_method": ([(4,)], lambda m, x: x.msort()),
    "sum_to_size_keep": ([(4, 3)], lambda m, x: x.sum_to_size(1, 3)),
    "sum_to_size_lead": ([(2, 4, 3)], lambda m, x: x.sum_to_size((4, 1))),
    "sum_to_size_same": ([(4, 3)], lambda m, x: x.sum_to_size(4, 3) * 1.0),
    "fill_diagonal": ([(4, 3)], _fill_diag(2.5)),
    "fill_diagonal_wrap": ([(7, 3)], _fill_diag(-1.0, wrap=True)),
    "fill_diagonal_nowrap": ([(7, 3)], _fill_diag(-1.0)),
    "fill_diagonal_3d": ([(3, 3, 3)], _fill_diag(0.0)),
}


@pytest.mark.parametrize("name", sorted(SMALL))
def test_small_methods_values_gradients_and_nodes_as_torch(name):
    assert_case_as_torch(SMALL[name])


@pytest.mark.parametrize("name", sorted(SMALL))
def test_small_methods_allocations_as_torch(name):
    assert_case_blocks_as_torch(SMALL[name])


ALIASES = ["absolute_", "arccos_", "arcsin_", "arctan_", "greater_", "greater_equal_", "less_"]
ALIASES += ["less_equal_", "not_equal_"]


@pytest.mark.parametrize("name", ALIASES)
def test_inplace_aliases_as_torch(name):
    arr = np.array([0.5, -0.25, 0.0, 0.75])
    args = () if name.startswith(("abs", "arc")) else (0.0,)
    got = getattr(engine.tensor(arr), name)(*args)
    want = getattr(torch.tensor(arr), name)(*args)
    np.testing.assert_array_equal(got.numpy(), want.numpy())
    assert hasattr(engine, name) == hasattr(torch, name)


def test_arctan2_inplace_as_torch():
    a, b = np.array([0.5, -1.0]), np.array([2.0, 3.0])
    got = engine.tensor(a).arctan2_(engine.tensor(b))
    np.testing.assert_allclose(got.numpy(), torch.tensor(a).arctan2_(torch.tensor(b)).numpy())


def test_device_and_inference_queries_as_torch():
    for m in (engine, torch):
        x = m.zeros(2)
        assert (x.get_device(), x.is_inference()) == (-1, False)


def test_small_methods_on_meta():
    x = engine.empty(4, 4, device="meta")
    assert x.sum_to_size(1, 4).shape == (1, 4)
    assert x.fill_diagonal_(1.0) is x
    assert engine.msort(x).shape == (4, 4)


SMALL_REFUSALS = {
    "vdot_sizes": lambda m: m.vdot(m.zeros(3), m.zeros(4)),
    "vdot_dims": lambda m: m.vdot(m.zeros(3, 1), m.zeros(3)),
    "sum_to_size": lambda m: m.zeros(3, 4).sum_to_size(2, 4),
    "fill_diagonal_dims": lambda m: m.zeros(3).fill_diagonal_(1),
    "fill_diagonal_equal": lambda m: m.zeros(3, 4, 5).fill_diagonal_(1),
}


@pytest.mark.parametrize("name", sorted(SMALL_REFUSALS))
def test_small_refusals_as_torch(name):
    assert_raises_as_torch(SMALL_REFUSALS[name])
