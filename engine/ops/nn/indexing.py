"""Indexing: gather, index_select, embedding."""

from __future__ import annotations

import numpy as np

from engine import dtypes, kernels
from engine.autograd.function import Function
from engine.ops.common import result_buffer
from engine.ops.nn.common import _live, _reshaped
from engine.tensor import Tensor


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
    """Rows of `weight` picked by the integer tensor `input` (F.embedding's argument order);
    with max_norm, those rows are first renormalised in place (embedding_renorm_)."""
    if scale_grad_by_freq or sparse:
        raise NotImplementedError("embedding: scale_grad_by_freq and sparse are not supported")
    if padding_idx is not None and padding_idx < 0:
        padding_idx += weight.shape[0]
    if max_norm is not None:
        embedding_renorm_(weight, input, max_norm, norm_type)
    return Embedding.apply(weight, input, op="embedding", padding_idx=padding_idx)


def embedding_renorm_(weight, input, max_norm, norm_type=2.0):
    """torch.embedding_renorm_, without grad: each row of `weight` that `input` picks, once and
    in increasing order, scaled in place by max_norm / (norm + 1e-7) where its norm passes
    max_norm; a 0-d norm made and freed per row (torch's cpu kernel makes a few 4- and 8-byte
    scalars per row: the norm and its copies for item()); weight's version goes up once, as
    after any in-place op. Nothing on meta (no values)."""
    from engine.autograd.grad_mode import no_grad

    _check_index(input, "embedding_renorm_")
    if not _live(weight._device):
        return weight
    rows = np.unique(kernels.host(input._data)) if input.numel() else ()
    with no_grad():
        for i in rows:
            row = weight[int(i)]
            norm = float(row.norm(norm_type))
            if norm > max_norm:
                row._data *= max_norm / (norm + 1e-7)
    weight._storage.version += 1  # one in-place op: one version, changed rows or not
    return weight
