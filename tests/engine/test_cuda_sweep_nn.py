"""A cuda sweep of the nn functionals and modules: every family runs the same program on the
engine (its tensors on the parametrized device) and on torch 2.13 (cpu, float64), and the
outputs and every input's (and module parameter's) gradient must agree.

The cpu parameter proves each program right against torch; the cuda parameter runs the same
program through CuPy's paths, which is what this file is for: one GPU run finds every op whose
CuPy path breaks (a numpy call on a CuPy array, a CuPy function lacking an argument, a buffer
made on the wrong device). Randomness appears only in deterministic forms: rrelu in eval form,
fractional pooling with given `_random_samples`, dropout_p=0.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pytest

import engine
from tests.conftest import DATA_DEVICES

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.torch

RTOL, ATOL = 1e-10, 1e-12


# ---------------------------------------------------------------------------------------------
# the harness
# ---------------------------------------------------------------------------------------------
class NoGrad(NamedTuple):
    """A float input that does not require grad (a target, a running statistic, a mask)."""

    arr: np.ndarray


class Transposed(NamedTuple):
    """A float input passed as a transposed view of a contiguous leaf (the non-contiguous path);
    the leaf's gradient is compared."""

    arr: np.ndarray


class WithParams(NamedTuple):
    """A program's outputs and the module parameters whose gradients are compared too."""

    out: object
    params: list


_DEV = ["cpu"]  # the engine's device while a program runs; torch always runs on cpu


def T(m, arr, dtype=None):
    """A constant made inside a program, on the program's device."""
    if m is engine:
        return engine.tensor(np.asarray(arr), dtype=dtype, device=_DEV[0])
    return torch.tensor(np.asarray(arr), dtype=dtype)


def F(m):
    return m.nn.functional


def _np(t):
    return t.detach().cpu().numpy()


def _leaf(m, arr, dev, requires_grad):
    if m is engine:
        return engine.tensor(arr, device=dev, requires_grad=requires_grad)
    return torch.tensor(arr, requires_grad=requires_grad)


def _run(m, dev, fn, arrays, seed):
    """fn(m, *inputs) on device dev: its outputs and the gradients of every leaf."""
    leaves, inputs = [], []
    for a in arrays:
        if isinstance(a, NoGrad):
            inputs.append(_leaf(m, a.arr, dev, False))
        elif isinstance(a, Transposed):
            base = _leaf(m, np.ascontiguousarray(a.arr.swapaxes(-1, -2)), dev, True)
            leaves.append(base)
            inputs.append(base.transpose(-1, -2))
        else:
            t = _leaf(m, a, dev, a.dtype.kind == "f")
            if a.dtype.kind == "f":
                leaves.append(t)
            inputs.append(t)
    res = fn(m, *inputs)
    params = []
    if isinstance(res, WithParams):
        res, params = res.out, res.params
    outs = list(res) if isinstance(res, (list, tuple)) else [res]
    rng = np.random.default_rng(seed)
    loss = None
    for o in outs:
        if o.requires_grad:
            g = T(m, rng.standard_normal(tuple(o.shape)), dtype=o.dtype)
            term = (o * g).sum()
            loss = term if loss is None else loss + term
    if loss is not None:
        loss.backward()
    values = [_np(o) for o in outs]
    grads = [None if t.grad is None else _np(t.grad) for t in leaves + list(params)]
    return values, grads


def _check(fn, arrays, dev, rtol=RTOL, atol=ATOL, seed=1):
    _DEV[0] = dev
    try:
        ev, eg = _run(engine, dev, fn, arrays, seed)
    finally:
        _DEV[0] = "cpu"
    tv, tg = _run(torch, "cpu", fn, arrays, seed)
    assert len(ev) == len(tv)
    for i, (a, b) in enumerate(zip(ev, tv, strict=True)):
        assert a.shape == b.shape, f"output {i}: shape {a.shape} != {b.shape}"
        assert a.dtype == b.dtype, f"output {i}: dtype {a.dtype} != {b.dtype}"
        if a.dtype.kind in "biu":
            np.testing.assert_array_equal(a, b, err_msg=f"output {i}")
        else:
            np.testing.assert_allclose(a, b, rtol=rtol, atol=atol, err_msg=f"output {i}")
    assert len(eg) == len(tg)
    for i, (a, b) in enumerate(zip(eg, tg, strict=True)):
        if a is None or b is None:
            # torch leaves no grad where the engine may give zeros (or the reverse)
            other = b if a is None else a
            assert other is None or not np.any(other), f"grad {i}: {a} vs {b}"
            continue
        assert a.shape == b.shape and a.dtype == b.dtype, f"grad {i}"
        np.testing.assert_allclose(a, b, rtol=rtol, atol=atol, err_msg=f"grad {i}")


def _module(m, ctor, weights):
    """ctor(m) in float64 with the given weights; the engine's built on cpu, then moved with
    Module.to to the program's device."""
    mod = ctor(m).to(dtype=m.float64)
    params = dict(mod.named_parameters())
    assert sorted(params) == sorted(weights), (sorted(params), sorted(weights))
    with m.no_grad():
        for name, arr in weights.items():
            params[name].copy_(m.tensor(arr))
    if m is engine:
        mod.to(_DEV[0])
    return mod


