"""Reductions: sum, mean, amax/amin, max/min (with indices), softmax, log_softmax."""

from __future__ import annotations

import math
from collections import namedtuple

import numpy as np

from engine import dtypes, kernels
from engine.autograd.function import Function, specialised_apply
from engine.backends import cuda_reduce
from engine.ops.common import cast_copy, result_buffer
from engine.tensor import Tensor, _wrap_dim

MaxResult = namedtuple("MaxResult", ["values", "indices"])
_add_reduce = np.add.reduce


def norm_dims(dim, ndim):
    """Sorted, wrapped reduction dims; None or () means every dim (a 0-d tensor has none)."""
    if dim is None:
        return tuple(range(ndim))
    if isinstance(dim, int):
        dim = (dim,)
    elif not dim:
        return tuple(range(ndim))
    dims = sorted({_wrap_dim(d, ndim) for d in dim})
    if len(dims) != len(dim):
        raise RuntimeError(f"dim {list(dim)} appears multiple times in the list of dims")
    return tuple(dims) if ndim else ()


def reduced_shape(shape, dims, keepdim):
    if keepdim:
        return tuple(1 if i in dims else n for i, n in enumerate(shape))
    return tuple(n for i, n in enumerate(shape) if i not in dims)


def _expand_back(g: Tensor, shape, dims, keepdim):
    """View of g broadcast back to the input's shape (no allocation)."""
    if not keepdim and dims:
        kshape = reduced_shape(shape, dims, True)
        g = g.reshape(kshape)
    return g.expand(shape)


_ALL_DIMS = [tuple(range(n)) for n in range(33)]


class Sum(Function):
    apply = specialised_apply(1)  # one tensor argument

    def forward(self, x, out=None, dim=None, keepdim=False, dtype=None):
        xd = x._data
        full = dim is None and not keepdim
        if full:  # the common full reduction, decided inline
            dims, shape = _ALL_DIMS[xd.ndim], ()
        else:
            dims = norm_dims(dim, xd.ndim)
            shape = reduced_shape(xd.shape, dims, keepdim)
        self.in_shape, self.dims, self.keepdim = xd.shape, dims, keepdim
        if dtype is None:
            rdt = x._dtype if x._dtype.is_floating_point else dtypes.int64
        else:
            rdt = dtypes.from_any(dtype)
        y = (
            kernels.empty(shape, rdt, x._device)
            if out is None
            else result_buffer(out, shape, rdt, x._device, "sum")
        )
        kind = x._device.type
        if kind == "cpu":  # np.add.reduce is np.sum without its Python wrapper; positional
            # arguments (array, axis, dtype, out, keepdims) and axis=None for a full reduction
            # are its quickest call
            xd, copy = cast_copy(x, rdt)  # (another dtype: torch's temporary copy)
            if xd.size < kernels.PARALLEL_MIN_ELEMS:
                _add_reduce(xd, None if full else dims, rdt.np, y._data, keepdim)
            else:  # large: on the pool
                kernels.add_reduce(xd, None if full else dims, rdt.np, y._data, keepdim)
            if rdt.emulated:
                dtypes.round_to_bfloat16_(y._data)
            del copy
        else:
            if kind != "meta":
                xp = kernels.xp_of(x)
                xp.sum(xd, axis=dims, keepdims=keepdim, out=y._data, dtype=rdt.np)
            # torch's CUDA kernel stages partial sums in global memory (cuda, or meta under the
            # caching model)
            cuda_reduce.charge(x._device, xd, dims, max(rdt.itemsize, 4))
        return y

    def backward(self, g):
        return (_expand_back(g, self.in_shape, self.dims, self.keepdim),)

    def name(self):
        return "SumBackward1" if self.dims != tuple(range(len(self.in_shape))) else "SumBackward0"


_HALF = (dtypes.float16, dtypes.bfloat16)


