"""More elementwise math with torch's names, dtypes, refusals and gradients (derivatives.yaml):

- unary: asinh / acosh / atanh (arcsinh ...), sinc, deg2rad / rad2deg, logit (eps), sgn,
  lgamma, digamma (torch's own series, numpy alone), bitwise_not; the predicates isposinf,
  isneginf, isreal;
- binary: hypot, logaddexp, logaddexp2, fmax, fmin, copysign, heaviside, floor_divide,
  float_power, bitwise_and / or / xor / left_shift / right_shift and the operators & | ^ ~ << >>
  (with their reflected and in-place forms);
- in-place forms where torch has one, and Tensor's small introspection methods (is_complex,
  is_signed, is_nonzero, is_same_size, ndimension, positive, numel ...).

Each backward is derivatives.yaml's formula with the engine's ops in its order, its
temporaries alive to the end of the C++ statement, so that its blocks are torch's. Where torch
has no derivative (heaviside, floor_divide, the in-place inverse hyperbolics) the node is
torch's NotImplemented one: backward raises torch's words.
"""

from __future__ import annotations

import math

import numpy as np

from engine import dtypes, kernels
from engine.autograd.function import Function, specialised_apply
from engine.ops.common import result_buffer
from engine.ops.elementwise import Binary, Sign, Unary, _uf
from engine.ops.registry import alias, register
from engine.tensor import Tensor


def _not_for(kernel: str, dt) -> NotImplementedError:
    return NotImplementedError(f"\"{kernel}\" not implemented for '{dt.scalar_name}'")


_host = kernels.host


# ---------------------------------------------------------------------------------------------
# unary
# ---------------------------------------------------------------------------------------------
class NotDifferentiable:
    """Mixin: torch's NotImplemented node; backward raises `message`."""

    message = "derivative is not implemented"
    error = RuntimeError

    def backward(self, *grads):
        raise self.error(self.message)

    def name(self):
        return "NotImplemented"


class FloatUnary(Unary):
    """A float op whose integer or bool input is computed in the result's dtype (numpy would
    pick its float16 loop for a bool input)."""

    small_elems = 0  # always kernel()

    def kernel(self, xp, x, y):
        _uf(xp, self.ufunc, x if x.dtype == y.dtype else x.astype(y.dtype), out=y)


class Asinh(FloatUnary):
    retain_inputs = (0,)
    ufunc = np.arcsinh

    def backward(self, g):
        # grad * (self.pow(2) + 1).rsqrt()
        (x,) = self.saved_tensors
        squared = x.pow(2)
        plus = squared + 1
        root = plus.rsqrt()
        gx = g * root
        del root, plus, squared
        return (gx,)


class Acosh(FloatUnary):
    retain_inputs = (0,)
    ufunc = np.arccosh

    def backward(self, g):
        # grad * (self * self - 1).rsqrt()
        (x,) = self.saved_tensors
        squared = x * x
        minus = squared - 1
        root = minus.rsqrt()
        gx = g * root
        del root, minus, squared
        return (gx,)


class Atanh(FloatUnary):
    retain_inputs = (0,)
    ufunc = np.arctanh

    def backward(self, g):
        # grad * 1 / (1 - self.pow(2)): the divisor first (ATen's right operand)
        (x,) = self.saved_tensors
        squared = x.pow(2)
        denom = 1 - squared
        times = g * 1
        gx = times / denom
        del times, denom, squared
        return (gx,)


def _inplace_hyperbolic(cls, name):
    """asinh_ / acosh_ / atanh_: derivatives.yaml's not_implemented("inplace version of ...")."""
    return type(
        cls.__name__ + "_",
        (NotDifferentiable, cls),
        {
            "retain_inputs": (),
            "error": NotImplementedError,
            "message": f"the derivative for 'inplace version of {name}' is not implemented.",
        },
    )


Asinh_ = _inplace_hyperbolic(Asinh, "asinh")
Acosh_ = _inplace_hyperbolic(Acosh, "acosh")
Atanh_ = _inplace_hyperbolic(Atanh, "atanh")


