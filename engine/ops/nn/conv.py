"""conv2d: im2col convolution, forward and backward."""

from __future__ import annotations

import numpy as np

from engine import dtypes, kernels
from engine.allocator import tracked
from engine.autograd.function import Function
from engine.backends import cuda_reduce
from engine.ops.common import device_of, result_buffer, result_type
from engine.ops.nn.common import _dense, _live, _needs, _pair, _same_dtype
from engine.ops.nn.conv3d import _Geo, _slow_cpu, slow_backward, slow_forward
from engine.storage import wrap_storage
from engine.tensor import Tensor


def conv_out_size(size, k, s, pad_before, pad_after, d):
    return (size + pad_before + pad_after - d * (k - 1) - 1) // s + 1


# A wide (stride-1) convolution multiplies the columns of several samples at once, up to this
# many elements of columns (1 MiB of float32: 4 MiB fell out of cache, a 32 -> 3 channel grad_x
# 6.5 -> 10.3 ms), when the product's inner dim (C/g*kh*kw) is at least GROUP_MIN_K (a 27-long
# one got slower: 1.57 -> 1.92 ms). One small image's product is too small for BLAS's threads
# (32 -> 64 channels on 16x16, batch 32: forward 4.85 -> 4.62 ms, forward+grad_W 10.8 -> 9.6).
GROUP_ELEMS = 1 << 18
GROUP_MIN_K = 128
# On these devices a convolution takes many samples per product whatever its geometry
# (_BatchStage), up to BATCH_ELEMS elements of columns (64 MiB of float32): each kernel launch
# there costs microseconds, so one copy and one product over the batch beat a few per sample
# (bench_cuda's cnn-stem on an H200: 177 column copies and 16 products per step before).
BATCHED_DEVICES = frozenset({"cuda"})
# grad_W of an input with fewer channels than this sums blocks of samples (up to SAMPLE_BLOCKS
# of them, whatever the thread count) that the parts on the pool take whole (_sample_blocks)
FEW_CHANNELS = 4
SAMPLE_BLOCKS = 8
BATCH_ELEMS = 1 << 24
# A float32 convolution runs without columns (Conv2d._direct, engine._native's conv2d_direct)
# when its inner dim (C*kh*kw) is at most DIRECT_SMALL_K (an image's first layer, where a
# product per sample costs more than the multiply-adds), or at most DIRECT_MAX_K with output
# rows that fill at least DIRECT_MIN_LANES of the 16-wide vectors they take. Forward, 2
# threads, direct / columns / torch ms: 32x3x32x32 -> 32: 0.28 / 1.68 / 0.47; 32x32x16x16 -> 64:
# 1.10 / 4.25 / 1.21; 16x64x56x56 -> 64: 14.5 / 22.6 / 12.9; 8x256x28x28 -> 256: 31.0 / 34.7 /
# 25.2; 8x512x14x14 -> 512: 32.4 / 34.5 / 23.9; 8x64x8x8 -> 64 (half the lanes): 0.30 / 0.53 /
# 0.21; but 8x512x7x7 -> 512 (7 of 16): 20.2 / 16.1 / 6.5, and 4x4 images far slower.
DIRECT_SMALL_K = 64
DIRECT_MAX_K = 4608
DIRECT_MIN_LANES = 0.5
# grad_W by the direct kernels (Conv2d._grad_weight_direct) up to this inner dim (any output
# width: their lanes run over output positions or channels, not along a row)
DIRECT_GRAD_W = True
DIRECT_GRAD_W_MAX_K = 4608
# grad_x of a small image on cpu (Conv2d._few_macs): samples per block of columns, up to this
# many elements (4 MiB of float32)
COL2IM_ELEMS = 1 << 20


