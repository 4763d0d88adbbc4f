"""Joining and shaping ops: cat, stack, tril/triu, repeat, roll, flip, pad, one_hot, var/std.

Each is one primitive with PyTorch's name, arguments and backward node. What they allocate
follows PyTorch's CPU kernels:
- cat / stack: one output; backward hands each input a *view* of the gradient (CatBackward0 and
  StackBackward0 narrow / select it), so nothing is allocated there.
- tril_ / triu_ keep nothing for backward: in place they are free.
- flip, roll, repeat, pad: one output, copied with slice assignments (no hidden temporaries);
  their backward makes one input-sized gradient (repeat's sums the tiles).
- var / std keep the input (std also its result), as var_backward / std_backward read them.
"""

from __future__ import annotations

import itertools
import math
from typing import Literal

import numpy as np

from engine import dtypes, kernels
from engine.autograd.function import Function
from engine.ops import registry as _registry
from engine.ops.common import result_buffer, result_type
from engine.ops.reduce import norm_dims, reduced_shape
from engine.tensor import Tensor, _wrap_dim


def _live(dev) -> bool:
    return dev.type != "meta"


def _tensor_list(tensors, opname):
    if isinstance(tensors, Tensor) or not isinstance(tensors, (list, tuple)):
        raise TypeError(
            f"{opname}(): argument 'tensors' must be tuple of Tensors, not {type(tensors).__name__}"
        )
    if not tensors:  # torch's words: cat's own check, the others' TensorList one
        if opname == "cat":
            raise ValueError("torch.cat(): expected a non-empty list of Tensors")
        raise RuntimeError(f"{opname} expects a non-empty TensorList")
    for i, t in enumerate(tensors):
        if not isinstance(t, Tensor):
            raise TypeError(
                f"{opname}(): expected Tensor as element {i} in argument 0, but got "
                f"{type(t).__name__}"
            )
    return list(tensors)


def _same_device(tensors, opname):
    dev = tensors[0]._device
    for t in tensors[1:]:
        if t._device != dev:
            raise RuntimeError(
                f"{opname}(): Expected all tensors to be on the same device, but found at least "
                f"two devices, {dev} and {t._device}!"
            )
    return dev


# ---------------------------------------------------------------------------------------------
# cat / stack
# ---------------------------------------------------------------------------------------------
class Cat(Function):
    def forward(self, *tensors, out=None, dim=0):
        shapes = [t._data.shape for t in tensors]
        # PyTorch skips legacy empty 1-d tensors (shape [0]) whatever the other shapes are
        used = [s != (0,) for s in shapes]
        ref = shapes[used.index(True)] if True in used else shapes[0]
        n = len(ref)
        d = _wrap_dim(dim, max(n, 1))
        if n == 0:
            raise RuntimeError("zero-dimensional tensor (at position 0) cannot be concatenated")
        for i, s in enumerate(shapes):
            if not s:
                raise RuntimeError(
                    f"zero-dimensional tensor (at position {i}) cannot be concatenated"
                )
        for i, s in enumerate(shapes):
            if not used[i] or s == ref:
                continue
            if len(s) != n:
                raise RuntimeError(
                    f"Tensors must have same number of dimensions: got {n} and {len(s)}"
                )
            for k, (a, b) in enumerate(zip(ref, s, strict=True)):
                if k != d and a != b:
                    raise RuntimeError(
                        f"Sizes of tensors must match except in dimension {d}. Expected size {a} "
                        f"but got size {b} for tensor number {i} in the list."
                    )
        dev = _same_device(tensors, "cat")
        dtype = result_type(*tensors)
        shape = list(ref)
        shape[d] = sum(s[d] for s, u in zip(shapes, used, strict=True) if u)
        y = result_buffer(out, tuple(shape), dtype, dev, "cat")
        self.dim = d
        self.pieces = []  # (start, size) along d, None for a skipped tensor
        start = 0
        lead = (slice(None),) * d
        xp = kernels.xp_of_device(dev) if _live(dev) else None
        for t, s, u in zip(tensors, shapes, used, strict=True):
            if not u:
                self.pieces.append(None)
                continue
            k = s[d]
            self.pieces.append((start, k))
            if xp is not None:
                xp.copyto(y._data[lead + (slice(start, start + k),)], t._data, casting="unsafe")
            start += k
        return y

    def backward(self, g):
        lead = (slice(None),) * self.dim
        grads = []
        for piece, nf in zip(self.pieces, self._edges, strict=True):
            if piece is None or nf is None:
                grads.append(None)
            else:
                start, k = piece
                grads.append(g[lead + (slice(start, start + k),)])  # a view: no allocation
        return tuple(grads)

    def name(self):
        return "CatBackward0"