def _params(mod):
    return [p for _, p in mod.named_parameters()]


# ---------------------------------------------------------------------------------------------
# the cases: name -> (program, inputs[, tolerances])
# ---------------------------------------------------------------------------------------------
RNG = np.random.default_rng(2024)


def _r(*shape, scale=1.0, shift=0.0):
    return RNG.standard_normal(shape) * scale + shift


def _u(*shape, lo=0.0, hi=1.0):
    return RNG.uniform(lo, hi, shape)


def _i(hi, *shape, lo=0):
    return RNG.integers(lo, hi, shape).astype(np.int64)


def _pm1(*shape):
    return NoGrad(np.where(RNG.random(shape) < 0.5, -1.0, 1.0))


def _weights(ctor):
    mod = ctor(torch)
    return {n: RNG.standard_normal(tuple(p.shape)) * 0.4 for n, p in mod.named_parameters()}


def _module_case(ctor, call):
    """A program that builds ctor's module with fixed weights and calls call(m, mod, *inputs)."""
    w = _weights(ctor)

    def program(m, *inputs):
        mod = _module(m, ctor, w)
        return WithParams(call(m, mod, *inputs), _params(mod))

    return program


CASES: dict[str, tuple] = {}


def case(name, fn, arrays, **tol):
    assert name not in CASES, name
    CASES[name] = (fn, arrays, tol)


# --- convolutions -----------------------------------------------------------------------------
case(
    "conv1d_groups_dilation_stride",
    lambda m, x, w, b: F(m).conv1d(x, w, b, stride=2, padding=2, dilation=2, groups=2),
    [_r(2, 4, 9), _r(6, 2, 3), _r(6)],
)
case(
    "conv1d_same_noncontiguous",
    lambda m, x, w: F(m).conv1d(x, w, padding="same", dilation=2),
    [Transposed(_r(2, 3, 8)), _r(4, 3, 3)],
)
case(
    "conv3d_groups_dilation",
    lambda m, x, w, b: F(m).conv3d(
        x, w, b, stride=(2, 1, 1), padding=(1, 0, 1), dilation=(1, 2, 1), groups=2
    ),
    [_r(1, 2, 5, 6, 5), _r(4, 1, 3, 2, 3), _r(4)],
)
case(
    "conv_transpose1d",
    lambda m, x, w, b: F(m).conv_transpose1d(
        x, w, b, stride=2, padding=1, output_padding=1, groups=2, dilation=2
    ),
    [_r(2, 4, 6), _r(4, 3, 3), _r(6)],
)
case(
    "conv_transpose2d",
    lambda m, x, w, b: F(m).conv_transpose2d(
        x, w, b, stride=(2, 1), padding=(1, 0), output_padding=(1, 0), groups=2, dilation=(1, 2)
    ),
    [_r(1, 4, 4, 5), _r(4, 2, 3, 2), _r(4)],
)
case(
    "conv_transpose3d",
    lambda m, x, w: F(m).conv_transpose3d(x, w, stride=2, padding=1),
    [_r(1, 2, 3, 3, 4), _r(2, 3, 2, 2, 3)],
)
for _mode in ("zeros", "reflect", "replicate", "circular"):
    case(
        f"Conv2d_padding_mode_{_mode}",
        _module_case(
            lambda m, mode=_mode: m.nn.Conv2d(3, 4, 3, padding=(1, 2), padding_mode=mode),
            lambda m, mod, x: mod(x),
        ),
        [_r(2, 3, 5, 6)],
    )

