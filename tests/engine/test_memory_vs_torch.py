"""Peak memory of training programs: the engine's exact model against PyTorch's CPU profiler.

Both sides are measured the same way: the running sum of the bytes allocated inside the region
(a free counts only when its block was allocated inside the region too), and its peak. On the
torch side the events are the profiler's `[memory]` events in time order
(torch.profiler.profile(profile_memory=True), matched by address in the exported trace); on the
engine side they are the tracked allocator's events. PyTorch also allocates a few bytes to wrap
Python scalars (the 4/8-byte events around its optimizer and loss), hence "within 64 bytes".

The issue's figures (torch 2.13, CPU, MLP 512-1024-512, batch 64, float32, parameters already
allocated) are also checked without torch: forward 393216 bytes with ReLU(inplace=True) and
524288 without; a full step after one warm-up step 4593668 either way.
"""

from __future__ import annotations

import gc
import json
import os
import tempfile

import numpy as np
import pytest

import engine
from engine.allocator.events import MemoryObserver
from engine.allocator.tracked import get_allocator

SCALAR_SLACK = 64


class RegionPeak(MemoryObserver):
    """Running sum of bytes allocated inside the region, and its peak."""

    def __init__(self):
        self.live, self.total, self.peak = {}, 0, 0

    def on_alloc(self, event):
        self.live[event.storage_id] = event.requested
        self.total += event.requested
        self.peak = max(self.peak, self.total)

    def on_free(self, event):
        n = self.live.pop(event.storage_id, None)
        if n is not None:
            self.total -= n


def engine_peak(fn) -> int:
    region = RegionPeak()
    with get_allocator("cpu").observing(region):
        fn()
    return region.peak


def torch_peak(fn) -> int:
    live: dict[int, list[int]] = {}
    total = peak = 0
    for n, addr in _torch_memory_events(fn):
        if n > 0:
            live.setdefault(addr, []).append(n)
            total += n
        elif live.get(addr):
            total -= live[addr].pop()
        peak = max(peak, total)
    return peak


def _torch_memory_events(fn) -> list[tuple[int, int]]:
    """(bytes, address) of each cpu [memory] event of torch's profiler in fn, in time order
    (negative bytes: a free)."""
    from torch.profiler import ProfilerActivity, profile

    # (no collection inside the region: an earlier test's cyclic garbage freed there would show
    # as a free of a block the region never saw)
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            fn()
    finally:
        if was_enabled:
            gc.enable()
    fd, path = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    try:
        prof.export_chrome_trace(path)
        with open(path) as fh:
            events = json.load(fh)["traceEvents"]
    finally:
        os.unlink(path)
    memory = sorted(
        (e for e in events if e.get("name") == "[memory]" and e["args"].get("Device Type") == 0),
        key=lambda e: e["ts"],
    )
    return [(e["args"]["Bytes"], e["args"]["Addr"]) for e in memory]


def _sequence(events, min_bytes) -> list[str]:
    """'+n#i' / '-n#i' for the events of more than min_bytes, blocks numbered in the order they
    were made (a free of a block made before the region: '-n#?')."""
    ids: dict = {}
    out = []
    for n, key in events:
        if abs(n) <= min_bytes:
            continue
        if n > 0:
            ids[key] = len(ids)
            out.append(f"+{n}#{ids[key]}")
        else:
            out.append(f"-{-n}#{ids.pop(key, '?')}")
    return out


def torch_sequence(fn, min_bytes=SCALAR_SLACK) -> list[str]:
    return _sequence(_torch_memory_events(fn), min_bytes)


def engine_sequence(fn, min_bytes=SCALAR_SLACK) -> list[str]:
    events = []

    class Record(MemoryObserver):
        def on_alloc(self, event):
            events.append((event.requested, event.storage_id))

        def on_free(self, event):
            events.append((-event.requested, event.storage_id))

    was_enabled = gc.isenabled()
    gc.disable()  # (as torch_sequence)
    try:
        with get_allocator("cpu").observing(Record()):
            fn()
    finally:
        if was_enabled:
            gc.enable()
    return _sequence(events, min_bytes)


