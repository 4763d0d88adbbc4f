"""engine.nn: gradients of the nn primitives, and the Module API.

Gradients: every differentiable nn op (engine/ops/nn/*.py and the composites in
engine.nn.functional) against float64 central differences, and against PyTorch's gradients
when it is installed, over several shapes, broadcasting and non-contiguous inputs. Each case is
one program written against a module `m` (engine or torch), so the same code runs on both.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import engine
from engine import nn
from engine.allocator.events import MemoryObserver
from engine.allocator.tracked import get_allocator
from tests.conftest import requires_cuda

EPS = 1e-6


# ---------------------------------------------------------------------------------------------
# gradient checking
# ---------------------------------------------------------------------------------------------
def _sample(shape, domain, seed):
    rng = np.random.default_rng(seed)
    if domain == "spread":  # distinct values far apart: no ties for max pooling
        return rng.permutation(np.arange(math.prod(shape))).reshape(shape) * 0.37 - 1.1
    x = rng.standard_normal(shape)
    if domain == "positive":
        x = np.abs(x) + 0.5
    return x


def _leaf(m, arr, layout):
    """A float64 input that requires grad; 'transposed' hands the op a non-contiguous view."""
    if layout == "transposed" and arr.ndim >= 2:
        base = m.tensor(
            np.ascontiguousarray(arr.swapaxes(-1, -2)), dtype=m.float64, requires_grad=True
        )
        return base, base.transpose(-1, -2)
    t = m.tensor(arr, dtype=m.float64, requires_grad=True)
    return t, t


def _grad_of(base, arr, layout):
    g = base.grad
    if g is None:
        return np.zeros(arr.shape)
    g = g.detach().cpu().numpy() if hasattr(g, "detach") else g.numpy()
    return g.swapaxes(-1, -2) if layout == "transposed" and arr.ndim >= 2 else g


def _loss(m, y, w):
    """sum(y * w): a scalar that weighs every output element differently."""
    return (y * m.tensor(w, dtype=y.dtype)).sum()


def _run(m, fn, arrays, layout):
    pairs = [_leaf(m, a, layout) for a in arrays]
    y = fn(m, *(v for _, v in pairs))
    w = _sample(tuple(y.shape), "normal", 99)
    loss = _loss(m, y, w)
    loss.backward()
    out = y.detach().cpu().numpy()
    return out, [_grad_of(b, a, layout) for (b, _), a in zip(pairs, arrays, strict=True)], w


def gradcheck(fn, arrays, layout="contiguous", torch=None, rtol=1e-6, atol=1e-7):
    """Engine grads of fn(m, *inputs) vs central differences, and vs PyTorch's when given."""
    out, analytic, w = _run(engine, fn, arrays, layout)
    with engine.no_grad():
        values = [engine.tensor(a, dtype=engine.float64) for a in arrays]
        for i, v in enumerate(values):
            arr = v.numpy()
            num = np.zeros(arr.shape)
            for idx in np.ndindex(arr.shape):
                orig = arr[idx]
                arr[idx] = orig + EPS
                fp = _loss(engine, fn(engine, *values), w).item()
                arr[idx] = orig - EPS
                fm = _loss(engine, fn(engine, *values), w).item()
                arr[idx] = orig
                num[idx] = (fp - fm) / (2 * EPS)
            np.testing.assert_allclose(
                analytic[i],
                num,
                rtol=1e-4,
                atol=1e-5,
                err_msg=f"input {i}: analytic vs central differences",
            )
    if torch is not None:
        t_out, t_grads, _ = _run(torch, fn, arrays, layout)
        np.testing.assert_allclose(out, t_out, rtol=rtol, atol=atol, err_msg="forward vs torch")
        for i, (a, b) in enumerate(zip(analytic, t_grads, strict=True)):
            np.testing.assert_allclose(a, b, rtol=rtol, atol=atol, err_msg=f"grad {i} vs torch")


def F(m):
    return m.nn.functional


def _int(m, values):
    return m.tensor(np.asarray(values, dtype=np.int64))


def _float(m, values):
    return m.tensor(np.asarray(values, dtype=np.float64))


def _seeded_dropout(m, x, p=0.3, inplace=False):
    # the same mask on every evaluation, so central differences see one function
    m.manual_seed(7)
    return F(m).dropout(x * 1.0 if inplace else x, p, training=True, inplace=inplace)


# name: (program, input shapes, domain, compare with torch)
def _const(m, values):
    """A float64 constant (no gradient) on the default device."""
    return m.tensor(values, dtype=m.float64)


