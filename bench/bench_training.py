"""Training-step speed: the engine against PyTorch on cpu, same machine, same run.

Each step is zero_grad(set_to_none=True), forward, loss, backward, SGD(momentum=0.9).step():
- mlp: Linear(512, 1024) - ReLU(inplace=True) - Linear(1024, 512), batch 64, MSE loss;
- cnn-stem: Conv2d(3, 64, k=11, s=4, p=2) + ReLU(inplace=True), batch 8, 3x224x224, mean loss;
- small-cnn: Conv2d(3, 32, 3, p=1) - BatchNorm2d - ReLU - MaxPool2d(2) - Conv2d(32, 64, 3, p=1) -
  BatchNorm2d - ReLU - MaxPool2d(2) - Flatten - Linear(64*8*8, 10), batch 32, 3x32x32,
  cross-entropy;
- conv3x3: Conv2d(64, 64, 3, p=1), batch 16, 64x56x56: forward only (no_grad), and
  forward+backward with a mean loss and the SGD step;
- transformer block: TransformerEncoderLayer(d_model 256, 4 heads, feed-forward 1024,
  batch_first, dropout 0), batch 8, sequence 128, mean loss.
The engine and torch each run in a process of their own (in one process, numpy's OpenBLAS
threads keep spinning for up to ~0.1 s after every matrix product and slow torch's threads,
which flattered the engine's ratios before), driven in alternating bursts of 3 steps (each after a
0.25 s pause, so that the other side's threads have stopped spinning) so that background load
hits both alike; the table shows medians and issue 15's target beside each
ratio (1.0x quiet; 1.3x loaded). torch runs at its default
thread count; numpy's BLAS at its own default. `--load N` starts N busy processes for the
run (the loaded figures: `--load 2` on this 2-core machine).

    python bench/bench_training.py [--reps 30] [--load N] [--only NAME] [--json out.json]
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


def small_cnn_model(nn):
    """The small CNN (also bench_cuda's): two conv-BN-ReLU-maxpool blocks and a linear head."""
    return nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1),
        nn.BatchNorm2d(32),
        nn.ReLU(inplace=True),
        nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1),
        nn.BatchNorm2d(64),
        nn.ReLU(inplace=True),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(64 * 8 * 8, 10),
    )


def _small_cnn(lib, rng):
    nn = lib.nn
    model = small_cnn_model(nn)
    x = _tensor(lib, rng.standard_normal((32, 3, 32, 32), dtype=np.float32))
    t = _tensor(lib, rng.integers(0, 10, 32))
    opt = lib.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = nn.functional.cross_entropy(model(x), t)
        loss.backward()
        opt.step()

    return step


def _conv3x3(lib, rng, backward: bool):
    nn = lib.nn
    conv = nn.Conv2d(64, 64, 3, padding=1)
    x = _tensor(lib, rng.standard_normal((16, 64, 56, 56), dtype=np.float32))
    opt = lib.optim.SGD(conv.parameters(), lr=0.01, momentum=0.9)

    def forward():
        with lib.no_grad():
            conv(x)

    def step():
        opt.zero_grad(set_to_none=True)
        conv(x).mean().backward()
        opt.step()

    return step if backward else forward


def _transformer(lib, rng):
    nn = lib.nn
    layer = nn.TransformerEncoderLayer(256, 4, 1024, dropout=0.0, batch_first=True)
    x = _tensor(lib, rng.standard_normal((8, 128, 256), dtype=np.float32))
    opt = lib.optim.SGD(layer.parameters(), lr=0.01, momentum=0.9)

    def step():
        opt.zero_grad(set_to_none=True)
        layer(x).mean().backward()
        opt.step()

    return step


def _tensor(lib, arr):
    return lib.from_numpy(arr.copy())


BENCHES = {
    "mlp (64, 512-1024-512)": _mlp,
    "cnn-stem (8, 3x224x224)": _cnn_stem,
    "small-cnn bn+pool (32, 3x32x32)": _small_cnn,
    "conv3x3 64->64 fwd (16, 56x56)": lambda lib, rng: _conv3x3(lib, rng, False),
    "conv3x3 64->64 fwd+bwd": lambda lib, rng: _conv3x3(lib, rng, True),
    "transformer d256 seq128 (8)": _transformer,
}
TARGET_QUIET, TARGET_LOADED = 1.0, 1.3
GAP_S = 0.25  # OpenBLAS (numpy) and OpenMP (torch) threads spin for up to ~0.1 s when idle


def _worker(lib_name: str, conn, own_blas: bool = False) -> None:
    """A process that runs one framework's steps on request: ("make", bench name) builds the
    step; ("run", k) runs k steps and answers their times; ("stop", None) ends."""
    import importlib

    lib = importlib.import_module(lib_name)
    if own_blas and lib_name == "engine":
        lib.set_num_threads(lib.get_num_threads(), own_blas=True)
    step = None
    while True:
        cmd, arg = conn.recv()
        if cmd == "make":
            step = BENCHES[arg](lib, np.random.default_rng(0))
            conn.send((getattr(lib, "get_num_threads", lambda: None)(), _blas_kernels()))
        elif cmd == "run":
            times = []
            for _ in range(arg):
                t0 = time.perf_counter()
                step()
                times.append(time.perf_counter() - t0)
            conn.send(times)
        else:
            conn.close()
            return