class Mean(Function):
    apply = specialised_apply(1)  # one tensor argument

    def forward(self, x, out=None, dim=None, keepdim=False, dtype=None):
        if not x._dtype.is_floating_point and dtype is None:
            raise RuntimeError(
                f"mean(): could not infer output dtype. Input dtype must be either a floating point "
                f"or complex dtype. Got: {x._dtype.scalar_name}"
            )
        xd = x._data
        shape = xd.shape
        dims = norm_dims(dim, xd.ndim)
        self.in_shape, self.dims, self.keepdim = shape, dims, keepdim
        count = self.count = math.prod([shape[d] for d in dims])
        rdt = dtypes.from_any(dtype) if dtype is not None else x._dtype
        y = result_buffer(out, reduced_shape(shape, dims, keepdim), rdt, x._device, "mean")
        kind = x._device.type
        if kind == "cpu":  # what np.mean does with a dtype, without its Python wrapper
            # torch's CPU mean is sum_out(result, self, dtype).div_(count); a half or bfloat16
            # result is summed into a float32 temporary (made after it), divided, copied in
            half = rdt in _HALF
            acc = kernels.empty(y.shape, dtypes.float32, x._device) if half else y
            sdt = acc._dtype
            xd, copy = cast_copy(x, sdt)  # (another dtype: sum's temporary copy)
            if xd.size < kernels.PARALLEL_MIN_ELEMS:  # as Sum: small work is one numpy call
                _add_reduce(xd, dims, sdt.np, acc._data, keepdim)
            else:  # large: on the pool
                whole = not keepdim and len(dims) == xd.ndim
                kernels.add_reduce(xd, None if whole else dims, sdt.np, acc._data, keepdim)
            del copy
            np.true_divide(acc._data, count, out=acc._data, casting="unsafe")
            if half:
                np.copyto(y._data, acc._data, casting="unsafe")
                del acc
            if rdt.emulated:
                dtypes.round_to_bfloat16_(y._data)
        else:
            if kind != "meta":
                kernels.xp_of(x).mean(xd, axis=dims, keepdims=keepdim, out=y._data, dtype=rdt.np)
            cuda_reduce.charge(x._device, xd, dims, max(rdt.itemsize, 4))
        return y

    def backward(self, g):
        return (_expand_back(g, self.in_shape, self.dims, self.keepdim) / self.count,)

    def name(self):
        return "MeanBackward1" if self.dims != tuple(range(len(self.in_shape))) else "MeanBackward0"


class Amax(Function):
    """amax/amin over dims, and max()/min() of the whole tensor (dim None); the gradient is
    split evenly between ties, by torch's formulas (derivatives.yaml): amax/amin's
    scale_grad_by_count, max()/min()'s evenly_distribute_backward."""

    apply = specialised_apply(1)  # one tensor argument

    retain_inputs = (0,)
    retain_output = True
    reducer = "max"

    def forward(self, x, out=None, dim=None, keepdim=False):
        self.whole = dim is None  # max() / min(): amax / amin pass their dims, () for all
        dims = norm_dims(dim, x.ndim)
        if x.numel() == 0:
            raise RuntimeError(
                f"{self.reducer}(): Expected reduction dim to be specified for input.numel() == 0."
            )
        self.in_shape, self.dims, self.keepdim = x.shape, dims, keepdim
        y = result_buffer(
            out, reduced_shape(x.shape, dims, keepdim), x._dtype, x._device, "a" + self.reducer
        )
        if x._device.type != "meta":
            xp = kernels.xp_of(x)
            reduce = getattr(xp, self.reducer)
            if xp is np or self.reducer == "max":
                reduce(x._data, axis=dims, keepdims=keepdim, out=y._data)
            else:  # CuPy 14's min(out=...) fails inside CuPy (max does not): copy the result in
                y._data[...] = reduce(x._data, axis=dims, keepdims=keepdim)
        return y

    def backward(self, g):
        x, y = self.saved_tensors
        if self.whole:
            return (_evenly_distribute(g, x, y),)
        # scale_grad_by_count(restore_reduced_dims(grad), restore_reduced_dims(result) == self,
        # dim) = (grad / mask.sum(dim, true)) * mask: the share is reduced-sized
        gk, yk = _restore_dims(g, self), _restore_dims(y, self)
        mask = yk == x
        count = mask.sum(dim=self.dims, keepdim=True)
        share = gk / count
        gx = share * mask
        del share, count, mask  # last made first, as the C++ statement's temporaries
        return (gx,)

    def name(self):
        if self.whole:
            return self.reducer.capitalize() + "Backward1"
        return "A" + self.reducer + "Backward0"


def _restore_dims(t: Tensor, node) -> Tensor:
    """torch's restore_reduced_dims: t reshaped (a view) with the reduced dims back as size 1."""
    if node.keepdim or not node.dims:
        return t
    return t.reshape(reduced_shape(node.in_shape, node.dims, True))


