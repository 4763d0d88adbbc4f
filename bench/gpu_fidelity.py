"""The truth on a real GPU: the caching model and the CuPy backend against torch.cuda, to the byte.

Every program below is written once, against a module ``lib`` (``torch`` or ``engine`` behind a
tiny adapter, :class:`Lib`), and run three ways, plus a cpu half:

- ``torch-cuda``: PyTorch on a GPU; figures from ``torch.cuda.max_memory_allocated()``,
  ``max_memory_reserved()``, ``memory_stats()`` counters and ``torch.cuda.memory._snapshot()``
  segments, after ``reset_peak_memory_stats()``;
- ``engine-cuda``: the engine on the CuPy backend with the caching model;
- ``engine-meta``: the engine on ``meta`` with the caching model (no data, same accounting);
- ``cpu``: the peak of the raw bytes requested inside the program, torch's from its CPU
  profiler (``profile_memory=True``) and the engine's from its allocator events on ``meta``.
  PyTorch's CPU allocator does no caching, so this half checks the requests the caching model
  is fed, not the caching rules; it runs only where a CPU figure is meaningful (a program with
  a ``cpu_skip`` reason is left out).

One row per program with the figures and the differences; the exit status is 1 when any figure
differs beyond the bytes PyTorch spends on its own bookkeeping (each allowance is a named
constant or function below, with its reason), 2 on bad arguments. Without CUDA the cuda columns
print as unmeasured and only the meta and cpu halves are compared.

    python bench/gpu_fidelity.py                 # every program, every side that can run here
    python bench/gpu_fidelity.py --sides meta,cpu --programs relu-out,fragment --json out.json

The module needs numpy and the engine only; torch and CuPy are imported when their side runs,
so it travels as source to a bare GPU machine (numpy + CuPy + torch with CUDA, no network).
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import re
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field

if __package__ in (None, ""):  # run as a script: make the repository root importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

MiB = 1 << 20

# --- allowances: the bytes PyTorch spends on its own bookkeeping ------------------------------

# cuBLAS / cuBLASLt workspace. PyTorch allocates it through the caching allocator on the first
# matmul on a (handle, stream) and keeps it for the life of the handle; the engine has no cuBLAS
# handle to account. Handled by measurement, not by a tolerance: each program runs once on torch
# as a warm-up, then empty_cache(); whatever is still allocated then (the workspaces, cuDNN
# plans' buffers) is PyTorch's and is subtracted from torch's figures, and its segments are left
# out of the layout comparison. The subtracted bytes print in the "torch own" column.
BOOKKEEPING_BY_WARMUP = "cuBLAS/cuBLASLt workspaces and other buffers torch keeps after warm-up"

# What that bookkeeping leaves in torch's small pool, which the program's small allocations then
# share: after every program's warm-up (H100 and H200, torch 2.11.0+cu130, recorded with
# bench's diagnostics on 2026-11-27) one 2 MiB small segment holds a 1 MiB block kept between
# two free ones of 530432 and 518144 bytes (the large pool: two 32 MiB workspaces, full, which
# nothing else can use). The engine sides start from the same small segment (made and then
# subtracted as torch's is): without it, the transformer's small blocks that torch fits into
# those free pieces took a segment of their own (one 2 MiB segment more than torch).
TORCH_SMALL_SEGMENT_AFTER_WARMUP = (530432, 1048576, 518144)  # free, kept, free

# Python scalars on the CPU side: PyTorch wraps a Python number passed to an op (the loss's
# reduction, the optimizer's lr, `x * scale`) in a 0-dim CPU tensor of 4 or 8 bytes, and
# Adam keeps its `step` counters as 0-dim CPU tensors; the engine's requests on meta have no
# such wrappers. Allowed on the cpu half only (on cuda the wrappers live on the CPU).
CPU_SCALAR_SLACK = 64


def conv_scratch_allowance(lib_torch, lib_engine, spec: ConvSpec) -> int:
    """Conv scratch: the bytes one conv forward + backward holds beyond its tensors, either side.

    On cuda PyTorch runs cuDNN, which picks an algorithm at run time and allocates its workspace
    from the caching allocator for the duration of the call; the engine models the CPU
    algorithm's im2col columns instead. Neither is a tensor the program sees. The allowance is
    the larger scratch of the two, each measured on the conv alone (transient bytes: peak during
    the call minus what is live after it).
    """
    return max(_conv_scratch(lib_torch, spec), _conv_scratch(lib_engine, spec))


def _conv_scratch(lib: Lib, spec: ConvSpec) -> int:
    x = lib.randn(*spec.input, device=lib.device, requires_grad=True)
    conv = lib.nn.Conv2d(*spec.conv_args, **spec.conv_kwargs, device=lib.device)
    lib.synchronize()
    lib.reset_peak()
    y = conv(x)
    lib.synchronize()
    forward = lib.max_allocated() - lib.allocated()
    g = lib.ones_like(y)
    lib.reset_peak()
    y.backward(g)
    lib.synchronize()
    backward = lib.max_allocated() - lib.allocated()
    del x, conv, y, g
    return max(forward, backward)


# --- the adapter ------------------------------------------------------------------------------


class Lib:
    """``torch`` or ``engine`` on one device, so one program body runs on both.

    Attribute access falls through to the module (``lib.relu``, ``lib.nn``, ``lib.randn``), so a
    program reads like ordinary PyTorch code; the few differences live here: the device, the
    memory statistics, the memory limit, the out-of-memory error, and options one side lacks.
    """

    def __init__(self, module, device: str):
        self.module = module
        self.device = device
        self.is_torch = module.__name__ == "torch"
        self.OutOfMemoryError = (
            module.OutOfMemoryError if not self.is_torch else module.cuda.OutOfMemoryError
        )
        self.F = module.nn.functional

    def __getattr__(self, name):
        return getattr(self.module, name)

    def __repr__(self) -> str:
        return f"Lib({self.module.__name__}, {self.device!r})"

    # options
    def adam(self, params, **kwargs):
        """Adam's single-tensor update unless `foreach` is given (foreach=None would pick
        foreach on a GPU and single-tensor on the CPU half: both sides are told)."""
        kwargs.setdefault("foreach", False)
        return self.module.optim.Adam(params, **kwargs)

    def bytes_(self, nbytes: int):
        """An uninitialised uint8 tensor of ``nbytes`` bytes (one storage of exactly that size)."""
        return self.module.empty(nbytes, dtype=self.module.uint8, device=self.device)

    # memory statistics of this device
    @property
    def _mem(self):
        return self.module.cuda if self.is_torch else self.module.memory

    def _dev(self):
        return None if self.is_torch else self.device

    def synchronize(self) -> None:
        if self.is_torch and self.device.startswith("cuda"):
            self.module.cuda.synchronize()

    def reset_peak(self) -> None:
        self._mem.reset_peak_memory_stats(self._dev())

    def allocated(self) -> int:
        return self._mem.memory_allocated(self._dev())

    def reserved(self) -> int:
        return self._mem.memory_reserved(self._dev())

    def max_allocated(self) -> int:
        return self._mem.max_memory_allocated(self._dev())

    def max_reserved(self) -> int:
        return self._mem.max_memory_reserved(self._dev())

    def stats(self) -> dict:
        return dict(self._mem.memory_stats(self._dev()))

    def segments(self) -> list[dict]:
        if self.is_torch:
            return list(self.module.cuda.memory._snapshot()["segments"])
        return self.module.memory.memory_snapshot(self.device)

    def empty_cache(self) -> None:
        if self.is_torch:
            self.module.cuda.empty_cache()
        else:
            self.module.memory.empty_cache(self.device)

    def set_memory_limit(self, nbytes: int | None) -> None:
        """Cap what the allocator may reserve for the program at ``nbytes`` (None: no cap).

        torch: ``set_per_process_memory_fraction``, whose cap counts every reserved byte, so the
        bookkeeping torch already holds (``own_reserved``) is added to the program's bytes.
        """
        if not self.is_torch:
            cap = None if nbytes is None else nbytes + self.own_reserved
            self.module.memory.set_memory_limit(cap, self.device)
            return
        cuda = self.module.cuda
        if nbytes is None:
            cuda.set_per_process_memory_fraction(1.0)
            return
        total = cuda.get_device_properties(0).total_memory
        # PyTorch computes the cap as size_t(fraction * total); round the fraction up by half a
        # byte so the cap is not one byte short of the intended figure.
        cap = nbytes + self.own_reserved
        cuda.set_per_process_memory_fraction(min(1.0, (cap + 0.5) / total))

    own_reserved = 0  # bytes reserved for torch's bookkeeping (set by the measurement)


# --- the programs -----------------------------------------------------------------------------


@dataclass(frozen=True)
class ConvSpec:
    input: tuple
    conv_args: tuple
    conv_kwargs: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Program:
    """One program: ``setup(lib)`` builds its state (not measured), ``run(lib, state, notes)``
    is measured and returns what it keeps alive until the figures are read.

    ``cpu_skip``: why torch's CPU request trace is no meaningful comparison (None: it is).
    ``conv``: the conv whose scratch is allowed for (see conv_scratch_allowance).
    """

    name: str
    setup: Callable
    run: Callable
    doc: str
    cpu_skip: str | None = None
    conv: ConvSpec | None = None
    big: bool = False  # allocates hundreds of MiB on the cpu half


def _no_setup(lib):
    return {}


def _activation(lib):
    return {"x": lib.randn(1, 64, 512, 512, device=lib.device)}


def relu_out(lib, s, notes):
    return lib.relu(s["x"])


def relu_in(lib, s, notes):
    return lib.relu_(s["x"])


def randn_relu(lib, s, notes):
    t = lib.randn(10000, 10000, device=lib.device)
    return t, lib.relu(t)


def randn_relu_(lib, s, notes):
    t = lib.randn(10000, 10000, device=lib.device)
    return lib.relu_(t)


def _sgd_state(lib, model, x, loss_fn):
    opt = lib.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    state = {"model": model, "x": x, "opt": opt, "loss_fn": loss_fn}
    _train_step(lib, state, None)  # the momentum buffers exist before the measured step
    return state


def _train_step(lib, s, notes):
    s["opt"].zero_grad(set_to_none=True)
    loss = s["loss_fn"](s["model"](s["x"]))
    loss.backward()
    s["opt"].step()
    return loss


def _mlp_state(lib):
    nn = lib.nn
    model = nn.Sequential(
        nn.Linear(512, 1024, device=lib.device),
        nn.ReLU(inplace=True),
        nn.Linear(1024, 512, device=lib.device),
    )
    x = lib.randn(64, 512, device=lib.device)
    target = lib.randn(64, 512, device=lib.device)
    return _sgd_state(lib, model, x, lambda out: lib.F.mse_loss(out, target))


CNN_CONV = ConvSpec((8, 3, 224, 224), (3, 64, 11), {"stride": 4, "padding": 2})


def _cnn_state(lib):
    nn = lib.nn
    model = nn.Sequential(
        nn.Conv2d(*CNN_CONV.conv_args, **CNN_CONV.conv_kwargs, device=lib.device),
        nn.ReLU(inplace=True),
    )
    x = lib.randn(*CNN_CONV.input, device=lib.device)
    return _sgd_state(lib, model, x, lambda out: out.mean())


# Transformer block sizes: batch, tokens, width, heads, MLP width.
TB, TT, TD, TH, TF = 8, 128, 256, 4, 1024


def _transformer_state(lib):
    nn = lib.nn
    d = lib.device
    mods = {
        "ln1": nn.LayerNorm(TD, device=d),
        "qkv": nn.Linear(TD, 3 * TD, device=d),
        "proj": nn.Linear(TD, TD, device=d),
        "ln2": nn.LayerNorm(TD, device=d),
        "fc1": nn.Linear(TD, TF, device=d),
        "fc2": nn.Linear(TF, TD, device=d),
    }
    x = lib.randn(TB, TT, TD, device=d, requires_grad=True)
    return {"m": mods, "x": x}


def transformer_block(lib, s, notes):
    """Pre-norm attention + MLP block, forward and backward, from ops both sides have."""
    m, x = s["m"], s["x"]
    dh = TD // TH
    h = m["ln1"](x)
    q, k, v = m["qkv"](h).split(TD, dim=-1)
    q = q.reshape(TB, TT, TH, dh).transpose(1, 2)
    k = k.reshape(TB, TT, TH, dh).transpose(1, 2)
    v = v.reshape(TB, TT, TH, dh).transpose(1, 2)
    att = lib.softmax(lib.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(dh)), dim=-1)
    y = lib.matmul(att, v).transpose(1, 2).reshape(TB, TT, TD)
    x = x + m["proj"](y)
    x = x + m["fc2"](lib.F.gelu(m["fc1"](m["ln2"](x))))
    loss = x.mean()
    loss.backward()
    return loss


def _adam_state(lib, **flags):
    nn = lib.nn
    model = nn.Sequential(
        nn.Linear(512, 1024, device=lib.device),
        nn.ReLU(inplace=True),
        nn.Linear(1024, 512, device=lib.device),
    )
    x = lib.randn(64, 512, device=lib.device)
    model(x).square().mean().backward()
    return {"model": model, "opt": lib.adam(model.parameters(), lr=1e-3, **flags)}


def _adam_foreach_state(lib):
    return _adam_state(lib, foreach=True)


def adam_first_step(lib, s, notes):
    s["opt"].step()


# The fragmenting sequence: ("alloc", MiB) makes the next allocation, ("free", i) frees the i-th
# (0-based, in the order made).
FRAGMENT_STEPS = (
    *(("alloc", n) for n in (1, 3, 9, 25)),
    ("free", 1),
    ("free", 3),
    *(("alloc", n) for n in (1, 3, 9, 25)),
    ("free", 0),
    ("free", 2),
    *(("alloc", n) for n in (1, 3, 9, 25)),
)


def fragment(lib, s, notes):
    """Interleaved 1, 3, 9 and 25 MiB allocations and frees (uint8 tensors of exact sizes)."""
    live: dict[int, object] = {}
    made = 0
    for action, n in FRAGMENT_STEPS:
        if action == "alloc":
            live[made] = lib.bytes_(n * MiB)
            made += 1
        else:
            del live[n]
    return live


# The out-of-memory program: a cap of 100 MiB for the program.
OOM_LIMIT = 100 * MiB


def oom(lib, s, notes):
    """Under a 100 MiB cap: a cached 40 MiB segment is released to make room for 70 MiB (a
    retry that succeeds), then 40 MiB more cannot fit (a retry that fails: out of memory)."""
    lib.set_memory_limit(OOM_LIMIT)
    try:
        a = lib.bytes_(40 * MiB)
        del a
        b = lib.bytes_(70 * MiB)
        try:
            lib.bytes_(40 * MiB)
            notes["oom"] = "none"
        except lib.OutOfMemoryError as exc:
            found = re.search(r"Tried to allocate ([0-9.]+ [KMG]?i?B)", str(exc))
            notes["oom"] = found.group(1) if found else str(exc)[:80]
        return b
    finally:
        lib.set_memory_limit(None)


PROGRAMS: tuple[Program, ...] = (
    Program("relu-out", _activation, relu_out, "relu(x), x 1x64x512x512 float32 (seed 002)"),
    Program("relu-in", _activation, relu_in, "relu_(x), x 1x64x512x512 float32 (seed 002)"),
    Program(
        "randn-relu", _no_setup, randn_relu, "randn(10000, 10000) then relu (seed 004)", big=True
    ),
    Program(
        "randn-relu_", _no_setup, randn_relu_, "randn(10000, 10000) then relu_ (seed 004)", big=True
    ),
    Program(
        "mlp-step",
        _mlp_state,
        _train_step,
        "MLP 512-1024-512 batch 64, MSE, SGD momentum: one step after a warm-up step",
    ),
    Program(
        "cnn-step",
        _cnn_state,
        _train_step,
        "Conv2d(3, 64, 11, s4, p2) + ReLU(inplace), batch 8 3x224x224, mean, SGD momentum",
        conv=CNN_CONV,
    ),
    Program(
        "transformer",
        _transformer_state,
        transformer_block,
        "pre-norm block 8x128x256, 4 heads, MLP 1024: forward + backward",
    ),
    Program("adam-first", _adam_state, adam_first_step, "Adam's first step (state is made)"),
    Program(
        "adam-foreach",
        _adam_foreach_state,
        adam_first_step,
        "the same with foreach=True, PyTorch's cuda default",
    ),
    Program("fragment", _no_setup, fragment, "interleaved 1/3/9/25 MiB allocations and frees"),
    Program(
        "oom",
        _no_setup,
        oom,
        "100 MiB cap: a retry that frees the cache, then an out-of-memory",
        cpu_skip="PyTorch's CPU allocator has no memory cap",
    ),
)

# memory_stats() counters compared (deltas over the measured run; peaks after the reset).
COUNTERS = (
    "allocation.all.allocated",
    "allocation.large_pool.allocated",
    "allocation.small_pool.allocated",
    "segment.all.allocated",
    "segment.large_pool.allocated",
    "segment.small_pool.allocated",
    "allocated_bytes.large_pool.peak",
    "allocated_bytes.small_pool.peak",
    "requested_bytes.all.peak",
    "num_alloc_retries",
    "num_ooms",
)
_PEAK_COUNTERS = {c for c in COUNTERS if c.endswith(".peak")}


# --- measurement ------------------------------------------------------------------------------


@dataclass
class Figures:
    """What one side measured for one program (bytes)."""

    peak_allocated: int
    peak_reserved: int
    segments: list  # sorted (pool, size) of every segment reserved at the end of the run
    counters: dict
    notes: dict
    own: int = 0  # torch: bookkeeping bytes subtracted (see BOOKKEEPING_BY_WARMUP)
    extra: dict = field(default_factory=dict)


def _segment_layout(segments, skip_addresses=()) -> list:
    return sorted(
        (s["segment_type"], int(s["total_size"]))
        for s in segments
        if s["address"] not in skip_addresses
    )


def _fresh_engine(device: str):
    import engine
    from engine.allocator import tracked

    gc.collect()
    tracked.reset(device)
    engine.memory.set_allocator_model("caching", device)
    engine.memory.set_memory_limit(None, device)
    engine.manual_seed(0)
    return Lib(engine, device)


def _torch_small_segment(lib: Lib):
    """TORCH_SMALL_SEGMENT_AFTER_WARMUP in the engine's caching model: the kept block (the caller
    holds it) and the segment's address."""
    free_before, kept_bytes, free_after = TORCH_SMALL_SEGMENT_AFTER_WARMUP
    a = lib.empty(free_before, dtype=lib.uint8, device=lib.device)
    kept = lib.empty(kept_bytes, dtype=lib.uint8, device=lib.device)
    b = lib.empty(free_after, dtype=lib.uint8, device=lib.device)
    del a, b
    [segment] = lib.segments()
    return kept, segment["address"]


