"""dropout, in place or not."""

from __future__ import annotations

import numpy as np

from engine import kernels
from engine.autograd.function import Function
from engine.ops.common import result_buffer
from engine.ops.nn.common import _live


class Dropout(Function):
    """y = x * noise, noise = bernoulli(1 - p) / (1 - p) (PyTorch's CPU `_dropout_impl`)."""

    def forward(self, x, out=None, p=0.5, generator=None):
        from engine.creation import fill_random_

        dev = x._device
        noise = kernels.empty(x.shape, x._dtype, dev)
        y = result_buffer(out, x.shape, x._dtype, dev, "dropout")
        if _live(dev):
            xp = kernels.xp_of(x)
            if p >= 1:
                noise._data.fill(0)
            else:
                fill_random_(noise, "uniform", generator)
                xp.greater_equal(noise._data, p, out=noise._data)
                xp.multiply(noise._data, 1.0 / (1.0 - p), out=noise._data)
            if xp is np:
                kernels.ufunc(np.multiply, x._data, noise._data, out=y._data)
            else:
                xp.multiply(x._data, noise._data, out=y._data)
        self.save(noise=noise)
        return y

    def backward(self, g):
        noise = self.kept("noise")
        gx = kernels.empty(g.shape, g._dtype, g._device)
        if _live(g._device):
            kernels.xp_of(g).multiply(g._data, noise._data, out=gx._data)
        return (gx,)

    def name(self):
        return "MulBackward0"


def dropout(input, p=0.5, training=True, inplace=False, *, generator=None):
    """Zero each element with probability p and scale the rest by 1/(1-p) (identity when not training)."""
    if p < 0.0 or p > 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    if not training or p == 0 or input.numel() == 0:
        return input
    if inplace:
        return Dropout.apply(input, out=input, op="dropout_", p=p, generator=generator)
    return Dropout.apply(input, op="dropout", p=p, generator=generator)


def dropout_(input, p=0.5, training=True):
    return dropout(input, p, training, inplace=True)
