"""Losses: mse_loss, nll_loss."""

from __future__ import annotations

import math

import numpy as np

from engine import dtypes, kernels
from engine.autograd.function import Function
from engine.ops.common import broadcast_shape, device_of, result_buffer, result_type, sum_to
from engine.ops.elementwise import _uf
from engine.ops.nn.common import (
    _first_element,
    _live,
    _needs,
    _reshaped,
    _work,
)
from engine.tensor import Tensor

_REDUCTIONS = ("none", "mean", "sum")


def _check_reduction(reduction):
    if reduction not in _REDUCTIONS:
        raise ValueError(f"{reduction} is not a valid value for reduction")


class MseLoss(Function):
    retain_inputs = (0, 1)

    def forward(self, input, target, out=None, reduction="mean"):
        _check_reduction(reduction)
        shape = broadcast_shape(input, target, "mse_loss")
        dtype = result_type(input, target)
        dev = device_of(input, target)
        self.reduction, self.shape = reduction, shape
        self.shapes = (input.shape, target.shape)
        if reduction == "none":
            y = result_buffer(out, shape, dtype, dev, "mse_loss")
            if _live(dev):
                xp = kernels.xp_of_device(dev)
                _uf(xp, np.subtract, input._data, target._data, out=y._data)
                _uf(xp, np.multiply, y._data, y._data, out=y._data)
            return y
        # PyTorch reduces into its full-size result buffer resized to 0-d: the loss scalar keeps
        # the whole buffer. Doing the same keeps the engine's peak equal to torch's.
        result = kernels.empty(shape if math.prod(shape) else (1,), dtype, dev)
        losses = kernels.empty(shape, dtype, dev)
        if _live(dev):
            xp = kernels.xp_of_device(dev)
            _uf(xp, np.subtract, input._data, target._data, out=losses._data)
            _uf(xp, np.multiply, losses._data, losses._data, out=losses._data)
            reduce = xp.mean if reduction == "mean" else xp.sum
            reduce(losses._data, out=_first_element(result._data))
        del losses
        return Tensor._make(_first_element(result._data), result._storage, dtype, dev)

    def backward(self, g):
        x, t = self.saved_tensors
        nx, nt = _needs(self)
        dev, dt = g._device, g._dtype
        gi = kernels.empty(self.shape, dt, dev)
        if _live(dev):
            xp = kernels.xp_of(g)
            _uf(xp, np.subtract, x._data, t._data, out=gi._data)
            if self.reduction == "none":
                xp.multiply(gi._data, 2.0, out=gi._data)
                xp.multiply(gi._data, g._data, out=gi._data)
            else:
                scale = 2.0 * float(g.item())
                if self.reduction == "mean":
                    scale /= max(math.prod(self.shape), 1)
                _uf(xp, np.multiply, gi._data, scale, out=gi._data)
        gx = gt = None
        if nt:
            gt = kernels.empty(self.shape, dt, dev)
            if _live(dev):
                kernels.xp_of(g).negative(gi._data, out=gt._data)
            gt = sum_to(gt, self.shapes[1])
        if nx:
            gx = sum_to(gi, self.shapes[0])
        return (gx, gt)

    def name(self):
        return "MseLossBackward0"


