"""Reductions: sum, mean, amax/amin, max/min (with indices), softmax, log_softmax."""

from __future__ import annotations

from collections import namedtuple

import numpy as np

from engine import dtypes
from engine.autograd.function import Function
from engine.ops import kernels
from engine.ops.common import result_buffer
from engine.tensor import Tensor, _wrap_dim

MaxResult = namedtuple("MaxResult", ["values", "indices"])


def norm_dims(dim, ndim):
    if dim is None:
        return tuple(range(ndim))
    if isinstance(dim, int):
        dim = (dim,)
    dims = tuple(sorted({_wrap_dim(d, ndim) for d in dim}))
    return dims


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


class Sum(Function):
    def forward(self, x, out=None, dim=None, keepdim=False, dtype=None):
        dims = norm_dims(dim, x.ndim)
        self.in_shape, self.dims, self.keepdim = x.shape, dims, keepdim
        rdt = dtypes.from_any(dtype) if dtype is not None else (
            dtypes.int64 if not x._dtype.is_floating_point else x._dtype)
        y = result_buffer(out, reduced_shape(x.shape, dims, keepdim), rdt, x._device, "sum")
        if x._device.type != "meta":
            xp = kernels.xp_of(x)
            xp.sum(x._data, axis=dims, keepdims=keepdim, out=y._data, dtype=rdt.np)
        return y

    def backward(self, g):
        return (_expand_back(g, self.in_shape, self.dims, self.keepdim),)

    def name(self):
        return "SumBackward1" if self.dims != tuple(range(len(self.in_shape))) else "SumBackward0"


class Mean(Function):
    def forward(self, x, out=None, dim=None, keepdim=False, dtype=None):
        if not x._dtype.is_floating_point and dtype is None:
            raise RuntimeError(
                f"mean(): could not infer output dtype. Input dtype must be either a floating point "
                f"or complex dtype. Got: {x._dtype.torch_tensor_name.replace('Tensor', '')}"
            )
        dims = norm_dims(dim, x.ndim)
        self.in_shape, self.dims, self.keepdim = x.shape, dims, keepdim
        self.count = int(np.prod([x.shape[d] for d in dims])) if dims else 1
        rdt = dtypes.from_any(dtype) if dtype is not None else x._dtype
        y = result_buffer(out, reduced_shape(x.shape, dims, keepdim), rdt, x._device, "mean")
        if x._device.type != "meta":
            xp = kernels.xp_of(x)
            xp.mean(x._data, axis=dims, keepdims=keepdim, out=y._data, dtype=rdt.np)
        return y

    def backward(self, g):
        return (_expand_back(g, self.in_shape, self.dims, self.keepdim) / self.count,)

    def name(self):
        return "MeanBackward1" if self.dims != tuple(range(len(self.in_shape))) else "MeanBackward0"


class Amax(Function):
    """amax/amin over dims; the gradient is split evenly between ties (as PyTorch)."""

    retain_inputs = (0,)
    retain_output = True
    reducer = "max"

    def forward(self, x, out=None, dim=None, keepdim=False):
        dims = norm_dims(dim, x.ndim) if dim is not None and dim != () else tuple(range(x.ndim))
        if x.numel() == 0:
            raise RuntimeError(f"{self.reducer}(): Expected reduction dim to be specified for input.numel() == 0.")
        self.in_shape, self.dims, self.keepdim = x.shape, dims, keepdim
        y = result_buffer(out, reduced_shape(x.shape, dims, keepdim), x._dtype, x._device, "a" + self.reducer)
        if x._device.type != "meta":
            xp = kernels.xp_of(x)
            getattr(xp, self.reducer)(x._data, axis=dims, keepdims=keepdim, out=y._data)
        return y

    def backward(self, g):
        x, y = self.saved_tensors
        yk = _expand_back(y, self.in_shape, self.dims, self.keepdim)
        mask = x == yk
        count = mask.sum(dim=self.dims, keepdim=True)
        gk = _expand_back(g, self.in_shape, self.dims, self.keepdim)
        return (gk * mask / count,)


class Amin(Amax):
    reducer = "min"


class MaxDim(Function):
    """max/min along one dim: (values, indices); gradient goes to the index."""

    retain_inputs = ()
    reducer = "max"
    num_outputs = 2

    def forward(self, x, out=None, dim=0, keepdim=False):
        d = _wrap_dim(dim, x.ndim)
        self.in_shape, self.dim, self.keepdim = x.shape, d, keepdim
        shape = reduced_shape(x.shape, (d,), keepdim)
        vals = kernels.empty(shape, x._dtype, x._device)
        idx = kernels.empty(shape, dtypes.int64, x._device)
        if x._device.type != "meta":
            xp = kernels.xp_of(x)
            getattr(xp, "arg" + self.reducer)(x._data, axis=d, keepdims=keepdim, out=idx._data)
            ik = idx._data if keepdim else xp.expand_dims(idx._data, d)
            vk = vals._data if keepdim else xp.expand_dims(vals._data, d)
            vk[...] = xp.take_along_axis(x._data, ik, axis=d)
        self.indices = idx
        return MaxResult(vals, idx)

    def backward(self, g, g_idx=None):
        idx = self.indices
        out = kernels.zeros(self.in_shape, g._dtype, g._device)
        if g._device.type != "meta":
            xp = kernels.xp_of(g)
            ik = idx._data if self.keepdim else xp.expand_dims(idx._data, self.dim)
            gk = g._data if self.keepdim else xp.expand_dims(g._data, self.dim)
            xp.put_along_axis(out._data, ik, gk, axis=self.dim)
        return (out,)

    def release_saved(self):
        self.indices = None


class MinDim(MaxDim):
    reducer = "min"


class Softmax(Function):
    retain_output = True
    log = False

    def forward(self, x, out=None, dim=-1):
        d = _wrap_dim(dim, x.ndim)
        self.dim = d
        dtype = x._dtype if x._dtype.is_floating_point else dtypes.get_default_dtype()
        y = result_buffer(out, x.shape, dtype, x._device, "softmax")
        if x._device.type != "meta":
            xp = kernels.xp_of(x)
            # small temporaries (the reduced max and sum) are charged as temporaries
            m = kernels.empty(reduced_shape(x.shape, (d,), True), dtype, x._device)
            xp.max(x._data, axis=d, keepdims=True, out=m._data)
            xp.subtract(x._data, m._data, out=y._data)
            if self.log:
                s = kernels.empty(m.shape, dtype, x._device)
                e = kernels.empty(x.shape, dtype, x._device)
                xp.exp(y._data, out=e._data)
                xp.sum(e._data, axis=d, keepdims=True, out=s._data)
                del e
                xp.log(s._data, out=s._data)
                xp.subtract(y._data, s._data, out=y._data)
            else:
                xp.exp(y._data, out=y._data)
                xp.sum(y._data, axis=d, keepdims=True, out=m._data)
                xp.true_divide(y._data, m._data, out=y._data)
        return y

    def backward(self, g):
        (y,) = self.saved_tensors
        d = self.dim
        if self.log:
            # g - exp(y) * sum(g)
            return (g - y.exp() * g.sum(dim=d, keepdim=True),)
        gy = g * y
        return (gy.sub_(y * gy.sum(dim=d, keepdim=True)),)

    def name(self):
        return ("LogSoftmax" if self.log else "Softmax") + "Backward0"


class LogSoftmax(Softmax):
    log = True
