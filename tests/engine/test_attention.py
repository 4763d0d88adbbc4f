"""scaled_dot_product_attention (math path and fused accounting), MultiheadAttention and
TransformerEncoderLayer: values and gradients vs float64 central differences and torch, memory
vs torch's CPU profiler and vs bytes counted by hand."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest

import engine
from engine.nn import MultiheadAttention, TransformerEncoder, TransformerEncoderLayer
from engine.nn.attention import SDPBackend, sdpa_kernel
from engine.ops.attention import scaled_dot_product_attention as sdpa
from tests.engine.test_memory_vs_torch import SCALAR_SLACK, engine_peak, torch_peak
from tests.engine.test_nn import gradcheck

try:
    import torch
except ImportError:  # pragma: no cover - torch is the oracle only
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="needs PyTorch as an oracle")
BACKENDS = ["MATH", "FLASH_ATTENTION"]
MASKS = ["none", "causal", "bool", "float"]


def _ctx(m, backend):
    """sdpa_kernel(backend) for the engine; torch's own for torch (math or its default)."""
    if m is engine:
        return sdpa_kernel(SDPBackend[backend])
    from torch.nn.attention import SDPBackend as TB
    from torch.nn.attention import sdpa_kernel as tk

    return tk(TB.MATH) if backend == "MATH" else contextlib.nullcontext()


def _F(m):
    return m.nn.functional


def _mask_kwargs(m, kind, L, S, seed=3):
    rng = np.random.default_rng(seed)
    if kind == "causal":
        return {"is_causal": True}
    if kind == "bool":
        keep = rng.random((L, S)) > 0.3
        keep[:, 0] = True  # no fully masked row
        return {"attn_mask": m.tensor(keep)}
    if kind == "float":
        return {"attn_mask": m.tensor(rng.standard_normal((2, 1, L, S)))}
    return {}


# ---------------------------------------------------------------------------------------------
# scaled_dot_product_attention: gradients
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("mask", MASKS)
def test_sdpa_gradients_match_central_differences_and_torch(backend, mask):
    shapes = [(2, 2, 3, 4), (2, 2, 5, 4), (2, 2, 5, 3)]  # q [B,H,L,E], k [B,H,S,E], v [B,H,S,Ev]
    arrays = [np.random.default_rng(i).standard_normal(s) for i, s in enumerate(shapes)]

    def fn(m, q, k, v):
        kw = _mask_kwargs(m, mask, 3, 5)
        with _ctx(m, backend):
            return _F(m).scaled_dot_product_attention(q, k, v, scale=0.7, **kw)

    gradcheck(fn, arrays, torch=torch)


@needs_torch
@pytest.mark.torch
@pytest.mark.parametrize("mask", MASKS)
@pytest.mark.parametrize("shape", [(3, 2, 24, 8), (4, 24, 8), (24, 8)])
def test_sdpa_fused_float32_matches_torchs_flash_kernel_in_every_chunking(mask, shape, monkeypatch):
    """The fused path in float32, as torch's CPU flash kernel computes it (backward from the
    log-sum-exp): output and gradients within float32 rounding of torch's (its flash kernel for
    4-D inputs, math otherwise); runs of few slices (a small _CHUNK_SCORES) give the same bits."""
    from engine.ops import attention as att

    L = shape[-2]
    rng = np.random.default_rng(7)
    arrays = [rng.standard_normal(shape).astype(np.float32) for _ in range(3)]
    grad = rng.standard_normal(shape).astype(np.float32)

    def run(m):
        q, k, v = (m.tensor(a.copy(), requires_grad=True) for a in arrays)
        kw = _mask_kwargs(m, mask, L, L)
        if mask == "float":
            kw["attn_mask"] = m.tensor(np.random.default_rng(3).standard_normal((L, L)))
            kw["attn_mask"] = kw["attn_mask"].float()
        with _ctx(m, "FLASH_ATTENTION"):
            y = _F(m).scaled_dot_product_attention(q, k, v, **kw)
        y.backward(m.tensor(grad))
        return [t.detach().numpy() for t in (y, q.grad, k.grad, v.grad)]

    ours, theirs = run(engine), run(torch)
    for a, b in zip(ours, theirs, strict=True):
        np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-6)
    monkeypatch.setattr(att, "_CHUNK_SCORES", L * L)  # one (batch, head) slice per run
    for a, b in zip(run(engine), ours, strict=True):
        assert np.array_equal(a, b)


