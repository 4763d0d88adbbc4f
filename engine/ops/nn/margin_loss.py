"""Margin and embedding losses, torch 2.13's nodes and CPU blocks:

- native kernels, one node each: soft_margin_loss (its output buffer input-sized, a reduced
  loss resized to 0-d keeps it, as mse_loss's; backward exp(-target * input) then grad_input,
  torch's temporaries), multi_margin_loss (the output alone; backward grad_input alone) and
  multilabel_margin_loss (the output and an input-sized is_target buffer its node keeps);
- ATen composites written op for op (their nodes and temporaries are those of the ops):
  margin_ranking_loss, hinge_embedding_loss, cosine_embedding_loss, triplet_margin_loss,
  poisson_nll_loss;
- Python composites of torch.nn.functional: multilabel_soft_margin_loss,
  triplet_margin_with_distance_loss, gaussian_nll_loss.
"""

from __future__ import annotations

import math

from engine import kernels
from engine.autograd.function import Function
from engine.autograd.grad_mode import no_grad
from engine.ops.nn.common import _first_element, _live, add_scalar, rsub_scalar, sub_scalar
from engine.ops.nn.loss import _check_reduction, _legacy_reduction
from engine.ops.nn.similarity import pairwise_distance
from engine.tensor import Tensor

_EPSILON = 1e-12  # Loss.cpp's EPSILON


def _size(t) -> str:
    return f"torch.Size({list(t.shape)})"


def _reduce(output, reduction):
    """Loss.cpp's apply_loss_reduction."""
    if reduction == "mean":
        return output.mean()
    if reduction == "sum":
        return output.sum()
    return output


def _grad_scale(g, reduction, n):
    """The scalar a reduced loss's gradient carries (over n for a mean); None for 'none'."""
    if reduction == "none":
        return None
    s = float(g.item()) if _live(g._device) else 1.0
    return s / max(n, 1) if reduction == "mean" else s


# ---------------------------------------------------------------------------------------------
# native kernels
# ---------------------------------------------------------------------------------------------
class SoftMarginLoss(Function):
    """log(1 + exp(-target * input)), then reduced (soft_margin_loss_out)."""

    retain_inputs = (0, 1)

    def forward(self, input, target, out=None, reduction="mean"):
        _check_reduction(reduction)
        self.reduction, self.shape = reduction, tuple(input.shape)
        dev, dtype = input._device, input._dtype
        y = kernels.empty(self.shape, dtype, dev)  # neg_out(output, input) sizes it
        live = _live(dev)
        if live:
            xp = kernels.xp_of(input)
            yd = y._data
            xp.negative(input._data, out=yd)
            xp.multiply(yd, target._data, out=yd)
            xp.exp(yd, out=yd)
            xp.add(yd, 1.0, out=yd)
            xp.log(yd, out=yd)
        if reduction == "none":
            return y
        # tmp = mean/sum (a 0-d tensor), output resized to 0-d keeps its storage, tmp copied in
        tmp = kernels.empty((), dtype, dev)
        first = _first_element(y._data)
        if live:
            (xp.mean if reduction == "mean" else xp.sum)(y._data, out=tmp._data)
            first[...] = tmp._data
        del tmp
        return Tensor._make(first, y._storage, dtype, dev)

    def backward(self, g):
        x, t = self.saved_tensors
        dev, dt = g._device, g._dtype
        live = _live(dev)
        xp = kernels.xp_of(g) if live else None
        # z = exp(-target * input): -target, the product, exp; the first two die in reverse
        neg = kernels.empty(tuple(t.shape), dt, dev)
        prod = kernels.empty(self.shape, dt, dev)
        z = kernels.empty(self.shape, dt, dev)
        if live:
            xp.negative(t._data, out=neg._data)
            xp.multiply(neg._data, x._data, out=prod._data)
            xp.exp(prod._data, out=z._data)
        del prod, neg
        gx = kernels.empty(self.shape, dt, dev)
        if live:
            norm = 1.0 / math.prod(self.shape) if self.reduction == "mean" else 1.0
            gd = gx._data
            xp.multiply(t._data, z._data, out=gd)
            xp.multiply(gd, -norm, out=gd)
            xp.add(z._data, 1.0, out=z._data)
            xp.divide(gd, z._data, out=gd)
            xp.multiply(gd, g._data, out=gd)
        del z
        return (gx, None)

    def name(self):
        return "SoftMarginLossBackward0"