class Stack(Function):
    def forward(self, *tensors, out=None, dim=0):
        ref = tensors[0]
        d = _wrap_dim(dim, ref.ndim + 1)
        for i, t in enumerate(tensors):
            if t.shape != ref.shape:
                raise RuntimeError(
                    f"stack expects each tensor to be equal size, but got {list(ref.shape)} at "
                    f"entry 0 and {list(t.shape)} at entry {i}"
                )
        dev = _same_device(tensors, "stack")
        dtype = result_type(*tensors)
        shape = ref.shape[:d] + (len(tensors),) + ref.shape[d:]
        y = result_buffer(out, shape, dtype, dev, "stack")
        self.dim = d
        if _live(dev):
            xp = kernels.xp_of_device(dev)
            lead = (slice(None),) * d
            for i, t in enumerate(tensors):
                xp.copyto(y._data[lead + (i,)], t._data, casting="unsafe")
        return y

    def backward(self, g):
        lead = (slice(None),) * self.dim
        return tuple(g[lead + (i,)] if nf is not None else None for i, nf in enumerate(self._edges))

    def name(self):
        return "StackBackward0"


def cat(tensors, dim=0, *, out=None):
    tensors = _tensor_list(tensors, "cat")
    return Cat.apply(*tensors, out=out, op="cat", dim=dim)


def stack(tensors, dim=0, *, out=None):
    tensors = _tensor_list(tensors, "stack")
    return Stack.apply(*tensors, out=out, op="stack", dim=dim)


def hstack(tensors, *, out=None):
    tensors = _tensor_list(tensors, "hstack")
    return cat(tensors, 0 if tensors[0].ndim == 1 else 1, out=out)


def _atleast(nd, tensors):
    """atleast_1d/2d/3d as torch's: a 0-d tensor reshaped to [1]*nd, a vector unsqueezed to
    [1, n] (2-D) or [1, n, 1] (3-D), a matrix to [m, n, 1]; one tensor gives one, several (or a
    list) a tuple."""
    listed = len(tensors) == 1 and isinstance(tensors[0], (list, tuple))
    if listed:
        tensors = tuple(tensors[0])
    out = []
    for t in tensors:
        if t.ndim == 0 and nd:
            t = t.reshape((1,) * nd)
        elif t.ndim == 1 and nd >= 2:
            t = t.unsqueeze(0) if nd == 2 else t.unsqueeze(0).unsqueeze(-1)
        elif t.ndim == 2 and nd == 3:
            t = t.unsqueeze(-1)
        out.append(t)
    return out[0] if len(out) == 1 and not listed else tuple(out)


def atleast_1d(*tensors):
    return _atleast(1, tensors)


def atleast_2d(*tensors):
    return _atleast(2, tensors)


def atleast_3d(*tensors):
    return _atleast(3, tensors)


def dstack(tensors, *, out=None):
    tensors = _tensor_list(tensors, "dstack")
    return cat(list(atleast_3d(list(tensors))), 2, out=out)


def column_stack(tensors, *, out=None):
    """Vectors (and 0-d tensors) as columns, matrices as they are, side by side."""
    tensors = _tensor_list(tensors, "column_stack")
    cols = [t.reshape(t.numel(), 1) if t.ndim <= 1 else t for t in tensors]
    return cat(cols, 1, out=out)


def vstack(tensors, *, out=None):
    tensors = [t.reshape(1, -1) if t.ndim < 2 else t for t in _tensor_list(tensors, "vstack")]
    return cat(tensors, 0, out=out)