def assert_sequence_as_torch(make) -> None:
    """make(m) returns the region to run: the engine allocates and frees the blocks torch's
    profiler shows, of the same sizes, in the same order (blocks matched by address on torch's
    side, by storage on the engine's; the few-byte scalar wrappers left out)."""
    import torch

    assert engine_sequence(make(engine)) == torch_sequence(make(torch))


def assert_steps_as_torch(make) -> None:
    """make(m) builds a program on module m (engine or torch) and returns its steps, callables
    run one after the other: each step's blocks as torch's profiler shows them (see
    assert_sequence_as_torch)."""
    import torch

    programs = {m: make(m) for m in (torch, engine)}
    for t_step, e_step in zip(programs[torch], programs[engine], strict=True):
        assert engine_sequence(e_step) == torch_sequence(t_step)


def forward_backward(m, run, held=None):
    """Two steps: forward keeps run()'s result in held["y"], backward backpropagates ones
    from it."""
    held = {} if held is None else held

    def forward():
        held["y"] = run()

    def backward():
        held["y"].backward(m.ones_like(held["y"]))

    return forward, backward


def assert_peak_as_torch(make) -> None:
    """make(m) builds a program on module m (engine or torch) and returns the region to measure:
    the engine's peak is torch's profiler's, within SCALAR_SLACK."""
    import torch

    expected = torch_peak(make(torch))
    got = engine_peak(make(engine))
    assert abs(got - expected) <= SCALAR_SLACK, f"engine {got} bytes, torch {expected} bytes"


# ---------------------------------------------------------------------------------------------
# the programs, written once against a module `m` (engine or torch)
# ---------------------------------------------------------------------------------------------
def _input(m, shape, seed=0):
    return m.tensor(np.random.default_rng(seed).standard_normal(shape).astype(np.float32))


def _labels(m, n, classes, seed=1):
    return m.tensor(np.random.default_rng(seed).integers(0, classes, n))


def _mlp(m, inplace=True):
    nn = m.nn
    return nn.Sequential(nn.Linear(512, 1024), nn.ReLU(inplace=inplace), nn.Linear(1024, 512))


def mlp_forward(m, inplace):
    model, x = _mlp(m, inplace), _input(m, (64, 512))

    def region():
        model(x)

    return region


def _step(m, model, x, target, loss_fn, opt):
    def region():
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), target)
        loss.backward()
        opt.step()

    region()  # the warm-up step: gradients and optimizer state exist from here on
    return region


def mlp_sgd_step(m, inplace):
    model = _mlp(m, inplace)
    opt = m.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    return _step(
        m, model, _input(m, (64, 512)), _input(m, (64, 512), 1), m.nn.functional.mse_loss, opt
    )


def mlp_adam_step(m, inplace=True):
    model = _mlp(m, inplace)
    opt = m.optim.Adam(model.parameters(), lr=1e-3)
    return _step(
        m, model, _input(m, (64, 512)), _input(m, (64, 512), 1), m.nn.functional.mse_loss, opt
    )


def cnn_step(m, inplace=True):
    nn = m.nn
    model = nn.Sequential(
        nn.Conv2d(3, 64, 11, stride=4, padding=2),
        nn.ReLU(inplace=inplace),
        nn.MaxPool2d(3, 2),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(64, 10),
    )
    opt = m.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    return _step(
        m, model, _input(m, (8, 3, 224, 224)), _labels(m, 8, 10), m.nn.functional.cross_entropy, opt
    )


def cnn_head_step(m, inplace=True):
    nn = m.nn
    model = nn.Sequential(
        nn.MaxPool2d(3, 2), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10)
    )
    x = _input(m, (8, 64, 55, 55)).requires_grad_(True)
    opt = m.optim.SGD([*model.parameters(), x], lr=0.01, momentum=0.9)
    return _step(m, model, x, _labels(m, 8, 10), m.nn.functional.cross_entropy, opt)


def norm_gelu_adamw_step(m, inplace=True):
    nn = m.nn
    model = nn.Sequential(
        nn.Linear(256, 512),
        nn.LayerNorm(512),
        nn.GELU(),
        nn.Linear(512, 256),
        nn.Tanh(),
        nn.Linear(256, 10),
    )
    opt = m.optim.AdamW(model.parameters())
    return _step(
        m, model, _input(m, (32, 256)), _labels(m, 32, 10), m.nn.functional.cross_entropy, opt
    )