def test_sdpa_fully_masked_row_is_zero_like_torchs_safe_softmax():
    q, k, v = (engine.ones(1, 1, 2, 2, requires_grad=True) for _ in range(3))
    mask = engine.tensor([[True, True], [False, False]])
    for backend in BACKENDS:
        with sdpa_kernel(SDPBackend[backend]):
            y = sdpa(q, k, v, attn_mask=mask)
        assert y.detach().numpy()[0, 0, 1].tolist() == [0.0, 0.0], backend
        assert np.isfinite(y.detach().numpy()).all()


@pytest.mark.parametrize("backend", BACKENDS)
def test_sdpa_dropout_is_reproducible_within_a_step_and_scales_the_kept(backend):
    # Given dropout p=0.5: the gradient of sum(out) w.r.t. v is the column sums of the dropped
    # probabilities, which backward must reproduce from what forward used.
    engine.manual_seed(0)
    q, k, v = (engine.randn(1, 2, 4, 3, dtype=engine.float64, requires_grad=True) for _ in range(3))
    with sdpa_kernel(SDPBackend[backend]):
        y = sdpa(q, k, v, dropout_p=0.5)
    y.sum().backward()
    # out = P_drop @ v  =>  d out.sum() / dv[s, j] = sum_l P_drop[l, s]
    with engine.no_grad(), sdpa_kernel(SDPBackend[backend]):
        # recover P_drop from out with v = identity columns (same seed, same draw)
        engine.manual_seed(0)
        q2, k2 = (engine.randn(1, 2, 4, 3, dtype=engine.float64) for _ in range(2))
        engine.randn(1, 2, 4, 3, dtype=engine.float64)
        eye = engine.tensor(np.broadcast_to(np.eye(4), (1, 2, 4, 4)).copy())
        p_drop = sdpa(q2, k2, eye, dropout_p=0.5).numpy()
    expected = np.broadcast_to(p_drop.sum(axis=-2)[..., None], (1, 2, 4, 3))
    np.testing.assert_allclose(v.grad.numpy(), expected, rtol=1e-12, atol=1e-12)
    values = set(np.round(p_drop.ravel(), 12)) - {0.0}
    assert 0.0 in np.round(p_drop, 12) and values  # some dropped, some kept


def test_sdpa_errors_name_the_problem():
    q = engine.randn(1, 1, 3, 4)
    with pytest.raises(RuntimeError, match="is_causal"):
        sdpa(q, q, q, attn_mask=engine.ones(3, 3), is_causal=True)
    with pytest.raises(RuntimeError, match="same embedding size"):
        sdpa(q, engine.randn(1, 1, 3, 5), q)
    with pytest.raises(RuntimeError, match="does not broadcast"):
        sdpa(q, q, q, attn_mask=engine.ones(2, 2))
    with pytest.raises(ValueError, match="unknown SDPA backend"):
        sdpa_kernel("fast")


# ---------------------------------------------------------------------------------------------
# scaled_dot_product_attention: memory
# ---------------------------------------------------------------------------------------------
B, H, L, D = 2, 4, 64, 16
QKV = B * H * L * D * 4  # one of q, k, v, out (float32)
SCORES = B * H * L * L * 4  # one attention matrix (float32)


def _sdpa_inputs(m, kind):
    """q, k, v [B, H, L, D] float32 that require grad, and the keyword arguments of `kind`."""
    rng = np.random.default_rng(0)
    q, k, v = (
        m.tensor(rng.standard_normal((B, H, L, D)).astype(np.float32), requires_grad=True)
        for _ in range(3)
    )
    kw = {"dropout_p": 0.2} if kind == "dropout" else _mask_kwargs(m, kind, L, L)
    if "attn_mask" in kw and kw["attn_mask"].dtype != m.bool:
        kw["attn_mask"] = kw["attn_mask"].float()
    return q, k, v, kw


def _sdpa_step(m, backend, kind):
    q, k, v, kw = _sdpa_inputs(m, kind)

    def region():
        with _ctx(m, backend):
            y = _F(m).scaled_dot_product_attention(q, k, v, **kw)
        y.sum().backward()

    return region


@needs_torch
@pytest.mark.torch
@pytest.mark.parametrize("kind", ["none", "causal", "bool", "float", "dropout"])
def test_sdpa_math_path_peak_matches_torch_profiler(kind):
    e = engine_peak(_sdpa_step(engine, "MATH", kind))
    t = torch_peak(_sdpa_step(torch, "MATH", kind))
    # With dropout torch's CPU bmm backward copies one transposed (L, D) batch matrix into a
    # temporary (BLAS layout) at the peak; the engine's matmul reads strided operands directly.
    slack = SCALAR_SLACK + (L * D * 4 if kind == "dropout" else 0)
    assert abs(e - t) <= slack, (e, t)