def measure_engine(program: Program, device: str) -> Figures:
    """The engine with the caching model on ``device`` ("meta" or "cuda"), from the small
    segment torch's bookkeeping leaves after its warm-up (subtracted as torch's is)."""
    lib = _fresh_engine(device)
    own_block, own_address = _torch_small_segment(lib)
    own_allocated, own_reserved = lib.allocated(), lib.reserved()
    own_stats = lib.stats()
    lib.own_reserved = own_reserved
    notes: dict = {}
    state = program.setup(lib)
    lib.reset_peak()
    before = lib.stats()
    kept = program.run(lib, state, notes)
    lib.synchronize()
    after = lib.stats()
    figures = Figures(
        lib.max_allocated() - own_allocated,
        lib.max_reserved() - own_reserved,
        _segment_layout(lib.segments(), {own_address}),
        _counter_deltas(before, after),
        notes,
    )
    for key in ("allocated_bytes.large_pool", "allocated_bytes.small_pool", "requested_bytes.all"):
        figures.counters[f"{key}.peak"] -= own_stats.get(f"{key}.current", 0)
    if device.startswith("cuda"):
        figures.extra = {k: v for k, v in after.items() if k.startswith("cupy_pool.")}
    del kept, state, own_block
    gc.collect()
    return figures


