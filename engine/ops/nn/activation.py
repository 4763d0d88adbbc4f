"""Activations written as nn primitives: gelu (exact and tanh), log_sigmoid (with the buffer
torch keeps on cpu), glu; and torch's composites softsign, softmin, tanhshrink."""

from __future__ import annotations

import math

import numpy as np

from engine import kernels
from engine.autograd.function import Function
from engine.backends import cuda_fast
from engine.ops.common import result_buffer
from engine.ops.nn.common import _live
from engine.tensor import Tensor

_BLOCK = kernels.POOL_BLOCK
_SQRT1_2 = 1.0 / math.sqrt(2.0)
_SQRT2_PI = math.sqrt(2.0 / math.pi)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)


# float32's exact GELU: Abramowitz & Stegun 7.1.26 (|error| < 1.5e-7 in erf) for
# erfc(a / sqrt(2)) / 2, a = |x|: t = 1 / (1 + p a / sqrt(2)),
# erfc(a / sqrt(2)) / 2 = t (a1 + t (a2 + ... + t a5)) exp(-a^2 / 2),
# with the 1/sqrt(2) and the half folded into the constants.
_AS_P = 0.3275911 * _SQRT1_2
_AS_A = tuple(0.5 * c for c in (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429))


def _upper_tail_chunk(xp, x, out, s1, s2):
    """s2 = Q(|x|) = 1 - Phi(|x|) (the normal distribution's upper tail), s1 = exp(-x^2 / 2),
    out = |x|; one exp and one division, no sign operations."""
    xp.abs(x, out=out)
    xp.multiply(out, _AS_P, out=s1)
    xp.add(s1, 1.0, out=s1)
    xp.divide(1.0, s1, out=s1)  # t
    a1, a2, a3, a4, a5 = _AS_A
    xp.multiply(s1, a5, out=s2)
    for c in (a4, a3, a2, a1):
        xp.add(s2, c, out=s2)
        xp.multiply(s2, s1, out=s2)
    xp.multiply(out, out, out=s1)
    xp.multiply(s1, -0.5, out=s1)
    xp.exp(s1, out=s1)
    xp.multiply(s2, s1, out=s2)


def _tanh_inner(xp, x, out):
    """out = tanh(sqrt(2/pi) * (x + 0.044715 x^3))."""
    xp.multiply(x, x, out=out)
    xp.multiply(out, 0.044715, out=out)
    xp.add(out, 1.0, out=out)
    xp.multiply(out, x, out=out)
    xp.multiply(out, _SQRT2_PI, out=out)
    xp.tanh(out, out=out)


_BETA = 2.0 / math.sqrt(math.pi) * _SQRT1_2 * 0.5  # torch's kBeta: M_2_SQRTPI * M_SQRT1_2 / 2


def _one_plus_erf(xp, x, out):
    """out = 1 + erf(x / sqrt 2) (= 2 Phi(x)), with kernels.erf_into's erf: float64's to its
    precision. Exact GELU in float64 (and float16) takes torch's formulas with it, where the
    upper tail's approximation (|error| < 1.5e-7) would be float32's precision."""
    xp.multiply(x, _SQRT1_2, out=out)
    kernels.erf_into(xp, out, out)
    xp.add(out, 1.0, out=out)


def _gelu_chunk(xp, approximate, x, out, s1, s2):
    if approximate != "tanh" and x.dtype != np.float32:
        _one_plus_erf(xp, x, s1)  # torch's x * 0.5 * (1 + erf(x / sqrt 2))
        xp.multiply(x, 0.5, out=out)
        xp.multiply(out, s1, out=out)
        return
    if approximate == "tanh":
        _tanh_inner(xp, x, s1)
        xp.add(s1, 1.0, out=s1)
        xp.multiply(s1, x, out=out)
        xp.multiply(out, 0.5, out=out)
        return
    # x Phi(x) = relu(x) - |x| Q(|x|): relu(x) = (x + |x|) / 2 exactly, and no cancellation in
    # the lower tail, where x Phi(x) = x Q(|x|) is small (x / 2 (1 + erf(x / sqrt 2)) loses it)
    _upper_tail_chunk(xp, x, out, s1, s2)
    xp.multiply(s2, out, out=s2)
    xp.add(out, x, out=out)
    xp.multiply(out, 0.5, out=out)
    xp.subtract(out, s2, out=out)
    # x Phi(x) has x's sign; torch's x * 0.5 * (1 + erf) keeps it where the product is 0 (-0.0
    # and the far lower tail), which relu(x) - |x| Q(|x|) gives as +0.0
    xp.copysign(out, x, out=out)


