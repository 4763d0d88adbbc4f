"""Tensor.exponential_: draws from the engine's generator (the same as gumbel_softmax's noise,
so reseeding gives the same values, divided by lambd), in place (no block, version + 1),
torch's node (ExponentialBackward0, zero gradient), its refusals in its words, and meta."""

from __future__ import annotations

import numpy as np
import pytest

import engine
from engine.ops.nn.gumbel import exponential_noise_
from tests.conftest import assert_raises_as_torch, node_chain
from tests.engine.test_memory_vs_torch import assert_steps_as_torch, forward_backward


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("lambd", [1.0, 2.5, 0.1])
def test_values_are_the_generators_noise_over_lambd(dtype, lambd):
    """Reseeded, exponential_(lambd) draws gumbel_softmax's Exp(1) noise divided by lambd;
    the same seed twice gives the same values, another seed others."""
    dt = getattr(engine, dtype)
    engine.manual_seed(7)
    x = engine.empty(3, 500, dtype=dt).exponential_(lambd)
    engine.manual_seed(7)
    noise = exponential_noise_(engine.empty(3, 500, dtype=dt)).numpy()
    np.testing.assert_allclose(x.numpy(), noise / lambd, rtol=1e-6 if dtype == "float32" else 0)
    engine.manual_seed(7)
    again = engine.empty(3, 500, dtype=dt).exponential_(lambd=lambd)
    np.testing.assert_array_equal(again.numpy(), x.numpy())
    engine.manual_seed(8)
    assert not np.array_equal(engine.empty(3, 500, dtype=dt).exponential_(lambd).numpy(), x.numpy())
    assert x.dtype == dt and (x.numpy() > 0).all()


def test_distribution_has_rate_lambd():
    engine.manual_seed(0)
    x = engine.empty(200000).exponential_(4.0).numpy()
    assert abs(x.mean() - 0.25) < 0.005 and abs(x.std() - 0.25) < 0.005
    assert x.min() >= 0


def test_in_place_non_contiguous_and_half(torch):
    base = engine.zeros(40, 30)
    view = base.t()
    assert view.exponential_() is view
    assert (base.numpy() > 0).all() and base._version == 1
    cols = engine.zeros(40, 30)
    cols[:, :10].exponential_(2.0)
    assert (cols.numpy()[:, :10] > 0).all() and (cols.numpy()[:, 10:] == 0).all()
    h = engine.zeros(1000, dtype=engine.float16).exponential_(0.5)
    assert h.dtype == engine.float16 and abs(float(h.numpy().astype(np.float64).mean()) - 2) < 0.3
    # rate inf: every draw is 0, as torch's
    for m in (engine, torch):
        np.testing.assert_array_equal(m.ones(4).exponential_(float("inf")).numpy(), np.zeros(4))


def test_version_moves_by_one_as_torch(torch):
    for m in (engine, torch):
        x = m.zeros(5)
        x.exponential_()
        x.exponential_(3)
        assert x._version == 2, m.__name__


@pytest.mark.torch
def test_node_and_zero_gradient_as_torch(torch):
    chains, grads = {}, {}
    for m in (engine, torch):
        leaf = m.ones(4, requires_grad=True)
        y = (leaf * 2).exponential_(1.5)
        chains[m.__name__] = node_chain(y.grad_fn)
        (y * 3).sum().backward()
        grads[m.__name__] = leaf.grad.numpy()
    assert chains["engine"] == chains["torch"] == ["ExponentialBackward0", "MulBackward0"]
    np.testing.assert_array_equal(grads["engine"], grads["torch"])
    np.testing.assert_array_equal(grads["engine"], np.zeros(4))


@pytest.mark.torch
@pytest.mark.parametrize(
    "call",
    [
        lambda m: m.zeros(3).exponential_(0),
        lambda m: m.zeros(3).exponential_(-1.0),
        lambda m: m.zeros(3).exponential_(-1e-7),
        lambda m: m.zeros(3).exponential_(-0.0),
        lambda m: m.zeros(3).exponential_(lambd=-2.5),
        lambda m: m.zeros(3).exponential_(float("nan")),
        lambda m: m.zeros(3).exponential_(float("-inf")),
        lambda m: m.zeros(3, dtype=m.int64).exponential_(),
        lambda m: m.zeros(3, dtype=m.bool).exponential_(),
        lambda m: m.zeros(3, dtype=m.int64).exponential_(-1),
        lambda m: m.zeros(3, requires_grad=True).exponential_(),
        lambda m: m.zeros(3).exponential_("a"),
    ],
    ids=[
        "zero",
        "negative",
        "tiny negative",
        "negative zero",
        "keyword",
        "nan",
        "-inf",
        "int64",
        "bool",
        "int64 and negative",
        "leaf requiring grad",
        "str",
    ],
)
def test_refusals_as_torch(call, torch):
    assert_raises_as_torch(call)


@pytest.mark.torch
@pytest.mark.parametrize("shape", [(256, 64), (7,)])
def test_every_block_forward_and_backward_as_torch(shape, torch):
    """In place: no block; backward: the seed and the zero gradient of the leaf."""

    def make(m):
        leaf = m.ones(*shape, requires_grad=True)
        return forward_backward(m, lambda: (leaf * 2).exponential_(0.5))

    assert_steps_as_torch(make)


def test_meta_shape_dtype_and_no_values():
    x = engine.empty(64, 1024, device="meta", dtype=engine.float64)
    before = engine.memory.memory_allocated("meta")
    assert x.exponential_(2.0) is x
    assert x.shape == (64, 1024) and x.dtype == engine.float64 and x.device.type == "meta"
    assert engine.memory.memory_allocated("meta") == before
    with pytest.raises(RuntimeError, match="lambda > 0.0"):
        x.exponential_(-1.0)