CASES = {
    "linear": (lambda m, x, w, b: F(m).linear(x, w, b), [(4, 5), (3, 5), (3,)], "normal", True),
    "linear_3d_no_bias": (lambda m, x, w: F(m).linear(x, w), [(2, 3, 5), (4, 5)], "normal", True),
    "linear_1d": (lambda m, x, w, b: F(m).linear(x, w, b), [(5,), (3, 5), (3,)], "normal", True),
    "conv2d": (
        lambda m, x, w, b: F(m).conv2d(x, w, b, padding=1),
        [(2, 3, 6, 5), (4, 3, 3, 3), (4,)],
        "normal",
        True,
    ),
    "conv2d_strided_grouped": (
        lambda m, x, w: F(m).conv2d(x, w, None, stride=2, padding=(1, 0), groups=2),
        [(2, 4, 7, 6), (4, 2, 3, 2)],
        "normal",
        True,
    ),
    "conv2d_dilated_1x1_same": (
        lambda m, x, w1, w2: F(m).conv2d(F(m).conv2d(x, w1), w2, padding="same", dilation=2),
        [(1, 2, 6, 6), (3, 2, 1, 1), (2, 3, 2, 3)],
        "normal",
        True,
    ),
    "conv2d_stem_like": (
        lambda m, x, w, b: F(m).conv2d(x, w, b, stride=4, padding=2),
        [(1, 3, 15, 14), (2, 3, 5, 5), (2,)],
        "normal",
        True,
    ),
    "max_pool2d": (
        lambda m, x: F(m).max_pool2d(x, 3, 2, padding=1),
        [(2, 2, 7, 6)],
        "spread",
        True,
    ),
    "max_pool2d_ceil_dilated": (
        lambda m, x: F(m).max_pool2d(x, (3, 2), (2, 1), dilation=(1, 2), ceil_mode=True),
        [(1, 3, 8, 7)],
        "spread",
        True,
    ),
    "avg_pool2d": (
        lambda m, x: F(m).avg_pool2d(x, 3, 2, padding=1),
        [(2, 2, 7, 6)],
        "normal",
        True,
    ),
    "avg_pool2d_exclude_pad_ceil": (
        lambda m, x: F(m).avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False),
        [(1, 2, 6, 7)],
        "normal",
        True,
    ),
    "adaptive_avg_pool2d": (
        lambda m, x: F(m).adaptive_avg_pool2d(x, (3, 2)),
        [(2, 2, 7, 5)],
        "normal",
        True,
    ),
    "adaptive_avg_pool2d_global": (
        lambda m, x: F(m).adaptive_avg_pool2d(x, 1),
        [(2, 3, 4, 5)],
        "normal",
        True,
    ),
    "mse_loss": (lambda m, x, t: F(m).mse_loss(x, t), [(4, 5), (4, 5)], "normal", True),
    "mse_loss_sum_broadcast": (
        lambda m, x, t: F(m).mse_loss(x, t, reduction="sum"),
        [(4, 5), (5,)],
        "normal",
        False,
    ),
    "mse_loss_none": (
        lambda m, x, t: F(m).mse_loss(x, t, reduction="none"),
        [(3, 4), (3, 4)],
        "normal",
        True,
    ),
    "nll_loss": (lambda m, x: F(m).nll_loss(x, _int(m, [1, 0, 3, 1])), [(4, 5)], "normal", True),
    "nll_loss_weight_ignore": (
        lambda m, x: F(m).nll_loss(
            x, _int(m, [1, -100, 3, 4]), _float(m, [1, 2, 0.5, 1, 3]), reduction="mean"
        ),
        [(4, 5)],
        "normal",
        True,
    ),
    "nll_loss_2d_none": (
        lambda m, x: F(m).nll_loss(x, _int(m, [[0, 2, 1], [2, 2, 0]]), reduction="none"),
        [(2, 3, 3)],
        "normal",
        True,
    ),
    "cross_entropy": (
        lambda m, x: F(m).cross_entropy(x, _int(m, [2, 0, 1])),
        [(3, 4)],
        "normal",
        True,
    ),
    "cross_entropy_smoothing_weight": (
        lambda m, x: F(m).cross_entropy(
            x, _int(m, [2, 0, -100, 1]), _float(m, [1.0, 2.0, 0.5]), label_smoothing=0.2
        ),
        [(4, 3)],
        "normal",
        True,
    ),
    "cross_entropy_probabilities": (
        lambda m, x, t: F(m).cross_entropy(x, t.softmax(1)),
        [(3, 4), (3, 4)],
        "normal",
        True,
    ),
    "gather": (
        lambda m, x: x.gather(1, _int(m, [[0, 2], [1, 1], [3, 0]])),
        [(3, 4)],
        "normal",
        True,
    ),
    "index_select": (lambda m, x: x.index_select(0, _int(m, [2, 0, 2])), [(3, 4)], "normal", True),
    "embedding": (
        lambda m, w: F(m).embedding(_int(m, [[1, 3], [3, 0]]), w),
        [(4, 3)],
        "normal",
        True,
    ),
    "dropout": (_seeded_dropout, [(4, 6)], "normal", False),
    "dropout_inplace": (
        lambda m, x: _seeded_dropout(m, x, 0.5, inplace=True),
        [(3, 5)],
        "normal",
        False,
    ),
    "batch_norm_train": (
        lambda m, x, w, b: F(m).batch_norm(
            x, m.zeros(3, dtype=m.float64), m.ones(3, dtype=m.float64), w, b, training=True
        ),
        [(4, 3, 2, 3), (3,), (3,)],
        "normal",
        True,
    ),
    "batch_norm_eval": (
        lambda m, x, w, b: F(m).batch_norm(
            x, _float(m, [0.1, -0.2, 0.3]), _float(m, [1.5, 0.7, 2.0]), w, b, training=False
        ),
        [(4, 3, 2, 2), (3,), (3,)],
        "normal",
        True,
    ),
    "batch_norm_1d_no_affine": (
        lambda m, x: F(m).batch_norm(x, None, None, training=True),
        [(6, 4)],
        "normal",
        True,
    ),
    "layer_norm": (
        lambda m, x, w, b: F(m).layer_norm(x, (3, 4), w, b),
        [(2, 3, 4), (3, 4), (3, 4)],
        "normal",
        True,
    ),
    "layer_norm_no_affine": (lambda m, x: F(m).layer_norm(x, (5,)), [(4, 5)], "normal", True),
    "gelu": (lambda m, x: F(m).gelu(x), [(4, 5)], "normal", True),
    "gelu_tanh": (lambda m, x: F(m).gelu(x, approximate="tanh"), [(4, 5)], "normal", True),
    "addcmul_broadcast": (
        lambda m, a, b, c: a.addcmul(b, c, value=0.7),
        [(3, 4), (4,), (3, 1)],
        "normal",
        True,
    ),
    "addcdiv": (
        lambda m, a, b, c: m.addcdiv(a, b, c, value=-0.5),
        [(3, 4), (3, 4), (3, 4)],
        "positive",
        True,
    ),
    "lerp_scalar": (lambda m, a, b: a.lerp(b, 0.3), [(3, 4), (3, 4)], "normal", True),
    "lerp_tensor_weight": (
        lambda m, a, b, w: m.lerp(a, b, w),
        [(3, 4), (3, 4), (4,)],
        "normal",
        True,
    ),
    "conv_transpose2d": (
        lambda m, x, w, b: F(m).conv_transpose2d(x, w, b, stride=2, padding=1, output_padding=1),
        [(2, 3, 4, 5), (3, 2, 3, 3), (2,)],
        "normal",
        True,
    ),
    "conv1d": (
        lambda m, x, w, b: F(m).conv1d(x, w, b, stride=2, padding=1),
        [(2, 3, 9), (4, 3, 3), (4,)],
        "normal",
        True,
    ),
    "group_norm": (
        lambda m, x, w, b: F(m).group_norm(x, 2, w, b),
        [(2, 4, 3, 3), (4,), (4,)],
        "normal",
        True,
    ),
    "rms_norm": (lambda m, x, w: F(m).rms_norm(x, (5,), w), [(3, 5), (5,)], "normal", True),
    "softmax_log_softmax": (
        lambda m, x: F(m).softmax(x, -1) * F(m).log_softmax(x, 0),
        [(4, 5)],
        "normal",
        True,
    ),
    "silu_softplus_mish": (
        lambda m, x: F(m).silu(x) + F(m).softplus(x) * F(m).mish(x),
        [(3, 4)],
        "normal",
        True,
    ),
    "sdpa_causal": (
        lambda m, q, k, v: F(m).scaled_dot_product_attention(q, k, v, is_causal=True),
        [(2, 2, 5, 4), (2, 2, 5, 4), (2, 2, 5, 4)],
        "normal",
        True,
    ),
    "pad_reflect": (
        lambda m, x: F(m).pad(x, (2, 1, 1, 2), mode="reflect"),
        [(1, 2, 4, 5)],
        "normal",
        True,
    ),
    "unfold_overlapping": (
        lambda m, x: x.unfold(1, 3, 2).unfold(2, 2, 1) * 1.5,
        [(2, 7, 4)],
        "normal",
        True,
    ),
    "log1p_expm1_log2_exp2": (
        lambda m, x: (x.abs() + 0.1).log1p() * x.expm1() + (x.abs() + 0.5).log2() * x.exp2(),
        [(3, 4)],
        "normal",
        True,
    ),
    "trig_inverse_hyperbolic": (
        lambda m, x: (
            (x * 0.3).asin() + (x * 0.3).acos() * x.atan() + (x * 0.5).tan() * x.sinh() - x.cosh()
        ),
        [(3, 4)],
        "normal",
        True,
    ),
    "erfc_log10_frac": (
        lambda m, x: x.erfc() * (x.abs() + 0.5).log10() + (x * 3).frac(),
        [(3, 4)],
        "normal",
        True,
    ),
    "sort_topk_cumsum": (
        lambda m, x: (
            x.sort(dim=0, descending=True).values * x.topk(2, dim=1).values.sum() + x.cumsum(1)
        ),
        [(3, 4)],
        "spread",
        True,
    ),
    "atan2_remainder_fmod_clamp_min_max": (
        lambda m, x, y: (
            m.atan2(x, y) * m.remainder(x, y.abs() + 2.0)
            + m.fmod(y, 0.7) * x.clamp_min(y * 0.5 + 0.13)
            - y.clamp_max(0.1)
        ),
        [(3, 4), (3, 4)],
        "spread",
        True,
    ),
    "logsumexp_repeat_interleave": (
        lambda m, x: x.logsumexp(1, keepdim=True) * x.repeat_interleave(2, dim=1)[:, :4],
        [(3, 4)],
        "normal",
        True,
    ),
    "vector_norms": (
        lambda m, x: (
            x.norm() * x.norm(p=3, dim=1, keepdim=True)
            + x.norm(p=float("inf"), dim=0)
            + x.norm(p=1.5, dim=1, keepdim=True) * x.norm(p=0.5)
        ),
        [(3, 4)],
        "spread",
        True,
    ),
    "addmm": (
        lambda m, b, x, w: m.addmm(b, x, w, beta=0.5, alpha=1.5) + m.addmm(b, x, (w.t() * 1).t()),
        [(4,), (3, 2), (2, 4)],
        "normal",
        True,
    ),
    "dot_mv_outer_matmul_1d": (
        lambda m, v, a: (
            m.outer(v, v[:3] * m.dot(v, v)) @ a + m.mv(a.t(), v[:3]) + (v[:3] @ a).unsqueeze(0)
        ),
        [(4,), (3, 4)],
        "normal",
        True,
    ),
    "narrow_unflatten_tile_select": (
        lambda m, x: (
            x.narrow(1, 1, 4).unflatten(1, (2, 2)).tile((1, 2, 1)).select(2, 1) * x.ravel()[:4]
            + x[:, :4].repeat(1, 1)
        ),
        [(3, 6)],
        "normal",
        True,
    ),
    "nan_to_num_round_trunc_clamp": (
        lambda m, x: (
            x.log().nan_to_num(nan=0.5) * x + (x * 4).round() * x.trunc() + x.clamp(-0.5, 0.5)
        ),
        [(3, 4)],
        "spread",
        True,
    ),
    "squeeze_unsqueeze_swapdims_inplace": (
        lambda m, x: (x * 1.0).unsqueeze_(0).swapdims_(1, 2).squeeze_(0) * x.t(),
        [(3, 4)],
        "normal",
        True,
    ),
    "l1_smooth_l1_huber_losses": (
        lambda m, x, t: (
            F(m).l1_loss(x, t) * F(m).smooth_l1_loss(x, t, beta=0.6)
            + F(m).huber_loss(x, t, delta=0.4, reduction="none")
        ),
        [(3, 4), (3, 4)],
        "spread",
        True,
    ),
    "bce_losses_and_kl_div": (
        lambda m, x, t: (
            F(m).binary_cross_entropy(x.sigmoid(), t.sigmoid(), _const(m, [0.6, 1.2, 0.9, 1.4]))
            + F(m).binary_cross_entropy_with_logits(
                x, t.sigmoid(), _const(m, [2.0, 1.0, 0.5, 3.0]), pos_weight=_const(m, [0.3] * 4)
            )
            + F(m).kl_div(x, t.sigmoid(), reduction="batchmean")
            + F(m).kl_div(x, t, reduction="none", log_target=True)
            + m.xlogy(x.abs() + 0.1, t.abs() + 0.2)
        ),
        [(3, 4), (3, 4)],
        "normal",
        True,
    ),
    "similarity_and_gated_activations": (
        lambda m, x, y: (
            F(m).normalize(x, dim=1).sum(1)
            + F(m).cosine_similarity(x, y, dim=1)
            + F(m).pairwise_distance(x, y)
            + F(m).logsigmoid(x).sum(1)
            + F(m).glu(x, 1).sum(1)
            + (F(m).softsign(y) * F(m).softmin(x, 1) + F(m).tanhshrink(y)).sum(1)
            + m.broadcast_tensors(x[:, :1], y)[0].sum(1)
            + m.meshgrid(x[0], y[1], indexing="ij")[0][:3].sum(1)
        ),
        [(3, 4), (3, 4)],
        "normal",
        True,
    ),
    "interpolate_modes": (
        lambda m, x, v: (
            F(m).interpolate(x, size=(4, 3), mode="bilinear")
            + F(m).interpolate(x, scale_factor=1.5)
            + F(m).interpolate(x, size=(4, 3), mode="bilinear", align_corners=True)
            + F(m).interpolate(x, size=(4, 3), mode="nearest-exact")
            + F(m).interpolate(v, size=3, mode="linear").unsqueeze(-2)
        ),
        [(1, 2, 3, 2), (1, 2, 5)],
        "normal",
        True,
    ),
    "pad_modules_pixel_shuffle_shrink": (
        lambda m, x: (
            m.nn.ReflectionPad2d((1, 0, 2, 1))(x)[..., :4, :3]
            + m.nn.ReplicationPad2d(1)(x)[..., 1:5, :3]
            + F(m)
            .pixel_unshuffle(F(m).pixel_shuffle(x, 2) * 1.5, 2)[..., :1, :]
            .repeat(1, 1, 1, 1)
            .sum()
            + F(m).hardshrink(x, 0.3).sum()
            + F(m).softshrink(x, 0.2).sum()
        ),
        [(1, 4, 3, 2)],
        "spread",
        True,
    ),
    "inplace_chain": (
        lambda m, x, y: (x * 1.0).addcmul_(y, y, value=0.1).lerp_(y, 0.25),
        [(3, 4), (3, 4)],
        "normal",
        True,
    ),
}

