"""embedding_bag: sums, means or maxima of bags of embedding rows, as torch's CPU kernel.

torch's `_embedding_bag` (aten/src/ATen/native/EmbeddingBag.cpp) returns four tensors: the
output and three index buffers its node keeps until backward, each charged:

- offset2bag [N] (allocated N + 1 entries, then an `index_add_` of ones and a `cumsum` that
  replaces it): the bag of every index. In `sum` mode on the fast path (float32 / float16 /
  bfloat16 weight with unit row stride, no padding_idx) it is left empty and backward rebuilds
  it;
- bag_size [len(offsets)]: the entries of each bag (less its padding entries in mean / max);
- max_indices: [bags] (a copy of bag_size), or [bags, D] in `max` mode (the winning rows).

Backward is `_embedding_bag_dense_backward`: a [num_embeddings, D] zeros, then for sum / mean
the sorted indices, their sort order and offset2bag (and per_sample_weights) gathered through
it; for max `bag_size.nonzero()` twice, the kept rows of max_indices and of the gradient, and a
clone of each column of indices per feature (`index_add_` with a strided index). The per-sample
weights' gradient (`_embedding_bag_per_sample_weights_backward`) comes first. Every temporary
above is allocated and freed in torch's order. cuda and meta make the same blocks (torch's
CUDA kernel is not modelled).
"""

from __future__ import annotations

import numpy as np

from engine import dtypes, kernels
from engine.autograd.function import Function
from engine.ops.nn.common import _live, _needs

MODES = {"sum": 0, "mean": 1, "max": 2}
_FAST_DTYPES = (dtypes.float32, dtypes.float16, dtypes.bfloat16)


def _offset2bag(xp, offsets, n):
    """The bag of each of n indices: torch's index_add_ of ones at offsets, -1, cumsum."""
    marks = xp.zeros(n + 1, dtype=np.int64)
    xp.add.at(marks, offsets.astype(np.int64), 1)
    marks[0] -= 1
    return xp.cumsum(marks)[:n]


def _make_offset2bag(offsets, n: int, idx_dtype, marked: int):
    """torch's make_offset2bag on a new N + 1 buffer: ones_like(offsets) made and freed, the
    cumsum's result replacing the zeros (`marked` offsets take part)."""
    dev = offsets._device
    zeros = kernels.zeros((n + 1,), idx_dtype, dev)
    ones = kernels.empty((offsets.shape[0],), offsets._dtype, dev)
    del ones
    summed = kernels.empty((n + 1,), idx_dtype, dev)
    del zeros
    if _live(dev):
        xp = kernels.xp_of(offsets)
        summed._data[:n] = _offset2bag(xp, offsets._data[:marked], n)
    return summed


