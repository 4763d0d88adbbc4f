"""autocast and GradScaler: PyTorch's casting lists (CUDA's for "cuda"/"meta", CPU's for "cpu"
checked against torch's CPU autocast), the cast cache (a parameter cast once per region, both
copies counted), parameter and activation bytes by hand, memory vs torch's CPU profiler, and the
loss scaler's rules vs torch."""

from __future__ import annotations

import numpy as np
import pytest

import engine
from engine.amp import GradScaler, autocast
from tests.engine.test_memory_vs_torch import SCALAR_SLACK, engine_peak, torch_peak

try:
    import torch
except ImportError:  # pragma: no cover
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="needs PyTorch as an oracle")

# ops applied to h = linear(x, w) (lower precision inside a region), by name
AFTER_LINEAR = {
    "softmax": lambda m, h: m.nn.functional.softmax(h, -1),
    "log_softmax": lambda m, h: m.nn.functional.log_softmax(h, -1),
    "layer_norm": lambda m, h: m.nn.functional.layer_norm(h, (3,)),
    "exp": lambda m, h: h.exp(),
    "log": lambda m, h: h.abs().log(),
    "pow": lambda m, h: h.pow(2),
    "sum": lambda m, h: h.sum(),
    "mean": lambda m, h: h.mean(),
    "gelu": lambda m, h: m.nn.functional.gelu(h),
    "relu": lambda m, h: m.nn.functional.relu(h),
    "tanh": lambda m, h: h.tanh(),
    "add_scalar": lambda m, h: h + 1,
    "add_float32": lambda m, h: h + m.ones(3, device=h.device),
    "mse_loss": lambda m, h: m.nn.functional.mse_loss(h, m.zeros(2, 3, device=h.device)),
    "cross_entropy": lambda m, h: m.nn.functional.cross_entropy(h, m.tensor([1, 2])),
    "matmul": lambda m, h: h @ m.ones(3, 2, device=h.device),
}
# CUDA's lists (torch 2.13): float32 for softmax, log_softmax, layer_norm, exp, log, pow, sum,
# mse_loss, nll_loss (cross_entropy); lower precision for matmul; the rest follow their inputs.
CUDA_EXPECTED = {
    "softmax": "float32",
    "log_softmax": "float32",
    "layer_norm": "float32",
    "exp": "float32",
    "log": "float32",
    "pow": "float32",
    "sum": "float32",
    "mean": "low",
    "gelu": "low",
    "relu": "low",
    "tanh": "low",
    "add_scalar": "low",
    "add_float32": "float32",
    "mse_loss": "float32",
    "cross_entropy": "float32",
    "matmul": "low",
}


def _h(m, device="cpu"):
    x = np.random.default_rng(0).standard_normal((2, 8)).astype(np.float32)
    w = np.random.default_rng(1).standard_normal((3, 8)).astype(np.float32)
    return m.tensor(x, device=device), m.tensor(w, device=device)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("name", sorted(AFTER_LINEAR))
def test_cuda_lists_on_meta(name, dtype):
    low = getattr(engine, dtype)
    x, w = _h(engine)
    x, w = x.to(device="meta"), w.to(device="meta")
    with autocast("cuda", dtype=low):
        h = engine.nn.functional.linear(x, w)
        assert h.dtype is low
        y = AFTER_LINEAR[name](engine, h.to(device="meta") if not h.is_meta else h)
    expected = CUDA_EXPECTED[name]
    assert y.dtype is (low if expected == "low" else engine.float32), (name, y.dtype)


@needs_torch
@pytest.mark.torch
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("name", sorted(AFTER_LINEAR))
def test_cpu_lists_match_torchs_cpu_autocast(name, dtype):
    ex, ew = _h(engine)
    tx, tw = _h(torch)
    with torch.autocast("cpu", dtype=getattr(torch, dtype)):
        t = AFTER_LINEAR[name](torch, torch.nn.functional.linear(tx, tw))
    with engine.autocast("cpu", dtype=getattr(engine, dtype)):
        e = AFTER_LINEAR[name](engine, engine.nn.functional.linear(ex, ew))
    assert e.dtype.name == str(t.dtype).removeprefix("torch."), name
    np.testing.assert_allclose(
        e.detach().numpy().astype(np.float64),
        t.detach().float().numpy(),
        rtol=2e-2,
        atol=2e-2,
    )


def test_region_leaves_other_devices_float64_and_disabled_regions_alone():
    x, w = _h(engine)
    with autocast("cuda", dtype=engine.bfloat16):  # cpu tensors: not the region's device
        assert engine.nn.functional.linear(x, w).dtype is engine.float32
    with autocast("cpu", dtype=engine.bfloat16, enabled=False):
        assert engine.nn.functional.linear(x, w).dtype is engine.float32
    with autocast("cpu", dtype=engine.bfloat16):
        assert engine.nn.functional.linear(x.double(), w.double()).dtype is engine.float64
        with autocast("cpu", enabled=False):  # nested off
            assert engine.nn.functional.linear(x, w).dtype is engine.float32
        assert engine.amp.is_autocast_enabled("cpu") and not engine.amp.is_autocast_enabled("cuda")
    assert not engine.amp.is_autocast_enabled()


