"""F.interpolate's nearest and nearest-exact (3-D, 4-D and 5-D inputs), linear (3-D), bilinear
and bicubic (4-D), trilinear (5-D) and area (adaptive average pooling) modes, and nn.Upsample:
torch 2.13's CPU kernels' source indices and weights (in the input's float dtype, as its
opmath), their nodes (UpsampleNearest2DBackward0 ...), and their memory:

- on cpu, nearest and bilinear on 4-D inputs: the output; unless the input is channels-last
  contiguous, a channels-last copy of the input and a channels-last output come and go (torch's
  kernel computes channels last);
- on cpu, the rest (torch's separable kernel): the output, then per spatial dim, outermost
  first, per tap (1 nearest, 2 linear, 4 cubic) an index and a weight buffer (int64 and the
  dtype, the dim's output length), all freed in the order made;
- on cuda (and meta, which plans a GPU run) the output alone;
- backward: the input's gradient alone (zeros, the gradient summed into it).

Values: the separable kernel interpolates the innermost dim first, each tap's product added in
tap order, as torch's does (the nearest modes equal torch's bit for bit; float64 interpolation
within a few ulps of torch's vectorised kernel, float32 within a few float32 ulps).
"""

from __future__ import annotations

import math

import numpy as np

from engine import kernels
from engine.autograd.function import Function
from engine.ops.common import result_buffer
from engine.ops.nn.common import _live
from engine.tensor import Tensor

_NODE = {
    ("nearest", 1): "UpsampleNearest1DBackward0",
    ("nearest", 2): "UpsampleNearest2DBackward0",
    ("nearest-exact", 1): "UpsampleNearestExact1DBackward0",
    ("nearest-exact", 2): "UpsampleNearestExact2DBackward0",
    ("nearest", 3): "UpsampleNearest3DBackward0",
    ("nearest-exact", 3): "UpsampleNearestExact3DBackward0",
    ("linear", 1): "UpsampleLinear1DBackward0",
    ("bilinear", 2): "UpsampleBilinear2DBackward0",
    ("bicubic", 2): "UpsampleBicubic2DBackward0",
    ("trilinear", 3): "UpsampleTrilinear3DBackward0",
}
_LINEAR = ("linear", "bilinear", "trilinear")
_TAPS = {"nearest": 1, "nearest-exact": 1, "linear": 2, "bilinear": 2, "trilinear": 2, "bicubic": 4}


def _scale(in_size, out_size, scale, align_corners, linear):
    """torch's area_pixel_compute_scale (linear) / compute_scales_value (nearest), in float64
    (rounded to the dtype by the caller)."""
    if linear and align_corners:
        return (in_size - 1) / (out_size - 1) if out_size > 1 else 0.0
    if scale is not None and scale > 0:
        return 1.0 / scale
    return in_size / out_size


def _nearest_index(xp, in_size, out_size, scale, exact, ft):
    """Source index of each output position (torch's nearest_idx / nearest_exact_idx)."""
    if not exact and out_size == in_size:
        return xp.arange(out_size)
    if not exact and out_size == 2 * in_size:
        return xp.arange(out_size) >> 1
    s = ft(_scale(in_size, out_size, scale, False, False))
    pos = xp.arange(out_size, dtype=ft)
    if exact:
        pos = pos + ft(0.5)
    src = xp.floor(pos * s).astype(np.int64)
    return xp.minimum(src, in_size - 1)