def _evenly_distribute(g: Tensor, x: Tensor, y: Tensor) -> Tensor:
    """torch's evenly_distribute_backward(grad, input, value): on cpu, input-sized zeros with
    grad / mask.sum() filled in where input == value (input.isnan() when value is NaN); CUDA's
    (meta's plan) takes its other branch, mask * (grad / mask.sum()) with the NaN mask
    or-ed in."""
    if x._device.type == "cpu":
        nan = y.isnan()
        mask = x.isnan() if bool(nan._data) else x == y  # value.isnan().item()
        del nan
        zeros = kernels.zeros(x.shape, x._dtype, x._device)
        count = mask.sum()
        share = g / count
        zeros.masked_fill_(mask, share)
        del share, count, mask
        return zeros
    input_isnan = x.isnan()
    value_isnan = y.isnan()
    input_isnan.logical_and_(value_isnan)
    mask = (x == y).logical_or_(input_isnan)
    count = mask.sum()
    share = g / count
    gx = mask * share
    del share, count, mask, value_isnan, input_isnan
    return gx


class Amin(Amax):
    reducer = "min"


def scatter_back(g: Tensor, idx: Tensor, in_shape, dim: int, keepdim: bool) -> Tensor:
    """torch's value_selecting_reduction_backward: input-sized zeros with g put at the indices
    along `dim` (g and idx without that dim unless keepdim)."""
    out = kernels.zeros(in_shape, g._dtype, g._device)
    if g._device.type != "meta":
        xp = kernels.xp_of(g)
        od, ik, gk = out._data, idx._data, g._data
        if not len(in_shape):
            od, ik, gk = od.reshape(1), ik.reshape(1), gk.reshape(1)
        elif not keepdim:
            ik, gk = xp.expand_dims(ik, dim), xp.expand_dims(gk, dim)
        xp.put_along_axis(od, ik, gk, axis=dim)
    return out


class MaxDim(Function):
    """max/min along one dim: (values, indices); the gradient goes to the index (as PyTorch)."""

    apply = specialised_apply(1)  # one tensor argument

    retain_inputs = ()
    reducer = "max"
    num_outputs = 2

    def forward(self, x, out=None, dim=0, keepdim=False):
        d = _wrap_dim(dim, x.ndim)
        self.in_shape, self.dim, self.keepdim = x.shape, d, keepdim
        shape = reduced_shape(x.shape, (d,), keepdim)
        if x.numel() == 0:
            raise IndexError(f"{self.reducer}(): Expected reduction dim {d} to have non-zero size.")
        vals = kernels.empty(shape, x._dtype, x._device)
        idx = kernels.empty(shape, dtypes.int64, x._device)
        if x._device.type != "meta":
            xp = kernels.xp_of(x)
            xd, vd, idd = x._data, vals._data, idx._data
            if not x.ndim:  # a 0-d tensor reduces over its single element
                xd, vd, idd = xd.reshape(1), vd.reshape(1), idd.reshape(1)
            kw = {"axis": d, "keepdims": keepdim or not x.ndim}
            if xp is np:  # the value at the index: among equal values (0.0 and -0.0) the
                # first, as torch's cpu kernel keeps (numpy's max would give the last)
                getattr(xp, "arg" + self.reducer)(xd, out=idd, **kw)
                at = idd if kw["keepdims"] else np.expand_dims(idd, d)
                vd[...] = np.take_along_axis(xd, at, axis=d).reshape(vd.shape)
            else:  # CuPy 14's min/argmin(out=...) fail inside CuPy (as Amax's note): copy in
                vd[...] = getattr(xp, self.reducer)(xd, **kw)
                idd[...] = getattr(xp, "arg" + self.reducer)(xd, **kw)
        self.save(indices=idx)
        return MaxResult(vals, idx)

    def backward(self, g, g_idx=None):
        return (scatter_back(g, self.kept("indices"), self.in_shape, self.dim, self.keepdim),)

    def name(self):
        return self.reducer.capitalize() + "Backward0"  # max.dim / min.dim


class MinDim(MaxDim):
    reducer = "min"


