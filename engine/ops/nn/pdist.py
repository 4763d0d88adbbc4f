"""F.pdist and torch.cdist: torch's at::pdist (_pdist_forward, PdistBackward0) and at::cdist.

pdist makes its input contiguous first (a copy, CloneBackward0, when it is not); forward makes
the n (n - 1) / 2 distances of the rows (i < j, row-major: torch's order); the node keeps the
input and the result; backward makes one input-sized gradient, as torch's CPU kernel.

cdist is one _cdist_forward node (CdistBackward0: inputs and result kept; a broadcast or
non-contiguous input copied for the kernel and freed) except for p = 2 over more than 25 rows
(or compute_mode 'use_mm_for_euclid_dist'), where torch takes _euclidean_dist: norms, padding
columns and one matrix product in one node (EuclideanDistBackward0), the batch folded by
expand/contiguous/view and the result viewed back. Backward as derivatives.yaml: the transposed
gradient and result copied for x2's gradient, a broadcast batch summed away after both.

The distance kernels work on blocks of rows whose differences stay within
kernels.SCRATCH_ELEMS elements (torch's kernels keep them in registers: not charged).
"""

from __future__ import annotations

import math

import numpy as np

from engine import kernels
from engine.autograd.function import Function
from engine.ops.common import infer_size as _infer_size
from engine.ops.nn.common import _live


