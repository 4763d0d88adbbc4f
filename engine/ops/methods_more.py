"""More tensor methods torch has beside the core rows: renorm (RenormBackward0: torch's
renorm_backward, statement by statement), aminmax (AminmaxBackward0: amin's and amax's
scale_grad_by_count), dist (DistBackward0: norm_backward of self - other, other's first, as torch's
generated code), erfinv (ErfinvBackward0; Giles' approximation refined by Halley steps on erf /
erfc), logical_not_, hardshrink as a method and torch.hardshrink, gcd / lcm (integers, no
gradient), ldexp (LdexpBackward0: grad * pow(2, other), an int64 power as torch's) and frexp
(FrexpBackward0: grad / exponent.exp2()).
"""

from __future__ import annotations

import math
from collections import namedtuple
from types import SimpleNamespace

import numpy as np

from engine import dtypes, kernels
from engine.autograd.function import Function, specialised_apply
from engine.ops import reduce as R
from engine.ops.common import broadcast_shape, result_buffer, sum_to
from engine.ops.elementwise import Binary, LogicalNot, Unary
from engine.ops.registry import register
from engine.tensor import Tensor, _wrap_dim

AminmaxResult = namedtuple("aminmax", ["min", "max"])
FrexpResult = namedtuple("frexp", ["mantissa", "exponent"])


def _norm_backward(g, x, norm, p, dims, keepdim):
    """torch's norm_backward(grad, self, p, norm, dims, keepdim): VectorNorm's backward,
    statement for statement, on tensors given rather than saved."""
    node = SimpleNamespace(
        saved_tensors=(x, norm),
        ord=float(p),
        dims=tuple(dims),
        keepdim=keepdim,
        ndim=x.ndim,
        every_dim=False,
        _scaled=R.VectorNorm._scaled,
    )
    return R.VectorNorm.backward(node, g)[0]


# ---------------------------------------------------------------------------------------------
# erfinv
# ---------------------------------------------------------------------------------------------
# Giles, "Approximating the erfinv function" (GPU Computing Gems, 2010): single precision
_GILES_CENTRAL = (
    2.81022636e-08,
    3.43273939e-07,
    -3.5233877e-06,
    -4.39150654e-06,
    0.00021858087,
    -0.00125372503,
    -0.00417768164,
    0.246640727,
    1.50140941,
)
_GILES_TAIL = (
    -0.000200214257,
    0.000100950558,
    0.00134934322,
    -0.00367342844,
    0.00573950773,
    -0.0076224613,
    0.00943887047,
    1.00167406,
    2.83297682,
)
_SQRT_PI_OVER_2 = math.sqrt(math.pi) / 2.0
_HALLEY_STEPS = 3
_TAIL_STEPS = 4


def _erf(x):
    out = np.empty_like(x)
    kernels.erf_into(np, x, out)
    return out


def _erfc(x):
    out = np.empty_like(x)
    kernels.erfc_into(np, x, out)
    return out


def _poly(coefs, w):
    p = np.full_like(w, coefs[0])
    for c in coefs[1:]:
        p *= w
        p += c
    return p