def _cubic_taps(xp, in_size, out_size, scale, align_corners, ft):
    """[(index, weight)] of the four taps of each output position: torch's
    compute_indices_weights_cubic (source index not clamped below 0, A = -0.75, indices
    clamped to the input), in the dtype `ft`."""
    s = ft(_scale(in_size, out_size, scale, align_corners, True))
    pos = xp.arange(out_size, dtype=ft)
    src = s * pos if align_corners else s * (pos + ft(0.5)) - ft(0.5)
    i0 = xp.minimum(xp.floor(src).astype(np.int64), in_size - 1)
    t = xp.clip(src - i0.astype(ft), ft(0), ft(1)).astype(ft)
    a = ft(-0.75)

    def near(x):  # cubic_convolution1: ((A + 2) x - (A + 3)) x x + 1
        return ((a + ft(2)) * x - (a + ft(3))) * x * x + ft(1)

    def far(x):  # cubic_convolution2: ((A x - 5 A) x + 8 A) x - 4 A
        return ((a * x - ft(5) * a) * x + ft(8) * a) * x - ft(4) * a

    weights = (far(t + ft(1)), near(t), near(ft(1) - t), far((ft(1) - t) + ft(1)))
    return [(xp.clip(i0 - 1 + j, 0, in_size - 1), w.astype(ft)) for j, w in enumerate(weights)]


def _linear_taps(xp, in_size, out_size, scale, align_corners, ft):
    """(i0, i1, w0, w1) of each output position: torch's area_pixel_compute_source_index and
    its weights, in the dtype `ft` (the kernel's opmath)."""
    s = ft(_scale(in_size, out_size, scale, align_corners, True))
    pos = xp.arange(out_size, dtype=ft)
    if align_corners:
        src = s * pos
    else:
        src = s * (pos + ft(0.5)) - ft(0.5)
        src = xp.maximum(src, ft(0))
    i0 = src.astype(np.int64)  # floor: src >= 0
    i1 = i0 + (i0 < in_size - 1)
    w1 = (src - i0.astype(ft)).astype(ft)
    w0 = (ft(1) - w1).astype(ft)
    return i0, i1, w0, w1