def _frames(x):
    return (1, x.shape[0]) if x.ndim <= 1 else (x.shape[0], x.shape[1])


class MultiMarginLoss(Function):
    """sum over classes d != y of max(0, margin - x[y] + x[d])^p (times weight[y]) / C per
    sample (LossMultiMargin.cpp)."""

    def to_save(self, tensors):
        return tuple(range(len(tensors)))  # input, target and any weight

    def forward(self, input, target, *weight, out=None, p=1, margin=1.0, reduction="mean"):
        _check_reduction(reduction)
        nframe, dim = _frames(input)
        if not (input.ndim <= 2 and input.numel() and (input.ndim != 2 or dim)):
            raise RuntimeError(
                "Expected non-empty vector or matrix with optional 0-dim batch size, but got: "
                f"{list(input.shape)}"
            )
        if not (target.ndim <= 1 and target.numel() == nframe):
            raise RuntimeError(
                f"inconsistent target size, expected {nframe} but got {list(target.shape)}"
            )
        if weight and not (weight[0].ndim <= 1 and weight[0].numel() == dim):
            raise RuntimeError(
                f"inconsistent weight size, expected {dim} but got {list(weight[0].shape)}"
            )
        self.p, self.margin, self.reduction = p, float(margin), reduction
        self.shape, self.has_weight = tuple(input.shape), bool(weight)
        shape = (nframe,) if reduction == "none" and target.ndim > 0 else ()
        y = kernels.empty(shape, input._dtype, input._device)
        if _live(input._device):
            z = self._margins(input, target)
            h = z if p == 1 else z * z
            if weight:
                h = h * weight[0]._data[target._data.reshape(-1)][:, None]
            per = h.sum(axis=1) / dim
            if reduction == "none":
                y._data[...] = per.reshape(shape)
            else:
                y._data[...] = per.sum() / (nframe if reduction == "mean" else 1)
        return y

    def _margins(self, x, t):
        """max(0, margin - x[y] + x[d]) per sample and class, 0 at d == y ([nframe, C])."""
        xp = kernels.xp_of(x)
        nframe, dim = _frames(x)
        xd = x._data.reshape(nframe, dim)
        idx = t._data.reshape(-1).astype(xp.int64)
        if bool(((idx < 0) | (idx >= dim)).any()):
            raise RuntimeError("target out of range")
        rows = xp.arange(nframe)
        z = self.margin - xd[rows, idx][:, None] + xd
        z[rows, idx] = 0
        return xp.maximum(z, 0)

    def backward(self, g):
        saved = self.saved_tensors
        x, t = saved[0], saved[1]
        w = saved[2] if self.has_weight else None
        gx = kernels.empty(self.shape, g._dtype, g._device)
        if _live(g._device):
            xp = kernels.xp_of(g)
            nframe, dim = _frames(x)
            z = self._margins(x, t)
            h = (z > 0).astype(z.dtype) if self.p == 1 else 2 * z
            idx = t._data.reshape(-1).astype(xp.int64)
            if w is not None:
                h = h * w._data[idx][:, None]
            scale = _grad_scale(g, self.reduction, nframe)
            gs = g._data.reshape(-1, 1) if scale is None else scale
            h = h * gs / dim
            rows = xp.arange(nframe)
            h[rows, idx] = -h.sum(axis=1)
            gx._data[...] = h.reshape(self.shape)
        return (gx, None, None) if self.has_weight else (gx, None)

    def name(self):
        return "MultiMarginLossBackward0"


