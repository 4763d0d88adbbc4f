"""Training-step speed: the engine against PyTorch on cpu, same machine, same run.

Each step is zero_grad(set_to_none=True), forward, loss, backward, SGD(momentum=0.9).step():
- mlp: Linear(512, 1024) - ReLU(inplace=True) - Linear(1024, 512), batch 64, MSE loss;
- cnn-stem: Conv2d(3, 64, k=11, s=4, p=2) + ReLU(inplace=True), batch 8, 3x224x224, mean loss.
Engine and torch steps alternate, so background load hits both alike; the table shows medians.
torch runs at its default thread count; numpy's BLAS at its own default.

    python bench/bench_training.py [--reps 30] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np


def _mlp(lib, rng):
    nn = lib.nn
    model = nn.Sequential(nn.Linear(512, 1024), nn.ReLU(inplace=True), nn.Linear(1024, 512))
    x = _tensor(lib, rng.standard_normal((64, 512), dtype=np.float32))
    t = _tensor(lib, rng.standard_normal((64, 512), dtype=np.float32))
    opt = lib.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = nn.functional.mse_loss(model(x), t)
        loss.backward()
        opt.step()

    return step


def _cnn_stem(lib, rng):
    nn = lib.nn
    model = nn.Sequential(nn.Conv2d(3, 64, 11, stride=4, padding=2), nn.ReLU(inplace=True))
    x = _tensor(lib, rng.standard_normal((8, 3, 224, 224), dtype=np.float32))
    opt = lib.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = model(x).mean()
        loss.backward()
        opt.step()

    return step


def _tensor(lib, arr):
    return lib.from_numpy(arr.copy())


BENCHES = {"mlp (64, 512-1024-512)": _mlp, "cnn-stem (8, 3x224x224)": _cnn_stem}


def run(reps: int = 30, warmup: int = 3) -> list[dict]:
    import torch

    import engine

    rows = []
    for name, make in BENCHES.items():
        steps = {
            "engine": make(engine, np.random.default_rng(0)),
            "torch": make(torch, np.random.default_rng(0)),
        }
        times = {"engine": [], "torch": []}
        for _ in range(warmup):
            for step in steps.values():
                step()
        for _ in range(reps):
            for lib, step in steps.items():
                t0 = time.perf_counter()
                step()
                times[lib].append(time.perf_counter() - t0)
        e, t = statistics.median(times["engine"]), statistics.median(times["torch"])
        rows.append(
            {
                "bench": name,
                "engine_ms": e * 1e3,
                "torch_ms": t * 1e3,
                "ratio": e / t,
                "torch_threads": torch.get_num_threads(),
            }
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=30)
    parser.add_argument("--json", help="also write the rows to this file")
    args = parser.parse_args()
    rows = run(args.reps)
    print(f"{'step':28s} {'engine ms':>10s} {'torch ms':>10s} {'ratio':>7s}")
    for r in rows:
        print(f"{r['bench']:28s} {r['engine_ms']:10.2f} {r['torch_ms']:10.2f} {r['ratio']:7.2f}")
    print(f"(torch threads: {rows[0]['torch_threads']}; medians of {args.reps} alternating steps)")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=2)


if __name__ == "__main__":
    main()
