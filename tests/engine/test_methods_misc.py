"""The smaller tensor methods of engine/ops/methods_misc.py (and the is_cpu / layout /
output_nr properties) against torch 2.13: values, gradients, node chains, refusals, the blocks
its CPU profiler shows forward and backward, and meta shapes."""

from __future__ import annotations

import numpy as np
import pytest

import engine
from tests.conftest import assert_raises_as_torch
from tests.engine.test_memory_vs_torch import (
    assert_sequence_as_torch,
    assert_steps_as_torch,
    forward_backward,
)
from tests.engine.test_methods_extra import assert_case_as_torch, assert_case_blocks_as_torch

torch = pytest.importorskip("torch")


def _sum_pieces(pieces, weights=(1.0, -2.0, 0.5, 3.0)):
    y = pieces[0] * weights[0]
    for p, w in zip(pieces[1:], weights[1:], strict=False):
        y = y + p.sum() * w
    return y


CASES = {  # name -> (input shapes, call(m, *inputs))
    "narrow_copy": ([(4, 6)], lambda m, x: m.narrow_copy(x, 1, 1, 3)),
    "narrow_copy_method_neg": ([(5, 3)], lambda m, x: x.narrow_copy(0, -3, 2)),
    "narrow_copy_t": ([(10, 12)], lambda m, x: x.t().narrow_copy(0, 2, 5)),
    "narrow_copy_strided": ([(10, 12)], lambda m, x: x[:, ::2].narrow_copy(0, 1, 3)),
    "unsafe_chunk": ([(4, 6)], lambda m, x: _sum_pieces(m.unsafe_chunk(x * 1.0, 3, 1))),
    "unsafe_chunk_uneven": ([(7, 2)], lambda m, x: _sum_pieces(x.unsafe_chunk(3))),
    "unsafe_chunk_one_used": ([(4, 6)], lambda m, x: m.unsafe_chunk(x, 2, -1)[1] * 2.0),
    "unsafe_split": ([(4, 6)], lambda m, x: _sum_pieces(m.unsafe_split(x, 4, 1))),
    "unsafe_split_method": ([(5, 3)], lambda m, x: _sum_pieces(x.unsafe_split(2))),
    "unsafe_split_with_sizes": (
        [(4, 6)],
        lambda m, x: _sum_pieces(m.unsafe_split_with_sizes(x, [1, 2, 3], 1)),
    ),
    "unsafe_split_with_sizes_method": (
        [(6, 2)],
        lambda m, x: _sum_pieces(x.unsafe_split_with_sizes([4, 2])),
    ),
    "cov": ([(3, 5)], lambda m, x: m.cov(x)),
    "cov_method_1d": ([(6,)], lambda m, x: x.cov(correction=0) * 1.0),
    "cov_fweights": ([(3, 5)], lambda m, x: m.cov(x, fweights=m.tensor([1, 2, 0, 3, 1]))),
    "cov_aweights": (
        [(2, 5)],
        lambda m, x: m.cov(x, correction=2, aweights=_aw(m, x)),
    ),
    "cov_both": (
        [(3, 5)],
        lambda m, x: x.cov(fweights=m.tensor([1, 2, 1, 3, 1]), aweights=_aw(m, x)),
    ),
    "corrcoef": ([(4, 6)], lambda m, x: m.corrcoef(x)),
    "corrcoef_method_1d": ([(5,)], lambda m, x: x.corrcoef() * 1.0),
}


def _aw(m, x):
    return m.tensor(np.array([0.5, 1.0, 2.0, 0.1, 0.3]).astype(str(x.dtype).split(".")[1]))


@pytest.mark.parametrize("name", sorted(CASES))
def test_values_gradients_and_nodes_as_torch(name):
    assert_case_as_torch(CASES[name])


@pytest.mark.parametrize("name", sorted(CASES))
def test_allocations_forward_and_backward_as_torch(name):
    assert_case_blocks_as_torch(CASES[name])


@pytest.mark.parametrize("fn", ["unsafe_chunk", "unsafe_split", "unsafe_split_with_sizes"])
def test_unsafe_pieces_share_memory_but_are_not_views(fn):
    arg = {"unsafe_chunk": 2, "unsafe_split": 3, "unsafe_split_with_sizes": [3, 3]}[fn]
    for m in (engine, torch):
        x = m.zeros(6, 2)
        pieces = getattr(x, fn)(arg)
        assert [p._base for p in pieces] == [None, None]
        assert [p.output_nr for p in pieces] == [0, 0]  # no grad_fn: leaves
        pieces[1].add_(1.0)
        assert x.numpy()[3:].tolist() == [[1.0, 1.0]] * 3
        x.requires_grad_(True)
        pieces = getattr(x * 1.0, fn)(arg)
        assert [p.output_nr for p in pieces] == [0, 1]
        pieces[0].sigmoid_()  # an in-place op on a piece is its own node, not CopySlices
        assert pieces[0].grad_fn.name().endswith("SigmoidBackward0")


