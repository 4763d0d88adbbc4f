"""bfloat16: 2 bytes per element on every backend (the byte model on cpu and meta, the caching
model on meta), values rounded to bfloat16 after every op as PyTorch's bfloat16 kernels round
them (held in float32 because numpy has no bfloat16), PyTorch's type promotion."""

from __future__ import annotations

import numpy as np
import pytest

import engine
from engine.dtypes import round_to_bfloat16_

try:
    import torch
except ImportError:  # pragma: no cover
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="needs PyTorch as an oracle")
bf16 = engine.bfloat16


def test_dtype_reports_two_bytes_and_floating_point():
    x = engine.zeros(3, 5, dtype=bf16)
    assert x.dtype is bf16 and repr(bf16) == "engine.bfloat16"
    assert x.element_size() == x.itemsize == 2 and x.nbytes == 30
    assert x.is_floating_point() and x.stride() == (5, 1) and x.is_contiguous()
    assert x[:, 1:].stride() == (5, 1) and x[1:].storage_offset() == 5
    assert (
        engine.dtypes.from_any("bfloat16") is bf16
        and engine.dtypes.from_any("torch.bfloat16") is bf16
    )


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_bytes_charged_are_two_per_element(device):
    before = engine.memory.memory_allocated(device)
    x = engine.empty(1000, 1000, dtype=bf16, device=device)
    assert engine.memory.memory_allocated(device) - before == 2_000_000
    y = x.float()
    assert engine.memory.memory_allocated(device) - before == 2_000_000 + 4_000_000
    del x, y


def test_caching_model_on_meta_rounds_bfloat16_requests_like_any_other():
    engine.memory.set_allocator_model("caching", device="meta")
    try:

        def sizes():
            a = engine.empty(1000, dtype=bf16, device="meta")  # 2000 bytes -> 2048 (512s)
            small = engine.memory.memory_allocated("meta")
            b = engine.empty(10000, 10000, dtype=bf16, device="meta")  # 2e8 bytes, 512-aligned
            return small, engine.memory.memory_allocated("meta") - small, a, b

        small, big = sizes()[:2]
        assert (small, big) == (2048, 200_000_000)
    finally:
        engine.memory.set_allocator_model("exact", device="meta")


@needs_torch
@pytest.mark.torch
def test_rounding_matches_torchs_conversion_bit_for_bit():
    x = np.random.default_rng(0).standard_normal(200_000).astype(np.float32) * np.float32(1e4)
    x[:6] = [np.inf, -np.inf, np.nan, 3.39e38, 1e-40, -0.0]
    y = x.copy()
    round_to_bfloat16_(y)
    expected = torch.tensor(x).bfloat16().float().numpy()
    np.testing.assert_array_equal(y, expected)
    strided = x.copy()[::7]
    round_to_bfloat16_(strided)
    np.testing.assert_array_equal(strided, expected[::7])


def _is_bf16_values(arr):
    again = np.array(arr, dtype=np.float32, copy=True)
    round_to_bfloat16_(again)
    return np.array_equal(again, arr, equal_nan=True)


OPS = {
    "add_mul": lambda m, a, b: a + a * 3,
    "exp": lambda m, a, b: a.exp(),
    "linear": lambda m, a, b: m.nn.functional.linear(a, b),
    "matmul": lambda m, a, b: a @ b.t(),
    "softmax": lambda m, a, b: m.nn.functional.softmax(a, -1),
    "gelu": lambda m, a, b: m.nn.functional.gelu(a),
    "layer_norm": lambda m, a, b: m.nn.functional.layer_norm(a, (16,)),
    "sum": lambda m, a, b: a.sum(-1),
    "relu_inplace": lambda m, a, b: (a * 1).relu_(),
}


@needs_torch
@pytest.mark.torch
@pytest.mark.parametrize("name", sorted(OPS))
def test_ops_give_bfloat16_values_like_torch(name):
    rng = np.random.default_rng(1)
    a32 = rng.standard_normal((4, 16)).astype(np.float32)
    b32 = rng.standard_normal((8, 16)).astype(np.float32)
    ea, eb = engine.tensor(a32, dtype=bf16), engine.tensor(b32, dtype=bf16)
    ta, tb = torch.tensor(a32).bfloat16(), torch.tensor(b32).bfloat16()
    np.testing.assert_array_equal(ea.numpy(), ta.float().numpy())  # same inputs
    e, t = OPS[name](engine, ea, eb), OPS[name](torch, ta, tb)
    assert e.dtype is bf16 and t.dtype == torch.bfloat16
    assert _is_bf16_values(e.numpy())
    # the same bfloat16 value, or the next one (an accumulation order may differ)
    np.testing.assert_allclose(e.numpy(), t.float().numpy(), rtol=2**-7, atol=1e-6)


@pytest.mark.parametrize(
    "other, expected",
    [
        (engine.float16, engine.float32),
        (engine.float32, engine.float32),
        (engine.float64, engine.float64),
        (engine.bfloat16, engine.bfloat16),
        (engine.int64, engine.bfloat16),
    ],
)
def test_type_promotion_follows_torch(other, expected):
    a = engine.ones(2, dtype=bf16)
    assert (a + engine.ones(2, dtype=other)).dtype is expected
    assert (a * 2.5).dtype is bf16 and (a * 2).dtype is bf16


def test_creation_and_conversion_round_and_keep_the_dtype():
    x = engine.tensor([1.0, 1.00390625, 1.01171875, 3.14159], dtype=bf16)
    assert x.tolist() == [1.0, 1.0, 1.015625, 3.140625]  # ties to even, then nearest
    assert x.to(engine.float32).dtype is engine.float32
    assert engine.randn(100, dtype=bf16).dtype is bf16 and _is_bf16_values(
        engine.randn(100, dtype=bf16).numpy()
    )
    assert engine.full((3,), 1 / 3, dtype=bf16).tolist() == [0.333984375] * 3
    assert engine.randn(3).bfloat16().dtype is bf16


def test_training_step_in_bfloat16_on_meta_counts_two_byte_parameters_and_gradients():
    model = engine.nn.Linear(1024, 1024, device="meta", dtype=bf16)
    x = engine.empty(64, 1024, device="meta", dtype=bf16)
    model(x).sum().backward()
    assert model.weight.grad.dtype is bf16
    assert model.weight.grad.nbytes == 1024 * 1024 * 2


def test_gradients_are_bfloat16_values_too():
    x = engine.randn(8, 16, dtype=bf16, requires_grad=True)
    w = engine.randn(4, 16, dtype=bf16, requires_grad=True)
    (engine.nn.functional.gelu(engine.nn.functional.linear(x, w)) * 3).sum().backward()
    for g in (x.grad, w.grad):
        assert g.dtype is bf16 and _is_bf16_values(g.numpy())
