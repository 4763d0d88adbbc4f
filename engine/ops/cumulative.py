"""Scans along one dim beside cumsum (engine/ops/sorting.py): cumprod, cummax / cummin (values
and indices), logcumsumexp; and the whole and per-dim product, prod.

Forward allocates the result(s) alone, as torch's CPU kernels. Backward is derivatives.yaml's
formula written as torch's FunctionsManual.cpp writes it, op for op, so that its temporaries are
made and freed when torch's are (each C++ statement's temporaries die at its end, last made
first; locals die when the function returns, last declared first). Two CPU-kernel habits that
show up there are copied where torch's formula meets them: a reduction or scan of a bool tensor
works on an int64 copy of it (TensorIterator's input cast), and a product of a float tensor and
a bool mask multiplies a float copy of the mask.
"""

from __future__ import annotations

from collections import namedtuple

import numpy as np

from engine import dtypes, kernels
from engine.autograd.function import Function, specialised_apply
from engine.autograd.grad_mode import is_grad_enabled
from engine.ops.common import cast_copy, scan_into
from engine.ops.reduce import norm_dims, reduced_shape
from engine.ops.registry import REQUIRED, Scenario, register
from engine.tensor import Tensor, _wrap_dim

CumResult = namedtuple("CumResult", ["values", "indices"])


def _scan_dtype(x, dtype):
    if dtype is not None:
        return dtypes.from_any(dtype)
    return x._dtype if x._dtype.is_floating_point else dtypes.int64


def int64_copy(mask: Tensor) -> Tensor | None:
    """TensorIterator's input cast on cpu: a charged int64 copy of a bool tensor (the caller
    frees it). None on cuda, whose kernels cast as they read, and on meta (the plan of a GPU
    run)."""
    if mask._device.type != "cpu":
        return None
    copy = kernels.empty(mask.shape, dtypes.int64, mask._device)
    copy._data[...] = mask._data
    return copy


def count_true(mask: Tensor, dim, keepdim: bool = True) -> Tensor:
    """mask.sum(dim, keepdim) as torch's CPU kernel runs it: the int64 result, then an int64 copy
    of the mask that the reduction reads (made and freed). dim: an int, a tuple, or None."""
    dims = norm_dims(dim, mask.ndim)
    y = kernels.empty(reduced_shape(mask.shape, dims, keepdim), dtypes.int64, mask._device)
    copy = int64_copy(mask)
    if mask._device.type != "meta":
        src = mask._data if copy is None else copy._data
        kernels.xp_of(mask).sum(src, axis=dims, keepdims=keepdim, out=y._data)
    del copy
    return y


def any_true(mask: Tensor) -> bool:
    """mask.any().item(): False on meta (the common case: no zero in the input)."""
    if mask._device.type == "meta":
        return False
    return bool(mask._data.any())


# ---------------------------------------------------------------------------------------------
# cumprod
# ---------------------------------------------------------------------------------------------
class Cumprod(Function):
    """cumprod(dim, dtype): integer and bool inputs multiply in int64, as torch. Backward is
    torch's cumprod_backward: reversed_cumsum(output * grad).div(input) when the input has no
    zero; with zeros, its O(n) mask formula (first-order)."""

    apply = specialised_apply(1)  # one tensor argument

    retain_inputs = (0,)
    retain_output = True

    def forward(self, x, out=None, dim=0, dtype=None):
        d = _wrap_dim(dim, max(x.ndim, 1))
        rdt = _scan_dtype(x, dtype)
        self.dim, self.in_dtype = d, x._dtype
        y = kernels.empty(x.shape, rdt, x._device) if out is None else out
        scan_into(x, y, d, rdt, "cumprod")
        return y

    def backward(self, g):
        x, y = self.saved_tensors
        if g._dtype is not self.in_dtype:
            g = g.to(self.in_dtype)
        d = self.dim
        if x.numel() <= 1 or x.shape[d] == 1:
            return (g,)
        w = y * g
        is_zero = x == 0
        if not any_true(is_zero):
            flipped = w.flip(d)  # reversed_cumsum(w, dim): one statement
            scanned = flipped.cumsum(d)
            reversed_sum = scanned.flip(d)
            del scanned, flipped
            gx = reversed_sum.div(x)
            del reversed_sum, is_zero, w
            return (gx,)
        return (_cumprod_backward_zeros(g, x, y, d),)

    def name(self):
        return "CumprodBackward0"


