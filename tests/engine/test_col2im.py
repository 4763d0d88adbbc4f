"""grad_x of small convolutions on cpu (Conv2d._few_macs): one product per block of samples
and col2im (kernels.col2im_add). The compiled col2im gives the numpy form's bits and adds what
a plain loop adds; the gradients match torch's, bitwise alike on one thread and on two, and
whatever the block size."""

from __future__ import annotations

import numpy as np
import pytest

import engine
from engine import kernels
from engine.ops.nn import conv

from .conftest import NATIVE

# (S, C, kh, kw, OH, OW, sh, sw, dh, dw, padding)
GEOMS = [
    (3, 4, 3, 3, 5, 6, 1, 1, 1, 1, 1),
    (2, 3, 3, 2, 4, 3, 2, 1, 1, 1, 0),
    (2, 2, 3, 3, 3, 3, 2, 3, 2, 1, 2),
    (1, 5, 1, 1, 4, 4, 1, 1, 1, 1, 0),
    (4, 1, 5, 5, 2, 2, 3, 3, 1, 2, 0),
]


def _operands(geom, dtype, seed=0):
    s, c, kh, kw, oh, ow, sh, sw, dh, dw, pad = geom
    hp = (oh - 1) * sh + (kh - 1) * dh + 1 + pad
    wp = (ow - 1) * sw + (kw - 1) * dw + 1 + pad
    rng = np.random.default_rng(seed)
    cols = rng.standard_normal((c, kh, kw, s, oh, ow)).astype(dtype)
    cols.flat[0] = -0.0
    stage = np.zeros((s, c, hp, wp), dtype)
    return cols, stage


def _loop(cols, stage, kh, kw, sh, sw, dh, dw):
    """The adds one by one, in col2im_add's order."""
    c, _, _, s, oh, ow = cols.shape
    out = stage.copy()
    for si in range(s):
        for ci in range(c):
            for i in range(kh):
                for j in range(kw):
                    for a in range(oh):
                        for b in range(ow):
                            out[si, ci, a * sh + i * dh, b * sw + j * dw] += cols[
                                ci, i, j, si, a, b
                            ]
    return out


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("geom", GEOMS, ids=str)
def test_col2im_adds_each_column_into_its_window(kernel_form, geom, dtype):
    cols, stage = _operands(geom, dtype)
    _, _, kh, kw, _, _, sh, sw, dh, dw, _ = geom
    want = _loop(cols, stage, kh, kw, sh, sw, dh, dw)
    kernels.col2im_add(cols, stage, kh, kw, sh, sw, dh, dw)
    assert stage.tobytes() == want.tobytes()


@pytest.mark.skipif(NATIVE is None, reason="engine._native is not built")
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("geom", GEOMS, ids=str)
def test_compiled_col2im_gives_the_numpy_forms_bits(monkeypatch, geom, dtype):
    cols, stage = _operands(geom, dtype, seed=1)
    _, _, kh, kw, _, _, sh, sw, dh, dw, _ = geom
    stage += np.float32(0.25)  # (adds into what is there)
    monkeypatch.setattr(kernels, "native", None)
    numpy_form = stage.copy()
    kernels.col2im_add(cols, numpy_form, kh, kw, sh, sw, dh, dw)
    monkeypatch.setattr(kernels, "native", NATIVE)
    for threads in (1, 2):
        monkeypatch.setattr(kernels, "native_threads", lambda n, t=threads: t)
        compiled = stage.copy()
        kernels.col2im_add(cols, compiled, kh, kw, sh, sw, dh, dw)
        assert compiled.tobytes() == numpy_form.tobytes()


@pytest.mark.skipif(NATIVE is None, reason="engine._native is not built")
def test_compiled_col2im_refuses_windows_outside_the_stage():
    cols = np.zeros((1, 3, 3, 1, 4, 4), np.float32)
    with pytest.raises(ValueError, match="leave the padded sample"):
        NATIVE.col2im(
            cols, np.zeros((1, 1, 5, 6), np.float32), (1, 1, 3, 3, 4, 4, 5, 6, 1, 1, 1, 1)
        )
    with pytest.raises(ValueError, match="stage must hold"):
        NATIVE.col2im(
            cols, np.zeros((1, 1, 6, 5), np.float32), (1, 1, 3, 3, 4, 4, 6, 6, 1, 1, 1, 1)
        )