# --- pooling ----------------------------------------------------------------------------------
case(
    "max_pool1d_indices_unpool1d",
    lambda m, x: (lambda y, i: [y, i, F(m).max_unpool1d(y, i, 2, stride=2, output_size=(11,))])(
        *F(m).max_pool1d(x, 2, 2, return_indices=True)
    ),
    [_r(2, 3, 11)],
)
case(
    "max_pool1d_dilation_ceil",
    lambda m, x: F(m).max_pool1d(x, 3, 2, padding=1, dilation=2, ceil_mode=True),
    [_r(2, 3, 11)],
)
case(
    "max_pool2d_indices_unpool2d",
    lambda m, x: (lambda y, i: [y, i, F(m).max_unpool2d(y, i, 2, 2, output_size=(7, 7))])(
        *F(m).max_pool2d(x, 2, 2, return_indices=True)
    ),
    [_r(2, 3, 7, 7)],
)
case(
    "max_pool3d_indices_unpool3d",
    lambda m, x: (
        lambda y, i: [y, i, F(m).max_unpool3d(y, i, (2, 3, 2), (2, 2, 1), output_size=(4, 6, 5))]
    )(*F(m).max_pool3d(x, (2, 3, 2), (2, 2, 1), return_indices=True)),
    [_r(1, 2, 4, 6, 5)],
)
case(
    "max_pool3d_padding_ceil",
    lambda m, x: F(m).max_pool3d(x, 2, 2, padding=1, ceil_mode=True),
    [_r(1, 2, 5, 6, 5)],
)
case(
    "avg_pool1d",
    lambda m, x: [
        F(m).avg_pool1d(x, 3, 2, padding=1, count_include_pad=False, ceil_mode=True),
        F(m).avg_pool1d(x, 3, 2, padding=1),
    ],
    [_r(2, 3, 10)],
)
case(
    "avg_pool3d",
    lambda m, x: [
        F(m).avg_pool3d(x, 2, 2, padding=1, divisor_override=3),
        F(m).avg_pool3d(x, (2, 3, 2), 1, padding=1, count_include_pad=False),
    ],
    [_r(1, 2, 5, 6, 4)],
)
case(
    "adaptive_pool1d",
    lambda m, x: [
        F(m).adaptive_avg_pool1d(x, 4),
        *F(m).adaptive_max_pool1d(x, 4, return_indices=True),
    ],
    [_r(2, 3, 10)],
)
case(
    "adaptive_pool3d",
    lambda m, x: [
        F(m).adaptive_avg_pool3d(x, (2, 3, 4)),
        *F(m).adaptive_max_pool3d(x, (3, 2, 4), return_indices=True),
    ],
    [_r(1, 2, 5, 7, 6)],
)
case(
    "lp_pool",
    lambda m, x1, x2, x3: [
        F(m).lp_pool1d(x1, 2, 3, 2),
        F(m).lp_pool2d(x2, 3, (2, 3)),
        F(m).lp_pool3d(x3, 2, 2, ceil_mode=True),
    ],
    [_u(2, 3, 9, lo=0.5, hi=2), _u(1, 2, 5, 6, lo=0.5, hi=2), _u(1, 2, 5, 4, 5, lo=0.5, hi=2)],
)
case(
    "fractional_max_pool2d",
    lambda m, x, s: F(m).fractional_max_pool2d(
        x, 2, output_size=(4, 5), return_indices=True, _random_samples=s
    ),
    [_r(2, 2, 7, 8), NoGrad(_u(2, 2, 2))],
)
case(
    "fractional_max_pool3d",
    lambda m, x, s: F(m).fractional_max_pool3d(
        x, 2, output_ratio=0.5, return_indices=True, _random_samples=s
    ),
    [_r(1, 2, 6, 6, 8), NoGrad(_u(1, 2, 3))],
)
case(
    "pooling_unbatched",
    lambda m, x2, x1, x3: [
        F(m).max_pool2d(x2, 2, 1, padding=1),
        F(m).avg_pool2d(x2, 3, 2, padding=1),
        F(m).adaptive_avg_pool2d(x2, (2, 3)),
        F(m).adaptive_max_pool2d(x2, 3),
        F(m).avg_pool1d(x1, 3),
        F(m).max_pool1d(x1, 2),
        F(m).max_pool3d(x3, 2),
        F(m).avg_pool3d(x3, 2),
    ],
    [_r(3, 6, 7), _r(3, 10), _r(2, 4, 5, 4)],
)

# --- resampling ---------------------------------------------------------------------------------
case(
    "interpolate_nearest",
    lambda m, x1, x2, x3: [
        F(m).interpolate(x1, size=8),
        F(m).interpolate(x1, scale_factor=1.7, mode="nearest-exact"),
        F(m).interpolate(x2, scale_factor=(1.5, 2.0), mode="nearest"),
        F(m).interpolate(x2, size=(3, 7), mode="nearest-exact"),
        F(m).interpolate(x3, size=(4, 5, 2)),
        F(m).upsample(x2, scale_factor=2),
    ],
    [_r(2, 3, 5), _r(1, 2, 4, 5), _r(1, 2, 3, 4, 3)],
)
for _ac in (False, True):
    case(
        f"interpolate_linear_family_align_corners_{_ac}",
        lambda m, x1, x2, x3, ac=_ac: [
            F(m).interpolate(x1, size=9, mode="linear", align_corners=ac),
            F(m).interpolate(x2, size=(7, 3), mode="bilinear", align_corners=ac),
            F(m).interpolate(x2, scale_factor=2, mode="bicubic", align_corners=ac),
            F(m).interpolate(x3, size=(5, 6, 2), mode="trilinear", align_corners=ac),
        ],
        [_r(2, 3, 5), Transposed(_r(1, 2, 4, 5)), _r(1, 2, 3, 4, 3)],
    )
case(
    "upsample_bilinear_nearest",
    lambda m, x: [F(m).upsample_bilinear(x, scale_factor=2), F(m).upsample_nearest(x, size=(5, 3))],
    [_r(1, 2, 3, 4)],
)
for _gmode in ("bilinear", "nearest", "bicubic"):
    case(
        f"grid_sample_4d_{_gmode}",
        lambda m, x, g, mode=_gmode: [
            F(m).grid_sample(x, g, mode=mode, padding_mode=pm, align_corners=ac)
            for pm in ("zeros", "border", "reflection")
            for ac in (False, True)
        ],
        [_r(1, 2, 5, 6), _u(1, 4, 3, 2, lo=-1.2, hi=1.2)],
    )
