"""CUDA: the real CuPy API where it works without a GPU; GPU tests skip cleanly without one."""

from __future__ import annotations

import numpy as np
import pytest

import engine
from engine import memory
from engine.allocator import MemoryObserver, get_allocator
from engine.allocator.cuda_hook import in_storage_allocation, make_hook, storage_allocation
from tests.conftest import requires_cuda


class External(MemoryObserver):
    def __init__(self):
        self.events = []

    def on_external(self, event):
        self.events.append(event)


def test_cuda_available_never_raises():
    assert engine.device.cuda_available() in (True, False)


def test_storage_allocation_scope_nests():
    assert not in_storage_allocation()
    with storage_allocation():
        with storage_allocation():
            assert in_storage_allocation()
        assert in_storage_allocation()
    assert not in_storage_allocation()


def test_memory_hook_subclasses_cupys_and_reports_temporaries():
    cupy = pytest.importorskip("cupy")
    alloc = get_allocator("cuda:0")
    obs = External()
    alloc.add_observer(obs)
    try:
        hook = make_hook(alloc)
        assert isinstance(hook, cupy.cuda.MemoryHook) and hook.name == "memprof-engine-cuda:0"
        # CuPy calls these on every pool request; a storage allocation is not a temporary
        with storage_allocation():
            hook.malloc_postprocess(device_id=0, size=100, mem_size=512, mem_ptr=1, pmem_id=1)
        hook.malloc_postprocess(device_id=0, size=1000, mem_size=1024, mem_ptr=2, pmem_id=2)
        assert hook.external_bytes == 1024
        hook.free_postprocess(device_id=0, mem_size=1024, mem_ptr=2, pmem_id=2)
        hook.free_postprocess(device_id=0, mem_size=512, mem_ptr=1, pmem_id=1)  # not ours
        assert hook.external_bytes == 0
        assert [(e.action, e.bytes) for e in obs.events] == [("alloc", 1024), ("free", 1024)]
        assert all(e.context.get("external") for e in obs.events)
    finally:
        alloc.remove_observer(obs)


@pytest.mark.skipif(engine.device.cuda_available(), reason="a GPU is present")
def test_without_a_gpu_cuda_tensors_fail_clearly_and_charge_nothing():
    with pytest.raises(RuntimeError, match="cuda"):
        engine.zeros(4, device="cuda")
    assert memory.memory_allocated("cuda") == 0


# ---------------------------------------------------------------------------------------------


@pytest.mark.cuda
@requires_cuda
def test_cuda_values_match_cpu():
    x = engine.randn(3, 4)
    y = engine.randn(4)
    gx, gy = x.cuda(), y.cuda()
    assert gx.device == "cuda:0" and gx.is_cuda
    for f in (
        lambda a, b: a + b,
        lambda a, b: (a * b).relu(),
        lambda a, b: a.exp() / b.abs(),
        lambda a, b: (a @ b).softmax(0),
        lambda a, b: a.sum(1) - b[:3],
    ):
        np.testing.assert_allclose(f(gx, gy).cpu().numpy(), f(x, y).numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.cuda
@requires_cuda
def test_cuda_seed_004_caching_model():
    memory.set_allocator_model("caching", "cuda")
    start = memory.memory_allocated("cuda")
    t = engine.randn(10000, 10000, device="cuda")
    assert memory.memory_allocated("cuda") - start == 400556032
    before = memory.memory_allocated("cuda")
    out = engine.relu(t)
    assert memory.memory_allocated("cuda") - before == 400556032
    del out
    before = memory.memory_allocated("cuda")
    assert engine.relu_(t) is t
    assert memory.memory_allocated("cuda") == before
    stats = memory.memory_stats("cuda")
    assert stats["cupy_pool.used_bytes"] >= 400_000_000


@pytest.mark.cuda
@requires_cuda
def test_cuda_inplace_and_autograd():
    a = engine.rand(5, device="cuda", requires_grad=True)
    b = a * 2
    b.relu_()
    b.sum().backward()
    assert a.grad.device == "cuda:0"
    np.testing.assert_allclose(a.grad.cpu().numpy(), 2 * np.ones(5))
    x = engine.ones(3, device="cuda")
    v = x._version
    assert x.add_(1) is x and x._version == v + 1
    assert x.cpu().tolist() == [2, 2, 2]


@pytest.mark.cuda
@requires_cuda
def test_cuda_seed_002_relu_peak():
    x = engine.rand(1, 64, 512, 512, device="cuda")
    memory.reset_peak_memory_stats("cuda")
    y = engine.relu(x)
    assert memory.max_memory_allocated("cuda") == 134217728
    del y
    memory.reset_peak_memory_stats("cuda")
    engine.relu_(x)
    assert memory.max_memory_allocated("cuda") == 67108864


def test_ensure_hook_installs_one_cupy_hook_per_thread_and_allocator():
    pytest.importorskip("cupy")
    from cupy.cuda import memory_hook

    from engine.allocator import cuda_hook
    from engine.allocator.tracked import TrackedAllocator

    alloc = TrackedAllocator("cuda:0")
    before = len(memory_hook.get_memory_hooks())
    try:
        cuda_hook.ensure_hook(alloc)
        cuda_hook.ensure_hook(alloc)
        hooks = memory_hook.get_memory_hooks()
        assert len(hooks) == before + 1
        assert "memprof-engine-cuda:0" in hooks
    finally:
        hook = cuda_hook._local.hooks.pop(id(alloc))
        hook.__exit__(None, None, None)
    assert len(memory_hook.get_memory_hooks()) == before


@pytest.mark.cuda
@requires_cuda
def test_cuda_adam_defaults_to_foreach_as_pytorch():
    """foreach=None on cuda is PyTorch's foreach update: the square roots of every exp_avg_sq
    at once (the single-tensor update holds one parameter's at a time)."""
    peaks = {}
    for flags in ({}, {"foreach": True}, {"foreach": False}):
        params = [engine.randn(512, 512, device="cuda", requires_grad=True) for _ in range(4)]
        opt = engine.optim.Adam(params)
        opt.param_groups[0].update(flags)
        for p in params:
            p.grad = engine.ones(512, 512, device="cuda")
        opt.step()  # state made
        base = memory.memory_allocated("cuda")
        memory.reset_peak_memory_stats("cuda")
        opt.step()
        peaks[str(flags)] = memory.max_memory_allocated("cuda") - base
        del opt, params
    assert peaks["{}"] == peaks["{'foreach': True}"] == 4 * 512 * 512 * 4
    assert peaks["{'foreach': False}"] == 3 * 512 * 512 * 4  # previous denom, sqrt, quotient
