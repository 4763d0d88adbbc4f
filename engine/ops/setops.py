"""unique and unique_consecutive: the distinct values (sorted; for unique_consecutive, each run
of equal neighbours once), with the inverse indices and counts on request; along a dim, the
distinct slices.

The result's size comes from the values, so meta refuses. On cpu the blocks are torch's CPU
kernel's: unique over the flattened input sorts a copy of the values with an int64 index array
(and a transient int64 buffer), then makes the output, the inverse and the counts (with an
int64 offsets array); the copies and offsets go when it returns. unique_consecutive sizes its
output (and counts) for every element and keeps that storage under the shorter result, as
torch's resize_ does. No gradient: torch has none (Unique2Backward0 and
UniqueConsecutiveBackward0 raise).
"""

from __future__ import annotations

import numpy as np

from engine import dtypes, kernels
from engine.autograd.function import Function, specialised_apply
from engine.ops.mathops import NotDifferentiable
from engine.ops.registry import register
from engine.tensor import Tensor, _wrap_dim


def _need_values(t: Tensor, opname: str) -> None:
    if t._device.type == "meta":
        raise NotImplementedError(
            f"{opname}: the result's size depends on the values, which a meta tensor does not have"
        )


_host = kernels.host


def _within(storage_of: Tensor, arr, dtype, device) -> Tensor:
    """A tensor of `arr`'s values in the front of storage_of's storage (torch's resize_ to a
    smaller size keeps the storage)."""
    k = arr.shape[0] if arr.ndim else 1
    data = storage_of._data.reshape(-1)[:k].reshape(arr.shape)
    data[...] = arr
    return Tensor._make(data, storage_of._storage, dtype, device)


class Unique(NotDifferentiable, Function):
    """unique(sorted, return_inverse, return_counts, dim) / unique_consecutive."""

    apply = specialised_apply(1)
    num_outputs = 3

    def forward(
        self, x, out=None, return_inverse=False, return_counts=False, dim=None, consecutive=False
    ):
        self.consecutive = consecutive
        opname = "unique_consecutive" if consecutive else "unique"
        self.error = NotImplementedError
        self.message = (
            "the derivative for 'unique_consecutive' is not implemented."
            if consecutive
            else "the derivative for '_unique2' is not implemented."
        )
        _need_values(x, opname)
        xp = kernels.xp_of(x)
        a = _host(x._data)
        dev = x._device
        if dim is not None:
            return self._along(x, a, _wrap_dim(dim, max(x.ndim, 1)), return_inverse, return_counts)
        flat = a.reshape(-1)
        n = flat.size
        if consecutive:
            if n:
                starts = np.concatenate(([True], flat[1:] != flat[:-1]))
            else:
                starts = np.zeros(0, bool)
            vals = flat[starts]
            out = kernels.empty((n,), x._dtype, dev)
            values = _within(out, xp.asarray(vals), x._dtype, dev)
            inverse = kernels.empty(x.shape if return_inverse else (0,), dtypes.int64, dev)
            if return_inverse:
                inverse._data[...] = xp.asarray((np.cumsum(starts) - 1).reshape(a.shape))
            counts = kernels.empty((n if return_counts else 0,), dtypes.int64, dev)
            if return_counts:
                bounds = np.flatnonzero(np.concatenate((starts, [True])))
                counts = _within(counts, xp.asarray(np.diff(bounds)), dtypes.int64, dev)
            return values, inverse, counts
        # the sort-based kernel: a copy of the values, their order (and a transient)
        work_vals = kernels.empty((n,), x._dtype, dev)
        work_idx = kernels.empty((n,), dtypes.int64, dev)
        kernels.empty((n,), dtypes.int64, dev)  # transient, freed at once
        if x._dtype is dtypes.bool_:
            uniq, inv, cnt = np.unique(flat, return_inverse=True, return_counts=True)
        else:
            uniq, inv, cnt = np.unique(
                flat, return_inverse=True, return_counts=True, equal_nan=False
            )
        values = kernels.empty(uniq.shape, x._dtype, dev)
        values._data[...] = xp.asarray(uniq)
        inverse = kernels.empty(x.shape if return_inverse else (0,), dtypes.int64, dev)
        if return_inverse:
            inverse._data[...] = xp.asarray(inv.reshape(a.shape))
        counts = kernels.empty((uniq.size if return_counts else 0,), dtypes.int64, dev)
        offsets = kernels.empty((uniq.size + 1,), dtypes.int64, dev) if return_counts else None
        if return_counts:
            counts._data[...] = xp.asarray(cnt)
        del work_vals, work_idx, offsets
        return values, inverse, counts

    def _along(self, x, a, d, return_inverse, return_counts):
        """Distinct slices along d (sorted lexicographically for unique)."""
        xp = kernels.xp_of(x)
        dev = x._device
        moved = np.moveaxis(a, d, 0)
        rows = moved.reshape(moved.shape[0], -1)
        n = rows.shape[0]
        if self.consecutive:
            if n:
                starts = np.concatenate(([True], (rows[1:] != rows[:-1]).any(axis=1)))
            else:
                starts = np.zeros(0, bool)
            keep = rows[starts]
            inv = np.cumsum(starts) - 1
            bounds = np.flatnonzero(np.concatenate((starts, [True])))
            cnt = np.diff(bounds)
        else:
            keep, inv, cnt = np.unique(rows, axis=0, return_inverse=True, return_counts=True)
            inv = inv.reshape(-1)
        shape = (keep.shape[0],) + moved.shape[1:]
        vals = np.moveaxis(keep.reshape(shape), 0, d)
        values = kernels.empty(vals.shape, x._dtype, dev)
        values._data[...] = xp.asarray(vals)
        inverse = kernels.empty((n,) if return_inverse else (0,), dtypes.int64, dev)
        if return_inverse:
            inverse._data[...] = xp.asarray(inv)
        counts = kernels.empty((keep.shape[0],) if return_counts else (0,), dtypes.int64, dev)
        if return_counts:
            counts._data[...] = xp.asarray(cnt)
        return values, inverse, counts

    def name(self):
        return "UniqueConsecutiveBackward0" if self.consecutive else "Unique2Backward0"


def _pick(result, return_inverse, return_counts):
    values, inverse, counts = result
    if not return_inverse and not return_counts:
        return values
    out = (values,)
    if return_inverse:
        out += (inverse,)
    if return_counts:
        out += (counts,)
    return out


def unique(input, sorted=True, return_inverse=False, return_counts=False, dim=None):  # noqa: A002
    """The distinct values, sorted (as torch's CPU kernel, whatever `sorted` says); with the
    index of each element's value (return_inverse) and how often each occurs (return_counts);
    along dim: the distinct slices."""
    result = Unique.apply(
        input, op="unique", return_inverse=return_inverse, return_counts=return_counts, dim=dim
    )
    return _pick(result, return_inverse, return_counts)


def unique_consecutive(input, return_inverse=False, return_counts=False, dim=None):
    """Each run of equal neighbours once (along dim: of equal slices)."""
    result = Unique.apply(
        input,
        op="unique_consecutive",
        return_inverse=return_inverse,
        return_counts=return_counts,
        dim=dim,
        consecutive=True,
    )
    return _pick(result, return_inverse, return_counts)


register("unique", unique, method=True)
register("unique_consecutive", unique_consecutive, method=True)
