"""Order statistics and NaN-aware reductions: nansum, nanmean, median / nanmedian (whole and
along a dim), kthvalue, mode.

The selecting ops pick the element torch's CPU kernel picks, ties included: median, nanmedian
and kthvalue run torch's quick_select_template (median-of-three introselect over (value, index)
pairs, NaN the largest) on each row, so the index returned among equal values is torch's; mode
takes the smallest of the most frequent values and the last index where it occurs. Their
gradient goes to that index (value_selecting_reduction_backward), or, for the whole median,
is shared evenly among the elements equal to it (evenly_distribute_backward).

Memory as torch's CPU kernels: median along a dim works on a copy with that dim innermost when
the input is not already laid out so, kthvalue on a contiguous copy of the values and an int64
index array, the whole median on a flat copy; nansum's backward multiplies by a float copy of
its not-NaN mask (TensorIterator's input cast), the whole median's backward counts its mask on
an int64 copy.
"""

from __future__ import annotations

from collections import namedtuple

import numpy as np

from engine import dtypes, kernels
from engine.autograd.function import Function, specialised_apply
from engine.ops.common import cast_copy
from engine.ops.cumulative import count_true, int64_copy
from engine.ops.reduce import _expand_back, norm_dims, reduced_shape, scatter_back
from engine.ops.registry import Dims, Scenario, register
from engine.tensor import Tensor, _wrap_dim

ValuesIndices = namedtuple("ValuesIndices", ["values", "indices"])


_host = kernels.host


# ---------------------------------------------------------------------------------------------
# nansum / nanmean
# ---------------------------------------------------------------------------------------------
class Nansum(Function):
    """sum treating NaN as zero; integer and bool inputs sum in int64. Backward:
    sum_backward(grad) * self.isnan().logical_not()."""

    apply = specialised_apply(1)  # one tensor argument

    retain_inputs = (0,)

    def forward(self, x, out=None, dim=None, keepdim=False, dtype=None):
        dims = norm_dims(dim, x.ndim)
        self.in_shape, self.dims, self.keepdim = x.shape, dims, keepdim
        if dtype is not None:
            rdt = dtypes.from_any(dtype)
        else:
            rdt = x._dtype if x._dtype.is_floating_point else dtypes.int64
        y = kernels.empty(reduced_shape(x.shape, dims, keepdim), rdt, x._device)
        if out is not None:
            raise NotImplementedError("nansum: out= is not supported")
        if x._device.type != "meta":
            xp = kernels.xp_of(x)
            xd, copy = cast_copy(x, rdt)  # (another dtype on cpu: torch's temporary copy)
            if x._dtype.is_floating_point:
                xd = xp.where(xp.isnan(xd), 0, xd)
            y._data[...] = xp.sum(xd, axis=dims, keepdims=keepdim, dtype=rdt.np)
            del copy
            if rdt.emulated:
                dtypes.round_to_bfloat16_(y._data)
        return y

    def backward(self, g):
        (x,) = self.saved_tensors
        if g._dtype is not x._dtype:  # nansum_backward(grad.to(self.scalar_type()), ...)
            g = g.to(x._dtype)
        expanded = _expand_back(g, self.in_shape, self.dims, self.keepdim)
        isnan = x.isnan()
        keep = isnan.logical_not()
        as_float = keep.to(g._dtype)  # TensorIterator's cast of the bool operand
        gx = expanded * as_float
        del as_float, keep, isnan
        return (gx,)

    def name(self):
        return "NansumBackward0"


def nansum(input, dim=None, keepdim=False, *, dtype=None, out=None):
    """Sum of the elements, NaN counted as zero."""
    if input._dtype.is_complex if hasattr(input._dtype, "is_complex") else False:
        raise RuntimeError("nansum does not support complex inputs")
    return Nansum.apply(input, out=out, op="nansum", dim=dim, keepdim=keepdim, dtype=dtype)


