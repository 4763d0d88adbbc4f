"""conv3d, conv_transpose1d and conv_transpose3d: im2col (vol2col) over any spatial rank.

One convolution core serves the three: the columns of samples [S, C, *k, *out] are a strided
view of their zero-padded copy (one copy per chunk of samples), the product with the weight
[groups, O/g, C/g*prod(k)] writes the output; col2im adds each kernel offset's columns back into
a zero-padded buffer. A transposed convolution is the core's grad_input (forward) and its forward
and grad_weight (backward), as ATen's slow kernels compute it.

What is charged follows torch's CPU kernels where they are deterministic: on cpu in float64
(torch's slow_conv3d / slow_conv_dilated3d / slow_conv_transpose2d / 3d, no oneDNN) the column
buffers torch's profiler shows are charged, block for block (see _ColumnPlan). On cpu in float32
torch runs oneDNN, whose reorders into blocked layouts depend on the CPU's vector width and the
primitive it picks: not copied; there, and on cuda and meta, the columns are workspace
(kernels.Scratch), as conv2d's are, and only inputs, outputs and gradients are charged.
"""

from __future__ import annotations

import itertools
import math

from engine import dtypes, kernels
from engine.autograd.function import Function
from engine.backends import cuda_reduce
from engine.ops.common import device_of, result_type
from engine.ops.nn.common import _dense, _live, _needs, _same_dtype


def _ntuple(v, n: int, name: str) -> tuple[int, ...]:
    if isinstance(v, (tuple, list)):
        if len(v) == 1:
            return (int(v[0]),) * n
        if len(v) != n:
            raise RuntimeError(
                f"expected {name} to be a single integer value or a list of {n} values to match "
                "the convolution dimensions, but got " + f"{name}={list(v)}"
            )
        return tuple(int(e) for e in v)
    return (int(v),) * n


class _Geo:
    """A convolution's geometry: input [N, C, *sp] -> output [N, O, *out] through a weight
    [O, C/g, *k] (for a transposed convolution: the convolution whose grad_input it is)."""

    def __init__(self, n, c, sp, o, k, stride, pad, dil, groups, out):
        self.n, self.c, self.sp, self.o, self.k = n, c, tuple(sp), o, tuple(k)
        self.stride, self.pad, self.dil, self.groups, self.out = stride, pad, dil, groups, out
        self.cg, self.og = c // groups, o // groups
        self.ckk = self.cg * math.prod(self.k)
        self.length = math.prod(self.out)
        self.padded = tuple(s + 2 * p for s, p in zip(self.sp, self.pad, strict=True))

    @property
    def pointwise(self) -> bool:
        return all(v == 1 for v in self.k + self.stride) and not any(self.pad)

    def inner(self):
        """The input positions within the padded buffer."""
        return tuple(slice(p, p + s) for p, s in zip(self.pad, self.sp, strict=True))


def _windows(xp, src, geo: _Geo):
    """Every kernel offset's windows of padded samples src [S, C, *padded]: [S, C, *k, *out]."""
    st = src.strides
    sp_st = st[2:]
    shape = src.shape[:2] + geo.k + geo.out
    strides = (
        st[:2]
        + tuple(s * d for s, d in zip(sp_st, geo.dil, strict=True))
        + tuple(s * t for s, t in zip(sp_st, geo.stride, strict=True))
    )
    return kernels.as_strided(src, shape, strides)


def _padded(xp, data, b0, b1, geo: _Geo, stage):
    """Samples b0..b1 of data [N, C, *sp], zero-padded (through the stage) when geo pads."""
    if stage is None:
        return data[b0:b1]
    buf = stage.data[: b1 - b0]
    buf[(slice(None), slice(None)) + geo.inner()] = data[b0:b1]
    return buf


def _stage(geo: _Geo, samples: int, dtype, dev):
    """The zero-padded copy of `samples` samples (scratch; torch's vol2col reads in bounds)."""
    if not any(geo.pad):
        return None
    st = kernels.Scratch((samples, geo.c) + geo.padded, dtype, dev)
    if st.data is not None:
        st.data.fill(0)
    return st


