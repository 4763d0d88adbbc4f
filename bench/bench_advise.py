"""Benchmark `memprof advise` (python bench/bench_advise.py [--repeat N] [--json PATH]).

For each scenario, the wall time of the whole advice (the recording run, each candidate re-run
alone, the safe ones together) against a reference measured in the same run: one plain run of the
same variant (`run_loaded`, best of N). The ratio per run says what advice adds beyond running the
variant `runs` times (value snapshots, the autograd-graph walk, the comparison). Cases:

- mlp_train (sgd) as written (cpu) and on meta: its ReLU already runs in place, so advice is the
  recording run alone;
- a torchvision-layout ResNet stem and stage with in-place off (tests/memprof/advise_scenarios/
  resnet_stage.yaml; 7 candidates, 9 runs) on cpu and on meta;
- scenarios/resnet_block.yaml out_of_place on cpu and meta; relu.yaml out_of_place on meta;
- torchvision's ResNet-18 (bench/resnet_yaml.py; batch 2 at 224x224) with in-place off, on meta
  (25 candidates, 27 runs): the advice must switch exactly torchvision's in-place nodes, and its
  combined saving must equal the measured difference between the two variants (checked, printed).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

CASES = [
    ("mlp_train", "scenarios/mlp_train.yaml", "sgd", None),
    ("mlp_train", "scenarios/mlp_train.yaml", "sgd", "meta"),
    ("resnet_stage", "tests/memprof/advise_scenarios/resnet_stage.yaml", "inplace_off", None),
    ("resnet_stage", "tests/memprof/advise_scenarios/resnet_stage.yaml", "inplace_off", "meta"),
    ("resnet_block", "scenarios/resnet_block.yaml", "out_of_place", None),
    ("resnet_block", "scenarios/resnet_block.yaml", "out_of_place", "meta"),
    ("relu", "scenarios/relu.yaml", "out_of_place", "meta"),
    ("resnet18", "<resnet18>", "inplace_off", "meta"),
]


def resnet18_path() -> str:
    import tempfile

    from resnet_yaml import resnet_yaml

    fd, path = tempfile.mkstemp(suffix=".yaml", prefix="resnet18-")
    with os.fdopen(fd, "w") as fh:
        fh.write(resnet_yaml(18, batch=2, size=224))
    return path


def check_resnet18(path: str) -> str:
    """Whether the advice recovers torchvision's choices and its saving is the measured one."""
    from memprof.advise import advise
    from memprof.advise.analysis import candidate_op
    from memprof.runner import run_scenario
    from memprof.scenario import load_scenario

    advice = advise(path, variant="inplace_off", device="meta")
    off = next(v.spec for v in load_scenario(path).variants if v.name == "inplace_off")
    chosen = [n.id for n in off.program if candidate_op(off, n) is not None]
    peaks = {
        v["name"]: v["peak_allocated_bytes"] for v in run_scenario(path, device="meta")["variants"]
    }
    same_nodes = advice["switched"] == chosen
    saving = advice["peak_before"] - advice["peak_after"]
    measured = peaks["inplace_off"] - peaks["torchvision"]
    return (
        f"resnet18: advice switches torchvision's {len(chosen)} in-place nodes: "
        f"{'yes' if same_nodes else 'NO'}; combined saving {saving} bytes, measured difference "
        f"{measured} bytes: {'equal' if saving == measured else 'DIFFERENT'}"
    )


def measure(path: str, variant: str, device: str | None, repeat: int) -> dict:
    from memprof.advise import advise
    from memprof.runner import run_loaded
    from memprof.scenario import load_scenario

    path = resnet18_path() if path == "<resnet18>" else str(ROOT / path)
    loaded = load_scenario(path, variants=[variant], device=device)
    run_times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        run_loaded(loaded)
        run_times.append(time.perf_counter() - t0)
    advise_times, advice = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        advice = advise(path, variant=variant, device=device)
        advise_times.append(time.perf_counter() - t0)
    one_run, total = min(run_times), min(advise_times)
    return {
        "advise_s": round(total, 4),
        "one_run_s": round(one_run, 4),
        "runs": advice["runs"],
        "ratio": round(total / one_run, 2),
        "ratio_per_run": round(total / one_run / advice["runs"], 2),
        "candidates": len(advice["candidates"]),
        "safe": len(advice["switched"]),
        "saving_bytes": advice["peak_before"] - advice["peak_after"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    rows = []
    print(
        f"{'scenario':<14}{'device':<11}{'advise s':>10}{'1 run s':>10}{'runs':>6}"
        f"{'x 1 run':>9}{'x per run':>11}{'safe':>6}{'saving':>10}"
    )
    for name, path, variant, device in CASES:
        r = {"scenario": name, "variant": variant, "device": device or "as written"}
        r.update(measure(path, variant, device, args.repeat))
        rows.append(r)
        print(
            f"{name:<14}{r['device']:<11}{r['advise_s']:>10.3f}{r['one_run_s']:>10.3f}"
            f"{r['runs']:>6}{r['ratio']:>9.1f}{r['ratio_per_run']:>11.2f}"
            f"{r['safe']:>3}/{r['candidates']:<2}{r['saving_bytes']:>10}"
        )
    print(check_resnet18(resnet18_path()))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
