"""The op table (engine/ops/registry.py): one row per public name, every namespace built from it."""

from __future__ import annotations

import pytest

import engine
import engine.nn.functional as F
from engine.ops import registry
from engine.tensor import Tensor


@pytest.fixture
def scratch_rows():
    """Rows registered by a test are removed afterwards (the table is process-wide)."""
    before = dict(registry._ROWS)
    yield
    registry._ROWS.clear()
    registry._ROWS.update(before)
    registry._built.clear()


def test_registering_a_name_twice_raises(scratch_rows):
    with pytest.raises(registry.DuplicateOpError, match="'relu' is already registered"):
        registry.register("relu", lambda x: x)


def test_registering_a_new_name_twice_raises_and_keeps_the_first(scratch_rows):
    def first(x):
        return x

    registry.register("test_only_op", first, method=True)
    with pytest.raises(registry.DuplicateOpError):
        registry.register("test_only_op", lambda x: x)
    assert registry.get("test_only_op").fn is first
    assert registry.functions()["test_only_op"] is first
    assert registry.methods()["test_only_op"] is first


def test_alias_of_an_existing_row_is_a_second_name_for_it(scratch_rows):
    registry.alias("test_only_clip", "clamp")
    assert registry.functions()["test_only_clip"] is registry.get("clamp").fn


def test_engine_namespace_is_the_function_rows():
    for name, fn in registry.functions().items():
        assert getattr(engine, name) is fn, name
    assert set(registry.functions()) <= set(engine.__all__)


def test_tensor_methods_are_the_method_rows():
    for name, fn in registry.methods().items():
        assert getattr(Tensor, name) is fn, name


def test_nn_functional_is_the_functional_rows():
    assert set(F.__all__) == set(registry.functional())
    for name, fn in registry.functional().items():
        assert getattr(F, name) is fn, name


def test_inplace_names_point_at_rows():
    for row in registry.rows():
        if row.inplace is not None:
            assert row.inplace in registry._ROWS, row.name


def test_functional_forms_follow_pytorch_signatures():
    x = engine.tensor([[-1.0, 2.0], [3.0, -4.0]])
    assert F.relu(x).tolist() == [[0.0, 2.0], [3.0, 0.0]]
    assert F.softmax(x).shape == (2, 2)  # implicit dim, as torch's (deprecated) choice
    y = x.clone()
    assert F.relu(y, inplace=True) is y
