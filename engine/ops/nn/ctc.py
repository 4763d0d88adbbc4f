"""F.ctc_loss: the connectionist temporal classification loss, as torch's CPU ctc_loss computes
and allocates it (aten/src/ATen/native/LossCTC.cpp).

torch.ctc_loss (a composite) calls the native `_ctc_loss` and reduces its result:
- tensor lengths are copied to int64 first when they are not (freed when the call returns),
  targets of another dtype are copied to int64 (the node keeps the copy);
- `_ctc_loss` makes log_alpha [batch, T, 2 * max target length + 1], then the per-sample
  negative log likelihood [batch]; its node (CtcLossBackward0) keeps log_probs, targets,
  the likelihoods and log_alpha (released in that order);
- zero_infinity: `where(nll == inf, zeros(()), nll)`; 'mean': divided by the target lengths
  (a float tensor of them, clamped to at least 1, which DivBackward0 keeps), then the mean;
  'sum': the sum; an unbatched [T, C] input is unsqueezed to batch 1 (and 'none' squeezed back).

Backward (torch's ctc_loss_backward): the gradient, log_probs-sized, filled with -inf, and
log_beta, log_alpha-sized, made and freed inside the kernel. Values are torch's recursions in
log space (eqs. 6-16 of Graves et al.), in log_probs' dtype, vectorized over the batch.
"""

from __future__ import annotations

import numpy as np

from engine import dtypes, kernels
from engine.autograd.function import Function
from engine.ops.nn.common import _live

_REDUCTIONS = ("none", "mean", "sum")
_C = "(while checking arguments for ctc_loss_allocate_outputs)"


