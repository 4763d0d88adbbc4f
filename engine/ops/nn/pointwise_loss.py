"""Pointwise losses beside mse_loss: l1_loss, smooth_l1_loss, huber_loss, binary_cross_entropy,
binary_cross_entropy_with_logits and kl_div, each with torch 2.13's nodes and CPU memory (its
profiler's allocation events, tests/engine/test_pointwise_loss.py):

- l1_loss and kl_div are composites in torch (abs(input - target) and xlogy / exp), so here too:
  their nodes (AbsBackward0, SubBackward0, MulBackward0 ...) and what those save are torch's;
- smooth_l1_loss reduces into a full-size result buffer resized to 0-d, as mse_loss: the loss
  scalar keeps the whole buffer (torch's structured kernel);
- huber_loss computes the elementwise losses, reduces them into a new scalar and frees them;
- binary_cross_entropy writes the losses into its result buffer and keeps it under the scalar
  (the reduction goes through a 0-d temporary);
- binary_cross_entropy_with_logits is torch's composite written as one node: log_sigmoid(input)
  (whose CPU buffer comes and goes), (1 - target) * input - that, times weight, then reduced.

Backward allocates the input's gradient alone (the target's when it asks for one).
"""

from __future__ import annotations

import math
import warnings

import numpy as np

from engine import kernels
from engine.autograd.function import Function
from engine.ops.common import broadcast_shape, device_of, result_buffer, result_type, sum_to
from engine.ops.nn.common import _first_element, _live, _needs
from engine.ops.nn.loss import _check_reduction, _legacy_reduction
from engine.tensor import Tensor


def _reduce_into(xp, losses, reduction, out):
    (xp.mean if reduction == "mean" else xp.sum)(losses, out=out)


def _scale(g: Tensor, reduction: str, n: int) -> float | None:
    """The scalar gradient of a reduced loss, divided by n for a mean; None for 'none'."""
    if reduction == "none":
        return None
    if not _live(g._device):
        return 1.0  # (meta: shapes only, any number does)
    s = float(g.item())
    return s / max(n, 1) if reduction == "mean" else s


class _Distance(Function):
    """smooth_l1_loss / huber_loss: f(input - target), broadcast, saved inputs."""

    retain_inputs = (0, 1)
    opname = ""

    def forward(self, input, target, out=None, reduction="mean", param=1.0):
        _check_reduction(reduction)
        self.shape = broadcast_shape(input, target, self.opname)
        self.dtype = result_type(input, target)
        self.dev = device_of(input, target)
        self.reduction, self.param = reduction, float(param)
        self.shapes = (input.shape, target.shape)
        if reduction == "none":
            y = result_buffer(out, self.shape, self.dtype, self.dev, self.opname)
            self._losses(input, target, y._data)
            return y
        return self._reduced(input, target)

    def _losses(self, x, t, out):
        if not _live(self.dev):
            return
        xp = kernels.xp_of_device(self.dev)
        xp.subtract(x._data, t._data, out=out)
        xp.abs(out, out=out)
        small = out < self.param
        quad = self._quadratic(xp, out)
        self._linear(xp, out)
        xp.copyto(out, quad, where=small)

    def backward(self, g):
        x, t = self.saved_tensors
        nx, nt = _needs(self)
        gi = kernels.empty(self.shape, g._dtype, g._device)
        scale = _scale(g, self.reduction, math.prod(self.shape))
        if _live(g._device):
            xp = kernels.xp_of(g)
            xp.subtract(x._data, t._data, out=gi._data)
            self._slope(xp, gi._data)
            if scale is None:
                xp.multiply(gi._data, g._data, out=gi._data)
            else:
                xp.multiply(gi._data, scale, out=gi._data)
        gx = gt = None
        if nt:
            gt = kernels.empty(self.shape, g._dtype, g._device)
            if _live(g._device):
                kernels.xp_of(g).negative(gi._data, out=gt._data)
            gt = sum_to(gt, self.shapes[1])
        if nx:
            gx = sum_to(gi, self.shapes[0])
        return (gx, gt)


