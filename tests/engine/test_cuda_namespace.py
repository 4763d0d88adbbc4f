"""engine.cuda (torch.cuda's names) on a machine without a usable GPU against torch 2.13 CPU
here, and its memory functions delegating to engine/memory.py (on meta, the device that plans
a GPU run)."""

from __future__ import annotations

import pickle
import warnings

import pytest

import engine
from tests.conftest import assert_raises_as_torch

torch = pytest.importorskip("torch")

no_gpu = pytest.mark.skipif(engine.cuda.is_available(), reason="checks the no-GPU behaviour")


@no_gpu
@pytest.mark.parametrize(
    "name",
    [
        "is_available",
        "device_count",
        "memory_allocated",
        "max_memory_allocated",
        "memory_reserved",
        "max_memory_reserved",
        "memory_stats",
        "empty_cache",
    ],
)
def test_no_gpu_values_as_torch(name):
    assert getattr(engine.cuda, name)() == getattr(torch.cuda, name)()


@no_gpu
@pytest.mark.parametrize("name", ["memory_allocated", "memory_stats", "memory_reserved"])
def test_no_gpu_values_with_cuda_device_as_torch(name):
    for dev in (0, "cuda", "cuda:0"):
        assert getattr(engine.cuda, name)(dev) == getattr(torch.cuda, name)(dev)


@no_gpu
@pytest.mark.parametrize(
    "call",
    [
        lambda m: m.cuda.current_device(),
        lambda m: m.cuda.synchronize(),
        lambda m: m.cuda.get_device_name(),
        lambda m: m.cuda.get_device_name(0),
        lambda m: m.cuda.get_device_properties(0),
        lambda m: m.cuda.get_device_capability(),
        lambda m: m.cuda.mem_get_info(),
        lambda m: m.cuda.memory_summary(),
    ],
)
def test_no_gpu_refusals_as_torch(call):
    assert_raises_as_torch(call)


@no_gpu
def test_no_gpu_seeds_do_nothing_as_torch():
    engine.manual_seed(5)
    a = engine.rand(3).numpy()
    engine.manual_seed(5)
    assert engine.cuda.manual_seed(7) is torch.cuda.manual_seed(7) is None
    assert engine.cuda.manual_seed_all(7) is torch.cuda.manual_seed_all(7) is None
    assert (engine.rand(3).numpy() == a).all()  # the cpu generator is not touched


def test_memory_functions_delegate_on_meta():
    engine.cuda.reset_peak_memory_stats("meta")
    base = engine.memory.memory_allocated("meta")
    x = engine.empty(1000, device="meta")
    y = engine.empty(500, device="meta")
    assert engine.cuda.memory_allocated("meta") == base + 6000
    assert engine.cuda.memory_allocated("meta") == engine.memory.memory_allocated("meta")
    del y
    assert engine.cuda.memory_allocated("meta") == base + 4000
    assert engine.cuda.max_memory_allocated("meta") == base + 6000
    assert engine.cuda.memory_reserved("meta") == engine.memory.memory_reserved("meta")
    assert engine.cuda.max_memory_reserved("meta") == engine.memory.max_memory_reserved("meta")
    stats = engine.cuda.memory_stats("meta")
    assert stats["allocated_bytes.all.current"] == base + 4000
    assert engine.cuda.memory_snapshot("meta") == engine.memory.memory_snapshot("meta")
    assert "Allocated memory" in engine.cuda.memory_summary("meta")
    with pytest.warns(FutureWarning, match="reset_peak_memory_stats"):
        engine.cuda.reset_max_memory_allocated("meta")
    assert engine.cuda.max_memory_allocated("meta") == base + 4000
    assert engine.cuda.memory.memory_allocated("meta") == base + 4000
    del x


