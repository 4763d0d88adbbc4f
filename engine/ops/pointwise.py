"""More elementwise math, with PyTorch's gradients (derivatives.yaml) and in-place forms:
rounding (floor, ceil, round, trunc, frac), logs and exponentials (log1p, expm1, log2, log10,
exp2), trigonometry (tan, asin, acos, atan, sinh, cosh), erfc; the predicates isnan, isinf,
isfinite, signbit (bool results, no gradient); and the binary remainder, fmod, atan2,
logical_xor, clamp_min, clamp_max.

Each backward is derivatives.yaml's formula written with the engine's ops in its order, so its
temporaries are torch's: what an op keeps (its input or its result) decides what its in-place
form costs, as for the ops in elementwise.py.
"""

from __future__ import annotations

import math

import numpy as np

from engine import dtypes, kernels
from engine.autograd.function import Function, specialised_apply
from engine.ops.common import result_buffer, sum_to
from engine.ops.elementwise import _SAVED, Binary, Clamp, Unary, _cmp, _uf
from engine.tensor import Tensor


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
        _uf(xp, np.add, y, 0.0, out=y)  # fmod's zeros keep x's sign; x - trunc(x)'s are +0.0

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


# --------------------------------------------------------------------------------------------
# binary: remainder, fmod, atan2 (a tensor and a tensor or a Python number)
# --------------------------------------------------------------------------------------------
class _Modulo(Binary):
    """remainder (the divisor's sign, Python's %) / fmod (the dividend's sign, C's fmod).
    derivatives.yaml: self: grad; other: -grad * self.div(other, rounding_mode), the quotient
    and -grad alive to the end of the statement."""

    rounding = "floor"

    def to_save(self, tensors):
        # other's gradient reads both operands; self's reads neither
        self._save_idx = (0, 1) if self.a_t and self.b_t and tensors[1].requires_grad else ()
        return self._save_idx

    def backward(self, g):
        if not self.a_t:  # remainder(number, tensor): torch's node is NotImplemented
            raise RuntimeError(f"derivative for aten::{self.opname} is not implemented")
        na, nb = self._needs()
        gb = None
        if nb:
            a, b = self.saved_tensors
            quotient = a.div(b, rounding_mode=self.rounding)
            neg = -g
            gb = neg * quotient
        return self._grads(g if na else None, gb)

    def name(self) -> str:
        if not self.a_t:
            return "NotImplemented"
        return type(self).__name__ + ("Backward1" if self.a_t and self.b_t else "Backward0")


class Remainder(_Modulo):
    opname = "remainder"
    ufunc = np.remainder
    rounding = "floor"
    plain_ufunc = False

    def kernel(self, xp, a, b, y, dtype=None):
        if y.dtype.kind != "f":
            return super().kernel(xp, a, b, y, dtype)
        # torch's float remainder: mod = fmod(a, b), plus b where mod is not 0 and its sign is
        # not b's; a zero keeps a's sign (numpy's takes b's), and every device computes it so
        if hasattr(b, "dtype") and (b.dtype != y.dtype or xp.may_share_memory(b, y)):
            b = b.astype(y.dtype)  # b in the result's dtype, as torch adds it (and kept apart)
        _uf(xp, np.fmod, a, b, out=y, dtype=dtype)
        fix = xp.not_equal(y, 0)
        b_neg = xp.less(b, 0) if hasattr(b, "dtype") else b < 0  # b: an array or a number
        xp.logical_and(fix, xp.not_equal(xp.less(y, 0), b_neg), out=fix)
        xp.copyto(y, y + b, where=fix)


class Fmod(_Modulo):
    opname = "fmod"
    ufunc = np.fmod
    rounding = "trunc"


class Atan2(Binary):
    """atan2(self, other), floats. torch 2.13's atan2_backward: denom = self * self + other *
    other, recip = 1 / denom with 0 where denom is 0; self: grad * other * recip; other: grad *
    -self * recip (one statement: its temporaries and denom live until both are made)."""

    opname = "atan2"
    ufunc = np.arctan2
    float_result = True

    def to_save(self, tensors):
        self._save_idx = (0, 1)
        return self._save_idx

    def backward(self, g):
        na, nb = self._needs()
        a, b = self.saved_tensors
        sq_a = a * a
        sq_b = b * b
        denom = sq_a + sq_b
        del sq_a, sq_b
        recip = denom.reciprocal()
        at_origin = denom == 0  # atan2(0, 0): a zero gradient, not a NaN (torch 2.13)
        recip.masked_fill_(at_origin, 0)
        del at_origin
        # both gradients are one C++ statement: its temporaries live until both are made
        ga = gb = t_a = neg = t_b = None
        if na:
            t_a = g * b
            ga = t_a * recip
        if nb:
            neg = -a
            t_b = g * neg
            gb = t_b * recip
        del t_a, neg, t_b, denom
        return self._grads(ga, gb)


