"""Sorting and scans: sort / argsort / topk (values and indices; the gradient goes back to the
indices, as torch's value_selecting_reduction_backward), cumsum (backward: the reversed cumsum,
derivatives.yaml's flip-cumsum-flip), and the bool reductions all / any.

NaN sorts as the largest value (last ascending, first descending), as in torch.
"""

from __future__ import annotations

from collections import namedtuple

from engine import dtypes, kernels
from engine.autograd.function import Function, specialised_apply
from engine.autograd.grad_mode import no_grad
from engine.ops.common import cast_copy, scan_into
from engine.ops.reduce import norm_dims, reduced_shape, scatter_back
from engine.tensor import _wrap_dim

SortResult = namedtuple("SortResult", ["values", "indices"])
TopkResult = namedtuple("TopkResult", ["values", "indices"])


def _order(xp, a, axis: int, descending: bool):
    """Stable argsort along `axis`; descending keeps ties in index order and NaN first."""
    if not descending:
        return xp.argsort(a, axis=axis, kind="stable")
    n = a.shape[axis]
    rev = xp.flip(a, axis=axis)
    idx = xp.argsort(rev, axis=axis, kind="stable")  # ties: later originals first
    idx = xp.flip(idx, axis=axis)  # descending values, ties: earlier originals first
    return (n - 1) - idx


class Sort(Function):
    """sort(dim, descending, stable) and topk(k, dim, largest, sorted): (values, indices)."""

    apply = specialised_apply(1)  # one tensor argument

    num_outputs = 2

    def forward(self, x, out=None, dim=-1, descending=False, k=None):
        d = _wrap_dim(dim, max(x.ndim, 1))
        length = x.shape[d] if x.ndim else 1
        if k is not None and not 0 <= k <= length:
            raise RuntimeError("selected index k out of range")
        self.in_shape, self.dim, self.topk = x.shape, d, k is not None
        shape = list(x.shape)
        if k is not None and x.ndim:
            shape[d] = k
        shape = tuple(shape)
        vals = kernels.empty(shape, x._dtype, x._device)
        idx = kernels.empty(shape, dtypes.int64, x._device)
        if x._device.type != "meta":
            xp = kernels.xp_of(x)
            xd = x._data.reshape(1) if not x.ndim else x._data
            order = _order(xp, xd, d, descending)
            if k is not None:
                order = order[(slice(None),) * d + (slice(0, k),)]
            idx._data[...] = order.reshape(shape)
            vals._data[...] = xp.take_along_axis(xd, order, axis=d).reshape(shape)
        self.save(indices=idx)
        if k is not None:
            return TopkResult(vals, idx)
        return SortResult(vals, idx)

    def backward(self, g, g_idx=None):
        return (scatter_back(g, self.kept("indices"), self.in_shape, self.dim, True),)

    def name(self):
        return "TopkBackward0" if self.topk else "SortBackward0"


class Cumsum(Function):
    """cumsum(dim, dtype): integer and bool inputs sum in int64, as torch."""

    apply = specialised_apply(1)  # one tensor argument

    def forward(self, x, out=None, dim=0, dtype=None):
        d = _wrap_dim(dim, max(x.ndim, 1))
        if dtype is None:
            dtype = x._dtype if x._dtype.is_floating_point else dtypes.int64
        self.dim, self.in_dtype = d, x._dtype
        y = kernels.empty(x.shape, dtype, x._device) if out is None else out
        scan_into(x, y, d, dtype, "cumsum")
        return y

    def backward(self, g):
        # derivatives.yaml: cumsum_backward(grad.to(self.scalar_type()), dim): the gradient
        # itself when there is nothing to sum, else grad.flip(dim).cumsum(dim).flip(dim), its
        # two temporaries alive to the end
        if g._dtype is not self.in_dtype:
            g = g.to(self.in_dtype)
        if g.numel() <= 1 or (g.ndim and g.shape[self.dim] == 1):
            return (g,)
        flipped = g.flip(self.dim)
        scanned = flipped.cumsum(self.dim)
        gx = scanned.flip(self.dim)
        del scanned, flipped, g  # last made first, as the C++ statement's temporaries
        return (gx,)

    def name(self):
        return "CumsumBackward0"


class AllAny(Function):
    """all / any over dims: bool (uint8 for a uint8 input), no gradient; count_nonzero over
    every element: int64."""

    differentiable = False
    apply = specialised_apply(1)  # one tensor argument

    def forward(self, x, out=None, dim=None, keepdim=False, reducer="all"):
        dims = norm_dims(dim, x.ndim)
        if reducer == "count_nonzero":  # over every element: a 0-d int64, no temporary
            dtype = dtypes.int64
        else:
            dtype = dtypes.uint8 if x._dtype is dtypes.uint8 else dtypes.bool_
        y = kernels.empty(reduced_shape(x.shape, dims, keepdim), dtype, x._device)
        if x._device.type != "meta":
            xp = kernels.xp_of(x)
            if reducer == "count_nonzero":
                y._data[...] = xp.count_nonzero(x._data)
            else:  # (a non-bool input on cpu: torch's temporary bool copy, made after y)
                xd, copy = cast_copy(x, dtype)
                y._data[...] = getattr(xp, reducer)(xd, axis=dims, keepdims=keepdim)
                del copy
        return y


class LogSumExp(Function):
    """logsumexp(dim, keepdim): torch's logsumexp_out_impl, op for op (so its allocations are
    torch's): maxes = amax(keepdim) with infinite ones zeroed, sum(exp_(x - maxes)), log_,
    add_(maxes). Backward (logsumexp_backward): grad * (self - result).exp(), both temporaries
    alive until the product."""

    apply = specialised_apply(1)  # one tensor argument

    retain_inputs = (0,)
    retain_output = True

    def forward(self, x, out=None, dim=(), keepdim=False):
        dims = norm_dims(dim, x.ndim)
        self.dims, self.keepdim, self.ndim = dims, keepdim, x.ndim
        with no_grad():
            if x.numel() == 0:
                return x.exp().sum(dims, keepdim=keepdim).log_()
            maxes = x.amax(dims, keepdim=True)
            flat = maxes if keepdim else maxes.squeeze(dims)
            flat.masked_fill_(flat.abs() == float("inf"), 0)
            result = (x - maxes).exp_().sum(dims, keepdim=keepdim)
            return result.log_().add_(flat)

    def backward(self, g):
        x, y = self.saved_tensors
        if not self.keepdim and self.ndim:
            for d in self.dims:  # ascending: each reduced dim back where it was
                g, y = g.unsqueeze(d), y.unsqueeze(d)
        diff = x - y
        e = diff.exp()
        gx = g * e
        del e, diff  # torch's C++ temporaries, the last made freed first
        return (gx,)

    def name(self):
        return "LogsumexpBackward0"