def _cumprod_backward_zeros(g: Tensor, x: Tensor, y: Tensor, d: int) -> Tensor:
    """d cumprod(x)_j / d x_k through the zeros: before the first zero of a row the plain
    formula, at it the product of the others times the gradients up to the second zero, after
    it nothing. Values as torch's first-order formula, in whole-array numpy (the engine has no
    create_graph, for which torch takes an O(n^2) path); its blocks are not torch's: the
    input-sized zeros alone are charged."""
    gx = kernels.zeros(x.shape, g._dtype, g._device)
    xp = kernels.xp_of(x)
    xd = xp.moveaxis(x._data, d, -1)
    yd = xp.moveaxis(y._data, d, -1)
    gd = xp.moveaxis(g._data, d, -1)
    out = xp.moveaxis(gx._data, d, -1)
    n = xd.shape[-1]
    zeros = xp.cumsum(xd == 0, axis=-1)
    before = zeros == 0
    w = xp.where(before, yd * gd, 0)
    rc = xp.flip(xp.cumsum(xp.flip(w, -1), -1), -1)
    with np.errstate(divide="ignore", invalid="ignore"):
        out[...] = xp.where(before, rc / xp.where(before, xd, 1), 0)
    first = xp.argmax(zeros == 1, axis=-1)[..., None]  # the first zero's position (if any)
    has = xp.take_along_axis(zeros, first, -1) == 1
    between = (zeros == 1) & (xp.arange(n) != first)
    prods = xp.cumprod(xp.where(between, xd, 1), axis=-1)
    total = xp.sum(prods * xp.where(zeros == 1, gd, 0), axis=-1, keepdims=True)
    prev = xp.take_along_axis(yd, xp.maximum(first - 1, 0), -1)
    prev = xp.where(first == 0, 1, prev)
    kept = xp.take_along_axis(out, first, -1)  # rows without a zero keep what they have
    xp.put_along_axis(out, first, xp.where(has, total * prev, kept), -1)
    return gx


def cumprod(input, dim, *, dtype=None, out=None):
    """Cumulative product along `dim` (integer and bool inputs in int64)."""
    return Cumprod.apply(input, out=out, op="cumprod", dim=dim, dtype=dtype)


def cumprod_(input, dim, *, dtype=None):
    return Cumprod.apply(input, out=input, op="cumprod_", dim=dim, dtype=dtype)


