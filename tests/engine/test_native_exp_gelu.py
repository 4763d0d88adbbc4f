"""engine._native's float32 exp (numpy's SIMD loop repeated) and the exact GELU over it
(exp_gelu_f32): the same bits as np.exp and as activation.py's numpy chain, on 1 and 2
threads, and the numpy forms wherever the check at first use finds numpy's exp other."""

import numpy as np
import pytest

import engine
from engine import kernels
from engine.ops.nn import activation as A

pytestmark = pytest.mark.skipif(
    kernels.native is None or not hasattr(kernels.native, "exp_gelu_f32"),
    reason="engine._native not built",
)


def _inputs(stride: int = 997) -> np.ndarray:
    """Bit patterns spread over all of float32 (NaNs with payloads and both signs,
    infinities, subnormals, signed zeros), a dense span of exp's range and GELU's tails."""
    spread = np.arange(0, 1 << 32, stride, dtype=np.uint64).astype(np.uint32).view(np.float32)
    rng = np.random.default_rng(0)
    return np.concatenate(
        [
            spread,
            np.linspace(-110.0, 95.0, 200_003, dtype=np.float32),
            (rng.standard_normal(100_000) * 4).astype(np.float32),
            np.array(
                [
                    0.0,
                    -0.0,
                    np.inf,
                    -np.inf,
                    np.nan,
                    -np.nan,
                    88.72283935546875,
                    88.7228394,
                    -103.97208404541015625,
                    -103.972084,
                    1e-45,
                    -1e-45,
                    13.9,
                    -13.9,
                    26.0,
                    -26.0,
                ],
                dtype=np.float32,
            ),  # fmt: skip
        ]
    )


def _numpy_gelu(x, g=None):
    out, s1, s2 = (np.empty_like(x) for _ in range(3))
    with np.errstate(all="ignore"):
        if g is None:
            A._gelu_chunk(np, "none", x, out, s1, s2)
        else:
            A._gelu_grad_chunk(np, "none", x, g, out, s1, s2)
    return out


def test_the_check_at_first_use_passes_here(monkeypatch):
    kernels._native_exp = None
    assert kernels.native_exp_f32() is True
    monkeypatch.setattr(A, "_gelu_matches", None)
    assert A._native_gelu_matches() is True
    monkeypatch.setattr(A, "_gelu_matches", False)  # (a machine where the chain differs)
    x = np.linspace(-3, 3, 5000, dtype=np.float32)
    out = np.zeros_like(x)
    assert not A._native_gelu(x, None, out) and not out.any()


@pytest.mark.parametrize("threads", [1, 2])
def test_exp_is_numpys_bits(threads):
    x = _inputs()
    got = np.empty_like(x)
    kernels.native.exp_gelu_f32(x, None, got, 0, (0.0,) * 7, threads)
    with np.errstate(all="ignore"):
        want = np.exp(x)
    assert got.tobytes() == want.tobytes()


@pytest.mark.parametrize("threads", [1, 2])
def test_gelu_and_its_gradient_are_the_numpy_chains_bits(threads):
    x = _inputs(stride=4099)
    g = np.random.default_rng(1).standard_normal(x.size).astype(np.float32)
    y = np.empty_like(x)
    gx = np.empty_like(x)
    kernels.native.exp_gelu_f32(x, None, y, 1, A._GELU_CONSTS, threads)
    kernels.native.exp_gelu_f32(x, g, gx, 2, A._GELU_CONSTS, threads)
    assert y.tobytes() == _numpy_gelu(x).tobytes()
    assert gx.tobytes() == _numpy_gelu(x, g).tobytes()