def test_sdpa_math_path_peak_by_hand():
    # forward keeps q', k' (scaled copies) and the softmax; the scores die after softmax.
    # backward's peak, in softmax's backward: saved (2 QKV + SCORES) + the output y (QKV) and
    # its sum (4 bytes) and the sum's seed (4 bytes, held until backward returns) + grad_v (QKV)
    # + grad of the weights (SCORES) + softmax's grad (SCORES).
    peak = engine_peak(_sdpa_step(engine, "MATH", "none"))
    assert peak == 2 * QKV + SCORES + QKV + 4 + 4 + QKV + SCORES + SCORES


def test_sdpa_fused_accounting_keeps_only_output_and_logsumexp():
    rng = np.random.default_rng(0)
    q, k, v = (
        engine.tensor(rng.standard_normal((B, H, L, D)).astype(np.float32), requires_grad=True)
        for _ in range(3)
    )
    before = engine.memory.memory_allocated()
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        y = sdpa(q, k, v, is_causal=True, dropout_p=0.1)
    # out (B,H,L,D) float32 + log-sum-exp (B,H,L) float32; no L x L matrix, no dropout mask
    assert engine.memory.memory_allocated() - before == QKV + B * H * L * 4
    assert y.grad_fn.name() == "ScaledDotProductFlashAttentionBackward0"
    peak = engine_peak(lambda: y.sum().backward())
    # backward: the sum and its gradient (4 bytes each; the ones broadcast as a view),
    # grad_q, grad_k, grad_v and, as torch's CPU kernel, a buffer the size of grad_out
    # (4 QKV); no scores materialised
    assert peak == 4 * QKV + 8


@needs_torch
@pytest.mark.torch
def test_sdpa_fused_accounting_matches_torchs_flash_kernel_between_forward_and_backward():
    # What stays alive from forward to backward is what activation memory is made of: torch's
    # CPU flash kernel keeps the output and the log-sum-exp, as the fused accounting does.
    def kept(m):
        rng = np.random.default_rng(0)
        q, k, v = (
            m.tensor(rng.standard_normal((B, H, L, D)).astype(np.float32), requires_grad=True)
            for _ in range(3)
        )
        out = {}

        def region():
            with _ctx(m, "FLASH_ATTENTION"):
                out["y"] = _F(m).scaled_dot_product_attention(q, k, v, is_causal=True)

        return region, out

    e_region, e_out = kept(engine)
    t_region, t_out = kept(torch)
    from tests.engine.test_memory_vs_torch import RegionPeak

    probe = RegionPeak()
    with engine.allocator.tracked.get_allocator("cpu").observing(probe):
        e_region()
    e_live = probe.total
    t_live = _torch_live_after(t_region)
    assert e_live == t_live == QKV + B * H * L * 4


def _torch_live_after(fn) -> int:
    """Bytes allocated in fn and still alive at its end, from torch's profiler."""
    import json
    import os
    import tempfile

    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    fd, path = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    try:
        prof.export_chrome_trace(path)
        with open(path) as fh:
            events = json.load(fh)["traceEvents"]
    finally:
        os.unlink(path)
    live: dict[int, list[int]] = {}
    total = 0
    for e in sorted(
        (e for e in events if e.get("name") == "[memory]" and e["args"].get("Device Type") == 0),
        key=lambda e: e["ts"],
    ):
        n, addr = e["args"]["Bytes"], e["args"]["Addr"]
        if n > 0:
            live.setdefault(addr, []).append(n)
            total += n
        elif live.get(addr):
            total -= live[addr].pop()
    return total


def test_sdpa_on_meta_with_the_caching_model_costs_the_scores_only_on_the_math_path():
    engine.memory.set_allocator_model("caching", device="meta")
    try:
        q, k, v = (
            engine.empty(4, 12, 1024, 64, device="meta", requires_grad=True) for _ in range(3)
        )
        results = {}
        for backend in BACKENDS:
            engine.memory.reset_peak_memory_stats("meta")
            base = engine.memory.memory_allocated("meta")
            with sdpa_kernel(SDPBackend[backend]):
                y = sdpa(q, k, v, is_causal=True)
            results[backend] = engine.memory.memory_allocated("meta") - base
            del y
        del q, k, v
        scores = 4 * 12 * 1024 * 1024 * 4
        assert results["MATH"] >= scores + 2 * 4 * 12 * 1024 * 64 * 4  # softmax kept, q', k'
        assert results["FLASH_ATTENTION"] < scores // 8
    finally:
        engine.memory.set_allocator_model("exact", device="meta")


