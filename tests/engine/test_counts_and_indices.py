"""bincount, histc, tril_indices, triu_indices and equal against torch: values, dtypes, shapes
and the argument errors in torch's words."""

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
