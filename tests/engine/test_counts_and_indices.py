"""bincount, histc, tril_indices, triu_indices, isin, searchsorted, bucketize, randperm, the
atleast_* views and the dstack/column_stack/row_stack joins, and equal, against torch: values,
dtypes, shapes, gradients and the argument errors in torch's words."""

from __future__ import annotations

import numpy as np
import pytest

import engine
from tests.conftest import assert_raises_as_torch

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.torch

R = np.random.default_rng(0).standard_normal(100_000).astype(np.float32)

CASES = {
    "bincount": lambda m: m.bincount(m.tensor([0, 1, 1, 3])),
    "bincount_weights": lambda m: m.bincount(m.tensor([0, 1, 1, 3]), m.tensor([0.5, 1, 1, 2.0])),
    "bincount_weights64": lambda m: m.bincount(
        m.tensor([0, 1]), weights=m.tensor([0.5, 1.0], dtype=m.float64)
    ),
    "bincount_int_weights": lambda m: m.bincount(m.tensor([0, 1]), weights=m.tensor([2, 3])),
    "bincount_empty": lambda m: m.bincount(m.tensor([], dtype=m.int64)),
    "bincount_minlength": lambda m: m.bincount(m.tensor([1]), minlength=4),
    "bincount_method": lambda m: m.tensor([1, 1, 2]).bincount(),
    "bincount_many_weights": lambda m: m.bincount(
        m.tensor(np.arange(50_000) % 7), weights=m.tensor(R[:50_000])
    ),
    "histc_range": lambda m: m.histc(
        m.tensor([0.0, 1.0, 1.0, 2.0, 3.0, -1.0, float("inf"), float("nan")]), bins=4, min=0, max=3
    ),
    "histc_data_range": lambda m: m.histc(m.tensor([1.0, 2.0, 2.0]), bins=3),
    "histc_one_value": lambda m: m.tensor([2.0, 2.0]).histc(bins=2),
    "histc_normal": lambda m: m.histc(m.tensor(R), bins=37),
    "histc_float64": lambda m: m.histc(m.tensor(R.astype(np.float64)), bins=50, min=-1, max=1.5),
    "triu_indices": lambda m: m.triu_indices(3, 4, 1),
    "tril_indices": lambda m: m.tril_indices(3, 3, -1),
    "triu_indices_empty": lambda m: m.triu_indices(0, 3),
    "tril_indices_int32": lambda m: m.tril_indices(2, 3, dtype=m.int32),
    "tril_indices_wide_offset": lambda m: m.tril_indices(4, 2, 5),
    "isin": lambda m: m.isin(m.tensor([1, 2, 3]), m.tensor([2, 5])),
    "isin_number_test": lambda m: m.isin(m.tensor([1, 2, 3]), 2),
    "isin_number_elements": lambda m: m.isin(3, m.tensor([2, 3])),
    "isin_nan": lambda m: m.isin(m.tensor([1.0, float("nan")]), m.tensor([float("nan")])),
    "isin_invert": lambda m: m.isin(m.tensor([1, 2, 3]), m.tensor([2]), invert=True),
    "bucketize": lambda m: m.bucketize(m.tensor([[1, 5], [7, 0]]), m.tensor([1, 3, 5, 7])),
    "bucketize_right": lambda m: m.bucketize(
        m.tensor([1, 5, 7]), m.tensor([1, 3, 5, 7]), right=True
    ),
    "searchsorted_rows": lambda m: m.searchsorted(
        m.tensor([[1, 3, 5], [2, 4, 6]]), m.tensor([[3, 6], [1, 7]])
    ),
    "searchsorted_number": lambda m: m.searchsorted(m.tensor([1, 3, 5]), 4, right=True),
    "searchsorted_side_int32": lambda m: m.searchsorted(
        m.tensor([1.0, 3, 5]), m.tensor([3.0]), side="right", out_int32=True
    ),
    "searchsorted_sorter": lambda m: m.searchsorted(
        m.tensor([5.0, 1, 3]), m.tensor([3.0, 4.0]), sorter=m.tensor([1, 2, 0])
    ),
    "randperm_is_a_permutation": lambda m: m.randperm(100).sort()[0],
    "randperm_float": lambda m: m.randperm(5, dtype=m.float32).sort()[0],
    "randperm_empty": lambda m: m.randperm(0),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_values_as_torch(name):
    ours, theirs = CASES[name](engine), CASES[name](torch)
    assert str(ours.dtype).split(".")[-1] == str(theirs.dtype).split(".")[-1]
    assert tuple(ours.shape) == tuple(theirs.shape)
    assert ours.numpy().tobytes() == theirs.numpy().tobytes()


@pytest.mark.parametrize(
    "call",
    [
        lambda m: m.bincount(m.tensor([-1])),
        lambda m: m.bincount(m.tensor([[1]])),
        lambda m: m.bincount(m.tensor([1.0])),
        lambda m: m.bincount(m.tensor([1]), minlength=-1),
        lambda m: m.bincount(m.tensor([1, 2]), weights=m.tensor([1.0])),
        lambda m: m.histc(m.tensor([1, 2]), bins=2),
        lambda m: m.histc(m.tensor([1.0]), bins=0),
        lambda m: m.histc(m.tensor([1.0]), bins=2, min=2, max=1),
        lambda m: m.equal(m.tensor([1.0]), 1.0),
        lambda m: m.searchsorted(m.tensor([1.0, 3, 5]), m.tensor([3.0]), side="middle"),
        lambda m: m.searchsorted(m.tensor([1.0, 3]), m.tensor([3.0]), side="left", right=True),
        lambda m: m.searchsorted(m.tensor([[1, 3, 5], [2, 4, 6]]), m.tensor([[3, 6]])),
        lambda m: m.bucketize(m.tensor([1]), m.tensor([[1, 2]])),
        lambda m: m.randperm(-1),
        lambda m: m.randperm(3, requires_grad=True),
        lambda m: m.zeros(2, dtype=m.int64, requires_grad=True),
        lambda m: m.dstack([]),
    ],
)
def test_refused_as_torch(call):
    assert_raises_as_torch(call)


def test_equal_is_a_bool():
    # torch.equal (same size, same values; NaN equals nothing), not eq's tensor
    for m in (engine, torch):
        assert m.equal(m.tensor([1.0, 2.0]), m.tensor([1.0, 2.0])) is True
        assert m.equal(m.tensor([1.0, 2.0]), m.tensor([1.0])) is False
        assert m.equal(m.tensor([1]), m.tensor([1.0])) is True
        assert m.equal(m.tensor([float("nan")]), m.tensor([float("nan")])) is False
        assert m.tensor([3, 4]).equal(m.tensor([3, 4])) is True


def test_memory_formats():
    x = engine.ones(2, 3, 4, 5)
    assert x.clone(memory_format=engine.contiguous_format).is_contiguous()
    assert engine.zeros_like(x, memory_format=engine.preserve_format).shape == x.shape
    assert repr(engine.channels_last) == "engine.channels_last"
    with pytest.raises(NotImplementedError, match="channels_last is not supported"):
        x.contiguous(memory_format=engine.channels_last)


JOINS = {
    "atleast_1d": lambda m, a, b, c: m.atleast_1d(a, b, c),
    "atleast_2d": lambda m, a, b, c: m.atleast_2d([a, b, c]),
    "atleast_3d": lambda m, a, b, c: m.atleast_3d(a, b, c),
    "dstack": lambda m, a, b, c: m.dstack([b, b * 2]),
    "column_stack": lambda m, a, b, c: m.column_stack([b, c, a.expand(4)]),
    "row_stack": lambda m, a, b, c: m.row_stack([b, c.t()]),
}


@pytest.mark.parametrize("name", sorted(JOINS))
def test_joins_and_views_as_torch(name):
    # a 0-d, a vector and a matrix; shapes, values and the gradients through them
    rng = np.random.default_rng(3)
    arrays = [rng.standard_normal(s).astype(np.float32) for s in ((), (4,), (4, 2))]
    results = []
    for m in (engine, torch):
        ins = [m.tensor(a, requires_grad=True) for a in arrays]
        out = JOINS[name](m, *ins)
        outs = out if isinstance(out, tuple) else (out,)
        sum(((o * o).sum() for o in outs), m.tensor(0.0)).backward()
        results.append(
            (
                [tuple(o.shape) for o in outs],
                [o.detach().numpy() for o in outs],
                [t.grad.numpy() if t.grad is not None else None for t in ins],
            )
        )
    (s1, v1, g1), (s2, v2, g2) = results
    assert s1 == s2
    for a, b in zip(v1 + g1, v2 + g2, strict=True):
        assert (a is None) == (b is None)
        if a is not None:
            np.testing.assert_allclose(a, b, rtol=1e-6)