# ---------------------------------------------------------------------------------------------
# tril / triu
# ---------------------------------------------------------------------------------------------
class Tri(Function):
    """tril / triu: copy (unless in place), then zero the other triangle row by row."""

    def forward(self, x, out=None, diagonal=0, upper=False):
        if x.ndim < 2:
            raise RuntimeError(
                f"{'triu' if upper else 'tril'}: input tensor must have at least 2 dimensions"
            )
        self.diagonal, self.upper = diagonal, upper
        y = result_buffer(out, x.shape, x._dtype, x._device, "triu" if upper else "tril")
        if _live(x._device):
            xp = kernels.xp_of(x)
            if y is not x:
                xp.copyto(y._data, x._data)
            _zero_triangle(y._data, diagonal, upper)
        return y

    def backward(self, g):
        return (
            Tri.apply(
                g, op="triu" if self.upper else "tril", diagonal=self.diagonal, upper=self.upper
            ),
        )

    def name(self):
        return "TriuBackward0" if self.upper else "TrilBackward0"


def _zero_triangle(a, diagonal, upper):
    rows, cols = a.shape[-2], a.shape[-1]
    for i in range(rows):
        if upper:  # triu keeps j >= i + diagonal
            hi = min(max(i + diagonal, 0), cols)
            if hi:
                a[..., i, :hi] = 0
        else:  # tril keeps j <= i + diagonal
            lo = min(max(i + diagonal + 1, 0), cols)
            if lo < cols:
                a[..., i, lo:] = 0


def tril(input, diagonal=0, *, out=None):
    return Tri.apply(input, out=out, op="tril", diagonal=diagonal, upper=False)


def tril_(input, diagonal=0):
    return Tri.apply(input, out=input, op="tril_", diagonal=diagonal, upper=False)


def triu(input, diagonal=0, *, out=None):
    return Tri.apply(input, out=out, op="triu", diagonal=diagonal, upper=True)


def triu_(input, diagonal=0):
    return Tri.apply(input, out=input, op="triu_", diagonal=diagonal, upper=True)


# ---------------------------------------------------------------------------------------------
# repeat / flip / roll
# ---------------------------------------------------------------------------------------------
class Repeat(Function):
    def forward(self, x, out=None, repeats=()):
        repeats = tuple(int(r) for r in repeats)
        if len(repeats) < x.ndim:
            raise RuntimeError(
                "Number of dimensions of repeat dims can not be smaller than number of dimensions "
                "of tensor"
            )
        if any(r < 0 for r in repeats):
            raise RuntimeError(f"Trying to create tensor with negative dimension: {list(repeats)}")
        src = (1,) * (len(repeats) - x.ndim) + x.shape
        self.src, self.repeats, self.in_shape = src, repeats, x.shape
        shape = tuple(r * n for r, n in zip(repeats, src, strict=True))
        y = kernels.empty(shape, x._dtype, x._device)
        if _live(x._device) and y._data.size:
            inter = tuple(itertools.chain.from_iterable(zip(repeats, src, strict=True)))
            xs = x._data[(None,) * (len(src) - x.ndim) + (Ellipsis,)]
            xs = xs[tuple(itertools.chain.from_iterable((None, slice(None)) for _ in src))]
            kernels.xp_of(x).copyto(y._data.reshape(inter), xs)
        return y

    def backward(self, g):
        """PyTorch's repeat_backward: zeros when a repeat is 0; the new leading dims summed one
        at a time; then one reshape to (repeat, size) pairs and one sum over the repeats."""
        if 0 in self.repeats:
            return (kernels.zeros(self.in_shape, g._dtype, g._device),)
        lead = len(self.repeats) - len(self.in_shape)
        for _ in range(lead):
            g = g.sum(0)
        grad_size, sum_dims = [], []
        for r, n in zip(self.repeats[lead:], self.in_shape, strict=True):
            if r != 1:
                grad_size.append(r)
                sum_dims.append(len(grad_size) - 1)
            grad_size.append(n)
        if sum_dims:
            g = g.reshape(grad_size).sum(sum_dims)
        return (g,)

    def name(self):
        return "RepeatBackward0"


def repeat(input, *sizes):
    if len(sizes) == 1 and isinstance(sizes[0], (tuple, list)):
        sizes = tuple(sizes[0])
    return Repeat.apply(input, op="repeat", repeats=sizes)


def _dims(dims, ndim):
    if isinstance(dims, int):
        dims = (dims,)
    out = tuple(_wrap_dim(d, ndim) for d in dims)
    if len(set(out)) != len(out):
        raise RuntimeError(f"dims has duplicates, original flip dims size={len(out)}")
    return out


