"""Contractions: einsum and baddbmm.

einsum is a composite, as PyTorch's is (aten/src/ATen/native/Linear.cpp): operands are
contracted left to right, each pair by summing the dims only one side has, permuting both to
(batch, kept, contracted) / (batch, contracted, kept), reshaping to 3-D and one bmm (a broadcast
multiply when nothing is contracted, as torch's sumproduct_pair), then
viewing and permuting the product back to the output's order (the result may be a
non-contiguous view, as torch's is). Its autograd is that of those ops, so it needs no
backward of its own; a reshape that cannot be a view copies (charged), as in torch.

baddbmm is one primitive: beta * input + alpha * (batch1 @ batch2) in one output buffer;
backward keeps batch1 / batch2 only when the other one wants a gradient (the input is never
kept, so baddbmm_ is free).
"""

from __future__ import annotations

import math

import numpy as np

from engine import kernels
from engine.autograd.function import Function
from engine.ops import registry as _registry
from engine.ops.common import device_of, result_buffer, result_type, sum_to
from engine.tensor import Tensor

_LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"


# ---------------------------------------------------------------------------------------------
# einsum
# ---------------------------------------------------------------------------------------------
def _parse(equation: str, operands):
    eq = equation.replace(" ", "")
    if "->" in eq:
        lhs, out = eq.split("->")
        explicit = True
    else:
        lhs, out, explicit = eq, None, False
    terms = lhs.split(",")
    if len(terms) != len(operands):
        raise ValueError(
            f"einsum(): {len(terms)} operand(s) in the equation {equation!r} but "
            f"{len(operands)} tensor(s) given"
        )
    used = set(c for c in eq if c.isalpha())
    spare = [c for c in _LETTERS if c not in used]
    ell_dims = 0
    for t, op in zip(terms, operands, strict=True):
        if "..." in t:
            ell_dims = max(ell_dims, op.ndim - (len(t) - 3))
    ell = "".join(spare[:ell_dims])
    subs = []
    for i, (t, op) in enumerate(zip(terms, operands, strict=True)):
        if "..." in t:
            k = op.ndim - (len(t) - 3)
            t = t.replace("...", ell[ell_dims - k :] if k else "")
        for c in t:
            if not c.isalpha():
                raise ValueError(f"einsum(): invalid subscript {c!r} in the equation {equation!r}")
        if len(t) != op.ndim:
            raise RuntimeError(
                f"einsum(): the number of subscripts in the equation ({len(t)}) does not match "
                f"the number of dimensions ({op.ndim}) for operand {i}"
                + ("" if "..." in terms[i] else " and no ellipsis was given")
            )
        subs.append(t)
    if explicit:
        out = out.replace("...", ell)
        for c in out:
            if not any(c in s for s in subs):
                raise RuntimeError(
                    f"einsum(): output subscript {c} does not appear in the equation for any "
                    "input operand"
                )
        if len(set(out)) != len(out):
            raise RuntimeError(f"einsum(): output subscript {out!r} appears more than once")
    else:
        counts = {}
        for s in subs:
            for c in s:
                counts[c] = counts.get(c, 0) + 1
        out = ell + "".join(sorted(c for c in counts if counts[c] == 1 and c not in ell))
    return subs, out


def _diagonals(op: Tensor, sub: str, i: int):
    """A subscript repeated within one operand ("ii", "bii") takes the diagonal of those dims,
    as PyTorch's einsum does: op.diagonal(0, first, again).movedim(-1, first), a view."""
    if len(set(sub)) == len(sub):
        return op, sub
    kept = ""
    for c in sub:
        j = len(kept)
        first = kept.find(c)
        if first < 0:
            kept += c
            continue
        if op.shape[first] != op.shape[j]:
            raise RuntimeError(
                f"einsum(): subscript {c} is repeated for operand {i} but the sizes don't "
                f"match, {op.shape[j]} != {op.shape[first]}"
            )
        op = op.diagonal(0, first, j).movedim(-1, first)
    return op, kept


def _sizes(subs, operands):
    size = {}
    for s, op in zip(subs, operands, strict=True):
        for c, n in zip(s, op.shape, strict=True):
            prev = size.get(c)
            if prev is None or prev == 1:
                size[c] = n
            elif n not in (1, prev):
                raise RuntimeError(
                    f"einsum(): operands do not broadcast with remapped shapes (original->"
                    f"remapped): subscript {c} has size {prev} for one operand and {n} for another"
                )
    return size