def _fill_columns(xp, data, b0, b1, geo, cols, stage):
    """cols[:b1 - b0] (any array of [S, C/g... ] size) <- the windows of samples b0..b1."""
    count = b1 - b0
    win = _windows(xp, _padded(xp, data, b0, b1, geo, stage), geo)
    dst = cols.reshape(-1)[: count * geo.c * math.prod(geo.k) * geo.length].reshape(win.shape)
    xp.copyto(dst, win)
    return dst.reshape(count, geo.groups, geo.ckk, geo.length)


def _col2im(xp, gcols, geo, stage_data, dst):
    """dst [S, C, *sp] <- the columns gcols [S, C, *k, *out] added at their input positions."""
    count = gcols.shape[0]
    buf = stage_data[:count]
    buf.fill(0)
    for offset in itertools.product(*(range(k) for k in geo.k)):
        region = buf[
            (slice(None), slice(None))
            + tuple(
                slice(o * d, o * d + s * (n - 1) + 1, s)
                for o, d, s, n in zip(offset, geo.dil, geo.stride, geo.out, strict=True)
            )
        ]
        xp.add(region, gcols[(slice(None), slice(None)) + offset], out=region)
    xp.copyto(dst, buf[(slice(None), slice(None)) + geo.inner()])


class _ColumnPlan:
    """Which column buffers are charged, torch's CPU slow kernels' blocks (float64 on cpu):

    - "batch": slow_conv3d, slow_conv_transpose2d's forward: one [N, C/g*prod(k), L] buffer
      (none for a 1x1x1 stride-1 unpadded convolution's forward and grad_weight: the input is
      its own columns);
    - "sample": slow_conv_dilated3d, slow_conv_transpose3d, slow_conv_transpose2d's backward:
      one sample's [C*prod(k), L];
    - None: not charged (oneDNN's float32, cuda, meta): per-sample scratch.
    """

    def __init__(self, mode, geo: _Geo, dtype, dev):
        self.mode, self.geo, self.dtype, self.dev = mode, geo, dtype, dev

    @property
    def samples(self) -> int:
        return self.geo.n if self.mode == "batch" else 1

    def buffer(self):
        """(array, owner): the column buffer for `samples` samples; keep owner while used."""
        geo = self.geo
        shape = (self.samples, geo.c * math.prod(geo.k), geo.length)
        if self.mode is None:
            s = kernels.Scratch(shape, self.dtype, self.dev)
            return s.data, s
        t = kernels.empty(shape, self.dtype, self.dev)
        return t._data, t


def _slow_cpu(dev, dtype) -> bool:
    """torch's CPU convolutions that run its slow (im2col) kernels, not oneDNN: float64."""
    return dev.type == "cpu" and dtype is dtypes.float64


def _conv_forward(xp, data, wr, y, geo, plan, b_col=None):
    """y [N, O, *out] = the convolution of data [N, C, *sp] with wr [groups, O/g, C/g*prod(k)]."""
    n = geo.n
    if geo.pointwise:
        xr = data.reshape(n, geo.groups, geo.ckk, geo.length)
        kernels.matmul_into(xp, wr, xr, y.reshape(n, geo.groups, geo.og, geo.length))
    else:
        cols, owner = plan.buffer()
        stage = _stage(geo, plan.samples, plan.dtype, plan.dev)
        for b0 in range(0, n, max(plan.samples, 1)):  # (an empty batch: no columns)
            b1 = min(b0 + plan.samples, n)
            c4 = _fill_columns(xp, data, b0, b1, geo, cols, stage)
            dst = y[b0:b1].reshape(b1 - b0, geo.groups, geo.og, geo.length)
            kernels.matmul_into(xp, wr, c4, dst)
        del cols, owner, stage
    if b_col is not None:
        y3 = y.reshape(n, geo.o, geo.length)
        xp.add(y3, b_col, out=y3)


