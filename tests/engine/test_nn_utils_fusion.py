"""torch.nn.utils.fusion (conv/linear + eval BatchNorm) and functional_call
(torch.nn.utils.stateless / torch.func) against torch 2.13: values (float64), the fused module's
parameters, gradients to the given tensors, the blocks its CPU profiler shows, refusals."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import engine
from tests.conftest import assert_raises_as_torch
from tests.engine.test_memory_vs_torch import assert_steps_as_torch, forward_backward

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(7)


def _arr(*shape):
    return RNG.standard_normal(shape)


CONV_W, CONV_B = _arr(6, 3, 3, 3), _arr(6)
TCONV_W = _arr(3, 6, 3, 3)
LIN_W, LIN_B = _arr(6, 5), _arr(6)
BN_W, BN_B, BN_RM, BN_RV = _arr(6), _arr(6), _arr(6), np.abs(_arr(6)) + 0.5
X_IMG, X_VEC = _arr(2, 3, 7, 7), _arr(4, 5)


def _set(m, module, **values):
    with m.no_grad():
        for name, v in values.items():
            getattr(module, name).copy_(m.tensor(v))


def _bn(m, cls="BatchNorm2d", dtype=None, affine=True):
    bn = getattr(m.nn, cls)(6, affine=affine, dtype=dtype)
    if affine:
        _set(m, bn, weight=BN_W, bias=BN_B)
    _set(m, bn, running_mean=BN_RM, running_var=BN_RV)
    return bn.eval()


def _conv(m, bias=True, transpose=False, dtype=None):
    if transpose:
        conv = m.nn.ConvTranspose2d(3, 6, 3, bias=bias, dtype=dtype)
        _set(m, conv, weight=TCONV_W)
    else:
        conv = m.nn.Conv2d(3, 6, 3, bias=bias, dtype=dtype)
        _set(m, conv, weight=CONV_W)
    if bias:
        _set(m, conv, bias=CONV_B)
    return conv.eval()


def _linear(m, bias=True, dtype=None):
    lin = m.nn.Linear(5, 6, bias=bias, dtype=dtype)
    _set(m, lin, weight=LIN_W)
    if bias:
        _set(m, lin, bias=LIN_B)
    return lin.eval()


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("transpose", [False, True])
@pytest.mark.parametrize("affine", [True, False])
def test_fuse_conv_bn_eval_values_as_torch_and_as_conv_then_bn(bias, transpose, affine):
    def run(m):
        conv = _conv(m, bias, transpose, m.float64)
        bn = _bn(m, dtype=m.float64, affine=affine)
        fused = m.nn.utils.fuse_conv_bn_eval(conv, bn, transpose=transpose)
        x = m.tensor(X_IMG)
        with m.no_grad():
            ref = bn(conv(x)).numpy()
        y = fused(x)
        return (
            y.detach().numpy(),
            ref,
            fused.weight.detach().numpy(),
            fused.bias.detach().numpy(),
            type(fused).__name__,
            [type(fused.weight).__name__, fused.weight.requires_grad, fused.bias.requires_grad],
            fused is conv,
            conv.weight.detach().numpy(),
        )

    e, t = run(engine), run(torch)
    for a, b in zip(e[:4], t[:4], strict=True):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-12)
    np.testing.assert_allclose(e[0], e[1], rtol=0, atol=1e-12)  # the fusion is conv then bn
    assert e[4:7] == t[4:7]
    assert not e[6]
    np.testing.assert_array_equal(e[7], TCONV_W if transpose else CONV_W)  # conv untouched


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("cls", ["BatchNorm1d"])
def test_fuse_linear_bn_eval_values_as_torch(bias, cls):
    def run(m):
        lin = _linear(m, bias, m.float64)
        bn = _bn(m, cls, m.float64)
        fused = m.nn.utils.fuse_linear_bn_eval(lin, bn)
        x = m.tensor(X_VEC)
        with m.no_grad():
            ref = bn(lin(x)).numpy()
        return (
            fused(x).detach().numpy(),
            ref,
            fused.weight.detach().numpy(),
            fused.bias.detach().numpy(),
            [fused.weight.requires_grad, fused.bias.requires_grad, fused is lin],
        )

    e, t = run(engine), run(torch)
    for a, b in zip(e[:4], t[:4], strict=True):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-12)
    np.testing.assert_allclose(e[0], e[1], rtol=0, atol=1e-12)
    assert e[4] == t[4]


def test_fuse_weights_with_grad_tensors_as_torch():
    # fuse_*_weights on tensors that require grad: the Parameters are leaves that require grad
    def run(m):
        w = m.tensor(CONV_W, requires_grad=True)
        rm, rv = m.tensor(BN_RM), m.tensor(BN_RV)
        fw, fb = m.nn.utils.fuse_conv_bn_weights(w, None, rm, rv, 1e-5, None, None)
        lw, lb = m.nn.utils.fuse_linear_bn_weights(
            m.tensor(LIN_W), None, rm, rv, 1e-3, m.tensor(BN_W), m.tensor(BN_B)
        )
        return (
            [p.detach().numpy() for p in (fw, fb, lw, lb)],
            [(p.requires_grad, p.grad_fn is None, p.is_leaf) for p in (fw, fb, lw, lb)],
        )

    e, t = run(engine), run(torch)
    for a, b in zip(e[0], t[0], strict=True):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-12)
    assert e[1] == t[1]


def test_fuse_conv_bn_eval_blocks_as_torch():
    def make(m):
        conv, bn = _conv(m), _bn(m)
        held = {}

        def fuse():
            held["f"] = m.nn.utils.fuse_conv_bn_eval(conv, bn)

        def drop():
            del held["f"]

        return fuse, drop

    assert_steps_as_torch(make)


def test_fuse_linear_bn_eval_blocks_as_torch():
    def make(m):
        lin, bn = _linear(m, bias=False), _bn(m, "BatchNorm1d")
        held = {}

        def fuse():
            held["f"] = m.nn.utils.fuse_linear_bn_eval(lin, bn)

        def drop():
            del held["f"]

        return fuse, drop

    assert_steps_as_torch(make)


def test_fused_linear_forward_backward_blocks_as_torch():
    # (the fused conv runs Conv2d's own forward; the fused bias made by the fusion does not
    # require grad, the weight does)
    def make(m):
        fused = m.nn.utils.fuse_linear_bn_eval(_linear(m, bias=False), _bn(m, "BatchNorm1d"))
        x = m.tensor(_arr(64, 5).astype(np.float32))
        return forward_backward(m, lambda: fused(x))

    assert_steps_as_torch(make)


def test_fusion_refusals_as_torch():
    def train_mode(m):
        m.nn.utils.fuse_conv_bn_eval(m.nn.Conv2d(3, 6, 3), m.nn.BatchNorm2d(6))

    def no_stats(m):
        m.nn.utils.fuse_conv_bn_eval(
            m.nn.Conv2d(3, 6, 3).eval(), m.nn.BatchNorm2d(6, track_running_stats=False).eval()
        )

    def features(m):
        m.nn.utils.fuse_linear_bn_eval(m.nn.Linear(5, 6).eval(), m.nn.BatchNorm1d(4).eval())

    def linear_train(m):
        m.nn.utils.fuse_linear_bn_eval(m.nn.Linear(5, 6), m.nn.BatchNorm1d(6).eval())

    for bad in (train_mode, no_stats, features, linear_train):
        assert_raises_as_torch(bad, AssertionError)


# ---------------------------------------------------------------- functional_call


def _mlp(m):
    net = m.nn.Sequential(m.nn.Linear(5, 6), m.nn.BatchNorm1d(6), m.nn.Linear(6, 2)).double()
    rng = np.random.default_rng(13)
    with m.no_grad():
        for p in net.parameters():
            p.copy_(m.tensor(rng.standard_normal(tuple(p.shape))))
    return net


def _given(m):
    rng = np.random.default_rng(11)
    return {
        "0.weight": m.tensor(rng.standard_normal((6, 5)), requires_grad=True),
        "0.bias": m.tensor(rng.standard_normal(6), requires_grad=True),
        "2.weight": m.tensor(rng.standard_normal((2, 6)), requires_grad=True),
        "1.running_mean": m.tensor(rng.standard_normal(6)),
    }


def _call(m, net, given, x, which):
    if which == "func":
        return (
            m.func.functional_call(net, given, (x,))
            if m is torch
            else (engine.nn.utils.stateless.func_functional_call(net, given, (x,)))
        )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        return m.nn.utils.stateless.functional_call(net, given, x)


@pytest.mark.parametrize("which", ["stateless", "func"])
@pytest.mark.parametrize("train", [True, False])
def test_functional_call_values_gradients_and_state_as_torch(which, train):
    def run(m):
        net = _mlp(m)
        net.train(train)
        own = {k: v.detach().numpy().copy() for k, v in net.state_dict().items()}
        given = _given(m)
        x = m.tensor(X_VEC)
        y = _call(m, net, given, x, which)
        (y * m.tensor(np.arange(8.0).reshape(4, 2))).sum().backward()
        after = {k: v.detach().numpy() for k, v in net.state_dict().items()}
        return (
            y.detach().numpy(),
            y.grad_fn.name(),
            {k: v.grad.numpy() for k, v in given.items() if v.requires_grad},
            [p.grad is None for p in net.parameters()],
            {k: v.detach().numpy() for k, v in given.items()},
            own,
            after,
            [type(v).__name__ for v in net.state_dict().values()],
        )

    e, t = run(engine), run(torch)
    np.testing.assert_allclose(e[0], t[0], rtol=0, atol=1e-12)
    assert e[1] == t[1]
    assert e[2].keys() == t[2].keys()
    for k in e[2]:
        np.testing.assert_allclose(e[2][k], t[2][k], rtol=0, atol=1e-12)
    assert e[3] == t[3]  # the given "2.bias" left out: the module's own one got a grad
    for k in e[4]:  # the running stats updated in the given tensor, as torch
        np.testing.assert_allclose(e[4][k], t[4][k], rtol=0, atol=1e-12)
    for k in e[6]:
        np.testing.assert_allclose(e[6][k], t[6][k], rtol=0, atol=1e-12)
    assert e[7] == t[7]


def test_functional_call_uses_none_of_the_modules_own_parameters():
    net = _mlp(engine).eval()
    given = {k: v.detach() * 2 for k, v in net.named_parameters()}
    for v in given.values():
        v.requires_grad_(True)
    with engine.no_grad():
        for p in net.parameters():
            p.fill_(float("nan"))
    y = engine.nn.utils.stateless.func_functional_call(net, given, engine.tensor(X_VEC))
    y.sum().backward()
    assert np.isfinite(y.detach().numpy()).all()
    assert all(p.grad is None for p in net.parameters())
    assert all(np.isfinite(v.grad.numpy()).all() for v in given.values())
    assert all(type(p).__name__ == "Parameter" for p in net.parameters())  # put back


def test_functional_call_gradients_by_central_differences():
    net = _mlp(engine).eval()
    given = {k: v.detach().clone() for k, v in net.named_parameters()}
    x = engine.tensor(X_VEC)
    w = given["2.weight"]
    w.requires_grad_(True)
    engine.nn.utils.stateless.func_functional_call(net, given, x).sum().backward()
    g = w.grad.numpy()
    h, base = 1e-6, w.detach().numpy().copy()
    for idx in [(0, 0), (1, 3)]:
        vals = []
        for s in (h, -h):
            v = base.copy()
            v[idx] += s
            d = dict(given, **{"2.weight": engine.tensor(v)})
            vals.append(float(engine.nn.utils.stateless.func_functional_call(net, d, x).sum()))
        assert abs((vals[0] - vals[1]) / (2 * h) - g[idx]) < 1e-7


def test_functional_call_tied_weights_as_torch():
    # two Linears sharing one weight: tie_weights=True gives both the given value
    def run(m, tie):
        a, b = m.nn.Linear(3, 3, bias=False).double(), m.nn.Linear(3, 3, bias=False).double()
        _set(m, a, weight=LIN_W[:3, :3])
        b.weight = a.weight
        net = m.nn.Sequential(a, b)
        x = m.tensor(X_VEC[:2, :3])
        given = {"0.weight": m.tensor(np.eye(3) * 2)}
        fc = (
            m.func.functional_call if m is torch else engine.nn.utils.stateless.func_functional_call
        )
        return fc(net, given, x, tie_weights=tie).detach().numpy()

    results = {tie: run(engine, tie) for tie in (True, False)}
    for tie in (True, False):
        np.testing.assert_allclose(results[tie], run(torch, tie), rtol=0, atol=1e-12)
    assert not np.allclose(results[True], results[False])


def test_functional_call_blocks_as_torch():
    def make(m):
        net = m.nn.Sequential(m.nn.Linear(64, 32), m.nn.ReLU(), m.nn.Linear(32, 8))
        rng = np.random.default_rng(5)
        given = {
            k: m.tensor(rng.standard_normal(tuple(v.shape)).astype(np.float32), requires_grad=True)
            for k, v in net.named_parameters()
        }
        x = m.tensor(rng.standard_normal((16, 64)).astype(np.float32))
        fc = (
            m.func.functional_call if m is torch else engine.nn.utils.stateless.func_functional_call
        )
        return forward_backward(m, lambda: fc(net, given, (x,)))

    assert_steps_as_torch(make)


def test_functional_call_refusals_as_torch():
    def fc(m):
        return (
            m.func.functional_call if m is torch else engine.nn.utils.stateless.func_functional_call
        )

    def strict(m):
        net = m.nn.Linear(3, 2)
        fc(m)(net, {"weight": m.zeros(2, 3), "nope": m.zeros(1)}, m.zeros(1, 3), strict=True)

    def repeated(m):
        fc(m)(
            m.nn.Linear(3, 2), [{"weight": m.zeros(2, 3)}, {"weight": m.zeros(2, 3)}], m.zeros(1, 3)
        )

    def not_dicts(m):
        fc(m)(m.nn.Linear(3, 2), [{"weight": m.zeros(2, 3)}, 3], m.zeros(1, 3))

    def bad_type(m):
        fc(m)(m.nn.Linear(3, 2), 3, m.zeros(1, 3))

    def tied(m):
        lin = m.nn.Linear(3, 3, bias=False)
        fc(m)(
            m.nn.Sequential(lin, lin),
            {"0.weight": m.zeros(3, 3), "1.weight": m.ones(3, 3)},
            m.zeros(1, 3),
        )

    assert_raises_as_torch(strict, RuntimeError)
    for bad in (repeated, not_dicts, bad_type, tied):
        assert_raises_as_torch(bad, ValueError)


def test_stateless_functional_call_warns_as_torch():
    for m in (engine, torch):
        with pytest.warns(FutureWarning, match="stateless.functional_call` is deprecated"):
            m.nn.utils.stateless.functional_call(m.nn.Linear(3, 2), {}, m.zeros(1, 3))


# ---------------------------------------------------------------- skip_init


@pytest.mark.parametrize(
    "cls, args, kwargs",
    [
        ("Linear", (64, 32), {}),
        ("Conv2d", (3, 16, 3), {"bias": False}),
        ("BatchNorm2d", (16,), {}),
        ("Linear", (8, 4), {"dtype": "float64"}),
    ],
)
def test_skip_init_blocks_shapes_and_flags_as_torch(cls, args, kwargs):
    def make(m):
        kw = {k: getattr(m, v) if k == "dtype" else v for k, v in kwargs.items()}
        held = {}

        def build():
            held["m"] = m.nn.utils.skip_init(getattr(m.nn, cls), *args, **kw)

        def drop():
            del held["m"]

        return build, drop, held

    programs = {m: make(m) for m in (torch, engine)}
    from tests.engine.test_memory_vs_torch import engine_sequence, torch_sequence

    assert engine_sequence(programs[engine][0]) == torch_sequence(programs[torch][0])

    def describe(mod):
        return [
            (n, tuple(t.shape), str(t.dtype).split(".")[-1], t.device.type, t.requires_grad)
            for n, t in list(mod.named_parameters()) + list(mod.named_buffers())
        ] + [type(mod).__name__, mod.training]

    assert describe(programs[engine][2]["m"]) == describe(programs[torch][2]["m"])
    assert engine_sequence(programs[engine][1]) == torch_sequence(programs[torch][1])


def test_skip_init_nested_module_blocks_as_torch():
    # children first, then own parameters, then buffers (torch's Module._apply order)
    def make(m):
        class Net(m.nn.Module):
            def __init__(self, device=None):
                super().__init__()
                self.scale = m.nn.Parameter(m.empty(10, device=device))
                self.register_buffer("count", m.empty(12, device=device))
                self.body = m.nn.Linear(20, 30, device=device)

        return [lambda: m.nn.utils.skip_init(Net)]

    assert_steps_as_torch(make)


def test_skip_init_refusals_as_torch():
    assert_raises_as_torch(lambda m: m.nn.utils.skip_init(int), RuntimeError)
    assert_raises_as_torch(lambda m: m.nn.utils.skip_init(m.nn.ReLU), RuntimeError)


def test_fusion_and_skip_init_on_meta_shapes_and_dtypes():
    conv = engine.nn.Conv2d(3, 6, 3, device="meta", dtype=engine.float64).eval()
    bn = engine.nn.BatchNorm2d(6, device="meta", dtype=engine.float64).eval()
    fused = engine.nn.utils.fuse_conv_bn_eval(conv, bn)
    assert [(tuple(p.shape), p.dtype, p.device.type) for p in (fused.weight, fused.bias)] == [
        ((6, 3, 3, 3), engine.float64, "meta"),
        ((6,), engine.float64, "meta"),
    ]
    lin = engine.nn.Linear(5, 6, device="meta").eval()
    fused = engine.nn.utils.fuse_linear_bn_eval(lin, engine.nn.BatchNorm1d(1, device="meta").eval())
    assert (tuple(fused.weight.shape), tuple(fused.bias.shape)) == ((6, 5), (6,))
    m = engine.nn.utils.skip_init(engine.nn.Linear, 3, 4, device="meta")
    assert m.weight.device.type == "meta" and tuple(m.weight.shape) == (4, 3)