def _sum_only(t: Tensor, s: str, keep: set):
    """Sum the dims of t whose letters are not in keep."""
    dims = [i for i, c in enumerate(s) if c not in keep]
    if not dims:
        return t, s
    return t.sum(dims), "".join(c for c in s if c in keep)


def _pair(a: Tensor, sa: str, b: Tensor, sb: str, keep_after: set, size: dict):
    """Contract a and b (letters sa, sb), keeping the letters in keep_after."""
    a, sa = _sum_only(a, sa, set(sb) | keep_after)
    b, sb = _sum_only(b, sb, set(sa) | keep_after)
    batch = [c for c in sa if c in sb and c in keep_after]
    contracted = [c for c in sa if c in sb and c not in keep_after]
    left = [c for c in sa if c not in sb]
    right = [c for c in sb if c not in sa]
    a = a.permute(*[sa.index(c) for c in batch + left + contracted])
    b = b.permute(*[sb.index(c) for c in batch + contracted + right])
    full_a = tuple(size[c] for c in batch + left + contracted)
    full_b = tuple(size[c] for c in batch + contracted + right)
    if a.shape != full_a:  # size-1 dims broadcast against the other operand
        a = a.expand(*full_a)
    if b.shape != full_b:
        b = b.expand(*full_b)
    if not contracted:  # nothing summed: a broadcast multiply, as torch's sumproduct_pair
        a = a.reshape(*full_a, *([1] * len(right)))
        b = b.reshape(*[size[c] for c in batch], *([1] * len(left)), *[size[c] for c in right])
        return a * b, "".join(batch + left + right)
    nb = math.prod(size[c] for c in batch)
    m = math.prod(size[c] for c in left)
    k = math.prod(size[c] for c in contracted)
    n = math.prod(size[c] for c in right)
    y = a.reshape(nb, m, k).matmul(b.reshape(nb, k, n))
    y = y.view(*[size[c] for c in batch + left + right])
    return y, "".join(batch + left + right)


def einsum(equation, *operands):
    """einsum("bhqd,bhkd->bhqk", q, k): contraction left to right through bmm (torch's way)."""
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    if not operands:
        raise ValueError("einsum(): must provide at least one operand")
    for i, op in enumerate(operands):
        if not isinstance(op, Tensor):
            raise TypeError(f"einsum(): operand {i} must be a Tensor, not {type(op).__name__}")
    subs, out = _parse(equation, operands)
    pairs = [_diagonals(op, t, i) for i, (op, t) in enumerate(zip(operands, subs, strict=True))]
    operands, subs = [p[0] for p in pairs], [p[1] for p in pairs]
    size = _sizes(subs, operands)
    cur, s = operands[0], subs[0]
    for i in range(1, len(operands)):
        later = set(out).union(*subs[i + 1 :])
        cur, s = _pair(cur, s, operands[i], subs[i], later, size)
    cur, s = _sum_only(cur, s, set(out))
    if s != out:
        cur = cur.permute(*[s.index(c) for c in out])
    if cur.shape != tuple(size[c] for c in out):
        cur = cur.expand(*[size[c] for c in out])
    return cur


