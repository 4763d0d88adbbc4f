"""A float32 convolution's forward with a small inner dim without columns (Conv2d._direct,
engine._native's conv2d_direct): each output its inner dim's fused multiply-adds in order, then
the bias (within float32's rounding of the im2col path and of torch, the same bits on any
thread count), and the cases it leaves to the im2col path."""

import numpy as np
import pytest

import engine
import engine.nn.functional as F
from engine import kernels
from engine.ops.nn import conv as C

native = kernels.native
pytestmark = pytest.mark.skipif(
    native is None or not hasattr(native, "conv2d_direct") or not native.conv2d_direct_avx512(),
    reason="engine._native not built, or no AVX512F here",
)

# (x shape, out channels, kernel, padding, bias[, stride])
CASES = {
    "cifar-first": ((32, 3, 32, 32), 32, 3, 1, True),
    "mnist-5x5": ((8, 1, 28, 28), 16, 5, 2, True),
    "odd": ((4, 2, 9, 13), 7, 3, 0, True),
    "wide-rows": ((3, 3, 11, 70), 9, 3, 1, False),
    "tall-kernel": ((2, 2, 12, 17), 12, (5, 1), (2, 0), True),
    "same-even": ((2, 3, 10, 10), 8, 4, "same", True),
    "k64": ((2, 4, 8, 8), 5, 4, 1, True),
    "empty-batch": ((0, 3, 8, 8), 4, 3, 1, True),
    "k288": ((4, 32, 16, 16), 20, 3, 1, True),
    "k576-14-wide": ((2, 64, 14, 14), 16, 3, 1, False),
    "stem-stride-4": ((2, 3, 67, 67), 16, 11, 2, True, 4),
    "stride-2": ((3, 5, 20, 37), 12, 3, 1, True, 2),
    "stride-2x3": ((2, 4, 19, 40), 8, (3, 5), (1, 2), True, (2, 3)),
}


@pytest.fixture
def direct(monkeypatch):
    calls = []
    real = C.Conv2d._direct

    def counted(self, *a):
        done = real(self, *a)
        calls.append(done)
        return done

    monkeypatch.setattr(C.Conv2d, "_direct", counted)

    def use(on: bool):
        monkeypatch.setattr(C, "DIRECT_SMALL_K", 64 if on else 0)
        monkeypatch.setattr(C, "DIRECT_MAX_K", 4608 if on else 0)
        monkeypatch.setattr(C, "DIRECT_GRAD_W", on)

    use.calls = calls
    return use


def _forward(case, seed=0):
    shape, o, k, pad, bias, *stride = CASES[case]
    stride = stride[0] if stride else 1
    rng = np.random.default_rng(seed)
    x = engine.tensor(rng.standard_normal(shape).astype(np.float32))
    kh, kw = (k, k) if isinstance(k, int) else k
    w = engine.tensor(rng.standard_normal((o, shape[1], kh, kw)).astype(np.float32))
    b = engine.tensor(rng.standard_normal(o).astype(np.float32)) if bias else None
    return F.conv2d(x, w, b, padding=pad, stride=stride).numpy(), (x, w, b, pad, stride)


@pytest.mark.parametrize("case", sorted(CASES))
def test_thread_counts_give_the_same_bits_close_to_the_im2col_path(direct, case):
    before = kernels.get_num_threads()
    try:
        direct(False)
        want, _ = _forward(case)
        direct(True)
        got = []
        for threads in (1, 2):
            engine.set_num_threads(threads)
            got.append(_forward(case)[0])
    finally:
        engine.set_num_threads(before)
    assert direct.calls == [False, True, True]
    assert got[0].shape == want.shape
    assert got[0].tobytes() == got[1].tobytes()
    # both within float32's rounding of the sums: (K + 2) u sum |w x| apart at most
    _, (x, w, b, pad, stride) = _forward(case)
    magnitude = F.conv2d(x.abs().double(), w.abs().double(), padding=pad, stride=stride).numpy()
    if b is not None:
        magnitude = magnitude + np.abs(b.numpy().astype(np.float64))[None, :, None, None]
    k = w.shape[1] * w.shape[2] * w.shape[3]
    assert (np.abs(got[0] - want) <= 2 * (k + 2) * 2.0**-24 * magnitude + 1e-30).all()