class Flip(Function):
    def forward(self, x, out=None, dims=()):
        dims = _dims(dims, x.ndim)
        self.dims = dims
        y = result_buffer(out, x.shape, x._dtype, x._device, "flip")
        if _live(x._device):
            idx = tuple(slice(None, None, -1) if i in dims else slice(None) for i in range(x.ndim))
            kernels.xp_of(x).copyto(y._data, x._data[idx])
        return y

    def backward(self, g):
        return (Flip.apply(g, op="flip", dims=self.dims),)

    def name(self):
        return "FlipBackward0"


def flip(input, dims):
    return Flip.apply(input, op="flip", dims=dims)


def _flip_method(self, *dims):
    """Tensor.flip(0, 1) or Tensor.flip((0, 1))."""
    return flip(self, dims[0] if len(dims) == 1 and not isinstance(dims[0], int) else dims)


def fliplr(input):
    if input.ndim < 2:
        raise RuntimeError("Input must be >= 2-d.")
    return flip(input, (1,))


def flipud(input):
    if input.ndim < 1:
        raise RuntimeError("Input must be >= 1-d.")
    return flip(input, (0,))


class Roll(Function):
    """Each dim splits into two blocks that trade places: 2^k slice copies, no temporaries."""

    def forward(self, x, out=None, shifts=(), dims=()):
        self.shifts, self.dims = shifts, dims
        y = kernels.empty(x.shape, x._dtype, x._device)
        if _live(x._device):
            xp = kernels.xp_of(x)
            per_dim = []
            for d in range(x.ndim):
                n = x.shape[d]
                s = sum(sh for sh, dd in zip(shifts, dims, strict=True) if dd == d) % n if n else 0
                if s == 0:
                    per_dim.append([(slice(None), slice(None))])
                else:  # y[s:] = x[:n-s]; y[:s] = x[n-s:]
                    per_dim.append(
                        [(slice(s, None), slice(0, n - s)), (slice(0, s), slice(n - s, None))]
                    )
            for combo in itertools.product(*per_dim):
                dst = tuple(c[0] for c in combo)
                src = tuple(c[1] for c in combo)
                xp.copyto(y._data[dst], x._data[src])
        return y

    def backward(self, g):
        return (Roll.apply(g, op="roll", shifts=tuple(-s for s in self.shifts), dims=self.dims),)

    def name(self):
        return "RollBackward0"


def roll(input, shifts, dims=None):
    if isinstance(shifts, int):
        shifts = (shifts,)
    shifts = tuple(int(s) for s in shifts)
    if dims is None:
        if len(shifts) != 1:
            raise RuntimeError(f"shifts and dimensions must align. shifts: {len(shifts)}, dims:0")
        flat = input.reshape(-1)
        return Roll.apply(flat, op="roll", shifts=shifts, dims=(0,)).reshape(input.shape)
    if isinstance(dims, int):
        dims = (dims,)
    dims = tuple(_wrap_dim(d, input.ndim) for d in dims)
    if len(shifts) != len(dims):
        raise RuntimeError(
            f"shifts and dimensions must align. shifts: {len(shifts)}, dims:{len(dims)}"
        )
    return Roll.apply(input, op="roll", shifts=shifts, dims=dims)


# ---------------------------------------------------------------------------------------------
# pad (constant, reflect, replicate; circular as torch's composite of slice copies)
# ---------------------------------------------------------------------------------------------
def _segments(mode, n, lo, hi):
    """(out_slice, in_slice) pairs that build one padded dim of size lo + n + hi from n."""
    segs = []
    # centre (negative pads crop)
    c_in = slice(max(-lo, 0), n - max(-hi, 0))
    c_out = slice(max(lo, 0), max(lo, 0) + (c_in.stop - c_in.start))
    if c_in.stop > c_in.start:
        segs.append((c_out, c_in))
    if mode == "constant":
        return segs
    if lo > 0:
        if mode == "reflect":  # out j < lo reads in lo - j
            segs.append((slice(0, lo), slice(lo, 0, -1)))
        else:  # replicate (circular is _pad_circular's composite)
            segs.extend((slice(j, j + 1), slice(0, 1)) for j in range(lo))
    if hi > 0:
        o = slice(lo + n, lo + n + hi)
        if mode == "reflect":  # out lo + n + t reads in n - 2 - t
            stop = n - 2 - hi
            segs.append((o, slice(n - 2, stop if stop >= 0 else None, -1)))
        else:
            segs.extend((slice(lo + n + t, lo + n + t + 1), slice(n - 1, n)) for t in range(hi))
    return segs