# ---------------------------------------------------------------------------------------------
# MultiheadAttention / TransformerEncoderLayer
# ---------------------------------------------------------------------------------------------
N_, L_, E_, H_ = 2, 5, 8, 2


def _copy_params(em, tm):
    names = [n for n, _ in em.named_parameters()]
    assert names == [n for n, _ in tm.named_parameters()]
    with torch.no_grad():
        for p, tp in zip(em.parameters(), tm.parameters(), strict=True):
            tp.copy_(torch.tensor(p.detach().numpy()))


def _mha_masks(m, kind):
    causal = np.triu(np.ones((L_, L_), bool), 1)
    if kind == "bool":
        return {"attn_mask": m.tensor(causal)}
    if kind == "float":
        return {"attn_mask": m.tensor(np.random.default_rng(5).standard_normal((L_, L_)))}
    if kind == "key_padding":
        kp = np.zeros((N_, L_), bool)
        kp[0, -2:] = True
        return {"key_padding_mask": m.tensor(kp)}
    if kind == "causal":
        return {"attn_mask": m.tensor(causal), "is_causal": True}
    return {}


@needs_torch
@pytest.mark.torch
@pytest.mark.parametrize("need_weights", [True, False])
@pytest.mark.parametrize("mask", ["none", "bool", "float", "key_padding", "causal"])
@pytest.mark.parametrize("batch_first", [True, False])
def test_multihead_attention_matches_torch(need_weights, mask, batch_first):
    em = MultiheadAttention(E_, H_, batch_first=batch_first, dtype=engine.float64)
    tm = torch.nn.MultiheadAttention(E_, H_, batch_first=batch_first, dtype=torch.float64)
    _copy_params(em, tm)
    shape = (N_, L_, E_) if batch_first else (L_, N_, E_)
    x = np.random.default_rng(0).standard_normal(shape)
    ex, tx = engine.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    ey, ew = em(ex, ex, ex, need_weights=need_weights, **_mha_masks(engine, mask))
    ty, tw = tm(tx, tx, tx, need_weights=need_weights, **_mha_masks(torch, mask))
    assert (ew is None) == (tw is None) == (not need_weights)
    w = np.random.default_rng(1).standard_normal(ey.shape)
    (ey * engine.tensor(w)).sum().backward()
    (ty * torch.tensor(w)).sum().backward()
    np.testing.assert_allclose(ey.detach().numpy(), ty.detach().numpy(), atol=1e-12)
    if need_weights:
        np.testing.assert_allclose(ew.detach().numpy(), tw.detach().numpy(), atol=1e-12)
    np.testing.assert_allclose(ex.grad.numpy(), tx.grad.numpy(), atol=1e-12)
    for p, tp in zip(em.parameters(), tm.parameters(), strict=True):
        np.testing.assert_allclose(p.grad.numpy(), tp.grad.numpy(), atol=1e-12)


def test_multihead_attention_gradients_match_central_differences():
    em = MultiheadAttention(4, 2, batch_first=True, dtype=engine.float64)

    def fn(m, q, kv):
        return em(q, kv, kv, need_weights=False)[0]

    rng = np.random.default_rng(2)
    gradcheck(fn, [rng.standard_normal((2, 3, 4)), rng.standard_normal((2, 5, 4))])


@needs_torch
@pytest.mark.torch
@pytest.mark.parametrize("layer", ["mha_weights", "mha_sdpa", "encoder_layer"])
def test_attention_modules_peak_matches_torch_profiler(layer):
    x = np.random.default_rng(0).standard_normal((2, 32, 64)).astype(np.float32)

    def program(m):
        m.manual_seed(0)
        if layer == "encoder_layer":
            mod = m.nn.TransformerEncoderLayer(64, 4, 128, dropout=0.1, batch_first=True)
        else:
            mod = m.nn.MultiheadAttention(64, 4, dropout=0.1, batch_first=True)
        xx = m.tensor(x, requires_grad=True)

        def region():
            with _ctx(m, "MATH"):
                if layer == "encoder_layer":
                    y = mod(xx)
                else:
                    y = mod(xx, xx, xx, need_weights=layer == "mha_weights")[0]
            y.sum().backward()

        return region

    e, t = engine_peak(program(engine)), torch_peak(program(torch))
    assert abs(e - t) <= SCALAR_SLACK, (e, t)


