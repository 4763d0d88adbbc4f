"""Activations written as nn primitives: gelu (exact and tanh)."""

from __future__ import annotations

import math

import numpy as np

from engine import kernels
from engine.autograd.function import Function
from engine.ops.common import result_buffer
from engine.ops.nn.common import _live
from engine.tensor import Tensor

_BLOCK = kernels.POOL_BLOCK
_SQRT1_2 = 1.0 / math.sqrt(2.0)
_SQRT2_PI = math.sqrt(2.0 / math.pi)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)


# Abramowitz & Stegun 7.1.26 (|error| < 1.5e-7 in erf) for erfc(a / sqrt(2)) / 2, a = |x|:
# t = 1 / (1 + p a / sqrt(2)), erfc(a / sqrt(2)) / 2 = t (a1 + t (a2 + ... + t a5)) exp(-a^2 / 2)
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


def _gelu_chunk(xp, approximate, x, out, s1, s2):
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
            src, keep = _contiguous(x)
            _chunked(
                xp, lambda a, o, s1, s2: _gelu_chunk(xp, approximate, a, o, s1, s2), y._data, src
            )
            del keep
        return y

    def backward(self, g):
        (x,) = self.saved_tensors
        gx = kernels.empty(g.shape, g._dtype, g._device)
        if _live(g._device):
            xp = kernels.xp_of(g)
            xs, xkeep = _contiguous(x)
            gs, gkeep = _contiguous(g)
            approximate = self.approximate
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