def test_properties_as_torch():
    for m in (engine, torch):
        x = m.zeros(3, 4, requires_grad=True)
        assert x.is_cpu and x.layout is m.strided and x.output_nr == 0
        assert repr(x.layout) == f"{m.__name__}.strided"
        parts = (x * 1.0).unbind(1)
        assert [p.output_nr for p in parts] == [0, 1, 2, 3]
        assert x[1].output_nr == 0
    meta = engine.empty(2, device="meta")
    assert not meta.is_cpu and meta.layout is engine.strided


NEW = {  # name -> call(m, x): a new tensor from x's dtype and device
    "new_tensor_list": lambda m, x: x.new_tensor([[1, 2, 3], [4, 5, 6]]),
    "new_tensor_dtype": lambda m, x: x.new_tensor([1.5, 2.5], dtype=m.int64),
    "new_tensor_grad": lambda m, x: x.new_tensor([1.0, 2.0], requires_grad=True),
    "new_tensor_array": lambda m, x: x.new_tensor(np.arange(6.0).reshape(2, 3)),
    "new_empty_strided": lambda m, x: x.new_empty_strided((2, 3), (1, 2)).fill_(1.0),
    "new_empty_strided_gap": lambda m, x: x.new_empty_strided((3, 2), (4, 1)).zero_(),
    "new_empty_strided_empty": lambda m, x: x.new_empty_strided((0, 3), (3, 1)),
    "new_empty_strided_dtype": lambda m, x: x.new_empty_strided([4], [2], dtype=m.int64).zero_(),
    "byte": lambda m, x: (x * 3.0).abs().byte(),
    "byte_same": lambda m, x: (x * 3.0).abs().byte().byte(),
}


@pytest.mark.parametrize("name", sorted(NEW))
def test_new_tensors_as_torch(name):
    def run(m, dtype):
        x = m.tensor(np.random.default_rng(3).standard_normal((2, 3)).astype(dtype))
        y = NEW[name](m, x)
        return (
            y.detach().numpy(),
            str(y.dtype).split(".")[1],
            y.stride(),
            y.requires_grad,
            y.is_leaf,
        )

    for dtype in (np.float64, np.float32):
        (ey, *ea), (ty, *ta) = run(engine, dtype), run(torch, dtype)
        np.testing.assert_array_equal(ey, ty)
        assert ea == ta


@pytest.mark.parametrize("name", sorted(NEW))
def test_new_tensors_allocate_as_torch(name):
    def make(m):
        x = m.tensor(np.random.default_rng(3).standard_normal((2, 3)).astype(np.float32))
        held = {}

        def step():
            held["y"] = NEW[name](m, x)

        def free():
            held.clear()

        return step, free

    assert_steps_as_torch(make)


def test_new_tensor_of_a_tensor_is_a_detached_copy():
    for m in (engine, torch):
        x = m.ones(3, requires_grad=True)
        with pytest.warns(UserWarning) if m is torch else _nothing():
            y = x.new_tensor(x)
        assert not y.requires_grad and y.data_ptr() != x.data_ptr()


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_meta_shapes():
    x = engine.empty(4, 6, device="meta")
    assert x.narrow_copy(1, 2, 3).shape == (4, 3)
    assert [p.shape for p in x.unsafe_chunk(4, 1)] == [(4, 2)] * 3
    assert [p.shape for p in x.unsafe_split(3)] == [(3, 6), (1, 6)]
    assert [p.shape for p in x.unsafe_split_with_sizes([1, 5], 1)] == [(4, 1), (4, 5)]
    y = x.new_empty_strided((2, 3), (1, 2))
    assert y.shape == (2, 3) and y.stride() == (1, 2) and y.device.type == "meta"
    assert x.new_tensor([1, 2]).device.type == "meta"
    assert x.byte().dtype is engine.uint8


