"""Activations written as nn primitives: gelu (exact and tanh)."""

from __future__ import annotations

import math

import numpy as np

from engine import kernels
from engine.autograd.function import Function
from engine.ops.common import result_buffer
from engine.ops.nn.common import _SCRATCH, _live
from engine.tensor import Tensor

_SQRT1_2 = 1.0 / math.sqrt(2.0)
_SQRT2_PI = math.sqrt(2.0 / math.pi)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)


def _erf_abs_chunk(xp, z, out, s1, s2):
    """out = erf(|z|) (Abramowitz & Stegun 7.1.26, |error| < 1.5e-7); s1, s2 are scratch."""
    a1, a2, a3, a4, a5, p = (
        0.254829592,
        -0.284496736,
        1.421413741,
        -1.453152027,
        1.061405429,
        0.3275911,
    )
    xp.abs(z, out=s2)
    xp.multiply(s2, p, out=out)
    xp.add(out, 1.0, out=out)
    xp.reciprocal(out, out=out)  # t
    xp.multiply(s2, s2, out=s2)
    xp.negative(s2, out=s2)
    xp.exp(s2, out=s2)  # exp(-z^2)
    xp.multiply(out, a5, out=s1)
    for a in (a4, a3, a2, a1):
        xp.add(s1, a, out=s1)
        xp.multiply(s1, out, out=s1)
    xp.multiply(s1, s2, out=s1)
    xp.subtract(1.0, s1, out=out)


def _phi_chunk(xp, x, out, s1, s2):
    """out = Phi(x) = 0.5 * (1 + erf(x / sqrt(2)))."""
    xp.multiply(x, _SQRT1_2, out=s1)
    _erf_abs_chunk(xp, s1, out, s1, s2)
    xp.copysign(out, x, out=out)
    xp.add(out, 1.0, out=out)
    xp.multiply(out, 0.5, out=out)


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
    else:
        _phi_chunk(xp, x, s1, out, s2)
        xp.multiply(s1, 2.0, out=s1)
    xp.multiply(s1, x, out=out)
    xp.multiply(out, 0.5, out=out)


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
        # Phi(x) + x phi(x)
        _phi_chunk(xp, x, out, s1, s2)
        xp.multiply(x, x, out=s1)
        xp.multiply(s1, -0.5, out=s1)
        xp.exp(s1, out=s1)
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
        s1 = np.empty(min(_SCRATCH, max(hi - lo, 1)), dtype=fo.dtype)
        s2 = np.empty_like(s1)
        for i in range(lo, hi, _SCRATCH):
            j = min(i + _SCRATCH, hi)
            func(*[f[i:j] for f in flats], fo[i:j], s1[: j - i], s2[: j - i])

    threads = kernels.pool_threads(n)
    if threads == 1:
        run(0, n)
        return
    # the engine's pool (numpy releases the GIL inside each ufunc); ranges are whole scratch
    # chunks, so every element is computed by the same operations whatever the thread count
    chunks = -(-n // _SCRATCH)
    per = -(-chunks // threads) * _SCRATCH
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