class NllLoss(Function):
    """nll_loss(log_probs [N, C, *], target [N, *]) with weight, ignore_index and reduction."""

    def to_save(self, tensors):
        return tuple(range(1, len(tensors)))  # target (and weight); the input is not needed

    def forward(self, input, target, weight=None, out=None, reduction="mean", ignore_index=-100):
        _check_reduction(reduction)
        if target._dtype.is_floating_point or target._dtype is dtypes.bool_:
            raise RuntimeError(f"expected scalar type Long but found {target._dtype.scalar_name}")
        batched = input.ndim >= 2
        ishape = input.shape if batched else (1,) + input.shape
        tshape = target.shape if batched else (1,) + target.shape
        if ishape[:1] + ishape[2:] != tshape:
            raise ValueError(
                f"Expected input batch_size ({ishape[0]}) to match target batch_size ({tshape[0]})."
                if ishape[0] != tshape[0]
                else f"nll_loss: expected target of shape {list(ishape[:1] + ishape[2:])}, got {list(target.shape)}"
            )
        n_cls = ishape[1]
        if weight is not None and weight.shape != (n_cls,):
            raise RuntimeError(
                f"weight tensor should be defined either for all {n_cls} classes or no classes but "
                f"got weight tensor of shape: {list(weight.shape)}"
            )
        self.reduction, self.ignore_index = reduction, ignore_index
        self.ishape, self.in_shape, self.has_weight = ishape, input.shape, weight is not None
        dev, dt = input._device, input._dtype
        if reduction == "none":
            y = kernels.empty(target.shape, dt, dev)
        else:
            y = kernels.empty((), dt, dev)
            total = kernels.empty((), dt, dev)
        if _live(dev):
            xp = kernels.xp_of(input)
            flat_in, keep = _reshaped(input, (math.prod(ishape),))
            (idx, wts), owners = self._index(xp, target, weight, dev, dt)
            picked, pkeep = _work(idx.shape, dt, dev)
            xp.take(flat_in, idx, out=picked)
            xp.multiply(picked, wts, out=picked)
            if reduction == "none":
                xp.negative(picked, out=picked)
            # an ignored target's term is +0.0, as torch's kernel skips it (its stand-in index
            # reads class 0, whose -inf times the 0 weight would be NaN)
            xp.copyto(picked, 0, where=self._ignored(xp, target))
            if reduction == "none":
                xp.copyto(y._data, picked.reshape(target.shape))
            else:
                s = -xp.sum(picked, dtype=np.float64)
                tw = xp.sum(wts, dtype=np.float64)
                total._data[...] = tw
                if reduction == "mean":
                    s = s / tw if tw != 0 else np.nan
                y._data[...] = s
            del picked, pkeep, idx, wts, owners, keep
        if reduction != "none":
            self.save(total_weight=total)
        return y

    def _ignored(self, xp, target):
        """Where the target is ignore_index, [N, positions] as _index's arrays."""
        n, inner = self.ishape[0], math.prod(self.ishape[2:])
        return xp.equal(target._data.reshape(n, inner), self.ignore_index)

    def _index(self, xp, target, weight, dev, dt):
        """Flat positions into the input and per-element weights (0 where ignored).

        Returns ((idx, wts), owners): target-sized scratch, charged when it is large.
        """
        n, n_cls = self.ishape[0], self.ishape[1]
        inner = math.prod(self.ishape[2:])
        t = target._data.reshape(n, inner)
        valid, vkeep = _work((n, inner), dtypes.bool_, dev)
        xp.not_equal(t, self.ignore_index, out=valid)
        if n * inner:
            if xp is np:
                hi = int(np.max(t, where=valid, initial=-1))
                lo = int(np.min(t, where=valid, initial=0))
            else:  # CuPy's reductions take no where=: a temporary, seen as CuPy's own
                hi = int(xp.where(valid, t, -1).max())
                lo = int(xp.where(valid, t, 0).min())
            if hi >= n_cls or lo < 0:
                raise IndexError(f"Target {hi if hi >= n_cls else lo} is out of bounds.")
        idx, ikeep = _work((n, inner), dtypes.int64, dev)
        xp.multiply(t, valid, out=idx)  # the class, 0 where ignored
        wts, wkeep = _work((n, inner), dt, dev)
        if weight is not None:
            xp.take(weight._data, idx, out=wts)
            xp.multiply(wts, valid, out=wts)
        else:
            xp.copyto(wts, valid, casting="unsafe")
        del valid, vkeep
        xp.multiply(idx, inner, out=idx)
        xp.add(idx, xp.asarray(np.arange(n, dtype=np.int64)[:, None] * (n_cls * inner)), out=idx)
        xp.add(idx, xp.asarray(np.arange(inner, dtype=np.int64)[None, :]), out=idx)
        return (idx, wts), (ikeep, wkeep)

    def backward(self, g):
        saved = self.saved_tensors
        target = saved[0]
        weight = saved[1] if self.has_weight else None
        dev, dt = g._device, g._dtype
        gx = kernels.zeros(self.in_shape, dt, dev)
        if _live(dev):
            xp = kernels.xp_of(g)
            (idx, wts), owners = self._index(xp, target, weight, dev, dt)
            if self.reduction == "none":
                xp.multiply(wts, g._data.reshape(wts.shape), out=wts)
                xp.negative(wts, out=wts)
            else:
                scale = -float(g.item())
                if self.reduction == "mean":  # (every target ignored: a total weight of 0)
                    total = float(self.kept("total_weight").item())
                    scale = scale / total if total != 0 else float("nan")
                xp.multiply(wts, scale, out=wts)
            xp.copyto(wts, 0, where=self._ignored(xp, target))  # torch's kernel skips them
            xp.put(gx._data.reshape(-1), idx, wts)
            del idx, wts, owners
        return (gx, None, None) if self.has_weight else (gx, None)

    def name(self):
        return "NllLossBackward0" if len(self.ishape) == 2 else "NllLoss2DBackward0"


