"""CuPy backend speed against torch.cuda, and the HBM bandwidth its elementwise kernels reach.

Three tables, every figure measured in the same run on the same GPU:
- elementwise ops (relu, relu_, add, add_, mul, mul_, exp, sigmoid) on a 1x64x512x512 float32
  activation (64 MiB) and on a 4-element tensor (dispatch overhead): engine ms, torch ms, ratio;
- the training steps of bench/bench_training.py (the MLP, the CNN stem, the small CNN with
  BatchNorm and MaxPool, a 3x3 64->64 convolution forward+backward; SGD with momentum),
  on cuda: engine ms, torch ms, ratio;
- bandwidth: bytes each elementwise op moves (read + write) per second, against a
  device-to-device copy of the same tensor (torch's ``copy_`` and CuPy's ``copyto``): GB/s and
  the fraction of the copy's.

Engine and torch runs alternate, so clock and thermal drift hit both alike; times are medians of
``--reps`` samples, each the mean of ``--inner`` calls between two device synchronisations.
Needs CuPy and torch with CUDA; ``--device cpu`` runs the same harness on the CPU (numpy vs
torch) to check it without a GPU. Exit status 2 when the device is not there.

    python bench/bench_cuda.py [--reps 20] [--inner 20] [--json out.json] [--device cuda]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

BIG = (1, 64, 512, 512)
SMALL = (4,)

# op name -> (function of (lib, x, y), bytes moved per element of x: reads + writes, 4 bytes each)
ELEMENTWISE = {
    "relu": (lambda lib, x, y: lib.relu(x), 8),
    "relu_": (lambda lib, x, y: lib.relu_(x), 8),
    "add": (lambda lib, x, y: lib.add(x, y), 12),
    "add_": (lambda lib, x, y: x.add_(y), 12),
    "mul": (lambda lib, x, y: lib.mul(x, y), 12),
    "mul_": (lambda lib, x, y: x.mul_(y), 12),
    "exp": (lambda lib, x, y: lib.exp(x), 8),
    "sigmoid": (lambda lib, x, y: lib.sigmoid(x), 8),
}


def _sync(lib, device: str):
    if device != "cuda":
        return lambda: None
    if lib.__name__ == "torch":
        return lib.cuda.synchronize
    import cupy

    return cupy.cuda.Device().synchronize


def _time(fn, sync, inner: int) -> float:
    sync()
    t0 = time.perf_counter()
    for _ in range(inner):
        fn()
    sync()
    return (time.perf_counter() - t0) / inner


def _alternate(calls: dict, syncs: dict, reps: int, inner: int, warmup: int = 2) -> dict:
    """Median seconds per call of each entry of ``calls``, sampled alternately."""
    for _ in range(warmup):
        for name, fn in calls.items():
            _time(fn, syncs[name], 1)
    samples = {name: [] for name in calls}
    for _ in range(reps):
        for name, fn in calls.items():
            samples[name].append(_time(fn, syncs[name], inner))
    return {name: statistics.median(s) for name, s in samples.items()}


def _tensors(lib, shape, device):
    rng = np.random.default_rng(0)
    x = lib.from_numpy(rng.standard_normal(shape, dtype=np.float32)).to(device)
    # y near 1, so repeated in-place add_/mul_ keep x finite and normal (no denormal slow paths)
    y = 1 + 1e-3 * rng.standard_normal(shape, dtype=np.float32)
    y = lib.from_numpy(y.astype(np.float32)).to(device)
    return x, y


def bench_elementwise(libs: dict, device: str, reps: int, inner: int) -> list[dict]:
    rows = []
    for shape in (BIG, SMALL):
        data = {name: _tensors(lib, shape, device) for name, lib in libs.items()}
        syncs = {name: _sync(lib, device) for name, lib in libs.items()}
        for op, (fn, _) in ELEMENTWISE.items():
            calls = {
                name: (lambda f=fn, lib=lib, d=data[name]: f(lib, d[0], d[1]))
                for name, lib in libs.items()
            }
            t = _alternate(calls, syncs, reps, inner)
            rows.append(
                {
                    "op": op,
                    "shape": "x".join(map(str, shape)),
                    "engine_ms": t["engine"] * 1e3,
                    "torch_ms": t["torch"] * 1e3,
                    "ratio": t["engine"] / t["torch"],
                }
            )
    return rows


def bench_bandwidth(libs: dict, device: str, reps: int, inner: int) -> list[dict]:
    """GB/s of each big elementwise op (engine and torch) and of a device-to-device copy."""
    n = int(np.prod(BIG))
    data = {name: _tensors(lib, BIG, device) for name, lib in libs.items()}
    syncs = {name: _sync(lib, device) for name, lib in libs.items()}
    torch_x, _ = data["torch"]
    torch_dst = torch_x.clone()
    calls = {"copy (torch copy_)": lambda: torch_dst.copy_(torch_x)}
    call_syncs = {"copy (torch copy_)": syncs["torch"]}
    if device == "cuda":
        import cupy

        src = cupy.asarray(np.ones(n, dtype=np.float32))
        dst = cupy.empty_like(src)
        calls["copy (cupy copyto)"] = lambda: cupy.copyto(dst, src)
        call_syncs["copy (cupy copyto)"] = syncs["engine"]
    copy_times = _alternate(calls, call_syncs, reps, inner)
    copy_gbs = max(2 * 4 * n / t for t in copy_times.values()) / 1e9
    rows = [
        {"kernel": name, "GB/s": 2 * 4 * n / t / 1e9, "of_copy": 2 * 4 * n / t / 1e9 / copy_gbs}
        for name, t in copy_times.items()
    ]
    for op, (fn, per_elem) in ELEMENTWISE.items():
        op_calls = {
            name: (lambda f=fn, lib=lib, d=data[name]: f(lib, d[0], d[1]))
            for name, lib in libs.items()
        }
        t = _alternate(op_calls, syncs, reps, inner)
        for name in libs:
            gbs = per_elem * n / t[name] / 1e9
            rows.append({"kernel": f"{op} ({name})", "GB/s": gbs, "of_copy": gbs / copy_gbs})
    return rows


def _mlp(lib, rng, device):
    nn = lib.nn
    model = nn.Sequential(nn.Linear(512, 1024), nn.ReLU(inplace=True), nn.Linear(1024, 512))
    model.to(device)
    x = lib.from_numpy(rng.standard_normal((64, 512), dtype=np.float32)).to(device)
    t = lib.from_numpy(rng.standard_normal((64, 512), dtype=np.float32)).to(device)
    opt = lib.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = nn.functional.mse_loss(model(x), t)
        loss.backward()
        opt.step()

    return step


def _cnn_stem(lib, rng, device):
    nn = lib.nn
    model = nn.Sequential(nn.Conv2d(3, 64, 11, stride=4, padding=2), nn.ReLU(inplace=True))
    model.to(device)
    x = lib.from_numpy(rng.standard_normal((8, 3, 224, 224), dtype=np.float32)).to(device)
    opt = lib.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = model(x).mean()
        loss.backward()
        opt.step()

    return step


def _small_cnn(lib, rng, device):
    from bench.bench_training import small_cnn_model

    nn = lib.nn
    model = small_cnn_model(nn)
    model.to(device)
    x = lib.from_numpy(rng.standard_normal((32, 3, 32, 32), dtype=np.float32)).to(device)
    t = lib.from_numpy(rng.integers(0, 10, 32)).to(device)
    opt = lib.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = nn.functional.cross_entropy(model(x), t)
        loss.backward()
        opt.step()

    return step


def _conv3x3(lib, rng, device):
    nn = lib.nn
    conv = nn.Conv2d(64, 64, 3, padding=1)
    conv.to(device)
    x = lib.from_numpy(rng.standard_normal((16, 64, 56, 56), dtype=np.float32)).to(device)
    opt = lib.optim.SGD(conv.parameters(), lr=0.01, momentum=0.9)

    def step():
        opt.zero_grad(set_to_none=True)
        conv(x).mean().backward()
        opt.step()

    return step


# The steps of bench/bench_training.py (same layers, sizes and optimizer), built on `device`.
STEPS = {
    "mlp (64, 512-1024-512)": _mlp,
    "cnn-stem (8, 3x224x224)": _cnn_stem,
    "small-cnn bn+pool (32, 3x32x32)": _small_cnn,
    "conv3x3 64->64 fwd+bwd": _conv3x3,
}


def bench_training(libs: dict, device: str, reps: int, inner: int) -> list[dict]:
    rows = []
    syncs = {name: _sync(lib, device) for name, lib in libs.items()}
    for bench, make in STEPS.items():
        calls = {name: make(lib, np.random.default_rng(0), device) for name, lib in libs.items()}
        t = _alternate(calls, syncs, reps, max(1, inner // 5))
        rows.append(
            {
                "step": bench,
                "engine_ms": t["engine"] * 1e3,
                "torch_ms": t["torch"] * 1e3,
                "ratio": t["engine"] / t["torch"],
            }
        )
    return rows


def device_missing(device: str) -> str | None:
    """Why ``device`` cannot be benchmarked here, or None."""
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if device == "cpu":
        return None
    if not torch.cuda.is_available():
        return "torch.cuda.is_available() is False"
    from engine.device import cuda_available

    if not cuda_available():
        return "CuPy with a GPU is not available"
    return None


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="bench_cuda", description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--inner", type=int, default=20)
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--json", help="also write the tables to this file")
    args = parser.parse_args(argv)
    if args.reps < 1 or args.inner < 1:
        print("bench_cuda: --reps and --inner must be at least 1", file=sys.stderr)
        return 2
    why = device_missing(args.device)
    if why:
        print(f"bench_cuda: {args.device} unmeasured: {why}", file=sys.stderr)
        return 2
    import torch

    import engine

    libs = {"engine": engine, "torch": torch}
    elementwise = bench_elementwise(libs, args.device, args.reps, args.inner)
    training = bench_training(libs, args.device, args.reps, args.inner)
    bandwidth = bench_bandwidth(libs, args.device, args.reps, args.inner)

    print(f"{'op':10s} {'shape':14s} {'engine ms':>10s} {'torch ms':>10s} {'ratio':>7s}")
    for r in elementwise:
        print(
            f"{r['op']:10s} {r['shape']:14s} {r['engine_ms']:10.4f} {r['torch_ms']:10.4f} "
            f"{r['ratio']:7.2f}"
        )
    print()
    print(f"{'step':32s} {'engine ms':>10s} {'torch ms':>10s} {'ratio':>7s}")
    for r in training:
        print(f"{r['step']:32s} {r['engine_ms']:10.3f} {r['torch_ms']:10.3f} {r['ratio']:7.2f}")
    print()
    print(f"{'kernel (64 MiB float32)':28s} {'GB/s':>8s} {'of copy':>8s}")
    for r in bandwidth:
        print(f"{r['kernel']:28s} {r['GB/s']:8.1f} {r['of_copy']:8.2f}")
    name = torch.cuda.get_device_name(0) if args.device == "cuda" else "cpu"
    versions = f"torch {torch.__version__}, numpy {np.__version__}"
    if args.device == "cuda":
        import cupy

        versions += f", cupy {cupy.__version__}"
    print(f"({name}; {versions}; medians of {args.reps} alternating samples)")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(
                {
                    "device": name,
                    "versions": versions,
                    "elementwise": elementwise,
                    "training": training,
                    "bandwidth": bandwidth,
                },
                fh,
                indent=2,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