def _gelu_grad_chunk(xp, approximate, x, g, out, s1, s2):
    if approximate == "tanh":
        # 0.5 (1 + t) + 0.5 x (1 - t^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2)
        _tanh_inner(xp, x, s1)
        xp.multiply(x, x, out=out)
        xp.multiply(out, 3 * 0.044715, out=out)
        xp.add(out, 1.0, out=out)
        xp.multiply(out, _SQRT2_PI * 0.5, out=out)
        xp.multiply(out, x, out=out)
        xp.multiply(s1, s1, out=s2)
        xp.subtract(1.0, s2, out=s2)
        xp.multiply(out, s2, out=out)
        xp.add(s1, 1.0, out=s1)
        xp.multiply(s1, 0.5, out=s1)
        xp.add(out, s1, out=out)
    elif x.dtype != np.float32:
        # torch's: cdf + x * pdf, cdf = 0.5 (1 + erf(x / sqrt 2)), pdf = kBeta exp(-x^2 / 2)
        _one_plus_erf(xp, x, s1)
        xp.multiply(s1, 0.5, out=s1)
        xp.multiply(x, x, out=s2)
        xp.multiply(s2, -0.5, out=s2)
        xp.exp(s2, out=s2)
        xp.multiply(s2, _BETA, out=s2)
        xp.multiply(s2, x, out=s2)
        xp.add(s1, s2, out=out)
    else:
        # Phi(x) + x phi(x), Phi(x) = 1/2 + sign(x) (1/2 - Q(|x|)), phi(x) = exp(-x^2/2)/sqrt(2 pi)
        _upper_tail_chunk(xp, x, out, s1, s2)
        xp.subtract(0.5, s2, out=out)
        xp.copysign(out, x, out=out)
        xp.add(out, 0.5, out=out)
        xp.multiply(s1, x, out=s1)
        xp.multiply(s1, _INV_SQRT_2PI, out=s1)
        xp.add(out, s1, out=out)
    xp.multiply(out, g, out=out)


_GELU_CONSTS = (_AS_P, *_AS_A, _INV_SQRT_2PI)


_gelu_matches = None  # whether exp_gelu_f32's GELU gives the numpy chain's bits here (once)


def _native_gelu_matches() -> bool:
    """kernels.native_exp_f32(), and the compiled GELU and its gradient equal to the numpy
    chain's on a spread of values (checked once: the whole chain, not only its exp)."""
    global _gelu_matches
    if not kernels.native_exp_f32():
        return False
    if _gelu_matches is None:
        x = np.concatenate(
            [
                np.linspace(-20.0, 20.0, 1 << 14, dtype=np.float32),
                (np.arange(1 << 14, dtype=np.uint64) * 262147).astype(np.uint32).view(np.float32),
            ]
        )
        g = np.cos(np.arange(x.size, dtype=np.float32))
        ok = True
        for grad in (None, g):
            want, s1, s2, got = (np.empty_like(x) for _ in range(4))
            with np.errstate(all="ignore"):
                if grad is None:
                    _gelu_chunk(np, "none", x, want, s1, s2)
                else:
                    _gelu_grad_chunk(np, "none", x, grad, want, s1, s2)
            kernels.native.exp_gelu_f32(x, grad, got, 1 if grad is None else 2, _GELU_CONSTS, 1)
            ok = ok and want.tobytes() == got.tobytes()
        _gelu_matches = ok
    return _gelu_matches


def _native_gelu(x, g, out) -> bool:
    """The float32 exact GELU (g None) or its gradient times g by engine._native's loop
    (exp_gelu_f32: _gelu_chunk's and _gelu_grad_chunk's operations element by element, with
    numpy's exp: the same bits), on its threads; False where it cannot take them (not float32
    contiguous numpy arrays, or _native_gelu_matches() found the numpy chain other)."""
    arrays = (x, out) if g is None else (x, g, out)
    if not (kernels.native_f32(*arrays) and out.flags.writeable and _native_gelu_matches()):
        return False
    kernels.native.exp_gelu_f32(
        x, g, out, 1 if g is None else 2, _GELU_CONSTS, kernels.native_threads(out.size)
    )
    return True