class CtcLoss(Function):
    """_ctc_loss: the negative log likelihood per sample; keeps log_alpha for backward."""

    retain_inputs = (0, 1)  # log_probs, targets (torch's node keeps both)
    retain_output = True  # the likelihoods (result0), then log_alpha (result1, save())

    def forward(self, log_probs, targets, out=None, il=(), tl=(), blank=0, zero_infinity=False):
        if log_probs.ndim != 3:
            raise RuntimeError(
                f"Expected 3-dimensional tensor, but got {log_probs.ndim}-dimensional tensor for "
                f"argument #1 'log_probs' {_C}"
            )
        if not 1 <= targets.ndim <= 2:
            raise RuntimeError(
                f"Expected 1 to 2 dimensions, but got {targets.ndim}-dimensional tensor for "
                f"argument #2 'targets' {_C}"
            )
        T, batch, num_labels = log_probs.shape
        if not 0 <= blank < num_labels:
            raise RuntimeError("blank must be in label range")
        if len(il) != batch:
            raise RuntimeError("input_lengths must be of size batch_size")
        if len(tl) != batch:
            raise RuntimeError("target_lengths must be of size batch_size")
        for n in tl:
            if n < 0:
                raise RuntimeError(
                    f"Expected target_lengths to have value at least 0, but got value {n} {_C}"
                )
        if targets.ndim == 1:
            offsets = tuple(int(o) for o in np.concatenate(([0], np.cumsum(tl)[:-1])))
            if targets.shape[0] != sum(tl):
                raise RuntimeError(
                    f"Expected tensor to have size {sum(tl)} at dimension 0, but got size "
                    f"{targets.shape[0]} for argument #2 'targets' {_C}"
                )
        else:
            offsets = None
            if targets.shape[0] != batch:
                raise RuntimeError(
                    f"Expected tensor to have size {batch} at dimension 0, but got size "
                    f"{targets.shape[0]} for argument #2 'targets' {_C}"
                )
            if targets.shape[1] < max(tl, default=0):
                raise RuntimeError(
                    f"Expected tensor to have size at least {max(tl)} at dimension 1, but got "
                    f"size {targets.shape[1]} for argument #2 'targets' {_C}"
                )
        for n in il:
            if n < 0:
                raise RuntimeError(
                    f"Expected input_lengths to have value at least 0, but got value {n} {_C}"
                )
            if n > T:
                raise RuntimeError(
                    f"Expected input_lengths to have value at most {T}, but got value {n} {_C}"
                )
        self.il, self.tl, self.blank, self.zero_infinity = (
            tuple(il),
            tuple(tl),
            blank,
            zero_infinity,
        )
        self.offsets = offsets
        s_max = 2 * max(tl, default=0) + 1
        dev = log_probs._device
        log_alpha = kernels.empty((batch, T, s_max), log_probs._dtype, dev)
        nll = kernels.empty((batch,), log_probs._dtype, dev)
        if _live(dev):
            xp = kernels.xp_of(log_probs)
            with np.errstate(all="ignore"):
                self._alpha(xp, log_probs, targets, log_alpha, nll)
        self.save(log_alpha=log_alpha)
        return nll

    def _extended(self, xp, targets, s_max):
        data = targets._data
        if targets.ndim == 1:
            lab = np.full((len(self.tl), s_max), self.blank, dtype=np.int64)
            host = np.asarray(data.get() if hasattr(data, "get") else data)
            for b, n in enumerate(self.tl):
                lab[b, 1 : 2 * n : 2] = host[self.offsets[b] : self.offsets[b] + n]
            return xp.asarray(lab)
        lab = xp.full((len(self.tl), s_max), self.blank, dtype=np.int64)
        for b, n in enumerate(self.tl):
            lab[b, 1 : 2 * n : 2] = data[b, :n]
        return lab

    def _alpha(self, xp, log_probs, targets, log_alpha, nll):
        T, batch, _ = log_probs.shape
        s_max = log_alpha.shape[2]
        ninf = -np.inf
        lp = log_probs._data.transpose(1, 0, 2)  # [batch, T, C], a view
        lab = self._extended(xp, targets, s_max)
        # la3 is read where l'(s - 2) != l'(s), s > 1
        skip = xp.zeros((batch, s_max), dtype=bool)
        skip[:, 2:] = lab[:, :-2] != lab[:, 2:]
        la = log_alpha._data
        la[:, 0, :] = ninf
        rows = xp.arange(batch)[:, None]
        il = np.asarray(self.il)
        live = xp.asarray(il > 0)
        if T:
            first = xp.take_along_axis(lp[:, 0, :], lab[:, :2], axis=1)
            la[:, 0, 0] = xp.where(live, first[:, 0], ninf)
            if s_max > 1:
                has = xp.asarray((np.asarray(self.tl) > 0) & (il > 0))
                la[:, 0, 1] = xp.where(has, first[:, 1], ninf)
        for t in range(1, int(il.max(initial=0))):
            prev = la[:, t - 1, :]
            la1 = prev
            la2 = xp.full_like(prev, ninf)
            la2[:, 1:] = prev[:, :-1]
            la3 = xp.full_like(prev, ninf)
            la3[:, 2:] = prev[:, :-2]
            la3 = xp.where(skip, la3, ninf)
            lamax = xp.maximum(xp.maximum(la1, la2), la3)
            lamax = xp.where(lamax == ninf, 0, lamax)
            emit = lp[rows, t, lab]
            la[:, t, :] = (
                xp.log(xp.exp(la1 - lamax) + xp.exp(la2 - lamax) + xp.exp(la3 - lamax))
                + lamax
                + emit
            )
        out = nll._data
        for b in range(batch):
            n, length = self.il[b], self.tl[b]
            if n == 0:
                out[b] = 0 if length == 0 else np.inf
            elif length == 0:
                out[b] = -la[b, n - 1, 0]
            else:
                l1, l2 = la[b, n - 1, 2 * length], la[b, n - 1, 2 * length - 1]
                m = max(l1, l2)
                m = 0 if m == ninf else m
                out[b] = -(xp.log(xp.exp(l1 - m) + xp.exp(l2 - m)) + m)

    def backward(self, g):
        log_probs, targets, nll = self.saved_tensors
        log_alpha = self.kept("log_alpha")
        dev = log_probs._device
        grad = kernels.empty(tuple(log_probs.shape), log_probs._dtype, dev)
        log_beta = kernels.empty(tuple(log_alpha.shape), log_alpha._dtype, dev)
        if _live(dev):
            xp = kernels.xp_of(log_probs)
            grad._data[...] = -np.inf
            with np.errstate(all="ignore"):
                self._grad(xp, log_probs, targets, nll, log_alpha, log_beta, grad, g)
        del log_beta  # (torch's kernel frees it before returning the gradient)
        return (grad, None)

    def _grad(self, xp, log_probs, targets, nll, log_alpha, log_beta, grad, g):
        ninf = -np.inf
        T, batch, num_labels = log_probs.shape
        s_max = log_alpha.shape[2]
        lp = log_probs._data.transpose(1, 0, 2)
        gr_all = grad._data.transpose(1, 0, 2)  # [batch, T, C] view of the [T, batch, C] grad
        la, lb = log_alpha._data, log_beta._data
        lab = self._extended(xp, targets, s_max)
        nll_v, g_v = nll._data, xp.broadcast_to(g._data, (batch,))
        il, tl = np.asarray(self.il), np.asarray(self.tl)
        rows = xp.arange(batch)[:, None]
        # l'(s + 2) != l'(s), s < 2 L - 1: where lb3 is read
        skip = xp.zeros((batch, s_max), dtype=bool)
        skip[:, :-2] = lab[:, 2:] != lab[:, :-2]
        skip &= xp.arange(s_max)[None, :] < xp.asarray(2 * tl - 1)[:, None]
        within = xp.arange(s_max)[None, :] <= xp.asarray(2 * tl)[:, None]  # s <= 2 L
        zeroed = np.zeros(batch, dtype=bool)
        if self.zero_infinity:
            inf = nll_v == np.inf
            zeroed = inf.get() if hasattr(inf, "get") else np.asarray(inf)  # (CuPy: to host)
        # beta's last row per sample (eq. 10's initialisation) and its direct gradient terms
        for b in range(batch):
            n, length = int(il[b]), int(tl[b])
            if zeroed[b] or n == 0:
                continue
            lb[b, n - 1, :] = ninf
            lb[b, n - 1, 2 * length] = lp[b, n - 1, self.blank]
            gr_all[b, n - 1, self.blank] = la[b, n - 1, 2 * length] + lb[b, n - 1, 2 * length]
            if length > 0:
                c = int(lab[b, 2 * length - 1])
                lb[b, n - 1, 2 * length - 1] = lp[b, n - 1, c]
                gr_all[b, n - 1, c] = la[b, n - 1, 2 * length - 1] + lb[b, n - 1, 2 * length - 1]
        # the recursion backwards in time, all samples at once (a sample's rows past its own
        # length are computed but never read)
        for t in range(int(il.max(initial=0)) - 2, -1, -1):
            nxt = lb[:, t + 1, :]
            lb1 = nxt
            lb2 = xp.full_like(nxt, ninf)
            lb2[:, :-1] = nxt[:, 1:]
            lb2 = xp.where(
                within & (xp.arange(s_max)[None, :] < xp.asarray(2 * tl)[:, None]), lb2, ninf
            )
            lb3 = xp.full_like(nxt, ninf)
            lb3[:, :-2] = nxt[:, 2:]
            lb3 = xp.where(skip, lb3, ninf)
            lbmax = xp.maximum(xp.maximum(lb1, lb2), lb3)
            lbmax = xp.where(lbmax == ninf, 0, lbmax)
            emit = lp[rows, t, lab]
            row = (
                xp.log(xp.exp(lb1 - lbmax) + xp.exp(lb2 - lbmax) + xp.exp(lb3 - lbmax))
                + lbmax
                + emit
            )
            active = within & xp.asarray(t <= il - 2)[:, None]
            lb[:, t, :] = xp.where(active, row, lb[:, t, :])
        # eq. 16's sum over s of alpha * beta, per label, accumulated for s descending as the
        # kernel does (each (sample, t) cell sees the same order)
        t_idx = xp.arange(T)[None, :]
        for s in range(s_max - 1, -1, -1):
            ok = xp.asarray((2 * tl >= s) & ~zeroed)[:, None] & (
                t_idx <= xp.asarray(il - 2)[:, None]
            )
            if not bool(ok.any()):
                continue
            b_i, t_i = xp.nonzero(ok)
            c_i = lab[b_i, s]
            ab = la[b_i, t_i, s] + lb[b_i, t_i, s]
            cur = gr_all[b_i, t_i, c_i]
            mx = xp.maximum(cur, ab)
            acc = xp.log(xp.exp(cur - mx) + xp.exp(ab - mx)) + mx
            gr_all[b_i, t_i, c_i] = xp.where(cur == ninf, ab, acc)
        # the wrap-up of eq. 16, and zeros past each sample's length (or for a zeroed one)
        for b in range(batch):
            n = 0 if zeroed[b] else int(il[b])
            if n:
                res = gr_all[b, :n, :]
                lpb = lp[b, :n, :]
                res[...] = (xp.exp(lpb) - xp.exp(res + nll_v[b] - lpb)) * g_v[b]
            gr_all[b, n:, :] = 0

    def name(self):
        return "CtcLossBackward0"