@needs_torch
@pytest.mark.torch
@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_transformer_encoder_layer_matches_torch(norm_first, activation):
    kw = dict(dropout=0.0, batch_first=True, norm_first=norm_first, activation=activation)
    el = TransformerEncoderLayer(8, 2, 16, dtype=engine.float64, **kw)
    tl = torch.nn.TransformerEncoderLayer(8, 2, 16, dtype=torch.float64, **kw)
    _copy_params(el, tl)
    x = np.random.default_rng(0).standard_normal((2, 5, 8))
    ex, tx = engine.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    mask = np.triu(np.ones((5, 5), bool), 1)
    ey = el(ex, src_mask=engine.tensor(mask))
    ty = tl(tx, src_mask=torch.tensor(mask))
    ey.sum().backward()
    ty.sum().backward()
    # the engine's float64 erf (inside gelu) is good to ~1e-8, not to the last bit
    tol = 1e-12 if activation == "relu" else 1e-6
    np.testing.assert_allclose(ey.detach().numpy(), ty.detach().numpy(), atol=tol)
    np.testing.assert_allclose(ex.grad.numpy(), tx.grad.numpy(), atol=tol)


def test_transformer_encoder_stacks_independent_copies():
    layer = TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True)
    enc = TransformerEncoder(layer, 3)
    assert len(enc.layers) == 3
    w0, w1 = enc.layers[0].linear1.weight, enc.layers[1].linear1.weight
    assert w0 is not w1 and w0.data_ptr() != w1.data_ptr()
    np.testing.assert_array_equal(w0.detach().numpy(), w1.detach().numpy())
    assert len(list(enc.parameters())) == 3 * len(list(layer.parameters()))
    y = enc(engine.randn(2, 5, 8))
    assert y.shape == (2, 5, 8)


def test_gpt_style_block_runs_on_meta():
    engine.memory.set_allocator_model("caching", device="meta")
    try:
        mha = MultiheadAttention(768, 12, batch_first=True, device="meta")
        x = engine.empty(2, 1024, 768, device="meta", requires_grad=True)
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            y, w = mha(
                x,
                x,
                x,
                need_weights=False,
                is_causal=True,
                attn_mask=engine.empty(1024, 1024, dtype=engine.bool, device="meta"),
            )
        assert w is None and y.shape == (2, 1024, 768) and y.is_meta
        y.sum().backward()
        assert mha.in_proj_weight.grad.shape == (2304, 768)
        del mha, x, y
    finally:
        engine.memory.set_allocator_model("exact", device="meta")


# ---------------------------------------------------------------------------------------------
# the default backend: PyTorch's own choice
# ---------------------------------------------------------------------------------------------
def _choice_cases(m, device):
    """(name, q, k, v, kwargs) covering each of torch's CPU flash constraints, either side."""
    rng = np.random.default_rng(0)

    def t(*shape, dtype="float32", grad=False):
        a = m.tensor(rng.standard_normal(shape).astype(dtype))
        a = a.to(device)
        return a.requires_grad_(True) if grad else a

    B_, H_, L_, D_ = 2, 3, 16, 8
    q = t(B_, H_, L_, D_, grad=True)
    cases = [
        ("plain", q, q, q, {}),
        ("dropout", q, q, q, {"dropout_p": 0.1}),
        ("causal", q, q, q, {"is_causal": True}),
        ("bool 2-D mask", q, q, q, {"attn_mask": t(L_, L_) > 0}),
        ("float 4-D mask", q, q, q, {"attn_mask": t(B_, 1, L_, L_)}),
        ("4-D mask over heads", q, q, q, {"attn_mask": t(1, H_, L_, L_)}),
        ("3-D mask", q, q, q, {"attn_mask": t(H_, L_, L_)}),
        ("one-row mask", q, q, q, {"attn_mask": t(1, L_)}),
        ("mask that requires grad", q, q, q, {"attn_mask": t(L_, L_, grad=True)}),
        ("3-D inputs", q[0], q[0], q[0], {}),
        ("batch broadcast", q, q[:1], q[:1], {}),
        ("value head dim differs", q, q, t(B_, H_, L_, 4), {}),
        ("transposed q (last stride 1)", t(B_, L_, H_, D_).transpose(1, 2), q, q, {}),
        ("key with last stride != 1", q, t(B_, H_, D_, L_).transpose(2, 3), q, {}),
        (
            "float64",
            t(B_, H_, L_, D_, dtype="float64"),
            *[t(B_, H_, L_, D_, dtype="float64")] * 2,
            {},
        ),
        ("empty query", q[:, :, :0], q, q, {}),
        ("scale", q, q, q, {"scale": 0.3}),
    ]
    return cases