REFUSALS = {
    "narrow_copy_exceeds": lambda m: m.narrow_copy(m.zeros(3, 4), 0, 2, 3),
    "narrow_copy_length": lambda m: m.narrow_copy(m.zeros(3, 4), 0, 0, -1),
    "narrow_copy_start": lambda m: m.narrow_copy(m.zeros(3, 4), 0, 4, 0),
    "narrow_copy_0d": lambda m: m.narrow_copy(m.tensor(1.0), 0, 0, 1),
    "narrow_copy_dim": lambda m: m.narrow_copy(m.zeros(3, 4), 2, 0, 1),
    "unsafe_split_zero": lambda m: m.unsafe_split(m.zeros(3), 0),
    "unsafe_split_negative": lambda m: m.unsafe_split(m.zeros(3), -1),
    "unsafe_chunk_zero": lambda m: m.unsafe_chunk(m.zeros(3), 0),
    "unsafe_chunk_negative": lambda m: m.unsafe_chunk(m.zeros(3), -2),
    "unsafe_split_with_sizes_sum": lambda m: m.unsafe_split_with_sizes(m.zeros(3), [1, 1]),
    "unsafe_split_with_sizes_neg": lambda m: m.unsafe_split_with_sizes(m.zeros(3), [4, -1]),
    "new_empty_strided_dims": lambda m: m.zeros(2).new_empty_strided((2, 3), (1,)),
    "cov_dims": lambda m: m.cov(m.zeros(2, 3, 4)),
    "cov_bool": lambda m: m.cov(m.zeros(2, 3, dtype=m.bool)),
    "cov_fweights_dims": lambda m: m.cov(m.zeros(2, 3), fweights=m.ones(1, 3, dtype=m.int64)),
    "cov_fweights_dtype": lambda m: m.cov(m.zeros(2, 3), fweights=m.ones(3)),
    "cov_fweights_numel": lambda m: m.cov(m.zeros(2, 3), fweights=m.ones(2, dtype=m.int64)),
    "cov_fweights_negative": lambda m: m.cov(m.zeros(2, 2), fweights=m.tensor([1, -1])),
    "cov_aweights_dims": lambda m: m.cov(m.zeros(2, 3), aweights=m.ones(1, 3)),
    "cov_aweights_dtype": lambda m: m.cov(m.zeros(2, 3), aweights=m.ones(3, dtype=m.int64)),
    "cov_aweights_numel": lambda m: m.cov(m.zeros(2, 3), aweights=m.ones(4)),
    "cov_aweights_negative": lambda m: m.cov(m.zeros(2, 2), aweights=m.tensor([1.0, -1.0])),
    "cov_weights_zero": lambda m: m.cov(m.zeros(2, 2), aweights=m.zeros(2)),
    "corrcoef_dims": lambda m: m.corrcoef(m.zeros(2, 3, 4)),
}


@pytest.mark.parametrize("name", sorted(REFUSALS))
def test_refusals_as_torch(name):
    assert_raises_as_torch(REFUSALS[name])


def test_cov_warns_on_no_degrees_of_freedom_as_torch():
    for m in (engine, torch):
        with pytest.warns(UserWarning, match="degrees of freedom is <= 0"):
            y = m.cov(m.tensor([[1.0], [2.0]]))
        assert np.isnan(y.numpy()).all()


def test_cov_corrcoef_meta_shapes():
    x = engine.empty(3, 5, device="meta")
    assert engine.cov(x).shape == (3, 3)
    assert engine.cov(engine.empty(5, device="meta")).shape == ()
    assert engine.corrcoef(x).shape == (3, 3)
    assert engine.cov(x, fweights=engine.empty(5, dtype=engine.int64, device="meta")).shape == (
        3,
        3,
    )


# (unweighted cov and corrcoef sum a broadcast gradient into x's: torch's InputBuffer adds it in
# place, as engine/autograd/engine.py's _accumulate does)
BIG = {  # blocks over the comparison's scalar threshold: (12, 20) float32 inputs
    "cov": lambda m, x: m.cov(x),
    "cov_fweights": lambda m, x: m.cov(x, fweights=m.tensor(np.arange(20) % 3)),
    "cov_aweights": lambda m, x: m.cov(x, aweights=m.arange(20.0) / 7),
    "corrcoef": lambda m, x: m.corrcoef(x),
}


@pytest.mark.parametrize("call", list(BIG.values()), ids=list(BIG))
def test_cov_allocations_as_torch(call):
    def make(m):
        x = m.tensor(
            np.random.default_rng(0).standard_normal((12, 20)).astype(np.float32),
            requires_grad=True,
        )
        held = {}

        return forward_backward(m, lambda: call(m, x) * 1.5, held)

    assert_steps_as_torch(make)


@pytest.mark.parametrize("fn", ["cov", "corrcoef"])
def test_cov_without_grad_allocates_as_torch(fn):
    def make(m):
        x = m.tensor(np.random.default_rng(0).standard_normal((12, 20)).astype(np.float32))
        held = {}

        def run():
            held["y"] = getattr(m, fn)(x)

        return run

    assert_sequence_as_torch(make)
