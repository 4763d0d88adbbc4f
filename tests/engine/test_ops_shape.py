"""Joining and shaping ops (issue 10): values, gradients and memory against PyTorch.

cat, stack, tril/triu (and in place), repeat, expand/expand_as, roll, flip, pad (constant,
reflect, replicate, circular), one_hot, where with scalars, var/std; each program is written once
against a module `m` (engine or torch). Gradients: float64 central differences and torch's.
Memory: torch's CPU profiler for the in-place forms and for what backward hands out (views), and
shapes and bytes on meta.
"""

from __future__ import annotations

import numpy as np
import pytest

import engine
import engine.nn.functional as EF
from tests.conftest import assert_raises_as_torch
from tests.engine.test_autograd import gradcheck
from tests.engine.test_memory_vs_torch import engine_peak, torch_peak


def _x(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


def _F(m):
    return m.nn.functional


# name: (fn(m, *tensors), input arrays)
CASES = {
    "cat_dim0": (lambda m, a, b: m.cat([a, b]), [_x(2, 3), _x(4, 3, seed=1)]),
    "cat_dim1_three": (
        lambda m, a, b, c: m.cat((a, b, c), dim=-1),
        [_x(2, 3), _x(2, 1, seed=1), _x(2, 2, seed=2)],
    ),
    "cat_legacy_empty": (lambda m, a: m.cat([a, m.zeros(0, dtype=m.float64), a], 1), [_x(2, 3)]),
    "stack_dim0": (lambda m, a, b: m.stack([a, b]), [_x(2, 3), _x(2, 3, seed=1)]),
    "stack_dim_last": (lambda m, a, b: m.stack([a, b], dim=2), [_x(2, 3), _x(2, 3, seed=1)]),
    "tril": (lambda m, a: a.tril(), [_x(4, 5)]),
    "tril_diag": (lambda m, a: m.tril(a, -1), [_x(2, 4, 3)]),
    "triu_diag": (lambda m, a: m.triu(a, 2), [_x(4, 5)]),
    "tril_inplace": (lambda m, a: (a * 1).tril_(1), [_x(4, 4)]),
    "triu_inplace": (lambda m, a: (a * 1).triu_(), [_x(3, 4, 4)]),
    "repeat": (lambda m, a: a.repeat(2, 3), [_x(2, 3)]),
    "repeat_new_dims": (lambda m, a: a.repeat(2, 1, 3), [_x(2, 3)]),
    "repeat_transposed": (lambda m, a: a.t().repeat(2, 2), [_x(2, 3)]),
    "expand": (lambda m, a: a.expand(3, 2, 4) * 1, [_x(2, 1)]),
    "expand_as": (lambda m, a, b: a.expand_as(b) * b, [_x(1, 3), _x(4, 3, seed=1)]),
    "roll_flat": (lambda m, a: m.roll(a, 2), [_x(3, 4)]),
    "roll_dims": (lambda m, a: m.roll(a, (1, -2), (0, 1)), [_x(3, 4)]),
    "roll_method": (lambda m, a: a.roll(5, -1), [_x(3, 4)]),
    "flip": (lambda m, a: m.flip(a, (0, 2)), [_x(2, 3, 4)]),
    "flip_method": (lambda m, a: a.flip(1), [_x(2, 3)]),
    "fliplr": (lambda m, a: m.fliplr(a), [_x(2, 3)]),
    "pad_constant": (lambda m, a: _F(m).pad(a, (1, 2, 0, 3), value=0.5), [_x(2, 3, 4)]),
    "pad_crop": (lambda m, a: _F(m).pad(a, (-1, 2)), [_x(2, 3, 4)]),
    "pad_reflect_1d": (lambda m, a: _F(m).pad(a, (2, 3), mode="reflect"), [_x(2, 3, 5)]),
    "pad_reflect_2d": (lambda m, a: _F(m).pad(a, (1, 2, 2, 1), mode="reflect"), [_x(1, 2, 4, 5)]),
    "pad_reflect_3d": (
        lambda m, a: _F(m).pad(a, (1, 1, 1, 0, 0, 2), mode="reflect"),
        [_x(1, 1, 3, 3, 4)],
    ),
    "pad_replicate_2d": (
        lambda m, a: _F(m).pad(a, (2, 1, 1, 3), mode="replicate"),
        [_x(1, 2, 3, 4)],
    ),
    "pad_circular_1d": (lambda m, a: _F(m).pad(a, (2, 1), mode="circular"), [_x(2, 2, 4)]),
    "where_scalar_other": (lambda m, a: m.where(a > 0, a, 0.5), [_x(3, 4)]),
    "where_scalar_input": (lambda m, a: m.where(a > 0, -1.0, a), [_x(3, 4)]),
    "var_all": (lambda m, a: a.var(), [_x(3, 4)]),
    "var_dim": (lambda m, a: m.var(a, 1), [_x(3, 4)]),
    "var_keepdim_corr0": (lambda m, a: a.var((0, 2), keepdim=True, correction=0), [_x(2, 3, 4)]),
    "var_unbiased_false": (lambda m, a: m.var(a, 0, False), [_x(3, 4)]),
    "std_all": (lambda m, a: a.std(), [_x(3, 4)]),
    "std_dim": (lambda m, a: m.std(a, -1, keepdim=True), [_x(3, 4)]),
    "std_correction2": (lambda m, a: a.std(1, correction=2), [_x(3, 5)]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_gradients_vs_numeric_and_torch(torch, name):
    fn, arrays = CASES[name]
    gradcheck(fn, arrays, torch=torch)


@pytest.mark.parametrize(
    "name", ["cat_dim1_three", "repeat", "roll_dims", "flip", "pad_reflect_2d"]
)
def test_gradients_on_transposed_inputs(torch, name):
    fn, arrays = CASES[name]
    gradcheck(fn, arrays, layout="transposed", torch=torch)


def test_cat_and_stack_promote_dtypes_and_check_shapes(torch):
    a = engine.ones(2, 2, dtype=engine.int64)
    b = engine.ones(1, 2)
    t = torch.cat([torch.ones(2, 2, dtype=torch.int64), torch.ones(1, 2)])
    assert engine.cat([a, b]).dtype == engine.float32 and t.dtype == torch.float32
    with pytest.raises(RuntimeError, match="Sizes of tensors must match except in dimension 0"):
        engine.cat([engine.ones(2, 3), engine.ones(2, 4)])
    with pytest.raises(RuntimeError, match="stack expects each tensor to be equal size"):
        engine.stack([engine.ones(2, 3), engine.ones(2, 4)])
    with pytest.raises(RuntimeError, match="zero-dimensional tensor"):
        engine.cat([engine.tensor(1.0), engine.tensor(2.0)])
    with pytest.raises(TypeError, match="must be tuple of Tensors"):
        engine.cat(engine.ones(2))
    out = engine.empty(4, 3)
    r = engine.cat([engine.ones(1, 3), engine.zeros(3, 3)], out=out)
    assert r is out and out.numpy().sum() == 3


def test_one_hot_matches_torch(torch):
    idx = np.array([[0, 3], [2, 1]])
    got = EF.one_hot(engine.tensor(idx)).numpy()
    want = torch.nn.functional.one_hot(torch.tensor(idx)).numpy()
    np.testing.assert_array_equal(got, want)
    assert EF.one_hot(engine.tensor(idx), 6).shape == (2, 2, 6)
    assert EF.one_hot(engine.tensor(idx), 6).dtype == engine.int64
    with pytest.raises(RuntimeError, match="smaller than num_classes"):
        EF.one_hot(engine.tensor(idx), 3)
    meta = engine.zeros(8, 128, dtype=engine.int64, device="meta")
    assert EF.one_hot(meta, 1000).shape == (8, 128, 1000)
    with pytest.raises(RuntimeError, match="pass num_classes"):
        EF.one_hot(meta)


def test_where_with_scalars_promotes_like_torch(torch):
    cond = np.array([True, False, True])
    ints = np.array([1, 2, 3])
    for args in [(1.5, ints), (ints, 2), (2.5, 1)]:
        e = engine.where(
            engine.tensor(cond),
            *[engine.tensor(a) if isinstance(a, np.ndarray) else a for a in args],
        )
        t = torch.where(
            torch.tensor(cond), *[torch.tensor(a) if isinstance(a, np.ndarray) else a for a in args]
        )
        assert str(e.dtype).split(".")[-1] == str(t.dtype).split(".")[-1]
        np.testing.assert_array_equal(e.numpy(), t.numpy())


def test_pad_errors_name_the_problem():
    x = engine.ones(1, 2, 3)
    with pytest.raises(RuntimeError, match="Padding size should be less than"):
        EF.pad(x, (3, 0), mode="reflect")
    with pytest.raises(RuntimeError, match="divisible by 2"):
        EF.pad(x, (1,))
    with pytest.raises(NotImplementedError, match="mode 'wrap' is not supported"):
        EF.pad(x, (1, 1), mode="wrap")


@pytest.mark.parametrize("name", ["tril", "triu_diag", "roll_dims", "flip", "repeat", "cat_dim0"])
def test_backward_node_names_are_torchs(torch, name):
    fn, arrays = CASES[name]
    e = fn(engine, *[engine.tensor(a, requires_grad=True) for a in arrays])
    t = fn(torch, *[torch.tensor(a, requires_grad=True) for a in arrays])
    assert e.grad_fn.name() == t.grad_fn.name()


# ---------------------------------------------------------------------------------------------
# memory
# ---------------------------------------------------------------------------------------------
N = 128


def _tri_program(m, inplace):
    x = m.tensor(_x(N, N).astype(np.float32), requires_grad=True).clone()
    keep = []

    def region():
        keep.append(x.tril_() if inplace else x.tril())

    return region


@pytest.mark.parametrize("inplace", [False, True])
def test_tril_in_place_is_free_like_torch(torch, inplace):
    want = torch_peak(_tri_program(torch, inplace))
    got = engine_peak(_tri_program(engine, inplace))
    assert got == want == (0 if inplace else N * N * 4)


def _cat_step(m, op):
    a = m.tensor(_x(N, N).astype(np.float32), requires_grad=True)
    b = m.tensor(_x(N, N, seed=1).astype(np.float32), requires_grad=True)

    def region():
        y = m.cat([a, b]) if op == "cat" else m.stack([a, b])
        y.backward(m.ones(*y.shape))

    return region


@pytest.mark.parametrize("op", ["cat", "stack"])
def test_cat_stack_backward_hands_out_views(op):
    a = engine.randn(N, N, requires_grad=True)
    b = engine.randn(N, N, requires_grad=True)
    y = engine.cat([a, b]) if op == "cat" else engine.stack([a, b])
    g = engine.ones(*y.shape)
    out = []
    assert engine_peak(lambda: out.extend(y.grad_fn.backward(g))) == 0
    assert all(t._base is g and t.shape == (N, N) for t in out)
    np.testing.assert_array_equal(out[1].numpy(), np.ones((N, N), np.float32))


@pytest.mark.parametrize("op", ["cat", "stack"])
def test_cat_stack_step_memory_matches_torch(torch, op):
    """Forward: the joined result; backward: the ones seed, then each input's gradient is a view
    of it (no new buffer), which both leaves' .grad keep alive."""
    want = torch_peak(_cat_step(torch, op))
    got = engine_peak(_cat_step(engine, op))
    assert got == want == 2 * (2 * N * N * 4)


def _pad_step(m, mode):
    x = m.tensor(_x(4, 8, 32, 32).astype(np.float32), requires_grad=True)

    def region():
        y = m.nn.functional.pad(x, (2, 2, 2, 2), mode=mode)
        y.backward(m.ones(*y.shape))

    return region


@pytest.mark.parametrize("mode", ["constant", "reflect"])
def test_pad_step_memory_matches_torch(torch, mode):
    assert engine_peak(_pad_step(engine, mode)) == torch_peak(_pad_step(torch, mode))


@pytest.mark.parametrize(
    ("fn", "shape", "nbytes"),
    [
        (lambda x: engine.cat([x, x], 1), (2048, 2048), 2048 * 2048 * 4),
        (lambda x: engine.stack([x, x, x]), (3, 2048, 1024), 3 * 2048 * 1024 * 4),
        (lambda x: x.repeat(2, 2), (4096, 2048), 4096 * 2048 * 4),
        (lambda x: x.triu(), (2048, 1024), 2048 * 1024 * 4),
        (lambda x: x.triu_(), (2048, 1024), 0),
        (lambda x: x.flip(0), (2048, 1024), 2048 * 1024 * 4),
        (lambda x: x.roll(3, 1), (2048, 1024), 2048 * 1024 * 4),
        (
            lambda x: EF.pad(x.reshape(1, 2048, 1024), (1, 1, 2, 2), mode="reflect"),
            (1, 2052, 1026),
            2052 * 1026 * 4,
        ),
        (lambda x: x.var(1), (2048,), 2048 * 4),
        (lambda x: x.std(), (), 4),
    ],
)
def test_meta_shapes_and_bytes(fn, shape, nbytes):
    x = engine.empty(2048, 1024, device="meta").clone()
    before = engine.memory.memory_allocated("meta")
    y = fn(x)
    assert y.shape == shape
    assert engine.memory.memory_allocated("meta") - before == nbytes


def test_meta_backward_runs():
    x = engine.empty(64, 32, device="meta", requires_grad=True)
    loss = (
        engine.cat([x, x]).sum()
        + x.repeat(2, 1).sum()
        + x.flip(0).roll(1, 0).sum()
        + EF.pad(x.reshape(1, 64, 32), (2, 2), mode="reflect").sum()
        + x.std(1).sum()
        + x.tril().sum()
    )
    loss.backward()
    assert x.grad.shape == (64, 32) and x.grad.device.type == "meta"


def _step(m, call, shape=(64, 32)):
    x = m.tensor(_x(*shape).astype(np.float32), requires_grad=True)

    def region():
        y = call(m, x)
        y.backward(m.ones(y.shape))

    return region


STEPS = {
    "var_all": lambda m, x: x.var(),
    "var_dim": lambda m, x: x.var(1),
    "var_keepdim": lambda m, x: x.var(0, keepdim=True),
    "std_all": lambda m, x: x.std(),
    "std_dim": lambda m, x: x.std(1),
    "std_keepdim": lambda m, x: x.std(0, keepdim=True),
    "roll": lambda m, x: m.roll(x, 3, 1),
    "flip": lambda m, x: x.flip(0),
    "repeat": lambda m, x: x.repeat(2, 1),
    "repeat_new_dims": lambda m, x: x.repeat(3, 1, 1, 2),
    "repeat_ones": lambda m, x: x.repeat(1, 1),
    "repeat_zero": lambda m, x: x.repeat(2, 0),
    "tril": lambda m, x: x.tril(),
}


@pytest.mark.parametrize("name", sorted(STEPS))
def test_step_memory_matches_torch_profiler(torch, name):
    """Forward and backward, temporaries included (var/std backward's x - mean and its product)."""
    assert engine_peak(_step(engine, STEPS[name])) == torch_peak(_step(torch, STEPS[name]))


@pytest.mark.parametrize(
    "name", ["var_all", "var_dim", "var_keepdim", "std_all", "std_dim", "std_keepdim"]
)
def test_var_std_blocks_in_torchs_order(torch, name):
    """Every block forward and backward in the order torch's profiler shows (the masks
    included): var_backward's mean and difference before 2 / dof * grad, freed last made
    first."""
    from tests.engine.test_memory_vs_torch import (
        engine_sequence,
        forward_backward,
        torch_sequence,
    )

    arr = np.random.default_rng(3).standard_normal((32, 48))
    steps = {}
    for m in (torch, engine):
        x = m.tensor(arr, requires_grad=True)
        steps[m] = forward_backward(m, lambda m=m, x=x: STEPS[name](m, x))
    for t_step, e_step in zip(steps[torch], steps[engine], strict=True):
        assert engine_sequence(e_step, min_bytes=8) == torch_sequence(t_step, min_bytes=8)


CAT_REFUSALS = {
    "zero_dim_first": lambda m: m.cat([m.tensor(1.0), m.ones(2)]),
    "zero_dim_later": lambda m: m.cat([m.ones(2), m.ones(2), m.tensor(1.0)]),
    "dims": lambda m: m.cat([m.ones(2, 3), m.ones(3)]),
    "dims_after_legacy_empty": lambda m: m.cat([m.ones(0), m.ones(2, 3), m.ones(2, 3, 1)]),
    "sizes": lambda m: m.cat([m.ones(2, 3), m.ones(2, 3), m.ones(2, 4)]),
    "sizes_dim1": lambda m: m.cat([m.ones(2, 3), m.ones(3, 3)], dim=1),
    "dim_out_of_range": lambda m: m.cat([m.ones(2, 3), m.ones(2, 3)], dim=2),
}


@pytest.mark.parametrize("name", sorted(CAT_REFUSALS))
def test_cat_refuses_as_torch(torch, name):
    assert_raises_as_torch(CAT_REFUSALS[name])


def test_cat_skips_legacy_empty_tensors_as_torch(torch):
    """A 1-d tensor of no elements is left out whatever the others' shapes, first or not."""
    for make in (
        lambda m: m.cat([m.ones(0), m.ones(2, 3), m.ones(0), m.ones(1, 3)]),
        lambda m: m.cat([m.ones(0), m.ones(0)]),
        lambda m: m.cat([m.ones(2, 3), m.ones(0)], dim=1),
    ):
        ours, theirs = make(engine), make(torch)
        assert tuple(ours.shape) == tuple(theirs.shape)
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
