"""channel_shuffle: torch's native op. [N, C, *] viewed as [N, g, C / g, *], the two group
dims swapped, copied into one new output (ChannelShuffleBackward0); backward is the shuffle
with C / g groups on the gradient, one allocation."""

from __future__ import annotations

from engine import kernels
from engine.autograd.function import Function
from engine.ops.nn.common import _live


def _check(x, groups):
    if x.ndim <= 2:
        raise RuntimeError(
            f"channel_shuffle expects input with > 2 dims, but got input with sizes {list(x.shape)}"
        )
    if groups <= 0:
        raise RuntimeError(
            f"Number of groups to divide channels in must be positive. Value of groups:{groups}"
        )
    c = x.shape[1]
    if c % groups:
        raise RuntimeError(
            f"Number of channels must be divisible by groups. Got {c} channels and {groups} groups."
        )


def _shuffled(arr, groups):
    n, c, *rest = arr.shape
    v = arr.reshape(n, groups, c // groups, *rest)
    return v.swapaxes(1, 2).reshape(arr.shape)


class ChannelShuffle(Function):
    def forward(self, x, out=None, groups=1):
        _check(x, groups)
        self.groups = groups
        y = kernels.empty(tuple(x.shape), x._dtype, x._device)
        if _live(x._device):
            y._data[...] = _shuffled(x._data, groups)
        return y

    def backward(self, g):
        gx = kernels.empty(tuple(g.shape), g._dtype, g._device)
        if _live(g._device):
            gx._data[...] = _shuffled(g._data, g.shape[1] // self.groups)
        return (gx,)

    def name(self):
        return "ChannelShuffleBackward0"


def channel_shuffle(input, groups):
    """Interleave the channels of `groups` groups: [N, C, *] -> [N, C, *], a copy."""
    return ChannelShuffle.apply(input, op="channel_shuffle", groups=int(groups))
