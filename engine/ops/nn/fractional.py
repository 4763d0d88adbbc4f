"""F.fractional_max_pool2d / fractional_max_pool3d (and their `_with_indices` forms): max pooling
over windows whose starts follow a pseudo-random sequence (Graham's fractional max pooling), as
torch's native CPU kernels compute it.

Each plane has one sample per spatial dim (`_random_samples`, [N, C, 2] or [N, C, 3], in
[0, 1)); for a dim of input size n, output size o and pool size k the window starts are
`int((i + u) * a) - int(u * a)` for i < o - 1, with `a = (n - k) / (o - 1)` computed in the
input's dtype, and the last start is n - k. Given the same samples the engine's values and
indices are torch's; without them F draws its own, `rand(N, C, 2)` in the input's dtype, a
block made and freed around the call as torch's is (the values are the engine's generator's).

Memory as torch's: the output and its int64 indices; the node keeps the input and the indices;
backward is one input-sized zero-filled gradient the output's gradient is added into.
"""

from __future__ import annotations

import math

import numpy as np

from engine import dtypes, kernels
from engine.autograd.function import Function
from engine.ops.nn.common import _live
from engine.ops.nn.pool3d import _scatter_add

# per rank: torch's op name in its messages, the dims' words, which sample drives which dim
_SPEC = {
    2: ("fractional_max_pool2d", ("height", "width"), (1, 0), "Ints"),  # samples: [W, H]
    3: ("fractional_max_pool3d_out", ("time", "height", "width"), (0, 1, 2), "three Ints"),
}


def _starts(xp, samples, n, o, k, np_dtype, bf16=False):
    """Window starts [planes, o] from one sample per plane (torch's generate_intervals, in the
    input's dtype, each operation rounded to it: bfloat16, held as float32, is rounded by hand;
    C's int cast truncates toward zero, as astype does)."""

    def r(a):
        a = xp.asarray(a, dtype=np_dtype)
        if bf16:
            dtypes.round_to_bfloat16_(a)
        return a

    planes = samples.shape[0]
    seq = xp.empty((planes, o), dtype=np.int64)
    if o > 1:
        alpha = r(r(n - k) / r(o - 1))
        u = r(samples)[:, None]
        i = r(xp.arange(o - 1))[None, :]
        seq[:, :-1] = r(r(i + u) * alpha).astype(np.int64) - r(u * alpha).astype(np.int64)
    if o > 0:
        seq[:, -1] = n - k
    return seq


class FractionalMaxPool(Function):
    """(values, int64 flat indices into the input plane) of fractional max pooling over the last
    `rank` dims; the node keeps the input (torch's saves self) and the indices."""

    num_outputs = 2
    retain_inputs = (0,)

    def forward(self, x, samples, out=None, kernel=(), output_size=(), rank=2):
        name, words, sample_of, ints = _SPEC[rank]
        short = f"fractional_max_pool{rank}d"
        if len(kernel) != rank:
            raise RuntimeError(
                f"{short}: kernel_size must either be a single Int or tuple of {ints}"
            )
        if len(output_size) != rank:
            raise RuntimeError(
                f"{short}: output_size must either be a single Int or tuple of {ints}"
            )
        if x.ndim not in (rank + 1, rank + 2):
            raise RuntimeError(
                f"{name}(): Expected {rank + 1}D or {rank + 2}D tensor, but got: {list(x.shape)}"
            )
        for d in range(1, x.ndim):
            if x.shape[d] == 0:
                raise RuntimeError(
                    f"{name}(): Expected input to have non-zero size for non-batch dimensions, "
                    f"but got{list(x.shape)} with dimension {d} being empty."
                )
        if samples._dtype is not x._dtype:
            raise RuntimeError("Expect _random_samples to have the same dtype as input")
        if samples.ndim != 3:
            raise RuntimeError(f"Expect _random_samples to have 3 dimensions, got {samples.ndim}")
        batch = x.shape[0] if x.ndim == rank + 2 else 1
        channels = x.shape[-rank - 1]
        if samples.shape[0] < batch:
            raise RuntimeError("Expect _random_samples.size(0) no less then input batch size.")
        if samples.shape[1] != channels:
            raise RuntimeError("Expect _random_samples.size(1) equals to input channel size.")
        if samples.shape[2] != rank:
            raise RuntimeError(
                f"Expect _random_samples.size(2) equals to {rank}; got {samples.shape[2]}."
            )
        sp = tuple(x.shape[-rank:])
        for word, o, k, n in zip(words, output_size, kernel, sp, strict=True):
            # (torch's 3-D kernel asks for one more element than its 2-D kernel does)
            if o + k - 1 > n or (rank == 3 and o + k - 1 == n):
                raise RuntimeError(
                    f"{name}(): pool {word} {k} too large relative to input {word} {n}"
                )
        shape = tuple(x.shape[:-rank]) + tuple(output_size)
        if min(output_size) < 0:
            raise RuntimeError(
                f"Trying to create tensor with negative dimension {min(output_size)}: {list(shape)}"
            )
        if not x._dtype.is_floating_point:
            kind = x._dtype.scalar_name
            raise NotImplementedError(f"\"{short}_out_frame\" not implemented for '{kind}'")
        self.x_shape, self.sp, self.osp, self.planes = (
            tuple(x.shape),
            sp,
            tuple(output_size),
            (batch * channels),
        )
        dev = x._device
        y = kernels.empty(shape, x._dtype, dev)
        idx = kernels.empty(shape, dtypes.int64, dev)
        # torch's kernel reads a contiguous copy of a strided input (made after the outputs,
        # freed when it returns)
        xc = x if x.is_contiguous() else kernels.copy_new(x)
        if _live(dev) and y.numel():
            self._pool(kernels.xp_of(x), xc, samples, y, idx, kernel, sample_of)
        del xc
        self.save(indices=idx)
        return y, idx

    def _pool(self, xp, x, samples, y, idx, kernel, sample_of):
        planes, sp, osp = self.planes, self.sp, self.osp
        rank = len(sp)
        # the window arithmetic is the kernel's, in its dtype (bfloat16 is held as float32 here)
        np_dtype = np.dtype(x._data.dtype).type
        bf16 = x._dtype is dtypes.bfloat16
        u = samples._data[: self.x_shape[0] if x.ndim == rank + 2 else 1].reshape(planes, rank)
        starts = [
            _starts(xp, u[:, sample_of[d]], sp[d], osp[d], kernel[d], np_dtype, bf16)
            for d in range(rank)
        ]
        x2 = x._data.reshape(planes, -1)
        strides = [math.prod(sp[d + 1 :]) for d in range(rank)]
        # each output's first window position, broadcast over [planes, *osp]
        first = 0
        for d in range(rank):
            view = [planes] + [1] * rank
            view[1 + d] = osp[d]
            first = first + starts[d].reshape(view) * strides[d]
        first = xp.broadcast_to(first, (planes,) + osp)
        rows = xp.arange(planes, dtype=np.int64).reshape((planes,) + (1,) * rank)
        best = xp.full((planes,) + osp, -np.inf, dtype=x._data.dtype)
        arg = xp.array(first, dtype=np.int64)
        # the kernel's scan: offsets in C order, a larger value or a NaN takes over
        for offset in np.ndindex(*kernel):
            pos = first + sum(o * s for o, s in zip(offset, strides, strict=True))
            v = x2[rows, pos]
            took = (v > best) | (v != v)
            xp.copyto(best, v, where=took)
            xp.copyto(arg, pos, where=took)
        y._data[...] = best.reshape(y.shape)
        idx._data[...] = arg.reshape(idx.shape)

    def backward(self, g, g_idx=None):
        (_,) = self.saved_tensors  # (torch unpacks self: an in-place change is an error)
        idx = self.kept("indices")
        dev = g._device
        # a strided gradient is read through a contiguous copy, made before the result
        gc = g if g.is_contiguous() else kernels.copy_new(g)
        gx = kernels.zeros(self.x_shape, g._dtype, dev)
        if _live(dev) and g.numel():
            xp = kernels.xp_of(g)
            g2 = gc._data.reshape(self.planes, -1)
            _scatter_add(xp, gx._data, idx._data, g2, self.planes, math.prod(self.sp))
        del gc
        return (gx, None)

    def name(self):
        return f"FractionalMaxPool{len(self.sp)}DBackward0"


