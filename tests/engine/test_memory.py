"""engine.memory (torch.cuda's names) and what autograd keeps alive, read from the allocator."""

from __future__ import annotations

import gc

import numpy as np
import pytest

import engine
from engine import memory
from engine.allocator import MemoryObserver, get_allocator
from engine.errors import OutOfMemoryError

N = 1000  # float32 elements: 4000 bytes per tensor
NB = 4 * N


# ---------------------------------------------------------------------------------------------
# the API
def test_memory_allocated_follows_tensor_lifetimes():
    assert memory.memory_allocated() == 0
    a = engine.empty(N)
    assert memory.memory_allocated() == NB
    b = a + 1
    assert memory.memory_allocated() == 2 * NB
    del b
    assert memory.memory_allocated() == NB
    assert memory.max_memory_allocated() == 2 * NB
    memory.reset_peak_memory_stats()
    assert memory.max_memory_allocated() == NB
    assert memory.memory_reserved() == NB and memory.max_memory_reserved() == NB
    del a
    assert memory.memory_allocated() == 0


def test_views_detach_and_inplace_allocate_nothing():
    a = engine.empty(10, 100)
    v = a[2:].t().unsqueeze(0).detach()
    a.add_(1).relu_()
    a[0] = 3.0
    assert memory.memory_allocated() == NB
    del a
    assert memory.memory_allocated() == NB, "the view keeps the storage alive"
    del v
    assert memory.memory_allocated() == 0


def test_from_numpy_charges_the_adopted_array_once():
    arr = np.zeros(N, dtype=np.float32)
    t = engine.from_numpy(arr)
    assert memory.memory_allocated() == NB
    t2 = t.view(10, 100)
    assert memory.memory_allocated() == NB
    del t, t2
    assert memory.memory_allocated() == 0


def test_memory_stats_has_torchs_keys():
    a = engine.empty(N)
    stats = memory.memory_stats()
    for key in (
        "allocated_bytes.all.current",
        "allocated_bytes.all.peak",
        "reserved_bytes.all.current",
        "active_bytes.all.current",
        "requested_bytes.all.current",
        "allocation.all.current",
        "segment.all.current",
        "num_alloc_retries",
        "num_ooms",
        "allocated_bytes.small_pool.current",
        "allocated_bytes.large_pool.current",
    ):
        assert key in stats, key
    assert stats["allocated_bytes.all.current"] == NB and stats["allocation.all.current"] == 1
    del a


def test_caching_model_rounds_and_caches():
    memory.set_allocator_model("caching")
    assert memory.get_allocator_model() == "caching"
    a = engine.empty(1)  # 4 bytes -> one 512-byte block in a 2 MiB segment
    assert memory.memory_allocated() == 512
    assert memory.memory_reserved() == 2 * 1024**2
    del a
    assert memory.memory_allocated() == 0 and memory.memory_reserved() == 2 * 1024**2
    memory.empty_cache()
    assert memory.memory_reserved() == 0


def test_switching_model_with_live_tensors_raises():
    a = engine.empty(3)
    with pytest.raises(RuntimeError, match="while 12 bytes are allocated"):
        memory.set_allocator_model("caching")
    del a
    memory.set_allocator_model("caching")


def test_devices_have_separate_allocators():
    a = engine.empty(N)
    m = engine.empty(2 * N, device="meta")
    assert memory.memory_allocated() == NB and memory.memory_allocated("cpu") == NB
    assert memory.memory_allocated("meta") == 2 * NB
    assert memory.memory_allocated(engine.device("meta")) == 2 * NB
    del a, m


# ---------------------------------------------------------------------------------------------
# out of memory
def test_oom_is_worded_like_torch_and_changes_nothing():
    memory.set_memory_limit(10 * NB)
    keep = engine.empty(8 * N)
    x = engine.empty(2 * N)
    before = memory.memory_stats()
    with pytest.raises(
        OutOfMemoryError, match=r"out of memory\. Tried to allocate 7\.81 KiB"
    ) as info:
        engine.relu(x)  # the input fits; the result does not
    assert "total capacity of 39.06 KiB" in str(info.value)
    assert "of which 0 bytes is free" in str(info.value)
    after = memory.memory_stats()
    assert after["num_ooms"] == before["num_ooms"] + 1
    for key in (
        "allocated_bytes.all.current",
        "reserved_bytes.all.current",
        "allocation.all.current",
    ):
        assert after[key] == before[key], key
    assert isinstance(info.value, RuntimeError)
    del keep, x
    memory.set_memory_limit(None)
    engine.empty(20 * N)


