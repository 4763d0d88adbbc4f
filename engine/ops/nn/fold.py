"""F.unfold (im2col) and F.fold (col2im), and nn.Unfold / nn.Fold: torch's native ops, each the
other's backward (Im2ColBackward0, Col2ImBackward0).

Memory, as torch's kernels (cpu and cuda alike): the result starts as `empty_like(input)` and is
then resized to its shape, so an input-sized block is made first; a bigger result gets a block
of its own (the first one freed), a smaller one lives in the input-sized block (its storage
stays that size). A non-contiguous input is first copied contiguous (after that first block),
the copy freed when the op returns. Neither node keeps a tensor.
"""

from __future__ import annotations

import itertools
import math

from engine import kernels
from engine.autograd.function import Function
from engine.backends.meta import MetaArray
from engine.ops.nn.common import _batched, _live
from engine.tensor import Tensor


def _pair(v, name):
    if isinstance(v, (tuple, list)):
        if len(v) != 2:
            raise RuntimeError(f"It is expected {name} equals to 2, but got size {len(v)}")
        return int(v[0]), int(v[1])
    return int(v), int(v)


def _check_params(kernel, dilation, padding, stride) -> None:
    """torch's col2im/im2col_shape_check parameter checks, in its order and words."""
    (kh, kw), (dh, dw), (ph, pw), (sh, sw) = kernel, dilation, padding, stride
    if kh <= 0 or kw <= 0:
        raise RuntimeError(
            f"kernel size should be greater than zero, but got kernel_height: {kh} "
            f"kernel_width: {kw}"
        )
    if sh <= 0 or sw <= 0:
        raise RuntimeError(
            f"stride should be greater than zero, but got stride_height: {sh} stride_width: {sw}"
        )
    if dh <= 0 or dw <= 0:
        raise RuntimeError(
            f"dilation should be greater than zero, but got dilation_height: {dh} "
            f"dilation_width: {dw}"
        )
    if ph < 0 or pw < 0:
        raise RuntimeError(
            f"padding should be non-negative, but got pad_height: {ph} pad_width: {pw}"
        )


def _blocks(size, k, d, p, s) -> int:
    return (size + 2 * p - (d * (k - 1) + 1)) // s + 1


def _resized(first: Tensor, out_shape: tuple) -> Tensor:
    """`first` (an empty_like of the input) resized to out_shape (the module's docstring): a
    new block when out_shape needs more, else a tensor of out_shape in first's storage."""
    n_out = math.prod(out_shape)
    if n_out > math.prod(first.shape):
        return kernels.empty(out_shape, first._dtype, first._device)
    data = first._data
    if isinstance(data, MetaArray):
        arr = MetaArray.contiguous(tuple(out_shape), data.dtype)
    else:
        arr = data.reshape(-1)[:n_out].reshape(out_shape)
    return Tensor._make(arr, first._storage, first._dtype, first._device)


def _contiguous(x: Tensor):
    """(array, owner): x's values C-contiguous; a charged copy when x is not."""
    if x.is_contiguous():
        return x._data, None
    c = kernels.copy_new(x)
    return c._data, c


def _im2col(xp, xd, out, geo, dtype, dev) -> None:
    """out [N, C*kh*kw, L] <- the sliding blocks of xd [N, C, H, W] (a zero-padded copy of xd
    as workspace: torch's kernel reads in bounds, so it is not charged)."""
    n, c, h, w = xd.shape
    (kh, kw), (dh, dw), (ph, pw), (sh, sw), (oh, ow) = geo
    padded = kernels.Scratch((n, c, h + 2 * ph, w + 2 * pw), dtype, dev)
    pd = padded.data
    pd.fill(0)
    pd[:, :, ph : ph + h, pw : pw + w] = xd
    st = pd.strides
    shape = (n, c, kh, kw, oh, ow)
    strides = (st[0], st[1], st[2] * dh, st[3] * dw, st[2] * sh, st[3] * sw)
    xp.copyto(out.reshape(shape), kernels.as_strided(pd, shape, strides))
    padded.release()


def _col2im(xp, cols, out, geo, dtype, dev) -> None:
    """out [N, C, H, W] <- the sum of the blocks cols [N, C*kh*kw, L] at their places."""
    n, c, h, w = out.shape
    (kh, kw), (dh, dw), (ph, pw), (sh, sw), (oh, ow) = geo
    padded = kernels.Scratch((n, c, h + 2 * ph, w + 2 * pw), dtype, dev)
    pd = padded.data
    pd.fill(0)
    c6 = cols.reshape(n, c, kh, kw, oh, ow)
    for i, j in itertools.product(range(kh), range(kw)):
        rows = slice(i * dh, i * dh + sh * (oh - 1) + 1, sh)
        cols_ = slice(j * dw, j * dw + sw * (ow - 1) + 1, sw)
        region = pd[:, :, rows, cols_]
        xp.add(region, c6[:, :, i, j], out=region)
    xp.copyto(out, pd[:, :, ph : ph + h, pw : pw + w])
    padded.release()