class SmoothL1Loss(_Distance):
    """0.5 d^2 / beta where |d| < beta, else |d| - beta / 2 (d = input - target)."""

    opname = "smooth_l1_loss"

    def _reduced(self, x, t):
        # torch's structured kernel: the mean/sum is written into a full-size result buffer
        # resized to 0-d, which the scalar keeps (as mse_loss)
        n = math.prod(self.shape)
        result = kernels.empty(self.shape if n else (1,), self.dtype, self.dev)
        losses = kernels.empty(self.shape, self.dtype, self.dev)
        self._losses(x, t, losses._data)
        if _live(self.dev):
            xp = kernels.xp_of_device(self.dev)
            _reduce_into(xp, losses._data, self.reduction, _first_element(result._data))
        del losses
        return Tensor._make(_first_element(result._data), result._storage, self.dtype, self.dev)

    def _quadratic(self, xp, z):
        q = z * z
        q *= 0.5 / self.param
        return q

    def _linear(self, xp, z):
        xp.subtract(z, 0.5 * self.param, out=z)

    def _slope(self, xp, d):  # d / beta, within [-1, 1]
        xp.divide(d, self.param, out=d)
        xp.clip(d, -1.0, 1.0, out=d)

    def name(self):
        return "SmoothL1LossBackward0"


class HuberLoss(_Distance):
    """0.5 d^2 where |d| < delta, else delta (|d| - delta / 2) (d = input - target)."""

    opname = "huber_loss"

    def _reduced(self, x, t):
        # the elementwise losses, then their mean/sum as a new scalar; the losses are freed
        losses = kernels.empty(self.shape, self.dtype, self.dev)
        self._losses(x, t, losses._data)
        y = kernels.empty((), self.dtype, self.dev)
        if _live(self.dev):
            _reduce_into(kernels.xp_of_device(self.dev), losses._data, self.reduction, y._data)
        del losses
        return y

    def _quadratic(self, xp, z):
        q = z * z
        q *= 0.5
        return q

    def _linear(self, xp, z):
        xp.subtract(z, 0.5 * self.param, out=z)
        xp.multiply(z, self.param, out=z)

    def _slope(self, xp, d):  # d, within [-delta, delta]
        xp.clip(d, -self.param, self.param, out=d)

    def name(self):
        return "HuberLossBackward0"


def _size(t) -> str:
    return f"torch.Size({list(t.shape)})"  # torch's words for a shape


def _same_size(input, target, logits):
    if tuple(target.shape) == tuple(input.shape):
        return
    if logits:
        raise ValueError(
            f"Target size ({_size(target)}) must be the same as input size ({_size(input)})"
        )
    raise ValueError(
        f"Using a target size ({_size(target)}) that is different to the input size "
        f"({_size(input)}) is deprecated. Please ensure they have the same size."
    )


