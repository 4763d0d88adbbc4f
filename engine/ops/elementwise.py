"""Elementwise primitives, forward and backward side by side.

What backward keeps decides what in-place costs (see ../shared/reference/inplace-autograd.md):
ops that keep their *result* (relu, sigmoid, tanh, exp, sqrt) are free in place; ops that keep
their *input* (sin, cos, log, abs, pow, clamp, mul/div by a tensor that requires grad) make
Function.apply clone the input before an in-place kernel overwrites it.
"""

from __future__ import annotations

import numpy as np

from engine import dtypes
from engine.autograd.function import Function
from engine.ops import kernels
from engine.ops.common import broadcast_shape, data, device_of, result_buffer, result_type, sum_to
from engine.tensor import Tensor


# --------------------------------------------------------------------------------------------
# unary
# --------------------------------------------------------------------------------------------
class Unary(Function):
    """y = f(x). Subclasses set `float_only` (ints promote to the default float dtype)."""

    float_only = True

    def forward(self, x, out=None):
        dtype = x._dtype
        if self.float_only and not dtype.is_floating_point:
            dtype = dtypes.get_default_dtype()
        y = result_buffer(out, x.shape, dtype, x._device, self.public_name)
        if x._device.type != "meta":
            self.kernel(kernels.xp_of(x), x._data, y._data)
        return y

    @property
    def public_name(self) -> str:
        return type(self).__name__.lower()

    def kernel(self, xp, x, y):
        raise NotImplementedError  # every subclass defines its kernel

    def name(self) -> str:
        return type(self).__name__ + "Backward0"


def _uf(xp, f, *args, out):
    if xp is np:
        return kernels.ufunc(f, *args, out=out)
    return getattr(xp, f.__name__)(*args, out=out)


class Neg(Unary):
    float_only = False

    def kernel(self, xp, x, y):
        _uf(xp, np.negative, x, out=y)

    def backward(self, g):
        return (-g,)


class Exp(Unary):
    retain_output = True

    def kernel(self, xp, x, y):
        _uf(xp, np.exp, x, out=y)

    def backward(self, g):
        (y,) = self.saved_tensors
        return (g * y,)


class Log(Unary):
    retain_inputs = (0,)

    def kernel(self, xp, x, y):
        _uf(xp, np.log, x, out=y)

    def backward(self, g):
        (x,) = self.saved_tensors
        return (g / x,)


class Sqrt(Unary):
    retain_output = True

    def kernel(self, xp, x, y):
        _uf(xp, np.sqrt, x, out=y)

    def backward(self, g):
        (y,) = self.saved_tensors
        return (g / (y * 2),)


class Sin(Unary):
    retain_inputs = (0,)

    def kernel(self, xp, x, y):
        _uf(xp, np.sin, x, out=y)

    def backward(self, g):
        (x,) = self.saved_tensors
        return (g * x.cos(),)


class Cos(Unary):
    retain_inputs = (0,)

    def kernel(self, xp, x, y):
        _uf(xp, np.cos, x, out=y)

    def backward(self, g):
        (x,) = self.saved_tensors
        return (-(g * x.sin()),)


class Tanh(Unary):
    retain_output = True

    def kernel(self, xp, x, y):
        _uf(xp, np.tanh, x, out=y)

    def backward(self, g):
        (y,) = self.saved_tensors
        # tanh_backward: g * (1 - y^2), one result buffer
        out = kernels.empty(g.shape, g._dtype, g._device)
        if g._device.type != "meta":
            xp = kernels.xp_of(g)
            xp.multiply(y._data, y._data, out=out._data)
            xp.subtract(1, out._data, out=out._data)
            xp.multiply(out._data, g._data, out=out._data)
        return (out,)


class Sigmoid(Unary):
    retain_output = True

    def kernel(self, xp, x, y):
        def sig(xc, yc):
            with np.errstate(over="ignore"):
                xp.negative(xc, out=yc)
                xp.exp(yc, out=yc)
                xp.add(yc, 1, out=yc)
                xp.reciprocal(yc, out=yc)

        if xp is np:
            kernels.run_parallel(sig, y, x)
        else:
            sig(x, y)

    def backward(self, g):
        (y,) = self.saved_tensors
        # sigmoid_backward: g * y * (1 - y), one result buffer
        out = kernels.empty(g.shape, g._dtype, g._device)
        if g._device.type != "meta":
            xp = kernels.xp_of(g)
            xp.subtract(1, y._data, out=out._data)
            xp.multiply(out._data, y._data, out=out._data)
            xp.multiply(out._data, g._data, out=out._data)
        return (out,)