# ---------------------------------------------------------------------------------------------
# cummax / cummin
# ---------------------------------------------------------------------------------------------
class Cummax(Function):
    """cummax / cummin(dim): (values, indices), the index of the last maximum (minimum) so far
    on ties and of the first NaN once one is met, as torch. Backward (cummaxmin_backward):
    input-sized zeros with the gradient scatter-added at the indices."""

    apply = specialised_apply(1)  # one tensor argument

    num_outputs = 2
    reducer = "max"

    def forward(self, x, out=None, dim=0):
        d = _wrap_dim(dim, max(x.ndim, 1))
        self.dim, self.in_shape = d, x.shape
        vals = kernels.empty(x.shape, x._dtype, x._device)
        idx = kernels.empty(x.shape, dtypes.int64, x._device)
        if x._device.type != "meta" and x.numel():
            xp = kernels.xp_of(x)
            xd = x._data.reshape(1) if not x.ndim else x._data
            v, i = _cum_extreme(xp, xd, d, self.reducer == "max")
            vals._data[...] = v.reshape(x.shape)
            idx._data[...] = i.reshape(x.shape)
        self.save(indices=idx)
        return CumResult(vals, idx)

    def backward(self, g, g_idx=None):
        if not len(self.in_shape):
            return (g,)
        idx = self.kept("indices")
        out = kernels.zeros(self.in_shape, g._dtype, g._device)
        if g._device.type != "meta" and g.numel():
            xp = kernels.xp_of(g)
            od = xp.moveaxis(out._data, self.dim, -1)
            idd = xp.moveaxis(idx._data, self.dim, -1).reshape(-1, od.shape[-1])
            gd = xp.moveaxis(g._data, self.dim, -1).reshape(-1, od.shape[-1])
            flat = od.reshape(-1, od.shape[-1]) if od.flags.c_contiguous else None
            rows = xp.arange(idd.shape[0])[:, None]
            if flat is None:
                acc = xp.zeros(idd.shape, out._data.dtype)
                xp.add.at(acc, (rows, idd), gd) if xp is np else _add_at(xp, acc, (rows, idd), gd)
                od[...] = acc.reshape(od.shape)
            else:
                xp.add.at(flat, (rows, idd), gd) if xp is np else _add_at(xp, flat, (rows, idd), gd)
        return (out,)

    def name(self):
        return "Cum" + self.reducer + "Backward0"


def _add_at(xp, a, index, values):
    xp.add.at(a, index, values)


class Cummin(Cummax):
    reducer = "min"


def _cum_extreme(xp, a, d, is_max):
    """Running max (min) and its index along d: ties take the later index; once a NaN is met it
    stays (its index the first NaN's), as torch's cummax_helper (`x >= best || isnan(x)`)."""
    moved = xp.moveaxis(a, d, -1)
    n = moved.shape[-1]
    vals = xp.empty_like(moved)
    idx = xp.empty(moved.shape, np.int64)
    best = moved[..., 0].copy()
    besti = xp.zeros(best.shape, np.int64)
    isfloat = moved.dtype.kind in "fc"
    for k in range(n):
        cur = moved[..., k]
        if k:
            better = (cur >= best) if is_max else (cur <= best)
            if isfloat:
                better = better | xp.isnan(cur)
            best = xp.where(better, cur, best)
            besti = xp.where(better, k, besti)
        vals[..., k] = best
        idx[..., k] = besti
    return xp.moveaxis(vals, -1, d), xp.moveaxis(idx, -1, d)


def cummax(input, dim):
    """(values, indices) of the running maximum along `dim`."""
    return Cummax.apply(input, op="cummax", dim=dim)


def cummin(input, dim):
    """(values, indices) of the running minimum along `dim`."""
    return Cummin.apply(input, op="cummin", dim=dim)


