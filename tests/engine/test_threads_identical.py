"""Kernels that split large work across the engine's thread pool give bitwise the same results
with 1 and N threads (work is cut into fixed chunks, never into per-thread reductions)."""

from __future__ import annotations

import numpy as np
import pytest

import engine
from engine import kernels

N = 1 << 19  # above kernels.PARALLEL_MIN_ELEMS: the pool is used

PROGRAMS = {
    "gelu": lambda x: engine.nn.functional.gelu(x),
    "gelu_tanh": lambda x: engine.nn.functional.gelu(x, approximate="tanh"),
    "exp_mul_add": lambda x: (x.exp() * 0.5 + x).sigmoid(),
    "relu_maxpool": lambda x: engine.nn.functional.max_pool2d(x.view(8, 16, 64, 64).relu(), 2),
    "softmax": lambda x: x.view(512, 1024).softmax(-1),
}


def _run(name: str, threads: int):
    kernels.set_num_threads(threads)
    a = np.random.default_rng(0).standard_normal(N).astype(np.float32)
    x = engine.tensor(a, requires_grad=True)
    y = PROGRAMS[name](x)
    y.backward(engine.tensor(np.linspace(-1, 1, y.numel(), dtype=np.float32).reshape(y.shape)))
    return y.detach().numpy().copy(), x.grad.numpy().copy()


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_results_are_bitwise_equal_with_one_and_two_threads(name):
    before = kernels.get_num_threads()
    try:
        y1, g1 = _run(name, 1)
        y2, g2 = _run(name, 2)
    finally:
        kernels.set_num_threads(before)
    assert y1.tobytes() == y2.tobytes()
    assert g1.tobytes() == g2.tobytes()