# torch can't compute these with double targets/broadcast warnings identically
_LAYOUT_CASES = [(name, layout) for name in CASES for layout in ("contiguous", "transposed")]


@pytest.mark.parametrize("name,layout", _LAYOUT_CASES)
def test_gradients_match_central_differences_and_torch(name, layout):
    fn, shapes, domain, with_torch = CASES[name]
    torch = None
    if with_torch:
        try:
            import torch
        except ImportError:
            torch = None
    arrays = [_sample(s, domain, seed) for seed, s in enumerate(shapes)]
    gradcheck(fn, arrays, layout=layout, torch=torch)


@pytest.mark.cuda
@requires_cuda
@pytest.mark.parametrize(
    "name,layout", [(n, layout) for n, layout in _LAYOUT_CASES if "dropout" not in n]
)
def test_cuda_computes_what_cpu_does(name, layout):
    """Every program above (but dropout's, whose masks come from another generator) with its
    tensors on a GPU: CuPy's paths give the CPU's float64 outputs and gradients."""
    fn, shapes, domain, _ = CASES[name]
    arrays = [_sample(s, domain, seed) for seed, s in enumerate(shapes)]
    out, grads, _ = _run(engine, fn, arrays, layout)
    engine.set_default_device("cuda")
    try:
        c_out, c_grads, _ = _run(engine, fn, arrays, layout)
    finally:
        engine.set_default_device(None)
    np.testing.assert_allclose(c_out, out, rtol=1e-9, atol=1e-10)
    for a, b in zip(c_grads, grads, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-10)


