"""Convolution kernels: a convolution whose per-sample products are large runs its samples (and, for grad_W, its
output channels) in parts on the engine's pool with BLAS single-threaded meanwhile
(kernels.split_ranges / run_parts). The parts change no value (bitwise, against one thread
and against torch), no charged byte, and leave BLAS's thread count as it was."""

from __future__ import annotations

import numpy as np
import pytest

import engine
from engine import kernels

threadpoolctl = pytest.importorskip("threadpoolctl")

CASES = {
    "3x3 pad 1": ((5, 4, 9, 11), (6, 4, 3, 3), dict(padding=1)),
    "strided grouped": ((4, 4, 10, 8), (6, 2, 3, 2), dict(stride=(2, 1), padding=(1, 0), groups=2)),
    "dilated": ((3, 2, 12, 12), (4, 2, 3, 3), dict(dilation=2, padding=2)),
    "stem-like": ((3, 3, 23, 21), (8, 3, 5, 5), dict(stride=3, padding=2)),
    "1x1": ((5, 6, 7, 7), (3, 6, 1, 1), {}),
    # stride 1: grad_x as a correlation with the flipped weight (asymmetric 'same' padding,
    # groups), and past the full extent (padding > d*(k-1)): col2im
    "grouped same, even kernel": ((3, 4, 9, 8), (6, 2, 4, 2), dict(padding="same", groups=2)),
    "over-padded": ((2, 3, 6, 6), (4, 3, 3, 3), dict(padding=3)),
}


@pytest.fixture
def split_everything(monkeypatch):
    monkeypatch.setattr(kernels, "SPLIT_SAMPLE_MACS", 0)
    before = kernels.get_num_threads()
    yield
    kernels.set_num_threads(before)


def _run(x, w, b, kw, threads, noncontig=False):
    kernels.set_num_threads(threads)
    if noncontig:  # the input a transposed view: [N, C, W, H] memory read as [N, C, H, W]
        leaf = engine.tensor(np.ascontiguousarray(x.transpose(0, 1, 3, 2)), requires_grad=True)
        xin = leaf.transpose(2, 3)
    else:
        leaf = xin = engine.tensor(x, requires_grad=True)
    wt = engine.tensor(w, requires_grad=True)
    bt = engine.tensor(b, requires_grad=True)
    y = engine.nn.functional.conv2d(xin, wt, bt, **kw)
    g = np.linspace(-1, 1, y.numel()).reshape(y.shape)
    y.backward(engine.tensor(g))
    return [t.detach().numpy().copy() for t in (y, leaf.grad, wt.grad, bt.grad)]


def _data(case, dtype=np.float64):
    xs, ws, kw = CASES[case]
    rng = np.random.default_rng(len(case))
    return (
        rng.standard_normal(xs).astype(dtype),
        rng.standard_normal(ws).astype(dtype),
        rng.standard_normal(ws[0]).astype(dtype),
        kw,
    )


@pytest.mark.parametrize("noncontig", [False, True])
@pytest.mark.parametrize("case", list(CASES))
def test_parts_give_bitwise_the_one_thread_results(case, noncontig, split_everything):
    x, w, b, kw = _data(case, np.float32)
    one = _run(x, w, b, kw, 1, noncontig)
    parts = _run(x, w, b, kw, 2, noncontig)
    for a, r in zip(parts, one, strict=True):
        np.testing.assert_array_equal(a, r)


@pytest.mark.filterwarnings("ignore:Using padding='same' with even kernel:UserWarning")
@pytest.mark.parametrize("case", list(CASES))
def test_parts_match_torch(case, split_everything):
    torch = pytest.importorskip("torch")
    x, w, b, kw = _data(case)
    mine = _run(x, w, b, kw, 2)
    tx, tw, tb = (torch.tensor(v, requires_grad=True) for v in (x, w, b))
    ty = torch.nn.functional.conv2d(tx, tw, tb, **kw)
    ty.backward(torch.tensor(np.linspace(-1, 1, ty.numel()).reshape(ty.shape)))
    for a, r in zip(mine, (ty, tx.grad, tw.grad, tb.grad), strict=True):
        np.testing.assert_allclose(a, r.detach().numpy(), rtol=1e-10, atol=1e-10)


def test_a_large_convolution_splits_and_a_small_one_does_not():
    assert len(kernels.split_ranges(16, 64 * 576 * 3136)) == min(kernels.get_num_threads(), 16)
    assert kernels.split_ranges(32, 64 * 288 * 256) == [(0, 32)]  # 4.7M: BLAS's threads
    assert kernels.split_ranges(1, 1 << 30) == [(0, 1)]


