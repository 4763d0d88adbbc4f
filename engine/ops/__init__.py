"""The core ops' rows of the op table (engine/ops/registry.py): engine.relu, Tensor.add_, ...

Every op is a primitive from elementwise.py / reduce.py / linalg.py / views.py applied through
Function.apply, in three spellings where PyTorch has them: `op(x)`, `op(x, out=y)` and the
in-place `x.op_()` (which returns x itself, allocates nothing and bumps x._version). Each public
name is one row, registered here (or in the module that defines the op: engine/ops/nn/*.py, ...);
importing this package registers them all and binds the Tensor methods.
"""

from __future__ import annotations

import builtins
import math

from engine import dtypes, kernels
from engine.amp import autocast_mode as _autocast
from engine.autograd.function import direct_form
from engine.backends.strided import infer_shape as _infer_shape
from engine.device import as_device
from engine.ops import elementwise as E
from engine.ops import linalg as L
from engine.ops import pointwise as P
from engine.ops import reduce as R
from engine.ops import sorting as S
from engine.ops import views as V
from engine.ops.common import (
    data,  # noqa: F401
    infer_size,
)
from engine.ops.registry import REQUIRED, Dims, Scenario, alias, register
from engine.tensor import Tensor, _wrap_dim, check_memory_format


def _export(name, **options):
    """Register the decorated function as row `name`: engine.<name> and Tensor.<name>."""
    options.setdefault("method", True)

    def deco(fn):
        fn.__name__ = name
        return register(name, fn, **options)

    return deco


def _direct(cls, name, arity):
    """`cls.apply(input[, other], out=out, op=name)` as a function of its own (no wrapper call)."""
    fn = direct_form(cls, name, arity)
    fn.__module__ = __name__
    return fn


# ---------------------------------------------------------------------------------------------
# unary: f(x, out=None), f_(x), Tensor.f / Tensor.f_
# ---------------------------------------------------------------------------------------------
# The op functions call `apply` bound once here: looking up a classmethod on its class makes a
# new bound method on every call, a noticeable cost for a small op.


# the unary ops a memprof scenario may call (in place too)
_SCENARIO_UNARY = ("relu", "sigmoid", "tanh", "exp", "log", "sin", "cos", "abs", "neg", "sqrt")


def _unary(name, cls, functional=None, functional_inplace=False):
    apply = cls.apply
    scenario = None
    if name in _SCENARIO_UNARY:
        scenario = Scenario(doc=f"elementwise {name}; {name}_ in place")

    fn = _direct(cls, name, 1)  # fn(input, *, out=None): cls.apply with no wrapper between

    def fn_(input):
        return apply(input, out=input, op=name + "_")

    _export(name, inplace=name + "_", functional=functional or False, scenario=scenario)(fn)
    _export(name + "_", functional=functional_inplace)(fn_)
    return fn


# engine.nn.functional's forms, where they differ from engine.<name> (PyTorch's signatures)
def _f_relu(input, inplace=False):
    """max(x, 0); inplace=True overwrites input (free: backward keeps the result, not the input)."""
    return input.relu_() if inplace else relu(input)


def _f_sigmoid(input):
    return sigmoid(input)


def _f_tanh(input):
    return tanh(input)


def _softmax_dim(ndim: int) -> int:
    # PyTorch's implicit choice (deprecated there, kept for the same results)
    return 0 if ndim in (0, 1, 3) else 1


def _f_softmax(input, dim=None, _stacklevel=3, dtype=None):
    return softmax(input, _softmax_dim(input.ndim) if dim is None else dim, dtype=dtype)


def _f_log_softmax(input, dim=None, _stacklevel=3, dtype=None):
    return log_softmax(input, _softmax_dim(input.ndim) if dim is None else dim, dtype=dtype)


for _fn in (_f_relu, _f_sigmoid, _f_tanh, _f_softmax, _f_log_softmax):
    _fn.__name__ = _fn.__name__[3:]


neg = _unary("neg", E.Neg)
exp = _unary("exp", E.Exp)
reciprocal = _unary("reciprocal", E.Reciprocal)
log = _unary("log", E.Log)
sqrt = _unary("sqrt", E.Sqrt)
rsqrt = _unary("rsqrt", E.Rsqrt)
sin = _unary("sin", E.Sin)
cos = _unary("cos", E.Cos)
tanh = _unary("tanh", E.Tanh, _f_tanh)
sigmoid = _unary("sigmoid", E.Sigmoid, _f_sigmoid)
relu = _unary("relu", E.Relu, _f_relu, functional_inplace=True)
abs = _unary("abs", E.Abs)  # noqa: A001 - PyTorch's name
sign = _unary("sign", E.Sign)
erf = _unary("erf", E.Erf)
alias("negative", "neg")
alias("negative_", "neg_")
alias("absolute", "abs")
# more math (engine/ops/pointwise.py), each with its in-place form
floor = _unary("floor", P.Floor)
ceil = _unary("ceil", P.Ceil)
trunc = _unary("trunc", P.Trunc)
frac = _unary("frac", P.Frac)
log1p = _unary("log1p", P.Log1P)
expm1 = _unary("expm1", P.Expm1)
log2 = _unary("log2", P.Log2)
log10 = _unary("log10", P.Log10)
exp2 = _unary("exp2", P.Exp2)
tan = _unary("tan", P.Tan)
asin = _unary("asin", P.Asin)
acos = _unary("acos", P.Acos)
atan = _unary("atan", P.Atan)
sinh = _unary("sinh", P.Sinh)
cosh = _unary("cosh", P.Cosh)
erfc = _unary("erfc", P.Erfc)
alias("fix", "trunc")
alias("fix_", "trunc_")
alias("arcsin", "asin")
alias("arccos", "acos")
alias("arctan", "atan")


@_export("round", inplace="round_")
def round(input, *, decimals=0, out=None):  # noqa: A001 - PyTorch's name
    """Half to even, as torch.round; `decimals` scales by 10**decimals around it."""
    if decimals:
        scale = 10.0**decimals
        return P.Round.apply(input * scale, out=out, op="round") / scale
    return P.Round.apply(input, out=out, op="round")


@_export("round_")
def round_(input, *, decimals=0):
    if decimals:
        scale = 10.0**decimals
        return input.mul_(scale).round_().div_(scale)
    return P.Round.apply(input, out=input, op="round_")


@_export("nan_to_num", inplace="nan_to_num_")
def nan_to_num(input, nan=0.0, posinf=None, neginf=None, *, out=None):
    return P.NanToNum.apply(input, out=out, op="nan_to_num", nan=nan, posinf=posinf, neginf=neginf)


@_export("nan_to_num_")
def nan_to_num_(input, nan=0.0, posinf=None, neginf=None):
    return P.NanToNum.apply(
        input, out=input, op="nan_to_num_", nan=nan, posinf=posinf, neginf=neginf
    )


@_export("isclose")
def isclose(input, other, rtol=1e-05, atol=1e-08, equal_nan=False):
    """torch's composite: equal, or |input - other| <= atol + rtol * |other| and finite."""
    close = input == other
    if equal_nan and input.is_floating_point():
        close |= input.isnan() & other.isnan()
    if rtol == 0 and atol == 0:
        return close
    a, b = input, other
    if not a.is_floating_point():
        a, b = a.to(dtypes.get_default_dtype()), b.to(dtypes.get_default_dtype())
    allowed = atol + (rtol * b).abs()
    actual = (a - b).abs()
    close |= actual.isfinite() & (actual <= allowed)
    return close


@_export("allclose")
def allclose(input, other, rtol=1e-05, atol=1e-08, equal_nan=False) -> bool:
    return bool(isclose(input, other, rtol, atol, equal_nan).all().item())


@_export("equal")
def equal(input, other) -> bool:
    """torch.equal: a Python bool, True when both have the same size and the same values (NaN
    equals nothing; an int 1 equals a float 1.0). No tensor is made, as torch's kernel makes
    none (it had been an alias of eq, which gives a bool tensor)."""
    if not isinstance(other, Tensor):
        raise TypeError(
            f"equal(): argument 'other' (position 2) must be Tensor, not {type(other).__name__}"
        )
    if "meta" in (input._device.type, other._device.type):
        raise NotImplementedError(
            "aten::equal: attempted to run this operator with Meta tensors (its result depends "
            "on values)"
        )
    if input.shape != other.shape:
        return False
    return bool(kernels.xp_of(input).array_equal(input._data, other._data))


