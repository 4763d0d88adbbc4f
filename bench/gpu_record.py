"""Record what torch does on a GPU, for the engine's models of torch's CUDA kernels.

Writes the two data files the engine's GPU models are checked against, in their formats, for
the GPU and torch this runs on (they were recorded on an H100 with torch 2.11):

- ``cuda_reduce_<gpu>.json`` (tests/engine/data/cuda_reduce_h100.json's format): the
  allocations torch makes for 200 reductions (float32 and bfloat16; 64-16384 rows x 64-3072
  columns; ``sum(0)``, ``sum(1)``, ``sum()``, ``mean(0)``), from the profiler
  (``profile_memory=True``); checked by tests/engine/test_cuda_reduce.py.
- ``cuda_sdpa_<gpu>.json`` (bench/data/cuda_sdpa_h100.json's format): ``torch._fused_sdp_choice``
  over 1680 cases (3 dtypes x 7 head dims x 2 shapes x 5 mask kinds x dropout x requires_grad x
  2 layouts) and every allocation and free of forward and backward for 54 cases (3 dtypes x 3
  shapes x 2 layouts x no mask / causal / a float mask); checked by
  tests/engine/test_attention_cuda.py.

    python bench/gpu_record.py [--out DIR] [--only reduce|sdpa]

Needs torch with CUDA; exit status 2, with the reason, without one. Allocation sizes are the
caching allocator's blocks (512-byte multiples), as the profiler reports them.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import sys

if __package__ in (None, ""):  # run as a script: make the repository root importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.gpu_fidelity import memory_events, trace_events  # noqa: E402


def _torch_cuda():
    try:
        import torch
    except ImportError:
        return None, "torch is not installed"
    if not torch.cuda.is_available():
        return None, "torch.cuda.is_available() is False"
    return torch, None


def op_events(torch, fn) -> list[list]:
    """[[bytes, innermost op], ...] of the CUDA allocations (+) and frees (-) made inside fn."""
    from torch.profiler import ProfilerActivity, profile

    with profile(
        activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], profile_memory=True
    ) as p:
        fn()
        torch.cuda.synchronize()
    events = trace_events(p)
    ops = [e for e in events if e.get("ph") == "X" and e.get("cat") == "cpu_op"]
    out = []
    for m in memory_events(events, device_type=1):
        inside = [
            o for o in ops if o["tid"] == m["tid"] and o["ts"] <= m["ts"] <= o["ts"] + o["dur"]
        ]
        inner = max(inside, key=lambda o: o["ts"])["name"] if inside else ""
        out.append([m["args"]["Bytes"], inner])
    return out


def record_reduce(torch) -> dict:
    rows = []
    shapes = itertools.product((64, 256, 1024, 4096, 16384), (64, 256, 768, 1024, 3072))
    for dtype, (n, c), how in itertools.product(
        ("float32", "bfloat16"), shapes, ("sum0", "sum1", "all", "mean0")
    ):
        x = torch.randn(n, c, device="cuda", dtype=getattr(torch, dtype))
        fn = {
            "sum0": lambda x=x: x.sum(0),
            "sum1": lambda x=x: x.sum(1),
            "all": lambda x=x: x.sum(),
            "mean0": lambda x=x: x.mean(0),
        }[how]
        fn()  # warm-up
        allocs = [b for b, _ in op_events(torch, fn) if b > 0]
        rows.append([dtype, [n, c], how, allocs])
    props = torch.cuda.get_device_properties(0)
    return {
        "about": (
            "torch.cuda allocations (bytes, in order; the first is the result) of one reduction "
            "of a contiguous 2-d tensor: sum0 = x.sum(0), sum1 = x.sum(1), all = x.sum(), "
            "mean0 = x.mean(0). Recorded with torch.profiler(profile_memory=True) on the device "
            "named below."
        ),
        "torch": torch.__version__,
        "gpu": props.name,
        "multiprocessors": props.multi_processor_count,
        "max_threads_per_multiprocessor": props.max_threads_per_multi_processor,
        "rows": rows,
    }


def _qkv(torch, B, H, L, S, E, dtype, layout, requires_grad):
    def one(n):
        if layout == "blhe":
            t = torch.randn(B, n, H, E, device="cuda", dtype=dtype).transpose(1, 2)
        else:
            t = torch.randn(B, H, n, E, device="cuda", dtype=dtype)
        return t.requires_grad_(requires_grad)

    return one(L), one(S), one(S)


def _mask(torch, kind, B, L, S, dtype):
    if kind == "bool":
        return torch.rand(L, S, device="cuda") > 0.3
    if kind == "float":
        return torch.randn(L, S, device="cuda", dtype=dtype)
    if kind == "bool4":
        return torch.rand(B, 1, L, S, device="cuda") > 0.3
    return None


def record_sdpa(torch) -> dict:
    F = torch.nn.functional
    names = {int(b.value): n for n, b in torch.nn.attention.SDPBackend.__members__.items()}
    choice = []
    for dtype, E, (L, S), mask, causal, dropout, rg, layout in itertools.product(
        ("float32", "float16", "bfloat16"),
        (16, 40, 64, 80, 128, 256, 512),
        ((128, 128), (100, 77)),
        ("none", "bool", "float", "bool4"),
        (False, True),
        (0.0, 0.1),
        (False, True),
        ("bhle", "blhe"),
    ):
        if mask != "none" and causal:
            continue
        dt = getattr(torch, dtype)
        q, k, v = _qkv(torch, 2, 4, L, S, E, dt, layout, rg)
        m = _mask(torch, mask, 2, L, S, dt)
        try:
            picked = names.get(int(torch._fused_sdp_choice(q, k, v, m, dropout, causal)))
        except Exception as exc:  # a refusal is an answer too
            picked = repr(exc)[:200]
        choice.append([dtype, E, L, S, mask, causal, dropout, rg, layout, picked])
    events = []
    for dtype, (B, H, L, S, E), layout, mask, causal in itertools.product(
        ("float32", "float16", "bfloat16"),
        ((2, 4, 128, 128, 64), (2, 3, 100, 77, 40), (1, 2, 300, 300, 128)),
        ("bhle", "blhe"),
        ("none", "float"),
        (False, True),
    ):
        if mask != "none" and causal:
            continue
        dt = getattr(torch, dtype)
        q, k, v = _qkv(torch, B, H, L, S, E, dt, layout, True)
        m = _mask(torch, mask, B, L, S, dt)
        picked = names.get(int(torch._fused_sdp_choice(q, k, v, m, 0.0, causal)))
        g = torch.randn(B, H, L, E, device="cuda", dtype=dt)
        held = {}

        def forward(q=q, k=k, v=v, m=m, causal=causal, held=held):
            held["y"] = F.scaled_dot_product_attention(q, k, v, attn_mask=m, is_causal=causal)

        def backward(g=g, held=held):
            held["y"].backward(g)
            held.clear()

        forward()
        backward()  # warm-up
        q.grad = k.grad = v.grad = None
        fwd = op_events(torch, forward)
        stride = list(held["y"].stride())
        bwd = op_events(torch, backward)
        events.append(
            {
                "dtype": dtype,
                "shape": [B, H, L, S, E],
                "layout": layout,
                "mask": mask,
                "causal": causal,
                "backend": picked,
                "out_stride": stride,
                "forward": fwd,
                "backward": bwd,
            }
        )
    return {
        "about": (
            "scaled_dot_product_attention on CUDA: torch._fused_sdp_choice(q, k, v, mask, "
            "dropout, causal) for q (2, 4, L, E), k and v (2, 4, S, E); and for leaves q, k, v "
            "requiring grad, [bytes, innermost op] of every allocation and free of forward and "
            "backward (the incoming gradient a contiguous (B, H, L, E) tensor), from "
            "torch.profiler(profile_memory=True); bytes are the caching allocator's blocks."
        ),
        "torch": torch.__version__,
        "gpu": torch.cuda.get_device_name(),
        "choice_columns": [
            "dtype",
            "E",
            "L",
            "S",
            "mask",
            "causal",
            "dropout",
            "requires_grad",
            "layout",
            "backend",
        ],  # fmt: skip
        "choice": choice,
        "events": events,
    }


def _slug(name: str) -> str:
    """'NVIDIA H100 80GB HBM3' -> 'h100'."""
    m = re.search(r"\b([A-Z]\d{2,4}[A-Z]?)\b", name)
    return (m.group(1) if m else re.sub(r"\W+", "_", name)).lower()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=".", help="folder for the JSON files (default: .)")
    parser.add_argument("--only", choices=("reduce", "sdpa"), help="record one of the two")
    args = parser.parse_args(argv)
    torch, why = _torch_cuda()
    if torch is None:
        print(f"gpu_record: nothing recorded: {why}", file=sys.stderr)
        return 2
    os.makedirs(args.out, exist_ok=True)
    slug = _slug(torch.cuda.get_device_name())
    for what, record in (("reduce", record_reduce), ("sdpa", record_sdpa)):
        if args.only not in (None, what):
            continue
        path = os.path.join(args.out, f"cuda_{what}_{slug}.json")
        with open(path, "w") as fh:
            json.dump(record(torch), fh, separators=(",", ":"))
        print(f"gpu_record: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