class BinaryCrossEntropy(Function):
    """-w (t log(x) + (1 - t) log(1 - x)), each log clamped at -100 (torch's CPU kernel:
    (t - 1) max(log1p(-x), -100) - t max(log(x), -100)); x must lie in [0, 1]."""

    def to_save(self, tensors):
        return tuple(range(len(tensors)))  # input, target and any weight: backward reads them

    def forward(self, input, target, weight=None, out=None, reduction="mean"):
        _check_reduction(reduction)
        self.reduction, self.has_weight = reduction, weight is not None
        dev, dtype, shape = input._device, input._dtype, tuple(input.shape)
        self.shape = shape
        y = result_buffer(out if reduction == "none" else None, shape, dtype, dev, "bce")
        if _live(dev):
            xp = kernels.xp_of(input)
            x, t = input._data, target._data
            if x.size and bool(((x < 0) | (x > 1)).any()):
                raise RuntimeError("all elements of input should be between 0 and 1")
            yd = y._data
            with np.errstate(divide="ignore"):
                log_x = xp.maximum(xp.log(x), -100.0)
                xp.log1p(-x, out=yd)
            xp.maximum(yd, -100.0, out=yd)
            xp.multiply(yd, t - 1.0, out=yd)
            log_x *= t
            xp.subtract(yd, log_x, out=yd)
            if weight is not None:
                xp.multiply(yd, weight._data, out=yd)
        if reduction == "none":
            return y
        # the mean/sum goes through a 0-d temporary into y's first element; y, resized to 0-d,
        # is the result
        tmp = kernels.empty((), dtype, dev)
        if _live(dev):
            xp = kernels.xp_of(input)
            _reduce_into(xp, y._data, reduction, tmp._data)
            _first_element(y._data)[...] = tmp._data
        del tmp
        return Tensor._make(_first_element(y._data), y._storage, dtype, dev)

    def backward(self, g):
        saved = self.saved_tensors
        x, t = saved[0], saved[1]
        w = saved[2] if self.has_weight else None
        nx, nt = _needs(self)[:2]
        n = math.prod(self.shape)
        scale = _scale(g, self.reduction, 1)  # (the mean's division comes last, as torch's)
        gx = gt = None
        live = _live(g._device)
        xp = kernels.xp_of(g) if live else None
        if nx:  # grad (x - t) / max((1 - x) x, 1e-12), times weight, over n for a mean
            gx = kernels.empty(self.shape, g._dtype, g._device)
            if live:
                gd, xd = gx._data, x._data
                denom = (1.0 - xd) * xd
                xp.maximum(denom, 1e-12, out=denom)
                xp.subtract(xd, t._data, out=gd)
                xp.multiply(gd, g._data if scale is None else scale, out=gd)
                xp.divide(gd, denom, out=gd)
                self._finish(xp, gd, w, n)
        if nt:  # derivatives.yaml: -logit(x) * grad, times weight, over n for a mean
            gt = kernels.empty(self.shape, g._dtype, g._device)
            if live:
                gd, xd = gt._data, x._data
                with np.errstate(divide="ignore"):
                    xp.log(xd / (1.0 - xd), out=gd)
                xp.negative(gd, out=gd)
                xp.multiply(gd, g._data if scale is None else scale, out=gd)
                self._finish(xp, gd, w, n)
        return (gx, gt) if not self.has_weight else (gx, gt, None)

    def _finish(self, xp, gd, w, n):
        if w is not None:
            xp.multiply(gd, w._data, out=gd)
        if self.reduction == "mean":
            xp.divide(gd, n, out=gd)

    def name(self):
        return "BinaryCrossEntropyBackward0"


def _log_sigmoid(xp, x, out):
    """out = log(sigmoid(x)) = min(x, 0) - log1p(exp(-|x|)), torch's CPU formula."""
    e = xp.abs(x)
    xp.negative(e, out=e)
    xp.exp(e, out=e)
    xp.log1p(e, out=e)
    xp.minimum(x, 0.0, out=out)
    xp.subtract(out, e, out=out)