def test_oom_inside_an_op_leaves_the_operands_and_counts_intact():
    x = engine.rand(N)
    memory.set_memory_limit(NB + 100)
    v = x._version
    with pytest.raises(OutOfMemoryError):
        x.exp()
    with pytest.raises(OutOfMemoryError):
        x.unsqueeze(1) @ x.unsqueeze(0)
    assert memory.memory_allocated() == NB and x._version == v
    assert x.relu_() is x  # in place still works: it needs no memory


def test_memory_limit_validation():
    with pytest.raises(ValueError, match="-5"):
        memory.set_memory_limit(-5)


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_failed_ops_leave_counts_unchanged(device):
    a, b = engine.empty(3, 4, device=device), engine.empty(5, 6, device=device)
    mask = engine.empty(3, 4, dtype=engine.bool_, device=device)
    allocated = memory.memory_allocated(device)
    count = memory.memory_stats(device)["allocation.all.allocated"]
    for bad in (
        lambda: a + b,
        lambda: a @ b,
        lambda: a.view(5),
        lambda: a.add_(b),
        lambda: engine.where(mask, a, b),
        lambda: a.sum(3),
        lambda: a.softmax(4),
        lambda: a.expand(2, 4),
        lambda: a.masked_fill(b > 0, 1.0),
        lambda: a.max(2),
        lambda: engine.add(a, b, out=a),
        lambda: a.clamp(b),
    ):
        with pytest.raises((RuntimeError, IndexError)):
            bad()
    gc.collect()
    assert memory.memory_allocated(device) == allocated
    # nothing was allocated by the failed ops (b > 0 makes one mask before masked_fill fails)
    assert memory.memory_stats(device)["allocation.all.allocated"] == count + 1


# ---------------------------------------------------------------------------------------------
# autograd's memory: saved tensors, intermediate grads, graph lifetime
def test_saved_tensors_are_freed_by_backward_unless_retain_graph():
    a = engine.rand(N, requires_grad=True)
    c = (a * 2).exp()  # exp saves its result; mul by a number saves nothing
    d = c.sum()
    del c
    assert memory.memory_allocated() == 2 * NB + 4  # a, the saved exp result, d
    d.backward(retain_graph=True)
    assert memory.memory_allocated() == 3 * NB + 4  # + a.grad; the saved result stays
    d.backward()
    assert memory.memory_allocated() == 2 * NB + 4  # the saved result was released
    with pytest.raises(RuntimeError, match="second time"):
        d.backward()


def test_graph_is_freed_when_the_output_dies():
    a = engine.rand(N, requires_grad=True)
    b = a.sin().exp().tanh()  # sin saves a (a leaf), exp and tanh save their results
    assert memory.memory_allocated() == 3 * NB  # a, exp's result, b; sin's result is gone
    del b
    assert memory.memory_allocated() == NB


def test_intermediate_gradients_are_freed_as_consumed():
    a = engine.rand(N, requires_grad=True)
    y = a
    for _ in range(20):
        y = y * 1.5
    s = y.sum()
    del y  # only the last product is alive (mul by a number saves nothing)
    memory.reset_peak_memory_stats()
    base = memory.memory_allocated()
    s.backward()
    # never more than two gradient buffers alive at once, whatever the depth
    assert memory.max_memory_allocated() - base <= 2 * NB + 512
    assert memory.memory_allocated() - base == NB  # a.grad


def test_grad_accumulates_in_place_and_steals_a_lone_buffer():
    a = engine.rand(N, requires_grad=True)
    (a * 2).sum().backward()
    g = a.grad
    ptr = g.data_ptr()
    memory.reset_peak_memory_stats()
    base = memory.memory_allocated()
    (a * 3).sum().backward()
    assert a.grad is g and g.data_ptr() == ptr
    assert memory.memory_allocated() == base


# ---------------------------------------------------------------------------------------------
# in-place ops under autograd: free or paid for with a clone (test the bytes)
FREE = {
    "relu_": lambda b: b.relu_(),
    "sigmoid_": lambda b: b.sigmoid_(),
    "tanh_": lambda b: b.tanh_(),
    "exp_": lambda b: b.exp_(),
    "sqrt_": lambda b: b.sqrt_(),
    "add_": lambda b: b.add_(1.0),
    "add_tensor": lambda b: b.add_(OTHER),
    "sub_": lambda b: b.sub_(OTHER, alpha=2),
    "scale_": lambda b: b.scale_(2.0, 1.0),
    "mul_scalar": lambda b: b.mul_(3.0),
    "mul_const_tensor": lambda b: b.mul_(CONST),
    "div_const_tensor": lambda b: b.div_(CONST),
    "neg_": lambda b: b.neg_(),
    "iadd": lambda b: b.__iadd__(OTHER),
    "masked_fill_": lambda b: b.masked_fill_(MASK, 0.0),
}
CLONING = {
    "sin_": lambda b: b.sin_(),
    "cos_": lambda b: b.cos_(),
    "log_": lambda b: b.log_(),
    "abs_": lambda b: b.abs_(),
    "pow_": lambda b: b.pow_(2),
    "clamp_": lambda b: b.clamp_(0.1, 0.9),
    "mul_grad_tensor": lambda b: b.mul_(OTHER),
    "div_grad_tensor": lambda b: b.div_(OTHER),
    "imul_grad_tensor": lambda b: b.__imul__(OTHER),
}
OTHER = CONST = MASK = None


