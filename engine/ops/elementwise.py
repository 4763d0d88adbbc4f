"""Elementwise primitives, forward and backward side by side.

What backward keeps decides what in-place costs (as in PyTorch's autograd):
ops that keep their *result* (relu, sigmoid, tanh, exp, sqrt) are free in place; ops that keep
their *input* (sin, cos, log, abs, pow, clamp, mul/div by a tensor that requires grad) make
Function.apply clone the input before an in-place kernel overwrites it.
"""

from __future__ import annotations

import numpy as np

from engine import dtypes, kernels
from engine.autograd.function import Function, specialised_apply
from engine.backends import cuda_fast
from engine.kernels import CONSTANT_MIN_ELEMS, PARALLEL_MIN_ELEMS, constant_ufunc
from engine.ops.common import (
    broadcast_shape,
    broadcast_shapes,
    cast_copy,
    check_out,
    data,
    device_of,
    result_buffer,
    result_type,
    scalar_result_type,
    sum_to,
)
from engine.tensor import Tensor

_new = object.__new__


def _promoted(dev, dtype, operands) -> tuple[list, list]:
    """torch's CPU TensorIterator promotes an input whose dtype is not the op's common dtype by
    a temporary copy in that dtype, made before the output and freed, last first, when the op
    returns (CUDA's kernels cast in their loop, and meta plans a GPU run: no copy there; nor for
    a Python number, and a 0-d tensor's value is cast uncharged). Returns the operands as arrays
    to compute on (the copies' in place of the promoted ones) and the copies, to hold until
    then."""
    arrays, copies = [], []
    for t in operands:
        if not isinstance(t, Tensor):
            arrays.append(t)
            continue
        td = t._data
        if dev.type == "cpu" and t._dtype is not dtype:
            if td.ndim:
                td, c = cast_copy(t, dtype)
                copies.append(c)
            else:  # a 0-d tensor: its value in the dtype (torch's wrapped scalar, uncharged)
                td = td.astype(dtype.np)
        arrays.append(td)
    return arrays, copies


# --------------------------------------------------------------------------------------------
# unary
# --------------------------------------------------------------------------------------------
class Unary(Function):
    """y = f(x). Subclasses set `float_only` (ints promote to the default float dtype) and
    `bool_error` (PyTorch's message when the op refuses a bool tensor)."""

    float_only = True
    bool_error: str | None = None

    apply = specialised_apply(1)  # Function.apply for one operand

    def forward(self, x, out=None):
        dtype = x._dtype
        xd = x._data
        copies = None
        if not dtype.is_floating_point:
            if dtype is dtypes.bool_ and self.bool_error is not None:
                raise RuntimeError(self.bool_error)
            if self.float_only:
                dtype = dtypes.get_default_dtype()
                if out is not None:
                    check_out(out, xd.shape, dtype, self.public_name)
                (xd,), copies = _promoted(x._device, dtype, (x,))  # (cpu: a float copy)
        if out is None:
            shape = xd.shape
            if len(shape) < 2:  # one layout only (the check below is a call of its own)
                y = kernels.empty(shape, dtype, x._device)
            else:
                y = kernels.empty_for(shape, dtype, x._device, xd)
        else:
            if copies is None:
                check_out(out, xd.shape, dtype, self.public_name)
            y = out
        kind = x._device.type
        if kind == "cpu":
            yd = y._data
            uf = self.ufunc
            if uf is not None and yd.size < self.small_elems:
                # Small work: one numpy call. kernel() is for large work (threads, blocks).
                if self.ufunc_zero:
                    uf(_ZEROS[yd.dtype], xd, out=yd)
                else:
                    uf(xd, out=yd)
            else:
                self.kernel(np, xd, yd)
        elif kind != "meta":
            self.kernel(kernels.xp_of(x), xd, y._data)
        if dtype.emulated and kind != "meta":
            dtypes.round_to_bfloat16_(y._data)  # bfloat16 held in float32 (engine/dtypes.py)
        return y

    @property
    def public_name(self) -> str:
        return type(self).__name__.lower()

    ufunc = None  # a numpy ufunc of x, or None when the subclass defines kernel()
    ufunc_zero = False  # the ufunc's other operand is 0 (relu = maximum(0, x)), taken first
    small_elems = PARALLEL_MIN_ELEMS  # from this many elements on, kernel() does the work

    def kernel(self, xp, x, y):
        _uf(xp, self.ufunc, x, out=y)

    def name(self) -> str:
        return type(self).__name__ + "Backward0"


def _uf(xp, f, *args, out, dtype=None):
    """out[...] = f(*args) on any backend; `dtype` makes the ufunc compute in that dtype.

    On cpu, large contiguous work is split across threads (kernels.ufunc).
    """
    if xp is np:
        if dtype is None and out.size < PARALLEL_MIN_ELEMS:
            return f(*args, out=out)
        if dtype is not None:
            return kernels.ufunc(f, *args, out=out, dtype=dtype, casting="unsafe")
        return kernels.ufunc(f, *args, out=out)
    if dtype is not None:
        return getattr(xp, f.__name__)(*args, out=out, dtype=dtype, casting="unsafe")
    name = f.__name__
    if len(args) == 1:
        if cuda_fast.unary(name, args[0], out):  # float32 contiguous: float4 kernels
            return out
    elif cuda_fast.binary(name, args[0], args[1], out):
        return out
    return getattr(xp, name)(*args, out=out)


