"""F.pdist (_pdist_forward, PdistBackward0) and torch.cdist (_cdist_forward, CdistBackward0;
for p = 2 over more than 25 rows torch's _euclidean_dist, EuclideanDistBackward0) against torch
2.13: values, gradients (and float64 central differences), node names, every block forward and
backward as torch's CPU profiler shows it, refusals, meta shapes."""

from __future__ import annotations

import math

import numpy as np
import pytest

import engine
from engine.memory import memory_allocated
from tests.conftest import assert_raises_as_torch
from tests.engine.test_bilinear_grid_sample import _check_as_torch, _numeric_grads, _steps

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(23)
PD = RNG.standard_normal((7, 5))
PD[2, 1] = PD[4, 1]  # a zero difference
PD[6] = PD[3]  # a zero distance
A = RNG.standard_normal((2, 6, 5))
B = RNG.standard_normal((2, 4, 5))
B[0, 1] = A[0, 2]  # a zero distance
A30 = RNG.standard_normal((2, 30, 5))
PDIST_P = (2.0, 1.0, 0.0, 0.5, 1.5, 3.5, math.inf)


def _pdist_call(p):
    return [PD], lambda m, x: m.nn.functional.pdist(x, p)


CDIST = {  # name -> (arrays, call)
    **{f"p{p}": ([A, B], lambda m, a, b, p=p: m.cdist(a, b, p)) for p in PDIST_P},
    "batch_broadcast": ([A, B], lambda m, a, b: m.cdist(a, b[:1], 1.0)),
    "non_contiguous": (
        [A, B],
        lambda m, a, b: m.cdist(a.transpose(1, 2).contiguous().transpose(1, 2), b, 3.0),
    ),
    "2d": ([A, B], lambda m, a, b: m.cdist(a[0], b[0])),
    "mm": ([A30, B], lambda m, a, b: m.cdist(a, b)),
    "mm_2d": ([A30, B], lambda m, a, b: m.cdist(a[0], b[0])),
    "mm_forced": ([A, B], lambda m, a, b: m.cdist(a, b, compute_mode="use_mm_for_euclid_dist")),
    "mm_broadcast": ([A30, B], lambda m, a, b: m.cdist(a, b[:1])),
    "mm_refused": (
        [A30, B],
        lambda m, a, b: m.cdist(a, b, compute_mode="donot_use_mm_for_euclid_dist"),
    ),
}


# --- pdist ------------------------------------------------------------------------------------


@pytest.mark.parametrize("p", PDIST_P)
def test_pdist_values_gradients_and_node_as_torch(p):
    _check_as_torch(*_pdist_call(p))


def test_pdist_of_a_transposed_input_copies_it_as_torch():
    _check_as_torch([PD], lambda m, x: m.pdist(x.t()))
    _steps([PD], lambda m, x: m.pdist(x.t()))


@pytest.mark.parametrize("p", [2.0, 1.5, 3.0])
def test_pdist_gradients_match_central_differences(p):
    _numeric_grads([RNG.standard_normal((4, 3))], lambda m, x: m.nn.functional.pdist(x, p))


@pytest.mark.parametrize("p", [2.0, 0.5, math.inf])
def test_pdist_blocks_forward_and_backward_as_torch(p):
    _steps(*_pdist_call(p))


@pytest.mark.parametrize(
    "call",
    [
        lambda m: m.pdist(m.ones(3)),
        lambda m: m.pdist(m.ones(2, 3, 4)),
        lambda m: m.pdist(m.ones(3, 4), -1.0),
        lambda m: m.pdist(m.ones(3, 4, dtype=m.int64)),
    ],
)
def test_pdist_refusals_as_torch(call):
    assert_raises_as_torch(call)


# --- cdist ------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(CDIST))
def test_cdist_values_gradients_and_nodes_as_torch(name):
    _check_as_torch(*CDIST[name])


def test_cdist_float32_as_torch():
    _check_as_torch(*CDIST["mm"], dtype=np.float32, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    "mode", ["donot_use_mm_for_euclid_dist", "use_mm_for_euclid_dist"], ids=["direct", "mm"]
)
def test_cdist_gradients_match_central_differences(mode):
    a, b = RNG.standard_normal((3, 2)), RNG.standard_normal((4, 2))
    _numeric_grads([a, b], lambda m, x, y: m.cdist(x, y, compute_mode=mode))


@pytest.mark.parametrize("name", sorted(CDIST))
def test_cdist_blocks_forward_and_backward_as_torch(name):
    _steps(*CDIST[name])


def test_cdist_mm_path_leaves_nothing_behind():
    before = memory_allocated()
    a = engine.tensor(A30, requires_grad=True)
    b = engine.tensor(B, requires_grad=True)
    engine.cdist(a, b[:1]).sum().backward()
    del a, b
    assert memory_allocated() == before


@pytest.mark.parametrize(
    "call",
    [
        lambda m: m.cdist(m.ones(3), m.ones(2, 3)),
        lambda m: m.cdist(m.ones(2, 3), m.ones(3)),
        lambda m: m.cdist(m.ones(2, 3), m.ones(2, 4)),
        lambda m: m.cdist(m.ones(2, 3, dtype=m.int64), m.ones(2, 3, dtype=m.int64)),
        lambda m: m.cdist(m.ones(2, 3), m.ones(2, 3), -1.0),
        lambda m: m.cdist(m.ones(2, 3), m.ones(2, 3), compute_mode="x"),
        lambda m: m.cdist(m.ones(2, 2, 3), m.ones(3, 2, 3)),
        lambda m: m.cdist(m.ones(2, 3), m.ones(2, 3, dtype=m.float64)),
    ],
)
def test_cdist_refusals_as_torch(call):
    assert_raises_as_torch(call)


def test_meta_shapes_and_backward():
    p = engine.ones(6, 4, device="meta", dtype=engine.float64, requires_grad=True)
    d = engine.pdist(p)
    assert tuple(d.shape) == (15,) and d.dtype == engine.float64
    d.sum().backward()
    assert tuple(p.grad.shape) == (6, 4)
    for rows in (5, 40):  # _cdist_forward, then _euclidean_dist
        a = engine.ones(3, rows, 4, device="meta", requires_grad=True)
        b = engine.ones(1, 7, 4, device="meta", requires_grad=True)
        y = engine.cdist(a, b)
        assert tuple(y.shape) == (3, rows, 7) and y.device.type == "meta"
        y.sum().backward()
        assert tuple(a.grad.shape) == (3, rows, 4) and tuple(b.grad.shape) == (1, 7, 4)


@pytest.mark.parametrize("name", ["p1.0", "p2.0", "batch_broadcast", "mm_refused"])
def test_cdist_in_small_blocks_as_torch(name, monkeypatch):
    # the kernels work in blocks of at most SCRATCH_ELEMS elements: many blocks, same results
    monkeypatch.setattr(engine.kernels, "SCRATCH_ELEMS", 12)
    _check_as_torch(*CDIST[name])


def test_pdist_in_small_blocks_as_torch(monkeypatch):
    monkeypatch.setattr(engine.kernels, "SCRATCH_ELEMS", 12)
    _check_as_torch(*_pdist_call(1.5))