# ---------------------------------------------------------------------------------------------
# logcumsumexp
# ---------------------------------------------------------------------------------------------
class LogCumSumExp(Function):
    """logcumsumexp(dim): log(cumsum(exp(x))) without overflow; floats only. Backward is torch's
    logcumsumexp_backward: the positive and negative parts of the gradient in log space, each
    through a reversed logcumsumexp."""

    apply = specialised_apply(1)  # one tensor argument

    retain_inputs = (0,)
    retain_output = True

    def forward(self, x, out=None, dim=0):
        d = _wrap_dim(dim, max(x.ndim, 1))
        if not x._dtype.is_floating_point:
            raise NotImplementedError(
                f"\"logcumsumexp_out_cpu\" not implemented for '{x._dtype.scalar_name}'"
            )
        self.dim = d
        y = kernels.empty(x.shape, x._dtype, x._device) if out is None else out
        if x._device.type != "meta" and x.numel():
            xp = kernels.xp_of(x)
            xd = x._data.reshape(1) if not x.ndim else x._data
            yd = y._data.reshape(1) if not x.ndim else y._data
            xp.logaddexp.accumulate(xd, axis=d, out=yd) if xp is np else _lcse_xp(xp, xd, d, yd)
            if x._dtype.emulated:
                dtypes.round_to_bfloat16_(y._data)
        return y

    def backward(self, g):
        x, y = self.saved_tensors
        if not g.ndim or not g.numel():
            return (g,)
        d = self.dim
        lowest = float(np.finfo(g._dtype.np if not g._dtype.emulated else np.float32).min)
        if g._dtype.emulated:
            lowest = -3.3895313892515355e38
        log_abs_grad = g.abs().log()
        positive = g > 0
        log_grad_positive = log_abs_grad.where(positive, lowest)
        del positive
        negative = g < 0
        log_grad_negative = log_abs_grad.where(negative, lowest)
        del negative
        output_pos = self._part(log_grad_positive, x, y, d)
        output_neg = self._part(log_grad_negative, x, y, d)
        gx = output_pos - output_neg
        del output_neg, output_pos, log_grad_negative, log_grad_positive, log_abs_grad
        return (gx,)

    @staticmethod
    def _part(log_grad, x, y, d):
        """(reverse_logcumsumexp(log_grad - result) + self).exp(): one C++ statement."""
        diff = log_grad - y
        flipped = diff.flip(d)  # reverse_logcumsumexp: a lambda, its temporaries die at return
        scanned = flipped.logcumsumexp(d)
        rev = scanned.flip(d)
        del scanned, flipped
        shifted = rev + x
        out = shifted.exp()
        del shifted, rev, diff
        return out

    def name(self):
        return "LogcumsumexpBackward0"


def _lcse_xp(xp, a, d, out):
    moved = xp.moveaxis(a, d, 0)
    res = xp.moveaxis(out, d, 0)
    acc = moved[0].copy()
    res[0] = acc
    for k in range(1, moved.shape[0]):
        acc = xp.logaddexp(acc, moved[k])
        res[k] = acc


def logcumsumexp(input, dim, *, out=None):
    """log(cumsum(exp(input), dim)), computed without overflow."""
    return LogCumSumExp.apply(input, out=out, op="logcumsumexp", dim=dim)


# ---------------------------------------------------------------------------------------------
# prod
# ---------------------------------------------------------------------------------------------
class Prod(Function):
    """prod() over every element or prod(dim, keepdim); integer and bool inputs in int64 unless
    `dtype`. Backward is torch's prod_backward: grad * (result / input) when no element is
    zero; otherwise its prod_safe_zeros_backward (exclusive cumprods from both ends), or, for
    the whole product with two zeros or more (first order), zeros."""

    apply = specialised_apply(1)  # one tensor argument

    retain_inputs = (0,)
    retain_output = True

    def forward(self, x, out=None, dim=None, keepdim=False, dtype=None):
        self.whole = dim is None
        rdt = _scan_dtype(x, dtype)
        if self.whole:
            shape = ()
        else:
            d = _wrap_dim(dim, max(x.ndim, 1))
            self.dim, self.keepdim = d, keepdim
            shape = reduced_shape(x.shape, (d,), keepdim) if x.ndim else ()
        y = kernels.empty(shape, rdt, x._device) if out is None else out
        if x._device.type != "meta":
            xp = kernels.xp_of(x)
            axis = None if self.whole or not x.ndim else self.dim
            kd = keepdim and not self.whole and x.ndim
            xd, copy = cast_copy(x, rdt)  # (another dtype on cpu: torch's temporary copy)
            y._data[...] = xp.prod(xd, axis=axis, keepdims=bool(kd), dtype=rdt.np)
            del copy
            if rdt.emulated:
                dtypes.round_to_bfloat16_(y._data)
        return y

    def backward(self, g):
        x, y = self.saved_tensors
        if g._dtype is not x._dtype:
            x = x.to(g._dtype)
        if not x.ndim:
            return (g,)
        if self.whole:
            return (self._whole_backward(g, x, y),)
        d = self.dim
        if not self.keepdim:
            g, y = g.unsqueeze(d), y.unsqueeze(d)
        zero_mask = x == 0
        slice_zero_count = count_true(zero_mask, d)
        total_zeros = _total(slice_zero_count)
        if total_zeros == 0:
            gx = g * (y / x)
        else:
            gx = prod_safe_zeros_backward(g, x, d)
        del slice_zero_count, zero_mask
        return (gx,)

    @staticmethod
    def _whole_backward(g, x, y):
        from engine.ops.selection import nonzero

        if x._device.type == "meta":  # no values: the common case, no zero (as _total)
            mask = x == 0
            del mask
            return g * (y / x)
        zero_idx = nonzero(x == 0)
        if not zero_idx.numel():
            return g * (y / x)
        if not is_grad_enabled() and zero_idx.shape[0] > 1:
            return kernels.zeros(x.shape, x._dtype, x._device)
        return prod_safe_zeros_backward(g, x.contiguous().view(-1), 0).view_as(x)

    def name(self):
        return "ProdBackward0" if self.whole else "ProdBackward1"