def batchnorm_pool_step(m, inplace=True):
    nn = m.nn
    model = nn.Sequential(
        nn.BatchNorm2d(16),
        nn.ReLU(inplace=inplace),
        nn.AvgPool2d(2),
        nn.Flatten(),
        nn.Linear(16 * 8 * 8, 10),
    )
    opt = m.optim.SGD(model.parameters(), lr=0.01)
    return _step(
        m, model, _input(m, (8, 16, 16, 16)), _labels(m, 8, 10), m.nn.functional.cross_entropy, opt
    )


def embedding_step(m, inplace=True):
    nn = m.nn
    model = nn.Sequential(nn.Embedding(1000, 64), nn.Flatten(), nn.Linear(64 * 16, 10))
    opt = m.optim.SGD(model.parameters(), lr=0.01)
    tokens = _labels(m, 32 * 16, 1000).reshape(32, 16)
    return _step(m, model, tokens, _labels(m, 32, 10), m.nn.functional.cross_entropy, opt)


def pointwise_math_step(m, inplace=True):
    # engine/ops/pointwise.py's ops in a chain: asin keeps its input, tan_ runs in place on
    # asin's result (free: tan keeps its result), log1p keeps its input, expm1 its result
    x = _input(m, (64, 256)).requires_grad_(True)

    def region():
        x.grad = None
        h = (x.tanh() * 0.9).asin()
        h = h.tan_() if inplace else h.tan()
        h = h.abs().log1p().expm1() * x.atan() + x.sinh().erfc()
        h.floor().add(h).mean().backward()

    region()
    return region


def unfold_patches_step(m, inplace=True):
    # ViT-style patches by Tensor.unfold (windows overlapping along the width), the input
    # requiring grad: unfold's backward makes an input-sized zeros and adds every window into it
    x = _input(m, (8, 3, 32, 32)).requires_grad_(True)
    model = m.nn.Linear(48, 16)

    def region():
        x.grad = None
        patches = x.unfold(2, 4, 4).unfold(3, 4, 2)  # [8, 3, 8, 15, 4, 4]
        tokens = patches.permute(0, 2, 3, 1, 4, 5).reshape(8, 120, 48)  # a copy
        model(tokens).square().mean().backward()

    region()
    return region


# ---------------------------------------------------------------------------------------------
# the issue's figures, by hand (no torch needed)
# ---------------------------------------------------------------------------------------------
F32 = 4
H = 64 * 1024 * F32  # hidden activation
Y = 64 * 512 * F32  # output activation / MSE-sized buffers
GRAD_PARAMS = (1024 * 512 + 1024 + 512 * 1024 + 512) * F32


@pytest.mark.parametrize("inplace,expected", [(True, 393216), (False, 524288)])
def test_mlp_forward_peak_is_the_issues_figure(inplace, expected):
    # inplace: hidden + output; otherwise the ReLU result lives beside the pre-activation
    assert expected == (H + Y if inplace else 2 * H)
    assert engine_peak(mlp_forward(engine, inplace)) == expected


@pytest.mark.parametrize("inplace", [True, False])
def test_mlp_step_peak_is_the_issues_figure(inplace):
    # The peak sits in the first Linear's backward: the loss scalar's full-size buffer (Y), every
    # parameter gradient, the ReLU gradient (H) and the 4-byte root gradient (the loss's seed,
    # held until backward returns as torch.autograd.backward holds it): exact, no slack.
    expected = 4593668
    assert expected == Y + GRAD_PARAMS + H + 4
    assert engine_peak(mlp_sgd_step(engine, inplace)) == expected