class Relu(Unary):
    float_only = False
    retain_output = True

    def kernel(self, xp, x, y):
        _uf(xp, np.maximum, x, 0, out=y)

    def backward(self, g):
        (y,) = self.saved_tensors
        # threshold_backward(g, y, 0): g where y > 0 else 0; one buffer, no mask temporary:
        # y >= 0, so sign(y) is exactly the 0/1 mask.
        out = kernels.empty(g.shape, g._dtype, g._device)
        if g._device.type != "meta":
            xp = kernels.xp_of(g)
            _uf(xp, np.sign, y._data, out=out._data)
            _uf(xp, np.multiply, out._data, g._data, out=out._data)
        return (out,)


class Abs(Unary):
    float_only = False
    retain_inputs = (0,)

    def kernel(self, xp, x, y):
        _uf(xp, np.absolute, x, out=y)

    def backward(self, g):
        (x,) = self.saved_tensors
        return (g * x.sign(),)


class Sign(Unary):
    float_only = False
    differentiable = False

    def kernel(self, xp, x, y):
        _uf(xp, np.sign, x, out=y)


class Erf(Unary):
    """erf via Abramowitz & Stegun 7.1.26 (|error| < 1.5e-7); numpy has no erf."""

    retain_inputs = (0,)

    def kernel(self, xp, x, y):
        a1, a2, a3, a4, a5, p = 0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429, 0.3275911
        s = xp.sign(x)
        ax = xp.abs(x)
        t = 1.0 / (1.0 + p * ax)
        poly = ((((a5 * t + a4) * t + a3) * t + a2) * t + a1) * t
        xp.multiply(s, 1.0 - poly * xp.exp(-ax * ax), out=y)

    def backward(self, g):
        (x,) = self.saved_tensors
        return (g * (x * x).neg_().exp_().mul_(2.0 / np.sqrt(np.pi)),)


class PowScalar(Unary):
    """x ** e for a Python number e."""

    retain_inputs = (0,)

    def forward(self, x, out=None, exponent=2.0):
        self.exponent = exponent
        dtype = x._dtype if (x._dtype.is_floating_point or isinstance(exponent, int)) else dtypes.get_default_dtype()
        y = result_buffer(out, x.shape, dtype, x._device, "pow")
        if x._device.type != "meta":
            xp = kernels.xp_of(x)
            if exponent == 2:
                _uf(xp, np.multiply, x._data, x._data, out=y._data)
            else:
                _uf(xp, np.power, x._data, exponent, out=y._data)
        return y

    def backward(self, g):
        (x,) = self.saved_tensors
        e = self.exponent
        if e == 0:
            return (g * 0,)
        return (g * (x ** (e - 1)) * e,)


class Clamp(Unary):
    float_only = False
    retain_inputs = (0,)

    def forward(self, x, out=None, min=None, max=None):
        if min is None and max is None:
            raise RuntimeError("torch.clamp: At least one of 'min' or 'max' must not be None")
        self.min, self.max = min, max
        dtype = result_type(x, min if min is not None else max)
        y = result_buffer(out, x.shape, dtype, x._device, "clamp")
        if x._device.type != "meta":
            xp = kernels.xp_of(x)
            lo = data(min) if min is not None else -np.inf
            hi = data(max) if max is not None else np.inf
            xp.clip(x._data, lo, hi, out=y._data)
        return y

    def backward(self, g):
        (x,) = self.saved_tensors
        mask = None
        if self.min is not None:
            mask = x >= self.min
        if self.max is not None:
            m2 = x <= self.max
            mask = m2 if mask is None else mask.logical_and(m2)
        return (g * mask,)