@_export("select")
def select(input, dim, index):
    """The view at `index` along `dim` (SelectBackward0)."""
    d, i = select_position(input, dim, index)
    return input[(slice(None),) * d + (i,)]


def select_position(input, dim, index) -> tuple[int, int]:
    """(dim, index) of select(input, dim, index), both wrapped, or torch's IndexError."""

    if input.ndim == 0:
        raise IndexError("select() cannot be applied to a 0-dim tensor.")
    d = _wrap_dim(dim, input.ndim)
    size = input.shape[d]
    if not -size <= index < size:
        raise IndexError(
            f"select(): index {index} out of range for tensor of size {list(input.shape)} at "
            f"dimension {d}"
        )
    return d, index % size


@_export("ravel")
def ravel(input):
    """A 1-D view of a contiguous tensor, else of a contiguous copy (torch's composite)."""
    return input.contiguous().view(-1)


@_export("tile")
def tile(input, *dims):
    """repeat with `dims` padded with ones in front to the input's dims (torch's composite);
    `x.tile(2, 1)` and `x.tile((2, 1))` alike, as torch's method."""
    if not dims:
        raise TypeError('tile() missing 1 required positional arguments: "dims"')
    dims = _shape_args(dims)
    if len(dims) < input.ndim:
        dims = (1,) * (input.ndim - len(dims)) + dims
    return input.repeat(*dims)


@_export("count_nonzero")
def count_nonzero(input, dim=None):
    """int64 counts of the nonzero elements over `dim` (all of them by default)."""
    if dim is None or (isinstance(dim, (tuple, list)) and not dim):
        return S.AllAny.apply(input, op="count_nonzero", reducer="count_nonzero")
    return (input != 0).sum(dim)


def _predicate(name, cls):
    def fn(input):
        return cls.apply(input, op=name)

    _export(name)(fn)
    return fn


isnan = _predicate("isnan", P.IsNan)
isinf = _predicate("isinf", P.IsInf)
isfinite = _predicate("isfinite", P.IsFinite)
signbit = _predicate("signbit", P.SignBit)


@_export("clamp", inplace="clamp_")
def clamp(input, min=None, max=None, *, out=None):
    return E.Clamp.apply(input, min, max, out=out, op="clamp")


@_export("clamp_")
def clamp_(input, min=None, max=None):
    return E.Clamp.apply(input, min, max, out=input, op="clamp_")


alias("clip", "clamp")
alias("clip_", "clamp_")


@_export("pow", inplace="pow_")
def pow(input, exponent, *, out=None):
    if isinstance(input, Tensor) and not isinstance(exponent, Tensor):
        return E.PowScalar.apply(input, out=out, op="pow", exponent=exponent)
    return E.PowTensor.apply(input, exponent, out=out, op="pow")


@_export("pow_")
def pow_(input, exponent):
    if not isinstance(exponent, Tensor):
        return E.PowScalar.apply(input, out=input, op="pow_", exponent=exponent)
    return E.PowTensor.apply(input, exponent, out=input, op="pow_")


@_export("square")
def square(input, *, out=None):
    return pow(input, 2, out=out)


# ---------------------------------------------------------------------------------------------
# binary
# ---------------------------------------------------------------------------------------------
def _scenario_binary(name):
    """add/sub/mul/div in a scenario: `other` is the second input tensor, or the scalar arg."""

    def call(ts, a, inplace):
        other = ts[1] if len(ts) > 1 else a.get("other")
        fn = _ns[name + "_" if inplace else name]
        if a.get("alpha", 1) != 1:
            return fn(ts[0], other, alpha=a["alpha"])
        return fn(ts[0], other)

    args = (("other", float | None, None, "a scalar second operand instead of a tensor"),)
    if name in ("add", "sub"):
        args += (("alpha", float, 1, "multiplier of other"),)
    return Scenario(
        optional_inputs=("other",),
        args=args,
        call=call,
        doc=f"{name} of two tensors, or of a tensor and the scalar `other`",
    )


_add = E.Add.apply
_sub = E.Sub.apply
_mul = E.Mul.apply
_div = E.Div.apply


@_export("add", inplace="add_", scenario=_scenario_binary("add"))
def add(input, other, *, alpha=1, out=None):
    if not isinstance(input, Tensor):
        input, other = other, input
        if alpha != 1:
            raise TypeError("add: alpha with a scalar first argument is not supported")
    if alpha == 1:
        return _add(input, other, out=out, op="add")
    return _add(input, other, out=out, op="add", alpha=alpha)


@_export("add_")
def add_(input, other, *, alpha=1):
    if alpha == 1:
        return _add(input, other, out=input, op="add_")
    return _add(input, other, out=input, op="add_", alpha=alpha)


@_export("sub", inplace="sub_", scenario=_scenario_binary("sub"))
def sub(input, other, *, alpha=1, out=None):
    if alpha == 1:  # attributes only when given: the fast path of Binary.apply takes none
        return _sub(input, other, out=out, op="sub")
    return _sub(input, other, out=out, op="sub", alpha=alpha)


@_export("sub_")
def sub_(input, other, *, alpha=1):
    if alpha == 1:
        return _sub(input, other, out=input, op="sub_")
    return _sub(input, other, out=input, op="sub_", alpha=alpha)


@_export("rsub")
def rsub(input, other, *, alpha=1):
    if alpha == 1:
        return _sub(other, input, op="rsub")
    return _sub(other, input, op="rsub", alpha=alpha)


@_export("mul", inplace="mul_", scenario=_scenario_binary("mul"))
def mul(input, other, *, out=None):
    if not isinstance(input, Tensor):
        input, other = other, input
    return _mul(input, other, out=out, op="mul")


@_export("mul_")
def mul_(input, other):
    return _mul(input, other, out=input, op="mul_")


@_export("div", inplace="div_", scenario=_scenario_binary("div"))
def div(input, other, *, rounding_mode=None, out=None):
    if rounding_mode is None:
        return _div(input, other, out=out, op="div")
    return _div(input, other, out=out, op="div", rounding_mode=rounding_mode)


@_export("div_")
def div_(input, other, *, rounding_mode=None):
    if rounding_mode is None:
        return _div(input, other, out=input, op="div_")
    return _div(input, other, out=input, op="div_", rounding_mode=rounding_mode)


for _name, _target in (
    ("subtract", "sub"),
    ("subtract_", "sub_"),
    ("multiply", "mul"),
    ("multiply_", "mul_"),
    ("divide", "div"),
    ("divide_", "div_"),
    ("true_divide", "div"),
    ("true_divide_", "div_"),
):
    alias(_name, _target)


@_export(
    "scale",
    inplace="scale_",
    scenario=Scenario(
        args=(("scale", float, REQUIRED, "multiplier"),),
        doc="x * scale (Paddle's scale; mul by a scalar); scale_ in place",
    ),
)
def scale(x, scale=1.0, bias=0.0, bias_after_scale=True, *, out=None):
    """Paddle's scale: x * scale + bias (or (x + bias) * scale when bias_after_scale is False)."""
    return Scale.apply(x, out=out, op="scale", s=scale, b=bias, after=bias_after_scale)


@_export("scale_")
def scale_(x, scale=1.0, bias=0.0, bias_after_scale=True):
    return Scale.apply(x, out=x, op="scale_", s=scale, b=bias, after=bias_after_scale)


class Scale(E.Unary):
    float_only = False

    def forward(self, x, out=None, s=1.0, b=0.0, after=True):
        self.s = s
        self._sb = (s, b, after)
        return super().forward(x, out=out)

    def kernel(self, xp, x, y):
        s, b, after = self._sb
        if after:
            E._uf(xp, __import__("numpy").multiply, x, s, out=y)
            if b:
                E._uf(xp, __import__("numpy").add, y, b, out=y)
        else:
            E._uf(xp, __import__("numpy").add, x, b, out=y)
            E._uf(xp, __import__("numpy").multiply, y, s, out=y)

    def backward(self, g):
        return (g * self.s,)


