"""Pointwise activations with PyTorch's in-place memory behaviour.

silu, mish, leaky_relu, elu, celu, selu, hardtanh (relu6), hardswish, hardsigmoid, threshold,
softplus; their in-place forms and their functional spellings (F.silu(x, inplace=True), ...).

What backward keeps decides what the in-place form costs, exactly as in PyTorch's
derivatives.yaml (torch 2.13, checked with its CPU profiler in tests/engine/test_activations.py):

| op                                    | out of place keeps | in place keeps          |
|---------------------------------------|--------------------|-------------------------|
| leaky_relu, elu, celu, selu           | input              | result: free            |
| silu, mish, hardswish, hardsigmoid    | input              | input: pays a clone     |
| hardtanh, relu6 (= hardtanh(0, 6))    | input              | input: pays a clone     |
| threshold                             | input              | input: pays a clone     |
| softplus (no in-place form)           | input              |                         |

The clone is made by Function.apply (autograd.function._clone_overwritten) before the kernel
overwrites the input, so it shows on the timeline tagged `inplace_clone`.

Kernels work in blocks of at most kernels.SCRATCH_ELEMS elements (kernels.POOL_BLOCK per thread
when a large contiguous input is split over the pool) with two scratch blocks that are not
charged (PyTorch's fused kernels hold the same values in registers); they read strided and
broadcast operands where they are (a broadcast gradient is not copied).
"""

from __future__ import annotations

import math

import numpy as np

from engine import kernels
from engine.autograd.function import Function
from engine.backends import cuda_fast
from engine.ops.common import result_buffer
from engine.ops.registry import REQUIRED, Scenario, register
from engine.tensor import Tensor

_SCRATCH = kernels.SCRATCH_ELEMS
_BLOCK = kernels.POOL_BLOCK  # flat blocks on the pool

SELU_ALPHA = 1.6732632423543772848170429916717
SELU_SCALE = 1.0507009873554804934193349852946