def nanmean(input, dim=None, keepdim=False, *, dtype=None, out=None):
    """torch's composite: nansum(input) / (number of non-NaN elements)."""
    if not input._dtype.is_floating_point:
        raise RuntimeError(
            "nanmean(): expected input to have floating point or complex dtype but got "
            f"{input._dtype.scalar_name}"
        )
    if out is not None:
        raise NotImplementedError("nanmean: out= is not supported")
    not_nan = input.isnan()
    if not_nan._device.type != "meta":
        np.logical_not(not_nan._data, out=not_nan._data) if isinstance(
            not_nan._data, np.ndarray
        ) else kernels.xp_of(not_nan).logical_not(not_nan._data, out=not_nan._data)
    factor = count_true(not_nan, dim, keepdim)
    del not_nan
    return DivByCount.apply(nansum(input, dim, keepdim, dtype=dtype), factor, op="div")


class DivByCount(Function):
    """A float tensor divided by an int64 one, as torch's CPU div runs it (TensorIterator casts
    the int64 operand to a float copy first, made before the result and freed after it, forward
    and backward): nanmean's last step. Only the float operand has a gradient."""

    apply = specialised_apply(2)

    def to_save(self, tensors):
        return (1,)

    def forward(self, a, count, out=None):
        cast = count.to(a._dtype)
        y = kernels.empty(a.shape, a._dtype, a._device)
        if a._device.type != "meta":
            kernels.xp_of(a).divide(a._data, cast._data, out=y._data)
        del cast
        return y

    def backward(self, g, *_):
        (count,) = self.saved_tensors
        cast = count.to(g._dtype)
        gx = kernels.empty(g.shape, g._dtype, g._device)
        if g._device.type != "meta":
            kernels.xp_of(g).divide(g._data, cast._data, out=gx._data)
        del cast
        return (gx, None)

    def name(self):
        return "DivBackward0"


# ---------------------------------------------------------------------------------------------
# selection: torch's quick_select_template
# ---------------------------------------------------------------------------------------------
def _gt_or_nan(x, y) -> bool:
    return (x != x and y == y) or x > y


def _quick_select(vals: list, idx: list, k: int) -> None:
    """Partially order vals (and idx with it) so that vals[k] is the k-th smallest, NaN the
    largest: torch's quick_select_template, step for step (so ties land where torch's do)."""

    def swap(a, b):
        vals[a], vals[b] = vals[b], vals[a]
        idx[a], idx[b] = idx[b], idx[a]

    gt = _gt_or_nan
    lo, hi = 0, len(vals) - 1
    while True:
        if hi <= lo:
            return
        if hi == lo + 1:
            if gt(vals[lo], vals[hi]):
                swap(lo, hi)
            return
        p = lo + (hi - lo) // 2
        swap(p, lo + 1)
        if gt(vals[lo + 1], vals[hi]):
            swap(lo + 1, hi)
        if gt(vals[lo], vals[hi]):
            swap(lo, hi)
        if gt(vals[lo + 1], vals[lo]):
            swap(lo + 1, lo)
        i, j = lo + 1, hi
        piv = vals[lo]
        while True:
            i += 1
            while gt(piv, vals[i]):
                i += 1
            j -= 1
            while gt(vals[j], piv):
                j -= 1
            if j < i:
                break
            swap(i, j)
        swap(lo, j)
        if j <= k:
            lo = i
        if j >= k:
            hi = j - 1


def _select_rows(rows: np.ndarray, kind: str, k: int | None = None):
    """(values, indices) per row of a 2-D array: kind 'median', 'nanmedian' or 'kth' (k 0-based).

    median and nanmedian order the row by (value, index) (torch's nth_element comparator breaks
    ties by index), NaN last: the k-th of a stable sort. median returns a row's first NaN when
    it has one. kthvalue runs torch's quick_select_template."""
    n_rows, n = rows.shape
    vals = np.empty(n_rows, rows.dtype)
    idxs = np.empty(n_rows, np.int64)
    if kind == "kth":
        for r in range(n_rows):
            row, idx = rows[r].tolist(), list(range(n))
            _quick_select(row, idx, k)
            vals[r], idxs[r] = row[k], idx[k]
        return vals, idxs
    order = np.argsort(rows, axis=1, kind="stable")
    nans = np.isnan(rows) if rows.dtype.kind == "f" else np.zeros(rows.shape, bool)
    size = n - nans.sum(axis=1) if kind == "nanmedian" else np.full(n_rows, n)
    at = np.maximum(size - 1, 0) // 2  # C's (size - 1) / 2: 0 for a row of NaN only
    idxs[...] = np.take_along_axis(order, at[:, None], 1)[:, 0]
    if kind == "median":
        has_nan = nans.any(axis=1)
        idxs[has_nan] = nans[has_nan].argmax(axis=1)
    elif n:
        idxs[size == 0] = _all_nan_median_index(n)
    vals[...] = np.take_along_axis(rows, idxs[:, None], 1)[:, 0]
    return vals, idxs