def _binary_plain(name, cls):
    apply = cls.apply
    fn = _direct(cls, name, 2)  # fn(input, other, *, out=None)

    def fn_(input, other):
        return apply(input, other, out=input, op=name + "_")

    _export(name, inplace=name + "_")(fn)
    _export(name + "_")(fn_)
    return fn


maximum = _binary_plain("maximum", E.Maximum)
minimum = _binary_plain("minimum", E.Minimum)
eq = _binary_plain("eq", E.Eq)
ne = _binary_plain("ne", E.Ne)
lt = _binary_plain("lt", E.Lt)
le = _binary_plain("le", E.Le)
gt = _binary_plain("gt", E.Gt)
ge = _binary_plain("ge", E.Ge)
logical_and = _binary_plain("logical_and", E.LogicalAnd)
logical_or = _binary_plain("logical_or", E.LogicalOr)
logical_xor = _binary_plain("logical_xor", P.LogicalXor)
remainder = _binary_plain("remainder", P.Remainder)
fmod = _binary_plain("fmod", P.Fmod)
atan2 = _binary_plain("atan2", P.Atan2)
alias("arctan2", "atan2")
xlogy = _binary_plain("xlogy", P.Xlogy)


@_export("clamp_min", inplace="clamp_min_")
def clamp_min(input, min, *, out=None):  # noqa: A002 - PyTorch's name
    return P.ClampMin.apply(input, min, None, out=out, op="clamp_min")


@_export("clamp_min_")
def clamp_min_(input, min):  # noqa: A002 - PyTorch's name
    return P.ClampMin.apply(input, min, None, out=input, op="clamp_min_")


@_export("clamp_max", inplace="clamp_max_")
def clamp_max(input, max, *, out=None):  # noqa: A002 - PyTorch's name
    return P.ClampMax.apply(input, None, max, out=out, op="clamp_max")


@_export("clamp_max_")
def clamp_max_(input, max):  # noqa: A002 - PyTorch's name
    return P.ClampMax.apply(input, None, max, out=input, op="clamp_max_")


for _name, _target in (
    ("greater", "gt"),
    ("less", "lt"),
    ("greater_equal", "ge"),
    ("less_equal", "le"),
    ("not_equal", "ne"),
):
    alias(_name, _target)


@_export("logical_not")
def logical_not(input, *, out=None):
    return E.LogicalNot.apply(input, out=out, op="logical_not")


def _where_call(ts, a, inplace):
    other = ts[2] if len(ts) > 2 else a.get("other_value", 0.0)
    return where(ts[0], ts[1], other)


@_export(
    "where",
    method=lambda self, condition, other: where(condition, self, other),
    scenario=Scenario(
        inputs=("condition", "input"),
        optional_inputs=("other",),
        args=(
            (
                "other_value",
                float,
                0.0,
                "where condition is false, when no `other` tensor is given (a scalar)",
            ),
        ),
        call=_where_call,
        doc="input where condition (a bool tensor), else other (a tensor or a scalar)",
    ),
)
def where(condition, input, other, *, out=None):
    return E.Where.apply(condition, input, other, out=out, op="where")


@_export("masked_fill", inplace="masked_fill_")
def masked_fill(input, mask, value):
    return E.MaskedFill.apply(input, mask, value, op="masked_fill")


@_export("masked_fill_")
def masked_fill_(input, mask, value):
    return E.MaskedFill.apply(input, mask, value, out=input, op="masked_fill_")


# ---------------------------------------------------------------------------------------------
# reductions and friends
# ---------------------------------------------------------------------------------------------
_sum = R.Sum.apply
_mean = R.Mean.apply


@_export(
    "sum",
    scenario=Scenario(
        args=(("dim", Dims, None, ""), ("keepdim", bool, False, "")),
        doc="sum over dims (all by default)",
    ),
)
def sum(input, dim=None, keepdim=False, *, dtype=None, out=None):
    if dim is None and not keepdim and dtype is None:  # the full sum: no attributes to pass
        return _sum(input, out=out, op="sum")
    return _sum(input, out=out, op="sum", dim=dim, keepdim=keepdim, dtype=dtype)


@_export(
    "mean",
    scenario=Scenario(
        args=(("dim", Dims, None, ""), ("keepdim", bool, False, "")),
        doc="mean over dims (all by default)",
    ),
)
def mean(input, dim=None, keepdim=False, *, dtype=None, out=None):
    return _mean(input, out=out, op="mean", dim=dim, keepdim=keepdim, dtype=dtype)


@_export("amax")
def amax(input, dim=(), keepdim=False, *, out=None):
    return R.Amax.apply(input, out=out, op="amax", dim=dim, keepdim=keepdim)


@_export("amin")
def amin(input, dim=(), keepdim=False, *, out=None):
    return R.Amin.apply(input, out=out, op="amin", dim=dim, keepdim=keepdim)


@_export("max")
def max(input, dim=None, keepdim=False, *, out=None):
    if isinstance(dim, Tensor):
        return maximum(input, dim, out=out)
    if dim is None:
        return R.Amax.apply(input, out=out, op="max")
    return R.MaxDim.apply(input, op="max", dim=dim, keepdim=keepdim)


@_export("min")
def min(input, dim=None, keepdim=False, *, out=None):
    if isinstance(dim, Tensor):
        return minimum(input, dim, out=out)
    if dim is None:
        return R.Amin.apply(input, out=out, op="min")
    return R.MinDim.apply(input, op="min", dim=dim, keepdim=keepdim)


@_export("argmax")
def argmax(input, dim=None, keepdim=False):
    if dim is None:
        return max(input.reshape(-1), 0).indices
    return max(input, dim, keepdim).indices


@_export("argmin")
def argmin(input, dim=None, keepdim=False):
    if dim is None:
        return min(input.reshape(-1), 0).indices
    return min(input, dim, keepdim).indices


@_export("sort")
def sort(input, dim=-1, descending=False, stable=False):
    """(values, indices) along `dim`; equal values keep their order (stable or not)."""
    return S.Sort.apply(input, op="sort", dim=dim, descending=descending)


@_export("argsort")
def argsort(input, dim=-1, descending=False, stable=False):
    """sort's indices (torch allocates the values too, and drops them)."""
    return sort(input, dim, descending, stable).indices


@_export("topk")
def topk(input, k, dim=-1, largest=True, sorted=True):  # noqa: A002 - PyTorch's name
    """The k largest (or smallest) along `dim`, in order: (values, indices)."""
    return S.Sort.apply(input, op="topk", dim=dim, descending=largest, k=int(k))


@_export("cumsum")
def cumsum(input, dim, *, dtype=None, out=None):
    return S.Cumsum.apply(input, out=out, op="cumsum", dim=dim, dtype=dtype)


def _cumsum_(input, dim, *, dtype=None):
    return S.Cumsum.apply(input, out=input, op="cumsum_", dim=dim, dtype=dtype)


register("cumsum_", _cumsum_, function=False, method=True)


@_export("norm")
def norm(input, p="fro", dim=None, keepdim=False, dtype=None):
    """Tensor.norm as torch.norm: linalg.vector_norm over `dim` (all of it by default); "fro"
    is the 2-norm over at most two dims, another string linalg.matrix_norm's."""
    from engine import linalg

    dims = [dim] if isinstance(dim, int) else dim
    if isinstance(p, str):
        if p == "fro" and (dim is None or isinstance(dim, int) or len(dim) <= 2):
            return linalg.vector_norm(input, 2, dims, keepdim, dtype=dtype)
        dims = list(range(input.ndim)) if dims is None else dims
        return linalg.matrix_norm(input, p, dims, keepdim, dtype=dtype)
    return linalg.vector_norm(input, 2.0 if p is None else p, dims, keepdim, dtype=dtype)


@_export("logsumexp")
def logsumexp(input, dim, keepdim=False):
    """log(sum(exp(input))) over `dim`, without overflow (LogsumexpBackward0)."""
    if not input.is_floating_point():
        input = input.to(dtypes.get_default_dtype())
    return S.LogSumExp.apply(input, op="logsumexp", dim=dim, keepdim=keepdim)