def _lengths(v, name):
    """A lengths argument as torch's ctc_loss reads it: a tensor (integral, copied to int64 when
    it is not: the copy is returned so that it lives as long as torch's does) or a sequence."""
    from engine.tensor import Tensor

    if isinstance(v, Tensor):
        if not (v._dtype is not dtypes.bool_ and not v._dtype.is_floating_point):
            raise RuntimeError(f"{name} must be integral")
        copy = v if v._dtype is dtypes.int64 else v.to(dtypes.int64)
        if v._device.type == "meta":
            raise NotImplementedError(
                f"ctc_loss on meta needs {name} as a list of ints (tensor values are unknown)"
            )
        values = copy.tolist()
        return [int(n) for n in (values if isinstance(values, list) else [values])], copy
    return [int(n) for n in v], None


def ctc_loss(
    log_probs, targets, input_lengths, target_lengths, blank=0, reduction="mean",
    zero_infinity=False,
):  # fmt: skip
    """The CTC loss of log_probs [T, N, C] (log-softmax over C; [T, C] unbatched) against targets
    ([N, S] padded or the N targets concatenated), with per-sample input and target lengths."""
    from engine.creation import tensor as make_tensor
    from engine.creation import zeros
    from engine.ops import where

    if reduction not in _REDUCTIONS:
        raise ValueError(f"{reduction} is not a valid value for reduction")
    il, il_copy = _lengths(input_lengths, "input_lengths")
    tl, tl_copy = _lengths(target_lengths, "target_lengths")
    batched = log_probs.ndim == 3
    lp = log_probs if batched else log_probs.unsqueeze(1)
    if not lp._dtype.is_floating_point or lp._dtype in (dtypes.float16, dtypes.bfloat16):
        kind = lp._dtype.scalar_name
        raise NotImplementedError(f"\"ctc_loss_cpu\" not implemented for '{kind}'")
    tg = targets if targets._dtype is dtypes.int64 else targets.to(dtypes.int64)
    res = CtcLoss.apply(
        lp, tg, op="ctc_loss", il=il, tl=tl, blank=blank, zero_infinity=zero_infinity
    )
    if zero_infinity:
        res = where(res == float("inf"), zeros((), dtype=res.dtype, device=res.device), res)
    if reduction == "mean":
        lengths = make_tensor(tl, dtype=res.dtype, device=res.device).clamp_min(1)
        out = (res / lengths).mean()
    elif reduction == "sum":
        out = res.sum()
    else:
        out = res if batched else res.squeeze(0)
    del tl_copy, il_copy  # (torch's int64 copies of the lengths live until here)
    return out
