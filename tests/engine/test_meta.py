"""The meta device: shapes and dtypes only, nothing allocated, every allocation accounted.

The strongest check: the same program on cpu and on meta makes the allocator see the same
allocations (count, bytes, peak), forward and backward.
"""

from __future__ import annotations

import numpy as np
import pytest

import engine
from engine import memory
from engine.backends.meta import MetaArray
from engine.errors import MetaDataError


def _mlp_step(device):
    engine.manual_seed(0)
    x = engine.randn(8, 16, device=device)
    w1 = engine.randn(16, 32, device=device, requires_grad=True)
    w2 = engine.randn(32, 4, device=device, requires_grad=True)
    h = (x @ w1).relu()
    h2 = h.sigmoid() * h
    out = (h2 @ w2).log_softmax(-1)
    loss = -out[:, 1].mean() + out.logsumexp(0).mean() + (out - 1).abs().sum(0).mean()
    loss.backward()
    return loss, w1, w2


def _elementwise_program(device):
    a = engine.rand(3, 4, 5, device=device)
    b = engine.rand(4, 1, device=device)
    c = (a + b) * a - b / 2
    c.relu_().clamp_(0.1, 0.9)
    d = engine.where(c > 0.5, c, b).exp().sum((0, 2), keepdim=True)
    e = d.transpose(0, 1).reshape(-1).softmax(0)
    f = c[1:, ::2].clone().t_() if c.ndim == 2 else c[1:, ::2].clone()
    f[0] = 3.0
    f += 1
    g = engine.max(c, 1)
    return e, f, g


@pytest.mark.parametrize("program", [_mlp_step, _elementwise_program])
def test_meta_accounts_exactly_like_cpu(program):
    # (programs of one dtype: a mixed-dtype op's promotion copies are torch's CPU kernels' own,
    # which meta, planning a GPU run, does not make; see test_promotion_copies_are_cpu_only)
    results = {}
    for device in ("cpu", "meta"):
        memory.reset_peak_memory_stats(device)
        keep = program(device)
        stats = memory.memory_stats(device)
        results[device] = (
            memory.memory_allocated(device),
            memory.max_memory_allocated(device),
            stats["allocation.all.allocated"],
            stats["allocated_bytes.all.allocated"],
        )
        del keep
        assert memory.memory_allocated(device) == 0, device
    assert results["meta"] == results["cpu"]


def test_meta_with_the_caching_model_matches_cpu():
    for device in ("cpu", "meta"):
        memory.set_allocator_model("caching", device)
    peaks = {}
    for device in ("cpu", "meta"):
        keep = _mlp_step(device)
        peaks[device] = (memory.max_memory_allocated(device), memory.max_memory_reserved(device))
        del keep
    assert peaks["meta"] == peaks["cpu"]


def test_meta_allocates_no_real_memory():
    t = engine.empty(10000, 10000, device="meta")
    assert isinstance(t._data, MetaArray)
    assert memory.memory_allocated("meta") == 400_000_000
    assert memory.memory_allocated("cpu") == 0
    v = t[::2, 1:].t()
    assert v.shape == (9999, 5000) and v.stride() == (1, 20000)
    assert v.storage_offset() == 1
    assert v.data_ptr() == t.data_ptr() + 4


def test_meta_storages_get_distinct_nonzero_addresses():
    # given two meta tensors, then each storage has its own fake address (a cpu storage's
    # data_ptr is its array's)
    a, b = engine.empty(4, device="meta"), engine.empty(4, device="meta")
    assert a.data_ptr() != 0 and b.data_ptr() != 0 and a.data_ptr() != b.data_ptr()
    c = engine.empty(4)
    assert c.untyped_storage().data_ptr() == c.numpy().__array_interface__["data"][0]


def test_meta_storages_of_one_shape_share_an_array_that_views_never_change():
    # given two meta tensors of one shape and dtype (their arrays are shared: no data, never
    # written), when one is viewed, sliced and transposed, in place too, then the other's
    # geometry is untouched and a new tensor of that shape still starts contiguous at offset 0
    a, b = engine.empty(6, 4, device="meta"), engine.empty(6, 4, device="meta")
    assert a._data is b._data
    assert a.view(4, 6)[1:].t().contiguous().shape == (6, 3)
    a.t_()
    a[2:].transpose_(0, 1)
    assert a.shape == (4, 6) and a.stride() == (1, 4)
    for t in (b, engine.empty(6, 4, device="meta")):
        assert t.shape == (6, 4) and t.stride() == (4, 1) and t.storage_offset() == 0
        assert t.is_contiguous()
    # a bfloat16 storage (held as float32) is charged its own 2 bytes per element
    before = memory.memory_allocated("meta")
    h = engine.empty(6, 4, device="meta", dtype=engine.bfloat16)
    assert memory.memory_allocated("meta") - before == 48 and h.dtype is engine.bfloat16
    with pytest.raises(RuntimeError, match="Storage size calculation overflowed"):
        engine.empty(1 << 40, 1 << 30, device="meta")