def _blas_kernels() -> str:
    """Which kernels numpy's OpenBLAS runs in this process, and whether the environment chose
    them (OPENBLAS_CORETYPE: one machine this ran on pinned Haswell's AVX2 kernels on an AVX-512
    AMD CPU, where OpenBLAS would pick SkylakeX's, about 1.8x faster on float32 GEMM; another,
    an Intel Xeon with AVX-512 and no pin, runs SkylakeX's). The ratios differ between such
    machines: compare a table only with one printed under the same kernels and CPU."""
    import os

    import threadpoolctl

    arch = next(
        (i.get("architecture") for i in threadpoolctl.threadpool_info() if "architecture" in i),
        "unknown",
    )
    pinned = os.environ.get("OPENBLAS_CORETYPE")
    return f"{arch} kernels" + (f" (OPENBLAS_CORETYPE={pinned})" if pinned else "")


def _cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo), or the platform's word for it."""
    import platform

    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def run(
    reps: int = 30, warmup: int = 3, only: str | None = None, burst: int = 3, own_blas=False
) -> list[dict]:
    """Each framework in a process of its own (numpy's OpenBLAS spins its threads for up to
    ~0.1 s after a matrix product, which in a shared process slows whatever runs next: torch's
    OpenMP threads, or the engine's own pool), driven by this one in alternating bursts of
    `burst` steps so that background load hits both alike, with a pause before each burst so
    that the other process's threads have stopped spinning (they spin across processes too)."""
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    workers = {}
    for lib in ("engine", "torch"):
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=_worker, args=(lib, child, own_blas), daemon=True)
        proc.start()
        workers[lib] = (proc, parent)
    rows = []
    try:
        for name in BENCHES:
            if only and only not in name:
                continue
            threads = {}
            for lib, (_, conn) in workers.items():
                conn.send(("make", name))
                threads[lib], blas = conn.recv()
                if lib == "engine":
                    blas_kernels = blas
            for _lib, (_, conn) in workers.items():
                conn.send(("run", warmup))
                conn.recv()
            times = {"engine": [], "torch": []}
            done = 0
            while done < reps:
                k = min(burst, reps - done)
                for lib, (_, conn) in workers.items():
                    time.sleep(GAP_S)  # the other side's spinning threads go idle first
                    conn.send(("run", k))
                    times[lib] += conn.recv()
                done += k
            e, t = statistics.median(times["engine"]), statistics.median(times["torch"])
            rows.append(
                {
                    "bench": name,
                    "engine_ms": e * 1e3,
                    "torch_ms": t * 1e3,
                    "ratio": e / t,
                    "torch_threads": threads["torch"],
                    "engine_blas": blas_kernels,
                }
            )
    finally:
        for proc, conn in workers.values():
            try:
                conn.send(("stop", None))
            except (BrokenPipeError, OSError):
                pass
            proc.join(timeout=5)
    return rows


def _busy(n: int) -> list:
    """n processes that keep a core each busy (the loaded run)."""
    import subprocess
    import sys

    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=30)
    parser.add_argument("--load", type=int, default=0, help="busy processes during the run")
    parser.add_argument("--only", help="only the benches whose name contains this")
    parser.add_argument(
        "--own-blas",
        action="store_true",
        help="the engine owns the thread budget (engine.set_num_threads(n, own_blas=True))",
    )
    parser.add_argument("--json", help="also write the rows to this file")
    args = parser.parse_args()
    hogs = _busy(args.load)
    try:
        rows = run(args.reps, only=args.only, own_blas=args.own_blas)
    finally:
        for h in hogs:
            h.kill()
    target = TARGET_LOADED if args.load else TARGET_QUIET
    print(f"{'step':34s} {'engine ms':>10s} {'torch ms':>10s} {'ratio':>7s} {'target':>7s}")
    for r in rows:
        mark = "met" if r["ratio"] <= target else "NOT met"
        print(
            f"{r['bench']:34s} {r['engine_ms']:10.2f} {r['torch_ms']:10.2f} {r['ratio']:7.2f} "
            f"{target:7.1f} {mark}"
        )
    print(
        f"(torch threads: {rows[0]['torch_threads']}; medians of {args.reps} alternating steps; "
        f"{args.load} busy processes; engine BLAS: "
        f"{'single-threaded, its pool splits products' if args.own_blas else 'its own threads'}, "
        f"{rows[0]['engine_blas']}; cpu: {_cpu_model()})"
    )
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=2)


if __name__ == "__main__":
    main()