def _expand(v, n):
    return [int(e) for e in v] if isinstance(v, (tuple, list)) else [int(v)] * n


def _fractional(input, kernel_size, output_size, output_ratio, random_samples, rank):
    short = f"fractional_max_pool{rank}d"
    if output_size is None and output_ratio is None:
        raise ValueError(f"{short} requires specifying either an output_size or an output_ratio")
    if output_size is None:
        if rank == 2:
            if len(output_ratio) > 2:
                raise ValueError(
                    "fractional_max_pool2d requires output_ratio to either be a single Int or "
                    "tuple of Ints."
                )
            ratio = (
                tuple(output_ratio)
                if isinstance(output_ratio, (tuple, list))
                else (output_ratio,) * 2
            )
        else:
            ratio = (
                tuple(output_ratio)
                if isinstance(output_ratio, (tuple, list))
                else (output_ratio,) * 3
            )
        output_size = [int(input.size(-rank + d) * ratio[d]) for d in range(rank)]
    if random_samples is None:
        from engine.creation import rand

        n_batch = 1 if input.dim() == rank + 1 else input.size(0)
        random_samples = rand(
            n_batch, input.size(-rank - 1), rank, dtype=input.dtype, device=input.device
        )
    return FractionalMaxPool.apply(
        input,
        random_samples,
        op=short,
        kernel=_expand(kernel_size, rank),
        output_size=_expand(output_size, rank),
        rank=rank,
    )


def fractional_max_pool2d_with_indices(
    input, kernel_size, output_size=None, output_ratio=None, return_indices=False,
    _random_samples=None,
):  # fmt: skip
    """(values, indices) of 2-D fractional max pooling of [N, C, H, W] or [C, H, W]."""
    return _fractional(input, kernel_size, output_size, output_ratio, _random_samples, 2)


def fractional_max_pool3d_with_indices(
    input, kernel_size, output_size=None, output_ratio=None, return_indices=False,
    _random_samples=None,
):  # fmt: skip
    """(values, indices) of 3-D fractional max pooling of [N, C, T, H, W] or [C, T, H, W]."""
    return _fractional(input, kernel_size, output_size, output_ratio, _random_samples, 3)


def fractional_max_pool2d(
    input, kernel_size, output_size=None, output_ratio=None, return_indices=False,
    _random_samples=None,
):  # fmt: skip
    """2-D fractional max pooling: give output_size or output_ratio; `_random_samples`
    ([N, C, 2] in [0, 1)) fixes the windows, else they are drawn."""
    y, idx = _fractional(input, kernel_size, output_size, output_ratio, _random_samples, 2)
    return (y, idx) if return_indices else y


def fractional_max_pool3d(
    input, kernel_size, output_size=None, output_ratio=None, return_indices=False,
    _random_samples=None,
):  # fmt: skip
    """3-D fractional max pooling: give output_size or output_ratio; `_random_samples`
    ([N, C, 3] in [0, 1)) fixes the windows, else they are drawn."""
    y, idx = _fractional(input, kernel_size, output_size, output_ratio, _random_samples, 3)
    return (y, idx) if return_indices else y