for _gmode in ("bilinear", "nearest"):
    case(
        f"grid_sample_5d_{_gmode}",
        lambda m, x, g, mode=_gmode: [
            F(m).grid_sample(x, g, mode=mode, padding_mode=pm, align_corners=ac)
            for pm, ac in (("zeros", False), ("border", True), ("reflection", False))
        ],
        [_r(1, 2, 3, 4, 5), _u(1, 2, 3, 2, 3, lo=-1.2, hi=1.2)],
    )
case(
    "affine_grid",
    lambda m, t2, t3: [
        F(m).affine_grid(t2, (2, 3, 4, 5), align_corners=False),
        F(m).affine_grid(t2, (2, 3, 4, 5), align_corners=True),
        F(m).affine_grid(t3, (1, 2, 3, 4, 5), align_corners=False),
    ],
    [_r(2, 2, 3), _r(1, 3, 4)],
)
case(
    "pixel_shuffle_unshuffle",
    lambda m, a, b: [F(m).pixel_shuffle(a, 2), F(m).pixel_unshuffle(b, 2)],
    [_r(1, 8, 2, 3), Transposed(_r(1, 2, 6, 4))],
)
case(
    "pad_modes",
    lambda m, x4, x1, x5: [
        F(m).pad(x4, (1, 2, 0, 1), value=0.5),
        F(m).pad(x4, (-1, 2, 1, -1)),
        F(m).pad(x4, (2, 1, 1, 3), mode="reflect"),
        F(m).pad(x4, (1, 2, 2, 1), mode="circular"),
        F(m).pad(x4, (3, 0, 0, 2), mode="replicate"),
        F(m).pad(x1, (2, 3), mode="reflect"),
        F(m).pad(x1, (1, 4), mode="circular"),
        F(m).pad(x5, (1, 1, 2, 0, 1, 1), mode="replicate"),
        F(m).pad(x5, (1, 1, 2, 0, 1, 1), mode="reflect"),
        F(m).pad(x5, (1, 0, 0, 1, 1, 1), mode="circular"),
    ],
    [_r(2, 2, 4, 5), _r(2, 3, 6), _r(1, 2, 3, 4, 5)],
)
case(
    "fold_unfold",
    lambda m, x, c: [
        F(m).unfold(x, (2, 3), padding=1, stride=(2, 1), dilation=(1, 1)),
        F(m).unfold(x, 2, dilation=2),
        F(m).fold(c, (4, 5), 2),
    ],
    [_r(1, 2, 5, 6), _r(1, 8, 12)],
)

# --- bilinear, distances, similarity -----------------------------------------------------------
case(
    "bilinear_functional",
    lambda m, a, b, w, bias: [F(m).bilinear(a, b, w, bias), F(m).bilinear(a, b, w)],
    [_r(4, 3), _r(4, 5), _r(6, 3, 5), _r(6)],
)
case(
    "Bilinear_module",
    _module_case(lambda m: m.nn.Bilinear(3, 5, 2), lambda m, mod, a, b: mod(a, b)),
    [_r(2, 4, 3), _r(2, 4, 5)],
)
case(
    "pdist",
    lambda m, x: [F(m).pdist(x), F(m).pdist(x, p=1.0), F(m).pdist(x, p=3.0)],
    [_r(5, 4)],
)
case(
    "cdist_compute_modes",
    lambda m, a, b: [
        m.cdist(a, b),
        m.cdist(a, b, compute_mode="use_mm_for_euclid_dist"),
        m.cdist(a, b, compute_mode="donot_use_mm_for_euclid_dist"),
        m.cdist(a, b, p=1.0),
        m.cdist(a[0], b[1], p=3.0),
    ],
    [_r(2, 4, 3), _r(2, 5, 3)],
)
case(
    "cosine_pairwise_normalize",
    lambda m, a, b: [
        F(m).cosine_similarity(a, b),
        F(m).cosine_similarity(a, b[:1], dim=1, eps=1e-6),
        F(m).pairwise_distance(a, b),
        F(m).pairwise_distance(a, b, p=1.0, keepdim=True),
        F(m).normalize(a),
        F(m).normalize(a, p=1.0, dim=0),
    ],
    [_r(4, 5), Transposed(_r(4, 5))],
)


def _normalize_out(m, a):
    out = m.empty((4, 5), dtype=m.float64, device=_DEV[0] if m is engine else "cpu")
    r = F(m).normalize(a.detach(), dim=1, out=out)
    return [r, out]


case("normalize_out", _normalize_out, [NoGrad(_r(4, 5))])

# --- embedding_bag ----------------------------------------------------------------------------
for _ebmode in ("sum", "mean", "max"):
    case(
        f"embedding_bag_{_ebmode}",
        lambda m, w, idx2, idx1, off, last, mode=_ebmode: [
            F(m).embedding_bag(idx2, w, mode=mode),
            F(m).embedding_bag(idx1, w, off, mode=mode),
            F(m).embedding_bag(idx1, w, last, mode=mode, include_last_offset=True),
            F(m).embedding_bag(idx2, w, mode=mode, padding_idx=3),
        ],
        [
            _r(10, 4),
            _i(10, 3, 4),
            _i(10, 8),
            np.array([0, 3, 3, 6], dtype=np.int64),
            # the last offset is the number of indices (torch 2.13 differs by dtype otherwise)
            np.array([0, 3, 3, 8], dtype=np.int64),
        ],
    )
