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


# ---------------------------------------------------------------------------------------------
# channel ("feature") dropout: torch's _dropout_impl<feature_dropout=true>, a composite
# ---------------------------------------------------------------------------------------------
def _check_p(p):
    if p < 0.0 or p > 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")


def feature_dropout(input, p=0.5, training=True, inplace=False):
    """Zeroes whole channels: noise of shape (N, C, 1, ...) drawn bernoulli(1 - p), divided by
    1 - p, multiplied in (MulBackward0 keeps the noise); p == 1 multiplies by a 0-d zero."""
    from engine import creation

    if p == 0 or not training or input.numel() == 0:
        return input
    if p == 1:
        zero = creation.zeros((), dtype=input.dtype, device=input.device)
        return input.mul_(zero) if inplace else input * zero
    shape = tuple(input.shape[:2]) + (1,) * (input.ndim - 2)
    noise = creation.empty(shape, dtype=input.dtype, device=input.device)
    noise.bernoulli_(1 - p)
    noise.div_(1 - p)
    return input.mul_(noise) if inplace else input * noise


def dropout1d(input, p=0.5, training=True, inplace=False):
    _check_p(p)
    if input.ndim not in (2, 3):
        raise RuntimeError(
            f"dropout1d: Expected 2D or 3D input, but received a {input.ndim}D input. Note that "
            "dropout1d exists to provide channel-wise dropout on inputs with 1 spatial dimension, "
            "a channel dimension, and an optional batch dimension (i.e. 2D or 3D inputs)."
        )
    return _unbatched(input, 3, p, training, inplace)


def dropout2d(input, p=0.5, training=True, inplace=False):
    import warnings

    _check_p(p)
    if input.ndim not in (3, 4):
        warnings.warn(
            f"dropout2d: Received a {input.ndim}-D input to dropout2d, which is deprecated and "
            "will result in an error in a future release. To retain the behavior and silence "
            "this warning, please use dropout instead. Note that dropout2d exists to provide "
            "channel-wise dropout on inputs with 2 spatial dimensions, a channel dimension, and "
            "an optional batch dimension (i.e. 3D or 4D inputs).",
            stacklevel=2,
        )
    if input.ndim == 3:
        warnings.warn(
            "dropout2d: Received a 3D input to dropout2d and assuming that channel-wise 1D "
            "dropout behavior is desired - input is interpreted as shape (N, C, L), where C is "
            "the channel dim. This behavior will change in a future release to interpret the "
            "input as one without a batch dimension, i.e. shape (C, H, W). To maintain the 1D "
            "channel-wise dropout behavior, please switch to using dropout1d instead.",
            stacklevel=2,
        )
    return feature_dropout(input, p, training, inplace)


def dropout3d(input, p=0.5, training=True, inplace=False):
    import warnings

    _check_p(p)
    if input.ndim not in (4, 5):
        warnings.warn(
            f"dropout3d: Received a {input.ndim}-D input to dropout3d, which is deprecated and "
            "will result in an error in a future release. To retain the behavior and silence "
            "this warning, please use dropout instead. Note that dropout3d exists to provide "
            "channel-wise dropout on inputs with 3 spatial dimensions, a channel dimension, and "
            "an optional batch dimension (i.e. 4D or 5D inputs).",
            stacklevel=2,
        )
    return _unbatched(input, 5, p, training, inplace)


def _unbatched(input, batched_ndim, p, training, inplace):
    """torch's: an input without its batch dim gets one (unsqueeze, in place when inplace) and
    loses it after."""
    batched = input.ndim == batched_ndim
    if not batched:
        input = input.unsqueeze_(0) if inplace else input.unsqueeze(0)
    result = feature_dropout(input, p, training, inplace)
    if not batched:
        result = result.squeeze_(0) if inplace else result.squeeze(0)
    return result