def _to_cols(x: Tensor, geo, image_shape) -> Tensor:
    """im2col of x [N, C, H, W] or [C, H, W]: torch's blocks (the module's docstring)."""
    (kh, kw), _, _, _, (oh, ow) = geo
    c = image_shape[-3]
    out_shape = tuple(image_shape[:-3]) + (c * kh * kw, oh * ow)
    first = kernels.empty(tuple(x.shape), x._dtype, x._device)  # empty_like(input)
    src, owner = _contiguous(x)
    y = _resized(first, out_shape)
    del first
    if _live(x._device):
        xp = kernels.xp_of(x)
        _im2col(xp, _batched(src, 4), _batched(y._data, 3), geo, x._dtype, x._device)
    del owner
    return y


def _to_image(cols: Tensor, geo, image_shape) -> Tensor:
    """col2im of cols [N, C*kh*kw, L] or [C*kh*kw, L] into image_shape."""
    first = kernels.empty(tuple(cols.shape), cols._dtype, cols._device)  # empty_like(input)
    src, owner = _contiguous(cols)
    y = _resized(first, tuple(image_shape))
    del first
    if _live(cols._device):
        xp = kernels.xp_of(cols)
        _col2im(xp, _batched(src, 3), _batched(y._data, 4), geo, cols._dtype, cols._device)
    del owner
    return y


class Im2Col(Function):
    def forward(self, x, out=None, geo=None):
        self.geo, self.x_shape = geo, tuple(x.shape)
        return _to_cols(x, geo, self.x_shape)

    def backward(self, g):
        return (_to_image(g, self.geo, self.x_shape),)

    def name(self):
        return "Im2ColBackward0"


class Col2Im(Function):
    def forward(self, cols, out=None, geo=None, image_shape=()):
        self.geo = geo
        return _to_image(cols, geo, image_shape)

    def backward(self, g):
        return (_to_cols(g, self.geo, tuple(g.shape)),)

    def name(self):
        return "Col2ImBackward0"


def unfold(input, kernel_size, dilation=1, padding=0, stride=1):
    """F.unfold: the sliding blocks of a [N, C, H, W] (or [C, H, W]) input as columns
    [N, C * kh * kw, L]."""
    kernel, dil = _pair(kernel_size, "kernel_size"), _pair(dilation, "dilation")
    pad, st = _pair(padding, "padding"), _pair(stride, "stride")
    if input.ndim < 3:
        raise IndexError(
            f"Dimension out of range (expected to be in range of [{-input.ndim}, "
            f"{input.ndim - 1}], but got {input.ndim})"
        )
    if input.ndim != 4 and input.ndim != 3:
        raise RuntimeError(
            "Expected 3D or 4D (batch mode) tensor with possibly 0 batch size and other non-zero "
            f"dimensions for input, but got: {list(input.shape)}"
        )
    _check_params(kernel, dil, pad, st)
    h, w = input.shape[-2:]
    blocks = tuple(
        _blocks(n, k, d, p, s) for n, k, d, p, s in zip((h, w), kernel, dil, pad, st, strict=True)
    )
    if blocks[0] < 1 or blocks[1] < 1:
        raise RuntimeError(
            f"Given input with spatial size ({h}, {w}), kernel_size={kernel}, dilation={dil}, "
            f"padding={pad}, calculated shape of the array of sliding blocks as {blocks}, but "
            "its components must be at least one."
        )
    return Im2Col.apply(input, op="unfold", geo=(kernel, dil, pad, st, blocks))


def fold(input, output_size, kernel_size, dilation=1, padding=0, stride=1):
    """F.fold: columns [N, C * kh * kw, L] (or [C * kh * kw, L]) summed back into an image
    [N, C, *output_size]."""
    size, kernel = _pair(output_size, "output_size"), _pair(kernel_size, "kernel_size")
    dil, pad, st = _pair(dilation, "dilation"), _pair(padding, "padding"), _pair(stride, "stride")
    if input.ndim not in (2, 3):
        raise RuntimeError(
            "Expected 2D or 3D (batch mode) tensor for input with possibly 0 batch size and "
            f"non-zero dimensions for input, but got: {list(input.shape)}"
        )
    _check_params(kernel, dil, pad, st)
    ch, length = input.shape[-2:]
    if ch % (kernel[0] * kernel[1]):
        raise RuntimeError(
            "Expected size of input's dimension 1 to be divisible by the product of "
            f"kernel_size, but got input.size(1)={ch} and kernel_size={kernel}."
        )
    blocks = tuple(
        _blocks(n, k, d, p, s) for n, k, d, p, s in zip(size, kernel, dil, pad, st, strict=True)
    )
    if blocks[0] * blocks[1] != length:
        raise RuntimeError(
            f"Given output_size={size}, kernel_size={kernel}, dilation={dil}, padding={pad}, "
            f"stride={st}, expected size of input's dimension 2 to match the calculated number "
            f"of sliding blocks {blocks[0]} * {blocks[1]} = {blocks[0] * blocks[1]}, but got "
            f"input.size(2)={length}."
        )
    image = tuple(input.shape[:-2]) + (ch // (kernel[0] * kernel[1]),) + size
    return Col2Im.apply(input, op="fold", geo=(kernel, dil, pad, st, blocks), image_shape=image)
