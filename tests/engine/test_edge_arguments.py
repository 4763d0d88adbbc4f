"""Edge arguments that torch takes or refuses: the engine gives what torch gives, or raises the
same error in the same words (not an error of its own internals)."""

from __future__ import annotations

import pytest

import engine
from tests.conftest import assert_raises_as_torch

pytestmark = pytest.mark.torch


@pytest.mark.parametrize(
    "call",
    [
        lambda m: m.cat([]),
        lambda m: m.cat(()),
        lambda m: m.stack([]),
        lambda m: m.hstack([]),
        lambda m: m.vstack([]),
        lambda m: m.zeros(3).split(-1),
        lambda m: m.zeros(3).split(0),
    ],
    ids=["cat", "cat-tuple", "stack", "hstack", "vstack", "split-negative", "split-zero"],
)
def test_refused_as_torch(call, torch):
    assert_raises_as_torch(call)


def test_split_of_an_empty_dim(torch):
    for size in (0, 3):
        ours = engine.zeros(0).split(size)
        theirs = torch.zeros(0).split(size)
        assert [tuple(t.shape) for t in ours] == [tuple(t.shape) for t in theirs]


@pytest.mark.parametrize("shape, dim", [((3, 0), 1), ((0, 3), 1), ((0,), 0)])
@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
def test_softmax_of_an_empty_tensor(name, shape, dim, torch):
    # (numpy's max over a zero-size dim raised a ValueError)
    x = engine.ones(*shape, requires_grad=True)
    y = getattr(engine.nn.functional, name)(x, dim)
    y.sum().backward()
    t = torch.ones(*shape, requires_grad=True)
    getattr(torch.nn.functional, name)(t, dim).sum().backward()
    assert tuple(y.shape) == tuple(t.shape) and tuple(x.grad.shape) == tuple(t.grad.shape)