@pytest.mark.parametrize("case", ["cifar-first", "odd", "k64", "same-even"])
def test_within_the_in_order_sums_rounding_bound(direct, case):
    """|y - exact| <= (K + 1) u sum |w x| + |b| u, the bound of K fused multiply-adds in turn
    and one add (u = 2^-24), against the float64 convolution."""
    direct(True)
    y, (x, w, b, pad, stride) = _forward(case)
    exact = F.conv2d(x.double(), w.double(), padding=pad, stride=stride).numpy()
    magnitude = F.conv2d(x.abs().double(), w.abs().double(), padding=pad, stride=stride).numpy()
    k = w.shape[1] * w.shape[2] * w.shape[3]
    u = 2.0**-24
    bias = b.numpy().astype(np.float64)[None, :, None, None]
    bound = (k + 1) * u * magnitude + 2 * u * (np.abs(exact) + np.abs(bias))
    assert (np.abs(y - (exact + bias)) <= bound + 1e-30).all()


def test_values_match_torch(direct):
    torch = pytest.importorskip("torch")
    direct(True)
    y, (x, w, b, pad, stride) = _forward("cifar-first")
    yt = torch.nn.functional.conv2d(
        torch.tensor(x.numpy()),
        torch.tensor(w.numpy()),
        torch.tensor(b.numpy()),
        padding=pad,
        stride=stride,
    )
    np.testing.assert_allclose(y, yt.numpy(), rtol=1e-5, atol=1e-5)


def test_left_to_the_im2col_path(direct):
    direct(True)
    rng = np.random.default_rng(1)
    x = engine.tensor(rng.standard_normal((2, 4, 12, 12)).astype(np.float32))
    w = engine.tensor(rng.standard_normal((6, 4, 3, 3)).astype(np.float32))
    F.conv2d(x, w, dilation=2)
    F.conv2d(x, engine.tensor(rng.standard_normal((6, 2, 3, 3)).astype(np.float32)), groups=2)
    # K 100 and rows 7 wide: under half of their 16 lanes
    F.conv2d(x, engine.tensor(rng.standard_normal((6, 4, 6, 6)).astype(np.float32)), padding=0)
    F.conv2d(x.double(), w.double())
    F.conv2d(x.transpose(2, 3), w)  # not contiguous
    F.conv2d(engine.empty((2, 4, 12, 12), device="meta"), engine.empty((6, 4, 3, 3), device="meta"))
    assert len(direct.calls) >= 5 and True not in direct.calls  # (float64 never asks)


def _backward(case="cifar-first", grad_input=True):
    _, (x, w, b, pad, stride) = _forward(case)
    x.requires_grad_(grad_input)
    w.requires_grad_(True)
    y = F.conv2d(x, w, b, padding=pad, stride=stride)
    (y * 0.5).sum().backward()  # (g does not depend on y's values)
    return (x.grad.numpy() if grad_input else None), w.grad.numpy()