class Neg(Unary):
    float_only = False
    bool_error = (
        "Negation, the `-` operator, on a bool tensor is not supported. If you are trying "
        "to invert a mask, use the `~` or `logical_not()` operator instead."
    )

    ufunc = np.negative

    def backward(self, g):
        return (-g,)


class Exp(Unary):
    retain_output = True

    ufunc = np.exp
    small_elems = kernels.NATIVE_PARALLEL_MIN  # from here on, float32 takes the compiled loop
    # (kernels.exp_f32, on the loops' threads; below, numpy's exp is as quick and the same bits)

    def kernel(self, xp, x, y):
        if xp is not np or not kernels.exp_f32(x, y):
            _uf(xp, np.exp, x, out=y)

    def backward(self, g):
        (y,) = self.saved_tensors
        return (g * y,)


class Reciprocal(Unary):
    """1 / x; keeps its result (derivatives.yaml: -grad * (result * result))."""

    retain_output = True

    def kernel(self, xp, x, y):
        _uf(xp, np.reciprocal, x, out=y, dtype=y.dtype)  # computed in the result's float dtype

    def backward(self, g):
        (y,) = self.saved_tensors
        sq = y * y
        ng = -g
        return (ng * sq,)


class Log(Unary):
    retain_inputs = (0,)

    ufunc = np.log

    def backward(self, g):
        (x,) = self.saved_tensors
        return (g / x,)


class Sqrt(Unary):
    retain_output = True

    ufunc = np.sqrt

    def backward(self, g):
        (y,) = self.saved_tensors
        return (g / (y * 2),)


class Rsqrt(Unary):
    """1 / sqrt(x); keeps its result (derivatives.yaml: -0.5 * grad * result.pow(3))."""

    retain_output = True

    def kernel(self, xp, x, y):
        _uf(xp, np.sqrt, x, out=y)
        _uf(xp, np.reciprocal, y, out=y)

    def backward(self, g):
        (y,) = self.saved_tensors
        cube = y**3  # (C++ makes the right operand first; both die at the statement's end)
        half = g * -0.5
        r = half * cube
        del half, cube
        return (r,)


class Sin(Unary):
    retain_inputs = (0,)

    ufunc = np.sin

    def backward(self, g):
        (x,) = self.saved_tensors
        return (g * x.cos(),)


class Cos(Unary):
    retain_inputs = (0,)

    ufunc = np.cos

    def backward(self, g):
        # derivatives.yaml: grad * -self.sin(); the sine and its negation live until the product
        (x,) = self.saved_tensors
        s = x.sin()
        neg = -s
        return (g * neg,)


class Tanh(Unary):
    retain_output = True

    ufunc = np.tanh

    def backward(self, g):
        (y,) = self.saved_tensors
        # tanh_backward: g * (1 - y^2), one result buffer
        out = kernels.empty_for(g.shape, g._dtype, g._device, g._data, y._data)
        if g._device.type != "meta":
            xp = kernels.xp_of(g)
            _uf(xp, np.multiply, y._data, y._data, out=out._data)
            _uf(xp, np.subtract, 1, out._data, out=out._data)
            _uf(xp, np.multiply, out._data, g._data, out=out._data)
        return (out,)


def _sigmoid_into(x, y, xp=np):
    """y = 1 / (1 + exp(-x)). For very negative x, exp overflows to inf and 1 / inf = 0 is right;
    numpy's overflow warning is dropped as every engine kernel's is (engine/__init__.py), with no
    np.errstate here: entering one costs more than the whole op on a small tensor."""
    xp.negative(x, out=y)
    xp.exp(y, out=y)
    xp.add(y, 1, out=y)
    xp.reciprocal(y, out=y)


class Sigmoid(Unary):
    retain_output = True

    def kernel(self, xp, x, y):
        if xp is np:
            kernels.run_parallel(_sigmoid_into, y, x)
        elif not cuda_fast.unary("sigmoid", x, y):  # float32 contiguous: one fused pass
            _sigmoid_into(x, y, xp)

    def backward(self, g):
        (y,) = self.saved_tensors
        # sigmoid_backward: g * y * (1 - y), one result buffer
        out = kernels.empty_for(g.shape, g._dtype, g._device, g._data, y._data)
        if g._device.type != "meta":
            xp = kernels.xp_of(g)
            _uf(xp, np.subtract, 1, y._data, out=out._data)
            _uf(xp, np.multiply, out._data, y._data, out=out._data)
            _uf(xp, np.multiply, out._data, g._data, out=out._data)
        return (out,)


# A 0-d zero of each dtype: against it numpy takes a quicker loop than against a Python 0
# (no scalar conversion). Unary ops with `ufunc_zero` pass it as the first operand: numpy's
# maximum and minimum give their second operand on a tie, so maximum(0, -0.0) is x's -0.0, as
# torch's cpu clamp with a number bound keeps x unless it lies strictly beyond the bound.
_ZEROS = {}
for _d in dtypes.ALL:
    _ZEROS[_d.np] = np.zeros((), _d.np)
    _ZEROS[_d.np].flags.writeable = False