def test_parts_charge_the_same_bytes(split_everything):
    def peak(threads):
        kernels.set_num_threads(threads)
        engine.memory.reset_peak_memory_stats()
        base = engine.memory.memory_allocated()
        x = engine.randn(4, 8, 12, 12, requires_grad=True)
        w = engine.randn(8, 8, 3, 3, requires_grad=True)
        engine.nn.functional.conv2d(x, w, padding=1).sum().backward()
        return engine.memory.max_memory_allocated() - base

    assert peak(2) == peak(1)


def test_run_parts_gives_blas_its_threads_back_even_on_error():
    ctls = kernels._blas_controllers()
    if not ctls:
        pytest.skip("no BLAS controller (threadpoolctl cannot see numpy's BLAS)")
    before = [c.get_num_threads() for c in ctls]
    seen = []

    def part(i, lo, hi):
        seen.append(ctls[0].get_num_threads())
        if i == 1:
            raise ValueError("boom")

    kernels.set_num_threads(2)
    with pytest.raises(ValueError, match="boom"):
        kernels.run_parts(part, [(0, 1), (1, 2)])
    assert seen == [1, 1]
    assert [c.get_num_threads() for c in ctls] == before


def test_run_parts_runs_each_part_once_this_thread_among_them():
    """Parts are handed out as threads get free: each runs exactly once, on at most the engine's
    thread count of threads, this one among them from the start; what a part calls runs on its
    own thread (no nested split); the pool is left usable."""
    import threading
    import time

    main = threading.get_ident()
    runs, threads, nested = [], set(), []
    lock = threading.Lock()

    def part(i, lo, hi):
        with lock:
            runs.append((i, lo, hi))
            threads.add(threading.get_ident())
        time.sleep(0.002)  # (a woken pool thread gets its share)
        inner = []
        kernels.run_parts(lambda j, a, b: inner.append(threading.get_ident()), [(0, 1), (1, 2)])
        nested.append(set(inner) == {threading.get_ident()})

    before = engine.get_num_threads()
    try:
        kernels.set_num_threads(2)
        ranges = [(k, k + 1) for k in range(9)]
        kernels.run_parts(part, ranges)
        assert sorted(runs) == [(i, lo, hi) for i, (lo, hi) in enumerate(ranges)]
        assert main in threads and len(threads) <= 2
        assert all(nested)
        kernels.set_num_threads(1)  # one thread: every part here, in order
        runs.clear()
        threads.clear()
        kernels.run_parts(part, ranges[:3])
        assert [r[0] for r in runs] == [0, 1, 2] and threads == {main}
    finally:
        kernels.set_num_threads(before)
    assert not kernels._on_pool.yes


def test_run_parts_stops_handing_out_parts_after_an_error():
    started = []

    def part(i, lo, hi):
        started.append(i)
        if i == 0:
            raise KeyError("first")

    before = engine.get_num_threads()
    try:
        kernels.set_num_threads(2)
        with pytest.raises(KeyError, match="first"):
            kernels.run_parts(part, [(k, k + 1) for k in range(50)])
    finally:
        kernels.set_num_threads(before)
    assert len(started) < 50  # (the other thread may have started one or two meanwhile)
    assert not kernels._on_pool.yes


@pytest.mark.parametrize("per_thread", [1, 4])
def test_split_ranges_cover_the_samples_in_order(per_thread):
    before = engine.get_num_threads()
    try:
        kernels.set_num_threads(2)
        if not kernels._blas_controllers():
            pytest.skip("no BLAS controller (threadpoolctl cannot see numpy's BLAS)")
        for n in (1, 2, 3, 7, 8, 33):
            ranges = kernels.split_ranges(n, kernels.SPLIT_SAMPLE_MACS, per_thread)
            assert ranges[0][0] == 0 and ranges[-1][1] == n
            assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:], strict=False))
            assert all(lo < hi for lo, hi in ranges) and len(ranges) <= min(n, 2 * per_thread)
            if n % (2 * per_thread) == 0:
                assert len(ranges) == 2 * per_thread
        assert kernels.split_ranges(8, kernels.SPLIT_SAMPLE_MACS - 1, 4) == [(0, 8)]
    finally:
        kernels.set_num_threads(before)