@pytest.mark.parametrize(
    "case", ["cifar-first", "k288", "odd", "same-even", "wide-rows", "stride-2", "stride-2x3"]
)
def test_gradients_by_the_direct_kernels(direct, monkeypatch, case):
    """grad_x of a stride-1 convolution is g correlated with the flipped weight, a convolution
    the direct kernel takes too (small images included); grad_W its own direct kernel
    (conv2d_direct_grad_w). Both the same bits on 1 and 2 threads, close to the columns'."""
    grad_w_direct = []
    real = C.Conv2d._grad_weight_direct
    monkeypatch.setattr(
        C.Conv2d,
        "_grad_weight_direct",
        lambda *a: grad_w_direct.append(real(*a)) or grad_w_direct[-1],
    )
    direct(False)
    gx_want, gw_want = _backward(case)
    direct(True)
    before = kernels.get_num_threads()
    try:
        got = []
        for threads in (1, 2):
            engine.set_num_threads(threads)
            got.append(_backward(case))
    finally:
        engine.set_num_threads(before)
    # two forwards (_backward's _forward, then its own) on both thread counts, and the
    # correlation where it pays (stride 1)
    assert direct.calls.count(True) >= 4
    assert grad_w_direct == [False, True, True]
    for i, want in enumerate((gx_want, gw_want)):
        assert got[0][i].tobytes() == got[1][i].tobytes()
        np.testing.assert_allclose(got[0][i], want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


@pytest.mark.filterwarnings("ignore:Using padding='same'")
@pytest.mark.parametrize(
    "case", ["cifar-first", "k288", "same-even", "tall-kernel", "stem-stride-4", "stride-2x3"]
)
def test_grad_weight_matches_float64(direct, case):
    torch = pytest.importorskip("torch")
    direct(True)
    _, gw = _backward(case, grad_input=False)
    _, (x, w, b, pad, stride) = _forward(case)
    y = F.conv2d(x, w, b, padding=pad, stride=stride)

    def grad_w(xs, ws):
        wt = torch.tensor(ws.astype(np.float64), requires_grad=True)
        yt = torch.nn.functional.conv2d(
            torch.tensor(xs.astype(np.float64)), wt, padding=pad, stride=stride
        )
        yt.backward(torch.full(yt.shape, 0.5, dtype=torch.float64))
        return wt.grad.numpy()

    want = grad_w(x.numpy(), w.numpy())
    scale = grad_w(np.abs(x.numpy()), w.numpy())  # (g = 0.5 > 0: sum |g x|)
    positions = x.shape[0] * y.shape[2] * y.shape[3]
    assert (np.abs(gw - want) <= (positions + 16) * 2.0**-24 * scale + 1e-30).all()


def test_grad_input_matches_torch(direct):
    torch = pytest.importorskip("torch")
    direct(True)
    _, (x, w, b, pad, stride) = _forward("k288")
    xe = x.detach().requires_grad_(True)
    F.conv2d(xe, w, b, padding=pad, stride=stride).sum().backward()
    xt = torch.tensor(x.numpy(), requires_grad=True)
    torch.nn.functional.conv2d(
        xt, torch.tensor(w.numpy()), torch.tensor(b.numpy()), padding=pad, stride=stride
    ).sum().backward()
    np.testing.assert_allclose(xe.grad.numpy(), xt.grad.numpy(), rtol=1e-5, atol=1e-5)


def test_the_entry_checks_its_arguments():
    x = np.zeros((1, 1, 4, 4), np.float32)
    w = np.ones((2, 1, 3, 3), np.float32)
    y = np.zeros((1, 2, 2, 2), np.float32)
    dims = (1, 1, 4, 4, 2, 3, 3, 0, 0, 2, 2, 1, 1)
    work = np.zeros(native.conv2d_direct_work(dims, 1), np.float32)
    native.conv2d_direct(x + 1, w, None, y, dims, work, 1)
    assert (y == 9).all()
    # left padding past every column the outputs read: the stage stays zero
    y1 = np.full((1, 2, 4, 1), 7.0, np.float32)
    dims1 = (1, 1, 4, 4, 2, 1, 1, 0, 6, 4, 1, 1, 1)
    work1 = np.zeros(native.conv2d_direct_work(dims1, 1), np.float32)
    native.conv2d_direct(x + 1, np.ones((2, 1, 1, 1), np.float32), None, y1, dims1, work1, 1)
    assert (y1 == 0).all()
    with pytest.raises(ValueError):  # outputs reading far past the input
        native.conv2d_direct(x, w, None, y, dims[:-2] + (9, 1), work, 1)
    with pytest.raises(ValueError):  # buffers not of the sizes given
        native.conv2d_direct(x, w, None, y[:, :1], dims, work, 1)
    with pytest.raises(ValueError):  # a workspace for one part, not two
        native.conv2d_direct(x, w, None, y, dims, work, 2)
    with pytest.raises(ValueError):
        native.conv2d_direct(x.astype(np.float64), w, None, y, dims, work, 1)
    gw = np.zeros((2, 1, 3, 3), np.float32)
    g = np.ones((1, 2, 2, 2), np.float32)
    for entry, work in (
        (native.conv2d_direct_grad_w, native.conv2d_direct_grad_w_work),
        (native.conv2d_direct_grad_w_many, native.conv2d_direct_grad_w_many_work),
    ):
        ws = np.zeros(work(dims), np.float32)
        entry(x + 1, g, gw, dims, ws)
        assert (gw == 4).all()  # (g 1, x 1, no padding: each tap the products of 4 outputs)
        with pytest.raises(ValueError):  # outputs reading far past the input
            work(dims[:-2] + (9, 1))
        with pytest.raises(ValueError):  # a workspace of another size
            entry(x, g, gw, dims, ws[:-1])
        with pytest.raises(ValueError):  # g not of the sizes given
            entry(x, g[:, :1], gw, dims, ws)
        with pytest.raises(ValueError):
            entry(x.astype(np.float64), g, gw, dims, ws)


def _grad_w_float64(x, g, k, stride, pad):
    """grad_W and sum |g x| per weight in float64, from the definition."""
    n, c, h, w = x.shape
    o, oh, ow = g.shape[1:]
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pad, pad + k), (pad, pad + k)))
    g64 = g.astype(np.float64)
    want, scale = np.zeros((o, c, k, k)), np.zeros((o, c, k, k))
    for i in range(k):
        for j in range(k):
            xs = xp[
                :, :, i : i + (oh - 1) * stride + 1 : stride, j : j + (ow - 1) * stride + 1 : stride
            ]
            want[:, :, i, j] = np.einsum("noyx,ncyx->oc", g64, xs)
            scale[:, :, i, j] = np.einsum("noyx,ncyx->oc", np.abs(g64), np.abs(xs))
    return want, scale