def _erfinv_block(out, y):
    """out = erfinv(y) in float64, rounded once to out's dtype: Giles' approximation, then
    Halley steps on f(x) = erf(x) - a (for a = |y| <= 0.5) or (1 - a) - erfc(x) (above, where
    1 - a is exact and erfc keeps its relative precision)."""
    a = np.abs(y, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        w = -np.log((1.0 - a) * (1.0 + a))
        central = w < 5.0
        x = np.where(central, _poly(_GILES_CENTRAL, w - 2.5), _poly(_GILES_TAIL, np.sqrt(w) - 3.0))
        x *= a
        inside = a < 1.0
        x[~inside] = 0.0
        low = a <= 0.5
        high = ~low & inside
        xl, al = x[low], a[low]
        for _ in range(_HALLEY_STEPS):  # erf(x) - a: Halley, x -= u / (1 + x u), u = f / f'
            u = (_erf(xl) - al) * _SQRT_PI_OVER_2 * np.exp(xl * xl)
            xl -= u / (1.0 + xl * u)
        x[low] = xl
        # log(erfc(x)) - log(1 - a) by Newton: nearly linear in x^2, so a far start converges
        xh, log_c = x[high], np.log(1.0 - a[high])
        for _ in range(_TAIL_STEPS):
            c = _erfc(xh)
            xh += (np.log(c) - log_c) * c * _SQRT_PI_OVER_2 * np.exp(xh * xh)
        x[high] = xh
        x[a == 1.0] = np.inf
    np.copysign(x, y, out=x)
    x[(a > 1.0) | np.isnan(a)] = np.nan  # (after the sign: torch's NaN is positive)
    np.copyto(out, x, casting="unsafe")


class Erfinv(Unary):
    """erfinv(x): float64 within a few ulps of torch's; float32 computed in float64, rounded once.
    Backward: 0.5 * sqrt(M_PI) * exp(self.erfinv().pow(2)) * grad, its temporaries to the end."""

    retain_inputs = (0,)
    small_elems = 0

    def kernel(self, xp, x, y):
        if xp is not np:
            import cupyx.scipy.special

            cupyx.scipy.special.erfinv(x, out=y)
            return
        kernels.blocked(_erfinv_block, y, x)

    def backward(self, g):
        (x,) = self.saved_tensors
        inv = x.erfinv()
        sq = inv.pow(2)
        e = sq.exp()
        scaled = 0.5 * math.sqrt(math.pi) * e
        gx = scaled * g
        del scaled, e, sq, inv  # last made first, as the C++ statement's temporaries
        return (gx,)


def erfinv(input, *, out=None):
    """The inverse of erf on (-1, 1); +-inf at +-1, NaN outside."""
    return Erfinv.apply(input, out=out, op="erfinv")


def erfinv_(input):
    return Erfinv.apply(input, out=input, op="erfinv_")


# ---------------------------------------------------------------------------------------------
# renorm
# ---------------------------------------------------------------------------------------------
class Renorm(Function):
    """renorm(p, dim, maxnorm): each slice along `dim` whose p-norm exceeds maxnorm scaled to
    maxnorm / (norm + 1e-7). Forward as torch's kernel: the result, then the keepdim norm (its
    scale factor computed in place) freed when the product is written."""

    apply = specialised_apply(1)
    retain_inputs = (0,)

    def forward(self, x, out=None, p=2.0, dim=0, maxnorm=1.0):
        if not x._dtype.is_floating_point:
            raise RuntimeError(
                "linalg.vector_norm: Expected a floating point or complex tensor as input. "
                f"Got {x._dtype.scalar_name}"
            )
        if p < 0:
            raise RuntimeError("renorm: non-positive-norm not supported")
        if maxnorm < 0:
            raise RuntimeError(f"renorm: expected maxnorm to be >= 0 but got {maxnorm:g}")
        if x.ndim <= 1:
            raise RuntimeError(
                f"renorm: input needs at least 2 dimensions, got {x.ndim} dimensions"
            )
        d = _wrap_dim(dim, x.ndim)
        dims = tuple(i for i in range(x.ndim) if i != d)
        self.p, self.dim, self.dims, self.maxnorm = float(p), d, dims, float(maxnorm)
        y = result_buffer(out, x.shape, x._dtype, x._device, "renorm")
        shape = tuple(1 if i != d else s for i, s in enumerate(x.shape))
        norm = kernels.empty(shape, x._dtype, x._device)
        if x._device.type != "meta":
            xp = kernels.xp_of(x)
            norm._data[...] = _vector_norm(xp, x._data, self.p, dims)
            nd = norm._data
            big = nd > maxnorm
            scale = xp.where(big, maxnorm / (nd + 1e-7), 1.0).astype(nd.dtype)
            nd[...] = scale
            xp.multiply(x._data, nd, out=y._data)
        del norm
        return y

    def backward(self, g):
        (x,) = self.saved_tensors
        dims, p, maxnorm = self.dims, self.p, self.maxnorm
        acc = dtypes.float64 if x._device.type == "cpu" else x._dtype  # toAccumulateType (cpu)
        norm = _acc_norm(x, p, dims, acc)
        prod = x * g
        grad_output = prod.sum(dims, keepdim=True, dtype=acc)
        del prod
        nb = _norm_backward(grad_output, x, norm, p, dims, True)
        del grad_output
        shifted = norm + 1e-7
        invnorm = shifted.reciprocal()
        del shifted
        # maxnorm * invnorm * (grad - invnorm * nb): the right operand first
        right = invnorm * nb
        diff = g - right
        left = maxnorm * invnorm
        grad_norm = left * diff
        del left, diff, right
        cast = grad_norm.to(g._dtype)
        above = norm > maxnorm
        gx = _where(above, cast, g)
        del above, cast, grad_norm, invnorm, nb, norm
        return (gx,)

    def name(self):
        return "RenormBackward0"


def _where(cond, a, b):
    from engine.ops import where

    return where(cond, a, b)


def _vector_norm(xp, a, p, dims):
    a = xp.abs(a)
    kw = dict(axis=dims, keepdims=True)
    if p == 2.0:
        return xp.sqrt(xp.sum(a * a, **kw))
    if p == 1.0:
        return xp.sum(a, **kw)
    if p == math.inf:
        return xp.max(a, **kw)
    if p == 0.0:
        return xp.sum(a != 0, **kw)
    return xp.sum(a**p, **kw) ** (1.0 / p)


def _acc_norm(x, p, dims, acc):
    """at::linalg_vector_norm(self, p, dims, keepdim=True, dtype=acc): the result first, then
    (cpu, another dtype) the input's copy in that dtype, freed when the kernel returns."""
    shape = tuple(1 if i in dims else s for i, s in enumerate(x.shape))
    norm = kernels.empty(shape, acc, x._device)
    copy = None
    if acc is not x._dtype and x._device.type == "cpu":
        copy = kernels.empty(x.shape, acc, x._device)
        copy._data[...] = x._data
    if x._device.type != "meta":
        src = copy._data if copy is not None else x._data.astype(acc.np, copy=False)
        norm._data[...] = _vector_norm(kernels.xp_of(x), src, p, dims)
    del copy
    return norm


def renorm(input, p, dim, maxnorm, *, out=None):
    """Each slice along `dim` with p-norm above maxnorm rescaled to norm maxnorm."""
    return Renorm.apply(input, out=out, op="renorm", p=p, dim=dim, maxnorm=maxnorm)


def renorm_(input, p, dim, maxnorm):
    return Renorm.apply(input, out=input, op="renorm_", p=p, dim=dim, maxnorm=maxnorm)


# ---------------------------------------------------------------------------------------------
# aminmax
# ---------------------------------------------------------------------------------------------
class Aminmax(Function):
    """(min, max) over `dim` (all elements by default) in one node; each defined gradient is
    amin's / amax's scale_grad_by_count, min's first."""

    apply = specialised_apply(1)
    retain_inputs = (0,)
    num_outputs = 2

    def forward(self, x, out=None, dim=None, keepdim=False):
        if dim is None:
            if x.numel() == 0:
                raise RuntimeError(
                    "aminmax(): cannot compute aminmax over an empty dimension as the "
                    "operation has no identity."
                )
            dims = tuple(range(x.ndim))
        else:
            d = _wrap_dim(dim, max(x.ndim, 1))
            if x.ndim and x.shape[d] == 0:
                raise IndexError(f"aminmax: Expected reduction dim {d} to have non-zero size.")
            dims = (d,) if x.ndim else ()
        keep = keepdim if dim is not None else keepdim
        self.in_shape, self.dims, self.keepdim = x.shape, dims, keep
        shape = tuple(1 if i in dims else s for i, s in enumerate(x.shape) if keep or i not in dims)
        mn = kernels.empty(shape, x._dtype, x._device)
        mx = kernels.empty(shape, x._dtype, x._device)
        if x._device.type != "meta":
            xp = kernels.xp_of(x)
            mn._data[...] = xp.min(x._data, axis=dims, keepdims=keep) if dims else x._data
            mx._data[...] = xp.max(x._data, axis=dims, keepdims=keep) if dims else x._data
        self.save(mn=mn, mx=mx)
        return AminmaxResult(mn, mx)

    def backward(self, g_min, g_max=None):
        (x,) = self.saved_tensors
        gx = None
        if g_min is not None:
            gx = self._share(g_min, x, self.kept("mn"))
        if g_max is not None:
            part = self._share(g_max, x, self.kept("mx"))
            if gx is None:
                gx = part
            else:
                total = gx + part
                del part, gx
                gx = total
        return (gx,)

    def _share(self, g, x, y):
        gk, yk = R._restore_dims(g, self), R._restore_dims(y, self)
        mask = yk == x
        count = mask.sum(dim=self.dims, keepdim=True)
        share = gk / count
        gx = share * mask
        del share, count, mask
        return gx

    def name(self):
        return "AminmaxBackward0"


def aminmax(input, *, dim=None, keepdim=False):
    """(min, max) of input over `dim` (every element by default), a named tuple."""
    return Aminmax.apply(input, op="aminmax", dim=dim, keepdim=keepdim)


# ---------------------------------------------------------------------------------------------
# dist
# ---------------------------------------------------------------------------------------------
class Dist(Function):
    """dist(self, other, p): the p-norm of self - other (the difference made, the 0-d result,
    the difference freed). Backward: norm_backward(grad, self - other, p, result), other's
    gradient (its negative) first."""

    apply = specialised_apply(2)
    retain_inputs = (0, 1)
    retain_output = True

    def forward(self, a, b, out=None, p=2.0):
        if a._dtype is not b._dtype:
            raise RuntimeError(
                "expected both inputs to have same dtype, but found "
                f"{a._dtype.scalar_name} and {b._dtype.scalar_name}"
            )
        if not a._dtype.is_floating_point:
            raise RuntimeError(
                "linalg.vector_norm: Expected a floating point or complex tensor as input. "
                f"Got {a._dtype.scalar_name}"
            )
        shape = _broadcast(a.shape, b.shape)
        self.p, self.shapes = float(p), (a.shape, b.shape)
        diff = kernels.empty(shape, a._dtype, a._device)
        y = result_buffer(out, (), a._dtype, a._device, "dist")
        if a._device.type != "meta":
            xp = kernels.xp_of(a)
            xp.subtract(a._data, b._data, out=diff._data)
            y._data[...] = _vector_norm(xp, diff._data, self.p, tuple(range(len(shape)))).reshape(
                ()
            )
        del diff
        return y

    def backward(self, g):
        a, b, result = self.saved_tensors
        dims = tuple(range(len(broadcast_shape(a, b, "dist"))))
        need_a, need_b = (edge is not None for edge in self._edges)
        gb = ga = None
        if need_b:
            diff = a - b
            nb = _norm_backward(g, diff, result, self.p, dims, False)
            gb = -nb
            del nb, diff
            gb = sum_to(gb, self.shapes[1])
        if need_a:
            diff = a - b
            ga = _norm_backward(g, diff, result, self.p, dims, False)
            del diff
            ga = sum_to(ga, self.shapes[0])
        return (ga, gb)

    def name(self):
        return "DistBackward0"


def _broadcast(sa, sb):
    """The broadcast shape, refused in TensorIterator's words."""
    n = max(len(sa), len(sb))
    pa, pb = (1,) * (n - len(sa)) + tuple(sa), (1,) * (n - len(sb)) + tuple(sb)
    for i in range(n - 1, -1, -1):
        if pa[i] != pb[i] and 1 not in (pa[i], pb[i]):
            raise RuntimeError(
                f"The size of tensor a ({pa[i]}) must match the size of tensor b ({pb[i]}) at "
                f"non-singleton dimension {i}"
            )
    return tuple(max(x, y) if 0 not in (x, y) else 0 for x, y in zip(pa, pb, strict=True))


def dist(input, other, p=2):
    """The p-norm of input - other (broadcast)."""
    return Dist.apply(input, other, op="dist", p=p)


# ---------------------------------------------------------------------------------------------
# gcd / lcm, ldexp, frexp, logical_not_
# ---------------------------------------------------------------------------------------------
class Gcd(Binary):
    opname = "gcd"
    ufunc = np.gcd
    differentiable = False


class Lcm(Binary):
    opname = "lcm"
    ufunc = np.lcm
    differentiable = False


def _integers_only(name, *ts):
    for t in ts:
        if isinstance(t, Tensor) and (t._dtype.is_floating_point or t._dtype is dtypes.bool_):
            raise NotImplementedError(
                f"\"{name}_cpu\" not implemented for '{t._dtype.scalar_name}'"
            )


def gcd(input, other, *, out=None):
    """The greatest common divisor of integers, elementwise (0 for gcd(0, 0))."""
    _integers_only("gcd", input, other)
    return Gcd.apply(input, other, out=out, op="gcd")


def gcd_(input, other):
    _integers_only("gcd", input, other)
    return Gcd.apply(input, other, out=input, op="gcd_")


def lcm(input, other, *, out=None):
    """The least common multiple of integers, elementwise (non-negative)."""
    _integers_only("lcm", input, other)
    return Lcm.apply(input, other, out=out, op="lcm")


def lcm_(input, other):
    _integers_only("lcm", input, other)
    return Lcm.apply(input, other, out=input, op="lcm_")


class Ldexp(Function):
    """input * 2**other (other an integer tensor); a floating result (the default dtype for
    integer input). Backward: grad * pow(2, other), the power in other's integer dtype (so 0
    for a negative exponent, as torch's), promoted by a copy on cpu."""

    apply = specialised_apply(2)
    retain_inputs = (1,)

    def forward(self, a, b, out=None):
        dtype = a._dtype if a._dtype.is_floating_point else dtypes.get_default_dtype()
        shape = broadcast_shape(a, b, "ldexp")
        self.a_shape = a.shape
        y = result_buffer(out, shape, dtype, a._device, "ldexp")
        if a._device.type != "meta":
            xp = kernels.xp_of(a)
            xp.ldexp(a._data.astype(dtype.np, copy=False), b._data.astype(np.int32), out=y._data)
        return y

    def backward(self, g):
        (b,) = self.saved_tensors
        power = _int_pow2(b)
        gx = g * power
        del power
        return (sum_to(gx, self.a_shape), None)

    def name(self):
        return "LdexpBackward0"


def _int_pow2(b):
    """at::pow(2, other) for an integer tensor: other's dtype, 2**other (0 below 0)."""
    r = kernels.empty(b.shape, b._dtype, b._device)
    if b._device.type != "meta":
        xp = kernels.xp_of(b)
        e = b._data
        r._data[...] = xp.where(e >= 0, xp.left_shift(1, xp.clip(e, 0, 63)), 0)
    return r


def ldexp(input, other, *, out=None):
    """input * 2**other, other an integer tensor."""
    if not isinstance(other, Tensor) or other._dtype.is_floating_point:
        raise NotImplementedError("ldexp: other must be an integer tensor here")
    return Ldexp.apply(input, other, out=out, op="ldexp")


def ldexp_(input, other):
    if not isinstance(other, Tensor) or other._dtype.is_floating_point:
        raise NotImplementedError("ldexp_: other must be an integer tensor here")
    return Ldexp.apply(input, other, out=input, op="ldexp_")


class Frexp(Function):
    """(mantissa, exponent): mantissa in [0.5, 1) by magnitude, an int32 exponent."""

    apply = specialised_apply(1)
    num_outputs = 2

    def forward(self, x, out=None):
        if not x._dtype.is_floating_point:
            raise RuntimeError("torch.frexp() only supports floating-point dtypes")
        m = kernels.empty(x.shape, x._dtype, x._device)
        e = kernels.empty(x.shape, dtypes.int32, x._device)
        if x._device.type != "meta":
            xp = kernels.xp_of(x)
            xp.frexp(x._data, out=(m._data, e._data))
        self.save(exponent=e)
        return FrexpResult(m, e)

    def backward(self, g, g_e=None):
        e = self.kept("exponent")
        power = e.exp2()
        gx = g / power
        del power
        return (gx,)

    def name(self):
        return "FrexpBackward0"


def frexp(input):
    """(mantissa, exponent) with input = mantissa * 2**exponent, a named tuple."""
    return Frexp.apply(input, op="frexp")


def logical_not_(input):
    """input = !input in place, in input's dtype (1 / 0)."""
    return LogicalNot.apply(input, out=input, op="logical_not_")


register("erfinv", erfinv, method=True, inplace="erfinv_")
register("erfinv_", erfinv_, function=False, method=True)
register("renorm", renorm, method=True, inplace="renorm_")
register("renorm_", renorm_, function=False, method=True)
register("aminmax", aminmax, method=True)
register("dist", dist, method=True)
register("gcd", gcd, method=True, inplace="gcd_")
register("gcd_", gcd_, method=True)
register("lcm", lcm, method=True, inplace="lcm_")
register("lcm_", lcm_, method=True)
register("ldexp", ldexp, method=True, inplace="ldexp_")
register("ldexp_", ldexp_, method=True)
register("frexp", frexp, method=True)
register("logical_not_", logical_not_, function=False, method=True)