def _chunked(xp, func, out, *arrays):
    """func(*chunks, out_chunk, scratch1, scratch2) over flat chunks of contiguous arrays.

    Large work is split across the engine's thread pool, each thread with its own two scratch
    buffers of at most kernels.SCRATCH_ELEMS elements (not charged); the results do not depend
    on the thread count. On cupy the whole array is one chunk and CuPy's own temporaries show
    through its memory hook.
    """
    if xp is not np:
        func(*arrays, out, xp.empty_like(out), xp.empty_like(out))
        return
    flats = [a.reshape(-1) for a in arrays]
    fo = out.reshape(-1)
    n = fo.size

    def run(lo: int, hi: int) -> None:  # one thread's range, with its own scratch
        s1 = np.empty(min(_BLOCK, max(hi - lo, 1)), dtype=fo.dtype)
        s2 = np.empty_like(s1)
        for i in range(lo, hi, _BLOCK):
            j = min(i + _BLOCK, hi)
            func(*[f[i:j] for f in flats], fo[i:j], s1[: j - i], s2[: j - i])

    threads = kernels.pool_threads(n)
    if threads == 1:
        run(0, n)
        return
    # the engine's pool (numpy releases the GIL inside each ufunc); ranges are whole scratch
    # chunks, so every element is computed by the same operations whatever the thread count
    chunks = -(-n // _BLOCK)
    per = -(-chunks // threads) * _BLOCK
    list(kernels._get_pool().map(lambda lo: run(lo, min(lo + per, n)), range(0, n, per)))


def _contiguous(t: Tensor):
    """(array, owner): t's array when C-contiguous, else a charged contiguous copy."""
    if t.is_contiguous():
        return t._data, t
    c = kernels.copy_new(t)
    return c._data, c


class Gelu(Function):
    retain_inputs = (0,)

    def forward(self, x, out=None, approximate="none"):
        if approximate not in ("none", "tanh"):
            raise RuntimeError(
                f"approximate argument must be either none or tanh, got {approximate!r}"
            )
        self.approximate = approximate
        y = result_buffer(out, x.shape, x._dtype, x._device, "gelu")
        if _live(x._device):
            xp = kernels.xp_of(x)
            if xp is not np and cuda_fast.gelu(x._data, y._data, approximate):
                return y  # torch's cuda kernel, any strides
            src, keep = _contiguous(x)
            if approximate == "tanh" or not _native_gelu(src, None, y._data):
                _chunked(
                    xp,
                    lambda a, o, s1, s2: _gelu_chunk(xp, approximate, a, o, s1, s2),
                    y._data,
                    src,
                )
            del keep
        return y

    def backward(self, g):
        (x,) = self.saved_tensors
        gx = kernels.empty(g.shape, g._dtype, g._device)
        if _live(g._device):
            xp = kernels.xp_of(g)
            approximate = self.approximate
            if xp is not np and cuda_fast.gelu_backward(g._data, x._data, gx._data, approximate):
                return (gx,)
            xs, xkeep = _contiguous(x)
            gs, gkeep = _contiguous(g)
            if approximate != "tanh" and _native_gelu(xs, gs, gx._data):
                return (gx,)
            _chunked(
                xp,
                lambda a, b, o, s1, s2: _gelu_grad_chunk(xp, approximate, a, b, o, s1, s2),
                gx._data,
                xs,
                gs,
            )
            del xkeep, gkeep
        return (gx,)

    def name(self):
        return "GeluBackward0"


def gelu(input, approximate="none"):
    return Gelu.apply(input, op="gelu", approximate=approximate)


# ---------------------------------------------------------------------------------------------
# log_sigmoid and glu (torch's native nodes), and the composites softsign, softmin, tanhshrink
# ---------------------------------------------------------------------------------------------
class LogSigmoid(Function):
    """log(sigmoid(x)) = min(x, 0) - log1p(exp(-|x|)). torch's log_sigmoid_forward returns a
    buffer beside the output on cpu, exp(-|x|), which its node keeps for backward: a second
    input-sized block alive as long as the graph (cuda keeps none, and meta, planning a GPU run,
    none)."""

    retain_inputs = (0,)

    def forward(self, x, out=None):
        if not x._dtype.is_floating_point:
            kind = x._dtype.scalar_name
            raise NotImplementedError(f"\"log_sigmoid_cpu\" not implemented for '{kind}'")
        y = result_buffer(out, x.shape, x._dtype, x._device, "log_sigmoid")
        keep_buffer = x._device.type == "cpu"  # (meta plans a GPU run: cuda keeps none)
        buffer = kernels.empty(x.shape, x._dtype, x._device) if keep_buffer else None
        if _live(x._device):
            xp = kernels.xp_of(x)
            b = buffer._data if keep_buffer else xp.empty_like(y._data)
            xp.abs(x._data, out=b)
            xp.negative(b, out=b)
            xp.exp(b, out=b)
            yd = y._data
            xp.log1p(b, out=yd)
            xp.subtract(xp.minimum(x._data, 0.0), yd, out=yd)
        self.save(buffer=buffer)
        return y

    def backward(self, g):
        (x,) = self.saved_tensors
        buffer = self.kept("buffer")  # exp(-|x|) as forward made it (cpu); elsewhere made again
        gx = kernels.empty(g.shape, g._dtype, g._device)
        if _live(g._device):
            xp = kernels.xp_of(g)
            gd = gx._data  # b = exp(-|x|); d/dx = b / (1 + b), or 1 / (1 + b) below 0
            if buffer is not None:
                xp.copyto(gd, buffer._data)
            else:
                xp.abs(x._data, out=gd)
                xp.negative(gd, out=gd)
                xp.exp(gd, out=gd)
            one_plus = gd + 1.0
            xp.divide(gd, one_plus, out=gd)
            neg = x._data < 0
            xp.subtract(1.0, gd, out=one_plus)
            xp.copyto(gd, one_plus, where=neg)
            xp.multiply(gd, g._data, out=gd)
        return (gx,)

    def name(self):
        return "LogSigmoidBackward0"


def logsigmoid(input):
    return LogSigmoid.apply(input, op="log_sigmoid")


class Glu(Function):
    """a * sigmoid(b), a and b the halves of x along dim; one half-size output, x kept."""

    retain_inputs = (0,)

    def forward(self, x, out=None, dim=-1):
        if x.ndim == 0:
            raise RuntimeError("glu does not support scalars because halving size must be even")
        d = dim + x.ndim if dim < 0 else dim
        if not 0 <= d < x.ndim:
            raise IndexError(
                f"Dimension out of range (expected to be in range of [{-x.ndim}, {x.ndim - 1}], "
                f"but got {dim})"
            )
        n = x.shape[d]
        if n % 2:
            raise RuntimeError(f"Halving dimension must be even, but dimension {d} is size {n}")
        self.dim = d
        shape = tuple(n // 2 if i == d else s for i, s in enumerate(x.shape))
        y = result_buffer(out, shape, x._dtype, x._device, "glu")
        if _live(x._device):
            xp = kernels.xp_of(x)
            a, b = self._halves(x._data)
            yd = y._data
            xp.negative(b, out=yd)
            xp.exp(yd, out=yd)
            xp.add(yd, 1.0, out=yd)
            xp.divide(a, yd, out=yd)
        return y

    def _halves(self, arr):
        h = arr.shape[self.dim] // 2
        lead = (slice(None),) * self.dim
        return arr[lead + (slice(0, h),)], arr[lead + (slice(h, None),)]

    def backward(self, g):
        (x,) = self.saved_tensors
        gx = kernels.empty(x.shape, g._dtype, g._device)
        if _live(g._device):
            xp = kernels.xp_of(g)
            a, b = self._halves(x._data)
            ga, gb = self._halves(gx._data)
            # s = sigmoid(b): grad_a = g s, grad_b = g a s (1 - s)
            xp.negative(b, out=ga)
            xp.exp(ga, out=ga)
            xp.add(ga, 1.0, out=ga)
            xp.reciprocal(ga, out=ga)
            xp.subtract(1.0, ga, out=gb)
            xp.multiply(gb, ga, out=gb)
            xp.multiply(gb, a, out=gb)
            xp.multiply(gb, g._data, out=gb)
            xp.multiply(ga, g._data, out=ga)
        return (gx,)

    def name(self):
        return "GluBackward0"


def glu(input, dim=-1):
    return Glu.apply(input, op="glu", dim=dim)


def softsign(input):
    """x / (1 + |x|): torch's composite (F.softsign)."""
    return input / (input.abs() + 1)


def softmin(input, dim=None, _stacklevel=3, dtype=None):
    """softmax(-x): torch's composite (F.softmin)."""
    if dim is None:
        raise TypeError("softmin(): the engine needs dim (torch's implicit choice is deprecated)")
    return (-input).softmax(dim, dtype=dtype) if dtype is not None else (-input).softmax(dim)


def tanhshrink(input):
    """x - tanh(x): torch's composite (F.tanhshrink)."""
    return input - input.tanh()