def _counter_deltas(before: dict, after: dict) -> dict:
    out = {}
    for key in COUNTERS:
        if key in _PEAK_COUNTERS:
            out[key] = after.get(key, 0)
        else:
            out[key] = after.get(key, 0) - before.get(key, 0)
    return out


def measure_torch_cuda(program: Program) -> Figures:
    """PyTorch on cuda:0, after a warm-up run whose leftovers count as torch's bookkeeping."""
    import torch

    lib = Lib(torch, "cuda")
    torch.manual_seed(0)
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    lib.own_reserved = torch.cuda.memory_reserved()  # for the warm-up's memory cap
    # Warm-up: cuBLAS/cuDNN handles and workspaces, lazy CUDA module loading.
    kept = program.run(lib, program.setup(lib), {})
    del kept
    gc.collect()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    own_allocated = torch.cuda.memory_allocated()
    own_reserved = torch.cuda.memory_reserved()
    own_segments = {s["address"] for s in torch.cuda.memory._snapshot()["segments"]}
    own_stats = torch.cuda.memory_stats()
    lib.own_reserved = own_reserved

    notes: dict = {}
    state = program.setup(lib)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = lib.stats()
    kept = program.run(lib, state, notes)
    torch.cuda.synchronize()
    after = lib.stats()
    figures = Figures(
        torch.cuda.max_memory_allocated() - own_allocated,
        torch.cuda.max_memory_reserved() - own_reserved,
        _segment_layout(torch.cuda.memory._snapshot()["segments"], own_segments),
        _counter_deltas(before, after),
        notes,
        own=own_allocated,
    )
    # The bookkeeping blocks sit in their pools' peaks too.
    for key in ("allocated_bytes.large_pool", "allocated_bytes.small_pool", "requested_bytes.all"):
        figures.counters[f"{key}.peak"] -= own_stats.get(f"{key}.current", 0)
    del kept, state
    gc.collect()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    return figures