@_export("repeat_interleave")
def repeat_interleave(input, repeats, dim=None, *, output_size=None):
    """Each element repeated `repeats` times along `dim` (the flattened input by default): torch's
    unsqueeze, expand, contiguous clone and view; a tensor of per-element repeats selects with
    index_select, as torch does."""

    x = input if dim is not None else input.flatten()
    d = _wrap_dim(0 if dim is None else dim, builtins.max(input.ndim, 1))
    if isinstance(repeats, Tensor):
        import numpy as np

        from engine.creation import tensor

        counts = repeats.cpu().numpy()
        if counts.size == 1 and counts.ndim <= 1:  # one count for every element, as torch
            counts = np.full(x.shape[d], counts.reshape(()).item(), dtype=np.int64)
        if counts.ndim != 1 or counts.shape[0] != x.shape[d]:
            raise RuntimeError(
                "repeats must have the same size as input along dim, but got "
                f"repeats.size(0) = {counts.shape[0] if counts.ndim else 1} and "
                f"input.size({d}) = {x.shape[d]}"
            )
        index = tensor(np.repeat(np.arange(len(counts)), counts), device=x.device)
        return x.index_select(d, index)
    if repeats < 0:
        raise RuntimeError("Repeats must be non-negative")
    shape = list(x.shape)
    expanded = list(shape)
    expanded.insert(d + 1, repeats)
    y = x.unsqueeze(d + 1).expand(*expanded).contiguous()
    shape[d] *= repeats
    return y.view(*shape)


def _all(input, dim=None, keepdim=False):
    """True where every element (over `dim`, or all of them) is nonzero."""
    return S.AllAny.apply(input, op="all", dim=dim, keepdim=keepdim, reducer="all")


def _any(input, dim=None, keepdim=False):
    """True where some element (over `dim`, or all of them) is nonzero."""
    return S.AllAny.apply(input, op="any", dim=dim, keepdim=keepdim, reducer="any")


register("all", _all, method=True)
register("any", _any, method=True)


@_export(
    "softmax",
    functional=_f_softmax,
    scenario=Scenario(args=(("dim", int, REQUIRED, ""),), doc="softmax along dim"),
)
def softmax(input, dim, *, dtype=None, out=None):
    x = input.to(dtype) if dtype is not None else input
    return R.Softmax.apply(x, out=out, op="softmax", dim=dim)


@_export(
    "log_softmax",
    functional=_f_log_softmax,
    scenario=Scenario(args=(("dim", int, REQUIRED, ""),), doc="log of softmax along dim"),
)
def log_softmax(input, dim, *, dtype=None, out=None):
    x = input.to(dtype) if dtype is not None else input
    return R.LogSoftmax.apply(x, out=out, op="log_softmax", dim=dim)


_matmul = L.Matmul.apply


@_export("matmul", scenario=Scenario(inputs=("input", "other"), doc="matrix product"))
def matmul(input, other, *, out=None):
    if (
        out is None
        and isinstance(input, Tensor)
        and isinstance(other, Tensor)
        and (input.ndim >= 3 or other.ndim >= 3)
    ):
        return _batched_matmul(input, other)
    if (
        out is None
        and isinstance(input, Tensor)
        and isinstance(other, Tensor)
        and input.ndim == 1
        and other.ndim == 2
    ):
        # torch: tensor1.unsqueeze(0).mm(tensor2).squeeze_(0)
        return _matmul(input.unsqueeze(0), other, op="matmul").squeeze_(0)
    return _matmul(input, other, out=out, op="matmul")


@_export("dot")
def dot(input, other, *, out=None):
    """The inner product of two 1-D tensors (DotBackward0)."""
    if input.ndim != 1 or other.ndim != 1:
        raise RuntimeError(f"1D tensors expected, but got {input.ndim}D and {other.ndim}D tensors")
    if input._dtype is other._dtype and input.shape[0] != other.shape[0]:
        n, m = input.shape[0], other.shape[0]
        raise RuntimeError(
            f"inconsistent tensor size, expected tensor [{n}] and src [{m}] to have the same "
            f"number of elements, but got {n} and {m} elements respectively"
        )
    return _matmul(input, other, out=out, op="dot")


@_export("mv")
def mv(input, vec, *, out=None):
    """A matrix times a vector (MvBackward0)."""
    if input.ndim != 2 or vec.ndim != 1:
        raise RuntimeError(f"vector + matrix @ vector expected, got 1, {input.ndim}, {vec.ndim}")
    return _matmul(input, vec, out=out, op="mv")


@_export("addmm")
def addmm(input, mat1, mat2, *, beta=1, alpha=1, out=None):
    """beta * input + alpha * (mat1 @ mat2), input broadcast to the product (AddmmBackward0)."""
    return L.Addmm.apply(input, mat1, mat2, out=out, op="addmm", beta=beta, alpha=alpha)


@_export("outer")
def outer(input, vec2):
    """input[:, None] * vec2, as torch composes it (MulBackward0)."""
    return input.reshape(-1, 1) * vec2


alias("ger", "outer")


def _viewable(t, shape) -> bool:
    """Whether reshape(t, shape) is a view (the test reshape itself makes)."""
    return V.view_array(t, shape) is not None


