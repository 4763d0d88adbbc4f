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
