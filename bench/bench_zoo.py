"""Benchmark the model zoo (python bench/bench_zoo.py [--repeat N] [--json PATH]).

Prints, each against a reference measured in the same run:

- `memprof run scenarios/X.yaml` for each zoo scenario, end to end in a fresh process (imports,
  validation with its meta dry run of every variant, every variant run, the report written):
  wall and CPU seconds against issue 10's budget of 10 s on a 2-core laptop-class machine;
- the GPT-2-small training step on meta with the caching model (forward, backward, AdamW:
  batch 1, fp32), with memprof recording every event (`run_variant`: the recorder, attribution
  contexts, the report entry), against the same step through the same interpreter with no
  observer (the engine's own cost on meta): the recording overhead as a ratio.

CPU seconds are the machine-load-independent figure; wall seconds depend on what else runs.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

ZOO = ("gpt2_small.yaml", "resnet50.yaml", "vit_b16.yaml", "unet_block.yaml")
BUDGET_S = 10.0
GPT_VARIANT = "batch=1,inplace=false,ckpt=false,precision=float32"


def run_cli(fname: str, repeat: int) -> tuple[list[float], list[float]]:
    """(wall seconds, CPU seconds of the child) of `memprof run scenarios/<fname>`."""
    walls, cpus = [], []
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with tempfile.TemporaryDirectory() as runs:
        for _ in range(repeat):
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            t0 = time.perf_counter()
            subprocess.run(
                [sys.executable, "-m", "memprof", "run", f"scenarios/{fname}", "-q"]
                + ["--out-dir", runs],
                cwd=ROOT,
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                check=True,
            )
            walls.append(time.perf_counter() - t0)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return walls, cpus


def gpt_step(repeat: int) -> dict:
    """The GPT-2-small step on meta: recorded by memprof vs the bare interpreter."""
    import engine
    from engine.allocator import get_allocator
    from memprof.runner.execute import run_variant
    from memprof.scenario.build import (
        Bindings,
        ProgramHooks,
        build_module,
        forward_options,
        make_input,
        make_optimizer,
        run_forward,
    )
    from memprof.scenario.validate import load_scenario

    [variant] = load_scenario(
        ROOT / "scenarios" / "gpt2_small.yaml", variants=[GPT_VARIANT], check_shapes=False
    ).variants
    spec = variant.spec
    alloc = get_allocator("meta")

    def bare() -> float:
        alloc.reset()
        alloc.set_model("caching")
        engine.manual_seed(0)
        inputs = {n: make_input(engine, s, spec.dtype, "meta") for n, s in spec.inputs.items()}
        modules = {n: build_module(engine, s, "meta", spec.dtype) for n, s in spec.modules.items()}
        opt = make_optimizer(engine, spec.phases[2].optimizer, modules)
        levers = forward_options(spec, "meta")
        t0 = time.perf_counter()
        b = Bindings()
        for n, t in inputs.items():
            b.bind(n, t)
        run_forward(spec.program, b, modules, ProgramHooks(), levers)
        b.values["loss"].backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        b.drop(list(b.values))
        elapsed = time.perf_counter() - t0
        del inputs, modules, opt, b
        alloc.reset()
        return elapsed

    bare_s, recorded = [], []
    for _ in range(repeat):
        bare_s.append(bare())
        t0 = time.perf_counter()
        entry = run_variant(variant)
        recorded.append((time.perf_counter() - t0, entry["program_duration_s"]))
        events = entry["num_allocs"] + entry["num_frees"]
        peak = entry["peak_allocated_bytes"]
    total, program = min(recorded)
    return {
        "bare_s": min(bare_s),
        "recorded_s": total,
        "ratio": total / min(bare_s),
        "program_s": program,
        "events": events,
        "peak_allocated_bytes": peak,
        "nodes": len(spec.program),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    out: dict = {"cores": os.cpu_count(), "load_avg": os.getloadavg()[0], "zoo": {}}
    print(f"cores {out['cores']}, load average {out['load_avg']:.1f}")
    print(f"{'memprof run':28} {'wall s':>8} {'cpu s':>8} {'budget':>8} {'cpu/budget':>11}")
    for fname in ZOO:
        walls, cpus = run_cli(fname, args.repeat)
        wall, cpu = min(walls), min(cpus)
        out["zoo"][fname] = {"wall_s": wall, "cpu_s": cpu, "walls": walls, "cpus": cpus}
        print(
            f"{'scenarios/' + fname:28} {wall:8.2f} {cpu:8.2f} {BUDGET_S:8.1f} {cpu / BUDGET_S:11.2f}"
        )
    g = gpt_step(args.repeat)
    out["gpt2_step"] = g
    print()
    print(f"GPT-2 small step on meta, caching model ({GPT_VARIANT}; {g['nodes']} nodes)")
    print(f"  bare interpreter, no observer   {g['bare_s'] * 1000:9.1f} ms")
    print(
        f"  run_variant, events recorded    {g['recorded_s'] * 1000:9.1f} ms  ({g['ratio']:.2f}x)"
    )
    print(f"    of which the program steps    {g['program_s'] * 1000:9.1f} ms  (the rest: setup)")
    print(f"  {g['events']} allocation events recorded")
    print(f"  peak allocated {g['peak_allocated_bytes']} bytes")
    if args.json:
        args.json.write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