class _Stage:
    """One sample [C, H, W], zero-padded and split by the horizontal stride: [C, Hp, sw, Wq].

    Padded column q*sw + r lives at [..., r, q], so the windows of one kernel column read
    contiguous runs of OW values (a strided gather is about twice as slow). The buffer is scratch
    reused for every sample; padding stays zero because loads only write input positions.
    """

    def __init__(self, geom, dtype, dev):
        n, c, h, w, o, cg, kh, kw, oh, ow, sh, sw, pt, pb, pl, pr, dh, dw, groups = geom
        self.geom = geom
        hp, wp = h + pt + pb, w + pl + pr
        self.t = kernels.Scratch((c, hp, sw, -(-wp // sw)), dtype, dev)
        if self.t.data is not None:
            self.t.data.fill(0)
        # input columns f0::sw land at residue r from column q0 on
        self.runs = []
        for r in range(sw):
            f0 = (r - pl) % sw
            if f0 < w:
                self.runs.append((r, (f0 + pl) // sw, f0, len(range(f0, w, sw))))

    def load(self, sample) -> None:
        n, c, h, w, o, cg, kh, kw, oh, ow, sh, sw, pt, pb, pl, pr, dh, dw, groups = self.geom
        buf = self.t.data
        for r, q0, f0, count in self.runs:
            buf[:, pt : pt + h, r, q0 : q0 + count] = sample[:, :, f0::sw]

    def unload(self, out) -> None:
        n, c, h, w, o, cg, kh, kw, oh, ow, sh, sw, pt, pb, pl, pr, dh, dw, groups = self.geom
        buf = self.t.data
        for r, q0, f0, count in self.runs:
            out[:, :, f0::sw] = buf[:, pt : pt + h, r, q0 : q0 + count]

    def windows(self, as_strided, j: int, i: int | None = None):
        """Kernel column j's windows [C, kh, OH, OW] (or kernel offset (i, j)'s [C, OH, OW])."""
        n, c, h, w, o, cg, kh, kw, oh, ow, sh, sw, pt, pb, pl, pr, dh, dw, groups = self.geom
        buf = self.t.data
        s0, s1, _, s3 = buf.strides
        base = buf[:, i * dh if i is not None else 0 :, (j * dw) % sw, (j * dw) // sw :]
        if i is not None:
            return as_strided(base, (c, oh, ow), (s0, s1 * sh, s3))
        return as_strided(base, (c, kh, oh, ow), (s0, s1 * dh, s1 * sh, s3))


class _FlatStage:
    """S samples zero-padded, each channel's padded images flat one after another, plus a zero
    tail: [C, S*Hp*Wp + tail].

    For a stride-1 convolution, kernel offset (i, j)'s columns in a sample are the run of OH*Wp
    values from i*dh*Wp + j*dw on in every channel: the outputs over the whole padded width (the
    last Wp - OW of each output row are not outputs and are dropped after the product). All
    kh*kw runs of all S samples are one strided view, copied with one call in long contiguous
    runs, where the windows of _Stage copy runs of OW values (a 16x16 sample at 32 channels:
    23 -> 5 us, plus 5 us to drop the extra columns of the output). The product grows by Wp/OW
    (18/16 there). Several samples per product (Conv2d._group) make one larger product of
    their columns side by side: fewer, larger BLAS calls, fewer hand-offs between its threads.
    """

    def __init__(self, geom, dtype, dev, samples: int = 1):
        n, c, h, w, o, cg, kh, kw, oh, ow, sh, sw, pt, pb, pl, pr, dh, dw, groups = geom
        self.geom = geom
        self.hp, self.wp = h + pt + pb, w + pl + pr
        self.row = self.wp  # an output row in the product: the padded width (as _BatchStage's)
        self.samples = samples
        plane = self.hp * self.wp
        self.t = kernels.Scratch((c, samples * plane + dw * (kw - 1)), dtype, dev)
        if self.t.data is not None:
            self.t.data.fill(0)
        self.inner = None

    def load(self, data, b0: int, b1: int, as_strided) -> None:
        """Samples b0..b1 of data [N, C, H, W] into the first b1 - b0 images."""
        n, c, h, w, o, cg, kh, kw, oh, ow, sh, sw, pt, pb, pl, pr, dh, dw, groups = self.geom
        if self.inner is None:  # the input positions of the padded images, a view made once
            buf = self.t.data
            s0, s1 = buf.strides
            plane = self.hp * self.wp
            images = as_strided(
                buf, (c, self.samples, self.hp, self.wp), (s0, plane * s1, self.wp * s1, s1)
            )
            self.inner = images[:, :, pt : pt + h, pl : pl + w]
        src = data[b0:b1].transpose(1, 0, 2, 3)
        if isinstance(src, np.ndarray):  # (kernels.copy_runs: rows of W)
            kernels.copy_runs(src, self.inner[:, : b1 - b0])
        else:
            self.inner[:, : b1 - b0] = src

    def columns(self, as_strided, count: int):
        """Every kernel offset's runs in the first `count` samples: [C, kh, kw, count, OH*Wp],
        a view of the stage."""
        n, c, h, w, o, cg, kh, kw, oh, ow, sh, sw, pt, pb, pl, pr, dh, dw, groups = self.geom
        buf = self.t.data
        s0, s1 = buf.strides
        wp = self.wp
        return as_strided(
            buf,
            (c, kh, kw, count, oh * wp),
            (s0, dh * wp * s1, dw * s1, self.hp * wp * s1, s1),
        )


class _BatchStage:
    """S samples zero-padded, [S, C, Hp, Wp]: every kernel offset's windows of all of them are
    one strided view, [C, kh, kw, S, OH, OW], copied into the columns with one call (any
    stride, dilation or padding). The layout of the devices in BATCHED_DEVICES, where a call
    costs more than the bytes it moves; `row` = OW, the width of an output row in the product."""

    def __init__(self, geom, dtype, dev, samples: int = 1):
        n, c, h, w, o, cg, kh, kw, oh, ow, sh, sw, pt, pb, pl, pr, dh, dw, groups = geom
        self.geom = geom
        self.row = ow
        self.t = kernels.Scratch((samples, c, h + pt + pb, w + pl + pr), dtype, dev)
        if self.t.data is not None:
            self.t.data.fill(0)

    def load(self, data, b0: int, b1: int, as_strided) -> None:
        """Samples b0..b1 of data [N, C, H, W] into the first b1 - b0 images."""
        n, c, h, w, o, cg, kh, kw, oh, ow, sh, sw, pt, pb, pl, pr, dh, dw, groups = self.geom
        self.t.data[: b1 - b0, :, pt : pt + h, pl : pl + w] = data[b0:b1]

    def columns(self, as_strided, count: int):
        """Every kernel offset's windows in the first `count` samples: [C, kh, kw, count, OH,
        OW], a view of the stage."""
        return self.windows(as_strided, count, None)

    def windows(self, as_strided, count: int, offset):
        """All windows ([C, kh, kw, count, OH, OW]), or kernel offset (i, j)'s alone ([C, count,
        OH, OW])."""
        n, c, h, w, o, cg, kh, kw, oh, ow, sh, sw, pt, pb, pl, pr, dh, dw, groups = self.geom
        buf = self.t.data
        s0, s1, s2, s3 = buf.strides
        if offset is None:
            shape = (c, kh, kw, count, oh, ow)
            return as_strided(buf, shape, (s1, dh * s2, dw * s3, s0, sh * s2, sw * s3))
        i, j = offset
        base = buf[:, :, i * dh :, j * dw :]
        return as_strided(base, (c, count, oh, ow), (s1, s0, sh * s2, sw * s3))


class Conv2d(Function):
    """2-D convolution by im2col, one sample at a time (like PyTorch's slow_conv2d; small stride-1
    samples several at a time, side by side: Conv2d._group).

    A sample's columns are [C, kh, kw, OH, OW] = [groups, C/g*kh*kw, OH*OW], so the matmul with
    W [groups, O/g, C/g*kh*kw] writes that sample's NCHW output directly; with stride 1 they
    cover the padded width ([C, kh, kw, OH*Wp], _FlatStage) and the outputs are cut from the
    product. The columns (and the
    zero-padded sample they are cut from) are buffers reused across the batch. They are the
    kernel's workspace, which is device-specific (oneDNN, cuDNN and slow_conv2d each need their
    own), so they are `kernels.Scratch`: reported apart (engine.memory.memory_scratch), not
    charged to memory_allocated. Backward keeps only input and weight and rebuilds the columns;
    grad_x is col2im (strided slices added per kernel offset), or on cpu for stride 1 a
    convolution of g with the flipped weight (fewer, longer copies), or on cpu for small images
    (_few_macs) one product per block of samples and a compiled col2im (_grad_input_batched).
    """

    def to_save(self, tensors):
        # torch's ConvolutionBackward0 keeps input and weight whichever needs a gradient (one
        # formula gives all three): a frozen layer's input stays alive until backward
        self._save_idx = (0, 1)
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
        # A stride past the padded extent leaves one output position: any such stride gives
        # the same result, and the kernels' buffers and loops grow with the stride (torch takes
        # stride=2**63-1 in no time), so clamp it.
        sh, sw = min(sh, max(h + pt + pb, 1)), min(sw, max(w + pl + pr, 1))
        self.geom = (n, c, h, w, o, cg, kh, kw, oh, ow, sh, sw, pt, pb, pl, pr, dh, dw, groups)
        self.x_shape, self.w_shape, self.has_bias = x.shape, weight.shape, bias is not None
        dev = device_of(x, weight, bias)
        slow = _slow_cpu(dev, result_type(x, weight)) and dev.type not in BATCHED_DEVICES
        # (padding='same' with an even kernel pads unevenly: torch pads a copy first; not modelled)
        self.slow = out is None and slow and pt == pb and pl == pr
        if self.slow:  # torch's slow_conv2d / slow_conv_dilated2d, not oneDNN: their blocks
            self.slow_geo = _Geo(n, c, (h, w), o, (kh, kw), (sh, sw), (pt, pl), (dh, dw), groups,
                                 (oh, ow))  # fmt: skip
            b = bias._data if bias is not None else None
            return slow_forward(x._data, weight._data, b, self.slow_geo, dev, x._dtype)
        y = result_buffer(out, (n, o, oh, ow), result_type(x, weight), dev, "conv2d")
        self.batched = dev.type in BATCHED_DEVICES
        if self._direct(x, weight, bias, y):
            return y
        xp = kernels.xp_of_device(dev)
        og, ckk, length = o // groups, cg * kh * kw, oh * ow
        wr = weight._data.reshape(groups, og, ckk) if _live(dev) else None
        b_col = bias._data[:, None] if bias is not None and _live(dev) else None
        wide = self._wide() or self.batched
        # samples per product: the columns of several samples side by side (_FlatStage,
        # _BatchStage). The parts take whole groups (from sample 0 on, as one thread takes
        # them): a sample's output is the same product of the same columns whatever the thread
        # count.
        group = self._group() if wide else 1
        units = self._parts(dev, -(-n // group), group)
        ranges = [(lo * group, min(hi * group, n)) for lo, hi in units]
        bufs = [self._buffers(x, samples=group) for _ in ranges]  # (meta: only the workspace)
        if wide:  # the product over the stage's rows, per part; the outputs are cut from it
            wp = self._row()
            prods = [kernels.Scratch((o * group * oh * wp,), y._dtype, dev) for _ in ranges]
            b3 = b_col[:, :, None] if b_col is not None else None
            bias_np = b_col[:, 0] if b_col is not None else None

        def run(i, b0, b1):
            for s0, s1, cols in self._columns(x, bufs[i], b0, b1, group=group):
                if wide:
                    count = s1 - s0
                    prod = prods[i].data[: o * count * oh * wp]
                    kernels.matmul_into(xp, wr, cols, prod.reshape(groups, og, count * oh * wp))
                    # the outputs within the product, [count, O, OH, OW]
                    src = prod.reshape(o, count, oh, wp)[:, :, :, :ow].transpose(1, 0, 2, 3)
                    if xp is np:  # (kernels.copy_runs: the same bits, in runs of OW)
                        kernels.copy_runs(src, y._data[s0:s1], bias_np)
                    elif b3 is not None:
                        xp.add(src, b3, out=y._data[s0:s1])
                    else:
                        xp.copyto(y._data[s0:s1], src)
                    continue
                b = s0
                kernels.matmul_into(xp, wr, cols, y._data[b].reshape(groups, og, length))
                if b_col is not None:  # while the sample's output is still in cache
                    yb = y._data[b].reshape(o, length)
                    xp.add(yb, b_col, out=yb)

        if _live(dev):
            kernels.run_parts(run, ranges)
        bufs.clear()  # the workspace goes back now
        if wide:
            prods.clear()
        return y

    def _direct(self, x, weight, bias, y) -> bool:
        """y by engine._native's conv2d_direct, without columns: float32 on cpu, no dilation,
        one group (any stride), an inner dim and output width where it pays (_direct_pays),
        contiguous arrays, a processor with AVX512F. Each output is
        the fused multiply-adds of its inner dim in (c, i, j) order from 0, then the bias: the
        same bits on any thread count, within float32's rounding of the im2col path (often
        its bits: OpenBLAS sums a short inner dim in that order, but not always). The small
        CNN's first convolution (32x3x32x32 -> 32) 1.83 -> 0.6 ms in its step. False (nothing
        written) where it does not apply."""
        n, c, h, w, o, cg, kh, kw, oh, ow, sh, sw, pt, pb, pl, pr, dh, dw, groups = self.geom
        native = kernels.native
        if not self._direct_takes(x._device, y._dtype, c * kh * kw, ow) or pb > kh or pr > kw:
            return False
        arrays = [x._data, weight._data, y._data] + ([bias._data] if bias is not None else [])
        if not kernels.native_f32(*arrays):
            return False
        dims = (n, c, h, w, o, kh, kw, pt, pl, oh, ow, sh, sw)
        parts = _direct_threads(y._data.size)
        # the workspace (scratch, as the columns'): the weights in blocks of 8 output channels
        # and a zero-padded, stride-split stage per part
        work = kernels.Scratch((native.conv2d_direct_work(dims, parts),), y._dtype, x._device)
        native.conv2d_direct(
            x._data, weight._data, bias._data if bias is not None else None, y._data, dims,
            work.data, parts,
        )  # fmt: skip
        work.release()
        return True

    def _direct_takes(self, dev, dtype, k: int, width: int) -> bool:
        """Whether the direct forward kernel takes a convolution of this geometry on `dev` in
        `dtype` with an inner dim k and rows `width` long: where the direct kernels run
        (_direct_fits) and where it pays (_direct_pays)."""
        return self._direct_fits(dev, dtype) and _direct_pays(k, width)

    def _direct_fits(self, dev, dtype) -> bool:
        """Whether the direct kernels run for this geometry on `dev` in `dtype`: cpu, where
        they are built and the processor has AVX512F (_direct_runs), one group, no dilation."""
        groups, dh, dw = self.geom[18], self.geom[16], self.geom[17]
        return dev.type == "cpu" and groups == 1 and dh == dw == 1 and _direct_runs(dtype)

    def _few_macs(self) -> bool:
        """Whether one sample's product is too small for parts of its own (below
        kernels.SPLIT_SAMPLE_MACS) and the samples' columns are better made in blocks, for
        grad_x (_grad_input_batched on cpu: one product per block of samples, and col2im)."""
        n, c, h, w, o, cg, kh, kw, oh, ow, sh, sw, pt, pb, pl, pr, dh, dw, groups = self.geom
        per_sample = o * cg * kh * kw * oh * ow
        return not self._pointwise() and per_sample < kernels.SPLIT_SAMPLE_MACS

    def _pointwise(self) -> bool:
        n, c, h, w, o, cg, kh, kw, oh, ow, sh, sw, pt, pb, pl, pr, dh, dw, groups = self.geom
        return kh == kw == 1 and sh == sw == 1 and pt == pb == pl == pr == 0

    def _parts(self, dev, count: int, samples: int = 1) -> list[tuple[int, int]]:
        """The ranges of `count` samples (or output channels, or groups of `samples` samples)
        that the parts on the pool take (kernels.split_ranges, by one product: `samples`
        samples'); one part on meta and CuPy."""
        n, c, h, w, o, cg, kh, kw, oh, ow, sh, sw, pt, pb, pl, pr, dh, dw, groups = self.geom
        if dev.type != "cpu":
            return [(0, count)]
        return kernels.split_ranges(count, o * cg * kh * kw * oh * ow * samples)

    def _group(self) -> int:
        """How many samples one product of a wide convolution takes: as many as fit
        GROUP_ELEMS of columns (at least one, at most the batch). It depends on the whole
        geometry only (not on a part's channels), so every part groups the samples alike and
        grad_W adds them in the same order whatever the thread count."""
        n, c, h, w, o, cg, kh, kw, oh, ow, sh, sw, pt, pb, pl, pr, dh, dw, groups = self.geom
        per_sample = c * kh * kw * oh * self._row()
        if self.batched:
            return self._samples_within(BATCH_ELEMS, per_sample)
        if cg * kh * kw < GROUP_MIN_K:
            return 1
        return self._samples_within(GROUP_ELEMS, per_sample)

    def _samples_within(self, elems: int, per_sample: int) -> int:
        """How many samples' columns fit `elems` elements at `per_sample` each: at least one,
        at most the batch."""
        return max(1, min(self.geom[0], elems // max(per_sample, 1)))

    def _row(self) -> int:
        """The width of one output row in a product of several samples' columns: the padded
        width for _FlatStage, OW for _BatchStage."""
        n, c, h, w, o, cg, kh, kw, oh, ow, sh, sw, pt, pb, pl, pr, dh, dw, groups = self.geom
        return ow if self.batched else w + pl + pr

    def _wide(self) -> bool:
        """Columns over the padded width (_FlatStage): stride 1, unless a 1x1 reads its input."""
        n, c, h, w, o, cg, kh, kw, oh, ow, sh, sw, pt, pb, pl, pr, dh, dw, groups = self.geom
        return sh == sw == 1 and not self._pointwise()

    def _buffers(self, x: Tensor, chans=None, samples: int = 1):
        """One part's workspace for _columns: (columns, zero-padded stage) scratch, or None for
        a 1x1 convolution that reads its input as is. Made on the calling thread (the allocator
        sees them there), one set per part. chans = (c0, c1): for those input channels only;
        samples: how many samples one product takes (wide convolutions, _group)."""
        geom = self._channel_geom(*chans) if chans is not None else self.geom
        n, c, h, w, o, cg, kh, kw, oh, ow, sh, sw, pt, pb, pl, pr, dh, dw, groups = geom
        if self.batched:
            cols = kernels.Scratch((c * kh * kw * samples * oh * ow,), x._dtype, x._device)
            return cols, _BatchStage(geom, x._dtype, x._device, samples)
        if self._pointwise() and x.is_contiguous():
            return None
        if self._wide():
            size = c * kh * kw * samples * oh * (w + pl + pr)
            cols = kernels.Scratch((size,), x._dtype, x._device)
            return cols, _FlatStage(geom, x._dtype, x._device, samples)
        cols = kernels.Scratch((c, kh, kw, oh, ow), x._dtype, x._device)
        return cols, _Stage(geom, x._dtype, x._device)

    def _channel_geom(self, c0: int, c1: int):
        """The geometry of input channels c0..c1 alone (groups 1): a part of grad_W that takes
        those rows of the columns."""
        geom = list(self.geom)
        geom[1] = geom[5] = c1 - c0
        return tuple(geom)

    def _columns(self, x: Tensor, bufs, b0: int, b1: int, chans=None, group: int = 1):
        """Yield (s0, s1, columns of samples s0..s1) for samples b0..b1 in turn, through one
        part's buffers (_buffers, made with the same chans and samples): one sample at a time
        as [groups, C/g*kh*kw, OH*OW]; when _wide(), `group` samples at a time side by side as
        [groups, C/g*kh*kw, count*OH*Wp] (count = s1 - s0). chans = (c0, c1): the columns of
        those input channels only (_channel_geom). Live devices only."""
        geom = self._channel_geom(*chans) if chans is not None else self.geom
        n, c, h, w, o, cg, kh, kw, oh, ow, sh, sw, pt, pb, pl, pr, dh, dw, groups = geom
        ckk, length = cg * kh * kw, oh * ow
        data = x._data if chans is None else x._data[:, chans[0] : chans[1]]
        if bufs is None:
            for b in range(b0, b1):
                yield b, b + 1, data[b].reshape(groups, ckk, length)
            return
        cols, stage = bufs
        xp = kernels.xp_of(x)
        as_strided = xp.lib.stride_tricks.as_strided
        if not isinstance(stage, _Stage):  # several samples side by side
            run = oh * stage.row
            for s0 in range(b0, b1, group):
                s1 = min(s0 + group, b1)
                count = s1 - s0
                stage.load(data, s0, s1, as_strided)
                dst = cols.data[: c * kh * kw * count * run]
                src = stage.columns(as_strided, count)
                kernels.copy_runs(src, dst.reshape(src.shape))
                yield s0, s1, dst.reshape(groups, ckk, count * run)
            return
        # the stage never moves, so each kernel column's (source, destination) pair is made once
        pairs = [(stage.windows(as_strided, j), cols.data[:, :, j]) for j in range(kw)]
        for b in range(b0, b1):
            stage.load(data[b])
            for src, dst in pairs:
                kernels.copy_runs(src, dst)
            yield b, b + 1, cols.data.reshape(groups, ckk, length)

    def backward(self, g):
        saved = dict(zip(self._save_idx, self.saved_tensors, strict=True))
        needs = _needs(self)
        if getattr(self, "slow", False):
            return self._slow_backward(g, saved[0], saved[1], needs)
        n, c, h, w, o, cg, kh, kw, oh, ow, sh, sw, pt, pb, pl, pr, dh, dw, groups = self.geom
        dev, dt = g._device, g._dtype
        live = _live(dev)
        xp = kernels.xp_of(g)
        g4, gkeep = _dense(g, (n, groups, o // groups, oh * ow))
        gx = gw = gb = None
        if needs[0]:
            gx = self._grad_input(saved[1], g4, gkeep, dt, dev)
        if needs[1]:
            gw = self._grad_weight(saved[0], g4, dt, dev)
        if self.has_bias and needs[2]:
            gb = kernels.empty((o,), dt, dev)
            g3 = g4.reshape(n, o, oh * ow) if live else None
            if live and xp is np and g3.dtype in (np.float32, np.float64) and oh * ow > 1:
                # each (sample, channel)'s sum in float64 in a fixed order (kernels.row_sums:
                # compiled, on its threads), then the samples in order: 32x32x32x32 0.44 ->
                # ~0.1 ms, where numpy's sum over axes (0, 2) took a pass of its own order
                np.add.reduce(kernels.row_sums(0, g3), axis=0, out=gb._data, dtype=np.float64)
            elif live:
                xp.sum(g3, axis=(0, 2), out=gb._data)
            # convolution_backward's bias fallback, grad_output.sum((0, 2, 3)): on a GPU its
            # reduction may stage partial sums (cuDNN computes no bias gradient)
            cuda_reduce.charge(dev, g._data, (0, 2, 3))
        del gkeep
        return (gx, gw, gb) if self.has_bias else (gx, gw)

    def _slow_backward(self, g, x, weight, needs):
        """slow_conv2d's backward (its grad_input columns per-thread, outside the allocator;
        grad_weight's the batch's) or slow_conv_dilated2d's, per group as at::_convolution."""
        geo = self.slow_geo
        gd, gkeep = _dense(g, tuple(g.shape))
        needs = needs if self.has_bias else needs[:2] + (False,)
        gx, gw, gb = slow_backward(
            gd, x._data, weight._data, geo, needs, g._device, g._dtype, input_columns=False
        )
        del gkeep
        return (gx, gw, gb) if self.has_bias else (gx, gw)

    def _grad_weight(self, x, g4, dt, dev):
        """grad_W = sum over samples of g @ cols.T, computed transposed (cols @ g.T: BLAS is
        faster on that shape), samples in order. On the pool each part takes a slice of the input
        channels (rows of the columns, columns of grad_W), builds only those rows and multiplies
        them by all of g (a 3x3 64->64 16x56x56 grad_W: 37.3 -> 32.3 ms, where each part built
        every column); with groups, or fewer than two input channels per thread, a slice of the
        output channels (rows of grad_W) over all the columns. Either way every entry sums the
        samples in the same order, as on one thread.

        An input of fewer than FEW_CHANNELS channels (an image's first layer) is summed in
        blocks of samples instead (_sample_blocks): each block's products in order, then the
        blocks in order, on any thread count; the parts take whole blocks, so no part builds
        another's columns (8x3x224x224, 11x11 stride 4, 64 outputs: 13.6 -> 10.8 ms on two
        threads, where both parts built all of them)."""
        n, c, h, w, o, cg, kh, kw, oh, ow, sh, sw, pt, pb, pl, pr, dh, dw, groups = self.geom
        og, ckk = o // groups, cg * kh * kw
        gw = kernels.empty(self.w_shape, dt, dev)
        if n and self._grad_weight_direct(x, g4, gw):
            return gw
        if n == 0:  # no sample: a sum of nothing (torch's zeros)
            if _live(dev):
                gw._data.fill(0)
            return gw
        wide = self._wide() or self.batched
        group = self._group() if wide else 1  # samples per product (all parts alike)
        by_sample = groups == 1 and dev.type == "cpu" and c < FEW_CHANNELS and n > 1
        # (3 channels on 2 threads would split 2 + 1: no sooner than each part building all)
        by_channel = groups == 1 and dev.type == "cpu" and c >= 2 * kernels.get_num_threads()
        blocks = []
        if by_sample:  # (lo, hi): blocks of samples; every part takes all of grad_W
            blocks = self._sample_blocks(group)
            ranges = kernels.split_ranges(len(blocks), o * ckk * oh * ow * -(-n // len(blocks)))
            chans = [None for _ in ranges]
            shapes = [(1, ckk, o) for _ in ranges]
        elif by_channel:  # (lo, hi): input channels; every part takes all outputs
            ranges = kernels.split_ranges(c, o * c * kh * kw * oh * ow)
            chans = list(ranges)
            shapes = [(1, (hi - lo) * kh * kw, o) for lo, hi in ranges]
        else:  # (lo, hi): output channels of each group; every part takes all the columns
            ranges = self._parts(dev, og)
            chans = [None for _ in ranges]
            shapes = [(groups, ckk, hi - lo) for lo, hi in ranges]
        sums = [kernels.Scratch((1, ckk, o), dt, dev) for _ in blocks]  # each block's sum
        bufs = [self._buffers(x, part_chans, group) for part_chans in chans]
        parts = [kernels.Scratch(shape, dt, dev) for shape in shapes]
        if wide:  # g over the stage's rows (the padded width: zero where no output is)
            wp = self._row()
            gws = [kernels.Scratch((groups, shape[2], group, oh, wp), dt, dev) for shape in shapes]
            for gwide in gws:
                if gwide.data is not None and wp > ow:
                    gwide.data.fill(0)
        if _live(dev):
            xp = kernels.xp_of_device(dev)
            acc = gw._data.reshape(groups, og, ckk)

            def run(i, lo, hi):
                if by_sample:
                    for k in range(lo, hi):
                        block(i, 0, og, sums[k].data.transpose(0, 2, 1), *blocks[k])
                    return
                if by_channel:
                    o0, o1, r0, r1 = 0, og, lo * kh * kw, hi * kh * kw
                else:
                    o0, o1, r0, r1 = lo, hi, 0, ckk
                block(i, o0, o1, acc[:, o0:o1, r0:r1], 0, n)

            def block(i, o0, o1, dst, b0, b1):
                """dst = the sum over samples b0..b1 of output channels o0..o1's grad_W, through
                part i's buffers."""
                part = parts[i].data
                for s0, s1, cols in self._columns(x, bufs[i], b0, b1, chans[i], group):
                    if wide:  # [groups, O/g part, count * OH*Wp], samples side by side
                        count = s1 - s0
                        gwide = gws[i].data[:, :, :count]
                        if o1 - o0 == og and isinstance(gwide, np.ndarray):  # [O, count, ...]
                            src = g4[s0:s1].reshape(count, o, oh, ow).transpose(1, 0, 2, 3)
                            whole = gws[i].data.reshape(o, group, oh, wp)  # (a view: contiguous)
                            kernels.copy_runs(src, whole[:, :count, :, :ow])
                        else:
                            gs = g4[s0:s1, :, o0:o1].reshape(count, groups, o1 - o0, oh, ow)
                            gwide[..., :ow] = gs.transpose(1, 2, 0, 3, 4)
                        gb = gwide.reshape(groups, o1 - o0, count * oh * wp)
                    else:
                        gb = g4[s0, :, o0:o1]
                    kernels.matmul_into(xp, cols, gb.transpose(0, 2, 1), part)
                    if s0 == b0:
                        xp.copyto(dst, part.transpose(0, 2, 1))
                    else:
                        xp.add(dst, part.transpose(0, 2, 1), out=dst)

            kernels.run_parts(run, ranges)
            for k, total in enumerate(sums):  # the blocks in order
                if k == 0:
                    xp.copyto(acc, total.data.transpose(0, 2, 1))
                else:
                    xp.add(acc, total.data.transpose(0, 2, 1), out=acc)
        bufs.clear()  # the workspace goes back now
        parts.clear()
        sums.clear()
        if wide:
            gws.clear()
        return gw

    def _grad_weight_direct(self, x, g4, gw) -> bool:
        """gw by engine._native's direct grad_W kernels, without columns (float32 on cpu, one
        group, no dilation, AVX512F, g contiguous), from the input zero-padded and split by the
        stride into scratch: an inner dim of at most DIRECT_SMALL_K by conv2d_direct_grad_w
        (16-lane sums over the output positions per (output channel, tap), the lanes added
        last; 32x3x32x32 -> 32: 2.3 -> 0.4 ms), a longer one by conv2d_direct_grad_w_many
        (the lanes over output channels, g transposed once into the workspace; 8x3x224x224
        11x11 stride 4 -> 64: columns ~10 -> 5.7 ms; 16x64x56x56 3x3 -> 64: 25.7 -> 17.5 ms
        where conv2d_direct_grad_w took it). The same bits on any thread count, not the
        columns' (BLAS sums the positions in its own blocks). False (nothing written) where
        it does not apply."""
        n, c, h, w, o, cg, kh, kw, oh, ow, sh, sw, pt, pb, pl, pr, dh, dw, groups = self.geom
        dev, k = gw._device, c * kh * kw
        few = k <= DIRECT_SMALL_K
        if (
            not DIRECT_GRAD_W
            or not self._direct_fits(dev, gw._dtype)
            or not (few or k <= DIRECT_GRAD_W_MAX_K)
            or pb > kh  # (padding past a kernel's reach: conv2d_direct's limits)
            or pr > kw
            or not hasattr(kernels.native, "conv2d_direct_grad_w_many")
        ):
            return False
        xd, gd = x._data, g4
        if not kernels.native_f32(xd, gd, gw._data):
            return False
        native = kernels.native
        # each kernel zero-pads the samples, split by the stride as conv2d_direct's stage, into
        # its workspace (scratch), then takes the tiles' 16-lane sums (few) or the taps' sums
        # and g transposed (many)
        if few:
            size, run = native.conv2d_direct_grad_w_work, native.conv2d_direct_grad_w
        else:
            size, run = native.conv2d_direct_grad_w_many_work, native.conv2d_direct_grad_w_many
        dims = (n, c, h, w, o, kh, kw, pt, pl, oh, ow, sh, sw)
        work = kernels.Scratch((size(dims),), gw._dtype, dev)
        run(xd, gd.reshape(n, o, oh, ow), gw._data, dims, work.data, _direct_threads(gd.size))
        work.release()
        return True

    def _sample_blocks(self, group: int) -> list[tuple[int, int]]:
        """grad_W's blocks of samples for a few-channel input: up to SAMPLE_BLOCKS contiguous
        ranges of whole products (`group` samples each), from the batch alone: the same blocks,
        so the same sums, on any thread count."""
        n = self.geom[0]
        units = -(-n // group)
        step = -(-units // min(units, SAMPLE_BLOCKS))
        return [(lo * group, min((lo + step) * group, n)) for lo in range(0, units, step)]

    def _grad_input(self, weight, g4, g, dt, dev):
        """col2im(W.T @ g), one sample at a time through a scratch column buffer (per part); on
        cpu, for stride 1, the correlation of g with the flipped weight instead, or for small
        images (_few_macs) col2im over blocks of samples (_grad_input_batched)."""
        n, c, h, w, o, cg, kh, kw, oh, ow, sh, sw, pt, pb, pl, pr, dh, dw, groups = self.geom
        og, ckk = o // groups, cg * kh * kw
        full = (dh * (kh - 1) - pt, dh * (kh - 1) - pb, dw * (kw - 1) - pl, dw * (kw - 1) - pr)
        few = dev.type == "cpu" and self._few_macs()
        correlate = sh == sw == 1 and min(full) >= 0 and not self._pointwise()
        # (the correlation is a stride-1 convolution: conv2d_direct's, for a small image too)
        direct = self._direct_takes(dev, dt, o * kh * kw, w)
        if dev.type == "cpu" and correlate and (direct or not few):
            return self._grad_input_correlated(weight, g, full, dt, dev)
        gx = kernels.empty(self.x_shape, dt, dev)
        live = _live(dev)
        wt = weight._data.reshape(groups, og, ckk).transpose(0, 2, 1) if live else None
        if self.batched or few:
            self._grad_input_batched(wt, g4, gx, dt, dev)
            return gx
        ranges = self._parts(dev, n)
        if self._pointwise():
            if live:
                xp = kernels.xp_of_device(dev)

                def run_1x1(i, b0, b1):
                    for b in range(b0, b1):
                        dst = gx._data[b].reshape(groups, ckk, oh * ow)
                        kernels.matmul_into(xp, wt, g4[b], dst)

                kernels.run_parts(run_1x1, ranges)
            return gx
        bufs = [
            (kernels.Scratch((c, kh, kw, oh, ow), dt, dev), _Stage(self.geom, dt, dev))
            for _ in ranges
        ]
        if live:
            xp = kernels.xp_of_device(dev)
            as_strided = xp.lib.stride_tricks.as_strided

            def run(i, b0, b1):
                gcols, stage = bufs[i]
                regions = [
                    (stage.windows(as_strided, j, r), gcols.data[:, r, j])
                    for r in range(kh)
                    for j in range(kw)
                ]
                for b in range(b0, b1):
                    kernels.matmul_into(xp, wt, g4[b], gcols.data.reshape(groups, ckk, oh * ow))
                    stage.t.data.fill(0)
                    for region, src in regions:
                        xp.add(region, src, out=region)
                    stage.unload(gx._data[b])

            kernels.run_parts(run, ranges)
        bufs.clear()  # the workspace goes back now
        return gx

    def _grad_input_batched(self, wt, g4, gx, dt, dev) -> None:
        """col2im over several samples at once (BATCHED_DEVICES): their g side by side
        ([groups, O/g, S*OH*OW]), one product with W.T into their columns ([C, kh, kw, S, OH,
        OW]), then each kernel offset's columns added into the zero-padded samples ([S, C, Hp,
        Wp]) with one call: kh*kw adds per S samples, where the per-sample path makes as many
        per sample."""
        n, c, h, w, o, cg, kh, kw, oh, ow, sh, sw, pt, pb, pl, pr, dh, dw, groups = self.geom
        og, ckk, length = o // groups, cg * kh * kw, oh * ow
        if self.batched:
            group = self._group()
        else:  # cpu (_few_macs): blocks of columns that stay in cache
            group = self._samples_within(COL2IM_ELEMS, c * kh * kw * length)
        gs = kernels.Scratch((groups * og * group * length,), dt, dev)
        gcols = kernels.Scratch((groups * ckk * group * length,), dt, dev)
        stage = _BatchStage(self.geom, dt, dev, group)
        if _live(dev):
            xp = kernels.xp_of_device(dev)
            as_strided = xp.lib.stride_tricks.as_strided
            for s0 in range(0, n, group):
                s1 = min(s0 + group, n)
                count = s1 - s0
                gsv = gs.data[: groups * og * count * length].reshape(groups, og, count, length)
                xp.copyto(gsv, g4[s0:s1].transpose(1, 2, 0, 3))
                gc = gcols.data[: groups * ckk * count * length]
                kernels.matmul_into(
                    xp, wt, gsv.reshape(groups, og, count * length), gc.reshape(groups, ckk, -1)
                )
                cols = gc.reshape(c, kh, kw, count, oh, ow)
                stage.t.data.fill(0)
                if xp is np:  # (kernels.col2im_add: the same adds, in the same order)
                    kernels.col2im_add(cols, stage.t.data[:count], kh, kw, sh, sw, dh, dw)
                else:
                    for i in range(kh):
                        for j in range(kw):
                            region = stage.windows(as_strided, count, (i, j))
                            xp.add(region, cols[:, i, j], out=region)
                xp.copyto(gx._data[s0:s1], stage.t.data[:count, :, pt : pt + h, pl : pl + w])
        del gs, gcols, stage  # the workspace goes back now

    def _grad_input_correlated(self, weight, g, full, dt, dev):
        """grad_x of a stride-1 convolution as a convolution itself: g (O channels) correlated
        with the weight flipped in space and transposed per group ([C, O/g, kh, kw]), padded to
        the full extent (d*(k-1) - p each side). Its columns are copied with a few long runs
        per sample where col2im adds kh*kw strided slices, so a small image's backward makes far
        fewer numpy calls. The flipped weight is workspace (scratch); grad_x is the one new
        tensor, as before."""
        n, c, h, w, o, cg, kh, kw, oh, ow, sh, sw, pt, pb, pl, pr, dh, dw, groups = self.geom
        og = o // groups
        flipped = kernels.Scratch((c, og, kh, kw), dt, dev)
        src = weight._data.reshape(groups, og, cg, kh, kw)[:, :, :, ::-1, ::-1]
        np.copyto(flipped.data.reshape(groups, cg, og, kh, kw), src.transpose(0, 2, 1, 3, 4))
        with tracked.tracking(False):  # the scratch above, seen as a tensor: nothing to charge
            wt = Tensor._make(flipped.data, wrap_storage(flipped.data, dev), dt, dev)
        node = object.__new__(Conv2d)
        pads = ((full[0], full[1]), (full[2], full[3]))
        gx = node.forward(g, wt, None, padding=pads, dilation=(dh, dw), groups=groups)
        del wt, flipped
        return gx

    def name(self):
        return "ConvolutionBackward0"


def _direct_threads(elems: int) -> int:
    """conv2d_direct's threads: the engine's (one for small work, and on the pool's own
    threads), also while BLAS's threads spin after a product (kernels.native_threads would
    take one then): its chunks go to whichever thread is free, and the multiply-adds are worth
    a core shared with a spinning thread (small CNN step 29.7 -> 27.1 ms; with two busy
    processes 68.0 -> 64.7 ms, within the noise)."""
    if kernels._on_pool.yes or elems < kernels.NATIVE_PARALLEL_MIN:
        return 1
    return kernels.get_num_threads()


def _direct_runs(dtype) -> bool:
    """Whether conv2d_direct runs here for this dtype: float32, engine._native built with it,
    a processor with AVX512F."""
    native = kernels.native
    return (
        dtype is dtypes.float32
        and native is not None
        and hasattr(native, "conv2d_direct")
        and native.conv2d_direct_avx512()
    )


def _direct_pays(k: int, width: int) -> bool:
    """Whether conv2d_direct beats the columns for an inner dim k and output rows `width`
    long (DIRECT_SMALL_K, DIRECT_MAX_K, DIRECT_MIN_LANES)."""
    if k <= DIRECT_SMALL_K:
        return True
    return k <= DIRECT_MAX_K and width / (16 * -(-width // 16)) >= DIRECT_MIN_LANES


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


def _check_conv_args(padding, stride, dilation) -> None:
    """PyTorch's checks in _convolution, in its order and words."""
    if not isinstance(padding, str) and any(p < 0 for p in _pair(padding, "padding")):
        raise RuntimeError("negative padding is not supported")
    if any(v <= 0 for v in stride):
        raise RuntimeError("non-positive stride is not supported")
    if any(v < 0 for v in dilation):
        raise RuntimeError("dilation should be greater than zero")
    if any(v == 0 for v in dilation):
        raise RuntimeError(f"dilation should be greater than zero, but got {list(dilation)}")


def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """2-D convolution of input [N, C, H, W] (or [C, H, W]) with weight [O, C/groups, kh, kw]."""
    unbatched = input.ndim == 3
    x = input.unsqueeze(0) if unbatched else input
    s, d = _pair(stride, "stride"), _pair(dilation, "dilation")
    _check_conv_args(padding, s, d)
    pads = _conv_padding(padding, weight.shape[2:], d, s)
    args = (x, weight) if bias is None else (x, weight, bias)
    y = Conv2d.apply(*args, op="conv2d", stride=s, padding=pads, dilation=d, groups=groups)
    return y.squeeze(0) if unbatched else y