class Xlogy(Binary):
    """xlogy(self, other) = self * log(other), 0 where self is 0 (NaN where other is NaN), in a
    floating dtype. derivatives.yaml (torch 2.13), one statement per gradient: self:
    xlogy(grad, other).masked_fill((self == 0) & (other <= 0), 0); other: grad * self / other."""

    opname = "xlogy"
    plain_ufunc = False
    float_result = True

    def kernel(self, xp, a, b, y, dtype=None):
        # (y may be a itself, in place: a is read before y is written). A Python number operand
        # is worked out in Python: CuPy's ufuncs want an array among their inputs.
        scalar_a, scalar_b = not hasattr(a, "ndim"), not hasattr(b, "ndim")
        zero = (a == 0) if scalar_a else xp.equal(a, 0)
        with np.errstate(divide="ignore", invalid="ignore"):
            if scalar_b:
                log_b = math.log(b) if b > 0 else (-math.inf if b == 0 else math.nan)
            else:
                log_b = xp.log(b, dtype=dtype)
            xp.multiply(a, log_b, out=y, casting="unsafe")
        if scalar_a and not zero:
            return
        other_nan = math.isnan(b) if scalar_b else xp.isnan(b)
        if scalar_a:  # self is 0: the result is 0 but NaN where other is
            xp.copyto(y, 0, where=~other_nan)
        elif scalar_b:
            if not other_nan:
                xp.copyto(y, 0, where=zero)
        else:
            xp.copyto(y, 0, where=xp.logical_and(zero, ~other_nan))

    def to_save(self, tensors):
        return (0, 1) if self.a_t and self.b_t else (0,)  # (indices among the tensor operands)

    def _operands(self):
        saved = self.saved_tensors
        if self.a_t and self.b_t:
            return saved
        return (saved[0], self.scalar) if self.a_t else (self.scalar, saved[0])

    def backward(self, g):
        from engine import ops

        na, nb = self._needs()
        a, b = self._operands()
        ga = gb = None
        if nb:  # (torch's XlogyBackward0 computes other's gradient first, as its profiler shows)
            ga_b = g * a
            gb = ga_b / b
            del ga_b
        if na and not isinstance(b, Tensor):
            # a number other (XlogyBackward2): torch 2.13 masks self's zeros only where other
            # is not > 0 (NaN included), and makes no mask at all when it is
            lg = ops.xlogy(g, b)
            if b > 0.0:
                ga = lg
            else:
                at_zero = a == 0.0
                ga = lg.masked_fill(at_zero, 0.0)
                del at_zero, lg  # (the mask first, as torch's temporaries go)
        elif na:
            lg = ops.xlogy(g, b)
            # (self == 0.) & (other <= 0.): the compiler torch is built with evaluates the
            # operands right to left; its temporaries, the last made freed first
            nonpos = b <= 0.0
            at_zero = a == 0.0
            both = at_zero & nonpos
            ga = lg.masked_fill(both, 0.0)
            del both, at_zero, nonpos, lg
        return self._grads(ga, gb)

    def name(self) -> str:
        if self.a_t and self.b_t:
            return "XlogyBackward0"
        return "XlogyBackward1" if not self.a_t else "XlogyBackward2"


LogicalXor = _cmp("logical_xor", np.logical_xor)


class ClampMin(Clamp):
    """clamp_min(x, min). derivatives.yaml, one statement per gradient: self: where(self >=
    min, grad, 0); a tensor min: where(self < min, grad, 0)."""

    def _keeps(self, x, bound):
        return x >= bound

    def _hits(self, x, bound):
        return x < bound

    def backward(self, g):
        saved = list(self.saved_tensors)
        x = saved.pop(0)
        bound = saved.pop(0) if saved else next(b for b in self.bounds if b is not None)
        nf = self._edges
        gx = gb = None
        if nf[0] is not None:
            keep = self._keeps(x, bound)
            gx = sum_to(g.where(keep, 0.0), self.x_shape)
            del keep
        if isinstance(bound, Tensor) and nf[1] is not None:
            hit = self._hits(x, bound)
            gb = sum_to(g.where(hit, 0.0), bound.shape)
            del hit
        return (gx, gb) if isinstance(bound, Tensor) else (gx,)

    def name(self) -> str:
        return "ClampMinBackward1" if self.bounds[0] is _SAVED else "ClampMinBackward0"


class ClampMax(ClampMin):
    """clamp_max(x, max): self: where(self <= max, grad, 0); a tensor max: where(self > max,
    grad, 0)."""

    def _keeps(self, x, bound):
        return x <= bound

    def _hits(self, x, bound):
        return x > bound

    def name(self) -> str:
        return "ClampMaxBackward1" if self.bounds[1] is _SAVED else "ClampMaxBackward0"


class NanToNum(Function):
    """nan_to_num(nan, posinf, neginf): NaN, +inf and -inf replaced (the dtype's largest and
    smallest finite values by default). derivatives.yaml: grad * isfinite(self)."""

    apply = specialised_apply(1)  # one tensor argument

    retain_inputs = (0,)

    def forward(self, x, out=None, nan=0.0, posinf=None, neginf=None):
        y = result_buffer(out, x.shape, x._dtype, x._device, "nan_to_num")
        if x._device.type != "meta":
            xp = kernels.xp_of(x)
            if y._data is not x._data:
                xp.copyto(y._data, x._data)
            if x._dtype.is_floating_point:
                xp.nan_to_num(y._data, copy=False, nan=nan, posinf=posinf, neginf=neginf)
                if x._dtype.emulated:  # bfloat16 held in float32: its own largest value
                    dtypes.round_to_bfloat16_(y._data)
        return y

    def backward(self, g):
        (x,) = self.saved_tensors
        finite = x.isfinite()
        return (g * finite,)

    def name(self):
        return "NanToNumBackward0"
