"""Channel dropout (F.dropout1d / dropout2d / dropout3d, nn.Dropout1d/2d/3d): torch's composite
(a small [N, C, 1, ...] noise drawn bernoulli(1 - p), divided by 1 - p, multiplied in): its
blocks and nodes as torch's profiler shows them, whole channels zeroed, eval and p == 1, the
unbatched forms, warnings and refusals."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import engine
from tests.conftest import assert_raises_as_torch, node_chain
from tests.engine.test_memory_vs_torch import assert_steps_as_torch, forward_backward

torch = pytest.importorskip("torch")

X = np.random.default_rng(0).standard_normal((8, 16, 12, 12)).astype(np.float32)

CASES = {
    "dropout2d": lambda m, x: m.nn.functional.dropout2d(x, 0.3),
    "dropout2d_inplace": lambda m, x: m.nn.functional.dropout2d(x * 1, 0.3, inplace=True),
    "dropout1d": lambda m, x: m.nn.functional.dropout1d(x[:, :, 0], 0.3),
    "dropout1d_unbatched": lambda m, x: m.nn.functional.dropout1d(x[0, :, :, 0], 0.3),
    "dropout3d_unbatched": lambda m, x: m.nn.functional.dropout3d(x, 0.3),
    "dropout3d_inplace_unbatched": lambda m, x: m.nn.functional.dropout3d(x * 1, 0.5, inplace=True),
    "p_one": lambda m, x: m.nn.functional.dropout2d(x, 1.0),
    "eval": lambda m, x: m.nn.functional.dropout2d(x, 0.5, training=False) * 1,
    "module": lambda m, x: m.nn.Dropout2d(0.2)(x),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_blocks_and_nodes_as_torch(name):
    held = {engine: {}, torch: {}}

    def make(m):
        x = m.tensor(X, requires_grad=True)
        return forward_backward(m, lambda: CASES[name](m, x), held[m])

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert_steps_as_torch(make)
    assert node_chain(held[engine]["y"].grad_fn) == node_chain(held[torch]["y"].grad_fn)


def test_whole_channels_are_zeroed_and_the_rest_scaled():
    engine.manual_seed(3)
    y = engine.nn.functional.dropout2d(engine.ones(64, 32, 3, 3), 0.25).numpy()
    assert (y == y[:, :, :1, :1]).all()  # one draw per channel
    assert set(np.unique(y)) <= {0.0, np.float32(1 / 0.75)}
    assert 0.7 < (y[:, :, 0, 0] != 0).mean() < 0.82


def test_3d_input_to_dropout2d_warns_as_torch():
    for m in (engine, torch):
        with pytest.warns(UserWarning, match="channel-wise 1D dropout"):
            m.nn.functional.dropout2d(m.ones(2, 3, 4))


def test_module_reprs_as_torch():
    for name in ("Dropout1d", "Dropout2d", "Dropout3d"):
        assert repr(getattr(engine.nn, name)(0.2)) == repr(getattr(torch.nn, name)(0.2))


@pytest.mark.parametrize(
    "call",
    [
        lambda m: m.nn.functional.dropout1d(m.ones(2, 3, 4, 5)),
        lambda m: m.nn.functional.dropout2d(m.ones(2, 3, 4, 5), p=1.5),
        lambda m: m.nn.functional.dropout3d(m.ones(2, 3, 4, 5), p=-0.1),
    ],
)
def test_refusals_as_torch(call):
    assert_raises_as_torch(call)
