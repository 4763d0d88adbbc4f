"""parameters_to_vector / vector_to_parameters against torch 2.13: values, gradients, the node,
the blocks its CPU profiler shows, shared storage after vector_to_parameters, refusals."""

from __future__ import annotations

import numpy as np
import pytest

import engine
from tests.conftest import assert_raises_as_torch
from tests.engine.test_memory_vs_torch import (
    assert_steps_as_torch,
    engine_sequence,
    forward_backward,
)

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(3)
SHAPES = [(32, 16), (32,), (16, 32), (16,)]
VALUES = [RNG.standard_normal(s) for s in SHAPES]


def _params(m, dtype="float64"):
    return [m.nn.Parameter(m.tensor(v.astype(dtype))) for v in VALUES]


def test_parameters_to_vector_values_gradients_and_node_as_torch():
    def run(m):
        ps = _params(m)
        vec = m.nn.utils.parameters_to_vector(ps)
        (vec * m.tensor(np.arange(vec.numel(), dtype=np.float64))).sum().backward()
        return vec.detach().numpy(), [p.grad.numpy() for p in ps], vec.grad_fn.name()

    e, t = run(engine), run(torch)
    np.testing.assert_array_equal(e[0], t[0])
    for a, b in zip(e[1], t[1], strict=True):
        np.testing.assert_array_equal(a, b)
    assert e[2] == t[2] == "CatBackward0"


def test_parameters_to_vector_blocks_as_torch():
    def make(m):
        ps = _params(m, "float32")
        return forward_backward(m, lambda: m.nn.utils.parameters_to_vector(ps))

    assert_steps_as_torch(make)


def test_vector_to_parameters_shares_the_vectors_storage_as_torch():
    def run(m):
        ps = _params(m)
        n = sum(int(np.prod(s)) for s in SHAPES)
        vec = m.tensor(np.linspace(-1.0, 1.0, n))
        m.nn.utils.vector_to_parameters(vec, ps)
        with m.no_grad():
            vec.mul_(2)
        return [p.detach().numpy().copy() for p in ps], [tuple(p.shape) for p in ps]

    e, t = run(engine), run(torch)
    assert e[1] == t[1]
    for a, b in zip(e[0], t[0], strict=True):
        np.testing.assert_array_equal(a, b)


def test_vector_to_parameters_allocates_nothing_and_frees_the_old_data():
    # (torch's profiler does not report frees of blocks made before profiling began, so the
    # parameters' old blocks are checked on the engine's side only)
    ps = _params(engine, "float32")
    vec = engine.zeros(sum(int(np.prod(s)) for s in SHAPES))
    seq = engine_sequence(lambda: engine.nn.utils.vector_to_parameters(vec, ps), 0)
    assert sorted(seq) == sorted(f"-{int(np.prod(s)) * 4}#?" for s in SHAPES)


def test_refusals_as_torch():
    assert_raises_as_torch(lambda m: m.nn.utils.vector_to_parameters([1.0], _params(m)), TypeError)