class Relu(Unary):
    float_only = False
    bool_error = "Boolean inputs not supported for relu"
    retain_output = True

    ufunc = np.maximum
    ufunc_zero = True
    small_elems = 1 << 12  # from here on the compiled select (kernels.relu_into)

    def kernel(self, xp, x, y):
        if xp is np:  # the compiled select (numpy's bits), else blocks against a constant
            # block of zeros (a faster numpy loop than against a scalar), on threads
            if not kernels.relu_into(x, y):
                kernels.extremum_scalar(np.maximum, x, 0, y)
        elif not cuda_fast.unary("relu", x, y):
            xp.maximum(x, 0, out=y)

    def backward(self, g):
        (y,) = self.saved_tensors
        # threshold_backward(g, y, 0): 0 where y <= 0, else g (a select, not g * mask: a NaN
        # result passes its gradient, and a NaN or infinite gradient at 0 gives 0)
        out = kernels.empty_for(g.shape, g._dtype, g._device, g._data, y._data)
        if g._device.type != "meta":
            kernels.threshold_backward(kernels.xp_of(g), g._data, y._data, out._data)
        return (out,)


class Abs(Unary):
    float_only = False
    bool_error = "\"abs_cpu\" not implemented for 'Bool'"
    retain_inputs = (0,)

    ufunc = np.absolute

    def backward(self, g):
        (x,) = self.saved_tensors
        return (g * x.sign(),)


class Sign(Unary):
    """torch's sign: (0 < x) - (x < 0), so a NaN's sign is 0 (numpy's is NaN) and -0.0's +0."""

    float_only = False

    def kernel(self, xp, x, y):
        _uf(xp, np.sign, x, out=y)
        if y.dtype.kind == "f":  # y may be x (sign_): y's NaNs are x's
            xp.copyto(y, 0, where=xp.isnan(y))

    def backward(self, g):  # torch's SignBackward0: zeros_like(grad)
        return (kernels.zeros(tuple(g.shape), g._dtype, g._device),)


class Erf(Unary):
    """erf to float64 precision (kernels.erf_into: bounded scratch, nothing charged)."""

    retain_inputs = (0,)

    def kernel(self, xp, x, y):
        kernels.erf_into(xp, x, y)

    def backward(self, g):
        (x,) = self.saved_tensors
        # 2/sqrt(pi) * exp(-x^2) * g, in one result buffer
        out = kernels.empty_for(g.shape, g._dtype, g._device, g._data, x._data)
        if g._device.type != "meta":
            xp = kernels.xp_of(g)
            _uf(xp, np.multiply, x._data, x._data, out=out._data)
            _uf(xp, np.negative, out._data, out=out._data)
            _uf(xp, np.exp, out._data, out=out._data)
            _uf(xp, np.multiply, out._data, 2.0 / np.sqrt(np.pi), out=out._data)
            _uf(xp, np.multiply, out._data, g._data, out=out._data)
        return (out,)


def _pow_scalar(xp, x, e, y) -> None:
    """y = x ** e as torch's pow(Tensor, Scalar) computes it: for a float x, the exponents it
    special-cases take their own kernels (1: a copy, 0.5: sqrt, -0.5: 1 / sqrt, -1: 1 / x,
    2: x * x, 3: x * x * x, -2: 1 / (x * x)), whose bits differ from pow's (pow(-0.0, -0.5) is
    +inf, 1 / sqrt(-0.0) -inf; x ** 3's last bit); other exponents and integer x: pow."""
    if e == 2:
        _uf(xp, np.multiply, x, x, out=y)
        return
    if y.dtype.kind != "f" or e not in (1, 0.5, -0.5, -1, 3, -2):
        _uf(xp, np.power, x, e, out=y)
        return
    if e == 1:
        xp.copyto(y, x)
    elif e in (0.5, -0.5):
        _uf(xp, np.sqrt, x, out=y)
    elif e == -1:
        _uf(xp, np.reciprocal, x, out=y)
    elif e == 3:  # the square first: in y, or in scratch when y is x itself (pow_)
        sq = xp.empty_like(y) if xp.may_share_memory(x, y) else y
        _uf(xp, np.multiply, x, x, out=sq)
        _uf(xp, np.multiply, sq, x, out=y)
    else:  # -2
        _uf(xp, np.multiply, x, x, out=y)
    if e in (-0.5, -2):
        _uf(xp, np.reciprocal, y, out=y)