class Upsample(Function):
    """One node for the four modes over the trailing 1 or 2 spatial dims."""

    retain_inputs = ()

    def forward(self, x, out=None, mode="nearest", size=(), scales=(), align_corners=False):
        self.mode, self.size, self.scales = mode, tuple(size), tuple(scales)
        self.align_corners = bool(align_corners)
        self.in_shape = tuple(x.shape)
        k = len(self.size)
        self.k = k
        out_shape = self.in_shape[:-k] + self.size
        y = result_buffer(out, out_shape, x._dtype, x._device, "upsample")
        dev, dt = x._device, x._dtype
        temps = []
        cpu = dev.type == "cpu"  # cuda's kernels write the output directly (meta plans a GPU run)
        self.channels_last = k == 2 and mode in ("nearest", "nearest-exact", "bilinear")
        if cpu and self.channels_last and not _channels_last_contiguous(x):
            # torch's cpu kernel works channels last: the input's copy, the output's
            temps = [kernels.empty(self.in_shape, dt, dev), kernels.empty(out_shape, dt, dev)]
        elif cpu and not self.channels_last:  # per dim, per tap: int64 indices, weights
            for n in self.size:
                for _ in range(_TAPS[mode]):
                    temps.append(kernels.empty((n,), _int64(), dev))
                    temps.append(kernels.empty((n,), dt, dev))
        if _live(dev):
            xp = kernels.xp_of(x)
            y._data[...] = self._compute(xp, x._data)
        # the channels-last output copy goes before its input copy; the index buffers in order
        for i in reversed(range(len(temps))) if self.channels_last else range(len(temps)):
            temps[i] = None
        return y

    def _axes(self, xp, ft):
        """Per spatial dim: its taps, [(index, weight)], or for the nearest modes its index."""
        out = []
        for j in range(self.k):
            in_size = self.in_shape[-self.k + j]
            scale = self.scales[j] if self.scales else None
            if self.mode in _LINEAR:
                i0, i1, w0, w1 = _linear_taps(
                    xp, in_size, self.size[j], scale, self.align_corners, ft
                )
                out.append([(i0, w0), (i1, w1)])
            elif self.mode == "bicubic":
                out.append(_cubic_taps(xp, in_size, self.size[j], scale, self.align_corners, ft))
            else:
                out.append(
                    _nearest_index(
                        xp, in_size, self.size[j], scale, self.mode == "nearest-exact", ft
                    )
                )
        return out

    def _compute(self, xp, xd):
        ft = xd.dtype.type if xd.dtype.kind == "f" else np.float32
        axes = self._axes(xp, ft)
        if self.mode in ("nearest", "nearest-exact"):
            k = self.k
            index = tuple(idx.reshape((-1,) + (1,) * (k - 1 - j)) for j, idx in enumerate(axes))
            return xd[(Ellipsis, *index)]
        if self.mode == "bilinear":  # torch's channels-last kernel: rows first
            (h0, hw0), (h1, hw1) = axes[0]
            (c0, cw0), (c1, cw1) = axes[1]
            rows = []
            for hi in (h0, h1):
                block = xd[..., hi, :]
                inner = block[..., c0] * cw0
                inner += block[..., c1] * cw1
                rows.append(inner)
            r = rows[0] * hw0[:, None]
            r += rows[1] * hw1[:, None]
            return r
        # the separable kernel: the innermost dim first, each tap's product added in order
        r = xd
        for j in reversed(range(self.k)):
            axis = -self.k + j
            acc = None
            for idx, w in axes[j]:
                term = _weighted(xp.take(r, idx, axis=axis), w, axis)
                if acc is None:
                    acc = term
                else:
                    acc += term
            r = acc
        return r

    def backward(self, g):
        """The input's gradient: each output's gradient, times its weights, summed into its
        source positions, one spatial dim at a time (the taps' indices do not decrease along
        the output, so on cpu each dim is a reduceat over runs)."""
        gx = kernels.zeros(self.in_shape, g._dtype, g._device)
        if _live(g._device):
            xp = kernels.xp_of(g)
            gd = g._data
            ft = gd.dtype.type if gd.dtype.kind == "f" else np.float32
            acc = gd
            for j, taps in reversed(list(enumerate(self._axes(xp, ft)))):
                axis = -self.k + j
                in_size = self.in_shape[axis]
                if self.mode in ("nearest", "nearest-exact"):
                    acc = _sum_runs(xp, acc, taps, in_size, axis)
                    continue
                total = None
                for idx, w in taps:
                    part = _sum_runs(xp, _weighted(acc, w, axis), idx, in_size, axis)
                    total = part if total is None else total + part
                acc = total
            gx._data[...] = acc
        return (gx,)

    def name(self):
        return _NODE[(self.mode, self.k)]


def _weighted(arr, w, axis):
    """arr times the weights w along `axis` (a negative dim)."""
    shape = [1] * arr.ndim
    shape[axis] = w.shape[0]
    return arr * w.reshape(shape)


def _sum_runs(xp, arr, idx, in_size, axis):
    """out[..., i, ...] = sum of arr's entries along `axis` whose idx is i (idx does not
    decrease); positions no output reads stay 0."""
    shape = list(arr.shape)
    shape[axis] = in_size
    out = xp.zeros(shape, dtype=arr.dtype)
    if xp is np:
        starts = np.flatnonzero(np.r_[True, idx[1:] != idx[:-1]])
        sums = np.add.reduceat(arr, starts, axis=axis)
        where = [slice(None)] * arr.ndim
        where[axis] = idx[starts]
        out[tuple(where)] = sums
    else:  # CuPy's ufunc.at (cupyx.scatter_add is deprecated)
        moved = xp.moveaxis(out, axis, 0)
        xp.add.at(moved, idx, xp.moveaxis(arr, axis, 0))
    return out


def _int64():
    from engine import dtypes

    return dtypes.int64


def _channels_last_contiguous(x: Tensor) -> bool:
    if x.ndim != 4:
        return False
    n, c, h, w = x.shape
    st = x.stride()
    want = (h * w * c, 1, w * c, c)
    return all(s == e or d == 1 for s, e, d in zip(st, want, (n, c, h, w), strict=True))