class Sinc(Unary):
    retain_inputs = (0,)

    def kernel(self, xp, x, y):
        # torch's: sin(pi * x) / (pi * x), 1 at 0
        prod = math.pi * x
        with np.errstate(divide="ignore", invalid="ignore"):
            y[...] = xp.where(x == 0, 1.0, xp.sin(prod) / prod)

    def backward(self, g):
        # sinc_backward: self_pi = self * pi; self_squared_pi = self * self * pi;
        # out = grad * ((self_pi * self_pi.cos()) - self_pi.sin()) / self_squared_pi;
        # where(self_squared_pi == 0, 0, out)
        (x,) = self.saved_tensors
        self_pi = x * math.pi
        sq = x * x
        self_squared_pi = sq * math.pi
        del sq
        cos = self_pi.cos()
        prod = self_pi * cos
        sin = self_pi.sin()
        diff = prod - sin
        times = g * diff
        out = times / self_squared_pi
        del times, diff, sin, prod, cos
        at_zero = self_squared_pi == 0.0
        zero = kernels.zeros((), g._dtype, g._device)
        gx = _where(at_zero, zero, out)
        del at_zero, zero, out, self_squared_pi, self_pi
        return (gx,)


def _where(cond, a, b):
    from engine.ops import where

    return where(cond, a, b)


class _Scale(Unary):
    """deg2rad / rad2deg: x * factor; the gradient grad * factor."""

    factor = 1.0

    def kernel(self, xp, x, y):
        _uf(xp, np.multiply, x, self.factor, out=y)

    def backward(self, g):
        return (g * self.factor,)


class Deg2Rad(_Scale):
    factor = math.pi / 180.0

    def name(self):
        return "Deg2RadBackward0"


class Rad2Deg(_Scale):
    factor = 180.0 / math.pi

    def name(self):
        return "Rad2DegBackward0"


class Logit(Unary):
    """log(x / (1 - x)), x clamped to [eps, 1 - eps] when eps is given. Backward is
    logit_backward, one kernel: grad / (x (1 - x)); 0 outside [eps, 1 - eps] (eps given), NaN
    outside [0, 1] (no eps)."""

    retain_inputs = (0,)
    eps = None

    def forward(self, x, out=None, eps=None):
        self.eps = eps
        return super().forward(x, out=out)

    small_elems = 0  # always kernel(): it reads eps

    def kernel(self, xp, x, y):
        eps = self.eps
        z = x if eps is None else xp.clip(x, eps, 1.0 - eps)
        with np.errstate(divide="ignore", invalid="ignore"):
            if y.dtype != z.dtype:
                z = z.astype(y.dtype)
            xp.divide(z, 1.0 - z, out=y)
            xp.log(y, out=y)

    def backward(self, g):
        (x,) = self.saved_tensors
        gx = kernels.empty(g.shape, g._dtype, g._device)
        if g._device.type != "meta":
            xp = kernels.xp_of(g)
            xd, gd = x._data, g._data
            with np.errstate(divide="ignore", invalid="ignore"):
                val = gd / (xd * (1.0 - xd))
                if self.eps is None:
                    val = xp.where((xd < 0) | (xd > 1), np.nan, val)
                else:
                    val = xp.where((xd < self.eps) | (xd > 1.0 - self.eps), 0.0, val)
            gx._data[...] = val
        return (gx,)


class Sgn(Unary):
    """sgn for real tensors is sign. Its gradient is torch's _efficientzerotensor, a zero
    tensor without memory: here no gradient at all (nothing allocated, as in torch; the
    input's .grad stays None where torch's is a ZeroTensor)."""

    float_only = False
    kernel = Sign.kernel  # (a NaN's sign is 0)

    def forward(self, x, out=None):
        if x._dtype is dtypes.bool_:
            y = result_buffer(out, x.shape, x._dtype, x._device, "sgn")
            if x._device.type != "meta":
                y._data[...] = x._data
            return y
        return super().forward(x, out=out)

    def backward(self, g):
        return (None,)


# digamma and trigamma: torch's calc_digamma / calc_trigamma (ATen/native/Math.h)
_PSI_10 = 2.25175258906672110764
_PSI_A = (
    8.33333333333333333333e-2,
    -2.10927960927960927961e-2,
    7.57575757575757575758e-3,
    -4.16666666666666666667e-3,
    3.96825396825396825397e-3,
    -8.33333333333333333333e-3,
    8.33333333333333333333e-2,
)


