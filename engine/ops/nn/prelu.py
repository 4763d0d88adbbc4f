"""prelu and rrelu: torch's native kernels.

- F.prelu is torch's `prelu` (the weight reshaped to [1, C, 1, ...], a view: ViewBackward0)
  then `_prelu_kernel` (PreluKernelBackward0, keeping input and weight). Its backward,
  `_prelu_kernel_backward`, makes grad_input and an input-sized grad_weight in one pass, then
  sums grad_weight to the weight's shape (the full-size one freed).
- F.rrelu is `rrelu_with_noise` with a noise buffer the size of the input (allocated even in
  eval, where it stays unwritten): in training each negative element is multiplied by a slope
  drawn uniformly from [lower, upper] (the engine's RNG), the noise keeps that slope (1 where
  x >= 0) and backward is grad * noise; in eval the slope is (lower + upper) / 2 (leaky_relu)
  and backward leaky_relu_backward. Node RreluWithNoiseBackward0 keeps input and noise; the
  in-place form (`inplace=True`, `F.rrelu_`) is rrelu_with_noise_: RreluWithNoiseBackward1
  keeps the noise and the result.
"""

from __future__ import annotations

from engine import kernels
from engine.autograd.function import Function
from engine.ops.common import broadcast_shape, result_buffer
from engine.ops.nn.common import _live


class PreluKernel(Function):
    """y = x where x > 0, else weight * x (weight broadcast over x)."""

    retain_inputs = (0, 1)

    def forward(self, x, w, out=None):
        shape = broadcast_shape(x, w, "prelu")
        y = result_buffer(out, shape, x._dtype, x._device, "prelu")
        if _live(x._device):
            xp = kernels.xp_of(x)
            xd = x._data
            xp.multiply(xd, w._data, out=y._data)
            xp.copyto(y._data, xd, where=xd > 0)
        return y

    def backward(self, g):
        x, w = self.saved_tensors
        dev, dt = g._device, g._dtype
        shape = tuple(g.shape)
        gx = kernels.empty(shape, dt, dev)
        gw_full = kernels.empty(shape, dt, dev)
        if _live(dev):
            xp = kernels.xp_of(g)
            xd, gd = x._data, g._data
            pos = xd > 0
            xp.multiply(gd, w._data, out=gx._data)
            xp.copyto(gx._data, gd, where=pos)
            xp.multiply(xd, gd, out=gw_full._data)
            xp.copyto(gw_full._data, 0, where=pos)
        from engine.ops.common import sum_to

        gw = sum_to(gw_full, w.shape)
        del gw_full
        return (gx, gw)

    def name(self):
        return "PreluKernelBackward0"


def prelu(input, weight):
    """max(0, x) + weight * min(0, x), weight of 1 or C (= input.size(1)) elements."""
    if input.dtype != weight.dtype:
        raise RuntimeError(
            "prelu: Type promoting not supported. Got "
            f"{input.dtype.scalar_name} and {weight.dtype.scalar_name}"
        )
    if weight.numel() != 1:
        if input.ndim == 0:
            raise RuntimeError("Not allow zero-dim input tensor.")
        channels = input.shape[1] if input.ndim > 1 else 1
        if channels != weight.numel():
            raise RuntimeError(
                "Mismatch of parameter numbers and input channel size. Found parameter numbers "
                f"= {weight.numel()} and channel size = {channels}."
            )
    if weight.ndim > 1:
        raise RuntimeError(
            f"prelu: Expected `weight` to be a scalar or 1D tensor, but got: ndim = {weight.ndim}"
        )
    if input.ndim != weight.ndim:
        dims = [1] * input.ndim
        if input.ndim > 1:
            dims[1] = weight.numel()
        weight = weight.reshape(dims)
    return PreluKernel.apply(input, weight, op="prelu")


class RreluWithNoise(Function):
    """rrelu_with_noise(self, noise, lower, upper, training): noise is written in training."""

    retain_inputs = (0, 1)

    def forward(self, x, noise, out=None, lower=0.125, upper=1 / 3, training=False):
        self.lower, self.upper, self.training = lower, upper, training
        y = result_buffer(out, x.shape, x._dtype, x._device, "rrelu")
        if not _live(x._device):
            return y
        xp = kernels.xp_of(x)
        xd = x._data
        if training:
            from engine.creation import fill_random_

            fill_random_(noise, "uniform", None, lower, upper)
            nd = noise._data
            nd[xd > 0] = 1
            xp.multiply(xd, nd, out=y._data)
        else:
            slope = (lower + upper) / 2
            neg = ~(xd > 0)  # (before y is written: in place, y is x)
            if y._data is not xd:
                xp.copyto(y._data, xd)
            y._data[neg] *= slope  # (CuPy's ufuncs take no where=)
        return y

    def backward(self, g):
        x, noise = self.saved_tensors
        gx = kernels.empty(g.shape, g._dtype, g._device)
        if _live(g._device):
            xp = kernels.xp_of(g)
            if self.training and self.upper - self.lower > 1e-6:
                xp.multiply(g._data, noise._data, out=gx._data)
            else:  # leaky_relu_backward(grad, self, (lower + upper) / 2)
                slope = (self.lower + self.upper) / 2
                xp.multiply(g._data, slope, out=gx._data)
                xp.copyto(gx._data, g._data, where=x._data > 0)
        return (gx, None)

    def name(self):
        return "RreluWithNoiseBackward0"


class RreluWithNoiseInplace(RreluWithNoise):
    """rrelu_with_noise_: the input overwritten; backward reads the result and the noise
    (rrelu_with_noise_backward with self_is_result: in training grad * noise, in eval
    leaky_relu_backward on the result's sign)."""

    retain_inputs = (1,)
    retain_output = True

    def backward(self, g):
        noise, result = self.saved_tensors
        gx = kernels.empty(g.shape, g._dtype, g._device)
        if _live(g._device):
            xp = kernels.xp_of(g)
            if self.training and self.upper - self.lower > 1e-6:
                xp.multiply(g._data, noise._data, out=gx._data)
            else:
                slope = (self.lower + self.upper) / 2
                xp.multiply(g._data, slope, out=gx._data)
                xp.copyto(gx._data, g._data, where=result._data > 0)
        return (gx, None)

    def name(self):
        return "RreluWithNoiseBackward1"


def _rrelu(input, lower, upper, training, inplace):
    from engine.creation import empty_like

    noise = empty_like(input, memory_format="contiguous_format")
    kind = RreluWithNoiseInplace if inplace else RreluWithNoise
    return kind.apply(
        input,
        noise,
        out=input if inplace else None,
        op="rrelu_" if inplace else "rrelu",
        lower=float(lower),
        upper=float(upper),
        training=bool(training),
    )


def rrelu(input, lower=1.0 / 8, upper=1.0 / 3, training=False, inplace=False):
    """Randomized leaky ReLU: a slope drawn from U(lower, upper) per negative element in
    training (the engine's RNG), (lower + upper) / 2 in eval."""
    return _rrelu(input, lower, upper, training, inplace)


def rrelu_(input, lower=1.0 / 8, upper=1.0 / 3, training=False):
    """F.rrelu(..., inplace=True): torch's rrelu_with_noise_ (RreluWithNoiseBackward1)."""
    return _rrelu(input, lower, upper, training, True)
