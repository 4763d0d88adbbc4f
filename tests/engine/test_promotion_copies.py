"""Mixed dtypes on cpu: torch's TensorIterator promotes an input whose dtype is not the op's
common dtype by a temporary copy, made before the output and freed when the op returns (the
last made first). Every block against torch 2.13's CPU profiler; meta, which plans a GPU run
(CUDA's kernels cast in their loop), makes no copy."""

from __future__ import annotations

import numpy as np
import pytest

import engine
from tests.engine.test_memory_vs_torch import assert_sequence_as_torch

torch = pytest.importorskip("torch")

F32 = np.random.default_rng(3).standard_normal((64, 64)).astype(np.float32)
I64 = np.arange(64 * 64).reshape(64, 64) + 1
I64_TALL = np.arange(128 * 64).reshape(128, 64) + 1
MASK = np.random.default_rng(4).standard_normal((64, 64)) > 0

CASES = {  # name -> op(m, f, a, b, mask)
    "int_true_divide_int": lambda m, f, a, b, mask: a / b,  # both copied
    "int64_over_int32": lambda m, f, a, b, mask: a / b.int(),
    "float_times_mask": lambda m, f, a, b, mask: f * mask,
    "transposed_float_times_mask": lambda m, f, a, b, mask: f.t() * mask,
    "float_times_broadcast_mask": lambda m, f, a, b, mask: f * mask[0],
    "in_place_times_mask": lambda m, f, a, b, mask: f.clone().mul_(mask),
    "int_minus_float": lambda m, f, a, b, mask: a - f,
    "add_alpha_mixed": lambda m, f, a, b, mask: m.add(f, a, alpha=2),
    "int_times_python_float": lambda m, f, a, b, mask: a * 2.5,
    "float_times_double": lambda m, f, a, b, mask: f * f.double(),
    "float_plus_bfloat16": lambda m, f, a, b, mask: f + f.bfloat16(),
    "maximum_mixed": lambda m, f, a, b, mask: m.maximum(f, a),
    "pow_mixed": lambda m, f, a, b, mask: f ** a.clamp(max=2),
    "compare_mixed": lambda m, f, a, b, mask: f < a,
    "equal_mixed": lambda m, f, a, b, mask: a == f,
    "logical_and_mixed": lambda m, f, a, b, mask: m.logical_and(f, mask),
    "where_mixed": lambda m, f, a, b, mask: m.where(mask, f, a),
    "int_exp": lambda m, f, a, b, mask: a.exp(),
    "int_sqrt": lambda m, f, a, b, mask: a.sqrt(),
    "one_dtype_no_copy": lambda m, f, a, b, mask: mask * mask,
}


def _operands(m):
    return m.tensor(F32), m.tensor(I64), m.tensor(I64_TALL[:64]), m.tensor(MASK)


@pytest.mark.parametrize("name", sorted(CASES))
def test_promotion_copies_as_torch(name):
    def make(m):
        f, a, b, mask = _operands(m)
        return lambda: CASES[name](m, f, a, b, mask)

    assert_sequence_as_torch(make)


@pytest.mark.parametrize("name", ["float_times_mask", "int_true_divide_int", "int_exp"])
def test_promotion_copies_are_cpu_only(name):
    peaks = {}
    for device in ("cpu", "meta"):
        f, a, b, mask = (t.to(device) for t in _operands(engine))
        engine.memory.reset_peak_memory_stats(device)
        base = engine.memory.memory_allocated(device)
        y = CASES[name](engine, f, a, b, mask)
        peaks[device] = engine.memory.max_memory_allocated(device) - base
        assert engine.memory.memory_allocated(device) - base == y.numel() * y.element_size()
    copies = {"float_times_mask": 1, "int_true_divide_int": 2, "int_exp": 1}[name]
    assert peaks["cpu"] == peaks["meta"] + copies * 64 * 64 * 4  # float32 copies


def test_promoted_values_and_gradients_as_torch():
    out = {}
    for m in (engine, torch):
        f = m.tensor(F32, requires_grad=True)
        mask = m.tensor(MASK)
        y = (f * mask) / m.tensor(I64)
        y.sum().backward()
        out[m] = (y.detach().numpy(), f.grad.numpy())
    np.testing.assert_allclose(out[engine][0], out[torch][0], rtol=1e-6)
    np.testing.assert_allclose(out[engine][1], out[torch][1], rtol=1e-6)