class MultilabelMarginLoss(Function):
    """sum over target classes j and non-target classes c of max(0, 1 - (x[j] - x[c])) / C
    per sample; target lists class indices up to the first -1 (LossMultiLabelMargin.cpp).
    is_target (input-sized) is made forward and kept by the node."""

    retain_inputs = (0, 1)

    def forward(self, input, target, out=None, reduction="mean"):
        _check_reduction(reduction)
        nframe, dim = _frames(input)
        if not (input.ndim <= 2 and (input.ndim != 2 or dim)):
            raise RuntimeError(
                "Expected non-empty vector or matrix with optional 0-dim batch size, but got: "
                f"{list(input.shape)}"
            )
        if tuple(target.shape) != tuple(input.shape):
            raise RuntimeError(
                f"inconsistent target size: {list(target.shape)} for input of size: "
                f"{list(input.shape)}"
            )
        self.reduction, self.shape = reduction, tuple(input.shape)
        dev, dtype = input._device, input._dtype
        shape = (nframe,) if reduction == "none" and input.ndim > 1 else ()
        y = kernels.empty(shape, dtype, dev)
        is_target = kernels.empty(self.shape, dtype, dev)
        if _live(dev):
            counts = self._targets(target, nframe, dim)
            is_target._data[...] = (counts > 0).reshape(self.shape)
            per = self._hinges(input, counts).sum(axis=(1, 2)) / dim
            if reduction == "none":
                y._data[...] = per.reshape(shape)
            else:
                y._data[...] = per.sum() / (nframe if reduction == "mean" else 1)
        self.save(is_target=is_target)
        return y

    @staticmethod
    def _targets(target, nframe, dim):
        """How often each class is listed before the row's first -1 ([nframe, C]): torch's
        kernel walks the list, so a class listed twice counts twice."""
        xp = kernels.xp_of(target)
        td = target._data.reshape(nframe, dim).astype(xp.int64)
        if bool(((td < -1) | (td >= dim)).any()):
            raise RuntimeError("target out of range")
        valid = xp.cumprod(td >= 0, axis=1).astype(bool)
        counts = xp.zeros((nframe, dim), dtype=xp.int64)
        rows = xp.broadcast_to(xp.arange(nframe)[:, None], td.shape)
        xp.add.at(counts, (rows[valid], td[valid]), 1)
        return counts

    @staticmethod
    def _hinges(x, counts):
        """count[j] * max(0, 1 - x[j] + x[c]) for target j, non-target c: [nframe, C, C]."""
        xp = kernels.xp_of(x)
        nframe, dim = counts.shape
        xd = x._data.reshape(nframe, dim)
        z = xp.maximum(1 - xd[:, :, None] + xd[:, None, :], 0)
        weight = counts[:, :, None] * (counts == 0)[:, None, :]
        return z * weight

    def backward(self, g):
        x = self.saved_tensors[0]
        is_target = self.kept("is_target")
        gx = kernels.empty(self.shape, g._dtype, g._device)
        if _live(g._device):
            nframe, dim = _frames(x)
            # the counts of listed classes come from the target again (is_target is 0/1)
            counts = self._targets(self.saved_tensors[1], nframe, dim)
            z = (
                1
                - x._data.reshape(nframe, dim)[:, :, None]
                + x._data.reshape(nframe, dim)[:, None, :]
            )
            weight = counts[:, :, None] * (is_target._data.reshape(nframe, dim) == 0)[:, None, :]
            active = (z > 0) * weight
            scale = _grad_scale(g, self.reduction, nframe)
            gs = g._data.reshape(-1, 1) if scale is None else scale
            # d/dx[c] += 1, d/dx[j] -= 1 for each active (j, c)
            grad = active.sum(axis=1) - active.sum(axis=2)
            gx._data[...] = (grad * gs / dim).reshape(self.shape)
        return (gx, None)

    def name(self):
        return "MultilabelMarginLossBackward0"