def _batched_matmul(a, b):
    """matmul with a batched operand, as PyTorch's `_matmul_impl` runs it.

    - the batched operand folds into one mm when its batch dims view as one (or, copying it,
      when the other operand requires grad);
    - a vector or matrix times a batch (`w @ x`) folds the transposed batch likewise: a
      contiguous copy of x^T, one mm, and (for a matrix) a contiguous copy of the result's
      transpose, as PyTorch does;
    - otherwise bmm: an operand whose reshape to (batch, n, m) cannot be a view (q, k^T, v of
      attention after their transpose, an expanded batch) is first copied to a contiguous
      tensor, and that copy is what backward keeps.

    Autocast's cast comes first (PyTorch's autocast wraps matmul before it decomposes)."""
    if _autocast.STATE.active:
        a, b = _autocast.cast_inputs("matmul", (a, b))
    sa, sb = a._data.shape, b._data.shape
    da, db = len(sa), len(sb)
    if da >= 3 and db <= 2:  # should_fold, the batched operand first
        k = a.shape[-1]
        folded = (a.numel() // k if k else 0, k)
        if a.numel() == 0 or _viewable(a, folded) or b.requires_grad:
            # (a copy of `a` when it cannot be viewed: b's gradient is then one mm, not a
            # batch of products summed)
            return _folded_matmul(a, b, folded)
    elif db >= 3 and da <= 2:  # should_fold, transposed: t1 = b^T, t2 = a^T (or the vector a)
        t1 = transpose(b, -1, -2)
        m = t1.shape[-1]
        folded = (t1.numel() // m if m else 0, m)
        if a.requires_grad or (da == 1 and (t1.numel() == 0 or _viewable(t1, folded))):
            if da == 1:
                return _folded_matmul(t1, a, folded)
            y = _folded_matmul(t1, transpose(a, 0, 1), folded)
            return contiguous(transpose(y, -1, -2))
    if da == 3 and db == 3 and a.shape[0] != b.shape[0]:  # a batch of one that requires grad
        if a.shape[0] == 1 and a.requires_grad:
            return _batched_matmul(a.squeeze(0), b)
        if b.shape[0] == 1 and b.requires_grad:
            return _batched_matmul(a, b.squeeze(0))
    # torch's bmm path: both operands expanded to the broadcast batch and reshaped to
    # (batch, n, m) (a copy where that is no view: that copy is what backward keeps), one bmm,
    # the result _unsafe_view'd back; backward reshapes the incoming gradient once (a copy when
    # it is not contiguous) and both products read that one copy
    n = sa[-2] if da > 1 else 1
    m1 = sa[-1]
    m2, p = (sb[-2], sb[-1]) if db > 1 else (sb[0], 1)
    batch = infer_size(sa[:-2] if da > 2 else (), sb[:-2] if db > 2 else ())
    count = math.prod(batch)
    a3 = reshape(expand(a, batch + (n, m1)), (count, n, m1))
    b_wide = expand(b, batch + ((m2, p) if db > 1 else (m2,)))
    if db == 1:
        b_wide = unsqueeze(b_wide, -1)
    b3 = reshape(b_wide, (count, m2, p))
    y = bmm(a3, b3)
    if db == 1:
        y = squeeze(y, -1)
    return unsafe_view(y, batch + ((n,) if da > 1 else ()) + ((p,) if db > 1 else ()))


def _folded_matmul(t1, t2, folded):
    """torch's fold: t1 (3-D or more) reshaped to a matrix (a view, or a copy _unsafe_view'd),
    one mm (or mv for a vector t2), the result _unsafe_view'd back (UnsafeViewBackward0,
    MmBackward0, ViewBackward0 / ReshapeAliasBackward0)."""
    shape = t1.shape[:-1] + (t2.shape[1],) if t2.ndim == 2 else t1.shape[:-1]
    if t2.ndim == 1 and t1.shape[-1] != t2.shape[0]:
        rows, k = folded
        raise RuntimeError(
            f"size mismatch, got input ({rows}), mat ({rows}x{k}), vec ({t2.shape[0]})"
        )
    return unsafe_view(_matmul(reshape(t1, folded), t2, op="matmul"), shape)


@_export("mm")
def mm(input, mat2, *, out=None):
    """A matrix times a matrix (MmBackward0); torch refuses anything but two matrices."""
    if input.ndim != 2:
        raise RuntimeError("self must be a matrix")
    if mat2.ndim != 2:
        raise RuntimeError("mat2 must be a matrix")
    return _matmul(input, mat2, out=out, op="mm")


@_export("bmm")
def bmm(input, mat2, *, out=None):
    """Batches of matrices, one product per batch entry (BmmBackward0), no broadcasting."""
    if input.ndim != 3:
        raise RuntimeError("batch1 must be a 3D tensor")
    if mat2.ndim != 3:
        raise RuntimeError("batch2 must be a 3D tensor")
    if mat2.shape[:2] != (input.shape[0], input.shape[2]):
        raise RuntimeError(
            "Expected size for first two dimensions of batch2 tensor to be: "
            f"[{input.shape[0]}, {input.shape[2]}] but got: [{mat2.shape[0]}, {mat2.shape[1]}]."
        )
    if input._dtype is not mat2._dtype:
        raise RuntimeError(
            f"expected scalar type {input._dtype.scalar_name} but found {mat2._dtype.scalar_name}"
        )
    return _matmul(input, mat2, out=out, op="bmm")


# ---------------------------------------------------------------------------------------------
# views and copies
# ---------------------------------------------------------------------------------------------
_view = V.View.apply
_select = V.Select.apply
unsafe_view = V.unsafe_view


def _shape_args(shape):
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        return tuple(shape[0])
    return tuple(shape)


@_export(
    "reshape",
    scenario=Scenario(
        args=(("shape", list[int], REQUIRED, ""),),
        call=lambda ts, a, inplace: reshape(ts[0], tuple(a["shape"])),
        doc="reshape (a view when possible)",
    ),
)
def reshape(input, *shape):
    target = _infer_shape(_shape_args(shape), math.prod(input._data.shape))
    if input.is_contiguous():  # views as any shape: View works the view out, once
        return V.View.apply(input, op="reshape", shape=target)
    if V.view_array(input, target) is not None:  # torch's _reshape_alias
        return V.ReshapeAlias.apply(input, op="reshape", shape=target)
    # torch's copy: _unsafe_view(clone(contiguous)), not a view of the copy (UnsafeViewBackward0
    # behind CloneBackward0; an in-place op on it is a plain op, no view of an intermediate)
    return unsafe_view(clone(input), target)


def view(input, *shape):
    if len(shape) == 1 and not isinstance(shape[0], int):  # view((2, 2)), view([2, 2]), view(dtype)
        if isinstance(shape[0], dtypes.dtype):
            raise NotImplementedError("view(dtype) reinterpretation is not supported")
        shape = _shape_args(shape)
    return _view(input, op="view", shape=shape)


@_export(
    "permute",
    scenario=Scenario(
        args=(("dims", list[int], REQUIRED, ""),),
        call=lambda ts, a, inplace: permute(ts[0], *a["dims"]),
        doc="reorder dims (a view)",
    ),
)
def permute(input, *dims):
    return V.Permute.apply(input, op="permute", dims=_shape_args(dims))


@_export(
    "transpose",
    inplace="transpose_",
    scenario=Scenario(
        args=(("dim0", int, REQUIRED, ""), ("dim1", int, REQUIRED, "")),
        call=lambda ts, a, inplace: transpose(ts[0], a["dim0"], a["dim1"]),
        doc="swap two dims (a view)",
    ),
)
def transpose(input, dim0, dim1):
    n = input._data.ndim
    perm = list(range(n))
    if n:
        d0, d1 = _wrap_dim(dim0, n), _wrap_dim(dim1, n)
        perm[d0], perm[d1] = perm[d1], perm[d0]
    return _transpose(input, op="transpose", dims=tuple(perm))


_transpose = V.Transpose.apply


alias("swapaxes", "transpose")


@_export("diagonal")
def diagonal(input, offset=0, dim1=0, dim2=1):
    return V.Diagonal.apply(input, op="diagonal", offset=offset, dim1=dim1, dim2=dim2)


@_export("diag_embed")
def diag_embed(input, offset=0, dim1=-2, dim2=-1):
    return V.DiagEmbed.apply(input, op="diag_embed", offset=offset, dim1=dim1, dim2=dim2)


@_export("diag")
def diag(input, diagonal=0):
    """A 1-D input: a new square matrix with it on a diagonal; a 2-D input: a copy of one of its
    diagonals (PyTorch composes it so: diag_embed, or diagonal then clone)."""
    if input.ndim == 1:
        return diag_embed(input, diagonal, 0, 1)
    if input.ndim != 2:
        raise RuntimeError("diag(): Supports 1D or 2D tensors. Got " + f"{input.ndim}D")
    return clone(V.Diagonal.apply(input, op="diag", offset=diagonal, dim1=0, dim2=1))


@_export("trace")
def trace(input):
    if input.ndim != 2:
        raise RuntimeError(f"trace: expected a matrix, but got tensor with dim {input.ndim}")
    return sum(diagonal(input))


def _dims_of(dims, n):
    dims = (dims,) if isinstance(dims, int) else tuple(dims)
    return tuple(_wrap_dim(d, n) for d in dims)


@_export("movedim")
def movedim(input, source, destination):
    """Move dims to new positions, the others keeping their order (a view)."""
    n = input.ndim
    src, dst = _dims_of(source, n), _dims_of(destination, n)
    if len(src) != len(dst):
        raise RuntimeError(
            "movedim: Invalid source or destination dims: source "
            f"({list(src)} dims) should contain the same number of dims as destination "
            f"({list(dst)} dims)"
        )
    if len(set(src)) != len(src):
        raise RuntimeError(f"movedim: repeated dim in `source` ({list(src)})")
    if len(set(dst)) != len(dst):
        raise RuntimeError(f"movedim: repeated dim in `destination` ({list(dst)})")
    order = [None] * n
    for s_, d_ in zip(src, dst, strict=True):
        order[d_] = s_
    rest = iter(i for i in range(n) if i not in src)
    perm = tuple(o if o is not None else next(rest) for o in order)
    return V.Permute.apply(input, op="movedim", dims=perm)


alias("moveaxis", "movedim")


@_export("t", inplace="t_")
def t(input):
    if input.ndim > 2:
        raise RuntimeError(f"t() expects a tensor with <= 2 dimensions, but self is {input.ndim}D")
    dims = (1, 0) if input.ndim == 2 else tuple(range(input.ndim))
    return V.TransposeT.apply(input, op="t", dims=dims)


class _TransposeInplace(E.Function):
    """t_ / transpose_: changes the tensor's metadata in place; the data stays where it is.

    Like PyTorch, the version moves, but the history is the tensor's own (no CopySlices on a
    view's base, since no element of the base changed): TransposeBackward on its old history.
    """

    inplace_view = True

    def forward(self, x, out=None, dims=()):
        self.dims = dims
        x._data = x._data.transpose(dims)
        if x._base is not None:  # the view is now rebuilt from its base with the permutation
            prev = x._view_fn
            x._view_fn = lambda b: prev(b).permute(dims)
        return x

    def backward(self, g):
        inv = [0] * len(self.dims)
        for i, d in enumerate(self.dims):
            inv[d] = i
        return (g.permute(inv),)

    def name(self):
        return "TransposeBackward1"


@_export("transpose_")
def transpose_(input, *args):
    """torch: transpose_(dim0, dim1); Paddle: transpose_(perm)."""
    n = input.ndim
    if len(args) == 1 and isinstance(args[0], (list, tuple)):
        perm = tuple(args[0])
        if sorted(perm) != list(range(n)):
            raise RuntimeError(
                f"transpose_: perm {list(perm)} is not a permutation of the {n} dims"
            )
    else:
        d0, d1 = (_wrap_dim(a, n) for a in args)
        p = list(range(n))
        p[d0], p[d1] = p[d1], p[d0]
        perm = tuple(p)
    return _TransposeInplace.apply(input, out=input, op="transpose_", dims=perm)


@_export("t_")
def t_(input):
    if input.ndim > 2:
        raise RuntimeError(f"t_() expects a tensor with <= 2 dimensions, but self is {input.ndim}D")
    if input.ndim < 2:
        return _TransposeInplace.apply(input, out=input, op="t_", dims=tuple(range(input.ndim)))
    return transpose_(input, 0, 1)


class _UnitDimsInplace(E.Function):
    """squeeze_ / unsqueeze_: size-1 dims leave or join the tensor's shape in place; the data
    stays where it is. As transpose_, the version moves and the history is the tensor's own
    (SqueezeBackward3/4/5, UnsqueezeBackward1, torch's names); backward puts the dims back as
    views of the gradient (no copy)."""

    inplace_view = True

    def forward(self, x, out=None, squeezed=(), inserted=None, grad_name=""):
        self.squeezed, self.inserted, self.grad_name = squeezed, inserted, grad_name
        shape = list(x.shape)
        if inserted is None:
            for d in reversed(squeezed):
                del shape[d]
            step = (lambda v: v.squeeze(squeezed)) if squeezed else (lambda v: v)
        else:
            shape.insert(inserted, 1)
            step = lambda v: v.unsqueeze(inserted)  # noqa: E731
        if inserted is None:
            x._data = V.view_array(x, tuple(shape))
        else:
            x._data = _unsqueezed(x._data, inserted)
        if x._base is not None:  # the view is now rebuilt from its base with this step too
            prev = x._view_fn
            x._view_fn = lambda b: step(prev(b))
        return x

    def backward(self, g):
        if self.inserted is not None:
            return (g.squeeze(self.inserted),)
        for d in self.squeezed:  # ascending: each dim back where it was
            g = g.unsqueeze(d)
        return (g,)

    def name(self):
        return self.grad_name


def _squeeze_(input, dim=None):
    """Tensor.squeeze_(dim=None): torch's in-place squeeze (a dim, a tuple of dims, or all)."""
    shape = input.shape
    if dim is None:
        dims, grad_name = range(len(shape)), "SqueezeBackward3"
    else:
        one = isinstance(dim, int)
        dims = {_wrap_dim(d, input.ndim) for d in ((dim,) if one else dim)}
        grad_name = "SqueezeBackward4" if one else "SqueezeBackward5"
    squeezed = tuple(d for d in sorted(dims) if shape[d] == 1)
    return _UnitDimsInplace.apply(
        input, out=input, op="squeeze_", squeezed=squeezed, grad_name=grad_name
    )


def _unsqueeze_(input, dim):
    """Tensor.unsqueeze_(dim): torch's in-place unsqueeze."""

    d = _wrap_dim(dim, input.ndim + 1)
    return _UnitDimsInplace.apply(
        input, out=input, op="unsqueeze_", inserted=d, grad_name="UnsqueezeBackward1"
    )


register("squeeze_", _squeeze_, function=False, method=True)
register("unsqueeze_", _unsqueeze_, function=False, method=True)
alias("swapdims", "transpose")
register("swapaxes_", transpose_, function=False, method=True)
register("swapdims_", transpose_, function=False, method=True)


@_export("squeeze")
def squeeze(input, dim=None):
    shape = input.shape
    if dim is None:
        new = tuple(n for n in shape if n != 1)
    else:
        dims = {_wrap_dim(d, input.ndim) for d in ((dim,) if isinstance(dim, int) else dim)}
        new = tuple(n for i, n in enumerate(shape) if not (i in dims and n == 1))
    node = V.Squeeze if dim is None else V.SqueezeDim if isinstance(dim, int) else V.SqueezeDims
    return node.apply(input, op="squeeze", shape=new)


@_export("unsqueeze")
def unsqueeze(input, dim):
    d = _wrap_dim(dim, input.ndim + 1)
    shape = list(input.shape)
    shape.insert(d, 1)
    y = V.Unsqueeze.apply(input, op="unsqueeze", shape=tuple(shape))
    y._data = _unsqueezed(input._data, d, y._data)
    return y


def _unsqueezed(arr, d: int, viewed=None):
    """arr with a size-1 dim at d, strided as torch's unsqueeze: the size times the stride of
    the dim it precedes, one element at the end (numpy's reshape may pick another stride for
    a strided array); `viewed`, such a view already made, is kept when its strides are those."""
    strides = tuple(arr.strides)
    stride = strides[d] * arr.shape[d] if d < arr.ndim else arr.itemsize
    strides = (*strides[:d], stride, *strides[d:])
    if viewed is not None and tuple(viewed.strides) == strides:
        return viewed
    return kernels.as_strided(arr, (*arr.shape[:d], 1, *arr.shape[d:]), strides)


def narrow_start(input, dim, start) -> tuple[int, int, int]:
    """(dim, its size, start) of narrow(input, dim, start, ...), dim wrapped and a negative start
    counted from the end, or torch's IndexError for a start out of range."""

    d = _wrap_dim(dim, input.ndim)
    size = input.shape[d]
    start = int(start)
    if not -size <= start <= size:
        raise IndexError(
            f"start out of range (expected to be in range of [{-size}, {size}], but got {start})"
        )
    return d, size, start + size if start < 0 else start


@_export("narrow")
def narrow(input, dim, start, length):
    """A view of `length` entries of dim `dim` from `start` on (negative: from the end)."""
    if input.ndim == 0:
        raise RuntimeError("narrow() cannot be applied to a 0-dim tensor.")
    d, size, start = narrow_start(input, dim, start)
    length = int(length)
    if length < 0:
        raise RuntimeError("narrow(): length must be non-negative.")
    if start + length > size:
        raise RuntimeError(f"start ({start}) + length ({length}) exceeds dimension size ({size}).")
    index = (slice(None),) * d + (slice(start, start + length),)
    return V.Narrow.apply(input, op="narrow", index=index)


def _unfold(input, dimension, size, step):
    """Tensor.unfold: the windows of `size` entries, `step` apart, along `dimension` (a view)."""
    return V.Unfold.apply(input, op="unfold", dim=dimension, size=size, step=step)


def _f_unfold(input, kernel_size, dilation=1, padding=0, stride=1):
    """F.unfold: im2col (engine/ops/nn/fold.py), a different op from Tensor.unfold."""
    from engine.ops.nn.fold import unfold as im2col

    return im2col(input, kernel_size, dilation, padding, stride)


register("unfold", _unfold, function=False, method=True, functional=_f_unfold)


@_export("unflatten")
def unflatten(input, dim, sizes):
    """A view with dim `dim` split into `sizes` (one of them may be -1)."""

    d = _wrap_dim(dim, input.ndim)
    sizes = tuple(int(s) for s in sizes)
    if not sizes:
        raise RuntimeError("unflatten: sizes must be non-empty")
    if sizes.count(-1) > 1:
        raise RuntimeError("unflatten: only one dimension can be inferred")
    n = input.shape[d]
    known = math.prod(s for s in sizes if s != -1)
    if -1 in sizes and known and n % known == 0:
        sizes = tuple(n // known if s == -1 else s for s in sizes)
    if math.prod(sizes) != n or -1 in sizes:
        raise RuntimeError(
            f"unflatten: Provided sizes {list(sizes)} don't multiply up to the size of dim {d} "
            f"({n}) in the input tensor"
        )
    shape = (*input.shape[:d], *sizes, *input.shape[d + 1 :])
    return V.View.apply(input, op="unflatten", shape=shape)


@_export(
    "flatten",
    scenario=Scenario(
        args=(("start_dim", int, 0, ""), ("end_dim", int, -1, "")),
        doc="flatten a range of dims",
    ),
)
def flatten(input, start_dim=0, end_dim=-1):
    if input.ndim == 0:
        return reshape(input, 1)

    s, e = _wrap_dim(start_dim, input.ndim), _wrap_dim(end_dim, input.ndim)
    if s > e:
        raise RuntimeError("flatten() has invalid args: start_dim cannot come after end_dim")
    shape = input.shape
    import math

    new = shape[:s] + (math.prod(shape[s : e + 1]),) + shape[e + 1 :]
    return reshape(input, new)


def expand(input, *sizes):
    return V.Expand.apply(input, op="expand", shape=_shape_args(sizes))


@_export("broadcast_to")
def broadcast_to(input, shape):
    return V.Expand.apply(input, op="broadcast_to", shape=tuple(shape))


def _broadcast_of(shapes, mismatch):
    """The shape `shapes` broadcast to; mismatch(k, n, i, out) makes the error for shape k's
    size n at dim -1-i against the shape so far."""
    out: list[int] = []
    for k, shape in enumerate(shapes):
        for i, n in enumerate(reversed(shape)):
            if i == len(out):
                out.insert(0, n)
            elif out[-1 - i] == 1:
                out[-1 - i] = n
            elif n != 1 and n != out[-1 - i]:
                raise mismatch(k, n, i, out)
    return tuple(out)


def broadcast_shapes(*shapes):
    """The shape the given shapes (or sizes) broadcast to (torch.broadcast_shapes)."""
    shapes = [(s,) if isinstance(s, int) else tuple(s) for s in shapes]
    return _broadcast_of(
        shapes,
        lambda k, n, i, out: RuntimeError(
            f"Attempting to broadcast a dimension of length {n} at {-1 - i}! Mismatching "
            f"argument at index {k} had {shapes[k]}; but expected shape should be "
            f"broadcastable to {out}"
        ),
    )


@_export("broadcast_tensors", method=False)
def broadcast_tensors(*tensors):
    """Views of the tensors expanded to their common shape (ATen's expand_outplace: a tensor
    that has the shape already is handed back itself)."""
    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
        tensors = tuple(tensors[0])
    shape = _broadcast_of(
        [tuple(t.shape) for t in tensors],
        lambda k, n, i, out: RuntimeError(
            f"The size of tensor a ({out[-1 - i]}) must match the size of tensor b ({n}) at "
            f"non-singleton dimension {len(out) - 1 - i}"
        ),
    )
    return tuple(t if tuple(t.shape) == shape else t.expand(shape) for t in tensors)


@_export("meshgrid", method=False)
def meshgrid(*tensors, indexing=None):
    """Grids of 0-d/1-d tensors: each viewed along its own dim and expanded (ATen's); 'xy'
    swaps the first two. Without `indexing` torch warns and uses 'ij'."""
    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
        tensors = tuple(tensors[0])
    if indexing is None:
        import warnings

        warnings.warn(
            "torch.meshgrid: in an upcoming release, it will be required to pass the indexing "
            "argument.",
            UserWarning,
            stacklevel=2,
        )
        indexing = "ij"
    if indexing not in ("ij", "xy"):
        raise RuntimeError(
            f'torch.meshgrid: indexing must be one of "xy" or "ij", but received: {indexing}'
        )
    if not tensors:
        raise RuntimeError("torch.meshgrid expects a non-empty TensorList")
    for t in tensors:
        if t.ndim > 1:
            raise RuntimeError(
                "torch.meshgrid: Expected 0D or 1D tensor in the tensor list but got a "
                f"{t.ndim}-d tensor of shape {list(t.shape)}"
            )
    refs = list(tensors)
    swap = indexing == "xy" and len(refs) >= 2
    if swap:
        refs[0], refs[1] = refs[1], refs[0]
    grid = tuple(t.numel() for t in refs)
    out = []
    for i, t in enumerate(refs):
        view = [1] * len(refs)
        view[i] = -1
        out.append(t.view(view).expand(grid))
    if swap:
        out[0], out[1] = out[1], out[0]
    return tuple(out)


@_export("clone", scenario=Scenario(doc="a copy with its own memory"))
def clone(input, *, memory_format=None):
    check_memory_format(memory_format, "clone")
    return V.Clone.apply(input, op="clone")


def contiguous(input, memory_format=None):
    check_memory_format(memory_format, "contiguous")
    return input if input.is_contiguous() else V.Clone.apply(input, op="contiguous")


@_export("detach", scenario=Scenario(doc="same memory, out of the graph"))
def detach(input):
    """Shares memory and version counter with input, out of the graph."""
    return Tensor._make(input._data, input._storage, input._dtype, input._device)


def detach_(input):
    if input._base is not None:
        raise RuntimeError("Can't detach views in-place. Use detach() instead.")
    input._grad_fn = None
    input.requires_grad = False
    return input


def copy_(input, src, non_blocking=False):
    return V.Copy.apply(input, src, out=input, op="copy_")


def fill_(input, value):
    return V.Fill.apply(input, value, out=input, op="fill_")


def zero_(input):
    return V.Fill.apply(input, 0, out=input, op="zero_")


def to(input, *args, dtype=None, device=None, copy=False, non_blocking=False):
    for a in args:
        if isinstance(a, dtypes.dtype):
            dtype = a
        elif isinstance(a, Tensor):
            dtype, device = a._dtype, a._device
        elif a is not None:
            device = a
    dt = dtypes.from_any(dtype) if dtype is not None else input._dtype
    dev = as_device(device) if device is not None else input._device
    if dt is input._dtype and dev == input._device and not copy:
        return input
    return V.Cast.apply(input, op="to", dtype=dt, device=dev)


@_export(
    "split",
    scenario=Scenario(
        args=(("split_size_or_sections", int | list[int], REQUIRED, ""), ("dim", int, 0, "")),
        doc="views of the pieces along dim (one node: bind them with out: [a, b, ...])",
    ),
)
def split(input, split_size_or_sections, dim=0):
    d = _wrap_dim(dim, input.ndim)
    n = input.shape[d]
    if isinstance(split_size_or_sections, int):
        k = split_size_or_sections
        if k < 0:
            raise RuntimeError(f"split expects split_size be non-negative, but got split_size={k}")
        if k == 0 and n:
            raise RuntimeError(
                f"split_size can only be 0 if dimension size is 0, but got dimension size of {n}"
            )
        sizes = [builtins.min(k, n - i) for i in range(0, n, k)] if k else [0]
        sizes = sizes or [0]
    else:
        sizes = list(split_size_or_sections)
        if builtins.sum(sizes) != n:
            raise RuntimeError(
                f"split_with_sizes expects split_sizes to sum exactly to {n} (input tensor's size at "
                f"dimension {d}), but got split_sizes={sizes}"
            )
    with_sizes = not isinstance(split_size_or_sections, int)
    return V.SplitViews.apply(input, op="split", dim=d, sizes=tuple(sizes), with_sizes=with_sizes)


@_export(
    "chunk",
    scenario=Scenario(
        args=(("chunks", int, REQUIRED, ""), ("dim", int, 0, "")),
        doc="`chunks` views along dim (bind them with out: [a, b, ...])",
    ),
)
def chunk(input, chunks, dim=0):
    n = input.shape[dim]
    return split(input, -(-n // chunks), dim)


@_export(
    "unbind",
    scenario=Scenario(
        args=(("dim", int, 0, ""),), doc="the slices along dim as views (out: [a, b, ...])"
    ),
)
def unbind(input, dim=0):
    d = _wrap_dim(dim, input.ndim)
    n = input.shape[d]
    return V.SplitViews.apply(input, op="unbind", dim=d, sizes=(1,) * n, unbind=True)


def getitem(self, index):
    if isinstance(index, Tensor) or V._has_tensor_index(index):
        return V.IndexGather.apply(self, op="index", index=index)
    if type(index) is tuple and len(index) > 1:
        steps = V.index_steps(tuple(self.shape), index)
        if len(steps) > 1:  # torch's chain: one view node per step (each backward its own)
            out = self
            for _, pos, item in steps:
                out = _select(out, op="select", index=(slice(None),) * pos + (item,))
            return out
    return _select(self, op="select", index=index)


def setitem(self, index, value):
    """x[index] = value: an in-place write through a view (CopySlices when x has history)."""
    if isinstance(index, Tensor) or V._has_tensor_index(index):
        V.IndexPut.apply(self, value, out=self, op="index_put_", index=index)
        return
    target = V.Select.apply(self, op="select", index=index)
    V.Copy.apply(target, value, out=target, op="setitem")


# ---------------------------------------------------------------------------------------------
# Tensor methods and Python operators
# ---------------------------------------------------------------------------------------------
def _register_methods() -> None:
    """Rows that are Tensor methods only (no engine.<name>): views, casts, Python operators."""
    add_op, mul_op = _direct(E.Add, "add", 2), _direct(E.Mul, "mul", 2)  # each both ways
    extra = dict(
        view=view,
        expand=expand,
        contiguous=contiguous,
        detach_=detach_,
        copy_=copy_,
        fill_=fill_,
        zero_=zero_,
        to=to,
        __getitem__=getitem,
        __setitem__=setitem,
        view_as=lambda self, other: view(self, other.shape),
        reshape_as=lambda self, other: reshape(self, other.shape),
        expand_as=lambda self, other: expand(self, other.shape),
        type_as=lambda self, other: to(self, other._dtype),
        float=lambda self: to(self, dtypes.float32),
        double=lambda self: to(self, dtypes.float64),
        half=lambda self: to(self, dtypes.float16),
        bfloat16=lambda self: to(self, dtypes.bfloat16),
        int=lambda self: to(self, dtypes.int32),
        long=lambda self: to(self, dtypes.int64),
        bool=lambda self: to(self, dtypes.bool_),
        cpu=lambda self: to(self, device="cpu"),
        cuda=lambda self, device=None: to(self, device=device or "cuda"),
        __neg__=neg,
        __abs__=abs,
        # the operators reach forward directly (no wrapper: each call counts on tiny tensors);
        # number + tensor is tensor + number, as in PyTorch
        __add__=add_op,
        __radd__=add_op,
        __iadd__=add_,
        __sub__=_direct(E.Sub, "sub", 2),
        __rsub__=lambda self, o: E.Sub.apply(o, self, op="rsub"),
        __isub__=sub_,
        __mul__=mul_op,
        __rmul__=mul_op,
        __imul__=mul_,
        __truediv__=_direct(E.Div, "div", 2),
        # number / tensor is self.reciprocal() * number in PyTorch (the reciprocal is kept)
        __rtruediv__=lambda self, o: mul(reciprocal(self), o),
        __itruediv__=lambda self, o: div_(self, o),
        __floordiv__=lambda self, o: div(self, o, rounding_mode="floor"),
        __rfloordiv__=lambda self, o: E.Div.apply(o, self, op="rfloordiv", rounding_mode="floor"),
        __ifloordiv__=lambda self, o: div_(self, o, rounding_mode="floor"),
        __mod__=remainder,
        __rmod__=lambda self, o: P.Remainder.apply(o, self, op="remainder"),
        __imod__=lambda self, o: P.Remainder.apply(self, o, out=self, op="remainder_"),
        __pow__=lambda self, o: pow(self, o),
        __rpow__=lambda self, o: E.PowTensor.apply(o, self, op="rpow"),
        __ipow__=lambda self, o: pow_(self, o),
        __matmul__=lambda self, o: matmul(self, o) if isinstance(o, Tensor) else NotImplemented,
        __rmatmul__=lambda self, o: matmul(o, self) if isinstance(o, Tensor) else NotImplemented,
        __eq__=eq,
        __ne__=ne,
        __lt__=lt,
        __le__=le,
        __gt__=gt,
        __ge__=ge,
    )
    scenarios = dict(
        view=Scenario(
            args=(("shape", list[int], REQUIRED, ""),),
            call=lambda ts, a, inplace: view(ts[0], tuple(a["shape"])),
            doc="a view with a new shape",
        ),
        contiguous=Scenario(doc="a contiguous copy if needed"),
        expand=Scenario(
            args=(("size", list[int], REQUIRED, "the new shape; -1 keeps a dim"),),
            call=lambda ts, a, inplace: expand(ts[0], *a["size"]),
            doc="broadcast size-1 dims to a larger shape (a view: stride 0, no memory)",
        ),
        expand_as=Scenario(
            inputs=("input", "other"),
            call=lambda ts, a, inplace: expand(ts[0], ts[1].shape),
            doc="expand to other's shape (a view)",
        ),
    )
    for name, fn in extra.items():
        # torch.fill_ / torch.zero_ are functions too
        function = name in ("fill_", "zero_")
        register(name, fn, function=function, method=True, scenario=scenarios.get(name))
    Tensor.T = property(lambda self: permute(self, *reversed(range(self.ndim))))
    Tensor.mT = property(lambda self: transpose(self, -2, -1))
    Tensor.data = property(_data_alias, lambda self, value: _set_data(self, value))


def _data_alias(self):
    """`t.data`: the same memory out of the graph, with a version counter of its own (unlike
    detach(), so `w.data.mul_(2)` after w was saved for backward is not a version error)."""
    from engine.storage import alias_storage

    return Tensor._make(self._data, alias_storage(self._storage), self._dtype, self._device)


def _set_data(self, value):
    self._data = value._data
    self._storage = value._storage
    self._dtype = value._dtype
    self._device = value._device


_register_methods()

# nn primitives (conv2d, pooling, gather, addcmul_, lerp_, ...) register their rows on import
# issue 10's ops (activations; shaping and joining; indexing writes) register theirs too
from engine.ops import activations as _activations  # noqa: E402, F401
from engine.ops import attention as _attention  # noqa: E402, F401
from engine.ops import blas_inplace as _blas_inplace  # noqa: E402, F401
from engine.ops import composites as _composites  # noqa: E402, F401
from engine.ops import contract as _contract  # noqa: E402, F401
from engine.ops import conv1d as _conv1d  # noqa: E402, F401
from engine.ops import conv_transpose as _conv_transpose  # noqa: E402, F401
from engine.ops import cumulative as _cumulative  # noqa: E402, F401
from engine.ops import exponential as _exponential  # noqa: E402, F401
from engine.ops import factory as _factory  # noqa: E402, F401
from engine.ops import group_norm as _group_norm  # noqa: E402, F401
from engine.ops import mathops as _mathops  # noqa: E402, F401
from engine.ops import methods_extra as _methods_extra  # noqa: E402, F401
from engine.ops import methods_misc as _methods_misc  # noqa: E402, F401
from engine.ops import methods_more as _methods_more  # noqa: E402, F401
from engine.ops import nn as _nn  # noqa: E402, F401
from engine.ops import registry as _registry  # noqa: E402
from engine.ops import scatter as _scatter  # noqa: E402, F401
from engine.ops import scatter_views as _scatter_views  # noqa: E402, F401
from engine.ops import selection as _selection  # noqa: E402, F401
from engine.ops import setops as _setops  # noqa: E402, F401
from engine.ops import shape as _shape  # noqa: E402, F401
from engine.ops import statistics as _statistics  # noqa: E402, F401
from engine.ops import tensordot as _tensordot  # noqa: E402, F401
from engine.ops import var_mean as _var_mean  # noqa: E402, F401

_ns = _registry.functions()  # engine.<name>: engine/__init__.py publishes these
_registry.bind_methods(Tensor)

__all__ = sorted(_ns)