# ---------------------------------------------------------------------------------------------
# baddbmm
# ---------------------------------------------------------------------------------------------
class Baddbmm(Function):
    def to_save(self, tensors):
        _, b1, b2 = tensors
        idx = []
        if b2.requires_grad:
            idx.append(1)  # batch1, for batch2's gradient
        if b1.requires_grad:
            idx.append(2)  # batch2, for batch1's gradient
        self._save_idx = tuple(idx)
        return self._save_idx

    def forward(self, x, b1, b2, out=None, beta=1, alpha=1):
        if b1.ndim != 3 or b2.ndim != 3:
            raise RuntimeError(
                f"batch1 must be a 3D tensor and batch2 must be a 3D tensor (got {b1.ndim}D and "
                f"{b2.ndim}D)"
            )
        if b1.shape[0] != b2.shape[0] or b1.shape[2] != b2.shape[1]:
            raise RuntimeError(
                f"Expected size for first two dimensions of batch2 tensor to be: "
                f"[{b1.shape[0]}, {b1.shape[2]}] but got: [{b2.shape[0]}, {b2.shape[1]}]."
            )
        shape = (b1.shape[0], b1.shape[1], b2.shape[2])
        try:
            if np.broadcast_shapes(x.shape, shape) != shape:
                raise ValueError
        except ValueError:
            raise RuntimeError(
                f"baddbmm: the input {list(x.shape)} does not broadcast to the product's shape "
                f"{list(shape)}"
            ) from None
        dev = device_of(x, b1, b2)
        self.beta, self.alpha, self.x_shape = beta, alpha, x.shape
        y = result_buffer(out, shape, result_type(x, b1, b2), dev, "baddbmm")
        if dev.type != "meta":
            xp = kernels.xp_of_device(dev)
            if y is x:  # in place: y = beta * y + alpha * b1 @ b2 (BLAS's gemm with beta)
                if beta != 1:
                    xp.multiply(y._data, beta, out=y._data)
                _add_product(xp, y._data, b1._data, b2._data, alpha)
            else:
                xp.matmul(b1._data, b2._data, out=y._data)
                if alpha != 1:
                    xp.multiply(y._data, alpha, out=y._data)
                if beta != 0:
                    kernels.axpy(y._data, y._data, x._data, beta, xp=xp)
        return y

    def backward(self, g):
        saved = dict(zip(self._save_idx, self.saved_tensors, strict=True))
        nf = self._edges
        gx = g1 = g2 = None
        if nf[0] is not None:
            gx = sum_to(g if self.beta == 1 else g * self.beta, self.x_shape)
        if nf[1] is not None:
            g1 = g.matmul(saved[2].transpose(1, 2))
            if self.alpha != 1:
                g1 = g1.mul_(self.alpha)
        if nf[2] is not None:
            g2 = saved[1].transpose(1, 2).matmul(g)
            if self.alpha != 1:
                g2 = g2.mul_(self.alpha)
        return (gx, g1, g2)

    def name(self):
        return "BaddbmmBackward0"


def _add_product(xp, y, a, b, alpha):
    """y += alpha * a @ b in row blocks: the scratch holds at most SCRATCH_ELEMS elements (a
    gemm with beta = 1 accumulates in place, with no temporary at all)."""
    if xp is not np:
        y += alpha * xp.matmul(a, b)  # CuPy's temporary shows through its memory hook
        return
    n = y.shape[2]
    rows = max(1, kernels.SCRATCH_ELEMS // max(n, 1))
    scratch = np.empty((min(rows, y.shape[1]), n), dtype=y.dtype)
    for i in range(y.shape[0]):
        for r in range(0, y.shape[1], rows):
            s = scratch[: min(rows, y.shape[1] - r)]
            np.matmul(a[i, r : r + rows], b[i], out=s)
            if alpha != 1:
                np.multiply(s, alpha, out=s)
            np.add(y[i, r : r + rows], s, out=y[i, r : r + rows])


def baddbmm(input, batch1, batch2, *, beta=1, alpha=1, out=None):
    return Baddbmm.apply(input, batch1, batch2, out=out, op="baddbmm", beta=beta, alpha=alpha)


def baddbmm_(input, batch1, batch2, *, beta=1, alpha=1):
    return Baddbmm.apply(input, batch1, batch2, out=input, op="baddbmm_", beta=beta, alpha=alpha)


_registry.register(
    "einsum",
    einsum,
    scenario=_registry.Scenario(
        inputs=("operands",),
        variadic=True,
        args=(("equation", str, _registry.REQUIRED, "e.g. bhqd,bhkd->bhqk"),),
        call=lambda ts, a, inplace: einsum(a["equation"], *ts),
        doc="einsum through bmm (PyTorch's path): permutes, reshapes, one bmm per pair",
    ),
)
_registry.register(
    "baddbmm",
    baddbmm,
    method=True,
    inplace="baddbmm_",
    scenario=_registry.Scenario(
        inputs=("input", "batch1", "batch2"),
        args=(("beta", float, 1, ""), ("alpha", float, 1, "")),
        doc="beta * input + alpha * batch1 @ batch2; baddbmm_ in place is free",
    ),
)
_registry.register("baddbmm_", baddbmm_, function=False, method=True)