# ---------------------------------------------------------------------------------------------
# Module API
# ---------------------------------------------------------------------------------------------
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(inplace=True)
        )
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.head = nn.Linear(4, 2)

    def forward(self, x):
        return self.head(self.pool(self.features(x)).flatten(1))


def test_named_parameters_follow_registration_order():
    names = [n for n, _ in Net().named_parameters()]
    assert names == [
        "features.0.weight",
        "features.0.bias",
        "features.1.weight",
        "features.1.bias",
        "head.weight",
        "head.bias",
    ]


def test_parameters_are_leaf_parameters_that_require_grad():
    for p in Net().parameters():
        assert isinstance(p, nn.Parameter) and p.requires_grad and p.is_leaf


def test_shared_module_counts_its_parameters_once():
    shared = nn.Linear(3, 3)
    model = nn.Sequential(shared, nn.ReLU(), shared)
    assert len(list(model.parameters())) == 2
    assert len(list(model.modules())) == 3


def test_buffers_are_registered_and_in_state_dict():
    net = Net()
    assert [n for n, _ in net.named_buffers()] == [
        "features.1.running_mean",
        "features.1.running_var",
        "features.1.num_batches_tracked",
    ]
    assert "features.1.num_batches_tracked" in net.state_dict()


def test_non_persistent_buffer_is_left_out_of_state_dict():
    m = nn.Module()
    m.register_buffer("keep", engine.zeros(2))
    m.register_buffer("scratch", engine.zeros(2), persistent=False)
    assert list(m.state_dict()) == ["keep"]
    assert [n for n, _ in m.named_buffers()] == ["keep", "scratch"]