class Softmax(Function):
    """softmax / log_softmax along `dim`; keeps only its result for backward.

    Like PyTorch's kernels (CPU and CUDA), a non-contiguous input or incoming gradient is first
    made contiguous (a charged copy). The per-row max and sum are kernel scratch: PyTorch's
    kernels keep them in registers, so here they are reported as `scratch`, not charged to
    memory_allocated. No full-size temporary in either direction.
    """

    apply = specialised_apply(1)  # one tensor argument

    retain_output = True
    log = False

    def forward(self, x, out=None, dim=-1):
        d = _wrap_dim(dim, x.ndim)
        self.dim = d
        dtype = x._dtype if x._dtype.is_floating_point else dtypes.get_default_dtype()
        y = result_buffer(out, x.shape, dtype, x._device, "log_softmax" if self.log else "softmax")
        src = x if _contiguous(x) else kernels.copy_new(x)
        m = kernels.Scratch(_keep_shape(x.shape, d), dtype, x._device)
        s = kernels.Scratch(_keep_shape(x.shape, d), dtype, x._device)
        if x._device.type != "meta" and x.numel():  # (nothing to compute in an empty tensor)
            xp = kernels.xp_of(x)
            xd, yd = src._data, y._data
            if not x.ndim:
                xd, yd = xd.reshape(1), yd.reshape(1)
            md, sd = m.data, s.data
            # numpy: the ufuncs' reductions (np.max / np.sum's own, without their wrappers)
            amax, total = (np.maximum.reduce, np.add.reduce) if xp is np else (xp.max, xp.sum)
            amax(xd, axis=d, keepdims=True, out=md)
            xp.subtract(xd, md, out=yd)
            if xp is np:  # (float32: the compiled loop, numpy's bits)
                kernels.exp_into(yd, yd)
            else:
                xp.exp(yd, out=yd)
            total(yd, axis=d, keepdims=True, out=sd)
            if self.log:  # y = (x - max) - log(sum(exp(x - max))), as torch's kernels: the
                # max subtracted first (x - (max + log sum) loses log sum beside a large max)
                xp.log(sd, out=sd)
                xp.subtract(xd, md, out=yd)
                xp.subtract(yd, sd, out=yd)
            else:
                xp.true_divide(yd, sd, out=yd)
        m.release()
        s.release()
        return y

    def backward(self, g):
        (y,) = self.saved_tensors
        d = self.dim
        out = kernels.empty(g.shape, g._dtype, g._device)
        if not _contiguous(g):
            g = kernels.copy_new(g)  # grad_output.contiguous(), as both of PyTorch's kernels do
        if not self.log:  # torch's CUDA softmax backward reduces a grad * output temporary
            cuda_reduce.transient(g._device, g.numel() * g._dtype.itemsize)
        s = kernels.Scratch(_keep_shape(g.shape, d), g._dtype, g._device)
        if g._device.type == "meta" or not g.numel():
            s.release()
            return (out,)
        xp = kernels.xp_of(g)
        od, gd, yd = out._data, g._data, y._data
        if not g.ndim:
            od, gd, yd = od.reshape(1), gd.reshape(1), yd.reshape(1)
        sd = s.data
        if self.log:  # g - exp(y) * sum(g)
            xp.sum(gd, axis=d, keepdims=True, out=sd)
            xp.exp(yd, out=od)
            xp.multiply(od, sd, out=od)
            xp.subtract(gd, od, out=od)
        else:  # y * (g - sum(g * y))
            xp.multiply(gd, yd, out=od)
            xp.sum(od, axis=d, keepdims=True, out=sd)
            xp.subtract(gd, sd, out=od)
            xp.multiply(od, yd, out=od)
        s.release()
        return (out,)

    def name(self):
        return ("LogSoftmax" if self.log else "Softmax") + "Backward0"


def _contiguous(t) -> bool:
    if t._device.type == "meta":
        return True
    return t._data.flags.c_contiguous


def _keep_shape(shape, d):
    return tuple(1 if i == d else n for i, n in enumerate(shape)) if shape else (1,)


class LogSoftmax(Softmax):
    log = True


