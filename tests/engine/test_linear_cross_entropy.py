"""F.linear_cross_entropy / nn.LinearCrossEntropyLoss (torch 2.13's reference path, options=None,
and its chunked path, options given) and F.gumbel_softmax against torch: values, gradients, node chains, the blocks its CPU profiler
shows forward and backward, refusals and warnings in torch's words, meta shapes."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import engine
from tests.conftest import assert_raises_as_torch, node_chain
from tests.engine.test_memory_vs_torch import assert_steps_as_torch, forward_backward

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(7)
N, F_IN, C, D1 = 6, 5, 7, 3
X2 = RNG.standard_normal((N, F_IN))
X1 = RNG.standard_normal(F_IN)
W = RNG.standard_normal((C, F_IN))
WK = RNG.standard_normal((C, D1, F_IN))
B = RNG.standard_normal(C)
BK = RNG.standard_normal((C, D1))
CW = RNG.uniform(0.5, 2.0, C)
T = np.array([0, 3, 6, 2, 3, 1])
T_IGN = np.array([0, 3, -100, 2, 5, 5])
T_IGN5 = np.array([0, 3, 5, 2, 5, 1])
TK = RNG.integers(0, C, (N, D1))
P = RNG.dirichlet(np.ones(C), N)

# name -> (input, linear_weight, linear_bias, target (int64 indices or float probabilities), kw)
CASES = {
    "mean": (X2, W, None, T, {}),
    "bias_sum": (X2, W, B, T, {"reduction": "sum"}),
    "none_weight_ignore": (X2, W, B, T_IGN, {"reduction": "none", "weight": CW}),
    "ignore_index_5_mean_weight": (X2, W, None, T_IGN5, {"ignore_index": 5, "weight": CW}),
    "label_smoothing": (X2, W, B, T, {"label_smoothing": 0.2, "weight": CW}),
    "label_smoothing_none": (X2, W, None, T_IGN, {"label_smoothing": 0.1, "reduction": "none"}),
    "unbatched": (X1, W, B, np.array(4), {}),
    "unbatched_sum": (X1, W, None, np.array(2), {"reduction": "sum"}),
    "k_dim": (X2, WK, None, TK, {}),
    "k_dim_bias_none": (X2, WK, BK, TK, {"reduction": "none", "weight": CW}),
    "probabilities": (X2, W, B, P, {}),
    "probabilities_smoothing": (X2, W, None, P, {"label_smoothing": 0.3, "reduction": "sum"}),
}


def _make(m, name, dtype):
    x, w, b, t, kw = CASES[name]
    fdt = getattr(m, dtype)
    leaves = [
        m.tensor(x, dtype=fdt, requires_grad=True),
        m.tensor(w, dtype=fdt, requires_grad=True),
    ]
    if b is not None:
        leaves.append(m.tensor(b, dtype=fdt, requires_grad=True))
    tt = m.tensor(t, dtype=fdt if t.dtype.kind == "f" else m.int64)
    kw = dict(kw)
    if "weight" in kw:
        kw["weight"] = m.tensor(kw["weight"], dtype=fdt)
    bias = leaves[2] if b is not None else None

    def call():
        return m.nn.functional.linear_cross_entropy(
            leaves[0], leaves[1], tt, linear_bias=bias, **kw
        )

    return leaves, call


def _values(m, name):
    leaves, call = _make(m, name, "float64")
    y = call()
    g = np.random.default_rng(3).standard_normal(tuple(y.shape))
    (y * 1.0).backward(m.tensor(g))
    return y.detach().numpy(), [leaf.grad.numpy() for leaf in leaves], node_chain(y.grad_fn)


@pytest.mark.parametrize("name", sorted(CASES))
def test_values_and_gradients_as_torch(name):
    (ey, eg, _), (ty, tg, _) = _values(engine, name), _values(torch, name)
    np.testing.assert_allclose(ey, ty, rtol=1e-12, atol=1e-12)
    assert len(eg) == len(tg)
    for a, b in zip(eg, tg, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


# Chains the engine's own cross_entropy / linear name differently from torch (the same
# difference would show calling F.cross_entropy or F.linear directly; not this op's code): none
# since addmm's inputs are listed in torch's order, the weight behind its TBackward0.
CHAIN_KNOWN: dict[str, str] = {}


@pytest.mark.parametrize(
    "name",
    [
        pytest.param(n, marks=pytest.mark.xfail(reason=CHAIN_KNOWN[n], strict=True))
        if n in CHAIN_KNOWN
        else n
        for n in sorted(CASES)
    ],
)
def test_node_chain_as_torch(name):
    assert _values(engine, name)[2] == _values(torch, name)[2]


@pytest.mark.parametrize("name", sorted(CASES))
def test_blocks_forward_and_backward_as_torch(name):
    def make(m):
        _, call = _make(m, name, "float32")
        return forward_backward(m, call)

    assert_steps_as_torch(make)


def test_gradients_by_central_differences():
    leaves, call = _make(engine, "k_dim_bias_none", "float64")
    y = call().sum()
    y.backward()
    for leaf in leaves:
        base = leaf.detach().numpy().copy()
        num = np.zeros_like(base)
        for i in np.ndindex(base.shape):
            vals = []
            for h in (1e-6, -1e-6):
                a = base.copy()
                a[i] += h
                leaf.data = engine.tensor(a)
                vals.append(call().sum().item())
            num[i] = (vals[0] - vals[1]) / 2e-6
        leaf.data = engine.tensor(base)
        np.testing.assert_allclose(leaf.grad.numpy(), num, rtol=1e-6, atol=1e-7)


def _module(m, **kw):
    mod = m.nn.LinearCrossEntropyLoss(F_IN, C, **kw)
    with m.no_grad():
        mod.linear.weight.copy_(m.tensor(WK.reshape(-1, F_IN) if "out_features" in kw else W))
        if mod.linear.bias is not None:
            mod.linear.bias.copy_(m.tensor(BK.reshape(-1) if "out_features" in kw else B))
    return mod


MODULE_CASES = {
    "plain": ({}, T),
    "bias_weight_ignore": ({"bias": True, "weight": CW, "ignore_index": 5}, T_IGN5),
    "k_dim_bias": ({"bias": True, "out_features": (D1,), "reduction": "sum"}, TK),
    "smoothing_none": ({"label_smoothing": 0.25, "reduction": "none"}, T),
    "probabilities": ({"bias": True}, P),
}


def _module_run(m, name, dtype="float64"):
    kw, t = MODULE_CASES[name]
    kw = dict(kw, dtype=getattr(m, dtype))
    if "weight" in kw:
        kw["weight"] = m.tensor(kw["weight"], dtype=kw["dtype"])
    mod = _module(m, **kw)
    x = m.tensor(X2, dtype=kw["dtype"], requires_grad=True)
    return mod, x, m.tensor(t, dtype=kw["dtype"]) if t.dtype.kind == "f" else m.tensor(t)


@pytest.mark.parametrize("name", sorted(MODULE_CASES))
def test_module_as_torch(name):
    out = {}
    for m in (engine, torch):
        mod, x, t = _module_run(m, name)
        y = mod(x, t)
        y.sum().backward()
        grads = [x.grad.numpy(), mod.linear.weight.grad.numpy()]
        if mod.linear.bias is not None:
            grads.append(mod.linear.bias.grad.numpy())
        chain = node_chain(y.grad_fn)
        # down to the linear's node: past it the engine's AddmmBackward0 orders its inputs
        # (input, bias, weight) where torch's has (bias, input, TBackward0(weight)), as F.linear
        chain = chain[
            : next(i for i, n in enumerate(chain) if n in ("AddmmBackward0", "MmBackward0")) + 1
        ]
        out[m] = (y.detach().numpy(), grads, chain, repr(mod))
    (ey, eg, en, er), (ty, tg, tn, tr) = out[engine], out[torch]
    np.testing.assert_allclose(ey, ty, rtol=1e-12, atol=1e-12)
    for a, b in zip(eg, tg, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
    assert er == tr
    if name in MODULE_CHAIN_KNOWN:  # the engine's cross_entropy names these differently
        assert en != tn, f"fixed: drop {name} from MODULE_CHAIN_KNOWN"
    else:
        assert en == tn


MODULE_CHAIN_KNOWN: set[str] = set()  # see CHAIN_KNOWN


@pytest.mark.parametrize("name", sorted(MODULE_CASES))
def test_module_blocks_as_torch(name):
    def make(m):
        mod, x, t = _module_run(m, name, "float32")
        return forward_backward(m, lambda: mod(x, t))

    assert_steps_as_torch(make)


def _f(m):
    return m.nn.functional.linear_cross_entropy


@pytest.mark.parametrize(
    "call",
    [
        lambda m: _f(m)(m.ones(2, 3, 4), m.ones(5, 4), m.zeros(2, 3, dtype=m.int64)),
        lambda m: _f(m)(m.ones(()), m.ones(5, 4), m.zeros((), dtype=m.int64)),
        lambda m: _f(m)(m.ones(2, 4), m.ones(4), m.zeros(2, dtype=m.int64)),
        lambda m: _f(m)(m.ones(2, 4), m.ones(5, 3), m.zeros(2, dtype=m.int64)),
        lambda m: _f(m)(
            m.ones(2, 4), m.ones(5, 4), m.zeros(2, dtype=m.int64), linear_bias=m.ones(4)
        ),
        lambda m: _f(m)(m.ones(4), m.ones(5, 2, 4), m.zeros((), dtype=m.int64)),
        lambda m: _f(m)(m.ones(2, 4), m.ones(5, 4), m.ones(2, 5) / 5, ignore_index=1),
        lambda m: m.nn.LinearCrossEntropyLoss(4, 5, weight=m.ones(4)),
        lambda m: m.nn.LinearCrossEntropyLoss(4, 5, label_smoothing=-0.5),
        lambda m: m.nn.LinearCrossEntropyOptions(acc_policy="fast"),
        lambda m: m.nn.LinearCrossEntropyOptions(chunking_method="aspect_ratio:0"),
        lambda m: m.nn.LinearCrossEntropyOptions(chunking_method="square"),
        lambda m: m.nn.LinearCrossEntropyOptions(batch_chunk_size=0),
    ],
)
def test_refusals_as_torch(call):
    assert_raises_as_torch(call)


def test_options_the_chunked_path_cannot_take_warn_as_torch_and_fall_back():
    """label_smoothing (or a K-dimensional loss, or float targets) sends torch's options back to
    the reference path with a warning: the same words, the same result, the same blocks."""
    seen = {}
    for m in (engine, torch):
        x = m.tensor(X2, requires_grad=True)
        with warnings.catch_warnings(record=True) as rec:
            warnings.simplefilter("always")
            y = _f(m)(
                x, m.tensor(W), m.tensor(T), label_smoothing=0.1,
                options=m.nn.LinearCrossEntropyOptions(batch_chunk_size=2),
            )  # fmt: skip
        seen[m] = ([str(w.message) for w in rec], y.item())
    assert seen[engine][0] == seen[torch][0] and len(seen[torch][0]) == 1
    np.testing.assert_allclose(seen[engine][1], seen[torch][1], rtol=1e-12)

    def make(m):
        x = m.tensor(X2.astype(np.float32), requires_grad=True)
        opts = m.nn.LinearCrossEntropyOptions()
        wk = m.tensor(WK.astype(np.float32), requires_grad=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return forward_backward(m, lambda: _f(m)(x, wk, m.tensor(TK), options=opts))

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert_steps_as_torch(make)


@pytest.mark.parametrize("name", ["mean", "none_weight_ignore", "unbatched", "k_dim_bias_none"])
def test_meta_shapes(name):
    x, w, b, t, kw = CASES[name]
    kw = dict(kw)
    if "weight" in kw:
        kw["weight"] = engine.empty(C, device="meta")
    bias = engine.empty(b.shape, device="meta", requires_grad=True) if b is not None else None
    xm = engine.empty(x.shape, device="meta", requires_grad=True)
    y = _f(engine)(
        xm, engine.empty(w.shape, device="meta"), engine.empty(t.shape, dtype=engine.int64,
        device="meta"), linear_bias=bias, **kw,
    )  # fmt: skip
    ty = _f(torch)(torch.tensor(x), torch.tensor(w), torch.tensor(t), linear_bias=None
                   if b is None else torch.tensor(b), **{k: torch.tensor(v) if k == "weight"
                   else v for k, v in CASES[name][4].items()})  # fmt: skip
    assert tuple(y.shape) == tuple(ty.shape) and y.dtype == engine.float32
    y.sum().backward()
    assert tuple(xm.grad.shape) == x.shape


# ---------------------------------------------------------------------------------------------
# gumbel_softmax

G = RNG.standard_normal((4, 6))


def _gumbel(m, tau, hard, dim, dtype="float64", seed=11):
    m.manual_seed(seed)
    x = m.tensor(G, dtype=getattr(m, dtype), requires_grad=True)
    return x, m.nn.functional.gumbel_softmax(x, tau=tau, hard=hard, dim=dim)


GUMBEL = [(1.0, False, -1), (0.5, False, 0), (2.0, True, -1), (0.7, True, 0)]


@pytest.mark.parametrize("tau,hard,dim", GUMBEL)
def test_gumbel_softmax_is_torchs_formula_on_the_engines_noise(tau, hard, dim):
    from engine.ops.nn.gumbel import exponential_noise_

    x, y = _gumbel(engine, tau, hard, dim)
    engine.manual_seed(11)  # the same draw again
    e = exponential_noise_(engine.empty(G.shape, dtype=engine.float64)).numpy()
    assert (e > 0).all() and 0.5 < e.mean() < 1.5
    z = (G - np.log(e)) / tau
    soft = np.exp(z - z.max(dim, keepdims=True))
    soft /= soft.sum(dim, keepdims=True)
    g = np.random.default_rng(4).standard_normal(G.shape)
    y.backward(engine.tensor(g))
    # d softmax(z)/dz, then / tau: the straight-through gradient of hard is soft's
    expect_grad = soft * (g - (g * soft).sum(dim, keepdims=True)) / tau
    if hard:
        onehot = (np.arange(G.shape[dim]).reshape([-1 if d == dim % 2 else 1 for d in range(2)])
                  == soft.argmax(dim).reshape([1 if d == dim % 2 else -1 for d in range(2)]))  # fmt: skip
        np.testing.assert_allclose(y.detach().numpy(), onehot.astype(float), atol=1e-15)
        assert (y.detach().numpy().sum(dim) == 1).all()
    else:
        np.testing.assert_allclose(y.detach().numpy(), soft, rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(x.grad.numpy(), expect_grad, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("tau,hard,dim", GUMBEL)
def test_gumbel_softmax_nodes_as_torch(tau, hard, dim):
    chains = [_graph(_gumbel(m, tau, hard, dim)[1].grad_fn) for m in (engine, torch)]
    assert chains[0] == chains[1]


def _graph(fn):
    """Every node's name and its inputs' names, depth first (hard's y_hard has no node: its
    edge is (None, 0))."""
    out, stack = [], [fn]
    while stack:
        fn = stack.pop()
        nexts = [e[0] for e in fn.next_functions if e[0] is not None]
        names = [n.name().removeprefix("torch::autograd::") for n in nexts]
        out.append((fn.name(), names))
        stack.extend(n for n in reversed(nexts) if "AccumulateGrad" not in n.name())
    return out


@pytest.mark.parametrize("tau,hard,dim", GUMBEL)
def test_gumbel_softmax_blocks_as_torch(tau, hard, dim):
    def make(m):
        x = m.tensor(G.astype(np.float32), requires_grad=True)
        return forward_backward(m, lambda: m.nn.functional.gumbel_softmax(x, tau, hard, dim=dim))

    assert_steps_as_torch(make)


def test_gumbel_softmax_eps_warning_and_meta():
    for m in (engine, torch):
        with pytest.warns(UserWarning, match="`eps` parameter is deprecated and has no effect."):
            m.nn.functional.gumbel_softmax(m.ones(2, 3), eps=1e-5)
    y = engine.nn.functional.gumbel_softmax(engine.empty(2, 3, device="meta"), hard=True)
    assert tuple(y.shape) == (2, 3) and y.device.type == "meta"


# ---------------------------------------------------------------------------------------------
# the chunked path (options given): torch's custom ops, chunk by chunk

CN, CF, CV = 40, 8, 24
CX = RNG.standard_normal((CN, CF))
CW_ = RNG.standard_normal((CV, CF))
CB = RNG.standard_normal(CV)
CCW = RNG.uniform(0.5, 2.0, CV)
CT = RNG.integers(0, CV, CN)
CT_IGN = CT.copy()
CT_IGN[::3] = -100
CT_IGN3 = CT.copy()
CT_IGN3[::4] = 3

# name -> (n, in_features, classes, bias, class weight, target, options, kw)
CHUNKED = {
    "mean_default": (40, 8, 24, False, False, CT, {}, {}),
    "sum": (40, 8, 24, False, False, CT, {}, {"reduction": "sum"}),
    "none": (40, 8, 24, False, False, CT, {}, {"reduction": "none"}),
    "bias": (40, 8, 24, True, False, CT, {}, {}),
    "weight_ignore": (40, 8, 24, False, True, CT_IGN, {}, {}),
    "ignore_index_3": (40, 8, 24, False, False, CT_IGN3, {}, {"ignore_index": 3}),
    "accurate": (40, 8, 24, False, False, CT, {"acc_policy": "accurate"}, {}),
    "balanced_bias_weight": (
        40, 8, 24, True, True, CT_IGN, {"acc_policy": "balanced", "batch_chunk_size": 16}, {}
    ),
    "chunk_16_sum_bias": (40, 8, 24, True, False, CT, {"batch_chunk_size": 16}, {"reduction": "sum"}),
    "aspect_ratio": (40, 8, 24, False, False, CT, {"chunking_method": "aspect_ratio"}, {}),
    "aspect_ratio_4": (40, 8, 24, True, False, CT, {"chunking_method": "aspect_ratio:4"}, {}),
    "none_bias_weight_ignore": (
        40, 8, 24, True, True, CT_IGN, {"batch_chunk_size": 16}, {"reduction": "none"}
    ),
    "none_accurate": (40, 8, 24, True, False, CT, {"acc_policy": "accurate"}, {"reduction": "none"}),
    "retain_graph": (40, 8, 24, True, False, CT, {"allow_retain_graph": True}, {}),
    # more features than classes: the weight-gradient term in a (chunk, in_features) buffer
    "wide_compact": (40, 30, 24, False, True, CT_IGN, {"batch_chunk_size": 16}, {}),
    "wide_accurate_sum": (
        40, 30, 24, True, False, CT, {"batch_chunk_size": 16, "acc_policy": "accurate"},
        {"reduction": "sum"},
    ),
    "unbatched": (None, 8, 24, True, False, np.array(5), {}, {}),
    "unbatched_none": (None, 8, 24, False, False, np.array(5), {}, {"reduction": "none"}),
}  # fmt: skip


def _make_chunked(m, name, dtype, n=None):
    rows, f, v, bias, cw, t, opts, kw = CHUNKED[name]
    fdt = getattr(m, dtype)
    x = CX[:rows, :f] if rows else CX[0, :f]
    leaves = [
        m.tensor(x, dtype=fdt, requires_grad=True),
        m.tensor(CW_[:v, :f], dtype=fdt, requires_grad=True),
    ]
    if bias:
        leaves.append(m.tensor(CB[:v], dtype=fdt, requires_grad=True))
    tt = m.tensor(t)
    kw = dict(kw, options=m.nn.LinearCrossEntropyOptions(**opts))
    if cw:
        kw["weight"] = m.tensor(CCW[:v], dtype=fdt)
    b = leaves[2] if bias else None

    def call():
        return m.nn.functional.linear_cross_entropy(leaves[0], leaves[1], tt, linear_bias=b, **kw)

    return leaves, call


@pytest.mark.parametrize("name", sorted(CHUNKED))
def test_chunked_values_gradients_and_nodes_as_torch(name):
    out = {}
    for m in (engine, torch):
        leaves, call = _make_chunked(m, name, "float64")
        y = call()
        g = np.random.default_rng(3).standard_normal(tuple(y.shape))
        (y * 1.0).backward(m.tensor(g))
        out[m] = (y.detach().numpy(), [leaf.grad.numpy() for leaf in leaves], node_chain(y.grad_fn))
    (ey, eg, en), (ty, tg, tn) = out[engine], out[torch]
    np.testing.assert_allclose(ey, ty, rtol=1e-12, atol=1e-12)
    assert len(eg) == len(tg)
    for a, b in zip(eg, tg, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
    assert en == tn and any("linear_cross_entropy_batch_chunked" in n for n in en)


@pytest.mark.parametrize("name", sorted(CHUNKED))
def test_chunked_float32_values_as_torch(name):
    out = {}
    for m in (engine, torch):
        leaves, call = _make_chunked(m, name, "float32")
        y = call()
        y.sum().backward()
        out[m] = [y.detach().numpy()] + [leaf.grad.numpy() for leaf in leaves]
    for a, b in zip(out[engine], out[torch], strict=True):
        assert a.dtype == np.float32
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", sorted(CHUNKED))
def test_chunked_blocks_forward_and_backward_as_torch(name):
    def make(m):
        _, call = _make_chunked(m, name, "float32")
        return forward_backward(m, call)

    assert_steps_as_torch(make)


def test_chunked_blocks_when_every_buffer_shows():
    """128 rows in chunks of 32: the mask, the row maxima, the chunk's softmax denominators are
    above the 64-byte floor too (and the denominators overlap chunk to chunk, as torch's)."""
    for kw, opts in [
        ({}, {"batch_chunk_size": 32}),
        ({"reduction": "none"}, {"batch_chunk_size": 32}),
        ({"weight": True}, {"batch_chunk_size": 32, "acc_policy": "balanced"}),
    ]:

        def make(m, kw=kw, opts=opts):
            rng = np.random.default_rng(5)
            x = m.tensor(rng.standard_normal((128, 8)).astype(np.float32), requires_grad=True)
            w = m.tensor(rng.standard_normal((24, 8)).astype(np.float32), requires_grad=True)
            t = rng.integers(0, 24, 128)
            t[::5] = -100
            extra = dict(kw)
            if extra.pop("weight", None):
                extra["weight"] = m.tensor(rng.uniform(0.5, 2, 24).astype(np.float32))
            o = m.nn.LinearCrossEntropyOptions(**opts)
            return forward_backward(m, lambda: _f(m)(x, w, m.tensor(t), options=o, **extra))

        assert_steps_as_torch(make)


def test_chunked_peak_below_the_reference_paths_as_torch():
    """The point of the chunked path: on a [512, 64] x [8192, 64] head (float32) the
    [512, 8192] logits are never made whole. The peak of forward + backward, the engine's
    against torch's profiler, for both paths, and the chunked one lower by what torch shows."""
    from tests.engine.test_memory_vs_torch import SCALAR_SLACK, engine_peak, torch_peak

    rng = np.random.default_rng(9)
    xs = rng.standard_normal((512, 64)).astype(np.float32)
    ws = (rng.standard_normal((8192, 64)) * 0.1).astype(np.float32)
    ts = rng.integers(0, 8192, 512)

    def program(m, chunked):
        x = m.tensor(xs, requires_grad=True)
        w = m.tensor(ws, requires_grad=True)
        t = m.tensor(ts)
        o = m.nn.LinearCrossEntropyOptions() if chunked else None

        def run():
            _f(m)(x, w, t, options=o).backward()

        return run

    peaks = {}
    for chunked in (False, True):
        peaks[chunked] = (
            torch_peak(program(torch, chunked)),
            engine_peak(program(engine, chunked)),
        )
        assert abs(peaks[chunked][1] - peaks[chunked][0]) <= SCALAR_SLACK, peaks
    (t_ref, e_ref), (t_ch, e_ch) = peaks[False], peaks[True]
    assert t_ch < t_ref and e_ch < e_ref
    assert abs((e_ref - e_ch) - (t_ref - t_ch)) <= 2 * SCALAR_SLACK
    # the logits (and their gradient) are what the reference path holds and the chunked not
    assert t_ref - t_ch > 512 * 8192 * 4


def test_chunked_second_backward_refused_as_torch():
    def call(m):
        x = m.tensor(CX, requires_grad=True)
        y = _f(m)(
            x, m.tensor(CW_[:, :8][:24]), m.tensor(CT), options=m.nn.LinearCrossEntropyOptions()
        )
        y.backward(retain_graph=True)
        y.backward()

    assert_raises_as_torch(call)


@pytest.mark.parametrize(
    "opts",
    [
        {"acc_dtype": "float64"},
        {"batch_chunk_size": 5, "chunking_method": "aspect_ratio"},
    ],
)
def test_chunked_refusals_as_torch(opts):
    def call(m):
        o = {k: getattr(m, v) if k == "acc_dtype" else v for k, v in opts.items()}
        x = m.tensor(CX.astype(np.float32))
        w = m.tensor(CW_.astype(np.float32))
        return _f(m)(x, w, m.tensor(CT), options=m.nn.LinearCrossEntropyOptions(**o))

    assert_raises_as_torch(call)


def test_chunked_half_precision_refused_not_faked():
    """float16/bfloat16 take torch's mixed-precision layouts (float32 accumulation buffers):
    not in the engine, refused in words naming what is."""
    for dt in (engine.bfloat16, engine.float16):
        with pytest.raises(NotImplementedError, match="float32 and float64"):
            _f(engine)(
                engine.ones(4, 3, dtype=dt), engine.ones(5, 3, dtype=dt),
                engine.zeros(4, dtype=engine.int64), options=engine.nn.LinearCrossEntropyOptions(),
            )  # fmt: skip


@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_chunked_meta_shapes(reduction):
    xm = engine.empty(CN, CF, device="meta", requires_grad=True)
    wm = engine.empty(CV, CF, device="meta", requires_grad=True)
    bm = engine.empty(CV, device="meta", requires_grad=True)
    y = _f(engine)(
        xm, wm, engine.empty(CN, dtype=engine.int64, device="meta"), linear_bias=bm,
        reduction=reduction, options=engine.nn.LinearCrossEntropyOptions(),
    )  # fmt: skip
    assert tuple(y.shape) == (() if reduction == "mean" else (CN,))
    assert y.device.type == "meta" and y.grad_fn.name() == _make_name(reduction)
    y.sum().backward()
    assert tuple(xm.grad.shape) == (CN, CF) and tuple(wm.grad.shape) == (CV, CF)
    assert tuple(bm.grad.shape) == (CV,)


def _make_name(reduction):
    mid = "_no_reduction" if reduction == "none" else ""
    return f"GeneratedBackwardFor_torch_nn__linear_cross_entropy_batch_chunked{mid}_defaultBackward"