@needs_torch
@pytest.mark.torch
@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_default_backend_is_torchs_choice(device):
    from engine.ops import attention as att

    names = {0: "MATH", 1: "FLASH_ATTENTION", 2: "EFFICIENT_ATTENTION"}
    ours = _choice_cases(engine, device)
    theirs = _choice_cases(torch, device)
    for (name, q, k, v, kw), (_, tq, tk, tv, tkw) in zip(ours, theirs, strict=True):
        want = names[torch._fused_sdp_choice(tq, tk, tv, **tkw)]
        got = att._default_backend(q, k, v, kw.get("attn_mask"), kw.get("dropout_p", 0.0))
        assert got == want, (device, name, got, want)


@needs_torch
@pytest.mark.torch
@pytest.mark.parametrize("kind", ["none", "causal", "bool", "float", "dropout"])
def test_default_sdpa_on_cpu_keeps_what_torchs_default_keeps(kind):
    """Without sdpa_kernel, what stays alive from forward to backward on cpu is torch's: its
    flash kernel's output, log-sum-exp and (a bool mask made float) the float mask; with
    dropout its math path's saved tensors."""

    def kept(m):
        q, k, v, kw = _sdpa_inputs(m, kind)
        out = {}

        def region():
            out["y"] = _F(m).scaled_dot_product_attention(q, k, v, **kw)

        return region, out

    from tests.engine.test_memory_vs_torch import RegionPeak

    e_region, e_out = kept(engine)
    probe = RegionPeak()
    with engine.allocator.tracked.get_allocator("cpu").observing(probe):
        e_region()
    t_region, t_out = kept(torch)
    t_live = _torch_live_after(t_region)
    assert probe.total == t_live, (probe.total, t_live)
    fused = kind != "dropout"
    assert (e_out["y"].grad_fn.name() == "ScaledDotProductFlashAttentionBackward0") == fused
    if fused:  # output + log-sum-exp (+ the float mask made of a bool one), no L x L scores
        assert probe.total == QKV + B * H * L * 4 + (L * L * 4 if kind == "bool" else 0)


class _Events(engine.allocator.MemoryObserver):
    """Charged allocations (+bytes) and frees (-bytes) in order, and scratch apart."""

    def __init__(self):
        self.sizes, self.scratch, self.live = [], [], {}

    def on_alloc(self, ev):
        self.live[ev.storage_id] = ev.requested
        self.sizes.append(ev.requested)

    def on_free(self, ev):
        n = self.live.pop(ev.storage_id, None)
        if n is not None:
            self.sizes.append(-n)

    def on_scratch(self, ev):
        self.scratch.append(ev.bytes if ev.action == "alloc" else -ev.bytes)


def _torch_sizes(fn) -> list[int]:
    """Bytes of torch's CPU profiler's memory events in fn, in order (+ alloc, - free)."""
    from tests.engine.test_autograd_memory_parity import torch_memory_events

    return [e["args"]["Bytes"] for e in torch_memory_events(fn)]


@needs_torch
@pytest.mark.torch
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("layout", ["leaves", "packed"])
@pytest.mark.parametrize("shape", [(2, 4, 128, 64, 128), (1, 2, 16, 8, 40), (1, 1, 800, 16, 600)])
def test_default_cpu_attention_events_are_torchs_flash_kernels(dtype, layout, shape):
    """Forward then backward of the default SDPA on cpu, event by event as torch's profiler
    sees them: the output laid out as the query, the log-sum-exp in the accumulation dtype;
    in backward the three gradients laid out [B, L, H, E] (so AccumulateGrad re-lays a leaf's),
    a grad_out-sized buffer; the kernel's per-thread tiles are the engine's scratch, of the
    sizes torch allocates for them at the same thread count."""
    B_, H_, L_, E_, S_ = shape
    threads = engine.get_num_threads()
    torch.set_num_threads(threads)
    rng = np.random.default_rng(0)
    data = {
        "q": rng.standard_normal((B_, L_, H_, E_)).astype(dtype),
        "kv": rng.standard_normal((2, B_, S_, H_, E_)).astype(dtype),
        "g": rng.standard_normal((B_, H_, L_, E_)).astype(dtype),
    }

    def program(m):
        q = m.tensor(data["q"], requires_grad=True)
        kv = m.tensor(data["kv"], requires_grad=True)
        if layout == "leaves":  # each a contiguous leaf [B, H, L, E]
            q = m.tensor(data["q"].transpose(0, 2, 1, 3).copy(), requires_grad=True)
            k, v = (
                m.tensor(a.transpose(0, 2, 1, 3).copy(), requires_grad=True) for a in data["kv"]
            )
        else:  # views of projections laid out [B, L, H, E], as in multi-head attention
            q = q.transpose(1, 2)
            k, v = kv[0].transpose(1, 2), kv[1].transpose(1, 2)
        g = m.tensor(data["g"])
        out = {}

        def step():
            out["y"] = _F(m).scaled_dot_product_attention(q, k, v)
            out["y"].backward(g)

        return step, out

    e_step, e_out = program(engine)
    t_step, t_out = program(torch)
    acc = 8 if dtype == "float64" else 4
    qs = 256 if L_ >= 768 else 64 if L_ >= 192 else 32
    qs, kvs = min(qs, L_), 512 if S_ >= 512 else S_
    fwd_work = threads * (qs * kvs + 2 * qs + qs * E_) * acc
    bwd_work = [threads * 2 * qs * kvs * acc, qs * acc]
    work = [fwd_work, *bwd_work]
    probe = _Events()
    with engine.allocator.tracked.get_allocator("cpu").observing(probe):
        e_step()
    theirs = _torch_sizes(t_step)
    for w in work:  # the kernel's tiles: scratch in the engine
        theirs.remove(w)
        theirs.remove(-w)
    assert probe.sizes == theirs, f"{probe.sizes} {theirs}"
    assert sorted(probe.scratch) == sorted(work + [-w for w in work])
    assert e_out["y"].stride() == t_out["y"].stride()