def trace_events(prof) -> list[dict]:
    """A finished torch.profiler run's chrome-trace events (through a temporary file, the only
    way torch hands them out)."""
    fd, path = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    try:
        prof.export_chrome_trace(path)
        with open(path) as fh:
            return json.load(fh)["traceEvents"]
    finally:
        os.unlink(path)


def memory_events(events, device_type: int) -> list[dict]:
    """The `[memory]` events of one device type (0 cpu, 1 cuda), in time order."""
    return sorted(
        (
            e
            for e in events
            if e.get("name") == "[memory]" and e["args"].get("Device Type") == device_type
        ),
        key=lambda e: e["ts"],
    )


def cpu_trace_torch(program: Program) -> int:
    """Peak of the raw bytes torch requests inside ``run`` on cpu (its profiler's events)."""

    import torch
    from torch.profiler import ProfilerActivity, profile

    lib = Lib(torch, "cpu")
    torch.manual_seed(0)
    state = program.setup(lib)
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        kept = program.run(lib, state, {})
    del kept, state
    memory = memory_events(trace_events(prof), device_type=0)
    live: dict[int, list[int]] = {}
    total = peak = 0
    for e in memory:
        n, addr = e["args"]["Bytes"], e["args"]["Addr"]
        if n > 0:
            live.setdefault(addr, []).append(n)
            total += n
            peak = max(peak, total)
        elif live.get(addr):
            total -= live[addr].pop()
    return peak