class PowScalar(Unary):
    """x ** e for a Python number e."""

    retain_inputs = (0,)

    def forward(self, x, out=None, exponent=2.0):
        self.exponent = exponent
        if not x._dtype.is_floating_point and isinstance(exponent, int) and exponent < 0:
            raise RuntimeError("Integers to negative integer powers are not allowed.")
        dtype = (
            x._dtype
            if (x._dtype.is_floating_point or isinstance(exponent, int))
            else dtypes.get_default_dtype()
        )
        y = result_buffer(out, x.shape, dtype, x._device, "pow")
        if x._device.type != "meta":
            _pow_scalar(kernels.xp_of(x), x._data, exponent, y._data)
        return y

    def backward(self, g):
        (x,) = self.saved_tensors
        e = self.exponent
        if e == 0:  # pow_backward: zeros_like(self) (+0, whatever the gradient)
            return (kernels.zeros(tuple(x.shape), x._dtype, x._device),)
        # derivatives.yaml's pow_backward: grad * (exponent * self.pow(exponent - 1)); both
        # temporaries live until the product is made and die last-made-first, as in PyTorch's
        # C++ expression.
        p = x ** (e - 1)
        scaled = p * e
        r = g * scaled
        del scaled, p
        return (r,)

    def name(self) -> str:
        return "PowBackward0"


_SAVED = object()  # marks an argument kept as a SavedTensor


class Clamp(Function):
    """clamp(x, min, max): bounds are numbers, 0-d or broadcastable tensors, or None."""

    def forward(self, x, lo, hi, out=None):
        if lo is None and hi is None:
            raise RuntimeError("torch.clamp: At least one of 'min' or 'max' must not be None")
        # a tensor bound is kept by to_save (a SavedTensor), not here: marked _SAVED
        self.bounds = tuple(_SAVED if isinstance(b, Tensor) else b for b in (lo, hi))
        self.x_shape = x.shape
        bound_t = [b for b in (lo, hi) if isinstance(b, Tensor)]
        if bound_t:
            shape = broadcast_shapes("clamp", x.shape, *(b.shape for b in bound_t))
        else:  # number bounds: no broadcasting (np.broadcast_shapes costs more than the op)
            shape = x.shape
        dtype = result_type(x, *(b for b in (lo, hi) if b is not None))
        if out is None:
            y = kernels.empty_for(shape, dtype, x._device, x._data, *(b._data for b in bound_t))
        else:
            check_out(out, shape, dtype, "clamp", (x.shape, *(b.shape for b in bound_t)))
            y = out
        if x._device.type != "meta":
            xp = kernels.xp_of(x)
            xd, yd = x._data, y._data
            if xp is np and not bound_t and x._dtype is dtype:  # number bounds, no cast
                if yd.size < kernels.BLOCK_ELEMS:
                    # small: plain ufunc calls (np.clip's Python wrapper costs more than a
                    # second pass over data in cache)
                    # the bound first: x on a tie (-0.0 against a bound 0), as torch's cpu
                    if lo is not None:
                        np.maximum(lo, xd, out=yd)
                    if hi is not None:
                        np.minimum(hi, yd if lo is not None else xd, out=yd)
                elif lo is None:
                    kernels.extremum_scalar(np.minimum, xd, hi, yd)
                elif hi is None:
                    kernels.extremum_scalar(np.maximum, xd, lo, yd)
                else:
                    kernels.ufunc(np.clip, xd, lo, hi, out=yd)  # one pass (threads when large)
            elif lo is None:
                xp.minimum(xd, data(hi), out=yd, casting="unsafe")
            elif hi is None:
                xp.maximum(xd, data(lo), out=yd, casting="unsafe")
            else:  # CuPy's clip takes no casting: max then min, as torch's clamp (hi wins)
                xp.maximum(xd, data(lo), out=yd, casting="unsafe")
                xp.minimum(yd, data(hi), out=yd, casting="unsafe")
        return y

    def to_save(self, tensors):
        return tuple(range(len(tensors)))  # x, and any tensor bound: backward builds masks

    def backward(self, g):
        # PyTorch's clamp_backward / clamp_backward_min_max (derivatives.yaml)
        saved = list(self.saved_tensors)
        x = saved.pop(0)
        lo, hi = (saved.pop(0) if b is _SAVED else b for b in self.bounds)
        nf = iter(self._edges)
        inside = upper = None
        if lo is not None:
            inside = x >= lo
        if hi is not None:
            # (self >= min).logical_and_(self <= max): both masks live until where() is made
            upper = x <= hi
            inside = upper if inside is None else inside.logical_and_(upper)
        grads = [sum_to(g.where(inside, 0.0), self.x_shape) if next(nf) is not None else None]
        del upper
        if isinstance(lo, Tensor):
            if next(nf) is not None:
                hit = x < lo
                if hi is not None:
                    hit.logical_and_(lo < hi)
                grads.append(sum_to(g.where(hit, 0.0), lo.shape))
            else:
                grads.append(None)
        if isinstance(hi, Tensor):
            if next(nf) is not None:
                hit = x > hi
                if lo is not None:
                    hit.logical_or_(hi < lo)
                grads.append(sum_to(g.where(hit, 0.0), hi.shape))
            else:
                grads.append(None)
        return tuple(grads)

    def name(self) -> str:
        return "ClampBackward0" if _SAVED in self.bounds else "ClampBackward1"


# --------------------------------------------------------------------------------------------
# binary
# --------------------------------------------------------------------------------------------
def _is_bool(v) -> bool:
    return v._dtype is dtypes.bool_ if isinstance(v, Tensor) else isinstance(v, bool)