def test_fused_attention_is_the_same_on_one_and_many_threads():
    """Large enough for the batch to be split across the pool (BLAS single-threaded in each
    part): the same bits as one thread."""
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal((4, 4, 128, 64)).astype(np.float32) for _ in range(3)]
    grad = rng.standard_normal((4, 4, 128, 64)).astype(np.float32)
    before = engine.get_num_threads()
    results = []
    try:
        for threads in (1, 2):
            engine.set_num_threads(threads)
            q, k, v = (engine.tensor(a.copy(), requires_grad=True) for a in arrays)
            with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                y = sdpa(q, k, v)
            y.backward(engine.tensor(grad))
            results.append([t.detach().numpy() for t in (y, q.grad, k.grad, v.grad)])
    finally:
        engine.set_num_threads(before)
    for a, b in zip(*results, strict=True):
        assert np.array_equal(a, b)


def _fused_step(dtype, packed, mask=None, causal=False):
    """Fused attention forward and backward; with `packed`, q, k and v are views of one [L, B,
    3, H, E] projection, as MultiheadAttention hands them over (rows B * 3 * H * E apart)."""
    rng = np.random.default_rng(1)
    B, H, L, E = 4, 4, 96, 32
    if packed:
        proj = engine.tensor(rng.standard_normal((L, B, 3, H, E)).astype(dtype), requires_grad=True)
        q, k, v = (proj[:, :, i].permute(1, 2, 0, 3) for i in range(3))
        leaves = [proj]
    else:
        leaves = [
            engine.tensor(rng.standard_normal((B, H, L, E)).astype(dtype), requires_grad=True)
            for _ in range(3)
        ]
        q, k, v = leaves
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        y = sdpa(q, k, v, attn_mask=mask, is_causal=causal)
    y.backward(engine.tensor(rng.standard_normal(y.shape).astype(dtype)))
    return [y.detach().numpy()] + [t.grad.numpy() for t in leaves]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", ["plain", "packed", "causal", "mask"])
def test_fused_attention_on_workspace_buffers_gives_the_bits_of_fresh_temporaries(
    dtype, case, monkeypatch
):
    """The chunks' temporaries on per-thread buffers (host_cache.workspace) and products written
    in place give the same bits as new arrays and products put through a temporary; the buffers
    are reused from call to call (nothing new after the first)."""
    from engine import host_cache
    from engine.ops import attention

    # the numpy path's (float32 without a mask takes the compiled loops otherwise:
    # tests/engine/test_attention_native.py)
    monkeypatch.setattr(attention, "_native_forward", lambda *a: False)
    monkeypatch.setattr(attention, "_native_backward", lambda *a: False)
    mask = None
    if case == "mask":
        mask = engine.tensor(np.random.default_rng(2).random((96, 96)) > 0.2)
    kw = {"packed": case == "packed", "mask": mask, "causal": case == "causal"}
    host_cache.clear()
    ours = _fused_step(dtype, **kw)
    held = host_cache.workspace_bytes()
    assert held > 0
    again = _fused_step(dtype, **kw)
    assert host_cache.workspace_bytes() == held
    with monkeypatch.context() as m:
        m.setattr(host_cache, "WORKSPACE_MAX_BYTES", -1)  # every temporary a new array
        m.setattr(
            attention,
            "_product",
            lambda a, b, arr, b0, b1, nd: attention._put(arr, b0, b1, nd, a @ b),
        )
        fresh = _fused_step(dtype, **kw)
    for a, b, c in zip(ours, again, fresh, strict=True):
        assert np.array_equal(a, b) and np.array_equal(a, c)