class EmbeddingBag(Function):
    """weight [V, D], indices [N], offsets [B(+1)] -> [B, D]; indices/offsets ride as attrs."""

    def forward(
        self,
        weight,
        psw=None,
        out=None,
        indices=None,
        offsets=None,
        mode=0,
        include_last_offset=False,
        padding_idx=-1,
        requires_grad=True,
    ):
        dev = weight._device
        n, n_off = indices.shape[0], offsets.shape[0]
        _check_arguments(weight, indices, offsets, mode, psw, include_last_offset)
        nb = n_off - 1 if include_last_offset else n_off
        d = weight.shape[1]
        idt = indices._dtype
        self.mode, self.padding_idx, self.num_weights = mode, padding_idx, weight.shape[0]
        self.n, self.n_off, self.nb = n, n_off, nb
        self.has_psw = psw is not None

        output = kernels.empty((nb, d), weight._dtype, dev)
        fast = (
            mode == 0
            and weight._dtype in _FAST_DTYPES
            and weight.stride(1) == 1
            and (psw is None or psw.stride(0) == 1)
            and padding_idx < 0
        )
        if fast:
            offset2bag = kernels.empty((0,), idt, dev)
        else:
            offset2bag = _make_offset2bag(offsets, n, idt, nb)
        bag_size = kernels.empty((n_off,), idt, dev)
        counted = requires_grad or mode != 0
        if counted and nb != 1:
            diff = kernels.empty((max(nb - 1, 0),), idt, dev)
            del diff
        n_bags = nb if counted else n_off
        max_indices = kernels.empty((n_bags,), idt, dev)
        if mode == 2:
            grown = kernels.empty((nb, d), idt, dev)
            del max_indices
            max_indices = grown

        if _live(dev):
            xp = kernels.xp_of(weight)
            idx = indices._data.astype(np.int64, copy=False)
            if n and (int(idx.min()) < 0 or int(idx.max()) >= weight.shape[0]):
                bad = int(idx[(idx < 0) | (idx >= weight.shape[0])][0])
                raise RuntimeError(
                    "embedding_bag: Expected idx >= 0 && idx < num_embeddings but found idx "
                    f"to be {bad}"
                )
            bags = _offset2bag(xp, offsets._data[:nb], n)
            valid = idx != padding_idx
            if include_last_offset:  # indices past the last offset belong to no bag
                valid &= xp.arange(n) < (int(offsets._data[-1]) if n_off else 0)
            off = offsets._data[:nb].astype(np.int64)
            sizes = xp.diff(xp.concatenate([off, xp.asarray([n])])) if nb else off
            pads = xp.bincount(bags[~valid], minlength=nb)[:nb] if nb else sizes
            w = weight._data
            if mode == 2:
                out_arr = xp.zeros((nb, d), dtype=w.dtype)
                mi = xp.zeros((nb, d), dtype=max_indices._data.dtype)
                for b in range(nb):
                    rows = idx[(bags == b) & valid]
                    if rows.size:
                        arg = w[rows].argmax(axis=0)
                        out_arr[b] = w[rows[arg], xp.arange(d)]
                        mi[b] = rows[arg]
                output._data[...] = out_arr
                max_indices._data[...] = mi
                bag_size._data[:nb] = sizes - pads
            else:
                acc = xp.zeros((nb, d), dtype=w.dtype)
                rows = w[idx[valid]]
                if psw is not None:
                    rows = rows * psw._data[valid][:, None]
                xp.add.at(acc, bags[valid], rows)
                if mode == 1:
                    bag_size._data[:nb] = sizes - pads
                    acc /= xp.maximum(sizes - pads, 1).astype(w.dtype)[:, None]
                    max_indices._data[...] = bag_size._data[:nb]
                else:
                    bag_size._data[...] = 0
                    max_indices._data[...] = 0
                output._data[...] = acc
        if mode == 1:  # apply_bag_size: max(bag_size, ones_like(bag_size)).to(output's dtype)
            ones = kernels.empty((nb,), idt, dev)
            biggest = kernels.empty((nb,), idt, dev)
            cast = kernels.empty((nb,), weight._dtype, dev)
            del biggest, ones, cast
        self.save(indices=indices, offsets=offsets)
        self.save(offset2bag=offset2bag, bag_size=bag_size, max_indices=max_indices)
        if psw is not None:
            self.save(psw=psw, psw_weight=weight)
        return output

    def backward(self, g):
        indices, offsets = self.kept("indices"), self.kept("offsets")
        offset2bag, bag_size = self.kept("offset2bag"), self.kept("bag_size")
        max_indices = self.kept("max_indices")
        needs = _needs(self)
        gw = gpsw = None
        if self.has_psw and needs[1]:
            gpsw = self._psw_backward(g, indices, offsets, offset2bag)
        if needs[0]:
            gw = self._weight_backward(g, indices, offsets, offset2bag, bag_size, max_indices)
        return (gw, gpsw) if self.has_psw else (gw,)

    def _rebuilt(self, offsets, offset2bag):
        if self.n != 0 and offset2bag.numel() == 0:
            return _make_offset2bag(offsets, self.n, offset2bag._dtype, self.n_off)
        return offset2bag

    def _psw_backward(self, g, indices, offsets, offset2bag):
        psw_w = self.kept("psw_weight")
        out = kernels.zeros((self.n,), g._dtype, g._device)
        o2b = self._rebuilt(offsets, offset2bag)
        if _live(g._device):
            xp = kernels.xp_of(g)
            idx = indices._data.astype(np.int64, copy=False)
            bags = o2b._data[: self.n].astype(np.int64, copy=False)
            valid = (idx != self.padding_idx) & (bags < self.nb)
            bags = xp.minimum(bags, self.nb - 1)
            dots = (g._data[bags] * psw_w._data[idx]).sum(axis=1)
            out._data[valid] = dots[valid]
        del o2b
        return out

    def _weight_backward(self, g, indices, offsets, offset2bag, bag_size, max_indices):
        dev = g._device
        o2b = self._rebuilt(offsets, offset2bag)
        d = g.shape[1]
        if not g.is_contiguous():
            g = kernels.copy_new(g)
        gw = kernels.zeros((self.num_weights, d), g._dtype, dev)
        if self.mode == 2:
            live = bag_size._data[: self.nb] != 0 if _live(dev) else None
            k = int(live.sum()) if live is not None else self.nb
            nz = kernels.empty((k, 1), dtypes.int64, dev)
            kept_rows = kernels.empty((k, d), max_indices._dtype, dev)
            del nz
            nz = kernels.empty((k, 1), dtypes.int64, dev)
            kept_grad = kernels.empty((k, d), g._dtype, dev)
            del nz
            if _live(dev):
                xp = kernels.xp_of(g)
                kept_rows._data[...] = max_indices._data[: self.nb][live]
                kept_grad._data[...] = g._data[live]
            for j in range(d):  # index_add_ with a strided index clones it, column by column
                column = kernels.empty((k,), max_indices._dtype, dev)
                if _live(dev):
                    xp.add.at(gw._data[:, j], kept_rows._data[:, j], kept_grad._data[:, j])
                del column
            del kept_grad, kept_rows
        else:
            n = self.n
            values = kernels.empty((n,), indices._dtype, dev)
            order = kernels.empty((n,), dtypes.int64, dev)
            arange = kernels.empty((n,), dtypes.int64, dev)
            del arange
            bags_sorted = kernels.empty((n,), o2b._dtype, dev)
            psw = self.kept("psw") if self.has_psw else None
            psw_sorted = kernels.empty((n,), psw._dtype, dev) if psw is not None else None
            if _live(dev):
                xp = kernels.xp_of(g)
                idx = indices._data.astype(np.int64, copy=False)
                bags = o2b._data[:n].astype(np.int64, copy=False)
                # (indices past the last offset of include_last_offset belong to no bag)
                valid = (idx != self.padding_idx) & (bags < self.nb)
                scale = xp.ones(n, dtype=g._data.dtype)
                if psw is not None:
                    scale = scale * psw._data
                if self.mode == 1:
                    sizes = bag_size._data[: self.nb][bags]
                    scale = xp.where(sizes != 0, scale / xp.where(sizes != 0, sizes, 1), scale)
                rows = g._data[bags[valid]] * scale[valid][:, None].astype(g._data.dtype)
                xp.add.at(gw._data, idx[valid], rows)
            del psw_sorted, bags_sorted, values, order
        del o2b
        return gw

    def name(self):
        return "EmbeddingBagBackward0"


