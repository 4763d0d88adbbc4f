"""A sweep of the tensor-level ops (engine.* functions and Tensor methods) on every data device:
the same program runs on the engine's tensors on the parametrized device (CuPy's arrays on cuda)
and on torch's float64 tensors on the CPU; values, dtypes, shapes and every input's gradient must
agree. On cpu this proves each case against torch; one GPU run then finds each op whose CuPy
path breaks (numpy calls on a CuPy array, numpy keywords CuPy lacks, ...)."""

from __future__ import annotations

import numpy as np
import pytest

import engine
from tests.conftest import DATA_DEVICES

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(2024)
A = RNG.standard_normal((3, 4))
B = RNG.standard_normal((3, 4))
C = RNG.standard_normal((3, 4))
Q = RNG.standard_normal((4, 4))
V3 = RNG.standard_normal(3)
V4 = RNG.standard_normal(4)
W4 = RNG.standard_normal(4)
P3 = RNG.standard_normal((2, 3, 4))
P4 = RNG.standard_normal((2, 4, 5))
X6 = RNG.standard_normal((6, 5))
POS = RNG.uniform(0.5, 2.0, (3, 4))
UNIT = RNG.uniform(-0.9, 0.9, (3, 4))  # inside (-1, 1): erfinv, atanh, asin, acos
PROB = RNG.uniform(0.05, 0.95, (3, 4))  # logit
BIG = RNG.uniform(1.1, 3.0, (3, 4))  # acosh
TIES = RNG.integers(0, 3, (3, 6)).astype(np.float64)  # mode, unique, sorted repeats
HALF = np.round(RNG.standard_normal((3, 4)) * 4) / 2  # .5 cases for round
SORTED = np.sort(RNG.standard_normal(7))
WITH_NAN = A.copy()
WITH_NAN[0, 1] = WITH_NAN[2, 3] = WITH_NAN[1, 0] = np.nan
I64 = RNG.integers(-30, 31, (3, 4))
J64 = RNG.integers(1, 13, (3, 4))
ROWS = np.array([0, 2, 1, 2])  # an index along dim 0 of A with a repeat
COLS = np.array([3, 0, 2])
SCAT = RNG.integers(0, 4, (3, 4))  # scatter / gather index along dim 1 of A
MASK = A > 0.2
BOOLS = RNG.random((3, 4)) > 0.5


def _pieces_sum(pieces):
    out = pieces[0] * 1.0
    for p in pieces[1:]:
        out = out + p.sum()
    return out


def _maybe_detach(kind, *ts):
    """Values only where a derivative is refused: the engine's scatter_reduce for prod (torch
    has one), and dist with p=0 (torch's backward raises too)."""
    ts = tuple(t.detach() for t in ts) if kind in ("prod", 0) else ts
    return ts if len(ts) > 1 else ts[0]


def _setitem_int(m, x, v):
    y = x.clone()
    y[m.tensor([2, 0])] = v[:2]
    return y


def _setitem_bool(m, x, v):
    y = x * 1.0
    y[y > 0.0] = v.sum()
    y[1] = v[0]
    return y


def _inplace_on_views(m, x, b):
    y = x.clone()
    y.t().add_(b.t())
    y[1:].mul_(b[1:])
    y[:, ::2].sub_(1.5)
    return y


def _fill_diagonal(m, x):
    y = x * 1.0
    y.fill_diagonal_(-2.0, wrap=True)
    return y


def _out(m, op, *args, like, **kwargs):
    buf = m.empty(like.shape, dtype=like.dtype)
    res = op(*args, out=buf, **kwargs)
    assert res is buf
    return buf