class Pad(Function):
    def forward(self, x, out=None, pad=(), mode="constant", value=0.0):
        k = len(pad) // 2
        lead = x.ndim - k
        pairs = [(pad[2 * i], pad[2 * i + 1]) for i in range(k)]  # last dim first
        shape = list(x.shape)
        for i, (lo, hi) in enumerate(pairs):
            d = x.ndim - 1 - i
            n = x.shape[d]
            if mode == "reflect" and (lo >= n or hi >= n):
                raise RuntimeError(
                    f"Argument #4: Padding size should be less than the corresponding input "
                    f"dimension, but got: padding ({lo}, {hi}) at dimension {d} of input "
                    f"{list(x.shape)}"
                )
            shape[d] = n + lo + hi
            if shape[d] < 0:
                raise RuntimeError(
                    f"The input size {n}, plus negative padding {lo} and {hi} resulted in a "
                    f"negative output size, which is invalid. Check dimension {d} of your input."
                )
        self.mode, self.in_shape, self.padded_dims = mode, x.shape, len(pairs)
        per_dim = [[(slice(None), slice(None))]] * lead
        for d in range(lead, x.ndim):
            lo, hi = pairs[x.ndim - 1 - d]
            per_dim.append(_segments(mode, x.shape[d], lo, hi))
        self.regions = [
            (tuple(c[0] for c in combo), tuple(c[1] for c in combo))
            for combo in itertools.product(*per_dim)
        ]
        y = kernels.empty(tuple(shape), x._dtype, x._device)
        if _live(x._device):
            xp = kernels.xp_of(x)
            if mode == "constant":
                y._data.fill(value)
            for dst, src in self.regions:
                xp.copyto(y._data[dst], x._data[src])
        return y

    def backward(self, g):
        if self.mode == "constant":
            gx = (
                kernels.zeros(self.in_shape, g._dtype, g._device)
                if self._crops()
                else (kernels.empty(self.in_shape, g._dtype, g._device))
            )
        else:
            gx = kernels.zeros(self.in_shape, g._dtype, g._device)
        if _live(g._device):
            xp = kernels.xp_of(g)
            for dst, src in self.regions:
                view = gx._data[src]
                if self.mode == "constant":
                    xp.copyto(view, g._data[dst])
                else:  # several output places read one input place: add them up
                    xp.add(view, g._data[dst], out=view)
        return (gx,)

    def _crops(self):
        covered = sum(
            math.prod(_len(s, n) for s, n in zip(src, self.in_shape, strict=True))
            for _, src in self.regions
        )
        return covered != math.prod(self.in_shape)

    def name(self):
        d = self.padded_dims  # torch's kernel for 1, 2 or 3 padded dims
        return {
            "constant": "ConstantPadNdBackward0",
            "reflect": f"ReflectionPad{d}DBackward0",
            "replicate": f"ReplicationPad{d}DBackward0",
        }[self.mode]


def _len(s, n):
    return len(range(*s.indices(n)))