class Tags(MemoryObserver):
    def __init__(self):
        self.tags = []

    def on_tag(self, storage_id, key, value):
        self.tags.append((key, value))


@pytest.fixture
def operands():
    global OTHER, CONST, MASK
    OTHER = engine.rand(N, requires_grad=True)
    CONST = engine.rand(N) + 0.5
    MASK = CONST > 1.0
    yield
    OTHER = CONST = MASK = None


def _run_inplace(call):
    a = engine.rand(N, requires_grad=True)
    b = a * 1.0 + 0.5  # a non-leaf in the graph
    tags = Tags()
    alloc = get_allocator("cpu")
    memory.reset_peak_memory_stats()
    before = memory.memory_allocated()
    with alloc.observing(tags):
        assert call(b) is b
    grown = memory.memory_allocated() - before
    peak = memory.max_memory_allocated() - before
    b.sum().backward()
    assert a.grad is not None
    return grown, peak, tags.tags


@pytest.mark.parametrize("name", list(FREE))
def test_free_inplace_ops_clone_nothing(name, operands):
    grown, peak, tags = _run_inplace(FREE[name])
    assert grown == 0 and peak == 0
    assert not [t for t in tags if t[0] == "inplace_clone"]


@pytest.mark.parametrize("name", list(CLONING))
def test_inplace_ops_that_need_their_input_clone_it_once(name, operands):
    grown, peak, tags = _run_inplace(CLONING[name])
    assert grown == NB and peak == NB
    assert [t for t in tags if t[0] == "inplace_clone"] == [
        ("inplace_clone", CLONING_OPNAME.get(name, name))
    ]


CLONING_OPNAME = {"mul_grad_tensor": "mul_", "div_grad_tensor": "div_", "imul_grad_tensor": "mul_"}


def test_failed_inplace_op_that_would_clone_allocates_nothing():
    a = engine.rand(N, requires_grad=True)
    b = a * 1.0
    other = engine.rand(2, N, requires_grad=True)
    count = memory.memory_stats()["allocation.all.allocated"]
    with pytest.raises(RuntimeError, match=r"\[1000\].*\[2, 1000\]"):
        b.mul_(other)  # mul_ by a tensor that requires grad would clone b first
    assert memory.memory_stats()["allocation.all.allocated"] == count
    assert b._version == 0


def test_sin_then_relu_costs_what_torch_costs():
    # a = x*2; s = a.sin(); a.relu_(): sin saved a, relu_ saves its own result: no clone
    x = engine.rand(N, requires_grad=True)
    a = x * 2
    before = memory.memory_allocated()
    s = a.sin()
    a.relu_()
    assert memory.memory_allocated() - before == NB  # only s
    del s, a


def test_saved_and_gradient_tags():
    tags = Tags()
    with get_allocator("cpu").observing(tags):
        a = engine.rand(N, requires_grad=True)
        (a.exp() * 2).sum().backward()
    keys = {t[0] for t in tags.tags}
    assert "saved_for_backward" in keys and ("category", "gradient") in tags.tags


def test_meta_tensors_account_without_memory():
    import time

    memory.set_allocator_model("caching", "meta")
    start = time.perf_counter()
    t = engine.randn(10000, 10000, device="meta")
    out = engine.relu(t)
    engine.relu_(t)
    y = (t @ out).softmax(-1).sum()
    elapsed = time.perf_counter() - start
    assert elapsed < 0.5
    assert memory.memory_allocated("meta") == 2 * 400556032 + 512  # t, out, y
    # peak: t, out, t @ out, the softmax; its two (10000, 1) rows of max and sum are kernel
    # scratch, reported apart (issue 9: PyTorch's kernel keeps them in registers)
    assert memory.max_memory_allocated("meta") == 4 * 400556032
    assert memory.max_memory_scratch("meta") == 2 * 10000 * 4
    assert memory.memory_allocated("cpu") == 0
    del y, out, t