def _step(width, most=None):
    """How many rows of `width` elements a block takes within kernels.SCRATCH_ELEMS."""
    step = max(1, kernels.SCRATCH_ELEMS // max(width, 1))
    return step if most is None else max(1, min(most, step))


def _norms(xp, diff, p):
    """||diff||_p of each row of diff [M, D] (torch's special cases for p = 0, 1, 2, inf)."""
    a = xp.abs(diff)
    if p == 0:
        return (diff != 0).sum(1).astype(diff.dtype)
    if p == 1:
        return a.sum(1)
    if p == 2:
        return xp.sqrt((diff * diff).sum(1))
    if math.isinf(p):
        return a.max(1) if a.shape[1] else xp.zeros(a.shape[0], dtype=a.dtype)
    return (a**p).sum(1) ** (1.0 / p)


def _grad_rows(xp, diff, dist, g, p):
    """d dist / d x_i * g for each pair (x_i - x_j = diff): torch's pdist backward kernel."""
    dist = dist[:, None]
    g = g[:, None]
    if p == 0:
        return xp.zeros_like(diff)
    if p == 1:
        return g * xp.sign(diff)
    if math.isinf(p):
        return g * xp.sign(diff) * (xp.abs(diff) == dist)
    zero = dist == 0
    safe = xp.where(zero, 1, dist)
    if p == 2:
        out = g * diff / safe
    elif p < 2:
        a = xp.abs(diff)
        out = xp.sign(diff) * xp.where(a == 0, 0, a) ** (p - 1) * g / safe ** (p - 1)
        if p < 1:
            out = xp.where(diff == 0, 0, out)
    else:
        out = diff * xp.abs(diff) ** (p - 2) * g / safe ** (p - 1)
    return xp.where(zero, 0, out)


class Pdist(Function):
    retain_inputs = (0,)
    retain_output = True

    def forward(self, x, out=None, p=2.0):
        self.p = p
        n = x.shape[0]
        y = kernels.empty((n * (n - 1) // 2,), x._dtype, x._device)
        if _live(x._device) and y.numel():
            xp = kernels.xp_of(x)
            a, k, step = x._data, 0, _step(x.shape[1])
            for i in range(n - 1):  # one row against the rows after it, in blocks
                for j0 in range(i + 1, n, step):
                    j1 = min(n, j0 + step)
                    y._data[k + j0 - i - 1 : k + j1 - i - 1] = _norms(xp, a[i] - a[j0:j1], p)
                k += n - 1 - i
        return y

    def backward(self, g):
        x, y = self.saved_tensors
        gx = kernels.empty(tuple(x.shape), g._dtype, g._device)
        if _live(g._device):
            xp = kernels.xp_of(g)
            a, d, gd = x._data, y._data, g._data
            gx._data[...] = 0
            n, k, step = a.shape[0], 0, _step(a.shape[1])
            with np.errstate(divide="ignore", invalid="ignore"):  # 0 ** (p - 1), masked
                for i in range(n - 1):
                    for j0 in range(i + 1, n, step):
                        j1 = min(n, j0 + step)
                        at = slice(k + j0 - i - 1, k + j1 - i - 1)
                        rows = _grad_rows(xp, a[i] - a[j0:j1], d[at], gd[at], self.p)
                        gx._data[i] += rows.sum(0)
                        gx._data[j0:j1] -= rows
                    k += n - 1 - i
        return (gx,)

    def name(self):
        return "PdistBackward0"


def pdist(input, p=2):
    """The p-norm distances between the rows of a 2-D input, [n (n - 1) / 2] (torch's)."""
    if input.ndim != 2:
        raise RuntimeError(f"pdist only supports 2D tensors, got: {input.ndim}D")
    if not input.dtype.is_floating_point:
        raise RuntimeError("pdist only supports floating-point dtypes")
    if p < 0:
        raise RuntimeError("pdist only supports non-negative p values")
    return Pdist.apply(input.contiguous(), op="_pdist_forward", p=float(p))


# --- cdist ------------------------------------------------------------------------------------

_COMPUTE_MODES = {
    "use_mm_for_euclid_dist_if_necessary": 0,
    "use_mm_for_euclid_dist": 1,
    "donot_use_mm_for_euclid_dist": 2,
}


def _expanded(t, batch):
    """t.expand(batch + its last two dims).contiguous(): a copy when t is broadcast or not
    contiguous (no history)."""
    return t.expand(*batch, *t.shape[-2:]).contiguous()


def _blocks(r1, r2, c):
    """Row blocks (of x1's rows, of x2's rows) whose [rows1, rows2, c] differences stay within
    kernels.SCRATCH_ELEMS."""
    jstep = _step(c, r2)
    istep = max(1, kernels.SCRATCH_ELEMS // (max(c, 1) * jstep))
    for i0 in range(0, r1, istep):
        for j0 in range(0, r2, jstep):
            yield slice(i0, min(r1, i0 + istep)), slice(j0, min(r2, j0 + jstep))


def _cdist_kernel(xp, a, b, out, p):
    """out[t, i, j] = ||a[t, i, :] - b[t, j, :]||_p, block by block."""
    (r1, c), r2 = a.shape[-2:], b.shape[-2]
    a, b, out = a.reshape(-1, r1, c), b.reshape(-1, r2, c), out.reshape(-1, r1, r2)
    for t in range(a.shape[0]):
        for si, sj in _blocks(r1, r2, c):
            diff = a[t, si, None, :] - b[t, None, sj, :]
            rows = _norms(xp, diff.reshape(-1, c), p)
            out[t, si, sj] = rows.reshape(diff.shape[:2])


def _cdist_backward(grad, a, b, p, dist):
    """ATen's _cdist_backward: the gradient for a (the copies of a broadcast or non-contiguous
    a and b first, freed after it), [batch..., r1, c] before broadcasting is summed away."""
    from engine.autograd.grad_mode import no_grad

    batch = _infer_size(tuple(a.shape[:-2]), tuple(b.shape[:-2]))
    r1, c = a.shape[-2:]
    r2 = b.shape[-2]
    if r1 == 0 or r2 == 0 or c == 0 or math.prod(batch) == 0:
        return kernels.zeros(tuple(a.shape), a._dtype, a._device)
    with no_grad():
        ac, bc = _expanded(a, batch), _expanded(b, batch)
        gx = kernels.empty((*batch, r1, c), a._dtype, a._device)
        if _live(a._device):
            xp = kernels.xp_of(a)
            A, B = ac._data.reshape(-1, r1, c), bc._data.reshape(-1, r2, c)
            D, G = dist._data.reshape(-1, r1, r2), grad._data.reshape(-1, r1, r2)
            out = gx._data.reshape(-1, r1, c)
            out[...] = 0
            with np.errstate(divide="ignore", invalid="ignore"):  # 0 ** (p - 1), masked
                for t in range(A.shape[0]):
                    for si, sj in _blocks(r1, r2, c):
                        diff = A[t, si, None, :] - B[t, None, sj, :]
                        flat = _grad_rows(
                            xp, diff.reshape(-1, c), D[t, si, sj].ravel(), G[t, si, sj].ravel(), p
                        )
                        out[t, si] += flat.reshape(diff.shape).sum(1)
        del bc, ac
    return gx


class Cdist(Function):
    """at::_cdist_forward: one node (CdistBackward0) keeping both inputs and the result."""

    retain_inputs = (0, 1)
    retain_output = True

    def forward(self, x1, x2, out=None, p=2.0):
        from engine.autograd.grad_mode import no_grad

        self.p = p
        batch = _infer_size(tuple(x1.shape[:-2]), tuple(x2.shape[:-2]))
        r1, c = x1.shape[-2:]
        r2 = x2.shape[-2]
        with no_grad():
            t1, t2 = _expanded(x1, batch), _expanded(x2, batch)
            if r1 == 0 or r2 == 0 or math.prod(batch) == 0:
                y = kernels.empty((*batch, r1, r2), x1._dtype, x1._device)
            elif c == 0:
                y = kernels.zeros((*batch, r1, r2), x1._dtype, x1._device)
            else:
                y = kernels.empty((*batch, r1, r2), x1._dtype, x1._device)
                if _live(x1._device):
                    _cdist_kernel(kernels.xp_of(x1), t1._data, t2._data, y._data, p)
            del t1, t2
        return y

    def backward(self, g):
        from engine.autograd.grad_mode import no_grad
        from engine.ops.common import sum_to

        x1, x2, res = self.saved_tensors
        need1, need2 = (e is not None for e in self._edges)
        with no_grad():
            g1 = _cdist_backward(g.contiguous(), x1, x2, self.p, res) if need1 else None
            g2 = None
            if need2:  # derivatives.yaml: the transposed gradient and result, made contiguous
                gt = g.transpose(-2, -1).contiguous()
                rt = res.transpose(-2, -1).contiguous()
                g2 = _cdist_backward(gt, x2, x1, self.p, rt)
                del rt, gt
            # the autograd engine sums a broadcast batch away (validate_outputs), in edge order
            if g1 is not None:
                g1 = sum_to(g1, tuple(x1.shape))
            if g2 is not None:
                g2 = sum_to(g2, tuple(x2.shape))
        return (g1, g2)

    def name(self):
        return "CdistBackward0"


class EuclideanDist(Function):
    """at::_euclidean_dist: sqrt(clamp(||x1||^2 - 2 x1 x2^T + ||x2||^2, 0)) through one matrix
    product of padded operands (one node, EuclideanDistBackward0; its temporaries freed in C++'s
    order)."""

    retain_inputs = (0, 1)
    retain_output = True

    def forward(self, x1, x2, out=None):
        from engine.autograd.grad_mode import no_grad
        from engine.ops import matmul
        from engine.ops.shape import cat

        with no_grad():
            x1_norm = x1.pow(2).sum(-1, True)
            x1_pad = kernels.ones_like_new(x1_norm)
            x2_norm = x2.pow(2).sum(-1, True)
            x2_pad = kernels.ones_like_new(x2_norm)
            parts = [x1 * -2, x1_norm, x1_pad]
            del x1_norm, x1_pad
            x1_ = cat(parts, -1)
            while parts:  # the initializer list, destroyed last element first
                parts.pop()
            parts = [x2, x2_pad, x2_norm]
            del x2_pad, x2_norm
            x2_ = cat(parts, -1)
            while parts:
                parts.pop()
            result = matmul(x1_, x2_.transpose(-2, -1))
            result.clamp_min_(0).sqrt_()
            del x2_, x1_
        return result

    def backward(self, g):
        from engine.autograd.grad_mode import no_grad

        x1, x2, res = self.saved_tensors
        with no_grad():  # derivatives.yaml's _euclidean_dist_backward, one statement
            ratio = g / res
            ratio.masked_fill_(res == 0, 0)
            m1 = ratio.matmul(x2)  # (ATen evaluates the difference's right operand first)
            s1 = ratio.sum(-1, True)
            p1 = x1 * s1
            g1 = p1 - m1
            m2 = ratio.transpose(-2, -1).matmul(x1)
            s2 = ratio.sum(-2, False)
            p2 = x2 * s2.unsqueeze(-1)
            g2 = p2 - m2
            del p2, s2, m2, p1, s1, m1, ratio
        return (g1, g2)

    def name(self):
        return "EuclideanDistBackward0"


def cdist(x1, x2, p=2.0, compute_mode="use_mm_for_euclid_dist_if_necessary"):
    """The p-norm distances between the rows of x1 [..., R1, M] and of x2 [..., R2, M]:
    [..., R1, R2] (torch's; for p = 2 and more than 25 rows, or compute_mode
    'use_mm_for_euclid_dist', through one matrix product: _euclidean_dist)."""
    if compute_mode not in _COMPUTE_MODES:
        raise ValueError(f"{compute_mode} is not a valid value for compute_mode")
    mode = _COMPUTE_MODES[compute_mode]
    if x1.ndim < 2:
        raise RuntimeError(f"cdist only supports at least 2D tensors, X1 got: {x1.ndim}D")
    if x2.ndim < 2:
        raise RuntimeError(f"cdist only supports at least 2D tensors, X2 got: {x2.ndim}D")
    if x1.shape[-1] != x2.shape[-1]:
        raise RuntimeError(
            f"X1 and X2 must have the same number of columns. X1: {x1.shape[-1]} X2: {x2.shape[-1]}"
        )
    if not x1.dtype.is_floating_point:  # (ATen checks x1's dtype only; x2's must equal it)
        raise RuntimeError(
            f"cdist only supports floating-point dtypes, X1 got: {x1._dtype.scalar_name}"
        )
    if p < 0:
        raise RuntimeError("cdist only supports non-negative p values")
    if x1._dtype is not x2._dtype:
        raise RuntimeError(
            f"expected scalar type {x1._dtype.scalar_name} but found {x2._dtype.scalar_name}"
        )
    r1, r2 = x1.shape[-2], x2.shape[-2]
    use_mm = p == 2 and (mode == 1 or (mode == 0 and (r1 > 25 or r2 > 25)))
    if x1.numel() == 0 or x2.numel() == 0 or not use_mm:
        return Cdist.apply(x1, x2, op="_cdist_forward", p=float(p))
    # ATen's cdist_impl with autograd: the batch folded into one dim (views, or copies of a
    # broadcast input), the product of padded operands, the result viewed back
    batch = _infer_size(tuple(x1.shape[:-2]), tuple(x2.shape[:-2]))
    n = math.prod(batch)
    t1 = x1.expand(*batch, r1, x1.shape[-1]).contiguous().view(n, r1, x1.shape[-1])
    t2 = x2.expand(*batch, r2, x2.shape[-1]).contiguous().view(n, r2, x2.shape[-1])
    if n == 1:
        dist = EuclideanDist.apply(x1, x2, op="_euclidean_dist")
    else:
        dist = EuclideanDist.apply(t1, t2, op="_euclidean_dist")
    del t1, t2
    return dist.view(*batch, r1, r2)