def _pad_circular(x, pad):
    """torch's _pad_circular: a new tensor, the input (cropped by negative pads) copied into its
    middle, then per padded dim, last first, its left and right margins copied from the other
    end of the output itself: one copy_ per region (corners written more than once), so the
    graph is torch's chain of CopySlices nodes and its backward allocates what theirs does."""
    k = len(pad) // 2
    in_shape = tuple(x.shape)
    out_shape = list(in_shape)
    for i in range(k):  # pad[2i], pad[2i + 1] pad dim -1 - i
        d = x.ndim - 1 - i
        lo, hi = pad[2 * i], pad[2 * i + 1]
        if lo > in_shape[d] or hi > in_shape[d]:
            raise RuntimeError("Padding value causes wrapping around more than once.")
        out_shape[d] = in_shape[d] + lo + hi
        if out_shape[d] < 0:
            raise RuntimeError("Negative padding value is resulting in an empty dimension")
    out = x.new_empty(out_shape)
    dst, src = out, x
    for i in range(k):
        d = x.ndim - 1 - i
        lo, hi = pad[2 * i], pad[2 * i + 1]
        dst = dst.narrow(d, max(lo, 0), out_shape[d] - max(hi, 0) - max(lo, 0))
        src = src.narrow(d, max(-lo, 0), in_shape[d] - max(-hi, 0) - max(-lo, 0))
    dst.copy_(src)
    for i in range(k):
        d = x.ndim - 1 - i
        lo, hi = pad[2 * i], pad[2 * i + 1]
        if lo > 0:
            out.narrow(d, 0, lo).copy_(out.narrow(d, out_shape[d] - lo - max(hi, 0), lo))
        if hi > 0:
            out.narrow(d, out_shape[d] - hi, hi).copy_(out.narrow(d, max(lo, 0), hi))
    return out


def pad(input, pad, mode="constant", value=None):
    """F.pad: `pad` lists (left, right) pairs from the last dim backwards.

    constant, reflect and replicate allocate what PyTorch's kernels do (one output; backward one
    input-sized gradient); circular is torch's composite of slice copies (`_pad_circular`).
    """
    pad = tuple(int(p) for p in pad)
    if len(pad) % 2:
        raise RuntimeError("Padding length must be divisible by 2")
    if len(pad) // 2 > input.ndim:
        raise RuntimeError(
            "Padding length should be less than or equal to two times the input dimension"
        )
    if mode not in ("constant", "reflect", "replicate", "circular"):
        raise NotImplementedError(
            f"pad: mode {mode!r} is not supported; use 'constant', 'reflect', 'replicate' or "
            "'circular'"
        )
    if mode != "constant":
        if value not in (None, 0, 0.0):
            raise RuntimeError(f'Padding mode "{mode}" doesn\'t take in value argument.')
        k = len(pad) // 2
        if not 1 <= k <= 3 or input.ndim not in (k + 1, k + 2):
            raise NotImplementedError(
                f"Padding size {len(pad)} is not supported for {input.ndim}D input tensor.\n"
                "Supported combinations for non-constant padding:\n"
                "  - 2D or 3D input: padding size = 2 (pads last dimension)\n"
                "  - 3D or 4D input: padding size = 4 (pads last 2 dimensions)\n"
                "  - 4D or 5D input: padding size = 6 (pads last 3 dimensions)"
            )
        if mode == "circular":
            return _pad_circular(input, pad)
        if any(p < 0 for p in pad):
            raise RuntimeError(f"pad: negative padding is not supported in mode {mode!r}")
    return Pad.apply(input, op="pad", pad=pad, mode=mode, value=0.0 if value is None else value)


# ---------------------------------------------------------------------------------------------
# one_hot, var / std
# ---------------------------------------------------------------------------------------------
class OneHot(Function):
    differentiable = False

    def forward(self, t, out=None, num_classes=-1):
        if t._dtype is not dtypes.int64:
            raise RuntimeError("one_hot is only applicable to index tensor of type LongTensor.")
        live = _live(t._device)
        if num_classes == -1:
            if not live:
                raise RuntimeError(
                    "one_hot: num_classes=-1 reads the values of the tensor, which a meta tensor "
                    "does not have; pass num_classes"
                )
            if t._data.size == 0:
                raise RuntimeError("Can not infer total number of classes from empty tensor.")
            num_classes = int(t._data.max()) + 1
        if live and t._data.size:
            lo, hi = int(t._data.min()), int(t._data.max())
            if lo < 0:
                raise RuntimeError("Class values must be non-negative.")
            if hi >= num_classes:
                raise RuntimeError("Class values must be smaller than num_classes.")
        y = kernels.zeros(t.shape + (num_classes,), dtypes.int64, t._device)
        if live and t._data.size:
            xp = kernels.xp_of(t)
            flat = t._data.reshape(-1)
            y._data.reshape(-1, num_classes)[xp.arange(flat.size), flat] = 1
        return y


def one_hot(tensor, num_classes=-1):
    return OneHot.apply(tensor, op="one_hot", num_classes=int(num_classes))


