"""Pooling: max_pool2d, avg_pool2d, adaptive_avg_pool2d.

Each takes a batched [N, C, H, W] or an unbatched [C, H, W] input in one node, as torch's
kernels do (no unsqueeze/squeeze around it); the kernels see the unbatched one as N = 1."""

from __future__ import annotations

import numpy as np

from engine import dtypes, kernels
from engine.autograd.function import Function
from engine.ops.common import result_buffer
from engine.ops.nn.common import _batched, _live, _pair, _reshaped, _sl, _span


def pool_out_size(size, k, s, p, d, ceil_mode):
    """PyTorch's pooling_output_shape."""
    out = (size + 2 * p - d * (k - 1) - 1 + (s - 1 if ceil_mode else 0)) // s + 1
    if ceil_mode and (out - 1) * s >= size + p:
        out -= 1
    return out


def _pool_geometry(x, kernel_size, stride, padding, dilation, ceil_mode, opname):
    if x.ndim not in (3, 4):
        if opname == "max_pool2d":
            raise RuntimeError("non-empty 3D or 4D (batch mode) tensor expected for input")
        if x.ndim < 3:
            raise IndexError(
                f"Dimension out of range (expected to be in range of [{-x.ndim}, {x.ndim - 1}], "
                "but got -3)"
            )
        raise RuntimeError(
            "Expected 3D or 4D (batch mode) tensor with optional 0 dim batch size for input, "
            f"but got:{list(x.shape)}"
        )
    kh, kw = _pair(kernel_size, "kernel_size")
    sh, sw = _pair(stride if stride not in (None, ()) else (kh, kw), "stride")
    ph, pw = _pair(padding, "padding")
    dh, dw = _pair(dilation, "dilation")
    # PyTorch's pooling checks, in its order and words (pool2d_shape_check and callers)
    if sh == 0 or sw == 0:
        raise RuntimeError("stride should not be zero")
    if kh <= 0 or kw <= 0:
        raise RuntimeError(f"kernel size should be greater than zero, but got kH: {kh} kW: {kw}")
    if ph < 0 or pw < 0:
        raise RuntimeError(f"pad must be non-negative, but got pad: {min(ph, pw)}")
    if sh < 0 or sw < 0:
        raise RuntimeError(f"stride should be greater than zero, but got dH: {sh} dW: {sw}")
    if dh <= 0 or dw <= 0:
        raise RuntimeError(
            f"dilation should be greater than zero, but got dilationH: {dh} dilationW: {dw}"
        )
    if ph > (dh * (kh - 1) + 1) // 2 or pw > (dw * (kw - 1) + 1) // 2:
        raise RuntimeError(
            f"pad should be at most half of effective kernel size, but got pad={max(ph, pw)}, "
            f"kernel_size={max(kh, kw)} and dilation={max(dh, dw)}"
        )
    n, c, h, w = x.shape if x.ndim == 4 else (1, *x.shape)
    oh = pool_out_size(h, kh, sh, ph, dh, ceil_mode)
    ow = pool_out_size(w, kw, sw, pw, dw, ceil_mode)
    if oh < 1 or ow < 1:
        raise RuntimeError(
            f"Given input size: ({c}x{h}x{w}). Calculated output size: ({c}x{oh}x{ow}). "
            "Output size is too small"
        )
    return (n, c, h, w, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow)


# Max pooling compares and selects through bool masks; they cover a chunk of whole planes and are
# bounded by this many elements (256 KiB, not charged: PyTorch's fused kernel needs none).
_MASK_ELEMS = 1 << 18