case(
    "embedding_bag_per_sample_weights",
    lambda m, w, idx, off, psw: F(m).embedding_bag(idx, w, off, mode="sum", per_sample_weights=psw),
    [_r(10, 4), _i(10, 8), np.array([0, 2, 5], dtype=np.int64), _r(8)],
)

# --- normalization ----------------------------------------------------------------------------


def _instance_norm(m, x, w, b, rm, rv):
    y = F(m).instance_norm(x, rm, rv, w, b, use_input_stats=True, momentum=0.2)
    return [y, rm, rv, F(m).instance_norm(x, eps=1e-3)]


case(
    "instance_norm",
    _instance_norm,
    [_r(2, 3, 5, 4), _r(3), _r(3), NoGrad(_r(3)), NoGrad(_u(3, lo=0.5, hi=2))],
)
case(
    "group_norm",
    lambda m, x, w, b, x4: [F(m).group_norm(x, 3, w, b), F(m).group_norm(x4, 2, eps=1e-3)],
    [_r(2, 6, 5), _r(6), _r(6), _r(2, 4, 3, 2)],
)


def _batch_norm(m, x2, x3, w, b, rm, rv, rm3, rv3):
    return [
        F(m).batch_norm(x2, rm, rv, w, b, training=True, momentum=0.3),
        rm,
        rv,
        F(m).batch_norm(x3, rm3, rv3, w, b, training=False),
        F(m).batch_norm(x3, None, None, training=True),
    ]


case(
    "batch_norm_NC_NCL",
    _batch_norm,
    [
        _r(6, 4),
        _r(3, 4, 5),
        _r(4),
        _r(4),
        NoGrad(_r(4)),
        NoGrad(_u(4, lo=0.5, hi=2)),
        NoGrad(_r(4)),
        NoGrad(_u(4, lo=0.5, hi=2)),
    ],
)
case(
    "local_response_norm",
    lambda m, x4, x3: [F(m).local_response_norm(x4, 3), F(m).local_response_norm(x3, 2, k=2.0)],
    [_r(2, 5, 4, 3), _r(2, 5, 6)],
)
case(
    "rms_norm",
    lambda m, x, w, w2: [
        F(m).rms_norm(x, (5,), w),
        F(m).rms_norm(x, (4, 5), w2, eps=1e-3),
        F(m).rms_norm(x, (5,)),
    ],
    [_r(3, 4, 5), _r(5), _r(4, 5)],
)

# --- pointwise losses -------------------------------------------------------------------------
_RED = ("mean", "sum", "none")
case(
    "l1_smooth_l1_huber",
    lambda m, x, t: (
        [F(m).l1_loss(x, t, reduction=r) for r in _RED]
        + [F(m).smooth_l1_loss(x, t, reduction=r, beta=0.5) for r in _RED]
        + [F(m).smooth_l1_loss(x, t, beta=0.0), F(m).huber_loss(x, t, delta=0.7)]
        + [F(m).huber_loss(x, t, reduction="none")]
    ),
    [_r(3, 4), _r(3, 4)],
)
case(
    "kl_div",
    lambda m, x, t, lt: [
        F(m).kl_div(x.log_softmax(1), t.softmax(1), reduction="batchmean"),
        F(m).kl_div(x.log_softmax(1), lt.log_softmax(1), reduction="none", log_target=True),
        F(m).kl_div(x.log_softmax(1), t.softmax(1), reduction="sum"),
    ],
    [_r(3, 4), _r(3, 4), _r(3, 4)],
)
case(
    "poisson_nll",
    lambda m, x, t, p: [
        F(m).poisson_nll_loss(x, t),
        F(m).poisson_nll_loss(p, t, log_input=False, full=True, reduction="none"),
        F(m).poisson_nll_loss(x, t, full=True, reduction="sum"),
    ],
    [_r(3, 4), NoGrad(_u(3, 4, hi=4).round()), _u(3, 4, lo=0.2, hi=3)],
)
case(
    "gaussian_nll",
    lambda m, x, t, v, v1: [
        F(m).gaussian_nll_loss(x, t, v),
        F(m).gaussian_nll_loss(x, t, v1, full=True, reduction="sum"),
        F(m).gaussian_nll_loss(x, t, v, eps=0.3, reduction="none"),
    ],
    [_r(3, 4), _r(3, 4), _u(3, 4, lo=0.1, hi=2), _u(3, 1, lo=0.1, hi=2)],
)
case(
    "binary_cross_entropy",
    lambda m, p, t, w: [
        F(m).binary_cross_entropy(p, t),
        F(m).binary_cross_entropy(p, t, weight=w, reduction="none"),
    ],
    [_u(3, 4, lo=0.05, hi=0.95), _u(3, 4), NoGrad(_u(4))],
)
case(
    "bce_with_logits_pos_weight",
    lambda m, x, t, w, pw: [
        F(m).binary_cross_entropy_with_logits(x, t),
        F(m).binary_cross_entropy_with_logits(x, t, weight=w, pos_weight=pw, reduction="sum"),
        F(m).binary_cross_entropy_with_logits(x, t, pos_weight=pw, reduction="none"),
    ],
    [_r(3, 4, scale=3), _u(3, 4), NoGrad(_u(4)), NoGrad(_u(4, lo=0.5, hi=3))],
)
case(
    "soft_margin_multilabel_soft_margin",
    lambda m, x, y, y01, w: [
        F(m).soft_margin_loss(x, y),
        F(m).soft_margin_loss(x, y, reduction="none"),
        F(m).multilabel_soft_margin_loss(x, y01),
        F(m).multilabel_soft_margin_loss(x, y01, weight=w, reduction="none"),
    ],
    [_r(3, 4), _pm1(3, 4), NoGrad(_i(2, 3, 4).astype(np.float64)), NoGrad(_u(4))],
)

