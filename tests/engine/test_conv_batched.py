"""Convolution on the devices in conv.BATCHED_DEVICES (CuPy's): several samples per copy and per
product (_BatchStage: every kernel offset's windows of S zero-padded samples in one strided
view; grad_x as kh*kw adds over S samples at once). Checked on the CPU by putting "cpu" in
BATCHED_DEVICES (the same code on numpy's arrays), against torch and against the per-sample path,
and on a GPU as it runs there."""

from __future__ import annotations

import numpy as np
import pytest

import engine
from engine.ops.nn import conv
from tests.conftest import requires_cuda

CASES = {
    "3x3 pad 1": ((5, 4, 9, 11), (6, 4, 3, 3), dict(padding=1)),
    "strided grouped": ((5, 4, 10, 8), (6, 2, 3, 2), dict(stride=(2, 1), padding=(1, 0), groups=2)),
    "dilated": ((3, 2, 12, 12), (4, 2, 3, 3), dict(dilation=2, padding=2)),
    "stem-like": ((5, 3, 23, 21), (8, 3, 5, 5), dict(stride=3, padding=2)),
    "stride past the kernel": ((3, 2, 13, 11), (4, 2, 2, 2), dict(stride=3, padding=1)),
    "1x1": ((5, 6, 7, 7), (3, 6, 1, 1), {}),
    "1x1 strided": ((3, 6, 7, 7), (3, 6, 1, 1), dict(stride=2)),
    "same, even kernel": ((3, 4, 9, 8), (6, 2, 4, 2), dict(padding="same", groups=2)),
}


def _data(case):
    xs, ws, kw = CASES[case]
    rng = np.random.default_rng(len(case))
    return rng.standard_normal(xs), rng.standard_normal(ws), rng.standard_normal(ws[0]), kw


def _run(x, w, b, kw, device="cpu", noncontig=False):
    if noncontig:  # the input a transposed view: [N, C, W, H] memory read as [N, C, H, W]
        leaf = engine.tensor(np.ascontiguousarray(x.transpose(0, 1, 3, 2)), device=device)
        leaf.requires_grad_(True)
        xin = leaf.transpose(2, 3)
    else:
        leaf = xin = engine.tensor(x, device=device).requires_grad_(True)
    wt = engine.tensor(w, device=device).requires_grad_(True)
    bt = engine.tensor(b, device=device).requires_grad_(True)
    y = engine.nn.functional.conv2d(xin, wt, bt, **kw)
    g = np.linspace(-1, 1, y.numel()).reshape(y.shape)
    y.backward(engine.tensor(g, device=device))
    gx = leaf.grad.transpose(2, 3) if noncontig else leaf.grad  # as the input's layout
    return [t.detach().cpu().numpy().copy() for t in (y, gx, wt.grad, bt.grad)]


def _torch(x, w, b, kw):
    torch = pytest.importorskip("torch")
    tx, tw, tb = (torch.tensor(v, requires_grad=True) for v in (x, w, b))
    ty = torch.nn.functional.conv2d(tx, tw, tb, **kw)
    ty.backward(torch.tensor(np.linspace(-1, 1, ty.numel()).reshape(ty.shape)))
    return [t.detach().numpy() for t in (ty, tx.grad, tw.grad, tb.grad)]


@pytest.fixture
def batched_cpu(monkeypatch):
    monkeypatch.setattr(conv, "BATCHED_DEVICES", frozenset({"cpu", "cuda"}))
    return monkeypatch


pytestmark = pytest.mark.filterwarnings("ignore:Using padding='same' with even kernel:UserWarning")


@pytest.mark.parametrize("samples", [None, 2])
@pytest.mark.parametrize("noncontig", [False, True])
@pytest.mark.parametrize("case", list(CASES))
def test_batched_convolution_matches_torch(case, noncontig, samples, batched_cpu):
    x, w, b, kw = _data(case)
    seen = []
    real_group = conv.Conv2d._group

    def group(self):
        seen.append((self.batched, real_group(self)))
        return samples or real_group(self)

    batched_cpu.setattr(conv.Conv2d, "_group", group)
    mine = _run(x, w, b, kw, noncontig=noncontig)
    assert seen and all(batched for batched, _ in seen)
    if samples is None:  # small images: the whole batch in one product
        assert {n for _, n in seen} == {x.shape[0]}
    for a, r in zip(mine, _torch(x, w, b, kw), strict=True):
        np.testing.assert_allclose(a, r, rtol=1e-10, atol=1e-10)


def test_batched_and_per_sample_paths_charge_the_same_bytes(monkeypatch):
    def peak():
        engine.memory.reset_peak_memory_stats()
        base = engine.memory.memory_allocated()
        x = engine.randn(4, 3, 20, 20, requires_grad=True)
        w = engine.randn(8, 3, 5, 5, requires_grad=True)
        engine.nn.functional.conv2d(x, w, stride=2, padding=1).sum().backward()
        return engine.memory.max_memory_allocated() - base

    per_sample = peak()
    monkeypatch.setattr(conv, "BATCHED_DEVICES", frozenset({"cpu"}))
    assert peak() == per_sample


def test_batched_group_follows_the_columns_bound(batched_cpu):
    def group(xs, ws, **kw):
        x = engine.empty(xs)
        w = engine.empty(ws)
        node = object.__new__(conv.Conv2d)
        node.forward(x, w, **kw)
        return node._group()

    # bench_cuda's cnn-stem: 3*11*11 * 55*55 column elements per sample, all 8 in one product
    assert group((8, 3, 224, 224), (64, 3, 11, 11), stride=(4, 4), padding=((2, 2), (2, 2))) == 8
    per_sample = 64 * 9 * 56 * 56
    shape = ((64, 64, 56, 56), (64, 64, 3, 3))
    assert group(*shape, padding=((1, 1), (1, 1))) == conv.BATCH_ELEMS // per_sample
    batched_cpu.setattr(conv, "BATCH_ELEMS", 1)
    assert group(*shape, padding=((1, 1), (1, 1))) == 1  # at least one sample


def test_meta_keeps_the_per_sample_layout():
    x = engine.empty(8, 3, 224, 224, device="meta")
    w = engine.empty(64, 3, 11, 11, device="meta")
    node = object.__new__(conv.Conv2d)
    node.forward(x, w, stride=(4, 4), padding=((2, 2), (2, 2)))
    assert not node.batched and node._group() == 1


@pytest.mark.cuda
@requires_cuda
@pytest.mark.parametrize("noncontig", [False, True])
@pytest.mark.parametrize("case", list(CASES))
def test_cuda_convolution_matches_torch(case, noncontig):
    x, w, b, kw = _data(case)
    mine = _run(x, w, b, kw, device="cuda", noncontig=noncontig)
    for a, r in zip(mine, _torch(x, w, b, kw), strict=True):
        np.testing.assert_allclose(a, r, rtol=1e-9, atol=1e-9)