# Python's `x op number` (and `number op x` for + and *) wraps the number in a tensor: torch's
# node lists it second, an input with no gradient
_SCALAR_OTHER_NODES = frozenset({"AddBackward0", "SubBackward0", "MulBackward0", "DivBackward0"})


class Binary(Function):
    """z = f(a, b); a and/or b are tensors (at least one), the other may be a Python number."""

    def _public_edges(self) -> tuple:
        if getattr(self, "a_t", True) != getattr(self, "b_t", True):
            if self.name() in _SCALAR_OTHER_NODES:
                return self._edges + (None,)
        return self._edges

    opname = "binary"
    ufunc = None
    plain_ufunc = True  # kernel() is just ufunc(a, b) when no attributes are given
    float_result = False
    scalar = None  # the Python number operand, when one is

    apply = specialised_apply(2)  # Function.apply for two operands

    def prepare(self, a, b, *rest):
        # What backward reads, noted only when history is recorded (forward runs without it).
        if a.__class__ is Tensor or isinstance(a, Tensor):
            if b.__class__ is Tensor or isinstance(b, Tensor):
                self.a_t = self.b_t = True
                self.shapes = (a._data.shape, b._data.shape)
            else:  # (no shapes to keep: a gradient has the tensor operand's, the result's)
                self.a_t, self.b_t, self.scalar = True, False, b
        else:
            self.a_t, self.b_t, self.scalar = False, True, a

    def forward(self, a, b, out=None, **kw):
        """kw: op attributes (alpha, rounding_mode): kept on the node and passed to the kernel."""
        if kw:
            self.__dict__.update(kw)
        # The common cases are decided inline; the general rules live in common.py. `cast`: an
        # operand's dtype is not the result's, so the ufunc must compute in the result dtype.
        if isinstance(a, Tensor):
            ad = a._data
            sa = ad.shape
            if isinstance(b, Tensor):
                dev = a._device
                if b._device is not dev and b._device != dev:
                    dev = device_of(a, b)
                bd = b._data
                sb = bd.shape
                shape = sa if sa == sb else broadcast_shape(a, b, self.opname)
                dtype = a._dtype
                cast = dtype is not b._dtype
                if cast:
                    dtype = result_type(a, b)
            else:
                dev, bd, shape, sb = a._device, b, sa, ()
                dtype = a._dtype
                # a Python float keeps a floating dtype (scalar_result_type's first case)
                if b.__class__ is not float or not dtype.is_floating_point:
                    dtype = scalar_result_type(dtype, b)
                cast = dtype is not a._dtype
        else:
            dev, ad, bd = b._device, a, b._data
            shape = sb = bd.shape
            sa = ()
            dtype = scalar_result_type(b._dtype, a)
            cast = dtype is not b._dtype
        if self.float_result and not dtype.is_floating_point:
            dtype = dtypes.get_default_dtype()
            cast = True
        if out is not None:
            if out is not a or shape is not sa or cast:  # (in place into a, a's dtype: it fits)
                check_out(out, shape, dtype, self.opname, (sa, sb))
            y = out
        copies = None
        if cast and dev.type == "cpu":  # inputs of another dtype: promoted by copies first
            (ad, bd), copies = _promoted(dev, dtype, (a, b))
            cast = False
        if out is None:
            if len(shape) < 2:  # one layout only (the check below is a call of its own)
                y = kernels.empty(shape, dtype, dev)
            elif not sb:  # b a number or 0-d: a's layout decides (and a's the other way round)
                y = kernels.empty_for(shape, dtype, dev, ad)
            elif not sa:
                y = kernels.empty_for(shape, dtype, dev, bd)
            else:
                y = kernels.empty_for(shape, dtype, dev, ad, bd)
        kind = dev.type
        if kind != "meta":
            # Mixed dtypes compute in the result dtype, as PyTorch does (uint8 + 0-d int32 stays
            # uint8, int64 / int64 divides in float32): the ufunc casts inside its loop.
            if cast:
                kw["dtype"] = dtype.np
            yd = y._data
            if not kw and kind == "cpu" and yd.size < PARALLEL_MIN_ELEMS and self.plain_ufunc:
                # small, same dtype, no attributes: one numpy call (or one value and a fill:
                # kernels.constant_ufunc, an expanded gradient's)
                if yd.size < CONSTANT_MIN_ELEMS or not constant_ufunc(self.ufunc, (ad, bd), yd):
                    self.ufunc(ad, bd, out=yd)
            else:
                self.kernel(np if kind == "cpu" else kernels.xp_of_device(dev), ad, bd, yd, **kw)
            if dtype.emulated:
                dtypes.round_to_bfloat16_(yd)  # bfloat16 held in float32 (engine/dtypes.py)
        return y

    def kernel(self, xp, a, b, y, dtype=None):
        if dtype is None and xp is np and y.size < PARALLEL_MIN_ELEMS:
            self.ufunc(a, b, out=y)
        else:
            _uf(xp, self.ufunc, a, b, out=y, dtype=dtype)

    def name(self) -> str:
        return type(self).__name__ + "Backward0"

    def to_save(self, tensors):
        return ()

    def _grads(self, ga, gb):
        """The gradients of the tensor operands, reduced to their shapes where broadcast (with
        one tensor operand, the gradient has its shape already: the result's)."""
        if not self.b_t:
            return (ga,)
        if not self.a_t:
            return (gb,)
        sa, sb = self.shapes
        return (
            None if ga is None else sum_to(ga, sa),
            None if gb is None else sum_to(gb, sb),
        )

    def _needs(self):
        """(a needs grad, b needs grad) in terms of _edges."""
        nf = self._edges
        i = 0
        na = nb = False
        if self.a_t:
            na = nf[i] is not None
            i += 1
        if self.b_t:
            nb = nf[i] is not None
        return na, nb