class Var(Function):
    """var / std over `dim` with `correction` (std keeps its result as well as the input)."""

    def to_save(self, tensors):
        return (0,)

    def forward(self, x, out=None, dim=None, correction=1, keepdim=False, std=False):
        if not x._dtype.is_floating_point:
            raise RuntimeError(
                f"std and var only support floating point and complex dtypes, got "
                f"{x._dtype.scalar_name}"
            )
        dims = norm_dims(dim, x.ndim)
        self.dims, self.keepdim, self.correction, self.std = dims, keepdim, correction, std
        self.in_shape = x.shape
        self.n = math.prod(x.shape[d] for d in dims) if dims else 1
        shape = reduced_shape(x.shape, dims, keepdim)
        y = result_buffer(out, shape, x._dtype, x._device, "std" if std else "var")
        if _live(x._device):
            xp = kernels.xp_of(x)
            xd = x._data
            axes = dims if dims else None
            if xd.size == 0 or self.n - correction <= 0:
                v = xp.full(shape, np.nan, dtype=xd.dtype) if self.n - correction <= 0 else None
                if v is not None:
                    xp.copyto(y._data, v)
            else:
                # float32 and half types in float64, as torch's kernels accumulate (Welford in
                # double on cpu): float32's own sum overflows past 3.4e38 (var of four 1e38 was
                # inf, torch's 0) and loses digits to the mean's rounding
                acc = np.float64 if xd.dtype.itemsize < 8 else None
                v = xp.var(xd, axis=axes, ddof=correction, keepdims=keepdim, dtype=acc)
                xp.copyto(y._data, v, casting="same_kind")
            if std:
                xp.sqrt(y._data, out=y._data)
        return y

    def backward(self, g):
        return (self._var_backward(g),)

    def _var_backward(self, g):
        """torch's var_backward / std_backward in its order: std: grad_var = (g / (result *
        2)).masked_fill_(result == 0, 0); var: (2 / dof) * grad * (x - x.mean(dims, true)),
        whose right operand gcc evaluates first (mean, diff, then 2 / dof * grad, the product),
        the temporaries freed last made first."""
        saved = self.saved_tensors
        x = saved[0]
        dev, dt = g._device, g._dtype
        live = _live(dev)
        xp = kernels.xp_of(g) if live else None
        kshape = reduced_shape(self.in_shape, self.dims, True) if self.dims else ()
        if self.std:
            y = saved[1]
            twice = kernels.empty(y.shape, dt, dev)
            grad_var = kernels.empty(g.shape, dt, dev)
            zero = kernels.empty(y.shape, dtypes.bool_, dev)
            if live:
                xp.multiply(y._data, 2.0, out=twice._data)
                xp.divide(g._data, twice._data, out=grad_var._data)
                xp.equal(y._data, 0, out=zero._data)
                grad_var._data[zero._data] = 0
            del zero, twice
            g = grad_var
        dof = self.n - self.correction
        mean = kernels.empty(kshape, dt, dev)
        diff = kernels.empty(self.in_shape, dt, dev)
        t = kernels.empty(g.shape, dt, dev)
        gx = kernels.empty(self.in_shape, dt, dev)
        if live:
            axes = self.dims if self.dims else None
            xp.mean(x._data, axis=axes, keepdims=bool(self.dims), out=mean._data)
            xp.subtract(x._data, mean._data, out=diff._data)
            xp.multiply(g._data, 2.0 / dof if dof > 0 else np.nan, out=t._data)
            tk = t._data
            if not self.keepdim and self.dims:
                tk = tk.reshape(kshape)
            xp.multiply(tk, diff._data, out=gx._data)
        del t, diff, mean
        return gx

    def name(self):
        return "StdBackward0" if self.std else "VarBackward0"


class Std(Var):
    retain_output = True


def _var_args(dim, unbiased, correction, keepdim, opname):
    if isinstance(dim, bool):  # var(x, unbiased) / var(x, unbiased, keepdim) legacy forms
        if unbiased is not None and not isinstance(unbiased, bool):
            raise TypeError(f"{opname}(): unbiased must be a bool")
        dim, unbiased = None, dim
    if correction is not None and unbiased is not None:
        raise RuntimeError(f"{opname}(): cannot specify both unbiased and correction")
    if correction is None:
        correction = 1 if unbiased is None or unbiased else 0
    return dim, correction