def soft_margin_loss(input, target, size_average=None, reduce=None, reduction="mean"):
    """log(1 + exp(-target * input)), target in {-1, 1}."""
    reduction = _legacy_reduction(size_average, reduce, reduction)
    return SoftMarginLoss.apply(input, target, op="soft_margin_loss", reduction=reduction)


def multi_margin_loss(
    input, target, p=1, margin=1.0, weight=None, size_average=None, reduce=None, reduction="mean"
):
    """Multi-class hinge loss of class scores [N, C] (or [C]) and class indices."""
    reduction = _legacy_reduction(size_average, reduce, reduction)
    if p != 1 and p != 2:
        raise ValueError("only p == 1 and p == 2 supported")
    if weight is not None and weight.ndim != 1:
        raise ValueError("weight must be one-dimensional")
    args = (input, target) if weight is None else (input, target, weight)
    return MultiMarginLoss.apply(
        *args, op="multi_margin_loss", p=p, margin=margin, reduction=reduction
    )


def multilabel_margin_loss(input, target, size_average=None, reduce=None, reduction="mean"):
    """Multi-label hinge loss; target holds class indices, each row ended by -1."""
    reduction = _legacy_reduction(size_average, reduce, reduction)
    return MultilabelMarginLoss.apply(
        input, target, op="multilabel_margin_loss", reduction=reduction
    )


# ---------------------------------------------------------------------------------------------
# ATen composites (Loss.cpp), op for op
# ---------------------------------------------------------------------------------------------
def margin_ranking_loss(
    input1, input2, target, margin=0.0, size_average=None, reduce=None, reduction="mean"
):
    """max(0, -target * (input1 - input2) + margin)."""
    reduction = _legacy_reduction(size_average, reduce, reduction)
    _check_reduction(reduction)
    if input1.ndim != input2.ndim or input1.ndim != target.ndim:
        raise RuntimeError(
            "margin_ranking_loss : All input tensors should have same dimension but got sizes: "
            f"input1: {_size(input1)}, input2: {_size(input2)}, target: {_size(target)} "
        )
    # auto unclamped_output = (-target * (input1 - input2) + margin): its temporaries go at
    # the statement's end, the last made first; then clamp_min_ in place
    diff = input1 - input2
    neg = -target
    prod = neg * diff
    unclamped = add_scalar(prod, margin)
    del prod, neg, diff
    out = unclamped.clamp_min_(0)
    del unclamped
    return _reduce(out, reduction)


def hinge_embedding_loss(
    input, target, margin=1.0, size_average=None, reduce=None, reduction="mean"
):
    """x where target == 1, max(0, margin - x) where target == -1."""
    from engine import creation, ops

    reduction = _legacy_reduction(size_average, reduce, reduction)
    _check_reduction(reduction)
    zeros = creation.zeros_like(input, memory_format="contiguous_format")
    margin_clamp = rsub_scalar(margin, input).clamp_min_(0)
    output_margin = ops.where(target != 1, margin_clamp, zeros)
    output_self = ops.where(target != -1, input, zeros)
    output = output_margin + output_self
    result = _reduce(output, reduction)
    # C++ destroys the locals after the return value is made, the last declared first
    del output, output_self, output_margin, margin_clamp, zeros
    return result