def test_children_and_modules():
    net = Net()
    assert [n for n, _ in net.named_children()] == ["features", "pool", "head"]
    assert [n for n, _ in net.named_modules()] == [
        "",
        "features",
        "features.0",
        "features.1",
        "features.2",
        "pool",
        "head",
    ]


def test_train_and_eval_propagate_to_submodules():
    net = Net()
    net.eval()
    assert not any(m.training for m in net.modules())
    net.train()
    assert all(m.training for m in net.modules())


def test_assigning_a_tensor_to_a_parameter_slot_is_refused():
    lin = nn.Linear(2, 2)
    with pytest.raises(TypeError, match="cannot assign"):
        lin.weight = engine.zeros(2, 2)


def test_zero_grad_set_to_none_frees_every_gradient_byte():
    # Given a model whose grads are populated
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    nn.functional.mse_loss(model(engine.randn(5, 8)), engine.randn(5, 4)).backward()
    grad_bytes = sum(p.grad.nbytes for p in model.parameters())
    assert grad_bytes == (16 * 8 + 16 + 4 * 16 + 4) * 4
    before = engine.memory.memory_allocated()
    # When
    model.zero_grad(set_to_none=True)
    # Then every gradient storage is released
    assert all(p.grad is None for p in model.parameters())
    assert engine.memory.memory_allocated() == before - grad_bytes