# --------------------------------------------------------------------------------------------
# binary
# --------------------------------------------------------------------------------------------
class Binary(Function):
    """z = f(a, b); a and/or b are tensors (at least one), the other may be a Python number."""

    opname = "binary"
    ufunc = None
    float_result = False

    def prepare(self, a, b, *rest):
        self.a_t = isinstance(a, Tensor)
        self.b_t = isinstance(b, Tensor)

    def forward(self, a, b, out=None, **kw):
        self.a_t = isinstance(a, Tensor)
        self.b_t = isinstance(b, Tensor)
        dev = device_of(a, b)
        shape = broadcast_shape(a, b, self.opname)
        dtype = result_type(a, b)
        if self.float_result and not dtype.is_floating_point:
            dtype = dtypes.get_default_dtype()
        self.shapes = (a.shape if self.a_t else (), b.shape if self.b_t else ())
        y = result_buffer(out, shape, dtype, dev, self.opname)
        if dev.type != "meta":
            self.kernel(kernels.xp_of_device(dev), data(a), data(b), y._data, **kw)
        return y

    def kernel(self, xp, a, b, y, **kw):
        _uf(xp, self.ufunc, a, b, out=y)

    def name(self) -> str:
        return type(self).__name__ + "Backward0"

    def to_save(self, tensors):
        return ()

    def _grads(self, ga, gb):
        out = []
        if self.a_t:
            out.append(None if ga is None else sum_to(ga, self.shapes[0]))
        if self.b_t:
            out.append(None if gb is None else sum_to(gb, self.shapes[1]))
        return tuple(out)

    def _needs(self):
        """(a needs grad, b needs grad) in terms of next_functions."""
        nf = self.next_functions
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

    def forward(self, a, b, out=None, alpha=1):
        self.alpha = alpha
        return super().forward(a, b, out=out, alpha=alpha)

    def kernel(self, xp, a, b, y, alpha=1):
        if alpha == 1:
            _uf(xp, np.add, a, b, out=y)
        else:
            kernels.axpy(y, a, b, alpha, xp=xp)

    def backward(self, g):
        na, nb = self._needs()
        return self._grads(g if na else None, (g if self.alpha == 1 else g * self.alpha) if nb else None)


class Sub(Binary):
    opname = "sub"

    def forward(self, a, b, out=None, alpha=1):
        self.alpha = alpha
        if isinstance(a, Tensor) and a._dtype is dtypes.bool_ and isinstance(b, Tensor) and b._dtype is dtypes.bool_:
            raise RuntimeError("Subtraction, the `-` operator, with two bool tensors is not supported.")
        return super().forward(a, b, out=out, alpha=alpha)

    def kernel(self, xp, a, b, y, alpha=1):
        if alpha == 1:
            _uf(xp, np.subtract, a, b, out=y)
        else:
            kernels.axpy(y, a, b, -alpha, xp=xp)

    def backward(self, g):
        na, nb = self._needs()
        return self._grads(g if na else None, (g * (-self.alpha)) if nb else None)


class Mul(Binary):
    opname = "mul"
    ufunc = np.multiply

    def to_save(self, tensors):
        # backward of a needs b, of b needs a: keep only what a required gradient will read.
        idx = []
        if self.a_t and self.b_t:
            if tensors[1].requires_grad:
                idx.append(0)
            if tensors[0].requires_grad:
                idx.append(1)
        self._save_idx = tuple(idx)
        return self._save_idx

    def backward(self, g):
        na, nb = self._needs()
        saved = {}
        if self.a_t and self.b_t:
            saved = dict(zip(self._save_idx, self.saved_tensors))
        if not (self.a_t and self.b_t):
            s = self.scalar
            return self._grads(g * s if na else None, g * s if nb else None)
        ga = g * saved[1] if na else None
        gb = g * saved[0] if nb else None
        return self._grads(ga, gb)

    def forward(self, a, b, out=None):
        self.scalar = b if not isinstance(b, Tensor) else (a if not isinstance(a, Tensor) else None)
        return super().forward(a, b, out=out)