def _digamma_np(x: np.ndarray) -> np.ndarray:
    """torch's calc_digamma in float64, elementwise: reflection below 0, the recurrence up to
    10, then the asymptotic series."""
    x = np.asarray(x, dtype=np.float64)
    out = np.empty_like(x)
    with np.errstate(divide="ignore", invalid="ignore"):
        zero = x == 0
        neg = x < 0
        neg_int = neg & (x == np.trunc(x))
        # reflection: digamma(1 - x) - pi / tan(pi * frac(x))
        z = np.where(neg, 1.0 - x, x)
        result = np.zeros_like(z)
        for _ in range(12):  # push z to >= 10 (at most 10 steps from z >= 0)
            small = (z < 10) & (z > 0)
            if not small.any():
                break
            result = np.where(small, result - 1.0 / np.where(small, z, 1.0), result)
            z = np.where(small, z + 1.0, z)
        ten = z == 10
        zz = 1.0 / (z * z)
        poly = np.zeros_like(z)
        for c in _PSI_A:
            poly = poly * zz + c
        y = np.where(z < 1.0e17, zz * poly, 0.0)
        series = result + np.log(z) - 0.5 / z - y
        val = np.where(ten, result + _PSI_10, series)
        frac = x - np.trunc(x)
        val = np.where(neg, val - math.pi / np.tan(math.pi * frac), val)
        val = np.where(neg_int, np.nan, val)
        val = np.where(zero, np.copysign(np.inf, -x), val)
        out[...] = val
    return out