def test_zero_grad_without_set_to_none_zeroes_in_place():
    lin = nn.Linear(3, 2)
    lin(engine.randn(4, 3)).sum().backward()
    g = lin.weight.grad
    lin.zero_grad(set_to_none=False)
    assert lin.weight.grad is g and not g.numpy().any()


def test_state_dict_round_trip():
    a, b = Net(), Net()
    a.features[1].running_mean.fill_(0.5)
    b.load_state_dict(a.state_dict())
    for (ka, va), (kb, vb) in zip(a.state_dict().items(), b.state_dict().items(), strict=True):
        assert ka == kb
        np.testing.assert_array_equal(va.numpy(), vb.numpy())


def test_state_dict_values_share_memory_and_are_detached():
    lin = nn.Linear(2, 3)
    sd = lin.state_dict()
    assert not sd["weight"].requires_grad
    assert sd["weight"].data_ptr() == lin.weight.data_ptr()


def test_load_state_dict_reports_missing_unexpected_and_shape_errors():
    lin = nn.Linear(2, 3)
    with pytest.raises(RuntimeError, match='Missing key\\(s\\) in state_dict: "bias"'):
        lin.load_state_dict({"weight": np.zeros((3, 2))})
    with pytest.raises(RuntimeError, match="size mismatch for weight"):
        lin.load_state_dict({"weight": np.zeros((2, 2)), "bias": np.zeros(3)})
    result = lin.load_state_dict({"weight": np.zeros((3, 2)), "extra": np.zeros(1)}, strict=False)
    assert result.missing_keys == ["bias"] and result.unexpected_keys == ["extra"]


def test_load_state_dict_keeps_parameter_objects():
    lin = nn.Linear(2, 3)
    w = lin.weight
    lin.load_state_dict({"weight": np.ones((3, 2)), "bias": np.ones(3)})
    assert lin.weight is w and w.numpy(force=True).sum() == 6


