"""copy.deepcopy of tensors, parameters and modules (an EMA or teacher model is a deepcopy), as
PyTorch does it: what is shared, what is new, and the memory it takes."""

from __future__ import annotations

import copy

import numpy as np
import pytest

import engine
from tests.engine.test_autograd_memory_parity import engine_region, torch_region


def _model(m):
    nn = m.nn
    return nn.Sequential(nn.Linear(16, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Linear(32, 4))


@pytest.mark.torch
def test_a_model_copy_is_new_memory_with_the_same_values(torch):
    for m in (engine, torch):
        model = _model(m)
        model(m.ones(8, 16)).sum().backward()  # parameters with gradients, running stats moved
        twin = copy.deepcopy(model)
        for (name, p), q in zip(model.named_parameters(), twin.parameters(), strict=True):
            assert type(q) is type(p) and q is not p and q.requires_grad, (m.__name__, name)
            assert q.grad is None  # Parameter.__deepcopy__ leaves the gradient behind
            np.testing.assert_array_equal(q.detach().numpy(), p.detach().numpy())
        for b, c in zip(model.buffers(), twin.buffers(), strict=True):
            assert c is not b
            np.testing.assert_array_equal(c.numpy(), b.numpy())
        with m.no_grad():
            next(twin.parameters()).zero_()
        assert next(model.parameters()).detach().abs().sum().item() > 0


@pytest.mark.torch
def test_a_model_copy_allocates_its_parameters_and_buffers(torch):
    kept = {}

    def program(m):
        model = _model(m)

        def region():
            kept[m.__name__] = copy.deepcopy(model)

        return region

    got = engine_region(program(engine))
    want = torch_region(program(torch))
    # Linear 16x32 + 32, BatchNorm 2x32 weights + 2x32 stats + a 0-d int64 count, Linear 32x4 + 4
    # (torch also makes and drops a 0-d tensor per copy: new_empty([]) before set_())
    assert got[1] == want[1]
    assert got[0] <= want[0] <= got[0] + 64


@pytest.mark.torch
def test_views_and_aliases_of_one_storage_stay_one_storage(torch):
    for m in (engine, torch):
        a = m.arange(10.0)
        view, alias = a[2:5], a.detach()
        ca, cview, calias = copy.deepcopy([a, view, alias])
        ca[3] = 100.0
        assert cview.tolist() == [2.0, 100.0, 4.0], m.__name__
        assert calias[3].item() == 100.0
        assert view.tolist() == [2.0, 3.0, 4.0]  # the originals are untouched


@pytest.mark.torch
def test_a_plain_leaf_keeps_requires_grad_its_gradient_and_attributes(torch):
    for m in (engine, torch):
        t = m.ones(3, requires_grad=True)
        (t * 2).sum().backward()
        t.note = "kept"
        c = copy.deepcopy(t)
        assert c.requires_grad and c.is_leaf and c.note == "kept"
        assert c.grad is not t.grad and c.grad.tolist() == [2.0, 2.0, 2.0]


@pytest.mark.torch
def test_a_non_leaf_cannot_be_deep_copied(torch):
    for m in (engine, torch):
        y = m.ones(3, requires_grad=True) * 2
        with pytest.raises(RuntimeError, match="graph leaves"):
            copy.deepcopy(y)


def test_on_meta_a_view_copies_only_its_own_bytes():
    a = engine.zeros(1000, device="meta")
    before = engine.memory.memory_allocated("meta")
    c = copy.deepcopy(a[:10])  # torch clones on meta: 40 bytes, not the 4000-byte storage
    assert engine.memory.memory_allocated("meta") - before == 40
    assert c.shape == (10,) and c.device.type == "meta"


@pytest.mark.torch
def test_a_leaf_view_of_a_graph_tensor_copies_its_storage(torch):
    """A view made under no_grad of a tensor with history is a leaf: it deep-copies (torch copies
    the storage, not the graph), and shares the copy with a detached alias of that tensor."""
    for m in (engine, torch):
        y = m.arange(6.0, requires_grad=True) * 2
        with m.no_grad():
            v = y[2:4]
        alias = y.detach()
        cv, calias = copy.deepcopy([v, alias])
        assert cv.tolist() == [4.0, 6.0] and cv.is_leaf, m.__name__
        calias[2] = -1.0
        assert cv[0].item() == -1.0, m.__name__