def test_memory_history_on_meta(tmp_path):
    engine.cuda.memory._record_memory_history(device="meta")
    try:
        x = engine.empty(256, device="meta")
        del x
        snap = engine.cuda.memory._snapshot("meta")
        actions = [e["action"] for trace in snap["device_traces"] for e in trace]
        assert "alloc" in actions and "free_completed" in actions
        path = tmp_path / "snap.pickle"
        engine.cuda.memory._dump_snapshot(str(path), device="meta")
        with open(path, "rb") as fh:
            assert set(pickle.load(fh)) >= {"segments", "device_traces"}
    finally:
        engine.cuda.memory._record_memory_history(None, device="meta")


@no_gpu
def test_no_gpu_snapshot_is_empty():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert engine.cuda.memory_snapshot() == []
        engine.cuda.reset_peak_memory_stats()
        assert engine.cuda.memory._snapshot()["segments"] == []


def test_cpu_device_refused():
    with pytest.raises(ValueError, match="Expected a cuda device, but got: cpu"):
        engine.cuda.memory_allocated("cpu")


def test_out_of_memory_error_is_engines():
    assert engine.cuda.OutOfMemoryError is engine.OutOfMemoryError


# --- with a GPU: engine.cuda against torch.cuda on the same machine ---------------------------
from tests.conftest import requires_cuda  # noqa: E402

on_gpu = [pytest.mark.cuda, requires_cuda]


@pytest.mark.parametrize(
    "call",
    [
        lambda m: m.cuda.is_available(),
        lambda m: m.cuda.device_count(),
        lambda m: m.cuda.current_device(),
        lambda m: m.cuda.get_device_name(),
        lambda m: m.cuda.get_device_name(0),
        lambda m: tuple(m.cuda.get_device_capability()),
        lambda m: m.cuda.get_device_properties(0).total_memory,
        lambda m: m.cuda.get_device_properties(0).multi_processor_count,
        lambda m: m.cuda.get_device_properties(0).name,
        lambda m: m.cuda.mem_get_info()[1],
        lambda m: m.cuda.synchronize(),
    ],
)
@pytest.mark.parametrize("_", [pytest.param(0, marks=on_gpu)], ids=["gpu"])
def test_device_queries_as_torch_cuda(call, _):
    assert call(engine) == call(torch)


@pytest.mark.parametrize("_", [pytest.param(0, marks=on_gpu)], ids=["gpu"])
def test_memory_figures_as_torch_cuda(_):
    """The same allocations through both: the same deltas of allocated, reserved and their
    peaks (the engine's caching model against torch's allocator), and the same stats keys."""
    engine.memory.set_allocator_model("caching", "cuda")

    def program(m):
        m.cuda.synchronize()
        m.cuda.empty_cache()
        m.cuda.reset_peak_memory_stats()
        a0, r0 = m.cuda.memory_allocated(), m.cuda.memory_reserved()
        x = m.empty(1000, device="cuda")  # 4000 bytes: one 4096 block of a 2 MiB segment
        y = m.empty(3, 1024, 1024, device="cuda")  # 12 MiB: a large segment of its own
        mid = (m.cuda.memory_allocated() - a0, m.cuda.memory_reserved() - r0)
        del y
        after = (
            m.cuda.memory_allocated() - a0,
            m.cuda.max_memory_allocated() - a0,
            m.cuda.memory_reserved() - r0,
        )
        del x
        return mid, after, set(m.cuda.memory_stats())

    e_mid, e_after, e_keys = program(engine)
    t_mid, t_after, t_keys = program(torch)
    assert e_mid[0] == t_mid[0] == 4096 + 12582912
    assert e_mid[1] == t_mid[1]  # a new 12 MiB segment, and a 2 MiB one unless one was cached
    assert e_after == t_after
    assert t_keys <= e_keys  # torch's keys, and the engine's own (CuPy's pool) beside them
    assert "Allocated memory" in engine.cuda.memory_summary()


@pytest.mark.parametrize("_", [pytest.param(0, marks=on_gpu)], ids=["gpu"])
def test_manual_seed_makes_cuda_draws_repeat(_):
    engine.cuda.manual_seed(5)
    a = engine.randn(64, device="cuda").cpu().numpy()
    engine.cuda.manual_seed_all(5)
    b = engine.randn(64, device="cuda").cpu().numpy()
    assert (a == b).all()