def cpu_trace_engine(program: Program) -> int:
    """Peak of the raw bytes the engine requests inside ``run`` on meta (its allocator events)."""
    from engine.allocator import MemoryObserver, get_allocator

    class RegionPeak(MemoryObserver):
        def __init__(self):
            self.live, self.total, self.peak = {}, 0, 0

        def on_alloc(self, event):
            self.live[event.storage_id] = event.requested
            self.total += event.requested
            self.peak = max(self.peak, self.total)

        def on_free(self, event):
            self.total -= self.live.pop(event.storage_id, 0)

    lib = _fresh_engine("meta")
    # the exact model: torch's CPU allocator has no cache, and its CPU kernels none of the CUDA
    # kernels' scratch that meta charges under the caching model (a reduction's staging buffer)
    lib.module.memory.set_allocator_model("exact", "meta")
    state = program.setup(lib)
    region = RegionPeak()
    with get_allocator("meta").observing(region):
        kept = program.run(lib, state, {})
    del kept, state
    return region.peak


# --- comparison -------------------------------------------------------------------------------


@dataclass
class Row:
    program: str
    figures: dict  # side -> Figures
    cpu: dict  # "torch-cpu"/"engine-meta" -> bytes
    allowance: int = 0
    allowance_name: str = ""
    problems: list = field(default_factory=list)
    unmeasured: list = field(default_factory=list)