def _moved_rows(x: Tensor, d: int):
    """The input with dim d innermost, as 2-D rows (a view when numpy can give one)."""
    moved = np.moveaxis(x._data, d, -1)
    return moved.reshape(-1, moved.shape[-1]), moved.shape[:-1]


class SelectDim(Function):
    """median / nanmedian / kthvalue along one dim: (values, indices); the gradient goes to the
    index (value_selecting_reduction_backward)."""

    apply = specialised_apply(1)  # one tensor argument

    num_outputs = 2

    def forward(self, x, out=None, dim=-1, keepdim=False, kind="median", k=None):
        opname = {"median": "median", "nanmedian": "nanmedian", "kth": "kthvalue"}[kind]
        d = _wrap_dim(dim, max(x.ndim, 1))
        length = x.shape[d] if x.ndim else 1
        if x._dtype is dtypes.bool_:
            raise NotImplementedError(
                "\"kthvalue_cpu\" not implemented for 'Bool'"
                if kind == "kth"
                else "\"median_out\" not implemented for 'Bool'"
            )
        if kind == "kth" and length and not 1 <= k <= length:
            raise RuntimeError(f"kthvalue(): selected number k out of range for dimension {d}")
        if not length:
            raise IndexError(f"{opname}(): Expected reduction dim {d} to have non-zero size.")
        self.in_shape, self.dim, self.keepdim, self.kind = x.shape, d, keepdim, kind
        shape = reduced_shape(x.shape, (d,), keepdim) if x.ndim else ()
        vals = kernels.empty(shape, x._dtype, x._device)
        idx = kernels.empty(shape, dtypes.int64, x._device)
        # the kernel's working copies
        if kind == "kth":
            work = (
                kernels.empty(x.shape, x._dtype, x._device),
                kernels.empty(x.shape, dtypes.int64, x._device),
            )
        elif x.ndim and not _innermost_contiguous(x, d):
            work = (kernels.empty(x.shape, x._dtype, x._device),)
            if _blocked_transpose(x, d):  # torch's transpose copy: a 60 x 60 block buffer
                kernels.empty((60, 60), x._dtype, x._device)
        else:
            work = ()
        if x._device.type != "meta":
            src = x._data.reshape(1) if not x.ndim else x._data
            rows, lead = _moved_rows(x if x.ndim else _flat(x), d if x.ndim else 0)
            v, i = _select_rows(np.asarray(_host(rows)), kind, None if k is None else k - 1)
            xp = kernels.xp_of(x)
            full = tuple(lead) + (1,)
            vk, ik = v.reshape(full), i.reshape(full)
            vk = np.moveaxis(vk, -1, d if x.ndim else 0)
            ik = np.moveaxis(ik, -1, d if x.ndim else 0)
            vals._data[...] = xp.asarray(vk.reshape(shape))
            idx._data[...] = xp.asarray(ik.reshape(shape))
            del src
        del work
        self.save(indices=idx)
        return ValuesIndices(vals, idx)

    def backward(self, g, g_idx=None):
        if not len(self.in_shape):
            return (g,)
        return (scatter_back(g, self.kept("indices"), self.in_shape, self.dim, self.keepdim),)

    def name(self):
        return {"median": "MedianBackward1", "nanmedian": "NanmedianBackward1"}.get(
            self.kind, "KthvalueBackward0"
        )


def _flat(x: Tensor) -> Tensor:
    return x.reshape(1)


