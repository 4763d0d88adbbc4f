"""Benchmark the scenario runner (python bench/bench_runner.py [--repeat N] [--json PATH]).

Prints one table of figures, each against a reference measured in the same run:

- `memprof run scenarios/relu.yaml` end to end (a fresh process, imports included) against the
  2 s budget, and `memprof --help` against 0.5 s;
- the runner's overhead on relu and alexnet_stem: `run_variant` (allocator observer, attribution
  contexts, stale-read versions, per-node timing, the report entry) against the same program
  written directly on the engine, both from a fresh allocator, best of N;
- the share of a variant's time spent in memprof's own code (profiled: independent of load);
- the one-off checks before running (YAML, model, meta dry run) for the same scenarios.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _wall(cmd: list[str], repeat: int) -> list[float]:
    times = []
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with tempfile.TemporaryDirectory() as runs:
        for _ in range(repeat):
            t0 = time.perf_counter()
            subprocess.run(
                cmd + (["--out-dir", runs] if "run" in cmd else []),
                cwd=ROOT,
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                check=True,
            )
            times.append(time.perf_counter() - t0)
    return times


# --- the bare programs: what the scenarios describe, written directly on the engine ------------


def bare_relu(inplace: bool) -> None:
    import engine

    engine.manual_seed(0)
    x = engine.rand(1, 64, 512, 512)
    y = engine.relu_(x) if inplace else engine.relu(x)
    del x, y


def bare_alexnet_stem(inplace: bool) -> None:
    import engine

    engine.manual_seed(0)
    x = engine.randn(4, 3, 224, 224)
    conv = engine.nn.Conv2d(3, 64, kernel_size=11, stride=4, padding=2)
    relu = engine.nn.ReLU(inplace=inplace)
    c = conv(x)
    r = relu(c)
    loss = r.sum()
    loss.backward()
    del x, conv, relu, c, r, loss


def _fresh_allocator(device: str = "cpu") -> None:
    from engine.allocator import get_allocator

    alloc = get_allocator(device)
    alloc.reset()
    if alloc.model_name != "exact":
        alloc.set_model("exact")


def _timed(fn) -> tuple[float, float]:
    """(wall, cpu) seconds of one call; cpu counts every thread of this process, so other
    processes competing for the cores do not inflate it."""
    gc.collect()
    w0, c0 = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - w0, time.process_time() - c0


def overhead(scenario: str, bare, repeat: int) -> list[dict]:
    from memprof.runner.execute import run_variant
    from memprof.scenario import load_scenario

    t0 = time.perf_counter()
    loaded = load_scenario(ROOT / "scenarios" / scenario)
    check_s = time.perf_counter() - t0
    rows = []
    for variant in loaded.variants:
        inplace = bool(variant.params.get("inplace"))

        def bare_run(inplace=inplace):
            _fresh_allocator()
            bare(inplace)

        def runner_run(variant=variant):
            run_variant(variant)

        bare_t, runner_t = [], []
        for i in range(repeat):  # interleaved, alternating which goes first, so drift hits both
            pair = [(bare_t, bare_run), (runner_t, runner_run)]
            for sink, fn in pair if i % 2 == 0 else pair[::-1]:
                sink.append(_timed(fn))
        bw, bc = min(t[0] for t in bare_t), min(t[1] for t in bare_t)
        rw, rc = min(t[0] for t in runner_t), min(t[1] for t in runner_t)
        rows.append(
            {
                "scenario": scenario,
                "variant": variant.name,
                "bare_s": bw,
                "runner_s": rw,
                "bare_cpu_s": bc,
                "runner_cpu_s": rc,
                "overhead_pct": 100.0 * (rw - bw) / bw,
                "cpu_overhead_pct": 100.0 * (rc - bc) / bc,
                "check_s": check_s,
            }
        )
    return rows


def own_share(scenario: str) -> list[dict]:
    """Share of a variant's time spent in memprof's own code and the allocator's event path
    (profiled, so independent of other load on the machine; an upper bound: the profiler inflates
    small Python calls more than numpy kernels)."""
    import cProfile
    import pstats

    from memprof.runner.execute import run_variant
    from memprof.scenario import load_scenario

    rows = []
    for variant in load_scenario(ROOT / "scenarios" / scenario).variants:
        run_variant(variant)
        prof = cProfile.Profile()
        prof.enable()
        run_variant(variant)
        prof.disable()
        stats = pstats.Stats(prof).stats
        total = sum(v[3] for k, v in stats.items() if k[2] == "run_variant")
        # drop/teardown free the tensors' arrays (numpy's dealloc shows as their own time): the
        # bare program pays the same when its names go
        own = sum(
            v[2]
            for k, v in stats.items()
            if ("/memprof/" in k[0] or k[0].endswith(("tracked.py", "events.py", "contextlib.py")))
            and k[2] not in ("drop", "teardown")
        )
        rows.append(
            {
                "scenario": scenario,
                "variant": variant.name,
                "total_s": total,
                "own_s": own,
                "own_pct": 100.0 * own / total,
            }
        )
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--json", help="also write the figures as JSON to this path")
    args = parser.parse_args()

    import numpy  # noqa: F401  (so import cost does not land in the first measurement)

    run_wall = _wall([sys.executable, "-m", "memprof", "run", "scenarios/relu.yaml"], args.repeat)
    help_wall = _wall([sys.executable, "-m", "memprof", "--help"], args.repeat)
    giant_wall = _wall(
        [sys.executable, "-m", "memprof", "run", "scenarios/giant_meta.yaml"], args.repeat
    )
    rows = overhead("relu.yaml", bare_relu, args.repeat)
    rows += overhead("alexnet_stem.yaml", bare_alexnet_stem, args.repeat)
    shares = own_share("relu.yaml") + own_share("alexnet_stem.yaml")

    print(f"{'figure':<52} {'measured':>10} {'reference':>10} {'ratio':>7}")
    print(
        f"{'memprof run scenarios/relu.yaml (median)':<52} {statistics.median(run_wall):>9.3f}s "
        f"{2.0:>9.3f}s {statistics.median(run_wall) / 2.0:>7.2f}"
    )
    print(
        f"{'memprof --help (median)':<52} {statistics.median(help_wall):>9.3f}s "
        f"{0.5:>9.3f}s {statistics.median(help_wall) / 0.5:>7.2f}"
    )
    # 80 GiB accounted on the meta device, nothing allocated: about the cost of relu.yaml
    print(
        f"{'memprof run giant_meta.yaml vs relu.yaml (median)':<52} "
        f"{statistics.median(giant_wall):>9.3f}s {statistics.median(run_wall):>9.3f}s "
        f"{statistics.median(giant_wall) / statistics.median(run_wall):>7.2f}"
    )
    for r in rows:
        name = f"{r['scenario'].removesuffix('.yaml')}/{r['variant']}"
        for kind, run_s, bare_s, pct in (
            ("wall", r["runner_s"], r["bare_s"], r["overhead_pct"]),
            ("cpu", r["runner_cpu_s"], r["bare_cpu_s"], r["cpu_overhead_pct"]),
        ):
            label = f"runner {name} vs bare engine ({kind}, best)"
            print(
                f"{label:<52} {run_s:>9.4f}s {bare_s:>9.4f}s {run_s / bare_s:>7.3f}  ({pct:+.1f}%)"
            )
    for r in shares:
        label = f"memprof's own code in {r['scenario'].removesuffix('.yaml')}/{r['variant']}"
        print(
            f"{label:<52} {r['own_s']:>9.4f}s {r['total_s']:>9.4f}s {r['own_s'] / r['total_s']:>7.3f}"
            f"  ({r['own_pct']:.1f}%)"
        )
    for scenario in sorted({r["scenario"] for r in rows}):
        check = next(r["check_s"] for r in rows if r["scenario"] == scenario)
        print(
            f"{'checks before running ' + scenario.removesuffix('.yaml') + ' (once)':<52} {check:>9.4f}s"
        )
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "run_wall_s": run_wall,
                    "help_wall_s": help_wall,
                    "giant_meta_wall_s": giant_wall,
                    "overhead": rows,
                    "own_share": shares,
                },
                indent=2,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