class Div(Binary):
    opname = "div"
    ufunc = np.true_divide
    float_result = True

    def forward(self, a, b, out=None, rounding_mode=None):
        self.rounding_mode = rounding_mode
        self.scalar_b = b if not isinstance(b, Tensor) else None
        self.scalar_a = a if not isinstance(a, Tensor) else None
        if rounding_mode is not None:
            self.float_result = False
        y = super().forward(a, b, out=out, rounding_mode=rounding_mode)
        return y

    def kernel(self, xp, a, b, y, rounding_mode=None):
        if rounding_mode is None:
            _uf(xp, np.true_divide, a, b, out=y)
        elif rounding_mode == "floor":
            _uf(xp, np.floor_divide, a, b, out=y)
        elif rounding_mode == "trunc":
            xp.true_divide(a, b, out=y, casting="unsafe")
            xp.trunc(y, out=y)
        else:
            raise ValueError(f"div expected rounding_mode to be one of None, 'trunc', or 'floor' but found '{rounding_mode}'")

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
        if self.a_t and self.b_t:
            vals = self.saved_tensors
            if len(vals) == 2:
                a, b = vals
            else:
                (b,) = vals
                a = None
            ga = g / b if na else None
            gb = (-(g * a) / (b * b)) if nb else None
            return self._grads(ga, gb)
        if self.a_t:  # a / scalar
            return self._grads(g / self.scalar_b, None)
        (b,) = self.saved_tensors  # scalar / b
        return self._grads(None, -(g * self.scalar_a) / (b * b))


class PowTensor(Binary):
    opname = "pow"
    ufunc = np.power

    def to_save(self, tensors):
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
        ga = g * b * (a ** (b - 1)) if na else None
        if nb:
            y = a ** b
            la = a.log() if isinstance(a, Tensor) else float(np.log(a))
            gb = g * y * la
        else:
            gb = None
        return self._grads(ga, gb)


class Maximum(Binary):
    opname = "maximum"
    ufunc = np.maximum

    def to_save(self, tensors):
        return tuple(range(len(tensors)))

    def backward(self, g):
        a, b = self.saved_tensors
        na, nb = self._needs()
        ga = g * (a > b) + g * (a == b) * 0.5 if na else None
        gb = g * (b > a) + g * (a == b) * 0.5 if nb else None
        return self._grads(ga, gb)


class Minimum(Maximum):
    opname = "minimum"
    ufunc = np.minimum

    def backward(self, g):
        a, b = self.saved_tensors
        na, nb = self._needs()
        ga = g * (a < b) + g * (a == b) * 0.5 if na else None
        gb = g * (b < a) + g * (a == b) * 0.5 if nb else None
        return self._grads(ga, gb)


class Compare(Binary):
    """Comparisons and logical ops: bool results, not differentiable."""

    differentiable = False

    def forward(self, a, b, out=None):
        self.a_t = isinstance(a, Tensor)
        self.b_t = isinstance(b, Tensor)
        dev = device_of(a, b)
        shape = broadcast_shape(a, b, self.opname)
        if out is None:
            y = kernels.empty(shape, dtypes.bool_, dev)
        else:
            from engine.ops.common import check_out

            check_out(out, shape, out._dtype, self.opname)
            y = out
        if dev.type != "meta":
            _uf(kernels.xp_of_device(dev), self.ufunc, data(a), data(b), out=y._data)
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
        shape = np.broadcast_shapes(cond.shape, x.shape if self.x_t else (), y.shape if self.y_t else ())
        dtype = result_type(x, y)
        self.cond = cond
        self.shapes = (x.shape if self.x_t else None, y.shape if self.y_t else None)
        r = result_buffer(out, shape, dtype, dev, "where")
        if dev.type != "meta":
            xp = kernels.xp_of_device(dev)
            xp.copyto(r._data, data(y), casting="unsafe")
            xp.copyto(r._data, data(x), where=cond._data, casting="unsafe")
        return r

    def to_save(self, tensors):
        return (0,)

    def backward(self, g):
        (cond,) = self.saved_tensors
        grads = [None]  # cond
        if self.x_t:
            grads.append(sum_to(g.masked_fill(cond.logical_not(), 0), self.shapes[0]) if self.next_functions[1] is not None else None)
        if self.y_t:
            grads.append(sum_to(g.masked_fill(cond, 0), self.shapes[1]) if self.next_functions[-1] is not None else None)
        return tuple(grads)


class MaskedFill(Function):
    def forward(self, x, mask, value, out=None):
        y = result_buffer(out, x.shape, x._dtype, x._device, "masked_fill")
        self.value = value
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
        return (g.masked_fill(mask, 0), None)


class LogicalNot(Function):
    differentiable = False

    def forward(self, x, out=None):
        y = result_buffer(out, x.shape, dtypes.bool_, x._device, "logical_not")
        if x._device.type != "meta":
            kernels.xp_of(x).logical_not(x._data, out=y._data)
        return y