class BinaryCrossEntropyWithLogits(Function):
    """(1 - t) x - log_sigmoid(x) [times (1 + (pos_weight - 1) t)], times weight; torch 2.13's
    composite (log_sigmoid, then (1 - target).mul_(input).sub_(...)) as one node."""

    def to_save(self, tensors):
        return tuple(range(len(tensors)))

    def forward(self, input, target, *weights, out=None, reduction="mean", has=(False, False)):
        _check_reduction(reduction)
        self.reduction, self.has = reduction, has
        ws = iter(weights)
        weight = next(ws) if has[0] else None
        pos_weight = next(ws) if has[1] else None
        dev, dtype, shape = input._device, input._dtype, tuple(input.shape)
        self.shape = shape
        live = _live(dev)
        xp = kernels.xp_of(input) if live else None
        # at::log_sigmoid: its output, and on cpu a buffer of the same size it drops (cuda's
        # kernel makes none; meta plans a GPU run)
        logsig = kernels.empty(shape, dtype, dev)
        buffer = kernels.empty(shape, dtype, dev) if dev.type == "cpu" else None
        if live:
            _log_sigmoid(xp, input._data, logsig._data)
        del buffer
        if pos_weight is not None:  # log_weight = (pos_weight - 1) * target + 1
            pw1 = kernels.empty(tuple(pos_weight.shape), dtype, dev)
            log_weight = kernels.empty(broadcast_shape(pos_weight, target, "mul"), dtype, dev)
            if live:
                xp.subtract(pos_weight._data, 1.0, out=pw1._data)
                xp.multiply(pw1._data, target._data, out=log_weight._data)
                xp.add(log_weight._data, 1.0, out=log_weight._data)
            del pw1
            if live:
                xp.multiply(logsig._data, log_weight._data, out=logsig._data)
            del log_weight
        loss = result_buffer(out if reduction == "none" else None, shape, dtype, dev, "bce")
        if live:
            ld = loss._data
            xp.subtract(1.0, target._data, out=ld)
            xp.multiply(ld, input._data, out=ld)
            xp.subtract(ld, logsig._data, out=ld)
            if weight is not None:
                xp.multiply(ld, weight._data, out=ld)
        if reduction == "none":
            del logsig
            return loss
        y = kernels.empty((), dtype, dev)
        if live:
            _reduce_into(xp, loss._data, reduction, y._data)
        del loss, logsig
        return y

    def backward(self, g):
        saved = iter(self.saved_tensors)
        x, t = next(saved), next(saved)
        weight = next(saved) if self.has[0] else None
        pos_weight = next(saved) if self.has[1] else None
        nx, nt = _needs(self)[:2]
        n = math.prod(self.shape)
        scale = _scale(g, self.reduction, 1)
        live = _live(g._device)
        xp = kernels.xp_of(g) if live else None
        dev, dtype = g._device, g._dtype
        gx = gt = None
        if nx:
            if pos_weight is None:  # sigmoid(x) - t
                gx = kernels.empty(self.shape, dtype, dev)
                if live:
                    gd = gx._data
                    _sigmoid(xp, x._data, gd)
                    xp.subtract(gd, t._data, out=gd)
            else:  # (pos_weight t + 1 - t) sigmoid(x) - pos_weight t
                pt = kernels.empty(self.shape, dtype, dev)
                gx = kernels.empty(self.shape, dtype, dev)
                sig = kernels.empty(self.shape, dtype, dev)
                if live:
                    gd = gx._data
                    xp.multiply(pos_weight._data, t._data, out=pt._data)
                    xp.add(pt._data, 1.0, out=gd)
                    xp.subtract(gd, t._data, out=gd)
                    _sigmoid(xp, x._data, sig._data)
                    xp.multiply(gd, sig._data, out=gd)
                    xp.subtract(gd, pt._data, out=gd)
                del sig, pt
            if live:
                self._finish(xp, gx._data, weight, n, g, scale)
        if nt:  # -x, or log_sigmoid(-x) - pos_weight log_sigmoid(x)
            gt = kernels.empty(self.shape, dtype, dev)
            if live:
                gd = gt._data
                if pos_weight is None:
                    xp.negative(x._data, out=gd)
                else:
                    ls = xp.empty_like(gd)
                    _log_sigmoid(xp, x._data, ls)
                    xp.subtract(ls, x._data, out=gd)
                    ls *= pos_weight._data
                    gd -= ls
                self._finish(xp, gd, weight, n, g, scale)
        return (gx, gt) + (None,) * (len(self._edges) - 2)

    def _finish(self, xp, gd, weight, n, g, scale):
        if weight is not None:
            xp.multiply(gd, weight._data, out=gd)
        if self.reduction == "mean":
            xp.divide(gd, n, out=gd)
        xp.multiply(gd, g._data if scale is None else scale, out=gd)

    def name(self):
        return "BinaryCrossEntropyWithLogitsBackward0"


def _sigmoid(xp, x, out):
    xp.negative(x, out=out)
    xp.exp(out, out=out)
    xp.add(out, 1.0, out=out)
    xp.reciprocal(out, out=out)


# ---------------------------------------------------------------------------------------------
# the functional forms (torch.nn.functional's signatures)
# ---------------------------------------------------------------------------------------------
def l1_loss(input, target, size_average=None, reduce=None, reduction="mean"):
    """mean |input - target| (or sum / elementwise): torch's composite, abs(input - target)."""
    reduction = _legacy_reduction(size_average, reduce, reduction)
    _check_reduction(reduction)
    loss = (input - target).abs()
    if reduction == "none":
        return loss
    return loss.mean() if reduction == "mean" else loss.sum()


def smooth_l1_loss(input, target, size_average=None, reduce=None, reduction="mean", beta=1.0):
    reduction = _legacy_reduction(size_average, reduce, reduction)
    if beta < 0:
        raise RuntimeError("smooth_l1_loss does not support negative values for beta.")
    if beta == 0.0:  # torch: the l1 loss itself
        return l1_loss(input, target, reduction=reduction)
    return SmoothL1Loss.apply(input, target, op="smooth_l1_loss", reduction=reduction, param=beta)