def mse_loss(input, target, size_average=None, reduce=None, reduction="mean"):
    return MseLoss.apply(
        input, target, op="mse_loss", reduction=_legacy_reduction(size_average, reduce, reduction)
    )


def nll_loss(
    input, target, weight=None, size_average=None, ignore_index=-100, reduce=None, reduction="mean"
):
    reduction = _legacy_reduction(size_average, reduce, reduction)
    if input.ndim == 3 or input.ndim > 4:
        # torch's nll_loss_nd: contiguous, viewed as [N, C, 1, -1] for nll_loss2d (and the
        # result viewed back when not reduced)
        n, c = input.shape[:2]
        out_size = (n, *input.shape[2:])
        if target.ndim == 0 or target.shape[0] != n:
            raise ValueError(
                f"Expected input batch_size ({n}) to match target batch_size "
                f"({target.shape[0] if target.ndim else 0})."
            )
        if tuple(target.shape[1:]) != tuple(input.shape[2:]):
            raise RuntimeError(f"Expected target size {list(out_size)}, got {list(target.shape)}")
        x, t = input.contiguous(), target.contiguous()
        x = x.view(n, c, 1, -1) if x.numel() > 0 else x.view(n, c, 0, 0)
        t = t.view(n, 1, -1) if t.numel() > 0 else t.view(n, 0, 0)
        args = (x, t) if weight is None else (x, t, weight)
        out = NllLoss.apply(*args, op="nll_loss", reduction=reduction, ignore_index=ignore_index)
        return out.view(out_size) if reduction == "none" else out
    args = (input, target) if weight is None else (input, target, weight)
    return NllLoss.apply(*args, op="nll_loss", reduction=reduction, ignore_index=ignore_index)


def _legacy_reduction(size_average, reduce, reduction):
    if size_average is None and reduce is None:
        return reduction
    size_average = True if size_average is None else size_average
    reduce = True if reduce is None else reduce
    if not reduce:
        return "none"
    return "mean" if size_average else "sum"


def cross_entropy(
    input: Tensor,
    target: Tensor,
    weight: Tensor | None = None,
    size_average=None,
    ignore_index: int = -100,
    reduce=None,
    reduction: str = "mean",
    label_smoothing: float = 0.0,
) -> Tensor:
    """Cross-entropy of logits `input` [N, C, *] against class indices or class probabilities."""
    from engine.amp import autocast_mode

    if autocast_mode.STATE.active and autocast_mode.policy("cross_entropy") is not None:
        # autocast's CPU list runs cross_entropy as one float32 op (its CUDA list casts inside)
        # (the caller's logits stay alive until the call returns, as torch's C++ call keeps them)
        cast, cast_weight = autocast_mode.cast_inputs("cross_entropy", (input, weight))
        with autocast_mode.suspended():
            return cross_entropy(
                cast, target, cast_weight, size_average, ignore_index, reduce, reduction,
                label_smoothing,
            )  # fmt: skip
    reduction = _legacy_reduction(size_average, reduce, reduction)
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"label_smoothing must be between 0.0 and 1.0. Got: {label_smoothing}")
    class_dim = 1 if input.ndim >= 2 else 0
    if target.shape == input.shape:  # torch: soft targets when the shapes agree
        if not target.is_floating_point():
            raise RuntimeError(
                "Expected floating point type for target with class probabilities, got "
                f"{target._dtype.scalar_name}"
            )
        if ignore_index >= 0:
            raise RuntimeError("ignore_index is not supported for floating point target")
        return _cross_entropy_prob_target(input, target, weight, reduction, label_smoothing)
    if target.is_floating_point():
        raise RuntimeError(
            f"Expected target size {list(input.shape)}, got {list(target.shape)}"
        )  # (torch: nll_loss refuses a float target of another shape)
    if label_smoothing > 0.0:
        return _cross_entropy_label_smoothing(
            input, target, weight, reduction, ignore_index, label_smoothing
        )
    logp = input.log_softmax(class_dim)
    return nll_loss(logp, target, weight, ignore_index=ignore_index, reduction=reduction)