def _plane_chunks(planes: int, plane_elems: int):
    step = max(1, _MASK_ELEMS // max(plane_elems, 1))
    return [(p0, min(p0 + step, planes)) for p0 in range(0, planes, step)], min(step, planes)


def _max_offsets(geo):
    """Per kernel offset (i, j) that reaches the input: the outputs it covers (rows lh:hh,
    columns lw:hw), the input slices they read, and k = i * kw + j."""
    n, c, h, w, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow = geo
    out = []
    for i in range(kh):
        lh, hh, h0 = _span(oh, sh, ph, i * dh, h)
        if hh <= lh:
            continue
        for j in range(kw):
            lw, hw, w0 = _span(ow, sw, pw, j * dw, w)
            if hw <= lw:
                continue
            out.append((lh, hh, lw, hw, _sl(h0, hh - lh, sh), _sl(w0, hw - lw, sw), i * kw + j))
    return out


def _tiled(geo) -> bool:
    """Windows that tile the input: kernel == stride, no padding or dilation, every window
    whole (PyTorch's common 2x2 stride-2 pool). They do not overlap."""
    n, c, h, w, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow = geo
    return (
        (kh, kw) == (sh, sw) and ph == pw == 0 and dh == dw == 1 and oh * kh <= h and ow * kw <= w
    )


def _tiled_max(xp, x3, y3, i3, geo, q0: int, q1: int) -> bool:
    """Max pooling of planes q0..q1 over tiling windows, without masked writes: the values
    start as each window's first entry, then every other position k of the window (row-major,
    as PyTorch's kernel scans it) takes over where strictly greater (np.maximum: no NaN here)
    and notes its position as one byte: code = max(code, k * greater), since k only grows.
    The flat indices are computed from those bytes at the end. The first maximum wins, as in
    torch. Returns False (having written nothing) when the planes hold a NaN: those take the
    general path, where the last NaN wins as in torch. The bool and byte temporaries cover
    chunks of planes (_MASK_ELEMS elements)."""
    n, c, h, w, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow = geo
    if xp.isnan(xp.max(x3[q0:q1])):
        return False
    hh, ww = oh * kh, ow * kw
    chunks, step = _plane_chunks(q1 - q0, oh * ow)
    mask = xp.empty((step, oh, ow), dtype=bool)
    code_dtype = np.uint8 if kh * kw < 256 else np.int64
    code = xp.empty((step, oh, ow), dtype=code_dtype)
    taken = xp.empty((step, oh, ow), dtype=code_dtype)
    rows = (xp.arange(oh) * kh * w)[:, None]
    cols = (xp.arange(ow) * kw)[None, :]
    for p0, p1 in chunks:
        p0, p1 = p0 + q0, p1 + q0
        yr = y3[p0:p1]
        cr = code[: p1 - p0]
        m = mask[: p1 - p0]
        tk = taken[: p1 - p0]
        yr[...] = x3[p0:p1, 0:hh:kh, 0:ww:kw]
        cr.fill(0)
        for k in range(1, kh * kw):
            i, j = divmod(k, kw)
            v = x3[p0:p1, i:hh:kh, j:ww:kw]
            xp.greater(v, yr, out=m)
            xp.copyto(yr, v, where=m)  # the value at the index, as torch (a tie of +-0 too)
            xp.multiply(m, code_dtype(k), out=tk)
            xp.maximum(cr, tk, out=cr)
        ir = i3[p0:p1]
        xp.floor_divide(cr, kw, out=ir)  # the window row
        ir *= w
        ir += rows + cols
        ir += cr % kw  # the window column
    return True


def _general_max(xp, x3, y3, i3, geo, q0: int, q1: int) -> None:
    """Max pooling of planes q0..q1, any geometry, without masked writes: -inf to start, then
    per kernel offset k (row-major, as torch scans a window) the values take np.maximum over
    the offset's in-bounds outputs and k + 1 is kept as one byte where the offset took over
    (strictly greater, or a NaN: the last NaN wins, as torch; np.maximum keeps a NaN once in):
    code = max(code, (k + 1) * took), since k only grows. The flat indices are computed from
    the codes at the end; where no offset took over (a window of -inf) the index is the
    window's first in-bounds position, as torch's. The temporaries cover chunks of planes
    (_MASK_ELEMS elements)."""
    n, c, h, w, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow = geo
    hs = np.arange(oh) * sh - ph
    ws = np.arange(ow) * sw - pw
    base = xp.asarray(hs[:, None] * w + ws[None, :])  # window origin (maybe in the padding)
    hs0 = np.where(hs < 0, hs + (-hs + dh - 1) // dh * dh, hs)
    ws0 = np.where(ws < 0, ws + (-ws + dw - 1) // dw * dw, ws)
    first = xp.asarray(hs0[:, None] * w + ws0[None, :])  # first in-bounds position
    y3[q0:q1].fill(-np.inf)
    code_dtype = np.uint8 if kh * kw < 255 else np.int32
    nan_possible = bool(xp.isnan(xp.max(x3[q0:q1])))
    chunks, step = _plane_chunks(q1 - q0, oh * ow)
    mask = xp.empty((step, oh, ow), dtype=bool)
    nan = xp.empty((step, oh, ow), dtype=bool) if nan_possible else None
    code = xp.empty((step, oh, ow), dtype=code_dtype)
    taken = xp.empty((step, oh, ow), dtype=code_dtype)
    col = xp.empty((step, oh, ow), dtype=np.int64)
    offsets = _max_offsets(geo)
    for p0, p1 in chunks:
        p0, p1 = p0 + q0, p1 + q0
        cr = code[: p1 - p0]
        cr.fill(0)
        for lh, hh, lw, hw, hsl, wsl, k in offsets:
            v = x3[p0:p1, hsl, wsl]
            yr = y3[p0:p1, lh:hh, lw:hw]
            m = mask[: p1 - p0, lh:hh, lw:hw]
            xp.greater(v, yr, out=m)
            if nan is not None:
                nm = nan[: p1 - p0, lh:hh, lw:hw]
                xp.not_equal(v, v, out=nm)  # NaN wins, as in torch
                xp.logical_or(m, nm, out=m)
            xp.copyto(yr, v, where=m)  # the value at the index, as torch (a tie of +-0 too)
            tk = taken[: p1 - p0, lh:hh, lw:hw]
            xp.multiply(m, code_dtype(k + 1), out=tk)
            cs = cr[: p1 - p0, lh:hh, lw:hw]
            xp.maximum(cs, tk, out=cs)
        # code k + 1 -> the flat index of kernel offset (k // kw, k % kw) in that window
        ir = i3[p0:p1]
        cl = col[: p1 - p0]
        none = mask[: p1 - p0]
        xp.equal(cr, 0, out=none)
        xp.subtract(cr, 1, out=ir, dtype=np.int64, casting="unsafe")
        xp.remainder(ir, kw, out=cl)
        xp.floor_divide(ir, kw, out=ir)
        ir *= dh * w
        cl *= dw
        ir += cl
        ir += base
        xp.copyto(ir, first, where=none)


class MaxPool2d(Function):
    """max_pool2d_with_indices: (values, int64 flat indices into H*W); gradient to the argmax."""

    num_outputs = 2
    retain_inputs = (0,)  # torch's node keeps self (its values unread: the indices say all)

    def forward(
        self, x, out=None, kernel_size=2, stride=None, padding=0, dilation=1, ceil_mode=False
    ):
        geo = _pool_geometry(x, kernel_size, stride, padding, dilation, ceil_mode, "max_pool2d")
        n, c, h, w, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow = geo
        self.geom, self.x_shape = geo, x.shape
        dev = x._device
        out_shape = (n, c, oh, ow) if x.ndim == 4 else (c, oh, ow)
        y = kernels.empty(out_shape, x._dtype, dev)
        idx = kernels.empty(out_shape, dtypes.int64, dev)
        self.tiled = _tiled(geo)
        if _live(dev):
            xp = kernels.xp_of(x)
            x3, keep = _reshaped(x, (n * c, h, w))
            y3, i3 = y._data.reshape(n * c, oh, ow), idx._data.reshape(n * c, oh, ow)

            if kernels.native_takes(x3, y3, i3):
                # (its own threads take whole planes; a plane's result does not depend on it)
                threads = kernels.native_threads(n * c * h * w)
                kernels.native.max_pool2d(x3, y3, i3, n * c, *geo[2:], threads)
            elif not (self.tiled and _tiled_max(xp, x3, y3, i3, geo, 0, n * c)):
                _general_max(xp, x3, y3, i3, geo, 0, n * c)
            del keep
        self.save(indices=idx)
        return y, idx

    def backward(self, g, g_idx=None):
        n, c, h, w, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow = self.geom
        (_,) = self.saved_tensors  # (torch unpacks self: an in-place change is an error)
        idx = self.kept("indices")
        dev = g._device
        gx = kernels.empty(self.x_shape, g._dtype, dev)  # (zeroed below: torch's zeros)
        if not _live(dev):
            return (gx,)
        xp = kernels.xp_of(g)
        g2, gkeep = _reshaped(g, (n * c, oh * ow))
        i2 = idx._data.reshape(n * c, oh * ow)
        gx2 = gx._data.reshape(n * c, h * w)
        if kernels.native_takes(g2, i2, gx2):
            # engine._native: the same sums in the same order as the numpy forms below, each
            # plane zeroed just before its scatter (one pass over grad_input, not two)
            threads = kernels.native_threads(n * c * h * w)
            kernels.native.max_pool2d_backward(
                g2, i2, gx2, n * c, h * w, oh * ow, not self.tiled, threads, True
            )
            del gkeep
            return (gx,)
        gx._data.fill(0)
        if self.tiled:
            # windows that do not overlap: each input gets at most one gradient, so the
            # gradient is scattered to the argmax positions in one pass
            xp.put_along_axis(gx2, i2, g2, axis=1)
        else:
            # windows that overlap: an input may be the maximum of several, so the gradients
            # are added at the argmax positions one after the other in output order (ufunc.at),
            # as torch's kernel adds them; the flat positions cover a chunk of planes at a time
            gflat = gx._data.reshape(-1)
            chunks, step = _plane_chunks(n * c, oh * ow)
            pos = xp.empty((step, oh * ow), dtype=np.int64)
            plane = (xp.arange(step, dtype=np.int64) * (h * w))[:, None]
            for p0, p1 in chunks:
                pr = pos[: p1 - p0]
                xp.add(i2[p0:p1], plane[: p1 - p0], out=pr)
                pr += p0 * h * w
                xp.add.at(gflat, pr.reshape(-1), g2[p0:p1].reshape(-1))
        del gkeep
        return (gx,)

    def name(self):
        return "MaxPool2DWithIndicesBackward0"


def _avg_divisor(geo, count_include_pad, divisor_override):
    """The divisor of every output position: a number or an [OH, OW] array (PyTorch's rule)."""
    n, c, h, w, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow = geo
    if divisor_override:
        return float(divisor_override)

    def extent(n_out, k, s, p, size):
        start = np.arange(n_out) * s - p
        end = np.minimum(start + k, size + p)
        full = end - start
        if not count_include_pad:
            full = np.minimum(end, size) - np.maximum(start, 0)
        return full

    eh = extent(oh, kh, sh, ph, h)
    ew = extent(ow, kw, sw, pw, w)
    div = eh[:, None] * ew[None, :]
    if (div == div.flat[0]).all():
        return float(div.flat[0])
    return div.astype(np.float64)


class AvgPool2d(Function):
    retain_inputs = (0,)  # torch's node keeps self (for its shape)

    def forward(
        self,
        x,
        out=None,
        kernel_size=2,
        stride=None,
        padding=0,
        ceil_mode=False,
        count_include_pad=True,
        divisor_override=None,
    ):
        geo = _pool_geometry(x, kernel_size, stride, padding, 1, ceil_mode, "avg_pool2d")
        n, c, h, w, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow = geo
        self.geom, self.x_shape = geo, x.shape
        self.div = _avg_divisor(geo, count_include_pad, divisor_override)
        dev = x._device
        dtype = x._dtype
        out_shape = (n, c, oh, ow) if x.ndim == 4 else (c, oh, ow)
        y = result_buffer(out, out_shape, dtype, dev, "avg_pool2d")
        if _live(dev):
            xp = kernels.xp_of(x)
            yd, xd = _batched(y._data, 4), _batched(x._data, 4)
            yd.fill(0)
            for lh, hh, lw, hw, hsl, wsl in _offsets(geo):
                yr = yd[:, :, lh:hh, lw:hw]
                xp.add(yr, xd[:, :, hsl, wsl], out=yr)
            div = self.div if isinstance(self.div, float) else xp.asarray(self.div.astype(dtype.np))
            xp.true_divide(yd, div, out=yd)
        return y

    def backward(self, g):
        (_,) = self.saved_tensors  # (torch unpacks self: an in-place change is an error)
        dev = g._device
        gx = kernels.zeros(self.x_shape, g._dtype, dev)
        if _live(dev):
            xp = kernels.xp_of(g)
            gxd, gd4 = _batched(gx._data, 4), _batched(g._data, 4)
            if isinstance(self.div, float):
                # one divisor for every window: scatter g, then scale (no temporary)
                for lh, hh, lw, hw, hsl, wsl in _offsets(self.geom):
                    dst = gxd[:, :, hsl, wsl]
                    xp.add(dst, gd4[:, :, lh:hh, lw:hw], out=dst)
                xp.multiply(gxd, 1.0 / self.div, out=gxd)
            else:
                # per-window divisors (count_include_pad=False, ceil_mode): g / divisor in a
                # workspace torch's kernel does not allocate (it divides per element): scratch
                gd = kernels.Scratch(gd4.shape, g._dtype, dev)
                xp.true_divide(gd4, xp.asarray(self.div.astype(g._dtype.np)), out=gd.data)
                for lh, hh, lw, hw, hsl, wsl in _offsets(self.geom):
                    dst = gxd[:, :, hsl, wsl]
                    xp.add(dst, gd.data[:, :, lh:hh, lw:hw], out=dst)
                gd.release()
        return (gx,)

    def name(self):
        return "AvgPool2DBackward0"


def _offsets(geo):
    """Every kernel offset that reads in-bounds input: its output ranges and input slices."""
    n, c, h, w, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow = geo
    for i in range(kh):
        lh, hh, h0 = _span(oh, sh, ph, i * dh, h)
        if hh <= lh:
            continue
        for j in range(kw):
            lw, hw, w0 = _span(ow, sw, pw, j * dw, w)
            if hw <= lw:
                continue
            yield lh, hh, lw, hw, _sl(h0, hh - lh, sh), _sl(w0, hw - lw, sw)


def _adaptive_ranges(size, n_out):
    return [((i * size) // n_out, -(-((i + 1) * size) // n_out)) for i in range(n_out)]


class AdaptiveAvgPool2d(Function):
    retain_inputs = (0,)  # torch's node keeps self (for its shape)

    def forward(self, x, out=None, output_size=(1, 1)):
        if x.ndim not in (3, 4):
            raise RuntimeError(
                f"adaptive_avg_pool2d(): Expected 3D or 4D tensor, but got {list(x.shape)}"
            )
        n, c, h, w = x.shape if x.ndim == 4 else (1, *x.shape)
        oh, ow = output_size
        oh = h if oh is None else oh
        ow = w if ow is None else ow
        self.x_shape, self.out_hw = x.shape, (oh, ow)
        dev = x._device
        out_shape = (n, c, oh, ow) if x.ndim == 4 else (c, oh, ow)
        y = result_buffer(out, out_shape, x._dtype, dev, "adaptive_avg_pool2d")
        if _live(dev):
            xp = kernels.xp_of(x)
            xd, yd = _batched(x._data, 4), _batched(y._data, 4)
            if (oh, ow) == (1, 1):
                xp.mean(xd, axis=(2, 3), keepdims=True, out=yd)
            else:
                for a, (h0, h1) in enumerate(_adaptive_ranges(h, oh)):
                    for b, (w0, w1) in enumerate(_adaptive_ranges(w, ow)):
                        xp.mean(xd[:, :, h0:h1, w0:w1], axis=(2, 3), out=yd[:, :, a, b])
        return y

    def backward(self, g):
        (_,) = self.saved_tensors  # (torch unpacks self: an in-place change is an error)
        h, w = self.x_shape[-2:]
        oh, ow = self.out_hw
        dev = g._device
        if (oh, ow) == (1, 1):
            gx = kernels.empty(self.x_shape, g._dtype, dev)
            if _live(dev):
                xp = kernels.xp_of(g)
                xp.multiply(xp.broadcast_to(g._data, self.x_shape), 1.0 / (h * w), out=gx._data)
            return (gx,)
        gx = kernels.zeros(self.x_shape, g._dtype, dev)
        if _live(dev):
            xp = kernels.xp_of(g)
            gxd, gd4 = _batched(gx._data, 4), _batched(g._data, 4)
            for a, (h0, h1) in enumerate(_adaptive_ranges(h, oh)):
                for b, (w0, w1) in enumerate(_adaptive_ranges(w, ow)):
                    dst = gxd[:, :, h0:h1, w0:w1]
                    scale = 1.0 / ((h1 - h0) * (w1 - w0))
                    xp.add(dst, gd4[:, :, a : a + 1, b : b + 1] * scale, out=dst)
        return (gx,)

    def name(self):
        return "AdaptiveAvgPool2DBackward0"


def max_pool2d(
    input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False
):
    y, idx = MaxPool2d.apply(
        input,
        op="max_pool2d",
        kernel_size=kernel_size,
        stride=stride,
        padding=padding,
        dilation=dilation,
        ceil_mode=ceil_mode,
    )
    return (y, idx) if return_indices else y


def avg_pool2d(
    input,
    kernel_size,
    stride=None,
    padding=0,
    ceil_mode=False,
    count_include_pad=True,
    divisor_override=None,
):
    return AvgPool2d.apply(
        input,
        op="avg_pool2d",
        kernel_size=kernel_size,
        stride=stride,
        padding=padding,
        ceil_mode=ceil_mode,
        count_include_pad=count_include_pad,
        divisor_override=divisor_override,
    )


def adaptive_avg_pool2d(input, output_size):
    if isinstance(output_size, int):
        size = (output_size, output_size)
    else:
        size = tuple(output_size)
        if len(size) == 1:
            size = (size[0], size[0])
    if size == (1, 1) and input.ndim in (3, 4):  # torch's kernel: the mean over H and W
        return input.mean((-1, -2), keepdim=True)
    return AdaptiveAvgPool2d.apply(input, op="adaptive_avg_pool2d", output_size=size)


# ---------------------------------------------------------------------------------------------
# 1-D pooling: torch's composites, x.unsqueeze(-2) through the 2-D kernel, then squeeze(-2)
# (UnsqueezeBackward0, the 2-D node, SqueezeBackward1: its memory is the 2-D op's)
# ---------------------------------------------------------------------------------------------
def _one(v, name):
    if isinstance(v, (tuple, list)):
        if len(v) != 1:
            raise RuntimeError(f"{name}: {name.split('_')[0]} must be a single int")
        return int(v[0])
    return int(v)


def _check_1d(input, op, max_style):
    if input.ndim not in (2, 3):
        if max_style:
            raise RuntimeError(
                f"{op}: Expected 2D or 3D (batch mode) tensor with optional 0 dim batch size for "
                f"input, but got:{list(input.shape)}"
            )
        raise RuntimeError(
            f"Expected 2 to 3 dimensions, but got {input.ndim}-dimensional tensor for argument "
            f"#1 'self' (while checking arguments for {op})"
        )


def max_pool1d(
    input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False
):
    _check_1d(input, "max_pool1d", True)
    k = _one(kernel_size, "kernel_size")
    s = k if stride is None or stride == () or stride == [] else _one(stride, "stride")
    y, idx = max_pool2d(
        input.unsqueeze(-2),
        (1, k),
        (1, s),
        (0, _one(padding, "padding")),
        (1, _one(dilation, "dilation")),
        ceil_mode,
        return_indices=True,
    )
    if return_indices:
        return y.squeeze(-2), idx.squeeze(-2)
    return y.squeeze(-2)


def avg_pool1d(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True):
    _check_1d(input, "avg_pool1d", False)
    k = _one(kernel_size, "kernel_size")
    s = k if stride is None or stride == () or stride == [] else _one(stride, "stride")
    y = avg_pool2d(
        input.unsqueeze(-2), (1, k), (1, s), (0, _one(padding, "padding")), ceil_mode,
        count_include_pad,
    )  # fmt: skip
    return y.squeeze(-2)


def adaptive_avg_pool1d(input, output_size):
    _check_1d(input, "adaptive_avg_pool1d", False)
    return adaptive_avg_pool2d(input.unsqueeze(-2), (1, _one(output_size, "output_size"))).squeeze(
        -2
    )
