"""More elementwise math, with PyTorch's gradients (derivatives.yaml) and in-place forms:
rounding (floor, ceil, round, trunc, frac), logs and exponentials (log1p, expm1, log2, log10,
exp2), trigonometry (tan, asin, acos, atan, sinh, cosh), erfc; and the predicates isnan,
isinf, isfinite, signbit (bool results, no gradient).

Each backward is derivatives.yaml's formula written with the engine's ops in its order, so its
temporaries are torch's: what an op keeps (its input or its result) decides what its in-place
form costs, as for the ops in elementwise.py.
"""

from __future__ import annotations

import math

import numpy as np

from engine import dtypes, kernels
from engine.autograd.function import Function, specialised_apply
from engine.ops.common import result_buffer
from engine.ops.elementwise import Unary, _uf


class _Rounding(Unary):
    """floor / ceil / round / trunc: an integer tensor comes back as it is (a copy, its dtype);
    the gradient is zero (derivatives.yaml: zeros_like(grad))."""

    float_only = False

    def kernel(self, xp, x, y):
        if y.dtype.kind in "iub":
            xp.copyto(y, x)
        else:
            _uf(xp, self.ufunc, x, out=y)

    small_elems = 0  # always kernel(): it decides by dtype

    def backward(self, g):
        return (g.new_zeros(g.shape),)


class Floor(_Rounding):
    ufunc = np.floor


class Ceil(_Rounding):
    ufunc = np.ceil


class Round(_Rounding):
    ufunc = np.rint  # half to even, as torch.round


class Trunc(_Rounding):
    ufunc = np.trunc


class Frac(Unary):
    """x - trunc(x); the gradient passes through (derivatives.yaml: grad)."""

    def kernel(self, xp, x, y):
        _uf(xp, np.fmod, x, 1.0, out=y)  # = x - trunc(x), in one pass (y may be x: frac_)

    small_elems = 0

    def backward(self, g):
        return (g,)


class Log1P(Unary):
    retain_inputs = (0,)
    ufunc = np.log1p

    def backward(self, g):
        (x,) = self.saved_tensors
        return (g / (x + 1),)


class Expm1(Unary):
    retain_output = True
    ufunc = np.expm1

    def backward(self, g):
        (y,) = self.saved_tensors
        return (g * (y + 1),)


class Log2(Unary):
    retain_inputs = (0,)
    ufunc = np.log2

    def backward(self, g):
        (x,) = self.saved_tensors
        return (g / (x * math.log(2.0)),)


class Log10(Unary):
    retain_inputs = (0,)
    ufunc = np.log10

    def backward(self, g):
        (x,) = self.saved_tensors
        return (g / (x * math.log(10.0)),)


class Exp2(Unary):
    retain_output = True
    ufunc = np.exp2

    def backward(self, g):
        (y,) = self.saved_tensors
        return (g * y * math.log(2.0),)


class Tan(Unary):
    retain_output = True
    ufunc = np.tan

    def backward(self, g):
        # grad * (1 + result.pow(2)): the square lives until the product, as in C++
        (y,) = self.saved_tensors
        sq = y.pow(2)
        one_plus = 1 + sq
        return (g * one_plus,)


def _inverse_root(x):
    """(-x * x + 1).rsqrt() and the temporaries of that expression, for the caller to keep
    until its statement ends (as C++ keeps them)."""
    neg = -x
    sq = neg * x
    inner = sq + 1
    return (neg, sq, inner), inner.rsqrt()


class Asin(Unary):
    retain_inputs = (0,)
    ufunc = np.arcsin

    def backward(self, g):
        # grad * (-self * self + 1).rsqrt(): every temporary lives until the product
        (x,) = self.saved_tensors
        temps, root = _inverse_root(x)
        return (g * root,)


class Acos(Unary):
    retain_inputs = (0,)
    ufunc = np.arccos

    def backward(self, g):
        # grad * -((-self * self + 1).rsqrt()): every temporary lives until the product
        (x,) = self.saved_tensors
        temps, root = _inverse_root(x)
        neg_root = -root
        return (g * neg_root,)


class Atan(Unary):
    retain_inputs = (0,)
    ufunc = np.arctan

    def backward(self, g):
        # grad / (self * self + 1): the square lives until the quotient
        (x,) = self.saved_tensors
        sq = x * x
        inner = sq + 1
        return (g / inner,)


class Sinh(Unary):
    retain_inputs = (0,)
    ufunc = np.sinh

    def backward(self, g):
        (x,) = self.saved_tensors
        return (g * x.cosh(),)


class Cosh(Unary):
    retain_inputs = (0,)
    ufunc = np.cosh

    def backward(self, g):
        (x,) = self.saved_tensors
        return (g * x.sinh(),)


class Erfc(Unary):
    """1 - erf(x) to its relative precision far in the tail (kernels.erfc_into)."""

    retain_inputs = (0,)
    small_elems = 0

    def kernel(self, xp, x, y):
        kernels.erfc_into(xp, x, y)

    def backward(self, g):
        # -2.0 / sqrt(M_PI) * exp(-(self.pow(2))) * grad: every temporary lives until the end
        (x,) = self.saved_tensors
        sq = x.pow(2)
        neg = -sq
        e = neg.exp()
        scaled = -2.0 / math.sqrt(math.pi) * e
        return (scaled * g,)


class Predicate(Function):
    """isnan / isinf / isfinite / signbit: a bool tensor of the input's shape, no gradient."""

    differentiable = False
    ufunc = None

    apply = specialised_apply(1)  # one tensor argument

    def forward(self, x, out=None):
        y = result_buffer(out, x.shape, dtypes.bool_, x._device, self.public_name)
        if x._device.type != "meta":
            xp = kernels.xp_of(x)
            getattr(xp, self.ufunc.__name__)(x._data, out=y._data)
        return y

    @property
    def public_name(self) -> str:
        return type(self).__name__.lower()


class IsNan(Predicate):
    ufunc = np.isnan


class IsInf(Predicate):
    ufunc = np.isinf


class IsFinite(Predicate):
    ufunc = np.isfinite


class SignBit(Predicate):
    ufunc = np.signbit