def _cross_entropy_prob_target(input, target_, weight, reduction, label_smoothing):
    """ATen's cross_entropy_loss_prob_target, op for op (its temporaries freed as C++'s: a
    statement's last made first, then the locals in reverse)."""
    from engine.ops.nn.common import add_scalar, div_scalar, mul_scalar

    class_dim = 0 if input.ndim == 1 else 1
    n_classes = input.shape[class_dim]
    if weight is not None and (weight.ndim != 1 or weight.numel() != n_classes):
        raise RuntimeError(
            f"cross_entropy: weight tensor should be defined either for all {n_classes} classes "
            f"or no classes but got weight tensor of shape: {list(weight.shape)}"
        )
    logp = input.log_softmax(class_dim)
    if label_smoothing > 0.0:
        scaled = mul_scalar(target_, 1 - label_smoothing)
        target = add_scalar(scaled, label_smoothing / n_classes)
        del scaled
    else:
        target = target_
    # -(input * target [* weight]).sum(...) [/ N]: one statement, its temporaries to the end
    first = logp * target
    prod = first
    if weight is not None:
        shape = [1] * logp.ndim
        if logp.ndim > 1:
            shape[1] = weight.shape[0]
        prod = first * weight.view(shape)
    if reduction == "none":
        summed = prod.sum(class_dim)
        loss = -summed
        del summed, prod, first
        return loss
    summed = prod.sum()
    loss = -summed
    if reduction == "sum":
        del summed, prod, first
        return loss
    if logp.numel() == 0:
        loss.fill_(math.nan)
        del summed, prod, first
        return loss
    mean = div_scalar(loss, logp.numel() // n_classes)
    del loss, summed, prod, first
    return mean


def _cross_entropy_label_smoothing(input, target, weight, reduction, ignore_index, eps):
    """ATen's cross_entropy_loss_label_smoothing, op for op."""
    from engine.ops.nn.common import mul_scalar

    class_dim = 0 if input.ndim == 1 else 1
    logp = input.log_softmax(class_dim)
    nll = nll_loss(logp, target, weight, ignore_index=ignore_index, reduction=reduction)
    n_classes = logp.shape[class_dim]
    if weight is not None:
        shape = [1] * logp.ndim
        shape[class_dim] = weight.shape[0]
        weighted = logp * weight.view(shape)
        summed = weighted.sum(class_dim)
        smooth = -summed
        del summed, weighted
    else:
        summed = logp.sum(class_dim)
        smooth = -summed
        del summed
    ignore_mask = target == ignore_index
    smooth.masked_fill_(ignore_mask, 0.0)
    if reduction == "mean":
        if weight is not None:
            # one statement, its right operand first: ~mask, the kept targets, their weights
            notmask = ~ignore_mask
            picked = target.masked_select(notmask)
            gathered = weight.gather(0, picked.flatten())
            total = gathered.sum()
            summed = smooth.sum()
            ret = summed / total
            del summed, total, gathered, picked, notmask
        else:
            true_mask = ~ignore_mask
            ret = smooth.sum() / true_mask.sum()
            del true_mask
    elif reduction == "sum":
        ret = smooth.sum()
    else:
        ret = smooth
    # (1 - eps) * nll + ret * (eps / C): the right operand first, as torch's compiler does
    right = mul_scalar(ret, eps / n_classes)
    left = mul_scalar(nll, 1 - eps)
    loss = left + right
    del left, right
    del ret, ignore_mask, smooth, nll  # C++'s locals, in reverse
    return loss