def segment_size(nbytes: int) -> int:
    """The segment PyTorch's caching allocator reserves for one block of `nbytes` (0 for 0):
    the engine's caching model's rounding and segment rule."""
    from engine.allocator.models.base import round_size
    from engine.allocator.models.base import segment_size as model_segment

    return model_segment(round_size(nbytes)) if nbytes > 0 else 0


def compare(row: Row) -> list[str]:
    """The differences beyond the named allowances, as sentences."""
    problems = []
    sides = row.figures
    pairs = [("engine-meta", "torch-cuda"), ("engine-cuda", "torch-cuda")]
    pairs.append(("engine-cuda", "engine-meta"))  # the same model: only the backend differs
    for a, b in pairs:
        fa, fb = sides.get(a), sides.get(b)
        if fa is None or fb is None:
            continue
        allowance = row.allowance if "torch-cuda" in (a, b) else 0
        for what in ("peak_allocated", "peak_reserved"):
            va, vb = getattr(fa, what), getattr(fb, what)
            # reserved: the scratch sits in a segment of its own size class (a cuDNN workspace
            # of 19432448 bytes reserves a 20971520-byte segment)
            allowed = segment_size(allowance) if what == "peak_reserved" else allowance
            if abs(va - vb) > allowed:
                problems.append(f"{what}: {a} {va} vs {b} {vb} (diff {va - vb:+d})")
        if fa.notes != fb.notes:
            problems.append(f"outcome: {a} {fa.notes} vs {b} {fb.notes}")
        if allowance == 0:
            if fa.segments != fb.segments:
                problems.append(
                    f"segments: {a} {_layout(fa.segments)} vs {b} {_layout(fb.segments)}"
                )
            for key in COUNTERS:
                va, vb = fa.counters.get(key), fb.counters.get(key)
                if va != vb:
                    problems.append(f"{key}: {a} {va} vs {b} {vb}")
    if len(row.cpu) == 2:
        t, e = row.cpu["torch-cpu"], row.cpu["engine-meta"]
        if abs(t - e) > CPU_SCALAR_SLACK:
            problems.append(f"cpu requests: torch-cpu {t} vs engine-meta {e} (diff {e - t:+d})")
    return problems