# --- margin losses ----------------------------------------------------------------------------
case(
    "margin_ranking_hinge_cosine_embedding",
    lambda m, a, b, y, x, yh, c1, c2, yc: [
        F(m).margin_ranking_loss(a, b, y, margin=0.3),
        F(m).margin_ranking_loss(a, b, y, reduction="none"),
        F(m).hinge_embedding_loss(x, yh, margin=1.0),
        F(m).hinge_embedding_loss(x, yh, margin=0.5, reduction="none"),
        F(m).cosine_embedding_loss(c1, c2, yc, margin=0.2),
        F(m).cosine_embedding_loss(c1, c2, yc, reduction="none"),
    ],
    [_r(6), _r(6), _pm1(6), _r(3, 4), _pm1(3, 4), _r(4, 5), _r(4, 5), _pm1(4)],
)
case(
    "multi_margin",
    lambda m, x, y, w: [
        F(m).multi_margin_loss(x, y),
        F(m).multi_margin_loss(x, y, p=2, margin=0.7, weight=w, reduction="none"),
        F(m).multi_margin_loss(x, y, weight=w, reduction="sum"),
    ],
    [_r(4, 5), _i(5, 4), NoGrad(_u(5, lo=0.5, hi=2))],
)
case(
    "multilabel_margin",
    lambda m, x, y: [
        F(m).multilabel_margin_loss(x, y),
        F(m).multilabel_margin_loss(x, y, reduction="none"),
    ],
    [_r(3, 5), np.array([[3, 0, -1, 1, 2], [1, 2, 4, 0, 3], [-1, 0, 0, 0, 0]], dtype=np.int64)],
)
case(
    "triplet_margin",
    lambda m, a, p, n: [
        F(m).triplet_margin_loss(a, p, n, margin=0.5),
        F(m).triplet_margin_loss(a, p, n, p=1.0, swap=True, reduction="none"),
        F(m).triplet_margin_with_distance_loss(a, p, n),
        F(m).triplet_margin_with_distance_loss(
            a,
            p,
            n,
            distance_function=lambda u, v: 1.0 - F(m).cosine_similarity(u, v),
            margin=0.4,
            swap=True,
            reduction="sum",
        ),
    ],
    [_r(4, 5), _r(4, 5), _r(4, 5)],
)

# --- ctc and nll ------------------------------------------------------------------------------
_CTC_T, _CTC_N, _CTC_C = 6, 3, 4
for _red in ("mean", "sum"):
    case(
        f"ctc_loss_{_red}",
        lambda m, x, tg, il, tl, red=_red: [
            F(m).ctc_loss(x[:, :2].log_softmax(2), tg[:2], il[:2], tl[:2], reduction=red),
            F(m).ctc_loss(x.log_softmax(2), tg, il, tl, reduction=red, zero_infinity=True),
            F(m).ctc_loss(
                x[:, :2].log_softmax(2),
                m.cat([tg[0, :3], tg[1, :2]]),
                il[:2],
                tl[:2],
                reduction="none",
            ),
        ],
        [
            _r(_CTC_T, _CTC_N, _CTC_C),
            _i(_CTC_C, _CTC_N, 5, lo=1),
            np.array([6, 5, 2], dtype=np.int64),
            np.array([3, 2, 4], dtype=np.int64),  # the last is impossible: 4 labels in 2 steps
        ],
    )
case(
    "nll_loss_2d_4d",
    lambda m, x2, t2, x4, t4, w: [
        F(m).nll_loss(x2.log_softmax(1), t2),
        F(m).nll_loss(x2.log_softmax(1), t2, weight=w, ignore_index=2),
        F(m).nll_loss(x2.log_softmax(1), t2, ignore_index=1, reduction="none"),
        F(m).nll_loss(x4.log_softmax(1), t4, weight=w, ignore_index=1),
        F(m).nll_loss(x4.log_softmax(1), t4, reduction="sum"),
        F(m).nll_loss(x4.log_softmax(1), t4, weight=w, reduction="none"),
    ],
    [_r(5, 4), _i(4, 5), _r(2, 4, 2, 3), _i(4, 2, 2, 3), NoGrad(_u(4, lo=0.5, hi=2))],
)