def cosine_embedding_loss(
    input1, input2, target, margin=0.0, size_average=None, reduce=None, reduction="mean"
):
    """1 - cos(x1, x2) where target == 1, max(0, cos(x1, x2) - margin) where target == -1."""
    from engine import creation, ops

    reduction = _legacy_reduction(size_average, reduce, reduction)
    _check_reduction(reduction)
    targ_dim = target.ndim
    if targ_dim not in (0, 1):
        raise RuntimeError("0D or 1D target tensor expected, multi-target not supported")
    if targ_dim == 1 and input1.ndim != 2:
        raise RuntimeError(
            "1D target tensor expects 2D input tensors, but found inputs with sizes "
            f"{list(input1.shape)} and {list(input2.shape)}."
        )
    if targ_dim == 0 and input1.ndim != 1:
        raise RuntimeError(
            "0D target tensor expects 1D input tensors, but found inputs with sizes "
            f"{list(input1.shape)} and {list(input2.shape)}."
        )
    p12 = input1 * input2
    prod_sum = p12.sum(targ_dim)
    del p12
    # one statement each: its temporaries die at its end, the last made first
    p11 = input1 * input1
    s11 = p11.sum(targ_dim)
    mag_square1 = add_scalar(s11, _EPSILON)
    del s11, p11
    p22 = input2 * input2
    s22 = p22.sum(targ_dim)
    mag_square2 = add_scalar(s22, _EPSILON)
    del s22, p22
    denom = (mag_square1 * mag_square2).sqrt_()
    cos = prod_sum / denom
    zeros = creation.zeros_like(cos, memory_format="contiguous_format")
    pos = rsub_scalar(1, cos)
    neg = sub_scalar(cos, margin).clamp_min_(0)
    output_pos = ops.where(target == 1, pos, zeros)
    output_neg = ops.where(target == -1, neg, zeros)
    output = output_pos + output_neg
    result = _reduce(output, reduction)
    del output, output_neg, output_pos, neg, pos, zeros, cos, denom, mag_square2, mag_square1
    del prod_sum
    return result


def triplet_margin_loss(
    anchor,
    positive,
    negative,
    margin=1.0,
    p=2,
    eps=1e-6,
    swap=False,
    size_average=None,
    reduce=None,
    reduction="mean",
):
    """max(0, margin + d(a, p) - d(a, n)), d the pairwise p-norm distance."""
    from engine import ops

    reduction = _legacy_reduction(size_average, reduce, reduction)
    _check_reduction(reduction)
    if margin <= 0:
        raise ValueError(f"margin must be greater than 0, got {margin}")
    a, pdim, n = anchor.ndim, positive.ndim, negative.ndim
    if not (a == pdim == n):
        raise RuntimeError(
            "The anchor, positive, and negative tensors are expected to have the same number "
            f"of dimensions, but got: anchor {a}D, positive {pdim}D, and negative {n}D inputs"
        )
    dist_pos = pairwise_distance(anchor, positive, p, eps)
    dist_neg = pairwise_distance(anchor, negative, p, eps)
    if swap:
        dist_swap = pairwise_distance(positive, negative, p, eps)
        dist_neg = ops.minimum(dist_neg, dist_swap)
        del dist_swap
    shifted = add_scalar(dist_pos, margin)
    diff = shifted - dist_neg
    output = diff.clamp_min(0)
    del diff, shifted
    result = _reduce(output, reduction)
    del output, dist_neg, dist_pos
    return result


def poisson_nll_loss(
    input,
    target,
    log_input=True,
    full=False,
    size_average=None,
    eps=1e-8,
    reduce=None,
    reduction="mean",
):
    """exp(input) - target * input (log_input), else input - target * log(input + eps); full
    adds Stirling's term where target > 1."""
    from engine import ops

    reduction = _legacy_reduction(size_average, reduce, reduction)
    if reduction not in ("none", "mean", "sum"):
        raise ValueError(reduction + " is not a valid value for reduction")
    if log_input:
        prod = target * input
        e = ops.exp(input)
        loss = e - prod
        del e, prod
    else:
        shifted = add_scalar(input, eps)
        lg = ops.log(shifted)
        prod = target * lg
        loss = input - prod
        del prod, lg, shifted
    if full:
        # one statement: its six temporaries live to its end and go the last made first
        tlog = ops.log(target)
        tl = target * tlog
        diff = tl - target
        scaled = target * (2 * math.pi)
        half_log = ops.log(scaled)
        half = half_log * 0.5
        stirling = diff + half
        del half, half_log, scaled, diff, tl, tlog
        small = target <= 1
        filled = stirling.masked_fill(small, 0)
        loss += filled
        del filled, small, stirling  # the if block's local goes at the block's end
    return _reduce(loss, reduction)