def test_the_entry_checks_its_buffers():
    x = np.zeros(8, np.float32)
    with pytest.raises(TypeError):
        kernels.native.exp_gelu_f32(x.astype(np.float64), None, x, 0, (0.0,) * 7)
    with pytest.raises(ValueError):
        kernels.native.exp_gelu_f32(x, None, np.zeros(7, np.float32), 1, A._GELU_CONSTS)
    with pytest.raises(ValueError):  # the gradient needs g, the forward none
        kernels.native.exp_gelu_f32(x, None, x.copy(), 2, A._GELU_CONSTS)
    with pytest.raises(ValueError):
        kernels.native.exp_gelu_f32(x, x, x.copy(), 1, A._GELU_CONSTS)
    with pytest.raises(ValueError):
        kernels.native.exp_gelu_f32(x, None, x.copy(), 1, (1.0,) * 6)
    with pytest.raises((BufferError, ValueError)):  # not contiguous
        kernels.native.exp_gelu_f32(np.zeros(16, np.float32)[::2], None, x, 0, (0.0,) * 7)


def test_the_numpy_forms_when_native_is_switched_off(monkeypatch):
    assert kernels.native_exp_f32()  # (checked, then switched off: tests' kernel_form)
    monkeypatch.setattr(kernels, "native", None)
    x = np.linspace(-3, 3, 5000, dtype=np.float32)
    out = np.zeros_like(x)
    assert not kernels.exp_f32(x, out) and not out.any()
    y = engine.nn.functional.gelu(engine.tensor(x)).numpy()
    assert y.tobytes() == _numpy_gelu(x).tobytes()


def test_exp_f32_refuses_what_it_cannot_take():
    x = np.linspace(-3, 3, 64, dtype=np.float32)
    out = np.full(64, 7.0, np.float32)
    assert not kernels.exp_f32(x.astype(np.float64), out)
    assert not kernels.exp_f32(x[::2], out[:32])
    assert not kernels.exp_f32(x, out[:32])
    buf = np.zeros(65, np.float32)  # a shifted overlap: numpy's to buffer
    assert not kernels.exp_f32(buf[1:], buf[:64])
    assert (out == 7.0).all()
    assert kernels.exp_f32(x, out) and out.tobytes() == np.exp(x).tobytes()
    y = x.copy()  # in place
    assert kernels.exp_f32(y, y) and y.tobytes() == np.exp(x).tobytes()


@pytest.fixture
def numpy_forms():
    """Run the engine with the numpy forms (as where numpy's exp is other), then restore."""

    def use(flag: bool):
        kernels._native_exp = None if flag else False

    yield use
    kernels._native_exp = None


def _gelu_run(x, contiguous=True):
    t = engine.tensor(x, requires_grad=True)
    src = t if contiguous else t.transpose(0, 1)
    y = engine.nn.functional.gelu(src)
    g = engine.tensor(np.cos(np.arange(y.numel(), dtype=np.float32)).reshape(y.shape))
    y.backward(g)
    return y.detach().numpy(), t.grad.numpy()


@pytest.mark.parametrize("contiguous", [True, False])
def test_the_gelu_op_gives_the_same_bits_either_way(numpy_forms, contiguous):
    x = (np.random.default_rng(2).standard_normal((300, 257)) * 5).astype(np.float32)
    x[0, :6] = [np.nan, -np.inf, np.inf, -0.0, 0.0, -30.0]
    numpy_forms(False)
    y0, g0 = _gelu_run(x, contiguous)
    numpy_forms(True)
    y1, g1 = _gelu_run(x, contiguous)
    assert kernels._native_exp is True  # (the compiled loop ran)
    assert y0.tobytes() == y1.tobytes() and g0.tobytes() == g1.tobytes()


@pytest.mark.parametrize("op", ["exp", "softmax"])
def test_exp_and_softmax_give_the_same_bits_either_way(numpy_forms, op):
    x = (np.random.default_rng(4).standard_normal((64, 300)) * 8).astype(np.float32)

    def run():
        t = engine.tensor(x)
        return (t.exp() if op == "exp" else t.softmax(-1)).numpy()

    numpy_forms(False)
    a = run()
    numpy_forms(True)
    b = run()
    assert a.tobytes() == b.tobytes()
    with np.errstate(all="ignore"):
        want = np.exp(x) if op == "exp" else None
    if want is not None:
        assert a.tobytes() == want.tobytes()