def _total(counts: Tensor) -> int:
    """slice_zero_count.sum().item(): 0 on meta (no zeros)."""
    if counts._device.type == "meta":
        return 0
    return int(counts._data.sum())


def prod_safe_zeros_backward(g: Tensor, inp: Tensor, d: int) -> Tensor:
    """grad * (exclusive cumprod from the front * exclusive cumprod from the back)."""
    from engine.ops.shape import cat

    if not inp.numel():
        return g.expand_as(inp)
    n = inp.shape[d]
    ones_size = list(inp.shape)
    ones_size[d] = 1
    ones = kernels.full(tuple(ones_size), 1, g._dtype, g._device)
    exclusive_normal_nocp = cat([ones, inp.narrow(d, 0, n - 1)], d)
    exclusive_normal = exclusive_normal_nocp.cumprod(d)
    narrow_reverse = inp.narrow(d, 1, n - 1).flip(d)
    exclusive_reverse_nocp = cat([ones, narrow_reverse], d)
    del narrow_reverse, ones
    exclusive_reverse = exclusive_reverse_nocp.cumprod(d).flip(d)
    both = exclusive_normal * exclusive_reverse
    gx = g * both
    del both, exclusive_reverse, exclusive_reverse_nocp, exclusive_normal, exclusive_normal_nocp
    return gx


def prod(input, dim=None, keepdim=False, *, dtype=None, out=None):
    """Product of all elements, or along `dim` (keepdim keeps it as size 1)."""
    if dim is None and keepdim:
        raise TypeError("prod(): argument 'dim' must be int, not NoneType")
    return Prod.apply(input, out=out, op="prod", dim=dim, keepdim=keepdim, dtype=dtype)


_DIM = ("dim", int, REQUIRED, "")
register(
    "cumprod",
    cumprod,
    method=True,
    inplace="cumprod_",
    scenario=Scenario(args=(_DIM,), doc="cumulative product along dim; cumprod_ in place"),
)
register("cumprod_", cumprod_, function=False, method=True)
register(
    "cummax",
    cummax,
    method=True,
    scenario=Scenario(args=(_DIM,), doc="running maximum along dim: (values, indices)"),
)
register(
    "cummin",
    cummin,
    method=True,
    scenario=Scenario(args=(_DIM,), doc="running minimum along dim: (values, indices)"),
)
register(
    "logcumsumexp",
    logcumsumexp,
    method=True,
    scenario=Scenario(args=(_DIM,), doc="log(cumsum(exp(x))) along dim"),
)
register(
    "prod",
    prod,
    method=True,
    scenario=Scenario(
        args=(("dim", int | None, None, "all elements when null"), ("keepdim", bool, False, "")),
        doc="product of all elements or along dim",
    ),
)