def huber_loss(input, target, reduction="mean", delta=1.0, weight=None):
    """torch's F.huber_loss; with a weight (input's size), its composite: the elementwise
    losses of the broadcast operands times the weight, then reduced (both held until the
    reduction is made, as the Python locals of torch's)."""
    from engine import ops

    if weight is not None and tuple(weight.shape) != tuple(input.shape):
        raise ValueError("Weights and input must have the same size.")
    if delta <= 0:
        raise RuntimeError("huber_loss does not support non-positive values for delta.")
    if weight is None:
        return HuberLoss.apply(input, target, op="huber_loss", reduction=reduction, param=delta)
    expanded_input, expanded_target = ops.broadcast_tensors(input, target)
    unweighted = HuberLoss.apply(
        expanded_input, expanded_target, op="huber_loss", reduction="none", param=delta
    )
    weighted = unweighted * weight
    if reduction == "none":
        return weighted
    if reduction == "sum":
        return weighted.sum()
    if reduction == "mean":
        return weighted.mean()
    raise ValueError(f"Invalid reduction mode: {reduction}. Expected one of 'none', 'mean', 'sum'.")


def _not_differentiable(fn: str, **tensors) -> None:
    from engine.autograd.grad_mode import is_grad_enabled

    for name, t in tensors.items():
        if t is not None and t.requires_grad and is_grad_enabled():
            raise RuntimeError(
                f"The function '{fn}' is not differentiable with respect to argument '{name}'. "
                "This input cannot have requires_grad True."
            )


def binary_cross_entropy(
    input, target, weight=None, size_average=None, reduce=None, reduction="mean"
):
    reduction = _legacy_reduction(size_average, reduce, reduction)
    _not_differentiable("binary_cross_entropy", weight=weight)
    _same_size(input, target, logits=False)
    if weight is not None and tuple(weight.shape) != tuple(input.shape):
        weight = weight.expand(input.shape)  # torch: weight.expand(new_size)
    args = (input, target) if weight is None else (input, target, weight)
    return BinaryCrossEntropy.apply(*args, op="binary_cross_entropy", reduction=reduction)


def binary_cross_entropy_with_logits(
    input,
    target,
    weight=None,
    size_average=None,
    reduce=None,
    reduction="mean",
    pos_weight=None,
):
    reduction = _legacy_reduction(size_average, reduce, reduction)
    _same_size(input, target, logits=True)
    _not_differentiable("binary_cross_entropy_with_logits", weight=weight, pos_weight=pos_weight)
    extra = tuple(w for w in (weight, pos_weight) if w is not None)
    return BinaryCrossEntropyWithLogits.apply(
        input,
        target,
        *extra,
        op="binary_cross_entropy_with_logits",
        reduction=reduction,
        has=(weight is not None, pos_weight is not None),
    )


def kl_div(input, target, size_average=None, reduce=None, reduction="mean", log_target=False):
    """torch's composite: exp(target) * (target - input) with log_target, else
    xlogy(target, target) - target * input; 'batchmean' sums and divides by the batch size."""
    from engine import ops

    reduction = _legacy_reduction(size_average, reduce, reduction)
    if reduction not in ("none", "mean", "sum", "batchmean"):
        raise ValueError(f"{reduction} is not a valid value for reduction")
    if reduction == "mean":
        warnings.warn(
            "reduction: 'mean' divides the total loss by both the batch size and the support "
            "size.'batchmean' divides only by the batch size, and aligns with the KL div math "
            "definition.'mean' will be changed to behave the same as 'batchmean' in the next "
            "major release.",
            stacklevel=2,
        )
    # one C++ statement each: its temporaries go when the result is made, the last made first
    # (torch's build evaluates exp's product right operand first)
    if log_target:
        diff = target - input
        e = ops.exp(target)
        out = e * diff
        del e, diff
    else:
        xl = ops.xlogy(target, target)
        prod = target * input
        out = xl - prod
        del prod, xl
    if reduction == "none":
        return out
    # torch.kl_div (C++) frees the elementwise losses before it returns; F.kl_div divides the
    # sum by the batch size for 'batchmean'
    total = out.mean() if reduction == "mean" else out.sum()
    del out
    if reduction == "batchmean" and input.ndim:
        return total / input.shape[0]
    return total