# Wide (stride-1) convolutions multiply several samples' columns at once (conv.GROUP_ELEMS).
# Groups of 2 samples out of 5 leave a last group of one; with the parts on, the forward's
# parts take whole groups (samples 0-3, 4), grad_W's parts (input channels) all take the same
# groups of all the samples: bitwise the one-thread results.
GROUPED = {
    "3x3 pad 1": ((5, 4, 9, 11), (6, 4, 3, 3), dict(padding=1)),
    "grouped same, even kernel": ((5, 4, 9, 8), (6, 2, 4, 2), dict(padding="same", groups=2)),
    "dilated": ((5, 2, 12, 12), (4, 2, 3, 3), dict(dilation=2, padding=2)),
}


@pytest.fixture
def groups_of_two(monkeypatch):
    from engine.ops.nn import conv

    monkeypatch.setattr(conv, "GROUP_MIN_K", 1)
    # (float64 on cpu takes torch's slow kernels: these tests check the float32 kernel's sample
    # grouping, run in float64 for the comparison's precision)
    monkeypatch.setattr(conv, "_slow_cpu", lambda dev, dt: False)
    return monkeypatch, conv


@pytest.mark.filterwarnings("ignore:Using padding='same' with even kernel:UserWarning")
@pytest.mark.parametrize("case", list(GROUPED))
def test_samples_grouped_in_one_product_match_torch_and_one_thread(
    case, groups_of_two, split_everything
):
    torch = pytest.importorskip("torch")
    monkeypatch, conv = groups_of_two
    xs, ws, kw = GROUPED[case]
    rng = np.random.default_rng(7)
    x, w, b = (rng.standard_normal(s) for s in (xs, ws, (ws[0],)))
    seen = []
    real_group = conv.Conv2d._group

    def two(self):
        seen.append(real_group(self))
        return 2

    monkeypatch.setattr(conv.Conv2d, "_group", two)
    mine = _run(x, w, b, kw, 2)
    assert seen  # the forward and grad_W both asked
    tx, tw, tb = (torch.tensor(v, requires_grad=True) for v in (x, w, b))
    ty = torch.nn.functional.conv2d(tx, tw, tb, **kw)
    ty.backward(torch.tensor(np.linspace(-1, 1, ty.numel()).reshape(ty.shape)))
    for a, r in zip(mine, (ty, tx.grad, tw.grad, tb.grad), strict=True):
        np.testing.assert_allclose(a, r.detach().numpy(), rtol=1e-10, atol=1e-10)
    x32, w32, b32 = (v.astype(np.float32) for v in (x, w, b))
    one = _run(x32, w32, b32, kw, 1)
    parts = _run(x32, w32, b32, kw, 2)
    for a, r in zip(parts, one, strict=True):
        np.testing.assert_array_equal(a, r)


def test_group_size_follows_the_columns_bound_and_the_inner_dim():
    from engine.ops.nn import conv

    def group(xs, ws, **kw):
        x = engine.empty(xs, device="meta")
        w = engine.empty(ws, device="meta")
        node = object.__new__(conv.Conv2d)
        node.forward(x, w, padding=((1, 1), (1, 1)), **kw)
        return node._group()

    # 32 -> 64 on 16x16: 288-long inner dim, 288*18*16 columns per sample: 3 per product
    assert group((32, 32, 16, 16), (64, 32, 3, 3)) == conv.GROUP_ELEMS // (288 * 16 * 18)
    assert group((2, 32, 16, 16), (64, 32, 3, 3)) == 2  # never more than the batch
    assert group((32, 3, 32, 32), (32, 3, 3, 3)) == 1  # a 27-long inner dim: one at a time
    assert group((4, 64, 56, 56), (64, 64, 3, 3)) == 1  # one sample's columns over the bound