class VectorNorm(Function):
    """linalg.vector_norm(x, ord, dim, keepdim) / Tensor.norm(p): the result alone is allocated
    (the kernel's reduction keeps no temporary), floats only. Backward is torch's norm_backward,
    its temporaries alive to the end of each statement: ord 2: grad * (self /
    norm).masked_fill_(norm == 0, 0); ord 1: self.sgn() * grad; +-inf: the argmax mask's share;
    others: the scaled powers; ord 0 has no gradient."""

    apply = specialised_apply(1)  # one tensor argument

    retain_inputs = (0,)
    retain_output = True

    def forward(self, x, out=None, ord=2.0, dim=None, keepdim=False, aten_norm=False):  # noqa: A002
        self.aten_norm = aten_norm
        if not x._dtype.is_floating_point:
            raise RuntimeError(
                "linalg.vector_norm: Expected a floating point or complex tensor as input. "
                f"Got {x._dtype.scalar_name}"
            )
        dims = norm_dims(dim, x.ndim)
        self.ord, self.dims, self.keepdim, self.ndim = float(ord), dims, keepdim, x.ndim
        self.every_dim = dim is None or (not isinstance(dim, int) and len(dim) == 0)
        y = result_buffer(out, reduced_shape(x.shape, dims, keepdim), x._dtype, x._device, "norm")
        if x._device.type != "meta":
            xp = kernels.xp_of(x)
            a = xp.abs(x._data)
            p = self.ord
            kw = dict(axis=dims, keepdims=keepdim)
            if p == 2.0:
                r = xp.sqrt(xp.sum(a * a, **kw))
            elif p == 1.0:
                r = xp.sum(a, **kw)
            elif p == math.inf:
                r = xp.max(a, **kw) if a.size else xp.zeros(y._data.shape)
            elif p == -math.inf:
                r = xp.min(a, **kw)
            elif p == 0.0:
                r = xp.count_nonzero(a, axis=dims).reshape(y._data.shape)  # CuPy's: no keepdims
            else:
                r = xp.sum(a**p, **kw) ** (1.0 / p)
            y._data[...] = r
        return y

    def backward(self, g):
        """torch's norm_backward. Without keepdim, grad and norm are unsqueezed over the given
        dims only: over every dim (dim=None) they stay 0-d, which matters for type promotion
        when `dtype` made the result wider than the input."""
        x, norm = self.saved_tensors
        p = self.ord
        if p == 0.0:
            return (None,)
        if not self.keepdim and self.ndim and not self.every_dim:
            for d in self.dims:  # ascending: each reduced dim back where it was
                g, norm = g.unsqueeze(d), norm.unsqueeze(d)
        if p == 2.0:  # grad * (self / norm).masked_fill_(norm == 0, 0)
            scaled = x / norm
            zero = norm == 0
            scaled.masked_fill_(zero, 0)
            gx = g * scaled
            del zero, scaled
            return (gx,)
        if p == 1.0:  # self.sgn() * grad
            sign = x.sign()
            return (sign * g,)
        if math.isinf(p):
            # self_abs = self.abs(); mask = self_abs.eq(norm).logical_or(self_abs.isnan());
            # return self.sgn() * ((grad / mask.sum(dim, true)) * mask);
            # (gcc evaluates an operator's right operand first; a statement's temporaries die
            # last made first, then the locals in reverse)
            size = x.abs()
            eq = size.eq(norm)
            nan = size.isnan()
            mask = eq.logical_or(nan)
            del nan, eq
            count = mask.sum(self.dims, keepdim=True)
            share = g / count
            masked = share * mask
            sign = x.sign()
            gx = sign * masked
            del sign, masked, share, count, mask, size
            return (gx,)
        if p < 1.0:
            # self_scaled = self.sgn() * self.abs().pow_(p - 1).masked_fill_(self == 0, 0);
            # return self_scaled * grad * norm.pow(1 - p);
            size = x.abs()
            size.pow_(p - 1)
            zero = x == 0
            size.masked_fill_(zero, 0)
            sign = x.sign()
            scaled = sign * size
            del sign, zero, size
            back = norm.pow(1 - p)
            times = scaled * g
            gx = times * back
            del times, back, scaled
            return (gx,)
        # self_scaled = self.sgn() * self.abs().pow_(p - 1) (p < 2) or self * self.abs().pow_(p
        # - 2) (p > 2); scale_v = grad / norm.pow(p - 1), 0 where norm is 0;
        # return self_scaled * scale_v
        scaled = self._scaled(x, p - 1 if p < 2.0 else p - 2, signed=p < 2.0)
        powered = norm.pow(p - 1)
        scale = g / powered
        del powered
        scale.masked_fill_(norm == 0, 0)
        gx = scaled * scale
        del scale, scaled
        return (gx,)

    @staticmethod
    def _scaled(x, exponent, signed):
        """One C++ statement: (self.sgn() or self) * self.abs().pow_(exponent); its temporaries
        die when it ends, the last made first."""
        first = x.sign() if signed else x
        powered = x.abs().pow_(exponent)
        scaled = first * powered
        del powered, first
        return scaled

    def name(self):
        # at::norm(x, p, dim) (ATen's own composites: pairwise_distance) records NormBackward1
        return "NormBackward1" if getattr(self, "aten_norm", False) else "LinalgVectorNormBackward0"