# --- activations ------------------------------------------------------------------------------
_ACT = {
    "hardtanh": lambda m, x: F(m).hardtanh(x, -0.5, 0.7),
    "hardtanh_inplace": lambda m, x: F(m).hardtanh(x * 1.0, -0.5, 0.7, inplace=True),
    "hardtanh_": lambda m, x: F(m).hardtanh_(x * 1.0),
    "relu6": lambda m, x: F(m).relu6(x * 3.0),
    "relu6_inplace": lambda m, x: F(m).relu6(x * 3.0, inplace=True),
    "elu": lambda m, x: F(m).elu(x, alpha=0.7),
    "elu_": lambda m, x: F(m).elu_(x * 1.0, alpha=1.3),
    "selu": lambda m, x: F(m).selu(x),
    "selu_inplace": lambda m, x: F(m).selu(x * 1.0, inplace=True),
    # alpha exact in float32: torch differentiates celu with 1 / alpha.toFloat()
    "celu": lambda m, x: F(m).celu(x, alpha=1.5),
    "glu": lambda m, x: [F(m).glu(x, dim=0), F(m).glu(x[:, :4])],
    "softsign": lambda m, x: F(m).softsign(x),
    "tanhshrink": lambda m, x: F(m).tanhshrink(x),
    "softshrink": lambda m, x: F(m).softshrink(x, 0.4),
    "hardshrink": lambda m, x: F(m).hardshrink(x, 0.4),
    "threshold": lambda m, x: F(m).threshold(x, 0.1, -2.0),
    "threshold_": lambda m, x: F(m).threshold_(x * 1.0, 0.1, 20.0),
    "logsigmoid": lambda m, x: F(m).logsigmoid(x),
    "mish": lambda m, x: F(m).mish(x),
    "silu": lambda m, x: F(m).silu(x),
    "silu_inplace": lambda m, x: F(m).silu(x * 1.0, inplace=True),
    "rrelu_eval": lambda m, x: F(m).rrelu(x, 0.1, 0.3, training=False),
    "softmin": lambda m, x: [F(m).softmin(x, dim=1), F(m).softmin(x, dim=0)],
    "log_softmax": lambda m, x: [F(m).log_softmax(x, dim=0), F(m).log_softmax(x.t(), 1)],
}
for _name, _fn in _ACT.items():
    case(f"act_{_name}", _fn, [Transposed(_r(6, 4, scale=2.0))])
# torch's kernels take a float32 1/6 where they could divide by 6 (to 3e-8, relative): cpu's
# and cuda's hardsigmoid backward, cuda's hardsigmoid and hardswish forward (the engine on cuda
# as torch.cuda; the reference here is torch's cpu)
case(
    "act_hardsigmoid",
    lambda m, x: F(m).hardsigmoid(x * 3.0),
    [Transposed(_r(6, 4, scale=2.0))],
    rtol=1e-7,
)
for _name, _inplace in (("hardswish", False), ("hardswish_inplace", True)):
    case(
        f"act_{_name}",
        lambda m, x, _inplace=_inplace: F(m).hardswish(x * 3.0, inplace=_inplace),
        [Transposed(_r(6, 4, scale=2.0))],
        rtol=1e-7,
    )
case(
    "act_prelu",
    lambda m, x, w, x3, w1: [F(m).prelu(x, w), F(m).prelu(x3, w1)],
    [_r(2, 3, 4), _r(3), _r(4, 5), _r(1)],
)

# --- recurrent modules, attention ---------------------------------------------------------------
_I, _H = 3, 4
case(
    "RNN_tanh_bidirectional",
    _module_case(lambda m: m.nn.RNN(_I, _H, bidirectional=True), lambda m, mod, x: mod(x)),
    [_r(5, 2, _I)],
)
case(
    "RNN_relu_batch_first_h0",
    _module_case(
        lambda m: m.nn.RNN(_I, _H, nonlinearity="relu", batch_first=True),
        lambda m, mod, x, h0: mod(x, h0),
    ),
    [_r(2, 5, _I), _r(1, 2, _H)],
)
case(
    "LSTM_bidirectional_batch_first",
    _module_case(
        lambda m: m.nn.LSTM(_I, _H, bidirectional=True, batch_first=True),
        lambda m, mod, x, h0, c0: (lambda o, hc: [o, *hc])(*mod(x, (h0, c0))),
    ),
    [_r(2, 5, _I), _r(2, 2, _H), _r(2, 2, _H)],
)
case(
    "LSTM_one_layer",
    _module_case(lambda m: m.nn.LSTM(_I, _H), lambda m, mod, x: (lambda o, hc: [o, *hc])(*mod(x))),
    [_r(5, 2, _I)],
)
case(
    "GRU_bidirectional",
    _module_case(lambda m: m.nn.GRU(_I, _H, bidirectional=True), lambda m, mod, x: mod(x)),
    [_r(5, 2, _I)],
)
case(
    "GRU_batch_first_h0",
    _module_case(lambda m: m.nn.GRU(_I, _H, batch_first=True), lambda m, mod, x, h: mod(x, h)),
    [_r(2, 5, _I), _r(1, 2, _H)],
)