def test_cnn_forward_workspace_is_scratch():
    # conv output only; the kernel's workspace is device-specific (torch's CPU oneDNN path has a
    # weight reorder and a second output-sized buffer, cuDNN its own workspace): reported apart,
    # as scratch. The direct kernel (AVX512F) takes the weights in blocks of 8 output channels
    # and a zero-padded, stride-split stage per part; the columns path one sample's im2col
    # columns and its stage per part. Large per-sample products run in parts on the pool.
    from engine.ops.nn import conv

    nn = engine.nn
    model = nn.Sequential(nn.Conv2d(3, 64, 11, stride=4, padding=2), nn.ReLU(inplace=True))
    x = _input(engine, (8, 3, 224, 224))
    out = 8 * 64 * 55 * 55 * F32
    if conv._direct_runs(engine.float32):
        parts = engine.get_num_threads()
        weights = 64 * 3 * 11 * 11
        stage = 3 * 227 * 4 * (57 + 16)  # rows and columns read, split by the stride of 4
        scratch = (weights + parts * stage) * F32
    else:
        columns = 3 * 11 * 11 * 55 * 55 * F32
        stage = 3 * 228 * 4 * 57 * F32
        parts = len(engine.kernels.split_ranges(8, 64 * 3 * 11 * 11 * 55 * 55))
        scratch = parts * (columns + stage)
    engine.memory.reset_peak_memory_stats()
    assert engine_peak(lambda: model(x)) == out
    assert engine.memory.max_memory_scratch() == scratch
    assert engine.memory.memory_scratch() == 0


# ---------------------------------------------------------------------------------------------
# against PyTorch's profiler
# ---------------------------------------------------------------------------------------------
PROGRAMS = {
    "mlp_forward_relu_inplace": (mlp_forward, True),
    "mlp_forward_relu": (mlp_forward, False),
    "mlp_sgd_step_relu_inplace": (mlp_sgd_step, True),
    "mlp_sgd_step_relu": (mlp_sgd_step, False),
    "mlp_adam_step": (mlp_adam_step, True),
    "cnn_sgd_step": (cnn_step, True),
    "cnn_head_sgd_step": (cnn_head_step, True),
    "layernorm_gelu_adamw_step": (norm_gelu_adamw_step, True),
    "batchnorm_avgpool_step": (batchnorm_pool_step, True),
    "embedding_step": (embedding_step, True),
    "unfold_patches_step": (unfold_patches_step, True),
    "pointwise_math_step_inplace": (pointwise_math_step, True),
    "pointwise_math_step": (pointwise_math_step, False),
}


@pytest.mark.torch
@pytest.mark.parametrize("name", list(PROGRAMS))
def test_peak_matches_pytorch_profiler(name, torch):
    make, inplace = PROGRAMS[name]
    torch.manual_seed(0)
    assert_peak_as_torch(lambda m: make(m, inplace))


@pytest.mark.torch
def test_torch_reproduces_the_issues_mlp_figures(torch):
    # The figures above were measured with this method; a torch upgrade that moves them shows here.
    assert torch_peak(mlp_forward(torch, True)) == 393216
    assert torch_peak(mlp_forward(torch, False)) == 524288
    assert torch_peak(mlp_sgd_step(torch, True)) == 4593668


@pytest.mark.parametrize(
    "program",
    ["a * b", "b * a", "a / (b * b + 1)", "(a * b).norm(dim=0)"],
)
def test_binary_backward_blocks_in_torchs_order(program):
    """MulBackward0 makes other's gradient before self's, DivBackward0's temporaries go last
    made first, the 2-norm's backward frees its mask before its quotient: the blocks torch's
    profiler shows, in its order (a broadcast operand tells the two gradients apart)."""
    arrays = [
        np.random.default_rng(i).standard_normal(s).astype(np.float32)
        for i, s in enumerate([(64, 1), (64, 128)])
    ]

    def make(m):
        a, b = (m.tensor(x, requires_grad=True) for x in arrays)
        return forward_backward(m, lambda: eval(program, {}, {"a": a, "b": b}))  # noqa: S307

    # (forward profiled too: torch's profiler reports frees only of blocks it saw made)
    assert_steps_as_torch(make)


@pytest.mark.parametrize("needs", ["input", "weight", "both"])
def test_layer_norm_backward_blocks_in_torchs_order(needs):
    """native_layer_norm_backward makes the gradients asked for and its per-thread partial sums
    of dgamma and dbeta (when one is asked), nothing the size of the input beyond grad_input:
    an input that needs no gradient leaves no input-sized block in backward."""
    x_arr = np.random.default_rng(0).standard_normal((64, 128)).astype(np.float32)

    def make(m):
        x = m.tensor(x_arr, requires_grad=needs != "weight")
        ln = m.nn.LayerNorm(128)
        ln.requires_grad_(needs != "input")
        return forward_backward(m, lambda: ln(x))

    assert_steps_as_torch(make)