@pytest.mark.parametrize("in_f,out_f", [(512, 1024), (3, 7)])
def test_linear_shapes_and_kaiming_uniform_bounds(in_f, out_f):
    lin = nn.Linear(in_f, out_f)
    assert lin.weight.shape == (out_f, in_f) and lin.bias.shape == (out_f,)
    bound = 1 / math.sqrt(in_f)
    w, b = lin.weight.numpy(force=True), lin.bias.numpy(force=True)
    assert np.abs(w).max() <= bound and np.abs(b).max() <= bound
    if w.size > 1000:  # uniform on [-bound, bound]: the spread uses the whole interval
        assert np.abs(w).max() > 0.95 * bound
        assert abs(w.std() - bound / math.sqrt(3)) < 0.02 * bound


def test_conv2d_weight_layout_and_bounds():
    conv = nn.Conv2d(6, 8, (3, 5), groups=2)
    assert conv.weight.shape == (8, 3, 3, 5) and conv.bias.shape == (8,)
    bound = 1 / math.sqrt(3 * 3 * 5)
    assert np.abs(conv.weight.numpy(force=True)).max() <= bound
    assert np.abs(conv.bias.numpy(force=True)).max() <= bound


def test_parameters_are_allocated_in_the_parameter_category():
    class Categories(MemoryObserver):
        def __init__(self):
            self.seen = []

        def on_alloc(self, event):
            self.seen.append(event.context.get("category"))

    obs = Categories()
    with get_allocator("cpu").observing(obs):
        nn.Linear(4, 4)
        nn.BatchNorm2d(3)
    assert obs.seen[:2] == ["parameter", "parameter"]
    assert obs.seen[-3:] == ["buffer", "buffer", "buffer"]


def test_sequential_indexing_len_and_append():
    seq = nn.Sequential(nn.Linear(2, 3), nn.ReLU())
    assert len(seq) == 2 and isinstance(seq[-1], nn.ReLU)
    assert isinstance(seq[0:1], nn.Sequential) and len(seq[0:1]) == 1
    seq.append(nn.Linear(3, 1))
    assert seq(engine.randn(4, 2)).shape == (4, 1)


def test_repr_matches_pytorch_layout():
    model = nn.Sequential(nn.Linear(512, 1024), nn.ReLU(inplace=True), nn.Linear(1024, 512))
    assert repr(model) == (
        "Sequential(\n"
        "  (0): Linear(in_features=512, out_features=1024, bias=True)\n"
        "  (1): ReLU(inplace=True)\n"
        "  (2): Linear(in_features=1024, out_features=512, bias=True)\n"
        ")"
    )


def test_relu_inplace_returns_its_input():
    x = engine.randn(3, 4)
    assert nn.ReLU(inplace=True)(x) is x
    assert nn.ReLU()(x) is not x


def test_dropout_is_identity_in_eval_and_scales_in_training():
    drop = nn.Dropout(0.25)
    x = engine.ones(1000, 100)
    y = drop(x)
    kept = y.numpy() != 0
    assert abs(kept.mean() - 0.75) < 0.01
    np.testing.assert_allclose(y.numpy()[kept], 1 / 0.75)
    drop.eval()
    assert drop(x) is x


def test_dropout_inplace_overwrites_its_input_and_keeps_the_mask_only():
    x = engine.randn(64, 64, requires_grad=True)
    h = x * 1.0
    y = nn.Dropout(0.5, inplace=True)(h)
    assert y is h
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), (y.detach().numpy() != 0) * 2.0)


def test_batchnorm_updates_running_stats_in_training_only():
    bn = nn.BatchNorm2d(3, momentum=0.5)
    x = engine.randn(4, 3, 5, 5) * 2 + 1
    bn(x)
    mean = x.numpy().mean(axis=(0, 2, 3))
    var = x.numpy().var(axis=(0, 2, 3), ddof=1)
    np.testing.assert_allclose(bn.running_mean.numpy(), 0.5 * mean, rtol=1e-5)
    np.testing.assert_allclose(bn.running_var.numpy(), 0.5 + 0.5 * var, rtol=1e-5)
    assert bn.num_batches_tracked.item() == 1
    bn.eval()
    before = bn.running_mean.numpy().copy()
    bn(x)
    np.testing.assert_array_equal(bn.running_mean.numpy(), before)


def test_batchnorm_rejects_wrong_rank():
    with pytest.raises(ValueError, match="expected 4D input"):
        nn.BatchNorm2d(3)(engine.randn(2, 3))


