"""A GPT-style model written with PyTorch's module names (Embedding, LayerNorm,
MultiheadAttention(batch_first), Linear, GELU, Dropout, cross_entropy, AdamW, a tied head) at a
reduced size: one training step's peak against torch's CPU profiler, with and without
activation checkpointing, attention on the math path on both sides."""

from __future__ import annotations

import numpy as np
import pytest

import engine
from tests.engine.test_memory_vs_torch import SCALAR_SLACK, engine_peak, torch_peak

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

L, D, H, V, T, B = 2, 64, 4, 1000, 32, 4


def _program(m, checkpointed: bool, inplace_dropout: bool):
    nn, F = m.nn, m.nn.functional
    if m is engine:
        from engine.nn.attention import SDPBackend, sdpa_kernel
        from engine.utils.checkpoint import checkpoint
    else:
        from torch.nn.attention import SDPBackend, sdpa_kernel
        from torch.utils.checkpoint import checkpoint

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(D), nn.LayerNorm(D)
            self.attn = nn.MultiheadAttention(D, H, batch_first=True)
            self.fc, self.proj = nn.Linear(D, 4 * D), nn.Linear(4 * D, D)
            self.drop = nn.Dropout(0.1, inplace=inplace_dropout)

        def forward(self, x, mask):
            a = self.ln1(x)
            x = x + self.drop(
                self.attn(a, a, a, attn_mask=mask, is_causal=True, need_weights=False)[0]
            )
            return x + self.drop(self.proj(F.gelu(self.fc(self.ln2(x)))))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte, self.wpe = nn.Embedding(V, D), nn.Embedding(T, D)
            self.blocks = nn.ModuleList([Block() for _ in range(L)])
            self.lnf = nn.LayerNorm(D)

        def forward(self, idx, mask):
            x = self.wte(idx) + self.wpe(m.arange(idx.shape[1]))
            for b in self.blocks:
                x = checkpoint(b, x, mask, use_reentrant=False) if checkpointed else b(x, mask)
            return F.linear(self.lnf(x), self.wte.weight)  # the head tied to the embedding

    m.manual_seed(0)
    model = GPT()
    opt = m.optim.AdamW(model.parameters(), lr=1e-3)
    idx = m.tensor(np.random.default_rng(0).integers(0, V, (B, T)))
    target = m.tensor(np.random.default_rng(1).integers(0, V, (B, T)))
    mask = m.tensor(np.triu(np.ones((T, T), bool), 1))

    def step():
        opt.zero_grad(set_to_none=True)
        with sdpa_kernel(SDPBackend.MATH):
            logits = model(idx, mask)
            loss = F.cross_entropy(logits.reshape(-1, V), target.reshape(-1))
            del logits
            loss.backward()
        opt.step()

    step()  # warm-up: gradients and AdamW state exist from here on
    return step


@pytest.mark.parametrize("inplace_dropout", [False, True])
@pytest.mark.parametrize("checkpointed", [False, True])
def test_gpt_training_step_peak_matches_torch_profiler(checkpointed, inplace_dropout):
    e = engine_peak(_program(engine, checkpointed, inplace_dropout))
    t = torch_peak(_program(torch, checkpointed, inplace_dropout))
    assert abs(e - t) <= SCALAR_SLACK, (e, t)


def test_checkpointing_lowers_the_gpt_step_peak():
    plain = engine_peak(_program(engine, False, False))
    ck = engine_peak(_program(engine, True, False))
    assert ck < 0.6 * plain