def _layout(segments) -> str:
    """[('large', 20971520), ('small', 2097152)] -> 'L20M S2M' (sizes in MiB, or bytes)."""
    parts = []
    for pool, size in segments:
        s = f"{size // MiB}M" if size % MiB == 0 else str(size)
        parts.append(pool[0].upper() + s)
    return " ".join(parts)


def available_sides(wanted=("torch-cuda", "engine-cuda", "cpu")) -> tuple[set, dict]:
    """Which of the ``wanted`` sides can run here, and why each other one cannot."""
    sides, why = {"engine-meta"}, {}
    if {"torch-cuda", "cpu"} & set(wanted):
        try:
            import torch

            sides.add("cpu")
            if torch.cuda.is_available():
                sides.add("torch-cuda")
            else:
                why["torch-cuda"] = "torch.cuda.is_available() is False"
        except ImportError:
            why["torch-cuda"] = why["cpu"] = "torch is not installed"
    if "engine-cuda" in wanted:
        from engine.device import cuda_available

        if cuda_available():
            sides.add("engine-cuda")
        else:
            why["engine-cuda"] = "CuPy with a GPU is not available"
    return sides, why


def run(programs=None, sides=None) -> tuple[list[Row], dict]:
    """Measure ``programs`` (names; all by default) on ``sides`` (all that can run by default).

    Returns the rows (each with its problems) and {side: why it did not run}.
    """
    everything = {"engine-meta", "torch-cuda", "engine-cuda", "cpu"}
    wanted = set(sides) if sides is not None else everything
    can, why = available_sides(wanted)
    unmeasured = {
        s: why[s] if s in wanted else "not asked for (--sides)"
        for s in ("torch-cuda", "engine-cuda", "cpu", "engine-meta")
        if s not in wanted or s not in can
    }
    chosen = [p for p in PROGRAMS if programs is None or p.name in programs]
    rows = []
    for program in chosen:
        figures = {}
        allowance, allowance_name = 0, ""
        if "engine-meta" in wanted:
            figures["engine-meta"] = measure_engine(program, "meta")
        if "engine-cuda" in wanted and "engine-cuda" in can:
            figures["engine-cuda"] = measure_engine(program, "cuda")
        if "torch-cuda" in wanted and "torch-cuda" in can:
            figures["torch-cuda"] = measure_torch_cuda(program)
            if program.conv is not None:
                import torch

                engine_side = "cuda" if "engine-cuda" in can else "meta"
                allowance = conv_scratch_allowance(
                    Lib(torch, "cuda"), _fresh_engine(engine_side), program.conv
                )
                allowance_name = "conv scratch (cuDNN workspace / im2col columns)"
        cpu = {}
        if "cpu" in wanted and "cpu" in can and program.cpu_skip is None:
            cpu = {"torch-cpu": cpu_trace_torch(program), "engine-meta": cpu_trace_engine(program)}
        row = Row(program.name, figures, cpu, allowance, allowance_name)
        row.problems = compare(row)
        rows.append(row)
    return rows, unmeasured


def _cell(figures: dict, side: str, what: str) -> str:
    f = figures.get(side)
    return "-" if f is None else str(getattr(f, what))


def format_table(rows: list[Row], unmeasured: dict) -> str:
    """The report: one row per program, then the differences and what was not measured."""
    sides = ("torch-cuda", "engine-cuda", "engine-meta")
    head = (
        f"{'program':12s} {'what':9s} "
        + " ".join(f"{s:>12s}" for s in sides)
        + f" {'meta-torch':>11s} {'cuda-torch':>11s} {'torch own':>10s}"
    )
    lines = [head, "-" * len(head)]
    for row in rows:
        for what, label in (("peak_allocated", "allocated"), ("peak_reserved", "reserved")):
            cells = [_cell(row.figures, s, what) for s in sides]
            diffs = []
            for s in ("engine-meta", "engine-cuda"):
                a, b = row.figures.get(s), row.figures.get("torch-cuda")
                diffs.append(
                    "-" if a is None or b is None else f"{getattr(a, what) - getattr(b, what):+d}"
                )
            own = row.figures.get("torch-cuda")
            own_s = "-" if own is None or what != "peak_allocated" else str(own.own)
            name = row.program if what == "peak_allocated" else ""
            lines.append(
                f"{name:12s} {label:9s} "
                + " ".join(f"{c:>12s}" for c in cells)
                + f" {diffs[0]:>11s} {diffs[1]:>11s} {own_s:>10s}"
            )
        segs = [
            "-" if row.figures.get(s) is None else f"{len(row.figures[s].segments)}" for s in sides
        ]
        lines.append(f"{'':12s} {'segments':9s} " + " ".join(f"{c:>12s}" for c in segs))
        meta = row.figures.get("engine-meta")
        if meta is not None:
            lines.append(f"{'':12s} {'layout':9s} meta: {_layout(meta.segments)}")
        if row.cpu:
            t, e = row.cpu["torch-cpu"], row.cpu["engine-meta"]
            lines.append(f"{'':12s} {'cpu req':9s} torch-cpu {t}  engine-meta {e}  diff {e - t:+d}")
    lines.append("")
    for side, why in sorted(unmeasured.items()):
        label = "cuda columns" if side != "cpu" else "cpu half"
        lines.append(f"unmeasured: {side} ({label}): {why}")
    allowances = sorted({(r.allowance_name, r.allowance) for r in rows if r.allowance_name})
    for name, nbytes in allowances:
        lines.append(f"allowance: {name}: {nbytes} bytes")
    bad = [r for r in rows if r.problems]
    if bad:
        lines.append("DIFFERENCES:")
        for r in bad:
            for p in r.problems:
                lines.append(f"  {r.program}: {p}")
    else:
        lines.append("no differences beyond the named allowances")
    return "\n".join(lines)