def _conv_grad_input(xp, g4, wt, gx, geo, plan):
    """gx [N, C, *sp] = col2im(W.T @ g) for g4 [N, groups, O/g, L], wt [groups, C/g*k, O/g]."""
    n = geo.n
    if geo.pointwise and not any(geo.pad):
        cols, owner = plan.buffer() if plan.mode is not None else (None, None)
        kernels.matmul_into(xp, wt, g4, gx.reshape(n, geo.groups, geo.ckk, geo.length))
        del cols, owner
        return
    cols, owner = plan.buffer()
    stage = kernels.Scratch((plan.samples, geo.c) + geo.padded, plan.dtype, plan.dev)
    for b0 in range(0, n, max(plan.samples, 1)):
        b1 = min(b0 + plan.samples, n)
        count = b1 - b0
        gc = cols.reshape(-1)[: count * geo.groups * geo.ckk * geo.length]
        kernels.matmul_into(xp, wt, g4[b0:b1], gc.reshape(count, geo.groups, geo.ckk, geo.length))
        _col2im(xp, gc.reshape((count, geo.c) + geo.k + geo.out), geo, stage.data, gx[b0:b1])
    del cols, owner, stage


def _conv_grad_weight(xp, data, g4, gw, geo, plan, cols=None):
    """gw [groups, O/g, C/g*prod(k)] = sum over samples of g @ cols.T, samples in order."""
    n = geo.n
    part = kernels.Scratch((geo.groups, geo.og, geo.ckk), plan.dtype, plan.dev).data
    owner = stage = None
    if not geo.pointwise and cols is None:
        cols, owner = plan.buffer()
    if not geo.pointwise:
        stage = _stage(geo, plan.samples, plan.dtype, plan.dev)
    step = max(plan.samples, 1) if not geo.pointwise else 1
    if n == 0:  # no sample: a sum of nothing (torch's zeros)
        gw[...] = 0
    for b0 in range(0, n, step):
        b1 = min(b0 + step, n)
        if geo.pointwise:
            c4 = data[b0:b1].reshape(1, geo.groups, geo.ckk, geo.length)
        else:
            c4 = _fill_columns(xp, data, b0, b1, geo, cols, stage)
        for i in range(b1 - b0):
            kernels.matmul_into(xp, g4[b0 + i], c4[i].transpose(0, 2, 1), part)
            if b0 + i == 0:
                xp.copyto(gw, part)
            else:
                xp.add(gw, part, out=gw)
    del cols, owner, stage


def _bias_grad(xp, gd, gb, dev, ndim):
    """gb <- the sum of the gradient array gd over every dim but the channels'."""
    axes = (0,) + tuple(range(2, ndim))
    if _live(dev):
        xp.sum(gd, axis=axes, out=gb._data)
    cuda_reduce.charge(dev, gd, axes)