def test_embedding_padding_row_is_zero_and_gets_no_gradient():
    emb = nn.Embedding(5, 3, padding_idx=0)
    assert not emb.weight.numpy(force=True)[0].any()
    emb(engine.tensor([[0, 2], [2, 4]])).sum().backward()
    g = emb.weight.grad.numpy()
    assert not g[0].any() and (g[2] == 2).all() and (g[4] == 1).all()


def test_flatten_and_identity():
    x = engine.randn(2, 3, 4, 5)
    assert nn.Flatten()(x).shape == (2, 60)
    assert nn.Flatten(0, 2)(x).shape == (24, 5)
    assert nn.Identity(7, foo=1)(x) is x


def test_losses_as_modules():
    x, t = engine.randn(4, 3), engine.randn(4, 3)
    np.testing.assert_allclose(
        nn.MSELoss()(x, t).item(), ((x.numpy() - t.numpy()) ** 2).mean(), rtol=1e-6
    )
    logits, target = engine.randn(4, 3), engine.tensor([0, 2, 1, 2])
    logp = logits.numpy() - np.log(np.exp(logits.numpy()).sum(1, keepdims=True))
    expected = -logp[np.arange(4), target.numpy()].mean()
    np.testing.assert_allclose(nn.CrossEntropyLoss()(logits, target).item(), expected, rtol=1e-5)


def test_mse_loss_scalar_keeps_the_full_result_buffer_like_pytorch():
    # PyTorch writes the mean into its full-size result buffer, so the 0-d loss holds it.
    loss = nn.functional.mse_loss(engine.randn(64, 512), engine.randn(64, 512))
    assert loss.shape == () and loss.untyped_storage().nbytes == 64 * 512 * 4


def test_forward_hooks_see_module_input_and_output():
    seen = []
    lin = nn.Linear(2, 2)
    handle = lin.register_forward_hook(
        lambda mod, args, out: seen.append((mod, args[0].shape, out.shape))
    )
    lin(engine.randn(3, 2))
    handle.remove()
    lin(engine.randn(3, 2))
    assert seen == [(lin, (3, 2), (3, 2))]


def test_global_forward_pre_hook_runs_for_every_module():
    names = []
    model = nn.Sequential(nn.Linear(2, 2), nn.ReLU())
    with nn.register_module_forward_pre_hook(lambda mod, args: names.append(type(mod).__name__)):
        model(engine.randn(1, 2))
    model(engine.randn(1, 2))
    assert names == ["Sequential", "Linear", "ReLU"]


def test_module_to_double_converts_parameters_in_place():
    lin = nn.Linear(2, 2)
    w = lin.weight
    lin.double()
    assert lin.weight is w and w.dtype is engine.float64
    assert lin(engine.randn(1, 2, dtype=engine.float64)).dtype is engine.float64


def test_meta_device_model_allocates_shapes_only():
    model = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        nn.ReLU(inplace=True),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(8 * 4 * 4, 10, device="meta"),
    )
    model[0].to(device="meta")
    y = model(engine.empty(2, 3, 8, 8, device="meta"))
    assert y.shape == (2, 10) and y.device.type == "meta"


def test_linear_and_conv_refuse_mixed_dtypes_like_pytorch():
    with pytest.raises(RuntimeError, match="same dtype"):
        nn.functional.linear(engine.randn(2, 3, dtype=engine.float64), engine.randn(4, 3))
    with pytest.raises(RuntimeError, match="same dtype"):
        nn.functional.conv2d(
            engine.randn(1, 2, 5, 5), engine.randn(3, 2, 3, 3, dtype=engine.float64)
        )


def test_backward_of_linear_allocates_each_gradient_once():
    # AccumulateGrad takes over grad_weight and grad_bias instead of copying them (the bias is
    # the node's last input: the backward walk must not keep a reference to its gradient).
    class Allocs(MemoryObserver):
        def __init__(self):
            self.sizes = []

        def on_alloc(self, event):
            self.sizes.append(event.requested)

    lin = nn.Linear(8, 4)
    loss = nn.functional.mse_loss(lin(engine.randn(3, 8)), engine.randn(3, 4))
    obs = Allocs()
    with get_allocator("cpu").observing(obs):
        loss.backward()
    root, mse_grad, grad_w, grad_b = 4, 3 * 4 * 4, 4 * 8 * 4, 4 * 4
    assert sorted(obs.sizes) == sorted([root, mse_grad, grad_w, grad_b])
    assert lin.weight.grad.nbytes == grad_w and lin.bias.grad.nbytes == grad_b
