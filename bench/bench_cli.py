"""The CLI's own costs (python bench/bench_cli.py [--repeat N] [--json PATH]).

- `memprof --help` in a fresh process: wall seconds, median of N (issue 15's target: < 0.2 s;
  typer's rich help and every heavy import are lazy), beside `python -c pass` as the floor;
- `memprof run DIR` over the four zoo scenarios (scenarios/gpt2_small.yaml, resnet50.yaml,
  vit_b16.yaml, unet_block.yaml: every variant, on meta) with `--jobs 1` (in process) and with
  `--jobs N` (N = the number of cores), interleaved: wall seconds and the speedup.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ZOO = ("gpt2_small.yaml", "resnet50.yaml", "vit_b16.yaml", "unet_block.yaml")
HELP_TARGET_S = 0.2


def _env() -> dict:
    """The measured processes' environment: this checkout first on the path, and bytecode
    caches written and read as on a user's machine (an environment that turns them off,
    PYTHONDONTWRITEBYTECODE, would have every run compile memprof's modules again: ~10 ms of
    `memprof --help`)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def _wall(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, check=False, capture_output=True, env=_env())
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    script = Path(sys.executable).with_name("memprof")  # the console script users run
    memprof = [str(script)] if script.exists() else [sys.executable, "-m", "memprof"]
    jobs = os.cpu_count() or 1
    out: dict = {"cores": jobs, "load_avg": os.getloadavg()[0]}
    print(f"cores {jobs}, load average {out['load_avg']:.1f}, repeat {args.repeat}")

    _wall([*memprof, "--help"])  # writes the bytecode caches, as a first run would
    floor, helps = [], []
    for _ in range(args.repeat):  # interleaved: a busy moment slows both alike
        floor.append(_wall([sys.executable, "-c", "pass"]))
        helps.append(_wall([*memprof, "--help"]))
    h, f = statistics.median(helps), statistics.median(floor)
    out["help"] = {"help_s": helps, "python_s": floor}
    mark = "met" if h < HELP_TARGET_S else "NOT met"
    print(
        f"memprof --help            {h:6.3f} s  (python -c pass {f:.3f} s)  "
        f"target < {HELP_TARGET_S} s {mark}"
    )

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "zoo"
        folder.mkdir()
        for name in ZOO:
            shutil.copy(ROOT / "scenarios" / name, folder / name)
        serial, parallel = [], []
        for _ in range(max(1, args.repeat // 2)):
            runs = str(Path(tmp) / "runs")
            serial.append(
                _wall([*memprof, "run", str(folder), "-q", "--jobs", "1", "--runs", runs])
            )
            parallel.append(
                _wall([*memprof, "run", str(folder), "-q", "--jobs", str(jobs), "--runs", runs])
            )
    s, p = statistics.median(serial), statistics.median(parallel)
    out["run_zoo"] = {"serial_s": serial, "parallel_s": parallel, "jobs": jobs}
    print(
        f"memprof run (zoo, meta)   --jobs 1 {s:6.2f} s   --jobs {jobs} {p:6.2f} s   "
        f"speedup {s / p:.2f}x"
    )
    if args.json:
        args.json.write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
