"""3-D pooling (max_pool3d, avg_pool3d, adaptive_avg_pool3d, adaptive_max_pool3d) and adaptive
max pooling in 1-D and 2-D, as torch's CPU kernels compute and allocate them.

Each kernel works on planes: the input viewed as [P, *spatial] (P = N*C, or C unbatched), so a
batched and an unbatched input take the same node, as in torch. What is charged is torch's: the
output (and the int64 indices of the max pools, which the node keeps for backward), and in
backward the input-sized gradient alone. Masks and per-offset index grids are temporaries that
torch's fused loops keep in registers: plain arrays, not charged.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from engine import dtypes, kernels
from engine.autograd.function import Function
from engine.ops.common import result_buffer
from engine.ops.nn.common import _live, _reshaped, _sl, _span
from engine.ops.nn.pool import _check_1d, _one, pool_out_size


def _three(v, msg):
    if isinstance(v, (tuple, list)):
        if len(v) == 1:
            return (int(v[0]),) * 3
        if len(v) != 3:
            raise RuntimeError(msg)
        return tuple(int(e) for e in v)
    return (int(v),) * 3


def _pool3d_geometry(x, kernel_size, stride, padding, dilation, ceil_mode, op):
    """(planes, sp, k, s, p, d, out) with torch's checks, in its order and words."""
    k = _three(
        kernel_size, f"{op}: kernel_size must either be a single int, or a tuple of three ints"
    )
    if stride is None or (isinstance(stride, (tuple, list)) and len(stride) == 0):
        s = k
    else:
        s = _three(
            stride, f"{op}: stride must either be omitted, a single int, or a tuple of three ints"
        )
    p = _three(padding, f"{op}: padding must either be a single int, or a tuple of three ints")
    d = _three(dilation, f"{op}: dilation must be either a single int, or a tuple of three ints")
    if any(v == 0 for v in s):
        raise RuntimeError("stride should not be zero")
    if x.ndim not in (4, 5) or x.numel() == 0:
        raise RuntimeError("non-empty 4D or 5D (batch mode) tensor expected for input")
    if any(v <= 0 for v in k):
        raise RuntimeError(
            f"kernel size should be greater than zero, but got kT: {k[0]} kH: {k[1]} kW: {k[2]}"
        )
    if any(v < 0 for v in s):
        raise RuntimeError(
            f"stride should be greater than zero, but got dT: {s[0]} dH: {s[1]} dW: {s[2]}"
        )
    if any(v <= 0 for v in d):
        raise RuntimeError(
            f"dilation should be greater than zero, but got dilationT: {d[0]} dilationH: {d[1]} "
            f"dilationW: {d[2]}"
        )
    if any(pp < 0 for pp in p):
        raise RuntimeError(f"pad must be non-negative, but got pad: {min(p)}")
    if any(pp > (dd * (kk - 1) + 1) // 2 for pp, kk, dd in zip(p, k, d, strict=True)):
        raise RuntimeError(
            f"pad should be at most half of effective kernel size, but got pad={max(p)}, "
            f"kernel_size={max(k)} and dilation={max(d)}"
        )
    sp = tuple(x.shape[-3:])
    if op == "avg_pool3d" and any(sz + 2 * pp < kk for sz, pp, kk in zip(sp, p, k, strict=True)):
        raise RuntimeError(
            f"input image (T: {sp[0]} H: {sp[1]} W: {sp[2]}) smaller than kernel size "
            f"(kT: {k[0]} kH: {k[1]} kW: {k[2]})"
        )
    out = tuple(
        pool_out_size(sz, kk, ss, pp, dd, ceil_mode)
        for sz, kk, ss, pp, dd in zip(sp, k, s, p, d, strict=True)
    )
    if any(o < 1 for o in out):
        c = x.shape[-4]
        raise RuntimeError(
            f"Given input size: ({c}x{sp[0]}x{sp[1]}x{sp[2]}). Calculated output size: "
            f"({c}x{out[0]}x{out[1]}x{out[2]}). Output size is too small"
        )
    planes = math.prod(x.shape[:-3])
    return planes, sp, k, s, p, d, out


def _offsets(sp, k, s, p, d, out):
    """Every kernel offset (row-major) reaching the input: (output slices, input slices, input
    index arrays per dim)."""
    for offset in itertools.product(*(range(kk) for kk in k)):
        outs, ins, idx = [], [], []
        for o, n_out, ss, pp, dd, size in zip(offset, out, s, p, d, sp, strict=True):
            lo, hi, first = _span(n_out, ss, pp, o * dd, size)
            if hi <= lo:
                break
            outs.append(slice(lo, hi))
            ins.append(_sl(first, hi - lo, ss))
            idx.append(np.arange(first, first + (hi - lo) * ss, ss))
        else:
            yield tuple(outs), tuple(ins), idx


def _flat(idx, sp):
    """The flat positions (into the plane of size sp) of the grid of index arrays idx."""
    flat = idx[0]
    for a, size in zip(idx[1:], sp[1:], strict=True):
        flat = flat[..., None] * size + a
    return flat


def _scatter_add(xp, gx, idx, g, planes, plane_in):
    """gx [P, plane_in] += g at idx (per plane), in output order (torch's kernel's order)."""
    gflat = gx.reshape(-1)
    i2 = idx.reshape(planes, -1)
    pos = i2 + (xp.arange(planes, dtype=np.int64) * plane_in)[:, None]
    xp.add.at(gflat, pos.reshape(-1), g.reshape(-1))


class MaxPool3d(Function):
    """max_pool3d_with_indices: (values, int64 flat indices into D*H*W); the node keeps the
    indices and sends the gradient to each window's argmax."""

    num_outputs = 2
    retain_inputs = (0,)  # torch's node keeps self

    def forward(self, x, out=None, kernel_size=2, stride=None, padding=0, dilation=1,
                ceil_mode=False):  # fmt: skip
        geo = _pool3d_geometry(x, kernel_size, stride, padding, dilation, ceil_mode, "max_pool3d")
        planes, sp, k, s, p, d, osp = geo
        self.geo, self.x_shape = geo, x.shape
        dev = x._device
        shape = tuple(x.shape[:-3]) + osp
        y = kernels.empty(shape, x._dtype, dev)
        idx = kernels.empty(shape, dtypes.int64, dev)
        if _live(dev):
            xp = kernels.xp_of(x)
            x4, keep = _reshaped(x, (planes,) + sp)
            y4, i4 = y._data.reshape((planes,) + osp), idx._data.reshape((planes,) + osp)
            y4.fill(-np.inf)
            # where no offset takes over (a window of -inf): the first in-bounds position
            firsts = []
            for n_out, ss, pp, dd in zip(osp, s, p, d, strict=True):
                st = np.arange(n_out) * ss - pp
                firsts.append(np.where(st < 0, st + (-st + dd - 1) // dd * dd, st))
            xp.copyto(i4, xp.asarray(_flat(firsts, sp)))
            for outs, ins, grid in _offsets(sp, k, s, p, d, osp):
                v = x4[(slice(None),) + ins]
                yr = y4[(slice(None),) + outs]
                ir = i4[(slice(None),) + outs]
                took = (v > yr) | (v != v)  # NaN wins, the last one, as in torch
                xp.copyto(yr, v, where=took)
                pos = xp.broadcast_to(xp.asarray(_flat(grid, sp)), ir.shape)
                xp.copyto(ir, pos, where=took)
            del keep
        self.save(indices=idx)
        return y, idx

    def backward(self, g, g_idx=None):
        (_,) = self.saved_tensors  # (torch unpacks self: an in-place change is an error)
        planes, sp, k, s, p, d, osp = self.geo
        idx = self.kept("indices")
        dev = g._device
        gx = kernels.zeros(self.x_shape, g._dtype, dev)
        if _live(dev):
            xp = kernels.xp_of(g)
            g2, keep = _reshaped(g, (planes, math.prod(osp)))
            _scatter_add(xp, gx._data, idx._data, g2, planes, math.prod(sp))
            del keep
        return (gx,)

    def name(self):
        return "MaxPool3DWithIndicesBackward0"


def _avg_divisor(sp, k, s, p, out, count_include_pad, divisor_override):
    """Each output position's divisor (torch's avg_pool3d rule): a number or an array."""
    if divisor_override:
        return float(divisor_override)
    div = np.ones((), dtype=np.int64)
    for size, kk, ss, pp, n_out in zip(sp, k, s, p, out, strict=True):
        start = np.arange(n_out) * ss - pp
        end = np.minimum(start + kk, size + pp)
        ext = end - start
        if not count_include_pad:
            ext = np.minimum(end, size) - np.maximum(start, 0)
        div = div[..., None] * ext
    if (div == div.flat[0]).all():
        return float(div.flat[0])
    return div.astype(np.float64)


class AvgPool3d(Function):
    retain_inputs = (0,)  # torch's node keeps self

    def forward(self, x, out=None, kernel_size=2, stride=None, padding=0, ceil_mode=False,
                count_include_pad=True, divisor_override=None):  # fmt: skip
        geo = _pool3d_geometry(x, kernel_size, stride, padding, 1, ceil_mode, "avg_pool3d")
        if divisor_override is not None and divisor_override == 0:
            raise RuntimeError("divisor must be not zero")
        planes, sp, k, s, p, d, osp = geo
        self.geo, self.x_shape = geo, x.shape
        self.div = _avg_divisor(sp, k, s, p, osp, count_include_pad, divisor_override)
        dev = x._device
        y = result_buffer(out, tuple(x.shape[:-3]) + osp, x._dtype, dev, "avg_pool3d")
        if _live(dev):
            xp = kernels.xp_of(x)
            x4, keep = _reshaped(x, (planes,) + sp)
            y4 = y._data.reshape((planes,) + osp)
            y4.fill(0)
            for outs, ins, _ in _offsets(sp, k, s, p, d, osp):
                yr = y4[(slice(None),) + outs]
                xp.add(yr, x4[(slice(None),) + ins], out=yr)
            div = self.div if isinstance(self.div, float) else xp.asarray(self.div)
            xp.true_divide(y4, div, out=y4, casting="unsafe")
            del keep
        return y

    def backward(self, g):
        (_,) = self.saved_tensors  # (torch unpacks self: an in-place change is an error)
        planes, sp, k, s, p, d, osp = self.geo
        dev = g._device
        gx = kernels.zeros(self.x_shape, g._dtype, dev)
        if _live(dev):
            xp = kernels.xp_of(g)
            g4, keep = _reshaped(g, (planes,) + osp)
            gd = kernels.Scratch(
                (planes,) + osp, g._dtype, dev
            )  # g / divisor, per element in torch
            div = self.div if isinstance(self.div, float) else xp.asarray(self.div)
            xp.true_divide(g4, div, out=gd.data, casting="unsafe")
            gx4 = gx._data.reshape((planes,) + sp)
            for outs, ins, _ in _offsets(sp, k, s, p, d, osp):
                dst = gx4[(slice(None),) + ins]
                xp.add(dst, gd.data[(slice(None),) + outs], out=dst)
            gd.release()
            del keep
        return (gx,)

    def name(self):
        return "AvgPool3DBackward0"


def _adaptive_ranges(size, n_out):
    return [((i * size) // n_out, -(-((i + 1) * size) // n_out)) for i in range(n_out)]


def _adaptive_size(output_size, sp, op):
    rank = len(sp)
    if isinstance(output_size, (tuple, list)):
        size = tuple(output_size)
        if len(size) == 1:
            size = size * rank
    else:
        size = (output_size,) * rank
    if len(size) != rank:
        if op == "adaptive_max_pool3d":
            raise RuntimeError(
                "adaptive_max_pool3d(): internal error: output_size.size() must be 3"
            )
        raise RuntimeError(f"{op}: output_size must be {rank}")
    return tuple(s if v is None else int(v) for v, s in zip(size, sp, strict=True))


def _windows(sp, out):
    """Every output position's window, row-major: (output index, input slices)."""
    ranges = [_adaptive_ranges(s, o) for s, o in zip(sp, out, strict=True)]
    for pos in itertools.product(*(range(o) for o in out)):
        yield pos, tuple(slice(*ranges[i][j]) for i, j in enumerate(pos))


class AdaptiveAvgPool3d(Function):
    retain_inputs = (0,)  # torch's node keeps self

    def forward(self, x, out=None, output_size=(1, 1, 1)):
        planes = math.prod(x.shape[:-3])
        sp = tuple(x.shape[-3:])
        self.sp, self.osp, self.x_shape, self.planes = sp, output_size, x.shape, planes
        dev = x._device
        y = result_buffer(
            out, tuple(x.shape[:-3]) + output_size, x._dtype, dev, "adaptive_avg_pool3d"
        )
        if _live(dev):
            xp = kernels.xp_of(x)
            x4, keep = _reshaped(x, (planes,) + sp)
            y4 = y._data.reshape((planes,) + output_size)
            for pos, win in _windows(sp, output_size):
                xp.mean(x4[(slice(None),) + win], axis=(1, 2, 3), out=y4[(slice(None),) + pos])
            del keep
        return y

    def backward(self, g):
        (_,) = self.saved_tensors  # (torch unpacks self: an in-place change is an error)
        dev = g._device
        gx = kernels.zeros(self.x_shape, g._dtype, dev)
        if _live(dev):
            xp = kernels.xp_of(g)
            g4, keep = _reshaped(g, (self.planes,) + self.osp)
            gx4 = gx._data.reshape((self.planes,) + self.sp)
            for pos, win in _windows(self.sp, self.osp):
                dst = gx4[(slice(None),) + win]
                count = math.prod(w.stop - w.start for w in win)
                gv = g4[(slice(None),) + pos][:, None, None, None]
                xp.add(dst, gv / count, out=dst)
            del keep
        return (gx,)

    def name(self):
        return "AdaptiveAvgPool3DBackward0"


class AdaptiveMaxPoolNd(Function):
    """adaptive_max_pool2d / 3d: (values, int64 flat indices into the input plane); the node
    keeps the indices. The first maximum of a window wins, a NaN over any number (the last NaN),
    as torch's kernel scans it."""

    num_outputs = 2
    retain_inputs = (0,)  # torch's node keeps self

    def forward(self, x, out=None, output_size=(1, 1), rank=2):
        planes = math.prod(x.shape[:-rank])
        sp = tuple(x.shape[-rank:])
        self.rank, self.sp, self.osp, self.x_shape, self.planes = (
            rank,
            sp,
            output_size,
            x.shape,
            planes,
        )
        dev = x._device
        shape = tuple(x.shape[:-rank]) + output_size
        y = kernels.empty(shape, x._dtype, dev)
        idx = kernels.empty(shape, dtypes.int64, dev)
        if _live(dev):
            xp = kernels.xp_of(x)
            xr, keep = _reshaped(x, (planes,) + sp)
            yr = y._data.reshape(planes, -1)
            ir = idx._data.reshape(planes, -1)
            for j, (_, win) in enumerate(_windows(sp, output_size)):
                w = xr[(slice(None),) + win].reshape(planes, -1)
                nan = w != w
                arg = xp.argmax(w, axis=1)
                if bool(nan.any()):
                    last = nan.shape[1] - 1 - xp.argmax(nan[:, ::-1], axis=1)
                    arg = xp.where(nan.any(axis=1), last, arg)
                yr[:, j] = xp.take_along_axis(w, arg[:, None], axis=1)[:, 0]
                # the window-local position -> the flat position in the plane
                local = [s.stop - s.start for s in win]
                coords = xp.unravel_index(arg, local)
                flat = coords[0] + win[0].start
                for c, s, size in zip(coords[1:], win[1:], sp[1:], strict=True):
                    flat = flat * size + (c + s.start)
                ir[:, j] = flat
            del keep
        self.save(indices=idx)
        return y, idx

    def backward(self, g, g_idx=None):
        (_,) = self.saved_tensors  # (torch unpacks self: an in-place change is an error)
        idx = self.kept("indices")
        dev = g._device
        gx = kernels.zeros(self.x_shape, g._dtype, dev)
        if _live(dev):
            xp = kernels.xp_of(g)
            g2, keep = _reshaped(g, (self.planes, math.prod(self.osp)))
            _scatter_add(xp, gx._data, idx._data, g2, self.planes, math.prod(self.sp))
            del keep
        return (gx,)

    def name(self):
        return f"AdaptiveMaxPool{self.rank}DBackward0"


def max_pool3d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
               return_indices=False):  # fmt: skip
    """3-D max pooling of [N, C, D, H, W] (or [C, D, H, W]); with return_indices the flat
    positions into D*H*W too."""
    y, idx = MaxPool3d.apply(
        input, op="max_pool3d", kernel_size=kernel_size, stride=stride, padding=padding,
        dilation=dilation, ceil_mode=ceil_mode,
    )  # fmt: skip
    return (y, idx) if return_indices else y


def avg_pool3d(input, kernel_size, stride=None, padding=0, ceil_mode=False,
               count_include_pad=True, divisor_override=None):  # fmt: skip
    """3-D average pooling of [N, C, D, H, W] (or [C, D, H, W])."""
    return AvgPool3d.apply(
        input, op="avg_pool3d", kernel_size=kernel_size, stride=stride, padding=padding,
        ceil_mode=ceil_mode, count_include_pad=count_include_pad,
        divisor_override=divisor_override,
    )  # fmt: skip


def adaptive_avg_pool3d(input, output_size):
    """3-D adaptive average pooling; an output of 1x1x1 is torch's mean over the last three dims
    (MeanBackward1)."""
    if input.ndim not in (4, 5):
        raise RuntimeError(
            f"adaptive_avg_pool3d(): Expected 4D or 5D tensor, but got {list(input.shape)}"
        )
    size = _adaptive_size(output_size, tuple(input.shape[-3:]), "adaptive_avg_pool3d")
    if size == (1, 1, 1):
        return input.mean(dim=(-3, -2, -1), keepdim=True)
    return AdaptiveAvgPool3d.apply(input, op="adaptive_avg_pool3d", output_size=size)


def _adaptive_max(input, output_size, rank, return_indices):
    op = f"adaptive_max_pool{rank}d"
    if input.ndim not in (rank + 1, rank + 2):
        raise RuntimeError(
            f"{op}(): Expected {rank + 1}D or {rank + 2}D tensor, but got: {list(input.shape)}"
        )
    size = _adaptive_size(output_size, tuple(input.shape[-rank:]), op)
    y, idx = AdaptiveMaxPoolNd.apply(input, op=op, output_size=size, rank=rank)
    return (y, idx) if return_indices else y


def adaptive_max_pool2d(input, output_size, return_indices=False):
    """2-D adaptive max pooling of [N, C, H, W] (or [C, H, W])."""
    return _adaptive_max(input, output_size, 2, return_indices)


def adaptive_max_pool3d(input, output_size, return_indices=False):
    """3-D adaptive max pooling of [N, C, D, H, W] (or [C, D, H, W])."""
    return _adaptive_max(input, output_size, 3, return_indices)


def adaptive_max_pool1d(input, output_size, return_indices=False):
    """1-D adaptive max pooling: torch's composite, unsqueeze(-2), the 2-D kernel, squeeze(-2)."""
    _check_1d(input, "adaptive_max_pool1d", False)
    y, idx = adaptive_max_pool2d(
        input.unsqueeze(-2), (1, _one(output_size, "output_size")), return_indices=True
    )
    return (y.squeeze(-2), idx.squeeze(-2)) if return_indices else y.squeeze(-2)