CONVS = {
    "3x3 pad 1": ((7, 4, 9, 11), (6, 4, 3, 3), dict(padding=1)),
    "strided grouped": ((5, 4, 10, 8), (6, 2, 3, 2), dict(stride=(2, 1), padding=(1, 0), groups=2)),
    "dilated": ((3, 2, 12, 12), (4, 2, 3, 3), dict(dilation=2, padding=2)),
    "stride 2 over-padded": ((4, 3, 7, 6), (5, 3, 3, 3), dict(stride=2, padding=3)),
}


def _grads(x, w, kw, threads):
    kernels.set_num_threads(threads)
    xt = engine.tensor(x, requires_grad=True)
    wt = engine.tensor(w, requires_grad=True)
    y = engine.nn.functional.conv2d(xt, wt, None, **kw)
    y.backward(engine.tensor(np.linspace(-1, 1, y.numel(), dtype=np.float32).reshape(y.shape)))
    return xt.grad.numpy().copy(), wt.grad.numpy().copy()


@pytest.mark.parametrize("case", list(CONVS))
def test_small_convolutions_grad_input_in_blocks_matches_torch_on_any_thread_count(
    monkeypatch, case
):
    torch = pytest.importorskip("torch")
    xs, ws, kw = CONVS[case]
    rng = np.random.default_rng(3)
    x = rng.standard_normal(xs).astype(np.float32)
    w = rng.standard_normal(ws).astype(np.float32)
    # (the blocks path's test: a stride-1 one takes the direct kernel where it runs,
    # tests/engine/test_conv_direct.py)
    monkeypatch.setattr(conv, "DIRECT_SMALL_K", 0)
    monkeypatch.setattr(conv, "DIRECT_MAX_K", 0)
    took = []
    real = conv.Conv2d._grad_input_batched
    monkeypatch.setattr(
        conv.Conv2d, "_grad_input_batched", lambda self, *a: took.append(1) or real(self, *a)
    )
    before = kernels.get_num_threads()
    try:
        one = _grads(x, w, kw, 1)
        assert took  # the blocks path, not the correlation with the flipped weight
        two = _grads(x, w, kw, 2)
        monkeypatch.setattr(conv, "COL2IM_ELEMS", 1)  # one sample per block
        single = _grads(x, w, kw, 2)
    finally:
        kernels.set_num_threads(before)
    assert one[0].tobytes() == two[0].tobytes()
    tx = torch.tensor(x.astype(np.float64), requires_grad=True)
    tw = torch.tensor(w.astype(np.float64))
    ty = torch.nn.functional.conv2d(tx, tw, None, **kw)
    ty.backward(torch.tensor(np.linspace(-1, 1, ty.numel(), dtype=np.float32).reshape(ty.shape)))
    for got in (one[0], single[0]):
        np.testing.assert_allclose(got, tx.grad.numpy(), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("size", [5, 64])  # a sample's product below and above the bound
def test_a_pointwise_convolution_keeps_its_direct_grad_input(monkeypatch, size):
    """A 1x1 convolution's grad_x is W.T @ g per sample, neither blocks of columns nor the
    correlation with the flipped weight, whatever its size."""
    x = engine.tensor(np.random.default_rng(0).random((2, 64, size, size), np.float32))
    x.requires_grad_(True)
    w = engine.tensor(np.random.default_rng(1).random((64, 64, 1, 1), np.float32))

    def refuse(self, *a):
        raise AssertionError("a 1x1 convolution took a columns path")

    monkeypatch.setattr(conv.Conv2d, "_grad_input_correlated", refuse)
    monkeypatch.setattr(conv.Conv2d, "_grad_input_batched", refuse)
    engine.nn.functional.conv2d(x, w).sum().backward()
    want = np.broadcast_to(w.numpy().sum(axis=0)[:, 0, 0][None, :, None, None], x.shape)
    np.testing.assert_allclose(x.grad.numpy(), want, rtol=1e-5)