def var(input, dim=None, unbiased=None, keepdim=False, *, correction=None, out=None):
    dim, correction = _var_args(dim, unbiased, correction, keepdim, "var")
    return Var.apply(input, out=out, op="var", dim=dim, correction=correction, keepdim=keepdim)


def std(input, dim=None, unbiased=None, keepdim=False, *, correction=None, out=None):
    dim, correction = _var_args(dim, unbiased, correction, keepdim, "std")
    return Std.apply(
        input, out=out, op="std", dim=dim, correction=correction, keepdim=keepdim, std=True
    )


# One row of the op table (engine/ops/registry.py) per public name
_row = _registry.register
_S = _registry.Scenario
_REQ = _registry.REQUIRED
_DIMS = int | list[int] | None


def _joined(fn):
    return _S(
        inputs=("tensors",),
        variadic=True,
        args=(("dim", int, 0, "the dim to join along"),),
        call=lambda ts, a, inplace: fn(list(ts), a.get("dim", 0)),
        doc=f"{fn.__name__} of the input tensors: one output; backward hands out views",
    )


_VAR_SCENARIO_ARGS = (
    ("dim", _DIMS, None, "dims to reduce (all by default)"),
    ("correction", int, 1, "divide by N - correction"),
    ("keepdim", bool, False, ""),
)
_row("cat", cat, scenario=_joined(cat))
_row("concat", cat)
_row("concatenate", cat)
_row("stack", stack, scenario=_joined(stack))
_row("hstack", hstack)
_row("vstack", vstack)
_row("row_stack", vstack)
_row("dstack", dstack)
_row("column_stack", column_stack)
for _name, _fn in (
    ("atleast_1d", atleast_1d),
    ("atleast_2d", atleast_2d),
    ("atleast_3d", atleast_3d),
):
    _row(_name, _fn)
_tri_args = (("diagonal", int, 0, "which diagonal bounds the triangle"),)
_row(
    "tril",
    tril,
    method=True,
    inplace="tril_",
    scenario=_S(args=_tri_args, doc="lower triangle (tril_ in place keeps nothing: free)"),
)
_row("tril_", tril_, function=False, method=True)
_row(
    "triu",
    triu,
    method=True,
    inplace="triu_",
    scenario=_S(args=_tri_args, doc="upper triangle (triu_ in place keeps nothing: free)"),
)
_row("triu_", triu_, function=False, method=True)
_row(
    "repeat",
    repeat,
    function=False,
    method=True,
    scenario=_S(
        args=(("repeats", list[int], _REQ, "tiles per dim"),),
        call=lambda ts, a, inplace: repeat(ts[0], *a["repeats"]),
        doc="tile the input (a copy)",
    ),
)
_row(
    "flip",
    flip,
    method=_flip_method,
    scenario=_S(args=(("dims", list[int], _REQ, ""),), doc="reverse dims (a copy)"),
)
_row("fliplr", fliplr, method=True)
_row("flipud", flipud, method=True)
_row(
    "roll",
    roll,
    method=True,
    scenario=_S(
        args=(("shifts", int | list[int], _REQ, ""), ("dims", _DIMS, None, "")),
        doc="rotate along dims (a copy)",
    ),
)
_row(
    "var", var, method=True, scenario=_S(args=_VAR_SCENARIO_ARGS, doc="variance (keeps the input)")
)
_row("std", std, method=True, scenario=_S(args=_VAR_SCENARIO_ARGS, doc="standard deviation"))
_row(
    "pad",
    pad,
    function=False,
    functional=True,
    scenario=_S(
        args=(
            ("pad", list[int], _REQ, "(left, right) pairs from the last dim backwards"),
            ("mode", Literal["constant", "reflect", "replicate", "circular"], "constant", ""),
            ("value", float | None, None, "fill value (constant mode)"),
        ),
        doc="F.pad",
    ),
)
_row(
    "one_hot",
    one_hot,
    function=False,
    functional=True,
    scenario=_S(
        inputs=("tensor",),
        args=(("num_classes", int, _REQ, ""),),
        doc="F.one_hot of an int64 tensor (int64 result)",
    ),
)


def register(namespace: dict, tensor_cls) -> None:
    """Nothing left to do: the rows above were registered when this module was imported."""