def rows_to_json(rows: list[Row], unmeasured: dict) -> dict:
    def fig(f: Figures) -> dict:
        return {
            "peak_allocated": f.peak_allocated,
            "peak_reserved": f.peak_reserved,
            "segments": [list(s) for s in f.segments],
            "counters": f.counters,
            "notes": f.notes,
            "torch_own": f.own,
            "extra": f.extra,
        }

    return {
        "rows": [
            {
                "program": r.program,
                "sides": {s: fig(f) for s, f in r.figures.items()},
                "cpu_requests": r.cpu,
                "allowance": {"name": r.allowance_name, "bytes": r.allowance},
                "problems": r.problems,
            }
            for r in rows
        ],
        "unmeasured": unmeasured,
        "versions": _versions(),
    }


def _versions() -> dict:
    out = {"python": sys.version.split()[0]}
    for name in ("numpy", "torch", "cupy"):
        mod = sys.modules.get(name)
        if mod is not None:
            out[name] = getattr(mod, "__version__", "?")
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        out["gpu"] = torch.cuda.get_device_name(0)
    return out


def _parse_list(text: str | None, choices, what: str) -> list | None:
    if text is None:
        return None
    items = [t.strip() for t in text.split(",") if t.strip()]
    unknown = [t for t in items if t not in choices]
    if unknown or not items:
        raise ValueError(
            f"unknown {what} {', '.join(unknown) or repr(text)}; choose from {', '.join(choices)}"
        )
    return items


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="gpu-fidelity", description=__doc__.splitlines()[0])
    parser.add_argument("--programs", help="comma-separated program names (default: all)")
    parser.add_argument(
        "--sides",
        help="comma-separated: meta, cuda (torch-cuda and engine-cuda), cpu (default: all)",
    )
    parser.add_argument("--skip-big", action="store_true", help="leave out the 800 MB programs")
    parser.add_argument("--json", help="also write the rows to this file")
    parser.add_argument("--list", action="store_true", help="list the programs and exit")
    args = parser.parse_args(argv)
    if args.list:
        for p in PROGRAMS:
            print(f"{p.name:12s} {p.doc}")
        return 0
    names = [p.name for p in PROGRAMS]
    try:
        programs = _parse_list(args.programs, names, "program")
        side_args = _parse_list(args.sides, ("meta", "cuda", "cpu"), "side")
    except ValueError as exc:
        print(f"gpu-fidelity: {exc}", file=sys.stderr)
        return 2
    if args.skip_big:
        programs = [n for n in (programs or names) if not _program(n).big]
    sides = None
    if side_args is not None:
        sides = set()
        for s in side_args:
            sides |= {"meta": {"engine-meta"}, "cuda": {"torch-cuda", "engine-cuda"}}.get(s, {s})
    if args.json:
        parent = os.path.dirname(os.path.abspath(args.json))
        if not os.path.isdir(parent):
            print(
                f"gpu-fidelity: --json {args.json}: directory {parent} does not exist",
                file=sys.stderr,
            )
            return 2
    rows, unmeasured = run(programs, sides)
    print(format_table(rows, unmeasured))
    print("versions: " + ", ".join(f"{k} {v}" for k, v in _versions().items()))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows_to_json(rows, unmeasured), fh, indent=2)
    return 1 if any(r.problems for r in rows) else 0


def _program(name: str) -> Program:
    return next(p for p in PROGRAMS if p.name == name)


if __name__ == "__main__":
    sys.exit(main())
