"""Benchmark the meta device (python bench/bench_meta.py [--repeat N] [--ops N] [--json PATH]).

The meta device is where the biggest questions are asked (a 70B model's step, sweeps of
hundreds of variants), so issue 15 sets it time targets. Each line prints the engine's time,
PyTorch's time for the same program on its own meta device (torch 2.13, measured in the same
run, interleaved; medians), their ratio, and the target beside it:

- a chain of N (default 1,000,000) elementwise ops on a 64x64 tensor that requires grad,
  forward then backward: target under 10 s; the engine with the cyclic garbage collector
  paused, as memprof runs it (engine/utils/collector.py), and with it on, for the record.
  torch's meta autograd takes about 0.17 ms per op, so the torch reference is a shorter chain
  (--torch-ops, default 20,000) run by both, interleaved;
- a 70B-parameter decoder (80 layers, d 8192, 64 heads with 8 key/value heads, MLP 28672,
  vocabulary 32000; batch 1, sequence 2048; RMSNorm, SiLU-gated MLP, causal attention):
  forward, backward and an AdamW step with the caching model: target under 5 s;
- GPT-2 small's training step (scenarios/gpt2_small.yaml, batch 1, fp32: forward, backward,
  AdamW) with every allocation event recorded by memprof's runner (bench/bench_zoo.py's
  measurement: the program's steps; the whole run_variant, building the modules and the report
  too, beside it): target under 25 ms.

Without torch installed the reference columns are blank.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TARGET_CHAIN_S = 10.0
TARGET_70B_S = 5.0
TARGET_GPT2_MS = 25.0


def _torch():
    try:
        import torch
    except ImportError:
        return None
    torch.set_num_threads(os.cpu_count() or 1)
    return torch


# --- the 1M-op chain --------------------------------------------------------------------------
def chain(lib, n: int, *, pause_gc: bool = True) -> float:
    """Seconds for forward+backward of an n-op elementwise chain on meta."""
    from engine.utils.collector import paused

    x = lib.randn(64, 64, device="meta", requires_grad=True)
    ctx = paused() if pause_gc else _nothing()
    with ctx:
        t0 = time.perf_counter()
        y = x
        for i in range(n):
            y = y * 1.0001 if i % 2 else y + 1.0
        y.sum().backward()
        elapsed = time.perf_counter() - t0
        del y
    return elapsed


class _nothing:  # noqa: N801
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


# --- the 70B decoder ---------------------------------------------------------------------------
D, LAYERS, HEADS, KV_HEADS, FFN, VOCAB, SEQ = 8192, 80, 64, 8, 28672, 32000, 2048


def _decoder(lib):
    nn = lib.nn
    dev = "meta"
    hd = D // HEADS

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.attn_norm = nn.RMSNorm(D, device=dev)
            self.q = nn.Linear(D, D, bias=False, device=dev)
            self.k = nn.Linear(D, KV_HEADS * hd, bias=False, device=dev)
            self.v = nn.Linear(D, KV_HEADS * hd, bias=False, device=dev)
            self.o = nn.Linear(D, D, bias=False, device=dev)
            self.mlp_norm = nn.RMSNorm(D, device=dev)
            self.gate = nn.Linear(D, FFN, bias=False, device=dev)
            self.up = nn.Linear(D, FFN, bias=False, device=dev)
            self.down = nn.Linear(FFN, D, bias=False, device=dev)

        def forward(self, x):
            b, t, _ = x.shape
            h = self.attn_norm(x)
            q = self.q(h).view(b, t, HEADS, hd).transpose(1, 2)
            k = self.k(h).view(b, t, KV_HEADS, hd).transpose(1, 2)
            v = self.v(h).view(b, t, KV_HEADS, hd).transpose(1, 2)
            rep = HEADS // KV_HEADS  # repeat_kv, as Llama's reference code does it
            k = k[:, :, None].expand(b, KV_HEADS, rep, t, hd).reshape(b, HEADS, t, hd)
            v = v[:, :, None].expand(b, KV_HEADS, rep, t, hd).reshape(b, HEADS, t, hd)
            a = lib.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.o(a.transpose(1, 2).reshape(b, t, D))
            h = self.mlp_norm(x)
            return x + self.down(lib.nn.functional.silu(self.gate(h)) * self.up(h))

    class Decoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(VOCAB, D, device=dev)
            self.blocks = nn.ModuleList([Block() for _ in range(LAYERS)])
            self.norm = nn.RMSNorm(D, device=dev)
            self.head = nn.Linear(D, VOCAB, bias=False, device=dev)

        def forward(self, tokens):
            x = self.embed(tokens)
            for block in self.blocks:
                x = block(x)
            return self.head(self.norm(x))

    return Decoder()


def decoder_step(lib) -> tuple[float, int]:
    """(seconds for forward+backward+AdamW on meta, parameter count)."""
    from engine.utils.collector import paused

    model = _decoder(lib)
    params = sum(p.numel() for p in model.parameters())
    opt = lib.optim.AdamW(model.parameters())
    tokens = lib.randint(0, VOCAB, (1, SEQ), device="meta")
    targets = lib.randint(0, VOCAB, (1, SEQ), device="meta")
    with paused():
        t0 = time.perf_counter()
        logits = model(tokens)
        loss = lib.nn.functional.cross_entropy(logits.view(-1, VOCAB), targets.view(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        elapsed = time.perf_counter() - t0
    return elapsed, params


def _engine_decoder_step() -> tuple[float, int, int]:
    import engine
    from engine.allocator import get_allocator

    alloc = get_allocator("meta")
    alloc.reset()
    alloc.set_model("caching")
    try:
        s, params = decoder_step(engine)
        return s, params, alloc.model.max_allocated_bytes
    finally:
        alloc.reset()
        alloc.set_model("exact")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--ops", type=int, default=1_000_000)
    ap.add_argument("--torch-ops", type=int, default=20_000)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    import engine

    torch = _torch()
    out: dict = {"cores": os.cpu_count(), "load_avg": os.getloadavg()[0]}
    print(f"cores {out['cores']}, load average {out['load_avg']:.1f}, repeat {args.repeat}")
    print(f"{'meta device':44} {'engine':>9} {'torch':>9} {'ratio':>6} {'target':>9}")

    def row(label, e, t, target, unit="s"):
        scale = 1000 if unit == "ms" else 1
        u = "ms" if unit == "ms" else " s"
        tt = f"{t * scale:7.2f}{u}" if t is not None else f"{'-':>9}"
        ratio = f"{e / t:6.2f}" if t else f"{'-':>6}"
        if target is None:  # a reference row: the ratio is the figure
            print(f"{label:44} {e * scale:7.2f}{u} {tt} {ratio}")
            return
        mark = "met" if e * scale < target else "NOT met"
        print(f"{label:44} {e * scale:7.2f}{u} {tt} {ratio} <{target:6.1f}{u} {mark}")

    # torch's meta autograd costs about 0.17 ms per op here, so its reference chain is shorter
    # (--torch-ops); both sides run that length interleaved, and the engine the full length
    e_small, t_small = [], []
    for _ in range(args.repeat):
        e_small.append(chain(engine, args.torch_ops))
        if torch is not None:
            t_small.append(chain(torch, args.torch_ops))
    e_chain = [chain(engine, args.ops) for _ in range(args.repeat)]
    e_gc = chain(engine, args.ops, pause_gc=False)
    ce = statistics.median(e_chain)
    se, st = statistics.median(e_small), (statistics.median(t_small) if t_small else None)
    out["chain"] = {
        "ops": args.ops,
        "engine_s": e_chain,
        "engine_gc_on_s": e_gc,
        "reference_ops": args.torch_ops,
        "engine_reference_s": e_small,
        "torch_reference_s": t_small,
    }
    row(f"{args.ops:,}-op chain, forward+backward", ce, None, TARGET_CHAIN_S)
    row("  the same, cyclic collector left on", e_gc, None, TARGET_CHAIN_S)
    row(f"  {args.torch_ops:,} ops, against torch's meta", se, st, None)

    e_dec, t_dec = [], []
    for _ in range(args.repeat):
        s, params, peak = _engine_decoder_step()
        e_dec.append(s)
        if torch is not None:
            t_dec.append(decoder_step(torch)[0])
    de, dt = statistics.median(e_dec), (statistics.median(t_dec) if t_dec else None)
    out["decoder_70b"] = {
        "params": params,
        "engine_s": e_dec,
        "torch_s": t_dec,
        "peak_allocated_bytes": peak,
    }
    row(f"{params / 1e9:.1f}B decoder step (fwd+bwd+AdamW)", de, dt, TARGET_70B_S)
    print(f"  {'':42} peak allocated {peak / 2**30:,.1f} GiB (caching model)")

    from bench.bench_zoo import gpt_step

    g = gpt_step(args.repeat)
    out["gpt2_step"] = g
    row("GPT-2 small step, every event recorded", g["program_s"], None, TARGET_GPT2_MS, "ms")
    row("  the same, bare interpreter", g["bare_s"], None, TARGET_GPT2_MS, "ms")
    row("  the whole run (build, step, report)", g["recorded_s"], None, None, "ms")
    print(f"  {'':42} {g['events']} allocation events")
    if args.json:
        args.json.write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