def test_autocast_as_a_decorator_and_bad_arguments():
    @autocast("cpu", dtype=engine.bfloat16)
    def f(x, w):
        return engine.nn.functional.linear(x, w)

    assert f(*_h(engine)).dtype is engine.bfloat16
    with pytest.raises(RuntimeError, match="unsupported autocast device_type 'tpu'"):
        autocast("tpu")
    with pytest.raises(RuntimeError, match="Expected float16 or bfloat16"):
        autocast("cuda", dtype=engine.float64)


# ---------------------------------------------------------------------------------------------
# the cast cache and the bytes by hand
# ---------------------------------------------------------------------------------------------
def _casts(region):
    """Sizes of the casts ('to') allocated while region runs."""
    from engine.allocator.events import MemoryObserver
    from engine.allocator.tracked import get_allocator

    sizes = []

    class Casts(MemoryObserver):
        def on_alloc(self, event):
            if event.context.get("op") == "to":
                sizes.append(event.requested)

    with get_allocator("meta").observing(Casts()):
        out = region()
    return sizes, out


def test_parameters_are_cast_once_per_region_and_both_copies_are_counted():
    engine.memory.set_allocator_model("exact", device="meta")
    d = 1024
    l1 = engine.nn.Linear(d, d, bias=False, device="meta")
    l2 = engine.nn.Linear(d, d, bias=False, device="meta")
    x = engine.empty(64, d, device="meta")
    master = engine.memory.memory_allocated("meta")  # fp32 weights (2 x 4 MiB) and x

    def region():
        with autocast("cuda", dtype=engine.bfloat16):
            h = x
            for _ in range(3):  # each layer used three times: its weight is cast once
                h = l2(l1(h).relu())
            return h

    sizes, y = _casts(region)
    weights_half = 2 * d * d * 2
    x_half = 64 * d * 2
    assert sorted(sizes) == [x_half, d * d * 2, d * d * 2]
    # kept until backward: the half weights (the matmuls keep them), x's half copy, and per
    # use of a layer its bf16 output (relu keeps l1's output, matmul keeps its input)
    activations = 6 * 64 * d * 2
    assert engine.memory.memory_allocated("meta") - master == weights_half + x_half + activations
    y.float().sum().backward()
    assert l1.weight.grad.dtype is engine.float32  # back through the cast to the master
    del y
    # after backward and with the region closed the half copies are gone; fp32 grads remain
    assert engine.memory.memory_allocated("meta") - master == 2 * d * d * 4


def _cast_weight(y):
    """The cast weight's node: behind MmBackward0's TBackward0 (the weight's transpose)."""
    t = y.grad_fn.next_functions[1][0]
    assert t.name() == "TBackward0"
    return t.next_functions[0][0]


def test_cache_lives_until_the_outermost_region_exits():
    w = engine.nn.Parameter(engine.randn(4, 4))
    x = engine.randn(2, 4)
    with autocast("cpu", dtype=engine.bfloat16):
        with autocast("cpu", dtype=engine.bfloat16):
            a = engine.nn.functional.linear(x, w)
        b = engine.nn.functional.linear(x, w)  # the inner exit kept the cache
        assert _cast_weight(a) is _cast_weight(b)
    c = None
    with autocast("cpu", dtype=engine.bfloat16):
        c = engine.nn.functional.linear(x, w)
    assert _cast_weight(c) is not _cast_weight(b)
    with autocast("cpu", dtype=engine.bfloat16, cache_enabled=False):
        d1 = engine.nn.functional.linear(x, w)
        d2 = engine.nn.functional.linear(x, w)
        assert _cast_weight(d1) is not _cast_weight(d2)


@needs_torch
@pytest.mark.torch
def test_training_step_under_cpu_autocast_matches_torch_profiler():
    def program(m):
        m.manual_seed(0)
        l1, l2 = m.nn.Linear(256, 512), m.nn.Linear(512, 256)
        x = m.tensor(np.random.default_rng(0).standard_normal((64, 256)).astype(np.float32))
        t = m.tensor(np.random.default_rng(1).standard_normal((64, 256)).astype(np.float32))

        def region():
            with m.autocast("cpu", dtype=m.bfloat16):
                loss = m.nn.functional.mse_loss(l2(l1(x).relu()), t)
            loss.backward()

        return region

    e, t = engine_peak(program(engine)), torch_peak(program(torch))
    assert abs(e - t) <= SCALAR_SLACK, (e, t)


def test_attention_under_autocast_runs_in_the_lower_dtype():
    q = engine.randn(1, 2, 4, 8)
    with autocast("cpu", dtype=engine.bfloat16):
        y = engine.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True)
    assert y.dtype is engine.bfloat16