# name -> (program(m, *inputs), inputs). Float inputs require grad.
CASES = {
    # ---- indexing: index_put / index_add / index_copy / index_fill -----------------------
    "index_put": (lambda m, x, v: x.index_put((m.tensor([0, 2]),), v[:2]), (A, B)),
    "index_put_acc_dups": (
        lambda m, x, v, i: m.index_put(x, (i,), v, accumulate=True),
        (A, RNG.standard_normal((4, 4)), ROWS),
    ),
    "index_put_two_idx_acc": (
        lambda m, x, v: x.index_put((m.tensor([0, 2, 0]), m.tensor([1, 3, 1])), v, True),
        (A, V3),
    ),
    "index_put_mask": (lambda m, x, v, k: x.index_put((k,), v), (A, np.array(0.7), MASK)),
    "index_put_": (
        lambda m, x, v, i: (x * 2).index_put_((i,), v, accumulate=True),
        (A, RNG.standard_normal((4, 4)), ROWS),
    ),
    "index_put_set_": (lambda m, x, v: (x * 2).index_put_((m.tensor([1]),), v[:1]), (A, B)),
    "index_add": (lambda m, x, s, i: x.index_add(0, i, s, alpha=2.0), (A, Q, ROWS)),
    "index_add_": (lambda m, x, s, i: (x * 1.0).index_add_(1, i, s), (A, C[:, :3], COLS)),
    "index_copy": (
        lambda m, x, s: m.index_copy(x, 1, m.tensor([3, 0]), s),
        (A, RNG.standard_normal((3, 2))),
    ),
    "index_copy_": (lambda m, x, s: (x + 0.0).index_copy_(0, m.tensor([2, 0]), s), (A, B[:2])),
    "index_fill": (lambda m, x, i: x.index_fill(1, i, -3.0), (A, COLS)),
    "index_fill_": (lambda m, x: (x * 1.0).index_fill_(0, m.tensor([1]), 4.0), (A,)),
    # ---- scatter / gather / take ----------------------------------------------------------
    "scatter_src": (lambda m, x, s, i: x.scatter(1, i[:, :2], s[:, :2]), (A, B, SCAT)),
    "scatter_value": (lambda m, x, i: m.scatter(x, 1, i, 0.5), (A, SCAT)),
    "scatter_": (lambda m, x, s: (x * 1.0).scatter_(0, m.tensor([[2, 0, 1, 0]]), s[:1]), (A, B)),
    "scatter_add": (lambda m, x, s, i: x.scatter_add(1, i, s), (A, B, SCAT)),
    "scatter_add_": (lambda m, x, s, i: (x * 1.0).scatter_add_(1, i, s), (A, B, SCAT)),
    **{
        f"scatter_reduce_{r}_{'self' if inc else 'noself'}": (
            lambda m, x, s, i, r=r, inc=inc: _maybe_detach(r, x).scatter_reduce(
                1, i, _maybe_detach(r, s), r, include_self=inc
            ),
            (A, B, SCAT),
        )
        for r in ("sum", "prod", "mean", "amax", "amin")
        for inc in (True, False)
    },
    "scatter_reduce_": (
        lambda m, x, s, i: (x * 1.0).scatter_reduce_(0, i, s, "sum"),
        (A, B, np.array([[0, 1, 2, 0]] * 3)),
    ),
    "gather": (lambda m, x, i: x.gather(1, i), (A, SCAT)),
    "gather_t": (lambda m, x, i: m.gather(x.t(), 0, i.t()), (A, SCAT)),
    "take": (lambda m, x: x.take(m.tensor([[0, 11], [5, 5]])), (A,)),
    "take_t": (lambda m, x: m.take(x.t(), m.tensor([1, 7, 3])), (A,)),
    "take_along_dim": (lambda m, x, i: m.take_along_dim(x, i, 1), (A, SCAT)),
    "take_along_dim_flat": (lambda m, x: x.take_along_dim(m.tensor([3, 0, 3])), (A,)),
    "take_along_dim_out": (
        lambda m, x, i: _out(m, m.take_along_dim, x.detach(), i, 1, like=x.detach()),
        (A, SCAT),
    ),
    # ---- masks ------------------------------------------------------------------------
    "masked_fill": (lambda m, x, k: x.masked_fill(k, -1.0), (A, MASK)),
    "masked_fill_tensor": (lambda m, x, v, k: m.masked_fill(x, k, v), (A, np.array(2.5), MASK)),
    "masked_fill_": (lambda m, x, k: (x * 1.0).masked_fill_(k.t().t(), 3.0), (A, MASK)),
    "masked_scatter": (lambda m, x, s, k: x.masked_scatter(k, s), (A, B, MASK)),
    "masked_scatter_": (lambda m, x, s, k: (x * 1.0).masked_scatter_(k[0], s), (A, B, MASK)),
    "masked_select": (lambda m, x, k: x.masked_select(k), (A, MASK)),
    "masked_select_bcast": (lambda m, x, k: m.masked_select(x, k[1]), (A, MASK)),
    # ---- scatter-views and strided views ---------------------------------------------------
    "select_scatter": (lambda m, x, v: m.select_scatter(x, v, 1, -2), (X6, X6[:, 0] * 2)),
    "slice_scatter": (lambda m, x, v: x.slice_scatter(v, 1, 1, 5, 2), (X6, X6[:, :2] * 2)),
    "diagonal_scatter": (lambda m, x, v: m.diagonal_scatter(x, v, 1), (X6, V4)),
    "as_strided_scatter": (
        lambda m, x, v: m.as_strided_scatter(x, v, (2, 3), (1, 5), 2),
        (X6, RNG.standard_normal((2, 3))),
    ),
    "as_strided": (lambda m, x: x.as_strided((3, 2), (1, 5), 2) * 1.0, (X6,)),
    "as_strided_overlap": (lambda m, x: m.as_strided(x, (4, 4), (1, 1)) * 1.0, (X6,)),
    "select_slice_diagonal": (
        lambda m, x: [x.select(1, 2), x[:, 1:3], x.diagonal(), x.diagonal(1).mul(2.0)],
        (Q,),
    ),
    "narrow_narrow_copy": (lambda m, x: [x.narrow(1, 1, 2) * 1.0, m.narrow_copy(x, 0, 1, 2)], (A,)),
    "unsafe_chunk_split": (
        lambda m, x: [
            _pieces_sum(m.unsafe_chunk(x * 1.0, 2, 1)),
            _pieces_sum(x.unsafe_split(2)),
        ],
        (A,),
    ),
    # ---- BLAS-like --------------------------------------------------------------------
    "addmm": (lambda m, c, a, b: m.addmm(c, a, b.t(), beta=0.5, alpha=2.0), (Q[:3, :3], A, B)),
    "addmm_bcast": (lambda m, c, a, b: c.addmm(a, b), (V4, A, Q)),
    "addmm_": (lambda m, c, a, b: (c * 1.0).addmm_(a.t(), b, alpha=-1.0), (Q, A, B)),
    "addmv": (lambda m, c, a, v: m.addmv(c, a, v, beta=2.0), (V3, A, V4)),
    "addmv_": (lambda m, c, a, v: (c * 1.0).addmv_(a.t(), v), (V4, A, V3)),
    "addr": (lambda m, c, u, v: c.addr(u, v, alpha=0.5), (A, V3, V4)),
    "addr_": (lambda m, c, u, v: (c * 1.0).addr_(u, v, beta=0.0), (A, V3, V4)),
    "addbmm": (
        lambda m, c, a, b: m.addbmm(c, a, b, beta=0.5),
        (RNG.standard_normal((3, 5)), P3, P4),
    ),
    "addbmm_": (lambda m, c, a, b: (c * 1.0).addbmm_(a, b), (RNG.standard_normal((3, 5)), P3, P4)),
    "baddbmm": (
        lambda m, c, a, b: c.baddbmm(a, b, alpha=1.5),
        (RNG.standard_normal((1, 3, 5)), P3, P4),
    ),
    "baddbmm_": (
        lambda m, c, a, b: (c * 1.0).baddbmm_(a, b),
        (RNG.standard_normal((2, 3, 5)), P3, P4),
    ),
    "bmm": (lambda m, a, b: m.bmm(a, b), (P3, P4)),
    "bmm_t": (lambda m, a, b: a.bmm(b.transpose(1, 2).transpose(1, 2)), (P3, P4)),
    "mv": (lambda m, a, v: m.mv(a, v), (A, V4)),
    "mv_t": (lambda m, a, v: a.t().mv(v), (A, V3)),
    "vdot_dot": (lambda m, u, v: [m.vdot(u, v), u.dot(v)], (V4, W4)),
    "outer_inner": (lambda m, u, v, a: [m.outer(u, v), m.inner(a, a), u.inner(u)], (V3, V4, A)),
    "kron": (lambda m, a, b: m.kron(a, b[:2, :2]), (A, B)),
    "einsum": (
        lambda m, a, b: [m.einsum("bij,bjk->bik", a, b), m.einsum("ij,ij->i", a[0], a[1])],
        (P3, P4),
    ),
    "einsum_trace_outer": (lambda m, q, v: [m.einsum("ii", q), m.einsum("i,j->ij", v, v)], (Q, V3)),
    "matmul_broadcast": (
        lambda m, a, b: [a @ b[0], m.matmul(a[:1], b), b[1].t() @ a[0].t()],
        (P3, P4),
    ),
    "matmul_vec": (lambda m, a, v: [a @ v, v @ a.transpose(1, 2)], (P3, V4)),
    "cross": (lambda m, a, b: [m.cross(a, b, dim=0), a.t().cross(b.t(), dim=1)], (A, B)),
    "trace": (lambda m, x: [x.trace(), m.trace(x.t())], (A,)),
    # ---- norms and distances ----------------------------------------------------------------
    "norm": (
        lambda m, x: [
            x.norm(),
            m.norm(x, 1, dim=1),
            x.norm(3, dim=0, keepdim=True),
            x.norm(float("inf"), dim=1),
            x.t().norm(2, dim=1),
            x.norm(0, dim=1),  # no gradient, as torch
        ],
        (A,),
    ),
    "renorm": (lambda m, x: [x.renorm(2, 0, 1.0), m.renorm(x, 1, 1, 1.5)], (A * 2,)),
    "renorm_": (lambda m, x: (x * 1.0).renorm_(3, 0, 0.8), (A * 2,)),
    "renorm_out": (lambda m, x: _out(m, m.renorm, x.detach(), 2, 1, 1.0, like=x.detach()), (A,)),
    **{
        f"dist_p{p}": (lambda m, x, y, p=p: m.dist(*_maybe_detach(p, x, y), p), (A, B))
        for p in (0, 1, 2, 3, float("inf"))
    },
    "dist_bcast": (lambda m, x, v: x.dist(v, 2.5), (A, V4)),
    # ---- pointwise: special functions ---------------------------------------------------
    "erfinv": (lambda m, x: [x.erfinv(), m.erfinv(x.t())], (UNIT,)),
    "erfinv_": (lambda m, x: (x * 1.0).erfinv_(), (UNIT,)),
    "erf_erfc": (lambda m, x: [x.erf(), m.erfc(x), (x * 1.0).erf_(), (x * 1.0).erfc_()], (A,)),
    "sinc_logit": (
        lambda m, x, p: [x.sinc(), m.sinc(x * 0.0), p.logit(), m.logit(p, 0.2)],
        (A, PROB),
    ),
    "digamma_lgamma": (lambda m, x: [x.digamma(), m.lgamma(x), (x * 1.0).lgamma_()], (POS * 2,)),
    "xlogy": (lambda m, x, y: [m.xlogy(x, y), x.xlogy(2.0), (x * 0.0).xlogy(y)], (A, POS)),
    "inverse_trig": (
        lambda m, u, b: [u.asin(), m.acos(u), u.atan(), u.asinh(), b.acosh(), m.atanh(u)],
        (UNIT, BIG),
    ),
    "hyperbolic": (lambda m, x: [x.sinh(), m.cosh(x), x.tanh()], (A,)),
    "rounding": (
        lambda m, x: [x.round(), m.floor(x), x.ceil(), x.trunc(), x.frac(), x.round(decimals=1)],
        (HALF * 1.37,),
    ),
    "rounding_": (lambda m, x: [(x * 1.0).round_(), (x * 1.0).trunc_(), m.fix(x)], (HALF,)),
    # ---- pointwise: binary and ternary ----------------------------------------------------
    "hypot_atan2_copysign": (
        lambda m, x, y: [m.hypot(x, y), x.atan2(y), m.copysign(x, y), x.copysign(-1.0)],
        (A, B),
    ),
    "binary_": (
        lambda m, x, y: [(x * 1.0).hypot_(y), (x * 1.0).atan2_(y), (x * 1.0).copysign_(y)],
        (A, B),
    ),
    "fmod_remainder": (
        lambda m, x, y: [m.fmod(x, y), x.remainder(y), x.fmod(0.7), m.remainder(x, -0.7)],
        (A * 3, POS),
    ),
    "fmod_remainder_int": (
        lambda m, i, j: [i.fmod(j), m.remainder(i, j), i.remainder(-4)],
        (I64, J64),
    ),
    "floor_divide": (
        lambda m, x, y, i, j: [m.floor_divide(x.detach(), y.detach()), i.floor_divide(j), i // -3],
        (A * 3, POS, I64, J64),
    ),
    "pow_tensor_exp": (
        lambda m, x, e: [x.pow(e), m.pow(x, 2.5), m.pow(2.0, e), x ** e.t().t()],
        (POS, A),
    ),
    "pow_": (lambda m, x, e: [(x * 1.0).pow_(e), (x * 1.0).pow_(3)], (POS, A)),
    "ldexp_frexp": (
        lambda m, x, i: [
            m.ldexp(x, i),
            x.ldexp(i.t().t()),
            *m.frexp(x.detach() * 5.0),
            *x.detach().frexp(),
        ],
        (A, J64),
    ),
    "gcd_lcm": (
        lambda m, i, j: [
            m.gcd(i, j),
            i.lcm(j),
            i.clone().gcd_(j),
            i.clone().lcm_(j),
            m.lcm(i.t(), j.t()),
        ],
        (I64, J64),
    ),
    "logical": (
        lambda m, x, b: [
            m.logical_and(x, b),
            x.logical_or(b),
            m.logical_xor(x > 0, b),
            m.logical_not(x),
            b.clone().logical_and_(x > 0),
        ],
        (A.round(), BOOLS),
    ),
    "lerp": (
        lambda m, x, y, w: [m.lerp(x, y, 0.3), x.lerp(y, w), (x * 1.0).lerp_(y, w.t().t())],
        (A, B, PROB),
    ),
    "addcmul_addcdiv": (
        lambda m, x, a, b: [
            m.addcmul(x, a, b, value=0.5),
            x.addcdiv(a, b, value=-2.0),
            (x * 1.0).addcmul_(a.t().t(), b),
            (x * 1.0).addcdiv_(a, b),
        ],
        (A, B, POS),
    ),
    "clamp_tensor_bounds": (
        lambda m, x, lo, hi: [
            x.clamp(lo, lo + hi),
            m.clip(x, min=lo),
            x.clamp(max=hi[0]),
            m.clamp(x, -0.5, 0.5),
        ],
        (A, B, POS),
    ),
    "clamp_": (lambda m, x, lo: [(x * 1.0).clamp_(lo, lo + 1.0), (x * 1.0).clip_(max=lo)], (A, B)),
    "clamp_out": (
        lambda m, x, lo: _out(
            m, m.clamp, x.detach(), lo.detach(), lo.detach() + 0.8, like=x.detach()
        ),
        (A, B),
    ),
    "where": (
        lambda m, x, y, k: [m.where(k, x, y), m.where(k, x, 0.0), x.where(k.t().t(), y.t().t())],
        (A, B, MASK),
    ),
    "where_out": (
        lambda m, x, y, k: _out(m, m.where, k, x.detach(), y.detach(), like=x.detach()),
        (A, B, MASK),
    ),
    # ---- reductions ---------------------------------------------------------------------
    "aminmax": (lambda m, x: [*x.aminmax(), *m.aminmax(x, dim=1, keepdim=True)], (A,)),
    "amax_amin": (
        lambda m, x: [x.amax(), m.amin(x, dim=(0, 1)), x.amax(1, keepdim=True), x.t().amin(0)],
        (TIES,),
    ),
    "prod": (
        lambda m, x: [x.prod(), m.prod(x, 1), x.prod(0, keepdim=True), x.prod(dtype=m.float32)],
        (A,),
    ),
    "prod_with_zero": (lambda m, x: [(x * (x > 0.5)).prod(1), x.prod(0)], (A,)),
    "var_std_correction": (
        lambda m, x: [
            x.var(),
            m.std(x, dim=1),
            x.var(0, correction=0),
            x.std(dim=1, keepdim=True, correction=2),
            x.t().var(0, unbiased=False),
        ],
        (A,),
    ),
    "var_out": (lambda m, x: _out(m, m.var, x.detach(), 1, like=x.detach()[:, 0]), (A,)),
    "nanmean_nansum": (
        lambda m, x: [x.nanmean(), m.nansum(x, 1), x.nansum(), m.nanmean(x, 0, keepdim=True)],
        (WITH_NAN,),
    ),
    "logsumexp": (
        lambda m, x: [x.logsumexp(1), m.logsumexp(x, (0, 1)), x.logsumexp(0, keepdim=True)],
        (A * 10,),
    ),
    "all_any": (
        lambda m, x, b: [x.all(), m.any(x, 1), b.all(0), b.any(), (x > 0).all(dim=1, keepdim=True)],
        (A.round(), BOOLS),
    ),
    "count_nonzero": (
        lambda m, x: [x.count_nonzero(), m.count_nonzero(x, 0), x.count_nonzero((0, 1))],
        (A.round(),),
    ),
    "cov_corrcoef": (
        lambda m, x, w: [
            m.cov(x),
            x.cov(correction=0),
            m.cov(x, aweights=w),
            m.corrcoef(x),
            x.t().corrcoef(),
        ],
        (A, POS[0]),
    ),
    # ---- scans --------------------------------------------------------------------------
    "cumsum_cumprod": (
        lambda m, x, i: [
            x.cumsum(1),
            m.cumprod(x, 0),
            x.t().cumsum(0),
            i.cumsum(0),
            x.cumsum(1, dtype=m.float32),
        ],
        (A, I64),
    ),
    "cumsum_": (lambda m, x: [(x * 1.0).cumsum_(0), (x * 1.0).cumprod_(1)], (A,)),
    "cummax_cummin": (lambda m, x: [*x.cummax(1), *m.cummin(x, 0), *x.t().cummax(0)], (A,)),
    "logcumsumexp": (lambda m, x: [x.logcumsumexp(1), m.logcumsumexp(x.t() * 10, 0)], (A,)),
    # ---- sorting and order statistics -----------------------------------------------------
    "sort_argsort": (
        lambda m, x: [
            *x.sort(1),
            *m.sort(x, 0, descending=True),
            x.argsort(1),
            m.argsort(x.t(), 0, True),
            x.msort(),
        ],
        (A,),
    ),
    "topk_kthvalue": (
        lambda m, x: [
            *x.topk(2, 1),
            *m.topk(x, 2, 0, largest=False),
            *x.kthvalue(3, 1),
            *m.kthvalue(x, 2, 0, True),
        ],
        (A,),
    ),
    "median": (lambda m, x: [x.median(), *m.median(x, 1), *x.median(0, keepdim=True)], (A,)),
    "nanmedian": (lambda m, x: [x.nanmedian(), *m.nanmedian(x, 1), *x.nanmedian(0)], (WITH_NAN,)),
    "mode": (lambda m, x: [*x.mode(1), *m.mode(x, 0, keepdim=True)], (TIES,)),
    "unique": (
        lambda m, x: [
            m.unique(x.detach()),  # torch has no derivative for unique
            *x.detach().unique(return_inverse=True, return_counts=True),
            *m.unique(x.detach(), dim=1, return_inverse=True),
        ],
        (TIES,),
    ),
    "unique_consecutive": (
        lambda m, x: [
            *x.detach().unique_consecutive(return_inverse=True, return_counts=True),
            *m.unique_consecutive(x.detach(), dim=0, return_counts=True),
        ],
        (np.sort(TIES, axis=1),),
    ),
    # ---- shapes ------------------------------------------------------------------------
    "sum_to_size": (lambda m, x: [x.sum_to_size(1, 4), x.sum_to_size((3, 1))], (A,)),
    "fill_diagonal_": (_fill_diagonal, (RNG.standard_normal((7, 3)),)),
    "tril_triu": (
        lambda m, x: [
            x.tril(),
            m.triu(x, 1),
            x.t().tril(-1),
            (x * 1.0).tril_(1),
            (x * 1.0).triu_(),
        ],
        (A,),
    ),
    "roll_flip_rot90": (
        lambda m, x: [
            x.roll(1, 1),
            m.roll(x, (1, -2), (0, 1)),
            x.roll(5),
            x.flip(0),
            m.flip(x, (0, 1)),
            x.rot90(),
            m.rot90(x, 3, (1, 0)),
        ],
        (A,),
    ),
    "repeat_tile": (lambda m, x: [x.repeat(2, 1, 3), m.tile(x, (2,)), x.t().tile((2, 1))], (A,)),
    "tile_varargs": (lambda m, x: x.t().tile(2, 1), (A,)),
    "repeat_interleave": (
        lambda m, x, r: [
            x.repeat_interleave(2),
            m.repeat_interleave(x, r, dim=0),
            x.repeat_interleave(2, dim=1),
        ],
        (A, np.array([1, 0, 3])),
    ),
    "expand_movedim_unflatten": (
        lambda m, x, p: [
            x[:1].expand_as(x) * 1.0,
            m.movedim(p, 0, -1),
            p.movedim((0, 1), (2, 0)),
            x.unflatten(1, (2, 2)),
        ],
        (A, P3),
    ),
    "diff": (
        lambda m, x, e: [x.diff(), m.diff(x, 2, 0), x.diff(dim=1, prepend=e, append=e)],
        (A, V3[:, None]),
    ),
    "diag_diag_embed": (
        lambda m, x, v: [
            x.diag(),
            m.diag(x, 1),
            v.diag(-1),
            m.diag_embed(x),
            x.diag_embed(1, 0, 2),
        ],
        (A, V3),
    ),
    "new_tensor_family": (
        lambda m, x: [
            x.new_tensor([[1.0, 2.0], [3.0, 4.0]]),
            x.new_zeros(2, 3),
            x.new_full((2,), 7.0),
            x.new_full((2,), 7, dtype=m.int64),
            x.new_empty_strided((2, 3), (1, 2)).fill_(1.0),
            x.new_ones((1, 2)) + x[:1, :2],
        ],
        (A,),
    ),
    # ---- creation on the device -------------------------------------------------------------
    "int_order_stats": (
        lambda m, i: [
            *i.sort(dim=1, stable=True),
            i.argsort(dim=0, stable=True),
            *i.cummax(1),
            *m.cummin(i, 0),
            i.unique(),
            i.amax(1),
            *i.aminmax(),
            i.prod(1),
            i.cumprod(1),
        ],
        (RNG.integers(-3, 4, (3, 4)),),
    ),
    "creation": (
        lambda m, x: [
            m.linspace(-2.0, 3.0, 9),
            m.linspace(0.0, 1.0, 5, dtype=m.float64) * x[0, 0],
            m.logspace(0, 3, 7),
            m.logspace(-1.0, 1.0, 4, base=2.0),
            m.arange(5),
            m.arange(0.5, 3.0, 0.25),
            m.eye(3, 4),
            m.full((2, 3), 1.5),
            m.full((2,), 3),
            m.zeros(3) + x[0, :3],
        ],
        (A,),
    ),
    # ---- promotion ---------------------------------------------------------------------
    "promotion": (
        lambda m, x, i, j: [
            x * (x > 0),
            i / j,
            i.exp(),
            x.float() + m.tensor(2.5, dtype=m.float64),
            x + i,
            i * 1.5,
            (x > 0) + (i > 0),
            i.sum(),
            (i > 0).sum(1),
            i.float().mean(),
            x.to(m.float32) * 2,
        ],
        (A, I64, J64),
    ),
    # ---- in-place on views, setitem, summed broadcast gradients --------------------------
    "inplace_on_views": (_inplace_on_views, (A, B)),
    "setitem_int": (_setitem_int, (A, B)),
    "setitem_bool": (_setitem_bool, (A, B)),
    "summed_broadcast_grad": (lambda m, x: x - x.sum(1, keepdim=True), (A,)),
    "summed_broadcast_grad_chain": (lambda m, x, v: (x - x.mean(0, keepdim=True)) * v + v, (A, V4)),
}

_LOOSE = {"float32", "bfloat16", "float16"}


def _dtype_name(dtype) -> str:
    return str(dtype).rsplit(".", 1)[-1]


def _run(lib, device, program, arrays):
    """Run one program: its outputs (value, dtype, shape) and every input's gradient."""
    if lib is engine:

        def make(a, **kw):
            return engine.tensor(a, device=device, **kw)
    else:

        def make(a, **kw):
            return torch.tensor(a, **kw)

    inputs = [make(a, requires_grad=a.dtype.kind == "f") for a in arrays]
    out = program(lib, *inputs)
    outs = list(out) if isinstance(out, (list, tuple)) else [out]
    loss = None
    for k, o in enumerate(outs):
        if o.requires_grad:
            g = np.random.default_rng(100 + k).standard_normal(tuple(o.shape))
            term = (o * make(g, dtype=o.dtype)).sum()
            loss = term if loss is None else loss + term
    if loss is not None:
        loss.backward()
    values = [(o.detach().cpu().numpy(), _dtype_name(o.dtype), tuple(o.shape)) for o in outs]
    grads = [None if t.grad is None else t.grad.cpu().numpy() for t in inputs]
    return values, grads


XFAIL = {  # engine bugs found on cpu against torch
    "take_along_dim_out": (
        NotImplementedError,
        "take_along_dim(out=) is refused; torch supports it",
    ),
}


def _params():
    for name in CASES:
        marks = []
        if name in XFAIL:
            raises, reason = XFAIL[name]
            marks = [pytest.mark.xfail(strict=True, raises=raises, reason=reason)]
        yield pytest.param(name, marks=marks, id=name)


@pytest.mark.parametrize("device", DATA_DEVICES)
@pytest.mark.parametrize("name", list(_params()))
def test_tensor_op_on_device_matches_torch(name, device):
    """The program's outputs and input gradients on `device` are torch's (CPU, float64)."""
    program, arrays = CASES[name]
    engine.set_default_device(device)
    try:
        (ev, eg) = _run(engine, device, program, arrays)
    finally:
        engine.set_default_device(None)
    try:
        (tv, tg) = _run(torch, None, program, arrays)
    except RuntimeError as exc:  # an older torch (the GPU machine's) without this derivative
        if "derivative for" not in str(exc) or "is not implemented" not in str(exc):
            raise
        pytest.skip(f"torch {torch.__version__}: {exc}")
    assert len(ev) == len(tv)
    for k, ((e, edt, es), (t, tdt, ts)) in enumerate(zip(ev, tv, strict=True)):
        assert (edt, es) == (tdt, ts), f"output {k}"
        if t.dtype.kind in "biu":
            np.testing.assert_array_equal(e, t, err_msg=f"output {k}")
        elif tdt in _LOOSE:
            np.testing.assert_allclose(e, t, rtol=1e-6, atol=1e-6, err_msg=f"output {k}")
        else:
            np.testing.assert_allclose(e, t, rtol=1e-10, atol=1e-12, err_msg=f"output {k}")
    for k, (e, t) in enumerate(zip(eg, tg, strict=True)):
        assert (e is None) == (t is None), f"grad {k}"
        if t is not None:
            np.testing.assert_allclose(e, t, rtol=1e-10, atol=1e-12, err_msg=f"grad {k}")