# ---------------------------------------------------------------------------------------------
# torch.nn.functional's Python composites
# ---------------------------------------------------------------------------------------------
def multilabel_soft_margin_loss(
    input, target, weight=None, size_average=None, reduce=None, reduction="mean"
):
    """-(t log sigmoid(x) + (1 - t) log sigmoid(-x)) averaged over classes."""
    from engine.ops.nn.activation import logsigmoid

    if size_average is not None or reduce is not None:
        reduction = _legacy_reduction(size_average, reduce, reduction)
    loss = -(target * logsigmoid(input) + (1 - target) * logsigmoid(-input))
    if weight is not None:
        loss = loss * weight
    class_dim = input.ndim - 1
    c = input.shape[class_dim]
    loss = loss.sum(dim=class_dim) / c
    if reduction == "none":
        return loss
    if reduction == "mean":
        return loss.mean()
    if reduction == "sum":
        return loss.sum()
    raise ValueError(reduction + " is not valid")


def triplet_margin_with_distance_loss(
    anchor, positive, negative, *, distance_function=None, margin=1.0, swap=False, reduction="mean"
):
    """max(0, margin + d(a, p) - d(a, n)) for any distance d (pairwise_distance by default)."""
    from engine import ops

    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"{reduction} is not a valid value for reduction")
    if margin <= 0:
        raise ValueError(f"margin must be greater than 0, got {margin}")
    a_dim, p_dim, n_dim = anchor.ndim, positive.ndim, negative.ndim
    if not (a_dim == p_dim and p_dim == n_dim):
        raise RuntimeError(
            "The anchor, positive, and negative tensors are expected to have the same number "
            f"of dimensions, but got: anchor {a_dim}D, positive {p_dim}D, and negative "
            f"{n_dim}D inputs"
        )
    if distance_function is None:  # torch.pairwise_distance
        distance_function = pairwise_distance
    dist_pos = distance_function(anchor, positive)
    dist_neg = distance_function(anchor, negative)
    if swap:
        dist_swap = distance_function(positive, negative)
        dist_neg = ops.minimum(dist_neg, dist_swap)
    loss = ops.clamp_min(margin + dist_pos - dist_neg, 0)
    if reduction == "sum":
        return ops.sum(loss)
    if reduction == "mean":
        return ops.mean(loss)
    return loss


def gaussian_nll_loss(input, target, var, full=False, eps=1e-6, reduction="mean"):
    """0.5 (log(max(var, eps)) + (input - target)^2 / max(var, eps)) (+ 0.5 log(2 pi))."""
    from engine import creation, ops

    if isinstance(var, float):
        if var < 0:
            raise ValueError("var has negative entry/entries")
        var = var * creation.ones_like(input)
    elif bool((var < 0).any()):
        raise ValueError("var has negative entry/entries")
    if tuple(var.shape) != tuple(input.shape):
        if tuple(input.shape[:-1]) == tuple(var.shape):
            var = ops.unsqueeze(var, -1)
        elif input.ndim == var.ndim and (
            sum(y for x, y in zip(input.shape, var.shape, strict=True) if x != y) == 1
        ):
            pass
        else:
            raise ValueError("var is of incorrect size")
    if reduction not in ("none", "mean", "sum"):
        raise ValueError(reduction + " is not valid")
    var = var.clone()
    with no_grad():
        var.clamp_(min=eps)
    loss = 0.5 * (ops.log(var) + (input - target) ** 2 / var)
    if full:
        loss += 0.5 * math.log(2 * math.pi)
    if reduction == "mean":
        return loss.mean()
    if reduction == "sum":
        return loss.sum()
    return loss
