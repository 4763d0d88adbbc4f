"""diagonal (a view), diag_embed, diag, trace, movedim/moveaxis, and einsum's repeated
subscripts ("ii", "bii->bi"), which take a diagonal view first as PyTorch's einsum does.

Values, result strides, gradients (central differences in float64 and torch) and memory (views
allocate nothing; DiagonalBackward0 allocates an input-sized zeros, DiagEmbedBackward0 nothing)
are PyTorch's.
"""

from __future__ import annotations

import numpy as np
import pytest

import engine
from tests.engine.test_autograd import gradcheck
from tests.engine.test_memory_vs_torch import SCALAR_SLACK, engine_peak, torch_peak

CASES = {
    "diagonal": (lambda m, x: m.diagonal(x), [(4, 5)]),
    "diagonal_above": (lambda m, x: m.diagonal(x, 1), [(4, 5)]),
    "diagonal_below": (lambda m, x: m.diagonal(x, -2), [(4, 5)]),
    "diagonal_inner_dims": (lambda m, x: m.diagonal(x, 0, 1, 2), [(3, 4, 5)]),
    "diagonal_reversed_dims": (lambda m, x: m.diagonal(x, 2, -1, 0), [(3, 4, 5)]),
    "diagonal_of_transpose": (lambda m, x: m.diagonal(x.transpose(0, 1), 1), [(4, 5)]),
    "diagonal_method": (lambda m, x: x.diagonal(0, -2, -1) * 2, [(2, 3, 3)]),
    "diag_embed": (lambda m, x: m.diag_embed(x), [(2, 3)]),
    "diag_embed_dims": (lambda m, x: m.diag_embed(x, 1, 0, 2), [(2, 3)]),
    "diag_embed_below": (lambda m, x: m.diag_embed(x, -1), [(2, 3)]),
    "diag_vector": (lambda m, x: m.diag(x, 2), [(4,)]),
    "diag_matrix": (lambda m, x: m.diag(x, -1), [(4, 5)]),
    "trace": (lambda m, x: m.trace(x), [(4, 5)]),
    "movedim": (lambda m, x: m.movedim(x, 0, -1), [(2, 3, 4)]),
    "movedim_many": (lambda m, x: m.movedim(x, (0, 1), (2, 0)), [(2, 3, 4)]),
    "moveaxis": (lambda m, x: x.moveaxis(-1, 0), [(2, 3, 4)]),
    "einsum_diagonal": (lambda m, x: m.einsum("ii->i", x), [(3, 3)]),
    "einsum_trace": (lambda m, x: m.einsum("ii", x), [(3, 3)]),
    "einsum_batch_diagonal": (lambda m, x: m.einsum("bii->bi", x), [(2, 3, 3)]),
    "einsum_outer_repeat": (lambda m, x: m.einsum("iji->ij", x), [(3, 2, 3)]),
    "einsum_triple": (lambda m, x: m.einsum("iii->i", x), [(3, 3, 3)]),
    "einsum_ellipsis": (lambda m, x: m.einsum("...ii->...i", x), [(2, 3, 3)]),
    "einsum_pair": (lambda m, x, y: m.einsum("bjj,bjk->bk", x, y), [(2, 3, 3), (2, 3, 4)]),
}


def _arrays(shapes, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s) for s in shapes]


@pytest.mark.parametrize("name", list(CASES))
def test_gradients_match_central_differences_and_torch(name):
    torch = pytest.importorskip("torch")
    fn, shapes = CASES[name]
    gradcheck(fn, _arrays(shapes), torch=torch)


@pytest.mark.parametrize("name", list(CASES))
def test_shape_and_strides_are_torchs(name):
    torch = pytest.importorskip("torch")
    fn, shapes = CASES[name]
    arrays = [a.astype(np.float32) for a in _arrays(shapes)]
    e = fn(engine, *(engine.tensor(a) for a in arrays))
    t = fn(torch, *(torch.tensor(a) for a in arrays))
    assert (tuple(e.shape), tuple(e.stride())) == (tuple(t.shape), tuple(t.stride()))
    np.testing.assert_allclose(e.numpy(), t.numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", list(CASES))
def test_forward_and_backward_peak_as_torchs(name):
    torch = pytest.importorskip("torch")
    fn, shapes = CASES[name]
    arrays = [a.astype(np.float32) for a in _arrays(shapes)]
    out_shape = tuple(fn(torch, *(torch.tensor(a) for a in arrays)).shape)
    g = np.ones(out_shape, np.float32)
    peaks = []
    for lib, measure in ((engine, engine_peak), (torch, torch_peak)):
        leaves = [lib.tensor(a, requires_grad=True) for a in arrays]
        grad = lib.tensor(g)
        peaks.append(
            measure(lambda lib=lib, leaves=leaves, grad=grad: fn(lib, *leaves).backward(grad))
        )
    assert abs(peaks[0] - peaks[1]) <= SCALAR_SLACK, peaks


def test_diagonal_is_a_view_that_writes_reach():
    x = engine.zeros(3, 4)
    before = engine.memory.memory_allocated()
    d = x.diagonal(1)
    assert engine.memory.memory_allocated() == before
    assert d._base is x and d.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
    d.add_(1.0)
    assert x.tolist() == [[0, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1]]
    assert x._version == 1


def test_diagonal_on_meta_has_torchs_geometry():
    x = engine.zeros(3, 5, 4, device="meta")
    d = x.diagonal(-1, 2, 0)
    assert (tuple(d.shape), tuple(d.stride())) == ((5, 3), (4, 21))
    assert d.storage_offset() == 1  # the first entry is x[0, 0, 1]


def test_bad_arguments_raise_torchs_errors():
    with pytest.raises(RuntimeError, match="diagonal dimensions requires ndim larger than 1"):
        engine.zeros(3).diagonal()
    with pytest.raises(RuntimeError, match="diagonal dimensions cannot be identical 1, -1"):
        engine.zeros(3, 3).diagonal(0, 1, -1)
    with pytest.raises(RuntimeError, match="subscript i is repeated for operand 0"):
        engine.einsum("ii", engine.zeros(3, 4))
    with pytest.raises(RuntimeError, match="movedim: repeated dim in `source`"):
        engine.movedim(engine.zeros(2, 3), (0, 0), (0, 1))