def _check_arguments(weight, indices, offsets, mode, psw, include_last_offset):
    ints = (dtypes.int64, dtypes.int32)
    if indices._dtype not in ints or offsets._dtype not in ints:
        # torch promotes both to their common type first, then checks `indices`
        promoted = indices if indices._dtype not in ints else offsets
        raise RuntimeError(
            "Expected tensor for argument #1 'indices' to have one of the following scalar "
            f"types: Long, Int; but got torch.{_type_name(promoted)} instead (while checking "
            "arguments for embedding_bag)"
        )
    if indices._dtype != offsets._dtype:
        raise RuntimeError(
            f"Expected tensor for argument #1 'indices' to have the same type as tensor for "
            f"argument #1 'offsets'; but type {_type_name(indices)} does not equal "
            f"{_type_name(offsets)} (while checking arguments for embedding_bag)"
        )
    if offsets.shape[0] > 0 and _live(offsets._device):
        first, last = int(offsets._data[0]), int(offsets._data[-1])
        if first != 0:
            raise RuntimeError(
                "offsets[0] has to be 0, i.e., the first sequence in the mini-batch has to "
                f"start from position 0. However, got {first}\n"
                f"[ torch.{_type_name(offsets)}{{}} ]"
            )
        if last > indices.shape[0]:
            raise RuntimeError(
                f"offsets[-1] can not be greater than input's length {indices.shape[0]} but "
                f"got offsets[-1] of {last}"
            )
    if include_last_offset and offsets.shape[0] < 1:
        raise RuntimeError("include_last_offset: number of offset should be at least 1")


