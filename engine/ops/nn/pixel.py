"""pixel_shuffle / pixel_unshuffle: torch's native ops (one output, a copy of the rearranged
input; backward the other op on the gradient, one allocation)."""

from __future__ import annotations

from engine import kernels
from engine.autograd.function import Function
from engine.ops.common import result_buffer
from engine.ops.nn.common import _live


def _check(x, factor, shuffle):
    op = "pixel_shuffle" if shuffle else "pixel_unshuffle"
    word = "upscale_factor" if shuffle else "downscale_factor"
    if x.ndim < 3:
        raise RuntimeError(
            f"{op} expects input to have at least 3 dimensions, but got input with {x.ndim} "
            "dimension(s)"
        )
    if factor <= 0:
        raise RuntimeError(f"{op} expects a positive {word}, but got {factor}")
    c, h, w = x.shape[-3:]
    if shuffle and c % (factor * factor):
        raise RuntimeError(
            f"pixel_shuffle expects its input's 'channel' dimension to be divisible by the "
            f"square of upscale_factor, but input.size(-3)={c} is not divisible by "
            f"{factor * factor}"
        )
    if not shuffle and (h % factor or w % factor):
        which, n = ("height", h) if h % factor else ("width", w)
        raise RuntimeError(
            f"pixel_unshuffle expects {which} to be divisible by downscale_factor, but "
            f"input.size({-2 if which == 'height' else -1})={n} is not divisible by {factor}"
        )


def _shuffled_shape(shape, r, shuffle):
    *lead, c, h, w = shape
    if shuffle:
        return (*lead, c // (r * r), h * r, w * r)
    return (*lead, c * r * r, h // r, w // r)


def _rearrange(xp, arr, r, shuffle):
    *lead, c, h, w = arr.shape
    n = len(lead)
    if shuffle:  # [.., C, r, r, H, W] -> [.., C, H, r, W, r]
        v = arr.reshape(*lead, c // (r * r), r, r, h, w)
        order = (*range(n), n, n + 3, n + 1, n + 4, n + 2)
        return v.transpose(order)
    # [.., C, H, r, W, r] -> [.., C, r, r, H, W]
    v = arr.reshape(*lead, c, h // r, r, w // r, r)
    order = (*range(n), n, n + 2, n + 4, n + 1, n + 3)
    return v.transpose(order)


class PixelShuffle(Function):
    shuffle = True

    def forward(self, x, out=None, factor=1):
        _check(x, factor, self.shuffle)
        self.factor, self.in_shape = factor, tuple(x.shape)
        shape = _shuffled_shape(self.in_shape, factor, self.shuffle)
        y = result_buffer(out, shape, x._dtype, x._device, "pixel_shuffle")
        if _live(x._device):
            xp = kernels.xp_of(x)
            y._data[...] = _rearrange(xp, x._data, factor, self.shuffle).reshape(shape)
        return y

    def backward(self, g):
        gx = kernels.empty(self.in_shape, g._dtype, g._device)
        if _live(g._device):
            xp = kernels.xp_of(g)
            back = _rearrange(xp, g._data, self.factor, not self.shuffle)
            gx._data[...] = back.reshape(self.in_shape)
        return (gx,)

    def name(self):
        return "PixelShuffleBackward0" if self.shuffle else "PixelUnshuffleBackward0"


class PixelUnshuffle(PixelShuffle):
    shuffle = False


def pixel_shuffle(input, upscale_factor):
    return PixelShuffle.apply(input, op="pixel_shuffle", factor=int(upscale_factor))


def pixel_unshuffle(input, downscale_factor):
    return PixelUnshuffle.apply(input, op="pixel_unshuffle", factor=int(downscale_factor))