# ---------------------------------------------------------------------------------------------
# GradScaler
# ---------------------------------------------------------------------------------------------
def _scaled_steps(m, steps=8, unscale_first=True):
    model = m.nn.Linear(4, 3)
    with torch.no_grad() if m is torch else engine.no_grad():
        model.weight.copy_(m.tensor(np.arange(12.0).reshape(3, 4).astype(np.float32) / 10))
        model.bias.fill_(0.1)
    opt = m.optim.SGD(model.parameters(), lr=0.01)
    scaler = m.amp.GradScaler("cpu", init_scale=2.0**10, growth_interval=3)
    out = []
    for i in range(steps):
        x = m.tensor(np.full((2, 4), 1e38 if i == 4 else 1.0, dtype=np.float32))
        opt.zero_grad()
        loss = (model(x) ** 2).sum()
        scaler.scale(loss).backward()
        if unscale_first:
            scaler.unscale_(opt)
            m.nn.utils.clip_grad_norm_(model.parameters(), 100.0)
        scaler.step(opt)
        scaler.update()
        out.append((scaler.get_scale(), model.weight.detach().numpy().copy()))
    return out


@needs_torch
@pytest.mark.torch
@pytest.mark.parametrize("unscale_first", [True, False])
def test_grad_scaler_follows_torch_scale_skip_and_growth(unscale_first):
    a, b = (
        _scaled_steps(engine, unscale_first=unscale_first),
        _scaled_steps(torch, unscale_first=unscale_first),
    )
    assert (
        [s for s, _ in a] == [s for s, _ in b] == [1024, 1024, 2048, 2048, 1024, 1024, 1024, 2048]
    )
    for (_, wa), (_, wb) in zip(a, b, strict=True):
        np.testing.assert_allclose(wa, wb, rtol=1e-5, atol=1e-6)


def test_grad_scaler_state_machine_errors():
    model = engine.nn.Linear(2, 1)
    opt = engine.optim.SGD(model.parameters(), lr=0.1)
    scaler = GradScaler("cpu")
    with pytest.raises(RuntimeError, match="did not use scaler.scale"):
        scaler.step(opt)
    scaler.scale(model(engine.ones(1, 2)).sum()).backward()
    scaler.unscale_(opt)
    with pytest.raises(RuntimeError, match="already been called"):
        scaler.unscale_(opt)
    scaler.step(opt)
    with pytest.raises(RuntimeError, match="step\\(\\) has already been called"):
        scaler.step(opt)
    scaler.update()
    assert scaler.get_scale() == 2.0**16


def test_grad_scaler_keeps_two_scalars_and_unscales_in_place():
    model = engine.nn.Linear(256, 256)
    opt = engine.optim.SGD(model.parameters(), lr=0.1)
    scaler = GradScaler("cpu")
    x = engine.ones(1, 256)
    before = engine.memory.memory_allocated()
    loss = scaler.scale(model(x).sum())
    # the scale (float32) and the growth tracker (int32), made by the first scale(), and the
    # scaled loss: 4 bytes each (the output and its sum die: nothing keeps them)
    assert engine.memory.memory_allocated() - before == 4 + 4 + 4
    loss.backward()
    ptr = model.weight.grad.data_ptr()
    scaler.step(opt)
    assert model.weight.grad.data_ptr() == ptr


@pytest.mark.parametrize(
    "name, call, expected",
    [
        ("baddbmm", lambda a, b: engine.baddbmm(a, b, b.transpose(1, 2)), "low"),
        (
            "conv_transpose2d",
            lambda a, b: engine.nn.functional.conv_transpose2d(a[None], b[:, None]),
            "low",
        ),
        ("group_norm", lambda a, b: engine.nn.functional.group_norm(a.half(), 1), "float32"),
    ],
)
def test_more_primitives_follow_the_cuda_lists(name, call, expected):
    a = engine.empty(2, 3, 3, device="meta")
    b = engine.empty(2, 3, 3, device="meta")
    with autocast("cuda", dtype=engine.bfloat16):
        y = call(a, b)
    assert y.dtype is (engine.bfloat16 if expected == "low" else engine.float32), name


def test_every_primitive_named_in_the_policy_table_exists():
    # the table names classes by module path: a class that moved must be renamed there too
    import importlib

    from engine.amp.autocast_mode import _PRIMITIVES

    for path in _PRIMITIVES:
        module, _, cls = path.rpartition(".")
        assert hasattr(importlib.import_module(module), cls), path


@needs_torch
@pytest.mark.torch
def test_cross_entropy_under_cpu_autocast_matches_torch_profiler():
    def program(m):
        m.manual_seed(0)
        lin = m.nn.Linear(128, 1000)
        x = m.tensor(np.random.default_rng(0).standard_normal((64, 128)).astype(np.float32))
        y = m.tensor(np.random.default_rng(1).integers(0, 1000, 64))

        def region():
            with m.autocast("cpu", dtype=m.bfloat16):
                loss = m.nn.functional.cross_entropy(lin(x), y)
            assert loss.dtype == m.float32
            loss.backward()

        return region

    e, t = engine_peak(program(engine)), torch_peak(program(torch))
    assert abs(e - t) <= SCALAR_SLACK, (e, t)