# ---------------------------------------------------------------------------------------------
# TransformerDecoderLayer / TransformerDecoder / Transformer
# ---------------------------------------------------------------------------------------------
def _causal(m, n, kind):
    if kind == "bool":
        return m.tensor(np.triu(np.ones((n, n), bool), 1))
    return m.nn.Transformer.generate_square_subsequent_mask(n, dtype=m.float64)


@needs_torch
@pytest.mark.torch
@pytest.mark.parametrize("mask", ["bool", "float_causal", "none"])
@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("batch_first", [True, False])
def test_transformer_decoder_layer_matches_torch(norm_first, batch_first, mask):
    kw = dict(dropout=0.0, batch_first=batch_first, norm_first=norm_first)
    out = []
    for m in (engine, torch):
        layer = m.nn.TransformerDecoderLayer(8, 2, 16, dtype=m.float64, **kw)
        if m is engine:
            el = layer
        else:
            _copy_params(el, layer)
        shape_t, shape_m = ((2, 5, 8), (2, 7, 8)) if batch_first else ((5, 2, 8), (7, 2, 8))
        t = m.tensor(np.random.default_rng(0).standard_normal(shape_t), requires_grad=True)
        mem = m.tensor(np.random.default_rng(1).standard_normal(shape_m), requires_grad=True)
        masks = {} if mask == "none" else {"tgt_mask": _causal(m, 5, mask.split("_")[0])}
        y = layer(t, mem, **masks)
        y.backward(m.tensor(np.random.default_rng(2).standard_normal(tuple(y.shape))))
        out.append((y.detach().numpy(), t.grad.numpy(), mem.grad.numpy()))
    for e, t in zip(*out, strict=True):
        np.testing.assert_allclose(e, t, atol=1e-12)


@needs_torch
@pytest.mark.torch
def test_transformer_matches_torch_and_detects_a_causal_mask():
    out = []
    for m in (engine, torch):
        model = m.nn.Transformer(8, 2, 2, 2, 16, dropout=0.0, batch_first=True, dtype=m.float64)
        if m is engine:
            em = model
        else:
            _copy_params(em, model)
        src = m.tensor(np.random.default_rng(3).standard_normal((2, 6, 8)), requires_grad=True)
        tgt = m.tensor(np.random.default_rng(4).standard_normal((2, 5, 8)), requires_grad=True)
        tgt_mask = model.generate_square_subsequent_mask(5, dtype=m.float64)
        y = model(src, tgt, tgt_mask=tgt_mask)
        (y * y).sum().backward()
        out.append((y.detach().numpy(), src.grad.numpy(), tgt.grad.numpy()))
    for e, t in zip(*out, strict=True):
        np.testing.assert_allclose(e, t, atol=1e-11)
    from engine.nn.modules.transformer import _detect_is_causal_mask

    causal = engine.nn.Transformer.generate_square_subsequent_mask(4)
    assert _detect_is_causal_mask(causal, None, 4) is True
    assert _detect_is_causal_mask(causal * 0, None, 4) is False
    assert _detect_is_causal_mask(None, None, 4) is False


@needs_torch
@pytest.mark.torch
@pytest.mark.parametrize("model", ["decoder_layer", "transformer"])
def test_decoder_peaks_match_torch_profiler(model):
    src = np.random.default_rng(0).standard_normal((2, 24, 64)).astype(np.float32)
    tgt = np.random.default_rng(1).standard_normal((2, 16, 64)).astype(np.float32)

    def program(m):
        m.manual_seed(0)
        if model == "decoder_layer":
            mod = m.nn.TransformerDecoderLayer(64, 4, 128, dropout=0.1, batch_first=True)
        else:
            mod = m.nn.Transformer(64, 4, 1, 2, 128, dropout=0.1, batch_first=True)
        s, t = m.tensor(src, requires_grad=True), m.tensor(tgt, requires_grad=True)
        mask = m.nn.Transformer.generate_square_subsequent_mask(16)

        def region():
            with _ctx(m, "MATH"):
                if model == "decoder_layer":  # (tgt, memory)
                    y = mod(t, s, tgt_mask=mask)
                else:  # (src, tgt)
                    y = mod(s, t, tgt_mask=mask)
            y.sum().backward()

        return region

    e, t = engine_peak(program(engine)), torch_peak(program(torch))
    assert abs(e - t) <= SCALAR_SLACK, (e, t)