def _blocked_transpose(x: Tensor, d: int) -> bool:
    """Whether torch's copy of x with dim d moved last is its 2-D transposed copy kernel
    (copy_same_type_transpose_: a transposed 2-D source of 3600 elements or more), which
    allocates a 60 x 60 block buffer for the copy and frees it."""
    if x.ndim != 2 or d != 0 or x.numel() < 3600:
        return False
    if x._device.type == "meta":
        return True
    moved = np.moveaxis(x._data, 0, -1)
    return (
        moved.strides[0] == x._data.itemsize
        and moved.strides[1] == moved.shape[0] * x._data.itemsize
    )


def _innermost_contiguous(x: Tensor, d: int) -> bool:
    """Whether x with dim d moved last is contiguous (torch's kernel then reads it in place)."""
    if x._device.type == "meta":
        return d == x.ndim - 1
    return np.moveaxis(x._data, d, -1).flags.c_contiguous


class MedianAll(Function):
    """median / nanmedian of every element (the lower of the two middle values). Backward:
    evenly_distribute_backward, the gradient shared among the elements equal to the result."""

    apply = specialised_apply(1)  # one tensor argument

    retain_inputs = (0,)
    retain_output = True

    def forward(self, x, out=None, ignore_nan=False):
        self.ignore_nan = ignore_nan
        if x._dtype is dtypes.bool_:
            raise NotImplementedError("\"median_cpu\" not implemented for 'Bool'")
        y = kernels.empty((), x._dtype, x._device)
        if not x.numel():
            if x._device.type != "meta":
                y._data[...] = np.nan
            return y
        work = kernels.empty((x.numel(),), x._dtype, x._device)  # the kernel's flat copy
        if x._device.type != "meta":
            xp = kernels.xp_of(x)
            flat = xp.ravel(x._data)
            isfloat = flat.dtype.kind == "f"
            if isfloat and not ignore_nan and bool(xp.isnan(flat).any()):
                y._data[...] = np.nan
            else:
                keep = flat[~xp.isnan(flat)] if isfloat else flat
                if not keep.size:
                    y._data[...] = np.nan
                else:
                    y._data[...] = xp.partition(keep, (keep.size - 1) // 2)[(keep.size - 1) // 2]
        del work
        return y

    def backward(self, g):
        x, y = self.saved_tensors
        if y._device.type != "meta" and bool(np.isnan(_host(y._data))):
            mask = x.isnan()
        else:
            mask = x == y
        gx = kernels.zeros(x.shape, g._dtype, g._device)
        copy = int64_copy(mask)  # mask.sum(): its int64 copy
        count = int(mask._data.sum()) if mask._device.type != "meta" else 1
        del copy
        if g._device.type != "meta":
            gx._data[mask._data] = g._data / count
        del mask
        return (gx,)

    def name(self):
        return "NanmedianBackward0" if self.ignore_nan else "MedianBackward0"


def _median(input, dim, keepdim, kind):
    if dim is None:
        return MedianAll.apply(input, op=kind, ignore_nan=kind == "nanmedian")
    return SelectDim.apply(input, op=kind, dim=dim, keepdim=keepdim, kind=kind)


def median(input, dim=None, keepdim=False):
    """The median (the lower middle value) of every element, or (values, indices) along dim."""
    return _median(input, dim, keepdim, "median")


def nanmedian(input, dim=None, keepdim=False):
    """median ignoring NaN (NaN only where a row is all NaN)."""
    return _median(input, dim, keepdim, "nanmedian")


def kthvalue(input, k, dim=-1, keepdim=False):
    """(values, indices) of the k-th smallest element along dim (k from 1)."""
    return SelectDim.apply(input, op="kthvalue", dim=dim, keepdim=keepdim, kind="kth", k=k)


# ---------------------------------------------------------------------------------------------
# quantile / nanquantile: torch's quantile_compute, op for op
# ---------------------------------------------------------------------------------------------
_INTERPOLATIONS = ("linear", "lower", "higher", "midpoint", "nearest")


def _quantile(input, q, dim, keepdim, interpolation, ignore_nan):
    """Sort (the reduced dim moved last), ranks = q * (n - 1) (NaN rows: the last rank for
    quantile; for nanquantile ranks over the non-NaN count), gather below (and above, then
    lerp_ in place), squeeze_: torch's nodes (SortBackward0, ViewBackward0, GatherBackward0,
    LerpBackward1, SqueezeBackward4 ...)."""
    from engine import creation

    if not input._dtype.is_floating_point or input._dtype.itemsize < 4 or input._dtype.emulated:
        raise RuntimeError("quantile() input tensor must be either float or double dtype")
    if not isinstance(q, Tensor):
        q = float(q)
        if not 0 <= q <= 1:
            raise RuntimeError(f"quantile() q must be in the range [0, 1] but got {q}")
        q = creation.tensor(q, dtype=input._dtype, device=input._device)
    if q.ndim > 1:
        raise RuntimeError("quantile() q must be a scalar or 1D tensor")
    if q._dtype is not input._dtype:
        raise RuntimeError("quantile() q tensor must be same dtype as the input tensor")
    if not input.numel():
        raise RuntimeError("quantile() input tensor must be non-empty")
    if interpolation not in _INTERPOLATIONS:
        raise RuntimeError(
            "quantile() interpolation must be one of linear, lower, higher, midpoint or "
            f"nearest, but got {interpolation}"
        )
    wrapped = _wrap_dim(0 if dim is None else dim, max(input.ndim, 1))
    if dim is not None and input.ndim > 0:
        out_shape = list(input.shape)
        if keepdim:
            out_shape[wrapped] = 1
        else:
            del out_shape[wrapped]
    else:
        out_shape = [1] * input.ndim if keepdim else []
    if q.ndim > 0:
        out_shape.insert(0, q.numel())
    if q._device.type != "meta":
        qd = q._data
        if not bool(((qd >= 0) & (qd <= 1)).all()):
            raise RuntimeError("quantile() q values must be in the range [0, 1]")
    if dim is None:
        sorted_ = input.flatten().sort()[0]
    elif wrapped == input.ndim - 1:
        sorted_ = input.sort()[0]
    else:
        sorted_ = input.unsqueeze(-1).transpose(wrapped, -1).sort()[0]
    if q.ndim == 0:
        out_shape.insert(0, q.numel())
    in_shape = out_shape[1:] + [sorted_.shape[-1]]
    sorted_ = sorted_.view(*in_shape)
    if ignore_nan:
        valid = sorted_.isnan()
        if valid._device.type != "meta":
            kernels.xp_of(valid).logical_not(valid._data, out=valid._data)
        ranks = q * (valid.sum(-1, True) - 1)
        del valid
        ranks.masked_fill_(ranks < 0, 0)
    else:
        last_index = sorted_.shape[-1] - 1
        from engine.ops import broadcast_tensors

        tl = broadcast_tensors(q * last_index, sorted_.isnan().any(-1, True))
        ranks = tl[0].masked_fill(tl[1], last_index)
        del tl
    if interpolation == "lower":
        ranks.floor_()
    elif interpolation == "higher":
        ranks.ceil_()
    elif interpolation == "nearest":
        ranks.round_()
    ranks_below = ranks.to(dtypes.int64)
    values_below = sorted_.gather(-1, ranks_below)
    if interpolation in ("linear", "midpoint"):
        if interpolation == "midpoint":
            weights = creation.full_like(ranks, 0.5)
        else:
            weights = ranks - ranks_below
        ranks_above = ranks.ceil_().to(dtypes.int64)
        values_above = sorted_.gather(-1, ranks_above)
        values_below.lerp_(values_above, weights)
        del values_above, ranks_above, weights
    if q.ndim == 0:
        values_below.squeeze_(-1)
    else:
        values_below.unsqueeze_(0).transpose_(0, -1).squeeze_(-1)
    return values_below


def quantile(input, q, dim=None, keepdim=False, *, interpolation="linear", out=None):
    """The q-th quantiles (q a number or a 1-D tensor in [0, 1]) of every element or along dim;
    interpolation between the two nearest ranks: linear, lower, higher, midpoint or nearest.
    A NaN in a reduced slice makes its quantile NaN."""
    if out is not None:
        raise NotImplementedError("quantile: out= is not supported")
    return _quantile(input, q, dim, keepdim, interpolation, False)


def nanquantile(input, q, dim=None, keepdim=False, *, interpolation="linear", out=None):
    """quantile ignoring NaN (NaN only where a slice is all NaN)."""
    if out is not None:
        raise NotImplementedError("nanquantile: out= is not supported")
    return _quantile(input, q, dim, keepdim, interpolation, True)


# ---------------------------------------------------------------------------------------------
# mode
# ---------------------------------------------------------------------------------------------
def _stl(a: list, less):
    """libstdc++'s sorting building blocks over the list `a` with the comparator `less`, step
    for step (introsort / introselect: median-of-three quicksort partitions, heapsort past the
    depth limit, insertion sort for short runs): where `less` leaves elements equivalent, they
    end up where libstdc++ leaves them."""

    def move_median_to_first(result, i, j, k):
        if less(a[i], a[j]):
            if less(a[j], a[k]):
                pick = j
            elif less(a[i], a[k]):
                pick = k
            else:
                pick = i
        elif less(a[i], a[k]):
            pick = i
        elif less(a[j], a[k]):
            pick = k
        else:
            pick = j
        a[result], a[pick] = a[pick], a[result]

    def unguarded_partition(first, last, pivot):
        while True:
            while less(a[first], a[pivot]):
                first += 1
            last -= 1
            while less(a[pivot], a[last]):
                last -= 1
            if not first < last:
                return first
            a[first], a[last] = a[last], a[first]
            first += 1

    def partition_pivot(first, last):
        mid = first + (last - first) // 2
        move_median_to_first(first, first + 1, mid, last - 1)
        return unguarded_partition(first + 1, last, first)

    def adjust_heap(first, hole, length, value):
        top = hole
        child = hole
        while child < (length - 1) // 2:
            child = 2 * (child + 1)
            if less(a[first + child], a[first + child - 1]):
                child -= 1
            a[first + hole] = a[first + child]
            hole = child
        if length % 2 == 0 and child == (length - 2) // 2:
            child = 2 * (child + 1)
            a[first + hole] = a[first + child - 1]
            hole = child - 1
        parent = (hole - 1) // 2
        while hole > top and less(a[first + parent], value):
            a[first + hole] = a[first + parent]
            hole = parent
            parent = (hole - 1) // 2
        a[first + hole] = value

    def make_heap(first, last):
        length = last - first
        if length < 2:
            return
        parent = (length - 2) // 2
        while True:
            adjust_heap(first, parent, length, a[first + parent])
            if parent == 0:
                return
            parent -= 1

    def pop_heap(first, last, result):
        value = a[result]
        a[result] = a[first]
        adjust_heap(first, 0, last - first, value)

    def heap_select(first, middle, last):
        make_heap(first, middle)
        for i in range(middle, last):
            if less(a[i], a[first]):
                pop_heap(first, middle, i)

    def sort_heap(first, last):
        while last - first > 1:
            last -= 1
            pop_heap(first, last, last)

    def linear_insert(i):
        value = a[i]
        j = i - 1
        while less(value, a[j]):
            a[i] = a[j]
            i, j = j, j - 1
        a[i] = value

    def insertion_sort(first, last):
        for i in range(first + 1, last):
            if less(a[i], a[first]):
                value = a[i]
                a[first + 1 : i + 1] = a[first:i]
                a[first] = value
            else:
                linear_insert(i)

    def introsort_loop(first, last, depth):
        while last - first > 16:
            if depth == 0:
                heap_select(first, last, last)
                sort_heap(first, last)
                return
            depth -= 1
            cut = partition_pivot(first, last)
            introsort_loop(cut, last, depth)
            last = cut

    def sort():
        n = len(a)
        if n < 2:
            return
        introsort_loop(0, n, 2 * (n.bit_length() - 1))
        if n > 16:
            insertion_sort(0, 16)
            for i in range(16, n):
                linear_insert(i)
        else:
            insertion_sort(0, n)

    def nth_element(nth):
        first, last = 0, len(a)
        if first == last or nth == last:
            return
        depth = 2 * (len(a).bit_length() - 1)
        while last - first > 3:
            if depth == 0:
                heap_select(first, nth + 1, last)
                a[first], a[nth] = a[nth], a[first]
                return
            depth -= 1
            cut = partition_pivot(first, last)
            if cut <= nth:
                first = cut
            else:
                last = cut
        insertion_sort(first, last)

    return sort, nth_element


def _std_sort(a: list) -> None:
    """Sort (value, index) pairs by value alone, as torch's CPU mode kernel's std::sort."""
    sort, _ = _stl(a, lambda x, y: x[0] < y[0])
    sort()


def _all_nan_median_index(n: int) -> int:
    """nanmedian's index in a row of NaN only: torch's std::nth_element at position 0 over
    indices its comparator finds all equivalent."""
    idx = list(range(n))
    _, nth_element = _stl(idx, lambda i, j: False)
    nth_element(0)
    return idx[0]


class Mode(Function):
    """mode(dim, keepdim): (values, indices): the smallest of the most frequent values and the
    last index it occurs at, as torch's CPU kernel."""

    apply = specialised_apply(1)  # one tensor argument

    num_outputs = 2

    def forward(self, x, out=None, dim=-1, keepdim=False):
        d = _wrap_dim(dim, max(x.ndim, 1))
        length = x.shape[d] if x.ndim else 1
        if not length:
            raise IndexError(f"mode(): Expected reduction dim {d} to have non-zero size.")
        self.in_shape, self.dim, self.keepdim = x.shape, d, keepdim
        shape = reduced_shape(x.shape, (d,), keepdim) if x.ndim else ()
        vals = kernels.empty(shape, x._dtype, x._device)
        idx = kernels.empty(shape, dtypes.int64, x._device)
        if x._device.type != "meta":
            xp = kernels.xp_of(x)
            rows, lead = _moved_rows(x if x.ndim else _flat(x), d if x.ndim else 0)
            rows = np.asarray(_host(rows))
            n = rows.shape[1]
            v = np.empty(rows.shape[0], rows.dtype)
            i = np.empty(rows.shape[0], np.int64)
            for r in range(rows.shape[0]):
                pairs = list(zip(rows[r].tolist(), range(n), strict=True))
                _std_sort(pairs)
                v[r], i[r], best, run = pairs[0][0], pairs[0][1], 0, 0
                for j in range(n):  # the kernel's scan: a longer run replaces the mode
                    run += 1
                    if j == n - 1 or pairs[j][0] != pairs[j + 1][0]:
                        if run > best:
                            v[r], i[r], best = pairs[j][0], pairs[j][1], run
                        run = 0
            full = tuple(lead) + (1,)
            at = d if x.ndim else 0
            vals._data[...] = xp.asarray(np.moveaxis(v.reshape(full), -1, at).reshape(shape))
            idx._data[...] = xp.asarray(np.moveaxis(i.reshape(full), -1, at).reshape(shape))
        self.save(indices=idx)
        return ValuesIndices(vals, idx)

    def backward(self, g, g_idx=None):
        if not len(self.in_shape):
            return (g,)
        return (scatter_back(g, self.kept("indices"), self.in_shape, self.dim, self.keepdim),)

    def name(self):
        return "ModeBackward0"


def mode(input, dim=-1, keepdim=False):
    """(values, indices): the most frequent value along dim (the smallest on ties)."""
    return Mode.apply(input, op="mode", dim=dim, keepdim=keepdim)


_DIMS = (("dim", Dims, None, ""), ("keepdim", bool, False, ""))
register(
    "nansum",
    nansum,
    method=True,
    scenario=Scenario(args=_DIMS, doc="sum over dims (all by default), NaN counted as 0"),
)
register(
    "nanmean",
    nanmean,
    method=True,
    scenario=Scenario(args=_DIMS, doc="mean over dims (all by default) of the non-NaN elements"),
)
register("median", median, method=True)
register("nanmedian", nanmedian, method=True)
register("kthvalue", kthvalue, method=True)
register("quantile", quantile, method=True)
register("nanquantile", nanquantile, method=True)
register("mode", mode, method=True)