_MODE_DIMS = {  # mode -> the spatial dims it takes (torch's dispatch in F.interpolate)
    "nearest": (1, 2, 3),
    "nearest-exact": (1, 2, 3),
    "area": (1, 2, 3),
    "linear": (1,),
    "bilinear": (2,),
    "bicubic": (2,),
    "trilinear": (3,),
}
_MODE_INPUT = {"linear": 3, "bilinear": 4, "trilinear": 5}


def interpolate(
    input,
    size=None,
    scale_factor=None,
    mode="nearest",
    align_corners=None,
    recompute_scale_factor=None,
    antialias=False,
):
    """torch.nn.functional.interpolate: nearest / nearest-exact / area on 3-D, 4-D and 5-D
    inputs, linear (3-D), bilinear and bicubic (4-D), trilinear (5-D); not antialias or
    lanczos."""
    k = input.ndim - 2
    if mode in ("nearest", "area", "nearest-exact") and align_corners is not None:
        raise ValueError(
            "align_corners option can only be set with the interpolating modes: "
            "linear | bilinear | bicubic | trilinear"
        )
    if size is not None and scale_factor is not None:
        raise ValueError("only one of size or scale_factor should be defined")
    if size is None and scale_factor is None:
        raise ValueError("either size or scale_factor should be defined")
    spatial = tuple(input.shape[2:])
    if size is not None:
        out = (size,) * k if isinstance(size, int) else tuple(int(s) for s in size)
        if len(out) != k:
            raise ValueError(
                f"Input and output must have the same number of spatial dimensions, but got "
                f"input with spatial dimensions of {list(spatial)} and output size of "
                f"{size}. Please provide input tensor in (N, C, d1, d2, ...,dK) format and "
                "output size in (o1, o2, ...,oK) format."
            )
        scales = ()
    else:
        sf = (scale_factor,) * k if isinstance(scale_factor, (int, float)) else tuple(scale_factor)
        if len(sf) != k:
            raise ValueError(
                f"Input and scale_factor must have the same number of spatial dimensions, but "
                f"got input with spatial dimensions of {list(spatial)} and scale_factor of "
                f"shape {scale_factor}. Please provide input tensor in (N, C, d1, d2, ...,dK) format "
                "and scale_factor in (s1, s2, ...,sK) format."
            )
        out = tuple(int(math.floor(float(n) * float(s))) for n, s in zip(spatial, sf, strict=True))
        scales = () if recompute_scale_factor else tuple(float(s) for s in sf)
    if antialias and not (mode in ("bilinear", "bicubic", "lanczos") and input.ndim == 4):
        raise ValueError(
            "Anti-alias option is restricted to bilinear, bicubic, and lanczos modes and "
            "requires a 4-D tensor as input"
        )
    if k not in _MODE_DIMS.get(mode, ()):
        for m, want in _MODE_INPUT.items():
            if mode == m and input.ndim in (3, 4, 5):
                raise NotImplementedError(
                    f"Got {input.ndim}D input, but {mode} mode needs {want}D input"
                )
        raise NotImplementedError(
            f"Input Error: Only 3D, 4D and 5D input Tensors supported (got {input.ndim}D) for "
            "the modes: nearest | linear | bilinear | bicubic | trilinear | lanczos | area | "
            f"nearest-exact (got {mode})"
        )
    if antialias:
        raise NotImplementedError(
            f"interpolate: {mode} with antialias=True is not supported by the engine (torch's "
            "separate anti-aliasing kernels); nearest, nearest-exact, area, linear, bilinear, "
            "bicubic and trilinear without it are"
        )
    if mode == "area":
        from engine.ops.nn import pool, pool3d

        pooling = (pool.adaptive_avg_pool1d, pool.adaptive_avg_pool2d, pool3d.adaptive_avg_pool3d)
        return pooling[k - 1](input, out)
    return Upsample.apply(
        input,
        op="interpolate",
        mode=mode,
        size=out,
        scales=scales,
        align_corners=bool(align_corners),
    )