_PER_NODE = """
import tracemalloc

import engine
from engine import memory
from engine.utils.collector import paused

x = engine.randn(64, 64, device="meta", requires_grad=True)
y = (x * 2.0) + 1.0  # (warm: caches the first call fills)
n = 4000
with paused():
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    y = x
    for i in range(n):
        y = y * 1.0001 if i % 2 else y + 1.0
    per_node = (tracemalloc.get_traced_memory()[0] - before) / n
    tracemalloc.stop()
held = memory.memory_allocated("meta")
y.sum().backward()
print(per_node, held, tuple(x.grad.shape))
"""


def test_a_meta_graph_keeps_under_300_bytes_per_elementwise_node():
    # given a chain of tensor-and-number ops on meta that requires grad (the 1M-op benchmark's
    # graph), then what the graph keeps alive per node (the node, its edges, what it saved) is
    # bounded: each intermediate result dies as the next op consumes it. Measured in a fresh
    # interpreter, as a user's run starts: CPython sizes an object's attribute storage from what
    # other instances of its class set before, so earlier tests in this process move the figure
    # (364 bytes after tests/engine/test_views.py's, 272 alone)
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-c", _PER_NODE], capture_output=True, text=True, check=True
    )
    per_node, held, grad_shape = out.stdout.split(maxsplit=2)
    assert int(held) >= 2 * 64 * 64 * 4  # x and the last result
    assert 100 < float(per_node) < 300, per_node
    assert grad_shape.strip() == "(64, 64)"


@pytest.mark.parametrize(
    "read",
    [
        lambda t: t.item(),
        lambda t: t.tolist(),
        lambda t: t.numpy(),
        lambda t: float(t),
        lambda t: bool(t),
        lambda t: int(t),
        lambda t: np.asarray(t._data),
        lambda t: t.to("cpu"),
    ],
)
def test_reading_meta_values_raises_a_clear_error(read):
    t = engine.ones(1, device="meta")
    with pytest.raises((MetaDataError, RuntimeError), match="meta"):
        read(t)


def test_meta_error_is_a_runtime_error():
    assert issubclass(MetaDataError, RuntimeError)


def test_meta_repr_and_metadata():
    t = engine.zeros(2, 3, dtype=engine.float64, device="meta")
    assert repr(t) == "tensor(..., device='meta', size=(2, 3), dtype=engine.float64)"
    assert t.is_meta and t.dtype is engine.float64 and t.is_contiguous()
    assert (t + 1).dtype is engine.float64 and (t > 0).dtype is engine.bool_
    assert t.sum(1).shape == (2,) and (t @ t.t()).shape == (2, 2)


def test_meta_seed_002_and_004_are_fast():
    import time

    start = time.perf_counter()
    memory.set_allocator_model("caching", "meta")
    x = engine.randn(10000, 10000, device="meta")
    y = engine.relu(x)
    engine.relu_(x)
    assert memory.memory_allocated("meta") == 2 * 400556032
    assert time.perf_counter() - start < 0.5
    del x, y


def test_tensor_indexing_on_meta_is_refused_clearly():
    t = engine.zeros(4, device="meta")
    with pytest.raises(RuntimeError, match="meta device"):
        t[engine.tensor([0, 1], device="meta")]


def test_meta_basic_indexing_lays_out_as_numpy():
    """MetaArray indexing (ints and slices per leading dim, a trailing ..., None, negative and
    out-of-range bounds, steps) gives numpy's shape, byte strides and offset for the same index
    (the shape alone when the view has no elements), and numpy's kind of error for an int out of range, a bool or a step of zero."""
    rng = np.random.default_rng(0)
    starts = [None, -7, -2, 0, 1, 3, 9]
    stops = [None, -7, -1, 0, 2, 4, 9]
    for _ in range(3000):
        shape = tuple(int(n) for n in rng.integers(0, 6, size=rng.integers(1, 5)))
        real = np.empty(shape, np.float32)
        meta = MetaArray(shape, np.float32)
        items: list = []
        for n in shape[: rng.integers(0, len(shape) + 1)]:
            if n and rng.random() < 0.4:
                items.append(int(rng.integers(-n, n)))
            else:
                step = [None, 1, 2, 3][rng.integers(0, 4)]
                items.append(slice(starts[rng.integers(0, 7)], stops[rng.integers(0, 7)], step))
        if rng.random() < 0.2:
            items.insert(int(rng.integers(0, len(items) + 1)), None)
        if rng.random() < 0.5:
            items.append(Ellipsis)
        index = items[0] if len(items) == 1 and rng.random() < 0.5 else tuple(items)
        whole = index if isinstance(index, tuple) else (index,)
        want = real[whole + (Ellipsis,) if Ellipsis not in whole else whole]  # (a view, 0-d too)
        got = meta[index]
        assert got.shape == want.shape, index
        if want.size:  # (numpy's strides of an empty view are its own choice)
            offset = want.__array_interface__["data"][0] - real.__array_interface__["data"][0]
            assert (got.strides, got.offset) == (want.strides, offset), index
    meta = MetaArray((3, 4), np.float32)
    with pytest.raises(IndexError):
        meta[3]
    with pytest.raises(IndexError):
        meta[0, -5]
    with pytest.raises(TypeError):
        meta[True]
    with pytest.raises(ValueError):
        meta[::0]