class Add(Binary):
    opname = "add"
    ufunc = np.add
    alpha = 1

    def kernel(self, xp, a, b, y, alpha=1, dtype=None):
        if alpha == 1:
            if dtype is None and xp is np and y.size < PARALLEL_MIN_ELEMS:
                np.add(a, b, out=y)
            else:
                _uf(xp, np.add, a, b, out=y, dtype=dtype)
        else:
            kernels.axpy(y, a, b, alpha, xp=xp)

    def backward(self, g):
        if not (self.a_t and self.b_t):  # a tensor and a number: g has the tensor's shape
            if self._edges[0] is None:
                return (None,)
            return (g if self.a_t or self.alpha == 1 else g * self.alpha,)
        na, nb = self._needs()
        return self._grads(
            g if na else None, (g if self.alpha == 1 else g * self.alpha) if nb else None
        )


class Sub(Binary):
    opname = "sub"
    ufunc = np.subtract
    alpha = 1

    def forward(self, a, b, out=None, alpha=1):
        if _is_bool(a) or _is_bool(b):
            raise RuntimeError(
                "Subtraction, the `-` operator, with a bool tensor is not supported. If you are "
                "trying to invert a mask, use the `~` or `logical_not()` operator instead."
            )
        if alpha != 1:
            return super().forward(a, b, out=out, alpha=alpha)
        return super().forward(a, b, out=out)

    def kernel(self, xp, a, b, y, alpha=1, dtype=None):
        if alpha == 1:
            _uf(xp, np.subtract, a, b, out=y, dtype=dtype)
        else:
            kernels.axpy(y, a, b, -alpha, xp=xp)

    def backward(self, g):
        na, nb = self._needs()
        return self._grads(g if na else None, (g * (-self.alpha)) if nb else None)

    def name(self) -> str:  # number - tensor is torch's rsub(tensor, number)
        return "SubBackward0" if self.a_t else "RsubBackward1"


class Mul(Binary):
    opname = "mul"
    ufunc = np.multiply

    def to_save(self, tensors):
        # backward of a needs b, of b needs a: keep only what a required gradient will read.
        if not (self.a_t and self.b_t):
            idx = ()
        elif tensors[1].requires_grad:
            idx = (0, 1) if tensors[0].requires_grad else (0,)
        else:
            idx = (1,) if tensors[0].requires_grad else ()
        self._save_idx = idx
        return idx

    def backward(self, g):
        if not (self.a_t and self.b_t):  # a tensor and a number: g has the tensor's shape
            return (None if self._edges[0] is None else g * self.scalar,)
        na, nb = self._needs()
        saved = dict(zip(self._save_idx, self.saved_tensors, strict=True))
        # MulBackward0 makes other's gradient first, then self's (torch 2.13's profiler)
        gb = g * saved[0] if nb else None
        ga = g * saved[1] if na else None
        return self._grads(ga, gb)


