"""Neural-network primitives, forward and backward side by side.

linear, conv2d, max/avg/adaptive-avg pooling, mse_loss, nll_loss, gather, index_select,
embedding, dropout, batch_norm, layer_norm, gelu, and the arithmetic optimizers run in place
(addcmul, addcdiv, lerp). Composite ops (cross_entropy = nll_loss(log_softmax)) live in
engine.nn.functional and need no backward of their own.

What each op allocates and keeps follows PyTorch's CPU kernels, so the allocator's timeline is
the one torch's profiler shows for the same program:
- linear is one primitive like addmm: one output buffer (matmul into it, bias added in place);
  backward makes grad_input = g @ W, grad_weight = g.T @ x (already in the weight's [out, in]
  layout, so AccumulateGrad can take it over) and grad_bias = g.sum(0), each only when needed.
- mse_loss keeps PyTorch's quirk: the mean is written into a full-size result buffer that is
  then viewed as 0-d, so the loss scalar holds input-sized memory until it dies.
- dropout keeps its scaled mask (`noise`); in place it costs no clone of the input.
- conv2d keeps only input and weight (like torch) and rebuilds its im2col columns in backward.
  Columns are built one sample at a time in a charged buffer (a temporary of one sample's
  columns, reused across the batch), so a convolution's workspace is visible and bounded.
Scratch that is not charged is bounded by kernels.SCRATCH_ELEMS elements (see kernels.py).
"""

from __future__ import annotations

import math

import numpy as np

from engine import dtypes
from engine.autograd.function import Function
from engine.ops import kernels
from engine.ops.common import broadcast_shape, device_of, result_buffer, result_type, sum_to
from engine.ops.elementwise import _uf
from engine.ops.views import view_array
from engine.tensor import Tensor

_SCRATCH = kernels.SCRATCH_ELEMS


# ---------------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------------
def _live(dev) -> bool:
    """True when the device holds values (meta tensors only have shapes)."""
    return dev.type != "meta"


def _needs(node: Function) -> tuple[bool, ...]:
    """Which tensor arguments of a recorded call want a gradient."""
    return tuple(e is not None for e in node.next_functions)


def _reshaped(t: Tensor, shape):
    """t's array viewed as `shape`; a charged contiguous copy when the strides forbid a view.

    Returns (array, owner): keep `owner` alive while the array is in use.
    """
    arr = view_array(t, tuple(shape))
    if arr is not None:
        return arr, t
    c = kernels.copy_new(t)
    return c._data.reshape(shape), c


def _dense(t: Tensor, shape):
    """Like _reshaped, but also copies broadcast (zero-stride) arrays, which BLAS cannot read."""
    arr, owner = _reshaped(t, shape)
    if type(arr) is np.ndarray and 0 in arr.strides and arr.size > 1:
        owner = kernels.copy_new(t)
        arr = owner._data.reshape(shape)
    return arr, owner


def _first_element(arr):
    """A 0-d view of an array's first element (numpy, cupy and meta)."""
    return arr[(0,) * arr.ndim + (Ellipsis,)]


def _work(shape, dtype, dev):
    """(array, owner) for scratch: small arrays (<= SCRATCH_ELEMS) are plain and not charged,
    bigger ones come from the tracked allocator. Keep `owner` alive while using the array."""
    if math.prod(shape) <= _SCRATCH:
        return kernels.xp_of_device(dev).empty(shape, dtype=dtype.np), None
    t = kernels.empty(shape, dtype, dev)
    return t._data, t


def _keep(node: Function, **tensors) -> None:
    """Keep buffers made in forward (masks, indices, statistics) for backward, tagged as saved."""
    for key, t in tensors.items():
        setattr(node, key, t)
        alloc = t._storage.allocator
        if alloc is not None and alloc.observers:
            alloc.tag(t._storage.id, "saved_for_backward", True)
    node._kept = tuple(node.__dict__.get("_kept", ())) + tuple(tensors)


class _KeepsBuffers(Function):
    """A primitive that keeps buffers of its own (not its arguments) for backward."""

    _kept: tuple = ()

    def release_saved(self) -> None:
        super().release_saved()
        for key in self._kept:
            setattr(self, key, None)

    def kept(self, key: str) -> Tensor:
        t = getattr(self, key, None)
        if t is None:
            raise RuntimeError(
                "Trying to backward through the graph a second time (or directly access saved "
                "tensors after they have already been freed). Specify retain_graph=True if you "
                "need to backward through the graph a second time."
            )
        return t


def _pair(v, name="value"):
    if isinstance(v, (tuple, list)):
        if len(v) == 1:
            return (int(v[0]), int(v[0]))
        if len(v) != 2:
            raise ValueError(f"{name} must be an int or a pair of ints, got {v!r}")
        return (int(v[0]), int(v[1]))
    return (int(v), int(v))


def _span(n_out: int, stride: int, pad: int, offset: int, size: int):
    """Outputs o in [lo, hi) whose input index o*stride - pad + offset lies in [0, size).

    Returns (lo, hi, first) where `first` is the input index of output lo. Windows that hang over
    the padding are handled by clipping instead of materialising a padded copy of the input.
    """
    start = offset - pad
    lo = 0 if start >= 0 else (-start + stride - 1) // stride
    hi = (size - 1 - start) // stride + 1 if size - 1 - start >= 0 else 0
    hi = max(min(hi, n_out), lo)
    return lo, hi, lo * stride + start


def _sl(first: int, count: int, stride: int) -> slice:
    return slice(first, first + (count - 1) * stride + 1, stride)


def _same_dtype(opname: str, *tensors) -> None:
    """linear/conv2d need one dtype, as in PyTorch (no silent casts through hidden copies)."""
    first = tensors[0]._dtype
    for t in tensors[1:]:
        if t is not None and t._dtype is not first:
            a = first.torch_tensor_name.replace("Tensor", "")
            b = t._dtype.torch_tensor_name.replace("Tensor", "")
            raise RuntimeError(
                f"{opname}: expected all inputs to have the same dtype, but got {a} and {b}"
            )