_MASK_BOOL = np.triu(np.ones((3, 4), dtype=bool), k=2)
_KPM = np.array([[False, False, False, True], [False, False, False, False]])
case(
    "MultiheadAttention_masks",
    _module_case(
        lambda m: m.nn.MultiheadAttention(6, 2, batch_first=True),
        lambda m, mod, q, k, v: [
            *mod(q, k, v, attn_mask=T(m, _MASK_BOOL), key_padding_mask=T(m, _KPM)),
            *mod(q, k, v, need_weights=True, average_attn_weights=False),
            mod(q, k, v, attn_mask=T(m, np.where(_MASK_BOOL, -1.5, 0.25)), need_weights=False)[0],
        ],
    ),
    [_r(2, 3, 6), _r(2, 4, 6), _r(2, 4, 6)],
)
case(
    "MultiheadAttention_kdim_vdim_seq_first",
    _module_case(
        lambda m: m.nn.MultiheadAttention(4, 2, kdim=3, vdim=5, bias=False),
        lambda m, mod, q, k, v: list(mod(q, k, v)),
    ),
    [_r(3, 2, 4), _r(4, 2, 3), _r(4, 2, 5)],
)
case(
    "scaled_dot_product_attention",
    lambda m, q, k, v, fm: [
        F(m).scaled_dot_product_attention(q, k, v),
        F(m).scaled_dot_product_attention(q, k, v, attn_mask=T(m, ~_MASK_BOOL)),
        F(m).scaled_dot_product_attention(q, k, v, attn_mask=fm, scale=0.3),
        F(m).scaled_dot_product_attention(q, k[:, :, :3], v[:, :, :3], is_causal=True),
        F(m).scaled_dot_product_attention(q, k, v, dropout_p=0.0),
    ],
    [_r(2, 2, 3, 4), Transposed(_r(2, 2, 4, 4)), _r(2, 2, 4, 4), _r(3, 4)],
)

# --- nn.utils weight norm ---------------------------------------------------------------------
case(
    "weight_norm_hook",
    _module_case(
        lambda m: m.nn.utils.weight_norm(m.nn.Linear(4, 3)), lambda m, mod, x: [mod(x), mod(x)]
    ),
    [_r(5, 4)],
)
case(
    "weight_norm_hook_conv_last_dim",
    _module_case(
        lambda m: m.nn.utils.weight_norm(m.nn.Conv1d(2, 3, 2), dim=2),
        lambda m, mod, x: mod(x),
    ),
    [_r(2, 2, 5)],
)
case(
    "parametrizations_weight_norm",
    _module_case(
        lambda m: m.nn.utils.parametrizations.weight_norm(m.nn.Linear(4, 3)),
        lambda m, mod, x: [mod(x), mod.weight],
    ),
    [_r(5, 4)],
)
case(
    "parametrizations_weight_norm_conv",
    _module_case(
        lambda m: m.nn.utils.parametrizations.weight_norm(m.nn.Conv2d(2, 3, 2)),
        lambda m, mod, x: mod(x),
    ),
    [_r(1, 2, 4, 4)],
)

# cases where a GPU's kernels are inherently less accurate go here with their reasons
XFAIL: dict[str, str] = {}


def _param(name):
    marks = [pytest.mark.xfail(strict=True, reason=XFAIL[name])] if name in XFAIL else []
    return pytest.param(name, marks=marks, id=name)


@pytest.mark.parametrize("device", DATA_DEVICES)
@pytest.mark.parametrize("name", [_param(n) for n in CASES])
def test_nn_program_on_device_matches_torch(name, device):
    """Given the same inputs, the engine's program on the device gives torch's outputs and
    gradients."""
    fn, arrays, tol = CASES[name]
    _check(fn, arrays, device, **tol)


# --- clip_grad on device parameters -------------------------------------------------------------
_CLIP_P = [_r(3, 4), _r(5)]
_CLIP_G = [_r(3, 4), _r(5)]


@pytest.mark.parametrize("device", DATA_DEVICES)
@pytest.mark.parametrize(
    "clip",
    [
        ("norm", 0.5, 2.0),
        ("norm", 0.5, float("inf")),
        ("norm", 0.7, 1.0),
        ("norm", 100.0, 2.0),
        ("value", 0.3, None),
    ],
    ids=str,
)
def test_clip_grad_on_device_parameters_matches_torch(clip, device):
    """clip_grad_norm_ / clip_grad_value_ rescale gradients held on the device as torch's do."""
    kind, limit, norm_type = clip
    results = {}
    for m, dev in ((engine, device), (torch, "cpu")):
        params = [_leaf(m, p, dev, True) for p in _CLIP_P]
        for p, g in zip(params, _CLIP_G, strict=True):
            (p * (_leaf(m, g, dev, False))).sum().backward()
        if kind == "norm":
            total = _np(m.nn.utils.clip_grad_norm_(params, limit, norm_type))
        else:
            total = m.nn.utils.clip_grad_value_(params, limit)
        results[m.__name__] = (total, [_np(p.grad) for p in params])
    (et, eg), (tt, tg) = results["engine"], results["torch"]
    if kind == "norm":
        np.testing.assert_allclose(et, tt, rtol=RTOL, atol=ATOL)
    else:
        assert et is None and tt is None
    for a, b in zip(eg, tg, strict=True):
        np.testing.assert_allclose(a, b, rtol=RTOL, atol=ATOL)