class Div(Binary):
    opname = "div"
    ufunc = np.true_divide
    float_result = True

    def forward(self, a, b, out=None, rounding_mode=None):
        self.rounding_mode = rounding_mode
        self.scalar_b = b if not isinstance(b, Tensor) else None
        self.scalar_a = a if not isinstance(a, Tensor) else None
        if rounding_mode is None:
            return super().forward(a, b, out=out)
        self.float_result = False
        return super().forward(a, b, out=out, rounding_mode=rounding_mode)

    def name(self) -> str:
        # div.Tensor_mode (a Python number is wrapped): DivBackward2
        return "DivBackward0" if getattr(self, "rounding_mode", None) is None else "DivBackward2"

    def _public_edges(self) -> tuple:
        if getattr(self, "rounding_mode", None) is not None and self.a_t != self.b_t:
            return self._edges + (None,)
        return super()._public_edges()

    def kernel(self, xp, a, b, y, rounding_mode=None, dtype=None):
        if rounding_mode is None:
            _uf(xp, np.true_divide, a, b, out=y, dtype=dtype)
        elif rounding_mode == "floor":
            # numpy's float floor_divide is torch's (Python's //); CuPy's floors the quotient
            if xp is np or dtype is not None or not cuda_fast.floor_divide(a, b, y):
                _uf(xp, np.floor_divide, a, b, out=y, dtype=dtype)
        elif rounding_mode == "trunc":
            xp.true_divide(a, b, out=y, casting="unsafe")
            xp.trunc(y, out=y)
        else:
            raise ValueError(
                f"div expected rounding_mode to be one of None, 'trunc', or 'floor' but found '{rounding_mode}'"
            )

    def to_save(self, tensors):
        # d/da = 1/b (needs b); d/db = -a/b^2 (needs a and b)
        idx = []
        if self.a_t and self.b_t:
            a, b = tensors
            if a.requires_grad or b.requires_grad:
                idx.append(1)
            if b.requires_grad:
                idx.insert(0, 0)
        elif self.b_t:
            idx.append(0)
        return tuple(idx)

    def backward(self, g):
        na, nb = self._needs()
        if getattr(self, "rounding_mode", None) is not None:
            # derivatives.yaml: rounding_mode.has_value() ? zeros_like(grad): +0 whatever the
            # gradient (NaN and inf too), of its shape (then reduced to a broadcast input's),
            # other's first as DivBackward0's
            gb = kernels.zeros(tuple(g.shape), g._dtype, g._device) if nb else None
            ga = kernels.zeros(tuple(g.shape), g._dtype, g._device) if na else None
            return self._grads(ga, gb)
        if self.a_t and self.b_t:
            vals = self.saved_tensors
            if len(vals) == 2:
                a, b = vals
            else:
                (b,) = vals
                a = None
            # derivatives.yaml (div_tensor_other_backward first, as DivBackward0 runs them):
            # other: -grad * ((self / other) / other), its three temporaries alive until the
            # product is made; self: grad / other
            gb = None
            if nb:
                q = a / b
                q2 = q / b
                ng = -g
                gb = ng * q2
                del ng, q2, q  # a statement's temporaries go last made first, as C++'s
            ga = g / b if na else None
            return self._grads(ga, gb)
        if self.a_t:  # a / scalar
            return self._grads(g / self.scalar_b, None)
        (b,) = self.saved_tensors  # scalar / b
        return self._grads(None, -(g * self.scalar_a) / (b * b))


class PowTensor(Binary):
    opname = "pow"
    ufunc = np.power

    def to_save(self, tensors):
        # PowBackward1 saves self, exponent and, when the exponent needs a gradient, the result
        self.retain_output = len(tensors) == 2 and tensors[1].requires_grad
        return tuple(range(len(tensors)))

    def forward(self, a, b, out=None):
        self.scalar_a = a if not isinstance(a, Tensor) else None
        self.scalar_b = b if not isinstance(b, Tensor) else None
        y = super().forward(a, b, out=out)
        return y

    def backward(self, g):
        na, nb = self._needs()
        vals = list(self.saved_tensors)
        a = vals.pop(0) if self.a_t else self.scalar_a
        b = vals.pop(0) if self.b_t else self.scalar_b
        if self.a_t and self.b_t:
            y = vals[0] if vals else None  # the result, kept when the exponent needs a grad
            return self._grads(*self._tensor_grads(g, a, b, y, na, nb))
        ga = g * b * (a ** (b - 1)) if na else None
        if nb:
            y = a**b
            la = a.log() if isinstance(a, Tensor) else float(np.log(a))
            gb = g * y * la
        else:
            gb = None
        return self._grads(ga, gb)

    def name(self) -> str:  # tensor ** tensor: PowBackward1; number ** tensor: PowBackward2
        return "PowBackward1" if self.a_t else "PowBackward2"

    @staticmethod
    def _tensor_grads(g, a, b, y, na, nb):
        """derivatives.yaml's pow_backward_exponent, then pow_backward_self (PowBackward1 runs
        them in that order), each with its temporaries alive to the end of its statement."""
        gb = ga = None
        if nb:
            cond = (a == 0).logical_and(b >= 0)
            la = a.log()
            rl = y * la
            gb = g * Where.apply(cond, 0.0, rl)
            del cond, la, rl
        if na:
            e1 = b - 1
            p = a**e1
            scaled = b * p
            gp = g * scaled
            ga = Where.apply(b == 0.0, 0.0, gp)
            del e1, p, scaled, gp
        return ga, gb


class Maximum(Binary):
    opname = "maximum"
    ufunc = np.maximum

    def to_save(self, tensors):
        return tuple(range(len(tensors)))

    def backward(self, g):
        # derivatives.yaml: self: at::where(self == other, grad / 2, grad).masked_fill_(self <
        # other, 0); other: the same with self > other; other's first, as torch's generated
        # node runs them. In each statement the arguments are made right to left (grad / 2,
        # then the equality mask), the losing mask after the where, and the temporaries die
        # last-made-first at the statement's end.
        a, b = self.saved_tensors
        na, nb = self._needs()
        greater = self.ufunc is np.maximum
        gb = self._one(g, a, b, lambda: a > b if greater else a < b) if nb else None
        ga = self._one(g, a, b, lambda: a < b if greater else a > b) if na else None
        return self._grads(ga, gb)

    @staticmethod
    def _one(g, a, b, losing):
        half = g / 2
        tie = a == b
        r = Where.apply(tie, half, g)
        loses = losing()
        r.masked_fill_(loses, 0)
        del loses, tie, half
        return r


class Minimum(Maximum):
    opname = "minimum"
    ufunc = np.minimum


