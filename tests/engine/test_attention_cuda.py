"""scaled_dot_product_attention as torch's CUDA memory-efficient kernel accounts it.

bench/data/cuda_sdpa_h100.json holds torch 2.11's allocations and frees on an H100 for
forward and backward of 18 float32 cases (3 shapes, q/k/v laid out [B, H, L, E] or as a
transposed [B, L, H, E], no mask / causal / a float mask). The engine on meta under the caching
model (which stands for a GPU) must make the same blocks in the same order; its default choice
on cuda is the kernel torch chose for every float32 case recorded.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import engine
from engine.allocator import get_allocator
from engine.nn.attention import SDPBackend, sdpa_kernel
from engine.ops import attention as A
from tests.conftest import requires_cuda
from tests.engine.test_cuda_reduce import _Events as _Blocks  # block sizes, frees negative

DATA = json.loads(
    (Path(__file__).resolve().parents[2] / "bench" / "data" / "cuda_sdpa_h100.json").read_text()
)
F32 = [c for c in DATA["events"] if c["dtype"] == "float32"]


def _leaf(shape, layout):
    B, H, L, E = shape
    if layout == "blhe":
        t = engine.empty(B, L, H, E, device="meta").transpose(1, 2)
    else:
        t = engine.empty(B, H, L, E, device="meta")
    return t.requires_grad_(True)


@pytest.mark.parametrize(
    "case", F32, ids=lambda c: f"{c['shape']}-{c['layout']}-{c['mask']}-causal{c['causal']}"
)
def test_efficient_kernel_blocks_equal_torchs_on_an_h100(case):
    assert case["backend"] == "EFFICIENT_ATTENTION"
    engine.memory.set_allocator_model("caching", "meta")
    B, H, L, S, E = case["shape"]
    q, k = _leaf((B, H, L, E), case["layout"]), _leaf((B, H, S, E), case["layout"])
    v = _leaf((B, H, S, E), case["layout"])
    mask = engine.empty(L, S, device="meta") if case["mask"] == "float" else None
    g = engine.empty(B, H, L, E, device="meta")
    fwd, bwd = _Blocks(), _Blocks()
    with sdpa_kernel(SDPBackend.EFFICIENT_ATTENTION):
        with get_allocator("meta").observing(fwd):
            y = engine.nn.functional.scaled_dot_product_attention(
                q, k, v, attn_mask=mask, is_causal=case["causal"]
            )
    assert tuple(y.stride()) == tuple(case["out_stride"])
    assert y.grad_fn.name() == "ScaledDotProductEfficientAttentionBackward0"
    with get_allocator("meta").observing(bwd):
        y.backward(g)
        del y
    assert fwd.sizes == [n for n, _ in case["forward"]]
    assert bwd.sizes == [n for n, _ in case["backward"]]  # (the caller's mask outlives both)


@pytest.mark.parametrize("mask", [None, "float", "bool"])
@pytest.mark.parametrize("layout", ["bhle", "blhe"])
def test_efficient_layouts_keep_the_values(monkeypatch, mask, layout):
    # the CUDA kernel's layouts (output and gradients [B, L, H, E], the log-sum-exp padded to
    # 32 queries, a mask padded to 16 keys) computed on the CPU: the math path's values
    rng = np.random.default_rng(1)
    B, H, L, S, E = 2, 3, 37, 21, 8

    def leaf(shape, seed):
        data = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
        t = engine.tensor(data)  # blhe: (B, L, H, E) memory, seen as (B, H, L, E)
        return (t if layout == "bhle" else t.transpose(1, 2)).requires_grad_(True)

    shapes = {"q": (B, H, L, E), "k": (B, H, S, E), "v": (B, H, S, E)}
    if layout == "blhe":
        shapes = {n: (s[0], s[2], s[1], s[3]) for n, s in shapes.items()}
    m = None
    if mask == "float":
        m = engine.tensor(rng.standard_normal((L, S)).astype(np.float32))
    elif mask == "bool":
        m = engine.tensor(rng.random((L, S)) > 0.2)
    g = engine.tensor(rng.standard_normal((B, H, L, E)).astype(np.float32))
    results = {}
    for backend in ("MATH", "EFFICIENT_ATTENTION"):
        q, k, v = (leaf(shapes[n], i) for i, n in enumerate("qkv"))
        if backend != "MATH":
            monkeypatch.setattr(A, "_cuda_efficient", lambda q, k, v: True)
        with sdpa_kernel(SDPBackend[backend]):
            y = engine.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=m)
        y.backward(g)
        results[backend] = [t.detach().numpy() for t in (y, q.grad, k.grad, v.grad)]
        if backend != "MATH":
            assert tuple(y.stride()) == A._blhd(y.shape)  # the CUDA kernel's layout
    for a, b in zip(results["MATH"], results["EFFICIENT_ATTENTION"], strict=True):
        np.testing.assert_allclose(b, a, rtol=2e-5, atol=2e-6)


def test_the_cuda_default_is_torchs_for_every_float32_case_recorded():
    cols = DATA["choice_columns"]
    rows = [dict(zip(cols, r, strict=True)) for r in DATA["choice"]]
    f32 = [r for r in rows if r["dtype"] == "float32"]
    assert len(f32) == 560
    for r in f32:
        q = engine.empty(2, 4, r["L"], r["E"], device="meta")
        k = engine.empty(2, 4, r["S"], r["E"], device="meta")
        v = engine.empty(2, 4, r["S"], r["E"], device="meta")
        mask = None if r["mask"] == "none" else engine.empty(r["L"], r["S"], device="meta")
        assert A._cuda_default(q, k, v, mask) == r["backend"], r
    # float16 / bfloat16: torch's flash or cuDNN kernels, not modelled: the math path
    half = engine.empty(2, 4, 128, 64, device="meta", dtype=engine.bfloat16)
    assert A._cuda_default(half, half, half, None) == A.MATH


@pytest.mark.cuda
@requires_cuda
@pytest.mark.parametrize("dropout", [0.0, 0.25])
@pytest.mark.parametrize("causal", [False, True])
def test_cuda_default_is_the_efficient_kernel_and_computes_attention(dropout, causal):
    rng = np.random.default_rng(2)

    def leaf(shape):
        data = rng.standard_normal(shape).astype(np.float32)
        return engine.tensor(data, device="cuda").requires_grad_(True)

    q, k, v = leaf((2, 3, 33, 8)), leaf((2, 3, 20, 8)), leaf((2, 3, 20, 8))
    engine.manual_seed(0)
    y = engine.nn.functional.scaled_dot_product_attention(
        q, k, v, dropout_p=dropout, is_causal=causal and dropout == 0
    )
    assert y.grad_fn.name() == "ScaledDotProductEfficientAttentionBackward0"
    y.sum().backward()
    assert all(t.grad is not None for t in (q, k, v))
    if dropout == 0:  # the math path's values
        with sdpa_kernel(SDPBackend.MATH):
            ref = engine.nn.functional.scaled_dot_product_attention(
                q.detach(), k.detach(), v.detach(), is_causal=causal
            )
        np.testing.assert_allclose(
            y.detach().cpu().numpy(), ref.cpu().numpy(), rtol=2e-5, atol=2e-6
        )


def test_the_cuda_default_falls_back_to_math_where_the_kernel_does_not_apply():
    def t(*shape, dtype=None):
        return engine.empty(*shape, device="meta", dtype=dtype or engine.float32)

    q = t(2, 4, 16, 8)
    assert A._cuda_default(q, q, q, None) == A.EFFICIENT_ATTENTION
    assert A._cuda_default(t(2, 4, 16, 6), t(2, 4, 16, 6), t(2, 4, 16, 6), None) == A.MATH
    assert A._cuda_default(q, t(1, 4, 16, 8), t(1, 4, 16, 8), None) == A.MATH  # batch
    assert A._cuda_default(q, t(2, 4, 16, 12), q, None) == A.MATH  # q, k head dims
    assert A._cuda_default(t(4, 16, 8), t(4, 16, 8), t(4, 16, 8), None) == A.MATH  # 3-d
    strided = t(2, 4, 16, 16)[..., ::2]
    assert A._cuda_default(strided, strided, strided, None) == A.MATH  # last-dim stride 2
    grad_mask = t(16, 16).requires_grad_(True)
    assert A._cuda_default(q, q, q, grad_mask) == A.MATH