# (x shape, out channels, kernel, stride, padding): every block shape of the many-taps kernel
# (16-channel vectors 1 to 9: 12 taps by 1 or 2 vectors, 8 by 3, 6 by 4 with tails of 1-3)
GRAD_W_CASES = [
    ((3, 8, 9, 11), 7, 3, 1, 1),
    ((2, 8, 12, 12), 20, 3, 1, 1),
    ((3, 5, 20, 37), 40, 3, 2, 1),
    ((2, 3, 40, 40), 64, 11, 4, 2),
    ((2, 8, 12, 12), 100, 3, 1, 1),
    ((2, 9, 7, 7), 96, 3, 1, 0),
    ((4, 16, 4, 4), 130, 3, 1, 1),
    ((32, 3, 8, 8), 32, 3, 1, 1),
]


@pytest.mark.parametrize("case", GRAD_W_CASES)
def test_both_grad_w_kernels_are_the_in_order_sums(case):
    """conv2d_direct_grad_w (16-lane sums over positions) and conv2d_direct_grad_w_many (the
    lanes over output channels; sweeps of about 110 positions, the sweeps' sums added in
    order): the same bits on 1 and 2 threads, within (positions + 16) u of float64's sum,
    relative to sum |g x|."""
    shape, o, k, stride, pad = case
    rng = np.random.default_rng(sum(shape) + o)
    x = rng.standard_normal(shape).astype(np.float32)
    oh = (shape[2] + 2 * pad - k) // stride + 1
    ow = (shape[3] + 2 * pad - k) // stride + 1
    g = rng.standard_normal((shape[0], o, oh, ow)).astype(np.float32)
    dims = (*shape, o, k, k, pad, pad, oh, ow, stride, stride)
    want, scale = _grad_w_float64(x, g, k, stride, pad)
    positions = shape[0] * oh * ow
    for entry, work in (
        (native.conv2d_direct_grad_w, native.conv2d_direct_grad_w_work),
        (native.conv2d_direct_grad_w_many, native.conv2d_direct_grad_w_many_work),
    ):
        got = []
        for threads in (1, 2):
            gw = np.full((o, shape[1], k, k), np.nan, np.float32)
            entry(x, g, gw, dims, np.full(work(dims), np.nan, np.float32), threads)
            got.append(gw)
        assert got[0].tobytes() == got[1].tobytes()
        assert (np.abs(got[0] - want) <= (positions + 16) * 2.0**-24 * scale + 1e-30).all()


def test_the_bias_gradient_is_the_float64_sum_rounded_once():
    """grad_b sums each (sample, channel) in float64 (kernels.row_sums), then the samples: the
    exact sum rounded once to float32 here, and the same bits on 1 and 2 threads."""
    rng = np.random.default_rng(5)
    x = engine.tensor(rng.standard_normal((16, 3, 32, 32)).astype(np.float32))
    w = engine.tensor(rng.standard_normal((8, 3, 3, 3)).astype(np.float32))
    g = (1000.0 + rng.standard_normal((16, 8, 32, 32))).astype(np.float32)
    exact = g.astype(np.float64).sum(axis=(0, 2, 3))
    before = kernels.get_num_threads()
    got = []
    try:
        for threads in (1, 2):
            engine.set_num_threads(threads)
            b = engine.tensor(np.zeros(8, np.float32), requires_grad=True)
            F.conv2d(x, w, b, padding=1).backward(engine.tensor(g))
            got.append(b.grad.numpy())
    finally:
        engine.set_num_threads(before)
    assert got[0].tobytes() == got[1].tobytes()
    assert got[0].tobytes() == exact.astype(np.float32).tobytes()