def _trigamma_xp(xp, x):
    """torch's calc_trigamma in float64, elementwise (numpy's or CuPy's arrays: cupyx's
    polygamma(1, x) is ~1e-9 off, torch's CUDA kernel runs this same formula)."""
    x = xp.asarray(x, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        low = x < 0.5
        sin_pi_x = xp.sin(math.pi * x)
        result = xp.where(low, -(math.pi * math.pi) / (sin_pi_x * sin_pi_x), 0.0)
        sign = xp.where(low, -1.0, 1.0)
        z = xp.where(low, 1.0 - x, x)
        for _ in range(6):
            result = result + 1.0 / (z * z)
            z = z + 1.0
        ixx = 1.0 / (z * z)
        result = (
            result
            + (1.0 + 1.0 / (2.0 * z) + ixx * (1.0 / 6.0 - ixx * (1.0 / 30.0 - ixx * (1.0 / 42.0))))
            / z
        )
        return sign * result


def _special(xp, fn_np, cupy_name, x, y):
    """y = f(x) with numpy's float64 series on cpu (cast into y), cupyx.scipy.special on cuda."""
    if xp is np:
        y[...] = fn_np(x)
    else:
        import cupyx.scipy.special as sp

        y[...] = getattr(sp, cupy_name)(x)


_lgamma_np = np.frompyfunc(math.lgamma, 1, 1)


def _lgamma(a):
    a = np.asarray(a, dtype=np.float64)
    out = np.empty_like(a)
    flat = a.reshape(-1)
    res = np.empty(flat.shape, np.float64)
    for i, v in enumerate(flat.tolist()):
        try:
            res[i] = math.lgamma(v)
        except (ValueError, OverflowError):  # poles (0, -1, ...) are +inf, as std::lgamma
            res[i] = math.inf if not math.isnan(v) else math.nan
    out[...] = res.reshape(a.shape)
    return out


class Lgamma(Unary):
    retain_inputs = (0,)

    def kernel(self, xp, x, y):
        _special(xp, _lgamma, "gammaln", x, y)

    def backward(self, g):
        (x,) = self.saved_tensors
        d = x.digamma()
        gx = g * d
        del d
        return (gx,)


class Digamma(Unary):
    retain_inputs = (0,)

    def kernel(self, xp, x, y):
        _special(xp, _digamma_np, "digamma", x, y)

    def backward(self, g):
        # grad * polygamma(1, self)
        (x,) = self.saved_tensors
        tri = _trigamma(x)
        gx = g * tri
        del tri
        return (gx,)


def _trigamma(x: Tensor) -> Tensor:
    """polygamma(1, x): one result buffer (not differentiable here)."""
    y = kernels.empty(x.shape, x._dtype, x._device)
    if x._device.type != "meta":
        y._data[...] = _trigamma_xp(kernels.xp_of(x), x._data)
    return y


class BitwiseNot(Unary):
    float_only = False
    ufunc = np.invert
    differentiable = False

    def forward(self, x, out=None):
        if x._dtype.is_floating_point:
            raise _not_for("bitwise_not_cpu", x._dtype)
        return super().forward(x, out=out)


class _Predicate(Function):
    differentiable = False
    apply = specialised_apply(1)

    def forward(self, x, out=None):
        y = result_buffer(out, x.shape, dtypes.bool_, x._device, self.opname)
        if x._device.type != "meta":
            xp = kernels.xp_of(x)
            xd = x._data
            if self.opname == "isreal" or not x._dtype.is_floating_point:
                y._data[...] = self.opname == "isreal"
            elif self.opname == "isposinf":
                xp.logical_and(xp.isinf(xd), xd > 0, out=y._data)
            else:
                xp.logical_and(xp.isinf(xd), xd < 0, out=y._data)
        return y


class IsPosInf(_Predicate):
    opname = "isposinf"


class IsNegInf(_Predicate):
    opname = "isneginf"


class IsReal(_Predicate):
    opname = "isreal"


# ---------------------------------------------------------------------------------------------
# binary
# ---------------------------------------------------------------------------------------------
class _FloatBinary(Binary):
    """Tensor-tensor ops that refuse integer and bool results (torch's "<op>_cpu" not
    implemented for 'Long')."""

    kernel_name = ""

    def forward(self, a, b, out=None):
        from engine.ops.common import result_type

        dt = result_type(a, b)
        if not dt.is_floating_point:
            raise _not_for(self.kernel_name, dt)
        return super().forward(a, b, out=out)

    def to_save(self, tensors):
        return (0, 1)


class Hypot(_FloatBinary):
    opname = "hypot"
    kernel_name = "hypot_cpu"
    ufunc = np.hypot
    retain_output = True

    def backward(self, g):
        # self: grad * self / result; other: grad * other / result
        a, b, y = self.saved_tensors
        na, nb = self._needs()
        ga = gb = None
        if nb:  # torch's generated backward makes other's gradient first
            t = g * b
            gb = t / y
            del t
        if na:
            t = g * a
            ga = t / y
            del t
        return self._grads(ga, gb)


class Logaddexp(_FloatBinary):
    opname = "logaddexp"
    kernel_name = "logaddexp_cpu"
    ufunc = np.logaddexp
    base2 = False

    def backward(self, g):
        # self: grad / (1 + exp(other - self)); other: grad / (1 + exp(self - other))
        # (logaddexp2: pow(2, .) for exp)
        a, b = self.saved_tensors
        na, nb = self._needs()
        gb = self._one(g, a, b) if nb else None  # other's first, as torch's generated code
        ga = self._one(g, b, a) if na else None
        return self._grads(ga, gb)

    def _one(self, g, p, q):
        diff = p - q
        e = (2.0**diff) if self.base2 else diff.exp()
        denom = 1 + e
        gx = g / denom
        del denom, e, diff
        return gx


class Logaddexp2(Logaddexp):
    opname = "logaddexp2"
    kernel_name = "logaddexp2_cpu"
    ufunc = np.logaddexp2
    base2 = True


class Fmax(Binary):
    """fmax / fmin: the larger (smaller) value, the other where one is NaN."""

    opname = "fmax"
    ufunc = np.fmax
    greater = True

    def to_save(self, tensors):
        return (0, 1)

    def backward(self, g):
        # self: grad.masked_fill((self >= other).logical_or_(other.isnan()).logical_not_(), 0)
        # other: grad.masked_fill((self >= other).logical_or_(other.isnan()), 0)
        a, b = self.saved_tensors
        na, nb = self._needs()
        gb = self._one(g, a, b, False) if nb else None  # other's first, as torch's code
        ga = self._one(g, a, b, True) if na else None
        return self._grads(ga, gb)

    def _one(self, g, a, b, for_self):
        wins = a >= b if self.greater else a <= b
        nan = b.isnan()
        _inplace_bool(wins, nan, "or")
        if for_self:
            _inplace_bool(wins, None, "not")
        gx = g.masked_fill(wins, 0)
        del nan, wins
        return gx


class Fmin(Fmax):
    opname = "fmin"
    ufunc = np.fmin
    greater = False


def _inplace_bool(t: Tensor, other, op: str) -> None:
    """logical_or_ / logical_not_ of a bool mask in place (no gradient: masks have none)."""
    if t._device.type == "meta":
        return
    xp = kernels.xp_of(t)
    if op == "or":
        xp.logical_or(t._data, other._data, out=t._data)
    else:
        xp.logical_not(t._data, out=t._data)


class Copysign(Binary):
    """|self| with other's sign, in a floating dtype. Backward (copysign_tensor_self_backward):
    ratio = result / self, 0 where self is 0, times grad; other's gradient is zeros."""

    opname = "copysign"
    ufunc = np.copysign
    float_result = True
    retain_output = True

    def to_save(self, tensors):
        return (0,)

    def backward(self, g):
        a, y = self.saved_tensors
        na, nb = self._needs()
        ga = gb = None
        if nb:  # other's first, as torch's generated code
            gb = kernels.zeros(self.shapes[1], g._dtype, g._device)
        if na:
            ratio = y / a
            zero = a == 0
            ratio.masked_fill_(zero, 0)
            del zero
            ga = g * ratio
            del ratio
        if not self.b_t:
            return (ga,)
        if self.b_t and not self.a_t:
            return (gb,)
        from engine.ops.common import sum_to

        return (None if ga is None else sum_to(ga, self.shapes[0]), gb)

    def name(self):
        return "CopysignBackward0" if self.b_t else "CopysignBackward1"


class Heaviside(NotDifferentiable, Binary):
    opname = "heaviside"
    message = "derivative for aten::heaviside is not implemented"

    def forward(self, a, b, out=None):
        if a._dtype is not b._dtype:
            raise RuntimeError(
                "heaviside is not yet implemented for tensors with different dtypes."
            )
        return super().forward(a, b, out=out)

    def kernel(self, xp, a, b, y, dtype=None):
        y[...] = xp.where(a == 0, b, (a > 0).astype(y.dtype))

    plain_ufunc = False


class FloorDivide(NotDifferentiable, Binary):
    """div(rounding_mode="floor") without a gradient (torch has none for floor_divide)."""

    opname = "floor_divide"
    message = "derivative for aten::floor_divide is not implemented"

    def forward(self, a, b, out=None):
        from engine.autograd.grad_mode import no_grad
        from engine.ops import div

        with no_grad():
            return div(a, b, rounding_mode="floor", out=out)


class _Bitwise(Binary):
    differentiable = False
    kernel_name = ""

    def forward(self, a, b, out=None):
        for v in (a, b):
            dt = v._dtype if isinstance(v, Tensor) else None
            if (dt is not None and dt.is_floating_point) or isinstance(v, float):
                from engine.ops.common import result_type

                raise _not_for(self.kernel_name, result_type(a, b))
        return super().forward(a, b, out=out)


class BitwiseAnd(_Bitwise):
    opname = "bitwise_and"
    kernel_name = "bitwise_and_cpu"
    ufunc = np.bitwise_and


class BitwiseOr(_Bitwise):
    opname = "bitwise_or"
    kernel_name = "bitwise_or_cpu"
    ufunc = np.bitwise_or


class BitwiseXor(_Bitwise):
    opname = "bitwise_xor"
    kernel_name = "bitwise_xor_cpu"
    ufunc = np.bitwise_xor


class _Shift(_Bitwise):
    plain_ufunc = False
    left = True

    def kernel(self, xp, a, b, y, dtype=None):
        a = xp.asarray(a, dtype=y.dtype)
        b = xp.asarray(b)
        bits = y.dtype.itemsize * 8
        big = (b < 0) | (b >= bits)
        safe = xp.where(big, 0, b).astype(y.dtype)
        if self.left:
            shifted = xp.left_shift(a, safe)
            y[...] = xp.where(big, 0, shifted)
        else:
            shifted = xp.right_shift(a, safe)
            y[...] = xp.where(big, xp.where(a < 0, -1, 0).astype(y.dtype), shifted)


class BitwiseLeftShift(_Shift):
    opname = "bitwise_left_shift"
    kernel_name = "lshift_cpu"


class BitwiseRightShift(_Shift):
    opname = "bitwise_right_shift"
    kernel_name = "rshift_cpu"
    left = False


# ---------------------------------------------------------------------------------------------
# the public functions
# ---------------------------------------------------------------------------------------------
# in-place forms torch also has as torch.<name>_ (the others are Tensor methods only)
_TORCH_INPLACE = ("asinh_", "acosh_", "atanh_", "sinc_", "deg2rad_", "rad2deg_", "logit_")


def _unary(name, cls, inplace_cls=None):
    apply, apply_ = cls.apply, (inplace_cls or cls).apply

    def fn(input, *, out=None):
        return apply(input, out=out, op=name)

    def fn_(input):
        return apply_(input, out=input, op=name + "_")

    fn.__name__, fn_.__name__ = name, name + "_"
    register(name, fn, method=True, inplace=name + "_")
    register(name + "_", fn_, function=name + "_" in _TORCH_INPLACE, method=True)
    return fn


asinh = _unary("asinh", Asinh, Asinh_)
acosh = _unary("acosh", Acosh, Acosh_)
atanh = _unary("atanh", Atanh, Atanh_)
sinc = _unary("sinc", Sinc)
deg2rad = _unary("deg2rad", Deg2Rad)
rad2deg = _unary("rad2deg", Rad2Deg)
sgn = _unary("sgn", Sgn)
lgamma = _unary("lgamma", Lgamma)
digamma = _unary("digamma", Digamma)
bitwise_not = _unary("bitwise_not", BitwiseNot)
for _alias, _target in (("arcsinh", "asinh"), ("arccosh", "acosh"), ("arctanh", "atanh")):
    alias(_alias, _target)
    alias(_alias + "_", _target + "_", function=True, method=True)


def logit(input, eps=None, *, out=None):
    """log(p / (1 - p)); eps clamps p to [eps, 1 - eps] first."""
    return Logit.apply(input, out=out, op="logit", eps=eps)


def logit_(input, eps=None):
    return Logit.apply(input, out=input, op="logit_", eps=eps)


register("logit", logit, method=True, inplace="logit_")
register("logit_", logit_, method=True)


def _binary(name, cls, inplace=True):
    apply = cls.apply

    def fn(input, other, *, out=None):
        return apply(input, other, out=out, op=name)

    def fn_(input, other):
        return apply(input, other, out=input, op=name + "_")

    fn.__name__, fn_.__name__ = name, name + "_"
    register(name, fn, method=True, inplace=name + "_" if inplace else None)
    if inplace:
        register(name + "_", fn_, function=False, method=True)
    return fn, fn_


hypot, hypot_ = _binary("hypot", Hypot)
logaddexp, _ = _binary("logaddexp", Logaddexp, inplace=False)
logaddexp2, _ = _binary("logaddexp2", Logaddexp2, inplace=False)
fmax, _ = _binary("fmax", Fmax, inplace=False)
fmin, _ = _binary("fmin", Fmin, inplace=False)
copysign, copysign_ = _binary("copysign", Copysign)
heaviside, heaviside_ = _binary("heaviside", Heaviside)
floor_divide, floor_divide_ = _binary("floor_divide", FloorDivide)
bitwise_and, bitwise_and_ = _binary("bitwise_and", BitwiseAnd)
bitwise_or, bitwise_or_ = _binary("bitwise_or", BitwiseOr)
bitwise_xor, bitwise_xor_ = _binary("bitwise_xor", BitwiseXor)
bitwise_left_shift, bitwise_left_shift_ = _binary("bitwise_left_shift", BitwiseLeftShift)
bitwise_right_shift, bitwise_right_shift_ = _binary("bitwise_right_shift", BitwiseRightShift)


def float_power(input, exponent, *, out=None):
    """input ** exponent in float64 (torch's composite: both cast to double, then pow)."""
    from engine.ops import pow as _pow
    from engine.ops.elementwise import PowTensor

    if out is not None:
        raise NotImplementedError("float_power: out= is not supported")
    f64 = dtypes.float64
    if not isinstance(input, Tensor):
        return PowTensor.apply(input, exponent.to(f64), op="float_power")
    base = input.to(f64)
    if isinstance(exponent, Tensor):
        return _pow(base, exponent.to(f64))
    return _pow(base, float(exponent))


def float_power_(input, exponent):
    from engine.ops import pow_

    if input._dtype is not dtypes.float64:
        raise RuntimeError(
            f"the base given to float_power_ has dtype {input._dtype.scalar_name} but the "
            "operation's result requires dtype Double"
        )
    if isinstance(exponent, Tensor):
        return pow_(input, exponent.to(dtypes.float64))
    return pow_(input, float(exponent))


register("float_power", float_power, method=True, inplace="float_power_")
register("float_power_", float_power_, function=False, method=True)


def _predicate(name, cls):
    def fn(input):
        return cls.apply(input, op=name)

    fn.__name__ = name
    register(name, fn, method=True)
    return fn


isposinf = _predicate("isposinf", IsPosInf)
isneginf = _predicate("isneginf", IsNegInf)
isreal = _predicate("isreal", IsReal)


# ---------------------------------------------------------------------------------------------
# operators: & | ^ ~ << >> (reflected and in place)
# ---------------------------------------------------------------------------------------------
def _invert(self):
    if self._dtype.is_floating_point:
        raise TypeError(
            "~ (operator.invert) is only implemented on integer and Boolean-type tensors"
        )
    return bitwise_not(self)


def _reflected(fn):
    def r(self, other):
        return fn(other, self) if isinstance(other, Tensor) else _with_number(fn, other, self)

    return r


def _with_number(fn, number, tensor):
    """number OP tensor: the number as a 0-d tensor of its own kind (torch's wrapped scalar)."""
    from engine import creation

    kind = dtypes.bool_ if isinstance(number, bool) else dtypes.int64
    if isinstance(number, float):
        kind = dtypes.get_default_dtype()
    return fn(creation.tensor(number, dtype=kind, device=tensor._device), tensor)


_OPERATORS = {
    "__and__": bitwise_and,
    "__or__": bitwise_or,
    "__xor__": bitwise_xor,
    "__lshift__": bitwise_left_shift,
    "__rshift__": bitwise_right_shift,
    "__rand__": _reflected(bitwise_and),
    "__ror__": _reflected(bitwise_or),
    "__rxor__": _reflected(bitwise_xor),
    "__rlshift__": _reflected(bitwise_left_shift),
    "__rrshift__": _reflected(bitwise_right_shift),
    "__iand__": bitwise_and_,
    "__ior__": bitwise_or_,
    "__ixor__": bitwise_xor_,
    "__ilshift__": bitwise_left_shift_,
    "__irshift__": bitwise_right_shift_,
    "__invert__": _invert,
}


# ---------------------------------------------------------------------------------------------
# introspection and small tensor-level forms
# ---------------------------------------------------------------------------------------------
def is_complex(input) -> bool:
    """False: the engine has no complex dtypes."""
    return False


def is_signed(input) -> bool:
    return input._dtype not in (dtypes.uint8, dtypes.bool_)


def is_nonzero(input) -> bool:
    n = input.numel()
    if n == 0:
        raise RuntimeError("Boolean value of Tensor with no values is ambiguous")
    if n > 1:
        raise RuntimeError("Boolean value of Tensor with more than one value is ambiguous")
    return bool(input.item())


def is_same_size(input, other) -> bool:
    return tuple(input.shape) == tuple(other.shape)


def ndimension(input) -> int:
    return input.ndim


def positive(input):
    """The input itself (torch.positive), refused for bool."""
    if input._dtype is dtypes.bool_:
        raise RuntimeError("The `+` operator, on a bool tensor is not supported.")
    return input


def numel(input) -> int:
    return input.numel()


def is_floating_point(input) -> bool:
    return input._dtype.is_floating_point


def square_(input):
    """self.pow_(2), as torch's square_."""
    from engine.ops import pow_

    return pow_(input, 2)


for _n, _f in (
    ("is_complex", is_complex),
    ("is_signed", is_signed),
    ("is_nonzero", is_nonzero),
    ("is_same_size", is_same_size),
    ("positive", positive),
    ("square_", square_),
):
    register(_n, _f, method=True)
register("ndimension", ndimension, function=False, method=True)
register("numel", numel)  # Tensor.numel is Tensor's own
register("is_floating_point", is_floating_point)  # Tensor.is_floating_point: Tensor's own
for _n, _f in _OPERATORS.items():
    register(_n, _f, function=False, method=True)