def _grad_weight_columns(monkeypatch, threads, xs, ws, **kw):
    """The samples each grad_W part built columns of (Conv2d._columns calls after forward;
    the columns path: the direct kernels, where they run, take none)."""
    from engine.ops.nn import conv

    monkeypatch.setattr(conv, "DIRECT_GRAD_W", False)
    kernels.set_num_threads(threads)
    rng = np.random.default_rng(3)
    x = engine.tensor(rng.standard_normal(xs).astype(np.float32))
    w = engine.tensor(rng.standard_normal(ws).astype(np.float32), requires_grad=True)
    y = engine.nn.functional.conv2d(x, w, **kw)
    built = []
    real = conv.Conv2d._columns

    def counting(self, x, bufs, b0, b1, chans=None, group=1):
        for s0, s1, cols in real(self, x, bufs, b0, b1, chans, group):
            built.append((s0, s1, chans))
            yield s0, s1, cols

    monkeypatch.setattr(conv.Conv2d, "_columns", counting)
    y.backward(engine.ones_like(y))
    return built, w.grad.numpy().copy()


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_a_few_channel_grad_weight_builds_each_samples_columns_once(
    threads, monkeypatch, split_everything
):
    # 3 input channels: grad_W sums blocks of samples, and the parts take whole blocks, so each
    # sample's columns are built once on any thread count (split by output channels, every
    # part built all of them)
    built, gw = _grad_weight_columns(monkeypatch, threads, (10, 3, 15, 13), (6, 3, 5, 5), stride=3)
    assert sorted((s0, s1) for s0, s1, _ in built) == [(b, b + 1) for b in range(10)]
    _, one = _grad_weight_columns(monkeypatch, 1, (10, 3, 15, 13), (6, 3, 5, 5), stride=3)
    np.testing.assert_array_equal(gw, one)


def test_sample_blocks_depend_on_the_batch_and_group_alone():
    from engine.ops.nn import conv

    def blocks(n, group):
        node = object.__new__(conv.Conv2d)
        node.geom = (n,) + (0,) * 18
        return node._sample_blocks(group)

    assert blocks(8, 1) == [(b, b + 1) for b in range(8)]
    assert blocks(20, 1) == [(0, 3), (3, 6), (6, 9), (9, 12), (12, 15), (15, 18), (18, 20)]
    assert blocks(7, 2) == [(0, 2), (2, 4), (4, 6), (6, 7)]  # whole products of 2 samples
    assert blocks(40, 3) == [(0, 6), (6, 12), (12, 18), (18, 24), (24, 30), (30, 36), (36, 40)]
    assert len(blocks(1000, 1)) == conv.SAMPLE_BLOCKS


def test_a_many_channel_grad_weight_splits_by_input_channel(monkeypatch, split_everything):
    built, _ = _grad_weight_columns(monkeypatch, 2, (4, 8, 9, 9), (5, 8, 3, 3), stride=2)
    assert sorted({chans for _, _, chans in built}) == [(0, 4), (4, 8)]
    assert len(built) == 2 * 4  # each part: its channels of every sample


EMPTY_BATCH = {  # (function, input shape, weight shape, dtype, keywords)
    "conv2d 3 channels": ("conv2d", (0, 3, 8, 8), (4, 3, 3, 3), "float32", dict(padding=1)),
    "conv2d 8 channels": ("conv2d", (0, 8, 8, 8), (4, 8, 3, 3), "float32", dict(padding=1)),
    "conv2d float64": ("conv2d", (0, 3, 6, 6), (4, 3, 3, 3), "float64", {}),
    "conv2d float64 dilated": ("conv2d", (0, 3, 6, 6), (4, 3, 3, 3), "float64", dict(dilation=2)),
    "conv2d float64 groups": ("conv2d", (0, 4, 6, 6), (4, 2, 3, 3), "float64", dict(groups=2)),
    "conv1d": ("conv1d", (0, 3, 8), (4, 3, 3), "float32", {}),
    "conv3d": ("conv3d", (0, 2, 4, 4, 4), (3, 2, 3, 3, 3), "float32", {}),
    "conv3d float64": ("conv3d", (0, 2, 4, 4, 4), (3, 2, 3, 3, 3), "float64", {}),
    "conv_transpose2d": ("conv_transpose2d", (0, 3, 5, 5), (3, 4, 3, 3), "float32", {}),
}


@pytest.mark.parametrize("case", list(EMPTY_BATCH))
def test_an_empty_batch_gives_zero_weight_gradients_as_torch(case):
    torch = pytest.importorskip("torch")
    name, xs, ws, dtype, kw = EMPTY_BATCH[case]
    out = {}
    for m in (engine, torch):
        dt = getattr(m, dtype)
        x = m.ones(*xs, requires_grad=True, dtype=dt)
        w = m.ones(*ws, requires_grad=True, dtype=dt)
        b = m.ones(w.shape[1] if "transpose" in name else w.shape[0], requires_grad=True, dtype=dt)
        y = getattr(m.nn.functional, name)(x, w, b, **kw)
        y.sum().backward()
        out[m] = [t.detach().numpy() for t in (y, x.grad, w.grad, b.grad)]
    for mine, theirs in zip(out[engine], out[torch], strict=True):
        assert mine.shape == theirs.shape
        np.testing.assert_array_equal(mine, theirs)