def _type_name(t):
    return t._dtype.torch_tensor_name


def embedding_bag(
    input,
    weight,
    offsets=None,
    max_norm=None,
    norm_type=2,
    scale_grad_by_freq=False,
    mode="mean",
    sparse=False,
    per_sample_weights=None,
    include_last_offset=False,
    padding_idx=None,
):
    """Sums, means or maxima of bags of rows of `weight` (F.embedding_bag's arguments).

    A 1-D `input` is cut into bags at `offsets`; a 2-D one is a batch of fixed-size bags.
    """
    from engine.creation import arange

    if max_norm is not None or scale_grad_by_freq or sparse:
        raise NotImplementedError(
            "embedding_bag: max_norm, scale_grad_by_freq and sparse are not supported "
            "(supported: mode sum/mean/max, offsets, include_last_offset, "
            "per_sample_weights, padding_idx)"
        )
    if per_sample_weights is not None and tuple(input.shape) != tuple(per_sample_weights.shape):
        raise ValueError(
            f"embedding_bag: If per_sample_weights ({_size(per_sample_weights)}) is not None, "
            f"then it must have the same shape as the input ({_size(input)})"
        )
    if weight.ndim != 2:
        raise ValueError(f"weight has to be a 2D Tensor, but got Tensor of dimension {weight.ndim}")
    if input.ndim == 2:
        if offsets is not None:
            raise ValueError(
                "if input is 2D, then offsets has to be None, as input is treated is a "
                "mini-batch of fixed length sequences. However, found offsets of type "
                f"{type(offsets)}"
            )
        offsets = arange(0, input.numel(), input.shape[1], dtype=input.dtype, device=input.device)
        include_last_offset = False
        input = input.reshape(-1)
        if per_sample_weights is not None:
            per_sample_weights = per_sample_weights.reshape(-1)
    elif input.ndim == 1:
        if offsets is None:
            raise ValueError("offsets has to be a 1D Tensor but got None")
        if offsets.ndim != 1:
            raise ValueError("offsets has to be a 1D Tensor")
    else:
        raise ValueError(
            f"input has to be 1D or 2D Tensor, but got Tensor of dimension {input.ndim}"
        )
    if mode not in MODES:
        raise ValueError("mode has to be one of sum, mean or max")
    if per_sample_weights is not None and mode != "sum":
        raise NotImplementedError(
            "embedding_bag: per_sample_weights was not None. per_sample_weights is only "
            f"supported for mode='sum' (got mode='{mode}'). Please open a feature request on "
            "GitHub."
        )
    pad = -1
    if padding_idx is not None:
        v = weight.shape[0]
        if not -v <= padding_idx < v:
            raise RuntimeError(
                f"padding_idx must be within the number of embeddings, -{v} through {v - 1}, "
                f"but got {padding_idx}"
            )
        pad = padding_idx + v if padding_idx < 0 else padding_idx
    args = (weight,) if per_sample_weights is None else (weight, per_sample_weights)
    if not input.is_contiguous():
        input = input.contiguous()
    if not offsets.is_contiguous():
        offsets = offsets.contiguous()
    return _apply(args, input, offsets, MODES[mode], include_last_offset, pad)


def _apply(args, indices, offsets, mode, include_last_offset, pad):
    weight = args[0]
    node_args = dict(
        op="embedding_bag",
        indices=indices,
        offsets=offsets,
        mode=mode,
        include_last_offset=bool(include_last_offset),
        padding_idx=pad,
        requires_grad=weight.requires_grad,
    )
    return EmbeddingBag.apply(*args, **node_args)


def _size(t):
    return "torch.Size([" + ", ".join(str(s) for s in t.shape) + "])"