class Conv3d(Function):
    """3-D convolution by vol2col and one product per sample (torch's slow_conv3d; on cpu in
    float64 its column blocks are charged: _ColumnPlan)."""

    def to_save(self, tensors):
        # torch's ConvolutionBackward0 keeps input and weight whichever needs a gradient (one
        # formula gives all three): a frozen layer's input stays alive until backward
        self._save_idx = (0, 1)
        return self._save_idx

    def forward(
        self, x, weight, bias=None, out=None, stride=(1, 1, 1), padding=(0, 0, 0),
        dilation=(1, 1, 1), groups=1,
    ):  # fmt: skip
        n, c = x.shape[:2]
        o, cg = weight.shape[:2]
        if c != cg * groups:
            raise RuntimeError(
                f"Given groups={groups}, weight of size {list(weight.shape)}, expected input"
                f"{list(x.shape)} to have {cg * groups} channels, but got {c} channels instead"
            )
        if o % groups:
            raise RuntimeError(
                f"Given groups={groups}, expected weight to be divisible by {groups} at dimension "
                f"0, but got weight of size [{list(weight.shape)}] instead"
            )
        _same_dtype("conv3d", x, weight, bias)
        k = tuple(weight.shape[2:])
        sp = tuple(x.shape[2:])
        padded = tuple(s + 2 * p for s, p in zip(sp, padding, strict=True))
        eff = tuple(d * (kk - 1) + 1 for d, kk in zip(dilation, k, strict=True))
        if any(e > p for e, p in zip(eff, padded, strict=True)):
            raise RuntimeError(
                "Calculated padded input size per channel: ("
                + " x ".join(map(str, padded))
                + "). Kernel size: ("
                + " x ".join(map(str, eff))
                + "). Kernel size can't be greater than actual input size"
            )
        out_sp = tuple((p - e) // s + 1 for p, e, s in zip(padded, eff, stride, strict=True))
        geo = _Geo(n, c, sp, o, k, stride, padding, dilation, groups, out_sp)
        dev = device_of(x, weight, bias)
        dt = result_type(x, weight)
        self.geo, self.dev_dtype = geo, (dev, dt)
        self.x_shape, self.w_shape, self.has_bias = x.shape, weight.shape, bias is not None
        self.dilated = any(d != 1 for d in dilation)
        live = _live(dev)
        bd = bias._data if bias is not None and live else None
        return _forward_blocks(
            x._data if live else None, weight._data if live else None, bd, geo, dev, dt
        )

    def backward(self, g):
        saved = dict(zip(self._save_idx, self.saved_tensors, strict=True))
        needs = _needs(self) if self.has_bias else _needs(self)[:2] + (False,)
        dev, dt, geo = g._device, g._dtype, self.geo
        live = _live(dev)
        g4, gkeep = _dense(g, (geo.n, geo.groups, geo.og, geo.length)) if live else (None, None)
        x, w = saved[0]._data, saved[1]._data
        gx, gw, gb = _backward_blocks(g._data, g4, x, w, geo, needs, dev, dt)
        del gkeep
        return (gx, gw, gb) if self.has_bias else (gx, gw)

    def name(self):
        return "ConvolutionBackward0"


class _Prefilled:
    """A _ColumnPlan whose buffer was made already (its block charged at torch's moment)."""

    def __init__(self, plan, cols, owner):
        self.mode, self.geo, self.dtype, self.dev = plan.mode, plan.geo, plan.dtype, plan.dev
        self.samples = plan.samples
        self._cols, self._owner = cols, owner

    def buffer(self):
        return self._cols, None

    def release(self):
        self._cols = self._owner = None


def _forward_blocks(xd, wd, bd, geo: _Geo, dev, dt):
    """The output [N, O, *out] of one convolution (arrays xd, wd, bd; None on meta), its blocks
    torch's: on cpu in float64 slow_conv2d / slow_conv3d (the batch's columns, none for a 1x1
    stride-1 unpadded kernel, then the output) or slow_conv_dilated2d / 3d (the output, then one
    sample's columns); otherwise the columns are scratch."""
    slow = _slow_cpu(dev, dt)
    live = _live(dev)
    xp = kernels.xp_of_device(dev)
    wr = wd.reshape(geo.groups, geo.og, geo.ckk) if live else None
    b_col = bd[:, None] if bd is not None and live else None
    shape = (geo.n, geo.o) + geo.out
    if slow and any(d != 1 for d in geo.dil):
        y = kernels.empty(shape, dt, dev)
        plan = _ColumnPlan("sample", geo, dt, dev)
    else:
        plan = _ColumnPlan("batch" if slow else None, geo, dt, dev)
        if slow and not geo.pointwise:
            cols, owner = plan.buffer()
            plan = _Prefilled(plan, cols, owner)
        y = kernels.empty(shape, dt, dev)
    if live:
        _conv_forward(xp, xd, wr, y._data, geo, plan, b_col)
    if isinstance(plan, _Prefilled):
        plan.release()
    return y


def _backward_blocks(gd, g4, xd, wd, geo: _Geo, needs, dev, dt, input_columns=True):
    """(grad_input, grad_weight, grad_bias) of one convolution, each None unless `needs` says;
    gd the gradient [N, O, *out], g4 the same as [N, groups, O/g, L] (None on meta). Blocks as
    _forward_blocks's kernels make them in backward; `input_columns=False` for slow_conv2d,
    whose grad_input columns are per-thread buffers outside the allocator (scratch here)."""
    live = _live(dev)
    xp = kernels.xp_of_device(dev)
    slow = _slow_cpu(dev, dt)
    x_shape = (geo.n, geo.c) + geo.sp
    w_shape = (geo.o, geo.cg) + geo.k
    gx = gw = gb = None
    if slow and any(d != 1 for d in geo.dil):  # slow_conv_dilated's backward: one sample's
        plan = _ColumnPlan("sample", geo, dt, dev)
        if needs[0]:
            gx = kernels.empty(x_shape, dt, dev)
        if needs[1]:
            gw = kernels.empty(w_shape, dt, dev)
        if needs[2]:
            gb = kernels.empty((geo.o,), dt, dev)
            if live:
                gb._data.fill(0)
        cols, owner = plan.buffer()
        if gb is not None:  # torch's kernel: each sample's bias sum in a block of its own
            for b in range(geo.n):
                part = kernels.empty((geo.o,), dt, dev)
                if live:
                    xp.sum(g4[b].reshape(geo.o, geo.length), axis=1, out=part._data)
                    xp.add(gb._data, part._data, out=gb._data)
                del part
        if live and gx is not None:
            wt = wd.reshape(geo.groups, geo.og, geo.ckk).transpose(0, 2, 1)
            _conv_grad_input(xp, g4, wt, gx._data, geo, _Prefilled(plan, cols, None))
        if live and gw is not None:
            gwr = gw._data.reshape(geo.groups, geo.og, geo.ckk)
            _conv_grad_weight(xp, xd, g4, gwr, geo, plan, cols)
        del cols, owner
        return gx, gw, gb
    plan = _ColumnPlan("batch" if slow else None, geo, dt, dev)
    if needs[0]:
        gx = kernels.empty(x_shape, dt, dev)
        in_plan = plan if input_columns else _ColumnPlan(None, geo, dt, dev)
        if live:
            wt = wd.reshape(geo.groups, geo.og, geo.ckk).transpose(0, 2, 1)
            _conv_grad_input(xp, g4, wt, gx._data, geo, in_plan)
        elif slow or in_plan.mode is None:
            in_plan.buffer()
    if needs[2]:  # the slow kernels': before grad_weight
        gb = kernels.empty((geo.o,), dt, dev)
        _bias_grad(xp, gd, gb, dev, len(gd.shape))
    if needs[1]:
        gw = kernels.empty(w_shape, dt, dev)
        if live:
            gwr = gw._data.reshape(geo.groups, geo.og, geo.ckk)
            _conv_grad_weight(xp, xd, g4, gwr, geo, plan)
    return gx, gw, gb


def _group_part(arr, dim: int, groups: int, g: int, dev, dt):
    """torch's subtensor: group g's slice of arr along dim, `.contiguous()`: (array, owner), a
    charged copy when the slice is not contiguous (an input's channels; a batch of one's are)."""
    size = arr.shape[dim] // groups
    part = arr[(slice(None),) * dim + (slice(size * g, size * (g + 1)),)]
    if part.flags.c_contiguous:
        return part, None
    owner = kernels.empty(part.shape, dt, dev)
    kernels.xp_of_device(dev).copyto(owner._data, part)
    return owner._data, owner


def _cat_parts(parts, dim: int, dev, dt):
    """at::cat of the tensors `parts` along dim: one new block."""
    shape = list(parts[0].shape)
    shape[dim] = sum(t.shape[dim] for t in parts)
    out = kernels.empty(tuple(shape), dt, dev)
    at = 0
    for t in parts:
        size = t.shape[dim]
        out._data[(slice(None),) * dim + (slice(at, at + size),)] = t._data
        at += size
    return out


def _free_in_order(parts) -> None:
    """Drop the tensors of a list first to last, as a std::vector's destructor does."""
    for i in range(len(parts)):
        parts[i] = None


def _group_geo(geo: _Geo) -> _Geo:
    """One group's convolution, groups 1."""
    return _Geo(geo.n, geo.cg, geo.sp, geo.og, geo.k, geo.stride, geo.pad, geo.dil, 1, geo.out)


def slow_forward(xd, wd, bd, geo: _Geo, dev, dt):
    """torch's at::_convolution on cpu for a backend without groups (slow_conv2d,
    slow_conv_dilated2d): groups 1 straight; otherwise per group the input's and weight's
    slices (copies where not contiguous), that group's convolution, the copies freed (bias,
    weight, input), then the outputs concatenated and freed first to last."""
    if geo.groups == 1:
        return _forward_blocks(xd, wd, bd, geo, dev, dt)
    sub, groups = _group_geo(geo), geo.groups
    outs = []
    for g in range(groups):
        xg, x_owner = _group_part(xd, 1, groups, g, dev, dt)
        wg, w_owner = _group_part(wd, 0, groups, g, dev, dt)
        bg, b_owner = _group_part(bd, 0, groups, g, dev, dt) if bd is not None else (None, None)
        outs.append(_forward_blocks(xg, wg, bg, sub, dev, dt))
        del bg, b_owner, wg, w_owner, xg, x_owner
    y = _cat_parts(outs, 1, dev, dt)
    _free_in_order(outs)
    return y


def slow_backward(gd, xd, wd, geo: _Geo, needs, dev, dt, input_columns=True):
    """convolution_backward on cpu for a backend without groups: per group the slices of the
    gradient, input and weight (copies where not contiguous), that group's gradients, then each
    kind concatenated; the groups' parts freed biases, weights, inputs (std::vector order)."""
    if geo.groups == 1:
        g4 = gd.reshape(geo.n, 1, geo.o, geo.length)
        return _backward_blocks(gd, g4, xd, wd, geo, needs, dev, dt, input_columns)
    sub, groups = _group_geo(geo), geo.groups
    parts = ([], [], [])
    for g in range(groups):
        gg, g_owner = _group_part(gd, 1, groups, g, dev, dt)
        xg, x_owner = _group_part(xd, 1, groups, g, dev, dt)
        wg, w_owner = _group_part(wd, 0, groups, g, dev, dt)
        g4 = gg.reshape(sub.n, 1, sub.o, sub.length)
        got = _backward_blocks(gg, g4, xg, wg, sub, needs, dev, dt, input_columns)
        for kind, t in zip(parts, got, strict=True):
            kind.append(t)
        del g4, wg, w_owner, xg, x_owner, gg, g_owner, got
    out = tuple(
        _cat_parts(kind, 1 if i == 0 else 0, dev, dt) if needs[i] else None
        for i, kind in enumerate(parts)
    )
    for kind in reversed(parts):
        _free_in_order(kind)
    return out


def _conv3d_padding(padding, k, dilation, stride):
    """Symmetric pads per dim, or (for 'same' with an odd total) None and the F.pad widths."""
    if isinstance(padding, str):
        if padding == "valid":
            return (0, 0, 0), None
        if padding == "same":
            if any(s != 1 for s in stride):
                raise RuntimeError("padding='same' is not supported for strided convolutions")
            sym, extra = [], []
            for kk, d in zip(k, dilation, strict=True):
                total = d * (kk - 1)
                sym.append(total // 2)
                extra.append(total - 2 * (total // 2))
            if not any(extra):
                return tuple(sym), None
            # torch pads the input by the odd remainder on the right first (F.pad), then runs
            # the symmetric convolution
            widths = []
            for e in reversed(extra):
                widths += [0, e]
            return tuple(sym), widths
        raise ValueError(
            f"Invalid padding string '{padding}', should be one of {{'valid', 'same'}}"
        )
    return _ntuple(padding, 3, "padding"), None


def conv3d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """3-D convolution of input [N, C, D, H, W] (or [C, D, H, W]) with weight
    [O, C/groups, kd, kh, kw]."""
    if input.ndim not in (4, 5):
        raise RuntimeError(
            "Expected 4D (unbatched) or 5D (batched) input to conv3d, but got input of size: "
            f"{list(input.shape)}"
        )
    if weight.ndim != 5:
        raise RuntimeError(
            f"conv3d: expected a 5-D weight [O, C/groups, kd, kh, kw], got {list(weight.shape)}"
        )
    s = _ntuple(stride, 3, "stride")
    d = _ntuple(dilation, 3, "dilation")
    if not isinstance(padding, str) and any(p < 0 for p in _ntuple(padding, 3, "padding")):
        raise RuntimeError("negative padding is not supported")
    if any(v <= 0 for v in s):
        raise RuntimeError("non-positive stride is not supported")
    if any(v <= 0 for v in d):
        raise RuntimeError(f"dilation should be greater than zero, but got {list(d)}")
    if groups <= 0:
        raise RuntimeError("non-positive groups is not supported")
    pads, widths = _conv3d_padding(padding, weight.shape[2:], d, s)
    unbatched = input.ndim == 4
    x = input.unsqueeze(0) if unbatched else input
    if widths is not None:
        from engine.ops.shape import pad as _pad

        x = _pad(x, widths)
    args = (x, weight) if bias is None else (x, weight, bias)
    y = Conv3d.apply(*args, op="conv3d", stride=s, padding=pads, dilation=d, groups=groups)
    return y.squeeze(0) if unbatched else y


class ConvTransposeNd(Function):
    """Transposed convolution over 1 or 3 spatial dims: the convolution core's grad_input
    (forward), its forward and grad_weight (backward). conv_transpose2d keeps its own kernel
    (engine/ops/conv_transpose.py)."""

    def to_save(self, tensors):
        return (0, 1)

    def forward(
        self, x, weight, bias=None, out=None, stride=(1,), padding=(0,), output_padding=(0,),
        groups=1, dilation=(1,),
    ):  # fmt: skip
        rank = x.ndim - 2
        name = f"conv_transpose{rank}d"
        n, cin = x.shape[:2]
        if weight.shape[0] != cin:
            raise RuntimeError(
                f"Given transposed=1, weight of size {list(weight.shape)}, expected input"
                f"{list(x.shape)} to have {weight.shape[0]} channels, but got {cin} channels "
                "instead"
            )
        _same_dtype(name, x, weight, bias)
        if any(
            op >= s and op >= d for op, s, d in zip(output_padding, stride, dilation, strict=True)
        ):
            _refuse_output_padding(rank, output_padding, stride, dilation)
        k = tuple(weight.shape[2:])
        cout = weight.shape[1] * groups
        sp = tuple(x.shape[2:])
        out_sp = tuple(
            (s - 1) * st - 2 * p + d * (kk - 1) + op + 1
            for s, st, p, d, kk, op in zip(
                sp, stride, padding, dilation, k, output_padding, strict=True
            )
        )
        if any(v <= 0 for v in out_sp):
            raise RuntimeError(
                f"Given input size per channel: ({' x '.join(map(str, sp))}). Calculated output "
                f"size per channel: ({' x '.join(map(str, out_sp))}). Output size is too small"
            )
        geo = _Geo(n, cout, out_sp, cin, k, stride, padding, dilation, groups, sp)
        dev = device_of(x, weight, bias)
        dt = result_type(x, weight)
        self.geo, self.rank = geo, rank
        self.has_bias = bias is not None
        slow = _slow_cpu(dev, dt)
        plan = _ColumnPlan(("sample" if rank == 3 else "batch") if slow else None, geo, dt, dev)
        ones = None
        if slow and rank == 3:
            # slow_conv_transpose3d's forward: an input-sized block made and freed around the
            # output's allocation (torch's profiler shows it), then one sample's columns, and
            # with a bias its ones over the output positions while the columns live
            block = kernels.empty(x.shape, dt, dev)
            y = kernels.empty((n, cout) + out_sp, dt, dev)
            del block
        else:
            y = kernels.empty((n, cout) + out_sp, dt, dev)
        cols, owner = plan.buffer()
        if slow and rank == 3 and bias is not None:
            ones = kernels.empty((math.prod(out_sp),), dt, dev)
        if _live(dev):
            xp = kernels.xp_of_device(dev)
            x4, keep = _dense(x, (n, groups, geo.og, geo.length))
            wt = weight._data.reshape(groups, geo.og, geo.ckk).transpose(0, 2, 1)
            _conv_grad_input(xp, x4, wt, y._data, geo, _Prefilled(plan, cols, None))
            del keep
            if bias is not None:
                y3 = y._data.reshape(n, cout, -1)
                xp.add(y3, bias._data[:, None], out=y3)
        del ones, cols, owner
        return y

    def backward(self, gy):
        x, weight = self.saved_tensors
        needs = _needs(self)
        geo = self.geo
        dev, dt = gy._device, gy._dtype
        live = _live(dev)
        xp = kernels.xp_of(gy)
        plan = _ColumnPlan("sample" if _slow_cpu(dev, dt) else None, geo, dt, dev)
        gx = gw = gb = None
        gdata = None
        if live:
            gdata, gkeep = _dense(gy, tuple(gy.shape))
        if needs[0]:  # the convolution of gy with the weight
            gx = kernels.empty(tuple(x.shape), dt, dev)
            if live:
                wr = weight._data.reshape(geo.groups, geo.og, geo.ckk)
                _conv_forward(xp, gdata, wr, gx._data, geo, plan)
            elif plan.mode is not None:
                plan.buffer()
        if needs[1]:
            gw = kernels.empty(tuple(weight.shape), dt, dev)
            if live:
                x4, keep = _dense(x, (geo.n, geo.groups, geo.og, geo.length))
                gwr = gw._data.reshape(geo.groups, geo.og, geo.ckk)
                _conv_grad_weight(xp, gdata, x4, gwr, geo, plan)
                del keep
            elif plan.mode is not None:
                plan.buffer()
        if self.has_bias and needs[2]:
            gb = kernels.empty((geo.c,), dt, dev)
            _bias_grad(xp, gy._data, gb, dev, gy.ndim)
        if live:
            del gkeep
        return (gx, gw, gb) if self.has_bias else (gx, gw)

    def name(self):
        return "ConvolutionBackward0"


def _refuse_output_padding(rank, op, stride, dilation):
    """torch's words: the 2-D kernel's for rank 1 (it runs conv_transpose1d as 2-D), else the
    3-D kernel's."""
    names = ("height", "width") if rank <= 2 else ("depth", "height", "width")
    if rank == 1:
        op, stride, dilation = (0,) + op, (1,) + stride, (1,) + dilation
    parts = [f"output_padding_{n}: {v}" for n, v in zip(names, op, strict=True)]
    parts += [f"stride_{n}: {v}" for n, v in zip(names, stride, strict=True)]
    parts += [f"dilation_{n}: {v}" for n, v in zip(names, dilation, strict=True)]
    raise RuntimeError(
        "output padding must be smaller than either stride or dilation, but got " + " ".join(parts)
    )


def _conv_transpose(rank, input, weight, bias, stride, padding, output_padding, groups, dilation):
    name = f"conv_transpose{rank}d"
    if input.ndim not in (rank + 1, rank + 2):
        raise RuntimeError(
            f"Expected {rank + 1}D (unbatched) or {rank + 2}D (batched) input to {name}, but got "
            f"input of size: {list(input.shape)}"
        )
    unbatched = input.ndim == rank + 1
    x = input.unsqueeze(0) if unbatched else input
    args = (x, weight) if bias is None else (x, weight, bias)
    y = ConvTransposeNd.apply(
        *args,
        op=name,
        stride=_ntuple(stride, rank, "stride"),
        padding=_ntuple(padding, rank, "padding"),
        output_padding=_ntuple(output_padding, rank, "output_padding"),
        groups=groups,
        dilation=_ntuple(dilation, rank, "dilation"),
    )
    return y.squeeze(0) if unbatched else y


def conv_transpose1d(
    input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1
):
    """Transposed 1-D convolution of input [N, C_in, L] (or [C_in, L]) with weight
    [C_in, C_out/groups, k]."""
    return _conv_transpose(
        1, input, weight, bias, stride, padding, output_padding, groups, dilation
    )


def conv_transpose3d(
    input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1
):
    """Transposed 3-D convolution of input [N, C_in, D, H, W] (or unbatched) with weight
    [C_in, C_out/groups, kd, kh, kw]."""
    return _conv_transpose(
        3, input, weight, bias, stride, padding, output_padding, groups, dilation
    )