# ---------------------------------------------------------------------------------------------
# blocked evaluation
# ---------------------------------------------------------------------------------------------
def _blocks(shape, limit):
    """Index tuples that cut an array of `shape` into blocks of at most `limit` elements (or one
    run of the last axis when a single run is longer)."""
    if math.prod(shape) <= limit or not shape:
        yield ()
        return
    inner = math.prod(shape[1:])
    if inner <= limit:
        step = max(1, limit // max(inner, 1))
        for i in range(0, shape[0], step):
            yield (slice(i, i + step),)
        return
    if len(shape) == 1:
        for i in range(0, shape[0], limit):
            yield (slice(i, i + limit),)
        return
    for i in range(shape[0]):
        for rest in _blocks(shape[1:], limit):
            yield (i, *rest)


def _run(xp, func, out, *arrays):
    """func(*blocks, out_block, s1, s2) over `out` (any strides; inputs may alias out).

    func must read its inputs before it writes out_block for the last time, and may write
    out_block only from values it has already read (inputs can be out itself, in place).
    """
    if xp is not np:  # cupy: one call over the whole array; CuPy's temporaries show via its hook
        func(*arrays, out, xp.empty(out.shape, out.dtype), xp.empty(out.shape, out.dtype))
        return
    n = out.size
    if n == 0:
        return
    contiguous = out.flags.c_contiguous and all(
        a.shape == out.shape and a.flags.c_contiguous for a in arrays
    )
    if contiguous:  # flat blocks, the work split across the kernel threads when large

        def part(*chunks):
            *ins, fo = chunks
            m = fo.size
            s1 = np.empty(min(_BLOCK, m), dtype=fo.dtype)
            s2 = np.empty_like(s1)
            for i in range(0, m, _BLOCK):
                j = min(i + _BLOCK, m)
                func(*[f[i:j] for f in ins], fo[i:j], s1[: j - i], s2[: j - i])

        kernels.run_parallel(part, out.reshape(-1), *[a.reshape(-1) for a in arrays])
        return
    s1 = np.empty(min(_SCRATCH, n), dtype=out.dtype)
    s2 = np.empty_like(s1)
    arrays = [np.broadcast_to(a, out.shape) for a in arrays]
    for idx in _blocks(out.shape, _SCRATCH):
        o = out[idx]
        k = o.size
        func(*[a[idx] for a in arrays], o, s1[:k].reshape(o.shape), s2[:k].reshape(o.shape))


def _inside(xp, v, low, high):
    """low < v < high, the bounds in v's dtype as torch's kernels compare them (NaN: False)."""
    t = v.dtype.type
    mask = xp.greater(v, t(low))
    xp.logical_and(mask, xp.less(v, t(high)), out=mask)
    return mask


def _outside(xp, v, low, high):
    """v <= low or v >= high, the bounds in v's dtype (NaN: False)."""
    t = v.dtype.type
    mask = xp.less_equal(v, t(low))
    xp.logical_or(mask, xp.greater_equal(v, t(high)), out=mask)
    return mask


def _between(xp, v, low, high):
    """low <= v <= high, the bounds in v's dtype (NaN: False)."""
    t = v.dtype.type
    mask = xp.greater_equal(v, t(low))
    xp.logical_and(mask, xp.less_equal(v, t(high)), out=mask)
    return mask


def _select_inside(xp, out, g, inside) -> None:
    """out = inside ? g : 0 (kernels.zero_where outside)."""
    kernels.zero_where(xp, out, g, xp.logical_not(inside, out=inside))


def _float_input(x: Tensor, opname: str) -> None:
    if not isinstance(x, Tensor):
        raise TypeError(f"{opname}(): argument 'input' must be Tensor, not {type(x).__name__}")
    if not x._dtype.is_floating_point:
        kind = x._dtype.scalar_name
        raise RuntimeError(f"\"{opname}\" not implemented for '{kind}'")


# ---------------------------------------------------------------------------------------------
# the Function base
# ---------------------------------------------------------------------------------------------
class _Activation(Function):
    """y = f(x); backward multiplies the gradient by f'(x) (or by f' written in terms of y).

    Subclasses define `f(xp, x, out, s1, s2)` and `df(xp, v, out, s1, s2)` where v is the saved
    input (or the saved result when `retain_output`); `df` writes the local derivative.
    The in-place variants set retain_output when PyTorch's in-place formula reads the result.
    """

    opname = "activation"
    node_name = "Backward0"
    params: tuple = ()

    def to_save(self, tensors):
        return () if self.retain_output else (0,)

    def forward(self, x, out=None, **params):
        _float_input(x, self.opname)
        self.__dict__.update(params)
        self.check()
        y = result_buffer(out, x.shape, x._dtype, x._device, self.opname)
        if x._device.type != "meta":
            xp = kernels.xp_of(x)
            _run(xp, lambda a, o, s1, s2: self.f(xp, a, o, s1, s2), y._data, x._data)
        return y

    def check(self) -> None:
        """Argument checks (before anything is allocated)."""

    def backward(self, g):
        (v,) = self.saved_tensors
        gx = kernels.empty(g.shape, g._dtype, g._device)
        if g._device.type != "meta":
            xp = kernels.xp_of(g)

            def grad(a, b, o, s1, s2):
                self.df(xp, a, s1, o, s2)  # s1 = f'(v), using o as scratch
                xp.multiply(s1, b, out=o)

            def select(a, b, o, s1, s2):
                self.grad(xp, a, b, o, s1, s2)

            _run(xp, select if self.selects else grad, gx._data, v._data, g._data)
        return (gx,)

    # torch's backward kernels for the piecewise activations select: the gradient itself (or a
    # product with it) where the input is inside, a literal 0 outside. A product with a 0/1
    # derivative differs where it matters: a NaN or infinite gradient outside (NaN, not 0), a
    # negative one (-0, not 0) and a NaN input (NaN, not the gradient: no comparison holds).
    # Those subclasses set `selects` and write `grad(xp, v, g, out, s1, s2)`: out = the input's
    # gradient from the saved v and the gradient g, as torch's kernel selects it.
    selects = False

    def name(self) -> str:
        return self.node_name


# ---------------------------------------------------------------------------------------------
# the activations
# ---------------------------------------------------------------------------------------------
def _sigmoid(xp, x, out):
    if xp is not np and cuda_fast.unary("sigmoid", x, out):  # float32 contiguous: one pass
        return
    xp.negative(x, out=out)
    xp.exp(out, out=out)
    xp.add(out, 1.0, out=out)
    xp.reciprocal(out, out=out)


class Silu(_Activation):
    """x * sigmoid(x); backward: s (1 + x (1 - s))."""

    opname = "silu"
    node_name = "SiluBackward0"

    def f(self, xp, x, out, s1, s2):
        _sigmoid(xp, x, s1)
        xp.multiply(x, s1, out=out)

    def df(self, xp, x, out, s1, s2):
        _sigmoid(xp, x, out)
        xp.subtract(1.0, out, out=s1)
        xp.multiply(s1, x, out=s1)
        xp.add(s1, 1.0, out=s1)
        xp.multiply(out, s1, out=out)


def _softplus1(xp, x, out):
    """out = log1p(exp(x)) (mish's inner softplus, as ATen writes it)."""
    xp.exp(x, out=out)
    xp.log1p(out, out=out)


class Mish(_Activation):
    """x * tanh(softplus(x)); backward: t + x * sigmoid(x) * (1 - t^2)."""

    opname = "mish"
    node_name = "MishBackward0"

    def f(self, xp, x, out, s1, s2):
        _softplus1(xp, x, s1)
        xp.tanh(s1, out=s1)
        xp.multiply(x, s1, out=out)

    def df(self, xp, x, out, s1, s2):
        _softplus1(xp, x, out)
        xp.tanh(out, out=out)  # t
        _sigmoid(xp, x, s1)
        xp.multiply(s1, x, out=s1)  # x s
        xp.multiply(out, out, out=s2)
        xp.subtract(1.0, s2, out=s2)  # 1 - t^2
        xp.multiply(s1, s2, out=s1)
        xp.add(out, s1, out=out)


class LeakyRelu(_Activation):
    opname = "leaky_relu"
    node_name = "LeakyReluBackward0"
    negative_slope = 0.01

    def f(self, xp, x, out, s1, s2):
        xp.multiply(x, self.negative_slope, out=s1)
        xp.copyto(s1, x, where=x > 0)
        xp.copyto(out, s1)

    def df(self, xp, v, out, s1, s2):
        # positive where v > 0 (v is x, or the result, which has x's sign for a positive slope)
        xp.greater(v, 0, out=out)
        xp.multiply(out, 1.0 - self.negative_slope, out=out)
        xp.add(out, self.negative_slope, out=out)

    selects = True

    def grad(self, xp, v, g, out, s1, s2):
        # leaky_relu_backward: x > 0 ? grad : grad * negative_slope, a select: the gradient's
        # own bits where x > 0 (a product with 1 would give a GPU's canonical NaN for a NaN
        # gradient, not its payload)
        xp.multiply(g, out.dtype.type(self.negative_slope), out=out)
        xp.copyto(out, g, where=xp.greater(v, v.dtype.type(0)))


class LeakyReluInplace(LeakyRelu):
    retain_output = True
    node_name = "LeakyReluBackward1"

    def backward(self, g):
        if self.negative_slope < 0:
            raise RuntimeError(
                "In-place leakyReLu backward calculation is triggered with a negative slope which "
                "is not supported. This is caused by calling in-place forward function with a "
                "negative slope, please call out-of-place version instead. File an issue at "
                "https://github.com/pytorch/pytorch if you do require supporting in-place "
                "leakRelu backward calculation with negative slope"
            )
        return super().backward(g)


def _elu_positive(xp, v):
    """Where elu_backward takes the positive branch: cpu's kernel tests v > 0 (a NaN input
    gets the negative branch's NaN), cuda's v <= 0 for the negative one (a NaN input gets the
    gradient times scale)."""
    if xp is np:
        return xp.greater(v, 0)
    return xp.logical_not(xp.less_equal(v, 0))


class Elu(_Activation):
    """x > 0: scale x; else scale alpha (exp(x input_scale) - 1). celu and selu are elus."""

    opname = "elu"
    node_name = "EluBackward0"
    alpha, scale, input_scale = 1.0, 1.0, 1.0

    def f(self, xp, x, out, s1, s2):
        xp.multiply(x, self.input_scale, out=s1)
        xp.expm1(s1, out=s1)
        xp.multiply(s1, self.scale * self.alpha, out=s1)
        xp.multiply(x, self.scale, out=s2)
        xp.greater(x, 0, out=out)  # mask as 0/1 in out (x is read for the last time here)
        xp.copyto(s1, s2, where=out != 0)
        xp.copyto(out, s1)

    def df(self, xp, x, out, s1, s2):
        # x > 0: scale; else scale alpha input_scale exp(x input_scale)
        xp.multiply(x, self.input_scale, out=s1)
        xp.exp(s1, out=s1)
        xp.multiply(s1, self.scale * self.alpha * self.input_scale, out=s1)
        xp.copyto(s1, self.scale, where=_elu_positive(xp, x))
        xp.copyto(out, s1)


class EluInplace(Elu):
    """In place: backward reads the result y: y > 0: scale; else input_scale (y + scale alpha)."""

    retain_output = True
    node_name = "EluBackward1"

    def check(self):
        if self.alpha < 0:
            raise RuntimeError(
                "In-place elu forward calculation is triggered with a negative slope which is not "
                "supported. This is caused by calling in-place forward function with a negative "
                "slope, please call out-of-place version instead."
            )

    def df(self, xp, y, out, s1, s2):
        xp.add(y, self.scale * self.alpha, out=s1)
        xp.multiply(s1, self.input_scale, out=s1)
        xp.copyto(s1, self.scale, where=_elu_positive(xp, y))
        xp.copyto(out, s1)


class Celu(Elu):
    opname = "celu"
    node_name = "CeluBackward0"


class CeluInplace(EluInplace):
    opname = "celu"
    node_name = "CeluBackward1"


class Hardtanh(_Activation):
    """clamp(x, min_val, max_val); backward passes the gradient where min_val < x < max_val."""

    opname = "hardtanh"
    node_name = "HardtanhBackward0"
    min_val, max_val = -1.0, 1.0

    def check(self):
        if self.min_val > self.max_val:
            raise ValueError("min_val cannot be greater than max_val")

    def f(self, xp, x, out, s1, s2):
        if xp is np:  # x on a tie (-0.0 against 0 stays -0.0), as torch's cpu clamp
            xp.clip(x, self.min_val, self.max_val, out=out)
        else:  # torch's cuda clamp: min(max(x, lo), hi), which gives +0.0 for -0.0 against 0
            xp.maximum(x, self.min_val, out=out)
            xp.minimum(out, self.max_val, out=out)

    def df(self, xp, x, out, s1, s2):
        xp.greater(x, self.min_val, out=out)
        xp.less(x, self.max_val, out=s1)
        xp.multiply(out, s1, out=out)

    selects = True

    def grad(self, xp, v, g, out, s1, s2):
        # cpu: hardtanh_backward's vectorized form, (min_val < x < max_val) & grad, so a NaN
        # input gets 0 (its scalar form, which torch runs on a loop's last elements, passes it);
        # cuda: (x <= min_val || x >= max_val) ? 0 : grad, so a NaN input passes its gradient
        if xp is np:
            _select_inside(xp, out, g, _inside(xp, v, self.min_val, self.max_val))
        else:
            kernels.zero_where(xp, out, g, _outside(xp, v, self.min_val, self.max_val))


def _sixth(xp, v, out) -> None:
    """out = v / 6 as torch's forward kernels take it: cpu divides by 6; cuda multiplies by
    one_sixth = 1.0f / 6.0f, float32's 1/6 (a float64 hardswish on cuda is off by its 1e-8)."""
    if xp is np:
        xp.divide(v, 6.0, out=out)
    else:
        xp.multiply(v, out.dtype.type(np.float32(1.0) / np.float32(6.0)), out=out)


class Hardswish(_Activation):
    """x relu6(x + 3) / 6; backward: 0 below -3, x/3 + 1/2 up to 3, 1 above."""

    opname = "hardswish"
    node_name = "HardswishBackward0"

    def f(self, xp, x, out, s1, s2):
        xp.add(x, 3.0, out=s1)
        xp.clip(s1, 0.0, 6.0, out=s1)
        xp.multiply(s1, x, out=s1)
        _sixth(xp, s1, out)

    def df(self, xp, x, out, s1, s2):
        xp.divide(x, 3.0, out=s1)
        xp.add(s1, 0.5, out=s1)
        xp.greater(x, 3.0, out=out)
        xp.copyto(s1, 1.0, where=out != 0)
        xp.less(x, -3.0, out=out)
        xp.copyto(s1, 0.0, where=out != 0)
        xp.copyto(out, s1)

    selects = True

    def grad(self, xp, v, g, out, s1, s2):
        # x <= -3: 0; x >= 3: grad; else grad * (x / 3 + 1/2). A NaN input: cpu's vectorized
        # form multiplies (NaN), cuda's kernel (and cpu's scalar form, which torch runs on a
        # loop's last elements) passes the gradient, as its `x < 3` is false
        t = v.dtype.type
        xp.divide(v, t(3.0), out=out)
        xp.add(out, t(0.5), out=out)
        xp.multiply(out, g, out=out)
        passes = xp.greater_equal(v, t(3.0)) if xp is np else xp.logical_not(xp.less(v, t(3.0)))
        xp.copyto(out, g, where=passes)
        xp.copyto(out, 0.0, where=xp.less_equal(v, t(-3.0)))


class Hardsigmoid(_Activation):
    """relu6(x + 3) / 6; backward: 1/6 where -3 < x < 3."""

    opname = "hardsigmoid"
    node_name = "HardsigmoidBackward0"

    def f(self, xp, x, out, s1, s2):
        xp.add(x, 3.0, out=s1)
        xp.clip(s1, 0.0, 6.0, out=s1)
        _sixth(xp, s1, out)

    def df(self, xp, x, out, s1, s2):
        xp.greater(x, -3.0, out=out)
        xp.less(x, 3.0, out=s1)
        xp.multiply(out, s1, out=out)
        xp.divide(out, 6.0, out=out)

    selects = True

    def grad(self, xp, v, g, out, s1, s2):
        # hardsigmoid_backward: (-3 < x < 3) ? grad * one_sixth : 0, one_sixth being
        # scalar_t(1.0f / 6.0f): float32's 1/6 for float64 too (0.1666666716337204)
        xp.multiply(g, out.dtype.type(np.float32(1.0) / np.float32(6.0)), out=out)
        _select_inside(xp, out, out, _inside(xp, v, -3.0, 3.0))


class Threshold(_Activation):
    """x > threshold: x, else value; backward passes the gradient where x > threshold."""

    opname = "threshold"
    node_name = "ThresholdBackward0"
    threshold, value = 0.0, 0.0

    def f(self, xp, x, out, s1, s2):
        xp.copyto(s1, x)
        xp.less_equal(x, self.threshold, out=s2)
        xp.copyto(s1, self.value, where=s2 != 0)
        xp.copyto(out, s1)

    def df(self, xp, x, out, s1, s2):
        xp.greater(x, self.threshold, out=out)

    selects = True

    def grad(self, xp, v, g, out, s1, s2):
        # threshold_backward: x <= threshold ? 0 : grad (a NaN input passes its gradient)
        kernels.threshold_backward(xp, g, v, out, self.threshold)


class ThresholdInplace(Threshold):
    node_name = "ThresholdBackward1"  # still keeps the input: the in-place form pays a clone


class Softplus(_Activation):
    """log(1 + exp(beta x)) / beta, and x itself where beta x > threshold."""

    opname = "softplus"
    node_name = "SoftplusBackward0"
    beta, threshold = 1.0, 20.0

    def f(self, xp, x, out, s1, s2):
        xp.multiply(x, self.beta, out=s1)
        xp.greater(s1, self.threshold, out=s2)
        xp.exp(s1, out=s1)
        xp.log1p(s1, out=s1)
        xp.divide(s1, self.beta, out=s1)
        xp.copyto(s1, x, where=s2 != 0)
        xp.copyto(out, s1)

    def df(self, xp, x, out, s1, s2):
        # z / (z + 1) with z = exp(beta x) (= sigmoid(beta x)); 1 where beta x > threshold
        xp.multiply(x, self.beta, out=s1)
        xp.greater(s1, self.threshold, out=out)
        xp.negative(s1, out=s1)
        xp.exp(s1, out=s1)
        xp.add(s1, 1.0, out=s1)
        xp.reciprocal(s1, out=s1)
        xp.copyto(s1, 1.0, where=out != 0)
        xp.copyto(out, s1)


class Hardshrink(_Activation):
    """x where |x| > lambd, else 0; backward: grad where |x| > lambd."""

    opname = "hardshrink"
    node_name = "HardshrinkBackward0"
    lambd = 0.5

    def f(self, xp, x, out, s1, s2):
        xp.abs(x, out=s1)
        xp.copyto(out, x)
        xp.copyto(out, 0, where=s1 <= self.lambd)

    def df(self, xp, x, out, s1, s2):
        xp.abs(x, out=s1)
        xp.greater(s1, self.lambd, out=out)

    selects = True

    def grad(self, xp, v, g, out, s1, s2):
        # shrink_backward selects: cpu's vectorized form (x < -lambd | x > lambd) & grad, so a
        # NaN input gets 0; cuda's (-lambd <= x <= lambd) ? 0 : grad passes a NaN input's
        t = v.dtype.type
        if xp is np:
            passes = xp.less(v, t(-self.lambd))
            _select_inside(
                xp, out, g, xp.logical_or(passes, xp.greater(v, t(self.lambd)), out=passes)
            )
        else:
            kernels.zero_where(xp, out, g, _between(xp, v, -self.lambd, self.lambd))


class Softshrink(_Activation):
    """x - lambd above lambd, x + lambd below -lambd, else 0; backward: grad where |x| >
    lambd."""

    opname = "softshrink"
    node_name = "SoftshrinkBackward0"
    lambd = 0.5

    def forward(self, x, out=None, **params):
        lambd = params.get("lambd", self.lambd)
        if lambd < 0 and x._dtype.is_floating_point:
            kind = x._dtype.scalar_name
            top = float(np.finfo(x._dtype.np).max)
            raise RuntimeError(
                f"lambda must be in range [0, {top:g}] for input dtype {kind}, but found {lambd:g}"
            )
        return super().forward(x, out, **params)

    def f(self, xp, x, out, s1, s2):
        xp.subtract(x, self.lambd, out=out)
        xp.add(x, self.lambd, out=s1)
        xp.copyto(out, s1, where=x < -self.lambd)
        xp.abs(x, out=s1)
        xp.copyto(out, 0, where=s1 <= self.lambd)

    df = Hardshrink.df
    selects = True
    grad = Hardshrink.grad


# ---------------------------------------------------------------------------------------------
# public functions: torch.* / F.* names, with inplace= where PyTorch has it
# ---------------------------------------------------------------------------------------------
def _apply(cls, cls_inplace, input, inplace, op, **params):
    if inplace:
        return cls_inplace.apply(input, out=input, op=op + "_", **params)
    return cls.apply(input, op=op, **params)


def silu(input, inplace=False):
    return _apply(Silu, Silu, input, inplace, "silu")


def mish(input, inplace=False):
    return _apply(Mish, Mish, input, inplace, "mish")


def leaky_relu(input, negative_slope=0.01, inplace=False):
    return _apply(
        LeakyRelu, LeakyReluInplace, input, inplace, "leaky_relu", negative_slope=negative_slope
    )


def leaky_relu_(input, negative_slope=0.01):
    return leaky_relu(input, negative_slope, inplace=True)


def elu(input, alpha=1.0, inplace=False):
    return _apply(Elu, EluInplace, input, inplace, "elu", alpha=alpha)


def elu_(input, alpha=1.0):
    return elu(input, alpha, inplace=True)


def celu(input, alpha=1.0, inplace=False):
    if alpha == 0:
        raise RuntimeError("ZeroDivisionError: celu: alpha cannot be 0")
    return _apply(Celu, CeluInplace, input, inplace, "celu", alpha=alpha, input_scale=1.0 / alpha)


def celu_(input, alpha=1.0):
    return celu(input, alpha, inplace=True)


def selu(input, inplace=False):
    # PyTorch runs selu as elu(x, alpha, scale): the node is EluBackward0 / EluBackward1
    return _apply(Elu, EluInplace, input, inplace, "selu", alpha=SELU_ALPHA, scale=SELU_SCALE)


def selu_(input):
    return selu(input, inplace=True)


def hardtanh(input, min_val=-1.0, max_val=1.0, inplace=False):
    return _apply(Hardtanh, Hardtanh, input, inplace, "hardtanh", min_val=min_val, max_val=max_val)


def hardtanh_(input, min_val=-1.0, max_val=1.0):
    return hardtanh(input, min_val, max_val, inplace=True)


def relu6(input, inplace=False):
    """hardtanh(x, 0, 6): in place it keeps the input, so it pays a clone (as torch 2.x does)."""
    return _apply(Hardtanh, Hardtanh, input, inplace, "relu6", min_val=0.0, max_val=6.0)


def relu6_(input):
    return relu6(input, inplace=True)


def hardswish(input, inplace=False):
    return _apply(Hardswish, Hardswish, input, inplace, "hardswish")


def hardsigmoid(input, inplace=False):
    return _apply(Hardsigmoid, Hardsigmoid, input, inplace, "hardsigmoid")


def threshold(input, threshold, value, inplace=False):
    return _apply(
        Threshold, ThresholdInplace, input, inplace, "threshold", threshold=threshold, value=value
    )


def threshold_(input, threshold, value):
    return _apply(
        Threshold, ThresholdInplace, input, True, "threshold", threshold=threshold, value=value
    )


def softplus(input, beta=1.0, threshold=20.0):
    return Softplus.apply(input, op="softplus", beta=beta, threshold=threshold)


def hardshrink(input, lambd=0.5):
    return Hardshrink.apply(input, op="hardshrink", lambd=lambd)


def softshrink(input, lambd=0.5):
    return Softshrink.apply(input, op="softshrink", lambd=lambd)


# F.* names (engine.nn.functional)
FUNCTIONAL = dict(
    silu=silu,
    mish=mish,
    leaky_relu=leaky_relu,
    leaky_relu_=leaky_relu_,
    elu=elu,
    elu_=elu_,
    celu=celu,
    celu_=celu_,
    selu=selu,
    selu_=selu_,
    hardtanh=hardtanh,
    hardtanh_=hardtanh_,
    relu6=relu6,
    hardswish=hardswish,
    hardsigmoid=hardsigmoid,
    threshold=threshold,
    threshold_=threshold_,
    softplus=softplus,
    hardshrink=hardshrink,
    softshrink=softshrink,
)

# torch.* names (engine.*): those torch has at the top level
FUNCTIONS = dict(
    selu=lambda input: selu(input),
    selu_=selu_,
    celu=lambda input, alpha=1.0: celu(input, alpha),
    celu_=celu_,
    threshold=lambda input, threshold, value: globals()["threshold"](input, threshold, value),
    threshold_=threshold_,
    hardshrink=hardshrink,
)
# published as Tensor methods too (torch.Tensor.hardshrink)
_METHODS = {"hardshrink"}


# In-place forms torch publishes only through torch._C._nn: rows of their own (published
# nowhere) so that the table knows them as in-place forms (a scenario's `inplace: true`)
_HIDDEN_INPLACE = dict(
    silu_=lambda input: silu(input, inplace=True),
    mish_=lambda input: mish(input, inplace=True),
    hardswish_=lambda input: hardswish(input, inplace=True),
    hardsigmoid_=lambda input: hardsigmoid(input, inplace=True),
    relu6_=relu6_,
)

_F = float
# scenario arguments (name, type, default, doc) of each activation
_SCENARIO_ARGS = dict(
    silu=(),
    mish=(),
    leaky_relu=(("negative_slope", _F, 0.01, "slope below 0"),),
    elu=(("alpha", _F, 1.0, "scale of the negative part"),),
    celu=(("alpha", _F, 1.0, "scale of the negative part"),),
    selu=(),
    hardtanh=(("min_val", _F, -1.0, "lower bound"), ("max_val", _F, 1.0, "upper bound")),
    relu6=(),
    hardswish=(),
    hardsigmoid=(),
    threshold=(
        ("threshold", _F, REQUIRED, "values at or below it are replaced"),
        ("value", _F, REQUIRED, "the replacement"),
    ),
    softplus=(("beta", _F, 1.0, ""), ("threshold", _F, 20.0, "linear above threshold / beta")),
    hardshrink=(("lambd", _F, 0.5, "values within +-lambd become 0"),),
    softshrink=(("lambd", _F, 0.5, "shrinks toward 0 by lambd"),),
)
_COST = dict(
    leaky_relu="is free (backward keeps the result)",
    elu="is free (backward keeps the result)",
    celu="is free (backward keeps the result)",
    selu="is free (backward keeps the result)",
)


def _scenario(name):
    fn = FUNCTIONAL[name]
    if name in ("softplus", "hardshrink", "softshrink"):
        return Scenario(args=_SCENARIO_ARGS[name], doc=f"{name}; no in-place form")

    def call(ts, a, inplace):
        return fn(ts[0], **a, inplace=True) if inplace else fn(ts[0], **a)

    cost = _COST.get(name, "pays a clone of the input (backward keeps the input)")
    return Scenario(
        args=_SCENARIO_ARGS[name], call=call, doc=f"F.{name}; in place it {cost}, as in PyTorch"
    )


def _inplace_row(name):
    if name + "_" in FUNCTIONAL or name + "_" in FUNCTIONS or name + "_" in _HIDDEN_INPLACE:
        return name + "_"
    return None


# One row of the op table (engine/ops/registry.py) per name: engine.<name> and/or F.<name>
for _name, _fn in _HIDDEN_INPLACE.items():
    _fn.__name__ = _name
    register(_name, _fn, function=False)
for _name in dict.fromkeys([*FUNCTIONAL, *FUNCTIONS]):
    register(
        _name,
        FUNCTIONS.get(_name, FUNCTIONAL.get(_name)),
        function=_name in FUNCTIONS,
        method=_name in _METHODS,
        functional=FUNCTIONAL.get(_name, False),
        inplace=_inplace_row(_name) if not _name.endswith("_") else None,
        scenario=_scenario(_name) if _name in _SCENARIO_ARGS else None,
    )


__all__ = sorted(FUNCTIONAL)
