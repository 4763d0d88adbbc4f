"""engine/host_cache.py: freed large cpu arrays are reused, never while anything can reach them,
and the figures the allocator reports do not change."""

import numpy as np
import pytest

import engine
from engine import host_cache
from engine.kernels import Scratch

N = 1 << 15  # float32 elements: 128 KiB, above host_cache.MIN_BYTES


@pytest.fixture(autouse=True)
def fresh_cache():
    host_cache.clear()
    limit = host_cache.get_limit()
    yield
    host_cache.set_limit(limit)
    host_cache.clear()


def _addr(t):
    return t._data.__array_interface__["data"][0]


def test_a_freed_array_serves_the_next_request_of_its_size():
    x = engine.rand(N)
    addr = _addr(x)
    del x
    assert host_cache.cached_bytes() == N * 4
    y = engine.empty(N // 2, 2)  # same bytes, another shape
    assert _addr(y) == addr
    assert host_cache.cached_bytes() == 0
    assert y.shape == (N // 2, 2) and y._data.flags.c_contiguous and y._data.flags.writeable


def test_other_dtype_same_bytes_is_reused_with_its_own_values():
    x = engine.rand(N)
    del x
    y = engine.zeros(N // 2, dtype=engine.float64)
    assert y._data.dtype == np.float64
    assert float(y.sum()) == 0.0


def test_small_arrays_are_left_to_malloc():
    x = engine.rand(16)
    del x
    assert host_cache.cached_bytes() == 0


def test_a_numpy_result_still_held_is_never_reused():
    x = engine.ones(N)
    a = x.numpy()
    del x
    assert host_cache.cached_bytes() == 0
    y = engine.zeros(N)
    assert float(a.sum()) == N  # the user's array kept its values
    assert _addr(y) != a.__array_interface__["data"][0]


def test_a_view_of_the_memory_held_elsewhere_blocks_reuse():
    x = engine.ones(2, N)
    row = x._data[1]  # a numpy view kept by someone: it holds the owner alive
    del x
    assert host_cache.cached_bytes() == 0
    del row


def test_from_numpy_memory_the_caller_keeps_is_not_taken():
    arr = np.ones(N, np.float32)
    t = engine.from_numpy(arr)
    del t
    assert host_cache.cached_bytes() == 0
    assert float(arr.sum()) == N


def test_a_tensor_view_keeps_the_storage_and_so_the_memory():
    x = engine.ones(N)
    v = x[: N // 2]
    del x
    assert host_cache.cached_bytes() == 0
    assert float(v.sum()) == N // 2


def test_bfloat16_charged_two_bytes_reuses_by_its_real_float32_size():
    x = engine.ones(N, dtype=engine.bfloat16)  # held as float32: 4 bytes per element
    del x
    assert host_cache.cached_bytes() == N * 4
    y = engine.zeros(N, dtype=engine.bfloat16)
    assert host_cache.cached_bytes() == 0 and float(y.sum()) == 0.0


def test_scratch_buffers_go_through_the_cache():
    s = Scratch((N,), engine.float32, engine.device("cpu"))
    addr = s.data.__array_interface__["data"][0]
    s.release()
    assert host_cache.cached_bytes() == N * 4
    t = Scratch((N,), engine.float32, engine.device("cpu"))
    assert t.data.__array_interface__["data"][0] == addr


def test_limit_evicts_oldest_and_zero_turns_it_off():
    host_cache.set_limit(3 * N * 4)
    xs = [engine.rand(N - i) for i in range(4)]  # four sizes, freed in this order
    while xs:
        del xs[0]
    assert host_cache.cached_bytes() == 4 * (3 * N - 6)  # the last three
    assert sorted(host_cache._free) == [4 * (N - 3), 4 * (N - 2), 4 * (N - 1)]
    host_cache.set_limit(0)
    assert host_cache.cached_bytes() == 0
    x = engine.rand(N)
    del x
    assert host_cache.cached_bytes() == 0
    with pytest.raises(ValueError, match="limit"):
        host_cache.set_limit(-1)


def test_empty_cache_on_cpu_gives_the_memory_back():
    x = engine.rand(N)
    del x
    assert host_cache.cached_bytes() > 0
    engine.memory.empty_cache("cpu")
    assert host_cache.cached_bytes() == 0


def test_reported_figures_are_the_same_with_and_without_the_cache():
    def run():
        engine.memory.reset_peak_memory_stats()
        base = engine.memory.memory_allocated()
        w = engine.rand(256, 256, requires_grad=True)
        for _ in range(3):
            y = (w @ w).relu().sum()
            y.backward()
            w.grad = None
        return engine.memory.max_memory_allocated() - base, engine.memory.memory_allocated() - base

    with_cache = run()
    host_cache.set_limit(0)
    without = run()
    assert with_cache == without


def test_values_of_a_training_loop_do_not_depend_on_the_cache():
    def losses():
        engine.manual_seed(0)
        lin = engine.nn.Linear(128, 256)
        opt = engine.optim.SGD(lin.parameters(), lr=0.1)
        x = engine.randn(64, 128)
        out = []
        for _ in range(4):
            opt.zero_grad()
            loss = lin(x).square().mean()
            loss.backward()
            opt.step()
            out.append(float(loss))
        return out

    assert losses() == (host_cache.set_limit(0) or losses())


def test_threads_allocating_and_freeing_at_once_keep_values_and_the_count():
    import threading

    errors = []

    def work(seed):
        try:
            for i in range(200):
                n = N + (seed * 7 + i) % 5  # a few sizes shared between threads
                t = engine.full((n,), float(seed))
                assert float(t._data[0]) == seed and float(t._data[-1]) == seed
                del t
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(s,)) for s in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors
    assert host_cache.cached_bytes() == sum(
        size * len(arrays) for size, arrays in host_cache._free.items()
    )


@pytest.mark.parametrize("last", ["alias", "tensor"])
def test_memory_seen_through_data_is_reused_whichever_dies_last(last):
    # `t.data` shares t's memory under a version counter of its own (an alias storage); when
    # the alias held the last reference, its dying used to still hold the array while the owner
    # gave it back, so the memory went to malloc and the next request faulted in fresh pages
    x = engine.rand(N)
    addr = _addr(x)
    alias = x.data
    if last == "alias":
        del x
        assert host_cache.cached_bytes() == 0  # the alias still reaches the memory
        del alias
    else:
        del alias
        assert host_cache.cached_bytes() == 0
        del x
    assert host_cache.cached_bytes() == N * 4
    assert _addr(engine.empty(N)) == addr


def test_a_numpy_result_of_the_alias_still_blocks_reuse():
    x = engine.ones(N)
    alias = x.data
    a = alias.numpy()
    del x, alias
    assert host_cache.cached_bytes() == 0
    y = engine.zeros(N)
    assert float(a.sum()) == N and _addr(y) != a.__array_interface__["data"][0]


def test_workspace_reuses_one_buffer_per_thread_and_key():
    a = host_cache.workspace("k", (64, 128), np.float32)
    addr = a.__array_interface__["data"][0]
    assert a.shape == (64, 128) and a.dtype == np.float32 and a.flags.c_contiguous
    b = host_cache.workspace("k", (8, 16), np.float64)  # smaller: the same memory
    assert b.__array_interface__["data"][0] == addr and b.dtype == np.float64
    other = host_cache.workspace("other", (64, 128), np.float32)
    assert other.__array_interface__["data"][0] != addr
    grown = host_cache.workspace("k", (256, 256), np.float32)  # larger: a new buffer
    assert grown.nbytes == 256 * 256 * 4
    assert (
        host_cache.workspace("k", (256, 256), np.float32).__array_interface__["data"][0]
        == grown.__array_interface__["data"][0]
    )
    seen = {}

    def on_thread():
        seen["addr"] = host_cache.workspace("k", (64, 128), np.float32).__array_interface__["data"][
            0
        ]

    import threading

    t = threading.Thread(target=on_thread)
    t.start()
    t.join()
    assert seen["addr"] != grown.__array_interface__["data"][0]  # each thread its own


def test_workspace_past_the_bound_is_a_new_array_and_clear_drops_buffers():
    big = (host_cache.WORKSPACE_MAX_BYTES // 4 + 1,)
    a = host_cache.workspace("big", big, np.float32)
    b = host_cache.workspace("big", big, np.float32)
    assert a.__array_interface__["data"][0] != b.__array_interface__["data"][0]
    host_cache.workspace("k", (1024,), np.float32)
    assert host_cache.workspace_bytes() > 0
    engine.memory.empty_cache("cpu")
    assert host_cache.workspace_bytes() == 0


def test_a_threads_workspace_goes_with_the_thread():
    import gc
    import threading

    host_cache.clear()
    before = host_cache.workspace_bytes()

    def on_thread():
        host_cache.workspace("k", (1 << 18,), np.float32)  # 1 MiB

    t = threading.Thread(target=on_thread)
    t.start()
    t.join()
    del t
    gc.collect()
    assert host_cache.workspace_bytes() == before