class Compare(Binary):
    """Comparisons and logical ops: bool results, not differentiable."""

    differentiable = False

    def forward(self, a, b, out=None):
        self.a_t = isinstance(a, Tensor)
        self.b_t = isinstance(b, Tensor)
        dev = device_of(a, b)
        shape = broadcast_shape(a, b, self.opname)
        (ad, bd), copies = _promoted(dev, result_type(a, b), (a, b))  # (the common dtype)
        if out is None:
            arrays = [t._data for t in (a, b) if isinstance(t, Tensor)]
            y = kernels.empty_for(shape, dtypes.bool_, dev, *arrays)
        else:
            from engine.ops.common import check_out

            check_out(out, shape, out._dtype, self.opname)
            y = out
        if dev.type != "meta":
            _uf(kernels.xp_of_device(dev), self.ufunc, ad, bd, out=y._data)
        del copies
        return y


def _cmp(name, uf):
    return type(name.capitalize(), (Compare,), {"opname": name, "ufunc": uf})


Eq = _cmp("eq", np.equal)
Ne = _cmp("ne", np.not_equal)
Lt = _cmp("lt", np.less)
Le = _cmp("le", np.less_equal)
Gt = _cmp("gt", np.greater)
Ge = _cmp("ge", np.greater_equal)
LogicalAnd = _cmp("logical_and", np.logical_and)
LogicalOr = _cmp("logical_or", np.logical_or)


class Where(Function):
    """where(cond, x, y): x where cond else y."""

    retain_inputs = ()

    def forward(self, cond, x, y, out=None):
        self.x_t, self.y_t = isinstance(x, Tensor), isinstance(y, Tensor)
        dev = device_of(cond, x, y)
        shape = broadcast_shapes(
            "where", cond.shape, x.shape if self.x_t else (), y.shape if self.y_t else ()
        )
        dtype = result_type(x, y)
        self.shapes = (x.shape if self.x_t else None, y.shape if self.y_t else None)
        (xd, yd), copies = _promoted(dev, dtype, (x, y))
        r = result_buffer(out, shape, dtype, dev, "where")
        if dev.type != "meta":
            xp = kernels.xp_of_device(dev)
            xp.copyto(r._data, yd, casting="unsafe")
            xp.copyto(r._data, xd, where=cond._data, casting="unsafe")
        del copies
        return r

    def to_save(self, tensors):
        return (0,)

    def backward(self, g):
        # derivatives.yaml: self: where(condition, grad, 0); other: where(condition, 0, grad)
        (cond,) = self.saved_tensors
        grads = [None]  # cond
        if self.x_t:
            grads.append(
                sum_to(Where.apply(cond, g, 0.0), self.shapes[0])
                if self._edges[1] is not None
                else None
            )
        if self.y_t:
            grads.append(
                sum_to(Where.apply(cond, 0.0, g), self.shapes[1])
                if self._edges[-1] is not None
                else None
            )
        return tuple(grads)

    def _public_edges(self) -> tuple:
        # torch's node lists self and other (a number: an input with no gradient), not the
        # condition
        rest = iter(self._edges[1:])
        return (next(rest) if self.x_t else None, next(rest) if self.y_t else None)

    def name(self) -> str:
        return "WhereBackward0"


class MaskedFill(Function):
    """x.masked_fill(mask, value): value where mask else x; value a number or a 0-d tensor."""

    def forward(self, x, mask, value, out=None):
        if not isinstance(mask, Tensor) or mask._dtype is not dtypes.bool_:
            got = mask._dtype.name if isinstance(mask, Tensor) else type(mask).__name__
            raise RuntimeError(
                f"masked_fill_ only supports boolean masks, but got mask with dtype {got}"
            )
        self.v_t = isinstance(value, Tensor)
        if self.v_t and value.ndim:
            raise RuntimeError(
                "masked_fill_ only supports a 0-dimensional value tensor, but got tensor with "
                f"{value.ndim} dimension(s)."
            )
        shape = broadcast_shape(x, mask, "masked_fill")
        self.x_shape = x.shape
        y = result_buffer(out, shape, x._dtype, x._device, "masked_fill", (x.shape, mask.shape))
        if x._device.type != "meta":
            xp = kernels.xp_of(x)
            if y is not x:
                xp.copyto(y._data, x._data)
            xp.copyto(y._data, data(value), where=mask._data, casting="unsafe")
        return y

    def to_save(self, tensors):
        return (1,)

    def backward(self, g):
        (mask,) = self.saved_tensors
        nf = self._edges
        gx = sum_to(g.masked_fill(mask, 0), self.x_shape) if nf[0] is not None else None
        if not self.v_t:
            return (gx, None)
        gv = None
        if nf[2] is not None:
            gv = g.where(mask, 0.0).sum()
        return (gx, None, gv)

    def _public_edges(self) -> tuple:
        return (self._edges[0], self._edges[2]) if self.v_t else (self._edges[0],)  # not the mask

    def name(self) -> str:
        return "MaskedFillBackward1" if self.v_t else "MaskedFillBackward0"


class LogicalNot(Function):
    differentiable = False

    def forward(self, x, out=None):
        y = result_buffer(out, x.shape, dtypes.bool_, x._device, "logical_not")
        if x._device.type != "meta":
            kernels.xp_of(x).logical_not(x._data, out=y._data)
        return y