def _blocked(func, out, *arrays) -> bool:
    """func(out_chunk, *chunks, scratch) over flat chunks with one small scratch per thread.

    Only for C-contiguous arrays of out's shape (numpy); returns False when it does not apply.
    """
    if type(out) is not np.ndarray or not out.flags.c_contiguous:
        return False
    flats = []
    for a in arrays:
        if isinstance(a, np.ndarray):
            if a.shape != out.shape or not a.flags.c_contiguous:
                return False
            flats.append(a.reshape(-1))
        else:
            flats.append(a)
    fo = out.reshape(-1)
    n = fo.size

    def part(bounds):
        lo, hi = bounds
        scratch = np.empty(min(_SCRATCH, max(hi - lo, 1)), dtype=fo.dtype)
        for i in range(lo, hi, _SCRATCH):
            j = min(i + _SCRATCH, hi)
            func(
                fo[i:j],
                *[f[i:j] if isinstance(f, np.ndarray) else f for f in flats],
                scratch[: j - i],
            )

    threads = kernels.get_num_threads()
    if threads > 1 and n >= kernels.PARALLEL_MIN_ELEMS:
        per = -(-n // threads)
        list(kernels._get_pool().map(part, [(i, min(i + per, n)) for i in range(0, n, per)]))
    else:
        part((0, n))
    return True


# ---------------------------------------------------------------------------------------------
# linear
# ---------------------------------------------------------------------------------------------
class Linear(Function):
    """y = x @ W.T + b with one output buffer (PyTorch's addmm for 2-D input)."""

    def to_save(self, tensors):
        idx = []
        if tensors[1].requires_grad:
            idx.append(0)  # grad_W = g.T @ x
        if tensors[0].requires_grad:
            idx.append(1)  # grad_x = g @ W
        self._save_idx = tuple(idx)
        return self._save_idx

    def forward(self, x, weight, bias=None, out=None):
        if weight.ndim != 2:
            raise RuntimeError(
                f"linear: weight must be 2-D [out_features, in_features], got {list(weight.shape)}"
            )
        n_out, n_in = weight.shape
        if x.ndim == 0 or x.shape[-1] != n_in:
            rows = math.prod(x.shape[:-1]) if x.ndim else 1
            raise RuntimeError(
                f"mat1 and mat2 shapes cannot be multiplied ({rows}x{x.shape[-1] if x.ndim else 1} "
                f"and {n_in}x{n_out})"
            )
        if bias is not None and bias.shape not in ((n_out,), ()):
            raise RuntimeError(f"linear: bias must have shape [{n_out}], got {list(bias.shape)}")
        _same_dtype("linear", x, weight, bias)
        self.x_shape, self.w_shape, self.has_bias = x.shape, weight.shape, bias is not None
        dev = device_of(x, weight, bias)
        shape = x.shape[:-1] + (n_out,)
        y = result_buffer(out, shape, result_type(x, weight), dev, "linear")
        if _live(dev):
            xp = kernels.xp_of_device(dev)
            rows = math.prod(x.shape[:-1])
            x2, keep = (x._data, x) if x.ndim == 2 else _reshaped(x, (rows, n_in))
            y2 = y._data if y.ndim == 2 else y._data.reshape(rows, n_out)
            xp.matmul(x2, weight._data.T, out=y2)
            if bias is not None:
                xp.add(y2, bias._data, out=y2)
            del keep
        return y

    def backward(self, g):
        saved = dict(zip(self._save_idx, self.saved_tensors, strict=True))
        needs = _needs(self)
        n_out, n_in = self.w_shape
        rows = math.prod(self.x_shape[:-1])
        dev, dt = g._device, g._dtype
        g2, gkeep = _dense(g, (rows, n_out))
        xp = kernels.xp_of(g)
        gx = gw = gb = None
        if needs[0]:
            w = saved[1]
            gx = kernels.empty(self.x_shape, dt, dev)
            if _live(dev):
                xp.matmul(g2, w._data, out=gx._data.reshape(rows, n_in))
        if needs[1]:
            x = saved[0]
            gw = kernels.empty(self.w_shape, dt, dev)
            if _live(dev):
                x2, xkeep = _reshaped(x, (rows, n_in))
                xp.matmul(g2.T, x2, out=gw._data)
                del xkeep
        if self.has_bias and needs[2]:
            gb = kernels.empty((n_out,), dt, dev)
            if _live(dev):
                xp.sum(g2, axis=0, out=gb._data)
        del gkeep
        return (gx, gw, gb) if self.has_bias else (gx, gw)

    def name(self):
        return "AddmmBackward0" if len(self.x_shape) == 2 else "LinearBackward0"


# ---------------------------------------------------------------------------------------------
# conv2d
# ---------------------------------------------------------------------------------------------
def conv_out_size(size, k, s, pad_before, pad_after, d):
    return (size + pad_before + pad_after - d * (k - 1) - 1) // s + 1


class _Stage:
    """One sample [C, H, W], zero-padded and split by the horizontal stride: [C, Hp, sw, Wq].

    Padded column q*sw + r lives at [..., r, q], so the windows of one kernel column read
    contiguous runs of OW values (a strided gather is about twice as slow). The buffer is charged
    and reused for every sample; padding stays zero because loads only write input positions.
    """

    def __init__(self, geom, dtype, dev):
        n, c, h, w, o, cg, kh, kw, oh, ow, sh, sw, pt, pb, pl, pr, dh, dw, groups = geom
        self.geom = geom
        hp, wp = h + pt + pb, w + pl + pr
        self.t = kernels.zeros((c, hp, sw, -(-wp // sw)), dtype, dev)
        # input columns f0::sw land at residue r from column q0 on
        self.runs = []
        for r in range(sw):
            f0 = (r - pl) % sw
            if f0 < w:
                self.runs.append((r, (f0 + pl) // sw, f0, len(range(f0, w, sw))))

    def load(self, sample) -> None:
        n, c, h, w, o, cg, kh, kw, oh, ow, sh, sw, pt, pb, pl, pr, dh, dw, groups = self.geom
        buf = self.t._data
        for r, q0, f0, count in self.runs:
            buf[:, pt : pt + h, r, q0 : q0 + count] = sample[:, :, f0::sw]

    def unload(self, out) -> None:
        n, c, h, w, o, cg, kh, kw, oh, ow, sh, sw, pt, pb, pl, pr, dh, dw, groups = self.geom
        buf = self.t._data
        for r, q0, f0, count in self.runs:
            out[:, :, f0::sw] = buf[:, pt : pt + h, r, q0 : q0 + count]

    def windows(self, as_strided, j: int, i: int | None = None):
        """Kernel column j's windows [C, kh, OH, OW] (or kernel offset (i, j)'s [C, OH, OW])."""
        n, c, h, w, o, cg, kh, kw, oh, ow, sh, sw, pt, pb, pl, pr, dh, dw, groups = self.geom
        buf = self.t._data
        s0, s1, _, s3 = buf.strides
        base = buf[:, i * dh if i is not None else 0 :, (j * dw) % sw, (j * dw) // sw :]
        if i is not None:
            return as_strided(base, (c, oh, ow), (s0, s1 * sh, s3))
        return as_strided(base, (c, kh, oh, ow), (s0, s1 * dh, s1 * sh, s3))


class Conv2d(Function):
    """2-D convolution by im2col, one sample at a time (like PyTorch's slow_conv2d).

    A sample's columns are [C, kh, kw, OH, OW] = [groups, C/g*kh*kw, OH*OW], so the matmul with
    W [groups, O/g, C/g*kh*kw] writes that sample's NCHW output directly. The columns (and the
    zero-padded sample they are cut from) are charged buffers reused across the batch: they
    show as temporaries of one sample's size. Backward keeps only input and weight and rebuilds
    the columns; col2im adds strided slices per kernel offset.
    """

    def to_save(self, tensors):
        idx = []
        if tensors[1].requires_grad:
            idx.append(0)  # grad_W needs the input's columns
        if tensors[0].requires_grad:
            idx.append(1)  # grad_x needs W
        self._save_idx = tuple(idx)
        return self._save_idx

    def forward(
        self,
        x,
        weight,
        bias=None,
        out=None,
        stride=(1, 1),
        padding=((0, 0), (0, 0)),
        dilation=(1, 1),
        groups=1,
    ):
        if x.ndim != 4:
            raise RuntimeError(f"conv2d: expected a 4-D input [N, C, H, W], got {list(x.shape)}")
        if weight.ndim != 4:
            raise RuntimeError(
                f"conv2d: expected a 4-D weight [O, C/groups, kh, kw], got {list(weight.shape)}"
            )
        n, c, h, w = x.shape
        o, cg, kh, kw = weight.shape
        if c != cg * groups:
            raise RuntimeError(
                f"Given groups={groups}, weight of size {list(weight.shape)}, expected input"
                f"{list(x.shape)} to have {cg * groups} channels, but got {c} channels instead"
            )
        if o % groups:
            raise RuntimeError(f"conv2d: out_channels ({o}) must be divisible by groups ({groups})")
        _same_dtype("conv2d", x, weight, bias)
        (sh, sw), (dh, dw) = stride, dilation
        (pt, pb), (pl, pr) = padding
        oh = conv_out_size(h, kh, sh, pt, pb, dh)
        ow = conv_out_size(w, kw, sw, pl, pr, dw)
        if oh <= 0 or ow <= 0:
            raise RuntimeError(
                f"Calculated padded input size per channel: ({h + pt + pb} x {w + pl + pr}). Kernel "
                f"size: ({dh * (kh - 1) + 1} x {dw * (kw - 1) + 1}). Kernel size can't be greater "
                "than actual input size"
            )
        self.geom = (n, c, h, w, o, cg, kh, kw, oh, ow, sh, sw, pt, pb, pl, pr, dh, dw, groups)
        self.x_shape, self.w_shape, self.has_bias = x.shape, weight.shape, bias is not None
        dev = device_of(x, weight, bias)
        y = result_buffer(out, (n, o, oh, ow), result_type(x, weight), dev, "conv2d")
        xp = kernels.xp_of_device(dev)
        wr = weight._data.reshape(groups, o // groups, cg * kh * kw) if _live(dev) else None
        b_col = bias._data[:, None] if bias is not None and _live(dev) else None
        for b, cols in self._columns(x):  # on meta this only allocates the workspace
            xp.matmul(wr, cols, out=y._data[b].reshape(groups, o // groups, oh * ow))
            if b_col is not None:  # while the sample's output is still in cache
                yb = y._data[b].reshape(o, oh * ow)
                xp.add(yb, b_col, out=yb)
        return y

    def _pointwise(self) -> bool:
        n, c, h, w, o, cg, kh, kw, oh, ow, sh, sw, pt, pb, pl, pr, dh, dw, groups = self.geom
        return kh == kw == 1 and sh == sw == 1 and pt == pb == pl == pr == 0

    def _columns(self, x: Tensor):
        """Yield (b, columns of sample b as [groups, C/g*kh*kw, OH*OW]) for every sample.

        The buffers are allocated (charged) once and freed when the iteration ends; a 1x1
        convolution reads the input itself. On meta only the allocations happen.
        """
        n, c, h, w, o, cg, kh, kw, oh, ow, sh, sw, pt, pb, pl, pr, dh, dw, groups = self.geom
        ckk, length = cg * kh * kw, oh * ow
        live = _live(x._device)
        if self._pointwise() and x.is_contiguous():
            if live:
                for b in range(n):
                    yield b, x._data[b].reshape(groups, ckk, length)
            return
        cols = kernels.empty((c, kh, kw, oh, ow), x._dtype, x._device)
        stage = _Stage(self.geom, x._dtype, x._device)
        if not live:
            return
        xp = kernels.xp_of(x)
        as_strided = xp.lib.stride_tricks.as_strided
        # the stage never moves, so each kernel column's (source, destination) pair is made once.
        # The copies stay on this thread: a pool thread would compete with OpenBLAS's workers,
        # which keep spinning on the other core for a while after every matmul.
        pairs = [(stage.windows(as_strided, j), cols._data[:, :, j]) for j in range(kw)]
        for b in range(n):
            stage.load(x._data[b])
            for src, dst in pairs:
                xp.copyto(dst, src)
            yield b, cols._data.reshape(groups, ckk, length)

    def backward(self, g):
        saved = dict(zip(self._save_idx, self.saved_tensors, strict=True))
        needs = _needs(self)
        n, c, h, w, o, cg, kh, kw, oh, ow, sh, sw, pt, pb, pl, pr, dh, dw, groups = self.geom
        dev, dt = g._device, g._dtype
        live = _live(dev)
        xp = kernels.xp_of(g)
        og, ckk = o // groups, cg * kh * kw
        g4, gkeep = _dense(g, (n, groups, og, oh * ow))
        gx = gw = gb = None
        if needs[0]:
            gx = self._grad_input(saved[1], g4, dt, dev)
        if needs[1]:
            # grad_W = sum over samples of g[b] @ cols[b].T, computed transposed (cols @ g.T):
            # BLAS is about 3x faster on that shape. One weight-sized charged buffer.
            gw = kernels.empty(self.w_shape, dt, dev)
            acc = gw._data.reshape(groups, og, ckk) if live else None
            part = kernels.empty((groups, ckk, og), dt, dev)
            for b, cols in self._columns(saved[0]):
                xp.matmul(cols, g4[b].transpose(0, 2, 1), out=part._data)
                if b == 0:
                    xp.copyto(acc, part._data.transpose(0, 2, 1))
                else:
                    xp.add(acc, part._data.transpose(0, 2, 1), out=acc)
            del part
        if self.has_bias and needs[2]:
            gb = kernels.empty((o,), dt, dev)
            if live:
                xp.sum(g4.reshape(n, o, oh * ow), axis=(0, 2), out=gb._data)
        del gkeep
        return (gx, gw, gb) if self.has_bias else (gx, gw)

    def _grad_input(self, weight, g4, dt, dev):
        """col2im(W.T @ g), one sample at a time through a charged column buffer."""
        n, c, h, w, o, cg, kh, kw, oh, ow, sh, sw, pt, pb, pl, pr, dh, dw, groups = self.geom
        og, ckk = o // groups, cg * kh * kw
        gx = kernels.empty(self.x_shape, dt, dev)
        wt = weight._data.reshape(groups, og, ckk).transpose(0, 2, 1) if _live(dev) else None
        if self._pointwise():
            if _live(dev):
                xp = kernels.xp_of_device(dev)
                for b in range(n):
                    xp.matmul(wt, g4[b], out=gx._data[b].reshape(groups, ckk, oh * ow))
            return gx
        gcols = kernels.empty((c, kh, kw, oh, ow), dt, dev)
        stage = _Stage(self.geom, dt, dev)
        if _live(dev):
            xp = kernels.xp_of_device(dev)
            as_strided = xp.lib.stride_tricks.as_strided
            regions = [
                (stage.windows(as_strided, j, i), gcols._data[:, i, j])
                for i in range(kh)
                for j in range(kw)
            ]
            for b in range(n):
                xp.matmul(wt, g4[b], out=gcols._data.reshape(groups, ckk, oh * ow))
                stage.t._data.fill(0)
                for region, src in regions:
                    xp.add(region, src, out=region)
                stage.unload(gx._data[b])
        del gcols, stage
        return gx

    def name(self):
        return "ConvolutionBackward0"


# ---------------------------------------------------------------------------------------------
# pooling
# ---------------------------------------------------------------------------------------------
def pool_out_size(size, k, s, p, d, ceil_mode):
    """PyTorch's pooling_output_shape."""
    out = (size + 2 * p - d * (k - 1) - 1 + (s - 1 if ceil_mode else 0)) // s + 1
    if ceil_mode and (out - 1) * s >= size + p:
        out -= 1
    return out


def _pool_geometry(x, kernel_size, stride, padding, dilation, ceil_mode, opname):
    if x.ndim != 4:
        raise RuntimeError(f"{opname}: expected a 4-D input [N, C, H, W], got {list(x.shape)}")
    kh, kw = _pair(kernel_size, "kernel_size")
    sh, sw = _pair(stride if stride not in (None, ()) else (kh, kw), "stride")
    ph, pw = _pair(padding, "padding")
    dh, dw = _pair(dilation, "dilation")
    if ph > (dh * (kh - 1) + 1) // 2 or pw > (dw * (kw - 1) + 1) // 2:
        raise RuntimeError(
            f"pad should be at most half of effective kernel size, but got pad={max(ph, pw)}, "
            f"kernel_size={max(kh, kw)} and dilation={max(dh, dw)}"
        )
    n, c, h, w = x.shape
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


def _max_offsets(xp, geo):
    """Per kernel offset: output ranges, input slices and the flat input index of each output."""
    n, c, h, w, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow = geo
    out = []
    for i in range(kh):
        lh, hh, h0 = _span(oh, sh, ph, i * dh, h)
        if hh <= lh:
            continue
        rows = np.arange(h0, h0 + (hh - lh) * sh, sh)[:, None] * w
        for j in range(kw):
            lw, hw, w0 = _span(ow, sw, pw, j * dw, w)
            if hw <= lw:
                continue
            flat = xp.asarray(rows + np.arange(w0, w0 + (hw - lw) * sw, sw)[None, :])
            out.append((lh, hh, lw, hw, _sl(h0, hh - lh, sh), _sl(w0, hw - lw, sw), flat))
    return out


class MaxPool2d(_KeepsBuffers):
    """max_pool2d_with_indices: (values, int64 flat indices into H*W); gradient to the argmax."""

    num_outputs = 2

    def forward(
        self, x, out=None, kernel_size=2, stride=None, padding=0, dilation=1, ceil_mode=False
    ):
        geo = _pool_geometry(x, kernel_size, stride, padding, dilation, ceil_mode, "max_pool2d")
        n, c, h, w, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow = geo
        self.geom, self.x_shape = geo, x.shape
        dev = x._device
        y = kernels.empty((n, c, oh, ow), x._dtype, dev)
        idx = kernels.empty((n, c, oh, ow), dtypes.int64, dev)
        if _live(dev):
            xp = kernels.xp_of(x)
            x3, keep = _reshaped(x, (n * c, h, w))
            y3, i3 = y._data.reshape(n * c, oh, ow), idx._data.reshape(n * c, oh, ow)
            # start like torch: -inf and the window's first in-bounds position
            hs = np.arange(oh) * sh - ph
            hs = np.where(hs < 0, hs + (-hs + dh - 1) // dh * dh, hs)
            ws = np.arange(ow) * sw - pw
            ws = np.where(ws < 0, ws + (-ws + dw - 1) // dw * dw, ws)
            y3.fill(-np.inf)
            i3[...] = xp.asarray(hs[:, None] * w + ws[None, :])
            chunks, step = _plane_chunks(n * c, oh * ow)
            mask = xp.empty((step, oh, ow), dtype=bool)
            nan = xp.empty((step, oh, ow), dtype=bool)
            offsets = _max_offsets(xp, geo)
            for p0, p1 in chunks:
                for lh, hh, lw, hw, hsl, wsl, flat in offsets:
                    v = x3[p0:p1, hsl, wsl]
                    yr = y3[p0:p1, lh:hh, lw:hw]
                    m = mask[: p1 - p0, lh:hh, lw:hw]
                    nm = nan[: p1 - p0, lh:hh, lw:hw]
                    xp.greater(v, yr, out=m)
                    xp.not_equal(v, v, out=nm)  # NaN wins, as in torch
                    xp.logical_or(m, nm, out=m)
                    xp.copyto(yr, v, where=m)
                    xp.copyto(i3[p0:p1, lh:hh, lw:hw], flat, where=m)
            del keep
        _keep(self, indices=idx)
        return y, idx

    def backward(self, g, g_idx=None):
        n, c, h, w, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow = self.geom
        idx = self.kept("indices")
        dev = g._device
        gx = kernels.zeros(self.x_shape, g._dtype, dev)
        if _live(dev):
            xp = kernels.xp_of(g)
            g3, gkeep = _reshaped(g, (n * c, oh, ow))
            i3 = idx._data.reshape(n * c, oh, ow)
            gx3 = gx._data.reshape(n * c, h, w)
            chunks, step = _plane_chunks(n * c, oh * ow)
            mask = xp.empty((step, oh, ow), dtype=bool)
            offsets = _max_offsets(xp, self.geom)
            for p0, p1 in chunks:
                for lh, hh, lw, hw, hsl, wsl, flat in offsets:
                    m = mask[: p1 - p0, lh:hh, lw:hw]
                    xp.equal(i3[p0:p1, lh:hh, lw:hw], flat, out=m)
                    dst = gx3[p0:p1, hsl, wsl]
                    xp.add(dst, g3[p0:p1, lh:hh, lw:hw], out=dst, where=m)
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
        y = result_buffer(out, (n, c, oh, ow), dtype, dev, "avg_pool2d")
        if _live(dev):
            xp = kernels.xp_of(x)
            y._data.fill(0)
            for lh, hh, lw, hw, hsl, wsl in _offsets(geo):
                yr = y._data[:, :, lh:hh, lw:hw]
                xp.add(yr, x._data[:, :, hsl, wsl], out=yr)
            div = self.div if isinstance(self.div, float) else xp.asarray(self.div.astype(dtype.np))
            xp.true_divide(y._data, div, out=y._data)
        return y

    def backward(self, g):
        dev = g._device
        gx = kernels.zeros(self.x_shape, g._dtype, dev)
        if _live(dev):
            xp = kernels.xp_of(g)
            if isinstance(self.div, float):
                # one divisor for every window: scatter g, then scale (no temporary)
                for lh, hh, lw, hw, hsl, wsl in _offsets(self.geom):
                    dst = gx._data[:, :, hsl, wsl]
                    xp.add(dst, g._data[:, :, lh:hh, lw:hw], out=dst)
                xp.multiply(gx._data, 1.0 / self.div, out=gx._data)
            else:
                # per-window divisors (count_include_pad=False, ceil_mode): g / divisor, charged
                gd = kernels.empty(g.shape, g._dtype, dev)
                xp.true_divide(g._data, xp.asarray(self.div.astype(g._dtype.np)), out=gd._data)
                for lh, hh, lw, hw, hsl, wsl in _offsets(self.geom):
                    dst = gx._data[:, :, hsl, wsl]
                    xp.add(dst, gd._data[:, :, lh:hh, lw:hw], out=dst)
                del gd
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
    def forward(self, x, out=None, output_size=(1, 1)):
        if x.ndim != 4:
            raise RuntimeError(
                f"adaptive_avg_pool2d: expected a 4-D input [N, C, H, W], got {list(x.shape)}"
            )
        n, c, h, w = x.shape
        oh, ow = output_size
        oh = h if oh is None else oh
        ow = w if ow is None else ow
        self.x_shape, self.out_hw = x.shape, (oh, ow)
        dev = x._device
        y = result_buffer(out, (n, c, oh, ow), x._dtype, dev, "adaptive_avg_pool2d")
        if _live(dev):
            xp = kernels.xp_of(x)
            if (oh, ow) == (1, 1):
                xp.mean(x._data, axis=(2, 3), keepdims=True, out=y._data)
            else:
                for a, (h0, h1) in enumerate(_adaptive_ranges(h, oh)):
                    for b, (w0, w1) in enumerate(_adaptive_ranges(w, ow)):
                        xp.mean(x._data[:, :, h0:h1, w0:w1], axis=(2, 3), out=y._data[:, :, a, b])
        return y

    def backward(self, g):
        n, c, h, w = self.x_shape
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
            for a, (h0, h1) in enumerate(_adaptive_ranges(h, oh)):
                for b, (w0, w1) in enumerate(_adaptive_ranges(w, ow)):
                    dst = gx._data[:, :, h0:h1, w0:w1]
                    scale = 1.0 / ((h1 - h0) * (w1 - w0))
                    xp.add(dst, g._data[:, :, a : a + 1, b : b + 1] * scale, out=dst)
        return (gx,)

    def name(self):
        return "AdaptiveAvgPool2DBackward0"


# ---------------------------------------------------------------------------------------------
# losses
# ---------------------------------------------------------------------------------------------
_REDUCTIONS = ("none", "mean", "sum")


def _check_reduction(reduction):
    if reduction not in _REDUCTIONS:
        raise ValueError(f"{reduction} is not a valid value for reduction")


class MseLoss(Function):
    retain_inputs = (0, 1)

    def forward(self, input, target, out=None, reduction="mean"):
        _check_reduction(reduction)
        shape = broadcast_shape(input, target, "mse_loss")
        dtype = result_type(input, target)
        dev = device_of(input, target)
        self.reduction, self.shape = reduction, shape
        self.shapes = (input.shape, target.shape)
        if reduction == "none":
            y = result_buffer(out, shape, dtype, dev, "mse_loss")
            if _live(dev):
                xp = kernels.xp_of_device(dev)
                _uf(xp, np.subtract, input._data, target._data, out=y._data)
                _uf(xp, np.multiply, y._data, y._data, out=y._data)
            return y
        # PyTorch reduces into its full-size result buffer resized to 0-d: the loss scalar keeps
        # the whole buffer. Doing the same keeps the engine's peak equal to torch's.
        result = kernels.empty(shape if math.prod(shape) else (1,), dtype, dev)
        losses = kernels.empty(shape, dtype, dev)
        if _live(dev):
            xp = kernels.xp_of_device(dev)
            _uf(xp, np.subtract, input._data, target._data, out=losses._data)
            _uf(xp, np.multiply, losses._data, losses._data, out=losses._data)
            reduce = xp.mean if reduction == "mean" else xp.sum
            reduce(losses._data, out=_first_element(result._data))
        del losses
        return Tensor._make(_first_element(result._data), result._storage, dtype, dev)

    def backward(self, g):
        x, t = self.saved_tensors
        nx, nt = _needs(self)
        dev, dt = g._device, g._dtype
        gi = kernels.empty(self.shape, dt, dev)
        if _live(dev):
            xp = kernels.xp_of(g)
            _uf(xp, np.subtract, x._data, t._data, out=gi._data)
            if self.reduction == "none":
                xp.multiply(gi._data, 2.0, out=gi._data)
                xp.multiply(gi._data, g._data, out=gi._data)
            else:
                scale = 2.0 * float(g.item())
                if self.reduction == "mean":
                    scale /= max(math.prod(self.shape), 1)
                _uf(xp, np.multiply, gi._data, scale, out=gi._data)
        gx = gt = None
        if nt:
            gt = kernels.empty(self.shape, dt, dev)
            if _live(dev):
                kernels.xp_of(g).negative(gi._data, out=gt._data)
            gt = sum_to(gt, self.shapes[1])
        if nx:
            gx = sum_to(gi, self.shapes[0])
        return (gx, gt)

    def name(self):
        return "MseLossBackward0"


class NllLoss(_KeepsBuffers):
    """nll_loss(log_probs [N, C, *], target [N, *]) with weight, ignore_index and reduction."""

    def to_save(self, tensors):
        return tuple(range(1, len(tensors)))  # target (and weight); the input is not needed

    def forward(self, input, target, weight=None, out=None, reduction="mean", ignore_index=-100):
        _check_reduction(reduction)
        if target._dtype.is_floating_point or target._dtype is dtypes.bool_:
            raise RuntimeError(
                f"expected scalar type Long but found {target._dtype.torch_tensor_name.replace('Tensor', '')}"
            )
        batched = input.ndim >= 2
        ishape = input.shape if batched else (1,) + input.shape
        tshape = target.shape if batched else (1,) + target.shape
        if ishape[:1] + ishape[2:] != tshape:
            raise ValueError(
                f"Expected input batch_size ({ishape[0]}) to match target batch_size ({tshape[0]})."
                if ishape[0] != tshape[0]
                else f"nll_loss: expected target of shape {list(ishape[:1] + ishape[2:])}, got {list(target.shape)}"
            )
        n_cls = ishape[1]
        if weight is not None and weight.shape != (n_cls,):
            raise RuntimeError(
                f"weight tensor should be defined either for all {n_cls} classes or no classes but "
                f"got weight tensor of shape: {list(weight.shape)}"
            )
        self.reduction, self.ignore_index = reduction, ignore_index
        self.ishape, self.in_shape, self.has_weight = ishape, input.shape, weight is not None
        dev, dt = input._device, input._dtype
        if reduction == "none":
            y = kernels.empty(target.shape, dt, dev)
        else:
            y = kernels.empty((), dt, dev)
            total = kernels.empty((), dt, dev)
        if _live(dev):
            xp = kernels.xp_of(input)
            flat_in, keep = _reshaped(input, (math.prod(ishape),))
            (idx, wts), owners = self._index(xp, target, weight, dev, dt)
            picked, pkeep = _work(idx.shape, dt, dev)
            xp.take(flat_in, idx, out=picked)
            xp.multiply(picked, wts, out=picked)
            if reduction == "none":
                xp.negative(picked.reshape(target.shape), out=y._data)
            else:
                s = -xp.sum(picked, dtype=np.float64)
                tw = xp.sum(wts, dtype=np.float64)
                total._data[...] = tw
                if reduction == "mean":
                    s = s / tw if tw != 0 else np.nan
                y._data[...] = s
            del picked, pkeep, idx, wts, owners, keep
        if reduction != "none":
            _keep(self, total_weight=total)
        return y

    def _index(self, xp, target, weight, dev, dt):
        """Flat positions into the input and per-element weights (0 where ignored).

        Returns ((idx, wts), owners): target-sized scratch, charged when it is large.
        """
        n, n_cls = self.ishape[0], self.ishape[1]
        inner = math.prod(self.ishape[2:])
        t = target._data.reshape(n, inner)
        valid, vkeep = _work((n, inner), dtypes.bool_, dev)
        xp.not_equal(t, self.ignore_index, out=valid)
        if n * inner:
            hi = int(xp.max(t, where=valid, initial=-1))
            lo = int(xp.min(t, where=valid, initial=0))
            if hi >= n_cls or lo < 0:
                raise IndexError(f"Target {hi if hi >= n_cls else lo} is out of bounds.")
        idx, ikeep = _work((n, inner), dtypes.int64, dev)
        xp.multiply(t, valid, out=idx)  # the class, 0 where ignored
        wts, wkeep = _work((n, inner), dt, dev)
        if weight is not None:
            xp.take(weight._data, idx, out=wts)
            xp.multiply(wts, valid, out=wts)
        else:
            xp.copyto(wts, valid, casting="unsafe")
        del valid, vkeep
        xp.multiply(idx, inner, out=idx)
        xp.add(idx, xp.asarray(np.arange(n, dtype=np.int64)[:, None] * (n_cls * inner)), out=idx)
        xp.add(idx, xp.asarray(np.arange(inner, dtype=np.int64)[None, :]), out=idx)
        return (idx, wts), (ikeep, wkeep)

    def backward(self, g):
        saved = self.saved_tensors
        target = saved[0]
        weight = saved[1] if self.has_weight else None
        dev, dt = g._device, g._dtype
        gx = kernels.zeros(self.in_shape, dt, dev)
        if _live(dev):
            xp = kernels.xp_of(g)
            (idx, wts), owners = self._index(xp, target, weight, dev, dt)
            if self.reduction == "none":
                xp.multiply(wts, g._data.reshape(wts.shape), out=wts)
                xp.negative(wts, out=wts)
            else:
                scale = -float(g.item())
                if self.reduction == "mean":
                    scale /= float(self.kept("total_weight").item())
                xp.multiply(wts, scale, out=wts)
            xp.put(gx._data.reshape(-1), idx, wts)
            del idx, wts, owners
        return (gx, None, None) if self.has_weight else (gx, None)

    def name(self):
        return "NllLossBackward0" if len(self.ishape) == 2 else "NllLoss2DBackward0"


# ---------------------------------------------------------------------------------------------
# indexing
# ---------------------------------------------------------------------------------------------
def _check_index(index: Tensor, opname: str):
    if index._dtype not in (dtypes.int64, dtypes.int32):
        raise RuntimeError(f"{opname}(): Expected dtype int32/int64 for index")


class Gather(Function):
    def to_save(self, tensors):
        return (1,)

    def forward(self, x, index, out=None, dim=0):
        from engine.storage import wrap_storage
        from engine.tensor import _wrap_dim

        _check_index(index, "gather")
        d = _wrap_dim(dim, x.ndim)
        if index.ndim != x.ndim:
            raise RuntimeError(
                "Index tensor must have the same number of dimensions as input tensor"
            )
        for i, (a, b) in enumerate(zip(index.shape, x.shape, strict=True)):
            if i != d and a > b:
                raise RuntimeError(
                    f"Size does not match at dimension {i} expected index {list(index.shape)} to be "
                    f"no larger than self {list(x.shape)} apart from dimension {d}"
                )
        self.dim, self.x_shape = d, x.shape
        dev = x._device
        if not _live(dev):
            return kernels.empty(index.shape, x._dtype, dev)
        xp = kernels.xp_of(x)
        src = x._data[
            tuple(slice(0, n) if i != d else slice(None) for i, n in enumerate(index.shape))
        ]
        arr = xp.take_along_axis(src, index._data.astype(np.int64, copy=False), axis=d)
        return Tensor._make(arr, wrap_storage(arr, dev), x._dtype, dev)

    def backward(self, g):
        (index,) = self.saved_tensors
        gx = kernels.zeros(self.x_shape, g._dtype, g._device)
        if _live(g._device):
            xp = kernels.xp_of(g)
            full = [
                xp.arange(n).reshape([-1 if k == i else 1 for k in range(g.ndim)])
                for i, n in enumerate(index.shape)
            ]
            full[self.dim] = index._data
            xp.add.at(gx._data, tuple(full), g._data)
        return (gx, None)

    def name(self):
        return "GatherBackward0"


class IndexSelect(Function):
    def to_save(self, tensors):
        return (1,)

    def forward(self, x, index, out=None, dim=0):
        from engine.tensor import _wrap_dim

        _check_index(index, "index_select")
        if index.ndim > 1:
            raise IndexError("index_select(): Index is supposed to be a vector")
        d = _wrap_dim(dim, x.ndim)
        self.dim, self.x_shape = d, x.shape
        shape = x.shape[:d] + (index.numel(),) + x.shape[d + 1 :]
        y = result_buffer(out, shape, x._dtype, x._device, "index_select")
        if _live(x._device):
            kernels.xp_of(x).take(x._data, index._data.reshape(-1), axis=d, out=y._data)
        return y

    def backward(self, g):
        (index,) = self.saved_tensors
        gx = kernels.zeros(self.x_shape, g._dtype, g._device)
        if _live(g._device):
            xp = kernels.xp_of(g)
            xp.add.at(gx._data, (slice(None),) * self.dim + (index._data.reshape(-1),), g._data)
        return (gx, None)

    def name(self):
        return "IndexSelectBackward0"


class Embedding(Function):
    """weight[indices] -> indices.shape + [D]; dense gradient, padding_idx rows get none."""

    def to_save(self, tensors):
        return (1,)

    def forward(self, weight, indices, out=None, padding_idx=None):
        _check_index(indices, "embedding")
        if weight.ndim != 2:
            raise RuntimeError("'weight' must be 2-D")
        self.w_shape, self.padding_idx = weight.shape, padding_idx
        y = result_buffer(
            out, indices.shape + (weight.shape[1],), weight._dtype, weight._device, "embedding"
        )
        if _live(weight._device):
            xp = kernels.xp_of(weight)
            flat = indices._data.reshape(-1)
            if flat.size and (int(flat.max()) >= weight.shape[0] or int(flat.min()) < 0):
                raise IndexError("index out of range in self")
            xp.take(weight._data, flat, axis=0, out=y._data.reshape(-1, weight.shape[1]))
        return y

    def backward(self, g):
        (indices,) = self.saved_tensors
        gw = kernels.zeros(self.w_shape, g._dtype, g._device)
        if _live(g._device):
            xp = kernels.xp_of(g)
            g2, keep = _reshaped(g, (indices.numel(), self.w_shape[1]))
            xp.add.at(gw._data, indices._data.reshape(-1), g2)
            if self.padding_idx is not None:
                gw._data[self.padding_idx] = 0
            del keep
        return (gw, None)

    def name(self):
        return "EmbeddingBackward0"


# ---------------------------------------------------------------------------------------------
# dropout
# ---------------------------------------------------------------------------------------------
class Dropout(_KeepsBuffers):
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
        _keep(self, noise=noise)
        return y

    def backward(self, g):
        noise = self.kept("noise")
        gx = kernels.empty(g.shape, g._dtype, g._device)
        if _live(g._device):
            kernels.xp_of(g).multiply(g._data, noise._data, out=gx._data)
        return (gx,)

    def name(self):
        return "MulBackward0"


# ---------------------------------------------------------------------------------------------
# normalisation
# ---------------------------------------------------------------------------------------------
def _channel_sums(xp, a3, b3=None):
    """Per-channel sum of a (or of a*b) over [N, C, L] in float64, without full-size temporaries."""
    acc = (
        np.zeros(a3.shape[1], dtype=np.float64)
        if xp is np
        else xp.zeros(a3.shape[1], dtype=np.float64)
    )
    for i in range(a3.shape[0]):
        if b3 is None:
            acc += xp.sum(a3[i], axis=1, dtype=np.float64)
        else:
            acc += xp.einsum("cl,cl->c", a3[i], b3[i])
    return acc


def _centered_dot(xp, g3, x3, mean):
    """Per-channel sum of g * (x - mean) over [N, C, L], through a bounded scratch."""
    n, c, length = x3.shape
    step = max(1, _SCRATCH // max(c, 1))
    scratch = xp.empty((c, min(step, length)), dtype=x3.dtype)
    acc = xp.zeros(c, dtype=np.float64)
    m = mean[:, None]
    for b in range(n):
        for l0 in range(0, length, step):
            l1 = min(l0 + step, length)
            s = scratch[:, : l1 - l0]
            xp.subtract(x3[b, :, l0:l1], m, out=s)
            acc += xp.einsum("cl,cl->c", g3[b, :, l0:l1], s)
    return acc


class BatchNorm(_KeepsBuffers):
    """native_batch_norm: output plus save_mean / save_invstd [C]; running stats updated in place."""

    def prepare(self, *args):
        self.present = tuple(a is not None for a in args[1:5])

    def forward(
        self,
        x,
        weight=None,
        bias=None,
        running_mean=None,
        running_var=None,
        out=None,
        training=True,
        momentum=0.1,
        eps=1e-5,
    ):
        self.present = (
            weight is not None,
            bias is not None,
            running_mean is not None,
            running_var is not None,
        )
        if x.ndim < 2:
            raise ValueError(f"batch_norm: expected at least 2-D input (got {x.ndim}D input)")
        n, c = x.shape[:2]
        length = math.prod(x.shape[2:])
        if training and n * length <= 1:
            raise ValueError(
                f"Expected more than 1 value per channel when training, got input size {list(x.shape)}"
            )
        if not training and (running_mean is None or running_var is None):
            raise RuntimeError("running_mean and running_var must be defined in evaluation mode")
        self.training, self.eps, self.x_shape = training, eps, x.shape
        dev, dt = x._device, x._dtype
        y = result_buffer(out, x.shape, dt, dev, "batch_norm")
        mean = kernels.empty((c,), dt, dev)
        invstd = kernels.empty((c,), dt, dev)
        if _live(dev):
            xp = kernels.xp_of(x)
            x3, keep = _reshaped(x, (n, c, length))
            y3 = y._data.reshape(n, c, length)
            m = n * length
            if training:
                mu = _channel_sums(xp, x3) / m
                xp.subtract(x3, mu.astype(dt.np)[:, None], out=y3)
                var = _channel_sums(xp, y3, y3) / m
                mean._data[...] = mu
                invstd._data[...] = 1.0 / xp.sqrt(var + eps)
                with_stats = running_mean is not None
                if with_stats:
                    rm, rv = running_mean._data, running_var._data
                    rm[...] = (1 - momentum) * rm + momentum * mu
                    rv[...] = (1 - momentum) * rv + momentum * var * (m / max(m - 1, 1))
                    running_mean._storage.version += 1
                    running_var._storage.version += 1
            else:
                mean._data[...] = running_mean._data
                invstd._data[...] = 1.0 / xp.sqrt(running_var._data.astype(np.float64) + eps)
                xp.subtract(x3, mean._data[:, None], out=y3)
            scale = invstd._data if weight is None else invstd._data * weight._data
            xp.multiply(y3, scale[:, None], out=y3)
            if bias is not None:
                xp.add(y3, bias._data[:, None], out=y3)
            del keep
        _keep(self, mean=mean, invstd=invstd)
        return y

    def to_save(self, tensors):
        return (0, 1) if self.present[0] else (0,)

    def backward(self, g):
        saved = self.saved_tensors
        x = saved[0]
        weight = saved[1] if self.present[0] else None
        mean, invstd = self.kept("mean"), self.kept("invstd")
        needs = _needs(self)
        present = [True, *self.present]
        slots = [i for i, p in enumerate(present) if p]  # arg position of each tensor input
        want = {slot: needs[k] for k, slot in enumerate(slots)}
        dev, dt = g._device, g._dtype
        n, c = self.x_shape[:2]
        length = math.prod(self.x_shape[2:])
        m = n * length
        gx = gw = gb = None
        if want[0]:
            gx = kernels.empty(self.x_shape, dt, dev)
        if want.get(1):
            gw = kernels.empty((c,), dt, dev)
        if want.get(2):
            gb = kernels.empty((c,), dt, dev)
        if _live(dev):
            xp = kernels.xp_of(g)
            g3, gkeep = _reshaped(g, (n, c, length))
            x3, xkeep = _reshaped(x, (n, c, length))
            inv = invstd._data.astype(np.float64)
            w = weight._data.astype(np.float64) if weight is not None else 1.0
            sum_g = _channel_sums(xp, g3)
            if gx is not None:
                # x - mean in the grad_input buffer, which becomes dx below
                c3 = gx._data.reshape(n, c, length)
                xp.subtract(x3, mean._data[:, None], out=c3)
                dot = _channel_sums(xp, g3, c3)  # sum(g * (x - mean))
            else:
                c3 = None
                dot = _centered_dot(xp, g3, x3, mean._data)
            if gw is not None:
                gw._data[...] = dot * inv
            if gb is not None:
                gb._data[...] = sum_g
            if gx is not None:
                if self.training:
                    # dx = w*inv * (g - sum_g/m - (x-mean) * inv^2 * dot/m)
                    xp.multiply(c3, (-(inv * inv) * dot / m).astype(dt.np)[:, None], out=c3)
                    xp.add(c3, g3, out=c3)
                    xp.subtract(c3, (sum_g / m).astype(dt.np)[:, None], out=c3)
                    xp.multiply(c3, (w * inv).astype(dt.np)[:, None], out=c3)
                else:
                    xp.multiply(g3, (inv * w).astype(dt.np)[:, None], out=c3)
            del c3, gkeep, xkeep
        grads = {0: gx, 1: gw, 2: gb}
        return tuple(grads.get(slot) for slot in slots)

    def name(self):
        return "NativeBatchNormBackward0"


class LayerNorm(_KeepsBuffers):
    """native_layer_norm over the trailing dims: output plus mean / rstd per row."""

    def prepare(self, *args):
        self.present = (args[1] is not None, args[2] is not None)

    def forward(self, x, weight=None, bias=None, out=None, normalized_shape=(), eps=1e-5):
        normalized_shape = tuple(normalized_shape)
        k = len(normalized_shape)
        if k == 0 or x.shape[x.ndim - k :] != normalized_shape:
            raise RuntimeError(
                f"Given normalized_shape={list(normalized_shape)}, expected input with shape "
                f"[*, {', '.join(str(s) for s in normalized_shape)}], but got input of size{list(x.shape)}"
            )
        self.present = (weight is not None, bias is not None)
        d = math.prod(normalized_shape)
        rows = x.numel() // d if d else 0
        self.x_shape, self.dims, self.eps = x.shape, (rows, d), eps
        self.normalized_shape = normalized_shape
        dev, dt = x._device, x._dtype
        y = result_buffer(out, x.shape, dt, dev, "layer_norm")
        mean = kernels.empty((rows,), dt, dev)
        rstd = kernels.empty((rows,), dt, dev)
        if _live(dev):
            xp = kernels.xp_of(x)
            x2, keep = _reshaped(x, (rows, d))
            y2 = y._data.reshape(rows, d)
            xp.mean(x2, axis=1, out=mean._data)
            xp.subtract(x2, mean._data[:, None], out=y2)
            var = xp.einsum("md,md->m", y2, y2) / d
            rstd._data[...] = 1.0 / xp.sqrt(var + eps)
            xp.multiply(y2, rstd._data[:, None], out=y2)
            if weight is not None:
                xp.multiply(y2, weight._data.reshape(-1), out=y2)
            if bias is not None:
                xp.add(y2, bias._data.reshape(-1), out=y2)
            del keep
        _keep(self, mean=mean, rstd=rstd)
        return y

    def to_save(self, tensors):
        return (0, 1) if self.present[0] else (0,)

    def backward(self, g):
        saved = self.saved_tensors
        x = saved[0]
        weight = saved[1] if self.present[0] else None
        mean, rstd = self.kept("mean"), self.kept("rstd")
        needs = _needs(self)
        slots = [0] + [i + 1 for i, p in enumerate(self.present) if p]
        want = {slot: needs[k] for k, slot in enumerate(slots)}
        rows, d = self.dims
        dev, dt = g._device, g._dtype
        gx = gw = gb = None
        if want[0]:
            gx = kernels.empty(self.x_shape, dt, dev)
        if want.get(1):
            gw = kernels.empty(self.normalized_shape, dt, dev)
        if want.get(2):
            gb = kernels.empty(self.normalized_shape, dt, dev)
        if _live(dev):
            xp = kernels.xp_of(g)
            g2, gkeep = _reshaped(g, (rows, d))
            x2, xkeep = _reshaped(x, (rows, d))
            xhat = gx if gx is not None else kernels.empty(self.x_shape, dt, dev)
            h2 = xhat._data.reshape(rows, d)
            xp.subtract(x2, mean._data[:, None], out=h2)
            xp.multiply(h2, rstd._data[:, None], out=h2)
            if gw is not None:
                xp.einsum("md,md->d", g2, h2, out=gw._data.reshape(-1))
            if gb is not None:
                xp.sum(g2, axis=0, out=gb._data.reshape(-1))
            if gx is not None:
                wv = weight._data.reshape(-1) if weight is not None else None
                if wv is not None:
                    a1 = g2 @ wv  # row sums of g*w
                    a2 = xp.einsum("md,md,d->m", g2, h2, wv)
                else:
                    a1 = g2.sum(axis=1)
                    a2 = xp.einsum("md,md->m", g2, h2)
                # dx = rstd * (g*w - a1/d - xhat * a2/d)
                xp.multiply(h2, (-a2 / d)[:, None], out=h2)
                xp.subtract(h2, (a1 / d)[:, None], out=h2)
                _add_product_rows(xp, h2, g2, wv)
                xp.multiply(h2, rstd._data[:, None], out=h2)
            del xhat, gkeep, xkeep
        grads = {0: gx, 1: gw, 2: gb}
        return tuple(grads.get(slot) for slot in slots)

    def name(self):
        return "NativeLayerNormBackward0"


def _add_product_rows(xp, out2, g2, wv):
    """out2 += g2 * wv (wv broadcast over rows, or None for 1) with bounded scratch."""
    if wv is None:
        xp.add(out2, g2, out=out2)
        return
    rows, d = out2.shape
    step = max(1, _SCRATCH // max(d, 1))
    scratch = xp.empty((min(step, rows), d), dtype=out2.dtype)
    for i in range(0, rows, step):
        j = min(i + step, rows)
        s = scratch[: j - i]
        xp.multiply(g2[i:j], wv, out=s)
        xp.add(out2[i:j], s, out=out2[i:j])


# ---------------------------------------------------------------------------------------------
# gelu
# ---------------------------------------------------------------------------------------------
_SQRT1_2 = 1.0 / math.sqrt(2.0)
_SQRT2_PI = math.sqrt(2.0 / math.pi)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)


def _erf_abs_chunk(xp, z, out, s1, s2):
    """out = erf(|z|) (Abramowitz & Stegun 7.1.26, |error| < 1.5e-7); s1, s2 are scratch."""
    a1, a2, a3, a4, a5, p = (
        0.254829592,
        -0.284496736,
        1.421413741,
        -1.453152027,
        1.061405429,
        0.3275911,
    )
    xp.abs(z, out=s2)
    xp.multiply(s2, p, out=out)
    xp.add(out, 1.0, out=out)
    xp.reciprocal(out, out=out)  # t
    xp.multiply(s2, s2, out=s2)
    xp.negative(s2, out=s2)
    xp.exp(s2, out=s2)  # exp(-z^2)
    xp.multiply(out, a5, out=s1)
    for a in (a4, a3, a2, a1):
        xp.add(s1, a, out=s1)
        xp.multiply(s1, out, out=s1)
    xp.multiply(s1, s2, out=s1)
    xp.subtract(1.0, s1, out=out)


def _phi_chunk(xp, x, out, s1, s2):
    """out = Phi(x) = 0.5 * (1 + erf(x / sqrt(2)))."""
    xp.multiply(x, _SQRT1_2, out=s1)
    _erf_abs_chunk(xp, s1, out, s1, s2)
    xp.copysign(out, x, out=out)
    xp.add(out, 1.0, out=out)
    xp.multiply(out, 0.5, out=out)


def _tanh_inner(xp, x, out):
    """out = tanh(sqrt(2/pi) * (x + 0.044715 x^3))."""
    xp.multiply(x, x, out=out)
    xp.multiply(out, 0.044715, out=out)
    xp.add(out, 1.0, out=out)
    xp.multiply(out, x, out=out)
    xp.multiply(out, _SQRT2_PI, out=out)
    xp.tanh(out, out=out)


def _gelu_chunk(xp, approximate, x, out, s1, s2):
    if approximate == "tanh":
        _tanh_inner(xp, x, s1)
        xp.add(s1, 1.0, out=s1)
    else:
        _phi_chunk(xp, x, s1, out, s2)
        xp.multiply(s1, 2.0, out=s1)
    xp.multiply(s1, x, out=out)
    xp.multiply(out, 0.5, out=out)


def _gelu_grad_chunk(xp, approximate, x, g, out, s1, s2):
    if approximate == "tanh":
        # 0.5 (1 + t) + 0.5 x (1 - t^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2)
        _tanh_inner(xp, x, s1)
        xp.multiply(x, x, out=out)
        xp.multiply(out, 3 * 0.044715, out=out)
        xp.add(out, 1.0, out=out)
        xp.multiply(out, _SQRT2_PI * 0.5, out=out)
        xp.multiply(out, x, out=out)
        xp.multiply(s1, s1, out=s2)
        xp.subtract(1.0, s2, out=s2)
        xp.multiply(out, s2, out=out)
        xp.add(s1, 1.0, out=s1)
        xp.multiply(s1, 0.5, out=s1)
        xp.add(out, s1, out=out)
    else:
        # Phi(x) + x phi(x)
        _phi_chunk(xp, x, out, s1, s2)
        xp.multiply(x, x, out=s1)
        xp.multiply(s1, -0.5, out=s1)
        xp.exp(s1, out=s1)
        xp.multiply(s1, x, out=s1)
        xp.multiply(s1, _INV_SQRT_2PI, out=s1)
        xp.add(out, s1, out=out)
    xp.multiply(out, g, out=out)


def _chunked(xp, func, out, *arrays):
    """func(*chunks, out_chunk, scratch1, scratch2) over flat chunks of contiguous arrays.

    The two scratch buffers hold at most kernels.SCRATCH_ELEMS elements each (not charged); on
    cupy the whole array is one chunk and CuPy's own temporaries show through its memory hook.
    """
    if xp is not np:
        func(*arrays, out, xp.empty_like(out), xp.empty_like(out))
        return
    flats = [a.reshape(-1) for a in arrays]
    fo = out.reshape(-1)
    s1 = np.empty(min(_SCRATCH, max(fo.size, 1)), dtype=fo.dtype)
    s2 = np.empty_like(s1)
    for i in range(0, fo.size, _SCRATCH):
        j = min(i + _SCRATCH, fo.size)
        func(*[f[i:j] for f in flats], fo[i:j], s1[: j - i], s2[: j - i])


def _contiguous(t: Tensor):
    """(array, owner): t's array when C-contiguous, else a charged contiguous copy."""
    if t.is_contiguous():
        return t._data, t
    c = kernels.copy_new(t)
    return c._data, c


class Gelu(Function):
    retain_inputs = (0,)

    def forward(self, x, out=None, approximate="none"):
        if approximate not in ("none", "tanh"):
            raise RuntimeError(
                f"approximate argument must be either none or tanh, got {approximate!r}"
            )
        self.approximate = approximate
        y = result_buffer(out, x.shape, x._dtype, x._device, "gelu")
        if _live(x._device):
            xp = kernels.xp_of(x)
            src, keep = _contiguous(x)
            _chunked(
                xp, lambda a, o, s1, s2: _gelu_chunk(xp, approximate, a, o, s1, s2), y._data, src
            )
            del keep
        return y

    def backward(self, g):
        (x,) = self.saved_tensors
        gx = kernels.empty(g.shape, g._dtype, g._device)
        if _live(g._device):
            xp = kernels.xp_of(g)
            xs, xkeep = _contiguous(x)
            gs, gkeep = _contiguous(g)
            approximate = self.approximate
            _chunked(
                xp,
                lambda a, b, o, s1, s2: _gelu_grad_chunk(xp, approximate, a, b, o, s1, s2),
                gx._data,
                xs,
                gs,
            )
            del xkeep, gkeep
        return (gx,)

    def name(self):
        return "GeluBackward0"


# ---------------------------------------------------------------------------------------------
# optimizer arithmetic: addcmul, addcdiv, lerp (in place without full-size temporaries)
# ---------------------------------------------------------------------------------------------
class _Ternary(Function):
    """out = f(self, a, b) for tensors of one shape (broadcasting allowed, charged when it is)."""

    opname = "ternary"

    def _prepare_out(self, s, a, b, out):
        args = [t for t in (s, a, b) if isinstance(t, Tensor)]
        shape = tuple(np.broadcast_shapes(*(t.shape for t in args)))
        self.shapes = tuple(t.shape if isinstance(t, Tensor) else () for t in (s, a, b))
        dev = device_of(*args)
        return result_buffer(out, shape, result_type(*args), dev, self.opname), dev

    def _combine(self, s, t1, t2, out, value, pair: str):
        """out = s + value * pair(t1, t2), blocked with a scratch (charged when it cannot be)."""
        self.value = value
        y, dev = self._prepare_out(s, t1, t2, out)
        if _live(dev):
            xp = kernels.xp_of_device(dev)
            combine = getattr(xp, pair)

            def fn(o, a, b, c, scratch):
                combine(b, c, out=scratch)
                if value != 1:
                    xp.multiply(scratch, value, out=scratch)
                xp.add(a, scratch, out=o)

            if not _blocked(fn, y._data, s._data, t1._data, t2._data):
                tmp = kernels.empty(y.shape, y._dtype, dev)
                combine(t1._data, t2._data, out=tmp._data)
                if value != 1:
                    xp.multiply(tmp._data, value, out=tmp._data)
                xp.add(s._data, tmp._data, out=y._data)
                del tmp
        return y

    def _grads(self, *gs):
        out = []
        for gi, shape in zip(gs, self.shapes, strict=False):
            out.append(None if gi is None else sum_to(gi, shape))
        return tuple(out)


class Addcmul(_Ternary):
    """self + value * t1 * t2."""

    opname = "addcmul"

    def to_save(self, tensors):
        idx = []
        if tensors[2].requires_grad:
            idx.append(1)
        if tensors[1].requires_grad:
            idx.append(2)
        self._save_idx = tuple(idx)
        return self._save_idx

    def forward(self, s, t1, t2, out=None, value=1):
        return self._combine(s, t1, t2, out, value, "multiply")

    def backward(self, g):
        saved = dict(zip(self._save_idx, self.saved_tensors, strict=True))
        ns, n1, n2 = _needs(self)
        g1 = g * saved[2] * self.value if n1 else None
        g2 = g * saved[1] * self.value if n2 else None
        return self._grads(g if ns else None, g1, g2)

    def name(self):
        return "AddcmulBackward0"


class Addcdiv(_Ternary):
    """self + value * t1 / t2."""

    opname = "addcdiv"

    def to_save(self, tensors):
        if tensors[1].requires_grad or tensors[2].requires_grad:
            return (1, 2)
        return ()

    def forward(self, s, t1, t2, out=None, value=1):
        return self._combine(s, t1, t2, out, value, "true_divide")

    def backward(self, g):
        ns, n1, n2 = _needs(self)
        t1 = t2 = None
        if n1 or n2:
            t1, t2 = self.saved_tensors
        g1 = g * self.value / t2 if n1 else None
        g2 = -(g * self.value) * t1 / (t2 * t2) if n2 else None
        return self._grads(g if ns else None, g1, g2)

    def name(self):
        return "AddcdivBackward0"


class Lerp(_Ternary):
    """self + weight * (end - self), weight a number or a tensor (PyTorch's two-sided formula)."""

    opname = "lerp"

    def to_save(self, tensors):
        if len(tensors) == 3 and tensors[2].requires_grad:
            return (0, 1, 2)
        if len(tensors) == 3:
            return (2,)
        return ()

    def forward(self, s, end, weight=None, out=None, scalar_weight=0.5):
        self.w_t = isinstance(weight, Tensor)
        self.scalar = scalar_weight
        y, dev = self._prepare_out(s, end, weight if self.w_t else None, out)
        if _live(dev):
            xp = kernels.xp_of_device(dev)
            if not self.w_t:
                w = float(scalar_weight)

                def fn(o, a, b, scratch):
                    xp.subtract(b, a, out=scratch)
                    if abs(w) < 0.5:
                        xp.multiply(scratch, w, out=scratch)
                        xp.add(a, scratch, out=o)
                    else:
                        xp.multiply(scratch, 1.0 - w, out=scratch)
                        xp.subtract(b, scratch, out=o)

                if not _blocked(fn, y._data, s._data, end._data):
                    tmp = kernels.empty(y.shape, y._dtype, dev)
                    fn(y._data, s._data, end._data, tmp._data)
                    del tmp
            else:
                tmp = kernels.empty(y.shape, y._dtype, dev)
                xp.subtract(end._data, s._data, out=tmp._data)
                xp.multiply(tmp._data, weight._data, out=tmp._data)
                xp.add(s._data, tmp._data, out=y._data)
                del tmp
        return y

    def backward(self, g):
        needs = _needs(self)
        if not self.w_t:
            w = self.scalar
            return self._grads(
                g * (1.0 - w) if needs[0] else None, g * w if needs[1] else None, None
            )[:2]
        saved = self.saved_tensors
        wt = saved[-1]
        gs = g * (1 - wt) if needs[0] else None
        ge = g * wt if needs[1] else None
        gw = g * (saved[1] - saved[0]) if needs[2] else None
        return self._grads(gs, ge, gw)

    def name(self):
        return "LerpBackward0" if not self.w_t else "LerpBackward1"


# ---------------------------------------------------------------------------------------------
# public functions (PyTorch signatures); engine.nn.functional re-exports them
# ---------------------------------------------------------------------------------------------
def linear(input, weight, bias=None):
    """y = input @ weight.T + bias (weight [out_features, in_features])."""
    if bias is None:
        return Linear.apply(input, weight, op="linear")
    return Linear.apply(input, weight, bias, op="linear")


def _conv_padding(padding, kernel, dilation, stride):
    if isinstance(padding, str):
        if padding == "valid":
            return ((0, 0), (0, 0))
        if padding == "same":
            if stride != (1, 1):
                raise ValueError("padding='same' is not supported for strided convolutions")
            pads = []
            for k, d in zip(kernel, dilation, strict=True):
                total = d * (k - 1)
                pads.append((total // 2, total - total // 2))
            return tuple(pads)
        raise ValueError(
            f"Invalid padding string '{padding}', should be one of {{'valid', 'same'}}"
        )
    ph, pw = _pair(padding, "padding")
    return ((ph, ph), (pw, pw))


def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """2-D convolution of input [N, C, H, W] (or [C, H, W]) with weight [O, C/groups, kh, kw]."""
    unbatched = input.ndim == 3
    x = input.unsqueeze(0) if unbatched else input
    s, d = _pair(stride, "stride"), _pair(dilation, "dilation")
    pads = _conv_padding(padding, weight.shape[2:], d, s)
    args = (x, weight) if bias is None else (x, weight, bias)
    y = Conv2d.apply(*args, op="conv2d", stride=s, padding=pads, dilation=d, groups=groups)
    return y.squeeze(0) if unbatched else y


def _pool_input(input):
    return (input.unsqueeze(0), True) if input.ndim == 3 else (input, False)


def max_pool2d(
    input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False
):
    x, unbatched = _pool_input(input)
    y, idx = MaxPool2d.apply(
        x,
        op="max_pool2d",
        kernel_size=kernel_size,
        stride=stride,
        padding=padding,
        dilation=dilation,
        ceil_mode=ceil_mode,
    )
    if unbatched:
        y, idx = y.squeeze(0), idx.squeeze(0)
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
    x, unbatched = _pool_input(input)
    y = AvgPool2d.apply(
        x,
        op="avg_pool2d",
        kernel_size=kernel_size,
        stride=stride,
        padding=padding,
        ceil_mode=ceil_mode,
        count_include_pad=count_include_pad,
        divisor_override=divisor_override,
    )
    return y.squeeze(0) if unbatched else y


def adaptive_avg_pool2d(input, output_size):
    x, unbatched = _pool_input(input)
    if isinstance(output_size, int):
        size = (output_size, output_size)
    else:
        size = tuple(output_size)
        if len(size) == 1:
            size = (size[0], size[0])
    y = AdaptiveAvgPool2d.apply(x, op="adaptive_avg_pool2d", output_size=size)
    return y.squeeze(0) if unbatched else y


def mse_loss(input, target, size_average=None, reduce=None, reduction="mean"):
    return MseLoss.apply(
        input, target, op="mse_loss", reduction=_legacy_reduction(size_average, reduce, reduction)
    )


def nll_loss(
    input, target, weight=None, size_average=None, ignore_index=-100, reduce=None, reduction="mean"
):
    reduction = _legacy_reduction(size_average, reduce, reduction)
    args = (input, target) if weight is None else (input, target, weight)
    return NllLoss.apply(*args, op="nll_loss", reduction=reduction, ignore_index=ignore_index)


def _legacy_reduction(size_average, reduce, reduction):
    if size_average is None and reduce is None:
        return reduction
    size_average = True if size_average is None else size_average
    reduce = True if reduce is None else reduce
    if not reduce:
        return "none"
    return "mean" if size_average else "sum"


def gather(input, dim, index, *, sparse_grad=False):
    return Gather.apply(input, index, op="gather", dim=dim)


def index_select(input, dim, index):
    return IndexSelect.apply(input, index, op="index_select", dim=dim)


def embedding(
    input,
    weight,
    padding_idx=None,
    max_norm=None,
    norm_type=2.0,
    scale_grad_by_freq=False,
    sparse=False,
):
    """Rows of `weight` picked by the integer tensor `input` (F.embedding's argument order)."""
    if max_norm is not None or scale_grad_by_freq or sparse:
        raise NotImplementedError(
            "embedding: max_norm, scale_grad_by_freq and sparse are not supported"
        )
    if padding_idx is not None and padding_idx < 0:
        padding_idx += weight.shape[0]
    return Embedding.apply(weight, input, op="embedding", padding_idx=padding_idx)


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


def batch_norm(
    input, running_mean, running_var, weight=None, bias=None, training=False, momentum=0.1, eps=1e-5
):
    """F.batch_norm's argument order; running stats (when given) are updated in place in training."""
    return BatchNorm.apply(
        input,
        weight,
        bias,
        running_mean,
        running_var,
        op="batch_norm",
        training=training,
        momentum=momentum,
        eps=eps,
    )


def layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5):
    if isinstance(normalized_shape, int):
        normalized_shape = (normalized_shape,)
    return LayerNorm.apply(
        input, weight, bias, op="layer_norm", normalized_shape=tuple(normalized_shape), eps=eps
    )


def gelu(input, approximate="none"):
    return Gelu.apply(input, op="gelu", approximate=approximate)


def addcmul(input, tensor1, tensor2, *, value=1, out=None):
    return Addcmul.apply(input, tensor1, tensor2, out=out, op="addcmul", value=value)


def addcmul_(input, tensor1, tensor2, *, value=1):
    return Addcmul.apply(input, tensor1, tensor2, out=input, op="addcmul_", value=value)


def addcdiv(input, tensor1, tensor2, *, value=1, out=None):
    return Addcdiv.apply(input, tensor1, tensor2, out=out, op="addcdiv", value=value)


def addcdiv_(input, tensor1, tensor2, *, value=1):
    return Addcdiv.apply(input, tensor1, tensor2, out=input, op="addcdiv_", value=value)


def lerp(input, end, weight, *, out=None):
    if isinstance(weight, Tensor):
        return Lerp.apply(input, end, weight, out=out, op="lerp")
    return Lerp.apply(input, end, out=out, op="lerp", scalar_weight=weight)


def lerp_(input, end, weight):
    if isinstance(weight, Tensor):
        return Lerp.apply(input, end, weight, out=input, op="lerp_")
    return Lerp.apply(input, end, out=input, op="lerp_", scalar_weight=weight)


# torch.* functions and Tensor methods (bound by engine.ops at import)
FUNCTIONS = dict(
    conv2d=conv2d,
    max_pool2d=max_pool2d,
    avg_pool2d=avg_pool2d,
    adaptive_avg_pool2d=adaptive_avg_pool2d,
    gather=gather,
    index_select=index_select,
    addcmul=addcmul,
    addcdiv=addcdiv,
    lerp=lerp,
    dropout=lambda input, p, train: dropout(input, p, train),
)
METHODS = dict(
    gather=lambda self, dim, index: gather(self, dim, index),
    index_select=lambda self, dim, index: index_select(self, dim, index),
    addcmul=addcmul,
    addcmul_=addcmul_,
    addcdiv=addcdiv,
    addcdiv_=addcdiv_,
    lerp=lerp,
    lerp_=lerp_,
)


def register(namespace: dict, tensor_cls) -> None:
    """Add the torch.* functions to the op table and the methods to Tensor."""
    for name, fn in FUNCTIONS.items():
        namespace.setdefault(name, fn)
    for name, fn in METHODS.items():
        if not hasattr(tensor_cls, name):
            setattr(tensor_cls, name, fn)


__all__ = [
    "linear",
    "conv2d",
    "max_pool2d",
    "avg_pool2d",
    "adaptive_avg_pool2d",
    "mse_loss",
    "nll_loss",
    "gather",
    "index_select",
    "embedding",
    "dropout",
    "batch_norm",
    "layer_norm",
    "gelu",
    "addcmul",
    "addcmul_",
    "addcdiv",
    "addcdiv_",
    "lerp",
    "lerp_",
]
