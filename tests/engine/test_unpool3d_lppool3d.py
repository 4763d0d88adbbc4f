"""F.max_unpool3d / nn.MaxUnpool3d, F.lp_pool3d / nn.LPPool3d and nn.ParameterDict against
torch 2.13: values, gradients (and float64 central differences), node chains, every block
forward and backward as torch's CPU profiler shows it, reprs, refusals, meta."""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
import pytest

import engine
from tests.conftest import assert_raises_as_torch, node_chain
from tests.engine.test_memory_vs_torch import assert_steps_as_torch, forward_backward

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(31)
X = RNG.standard_normal((2, 3, 4, 6, 6))
X5 = RNG.standard_normal((2, 3, 4, 6, 5))

UNPOOL = {  # name -> (input, pool(F, x) -> (values, indices), unpool(F, v, i))
    "plain": (X, lambda F, x: F.max_pool3d(x, 2, return_indices=True),
              lambda F, v, i: F.max_unpool3d(v, i, 2)),
    "output_size": (X5, lambda F, x: F.max_pool3d(x, 2, return_indices=True),
                    lambda F, v, i: F.max_unpool3d(v, i, 2, output_size=[2, 3, 4, 6, 5])),
    "overlapping": (X5, lambda F, x: F.max_pool3d(x, 3, stride=2, padding=1, return_indices=True),
                    lambda F, v, i: F.max_unpool3d(v, i, 3, stride=2, padding=1,
                                                   output_size=(4, 6, 5))),
    "unbatched": (X[0], lambda F, x: F.max_pool3d(x, (2, 3, 2), return_indices=True),
                  lambda F, v, i: F.max_unpool3d(v, i, (2, 3, 2))),
}  # fmt: skip

LP = {  # name -> (input, lp_pool3d's arguments)
    "p2": (np.abs(X) + 0.1, (2, 2)),
    "p1.5_strided": (np.abs(X) + 0.1, (1.5, (2, 3, 2), 1)),
    "ceil": (np.abs(X) + 0.1, (3, 2, 2, True)),
    "inf": (X, (float("inf"), 2)),
    "unbatched": (np.abs(X[0]) + 0.1, (2, (1, 2, 2))),
}


def _pooled(m, name):
    arr, pool, _ = UNPOOL[name]
    values, indices = pool(m.nn.functional, m.tensor(arr))
    return values.detach(), indices


@pytest.mark.parametrize("name", sorted(UNPOOL))
def test_max_unpool3d_values_gradients_and_nodes_as_torch(name):
    out = {}
    for m in (engine, torch):
        v, i = _pooled(m, name)
        v = v.clone().requires_grad_()
        y = UNPOOL[name][2](m.nn.functional, v * 1.0, i)
        y.backward(m.tensor(np.random.default_rng(1).standard_normal(tuple(y.shape))))
        out[m] = (y.detach().numpy(), v.grad.numpy(), node_chain(y.grad_fn))
    (ey, eg, en), (ty, tg, tn) = out[engine], out[torch]
    np.testing.assert_array_equal(ey, ty)
    np.testing.assert_array_equal(eg, tg)
    assert en == tn == ["MaxUnpool3DBackward0", "MulBackward0"]


@pytest.mark.parametrize("name", ["plain", "overlapping", "unbatched"])
def test_max_unpool3d_allocations_forward_and_backward_as_torch(name):
    def make(m):
        v, i = _pooled(m, name)
        v = v.float().requires_grad_()
        return forward_backward(m, lambda: UNPOOL[name][2](m.nn.functional, v * 2.0, i))

    assert_steps_as_torch(make)


@pytest.mark.parametrize("name", sorted(LP))
def test_lp_pool3d_values_gradients_and_nodes_as_torch(name):
    arr, args = LP[name]
    out = {}
    for m in (engine, torch):
        x = m.tensor(arr, requires_grad=True)
        y = m.nn.functional.lp_pool3d(x, *args)
        y.backward(m.tensor(np.random.default_rng(2).standard_normal(tuple(y.shape))))
        out[m] = (y.detach().numpy(), x.grad.numpy(), node_chain(y.grad_fn))
    (ey, eg, en), (ty, tg, tn) = out[engine], out[torch]
    np.testing.assert_allclose(ey, ty, rtol=1e-13, atol=1e-14)
    np.testing.assert_allclose(eg, tg, rtol=1e-12, atol=1e-14)
    assert en == tn


def test_lp_pool3d_gradient_against_central_differences():
    x0 = np.abs(RNG.standard_normal((1, 2, 3, 3, 4))) + 0.2
    w = RNG.standard_normal((1, 2, 2, 2, 3))

    def f(a):
        return float(
            (engine.nn.functional.lp_pool3d(engine.tensor(a), 2.5, 2, 1).numpy() * w).sum()
        )

    x = engine.tensor(x0, requires_grad=True)
    (engine.nn.functional.lp_pool3d(x, 2.5, 2, 1) * engine.tensor(w)).sum().backward()
    num = np.zeros_like(x0)
    for idx in np.ndindex(x0.shape):
        d = np.zeros_like(x0)
        d[idx] = 1e-6
        num[idx] = (f(x0 + d) - f(x0 - d)) / 2e-6
    np.testing.assert_allclose(x.grad.numpy(), num, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("name", ["p2", "inf"])
def test_lp_pool3d_allocations_forward_and_backward_as_torch(name):
    arr, args = LP[name]

    def make(m):
        x = m.tensor(arr, dtype=m.float32, requires_grad=True)
        return forward_backward(m, lambda: m.nn.functional.lp_pool3d(x, *args))

    assert_steps_as_torch(make)


def test_modules_as_torch():
    for args, kw in [((2,), {}), ((3,), {"stride": 2, "padding": 1}), (((2, 3, 1),), {})]:
        assert repr(engine.nn.MaxUnpool3d(*args, **kw)) == repr(torch.nn.MaxUnpool3d(*args, **kw))
    for args, kw in [((2, 2), {}), ((1.5, (2, 3, 2)), {"stride": 1, "ceil_mode": True})]:
        assert repr(engine.nn.LPPool3d(*args, **kw)) == repr(torch.nn.LPPool3d(*args, **kw))
    outs = []
    for m in (engine, torch):
        pool, unpool = m.nn.MaxPool3d(2, return_indices=True), m.nn.MaxUnpool3d(2)
        v, i = pool(m.tensor(X))
        outs.append(unpool(v, i).numpy())
        outs.append(m.nn.LPPool3d(2, 2)(m.tensor(np.abs(X))).numpy())
    np.testing.assert_array_equal(outs[0], outs[2])
    np.testing.assert_allclose(outs[1], outs[3], rtol=1e-13)


def test_meta_shapes_and_backward():
    v = engine.ones(2, 3, 2, 4, 4, device="meta", requires_grad=True)
    i = engine.zeros(2, 3, 2, 4, 4, dtype=engine.int64, device="meta")
    y = engine.nn.functional.max_unpool3d(v, i, 2)
    assert tuple(y.shape) == (2, 3, 4, 8, 8) and y.grad_fn.name() == "MaxUnpool3DBackward0"
    y.backward(engine.ones_like(y))
    assert tuple(v.grad.shape) == (2, 3, 2, 4, 4)
    x = engine.ones(2, 3, 4, 4, 4, device="meta", requires_grad=True)
    z = engine.nn.functional.lp_pool3d(x, 2, 2)
    assert tuple(z.shape) == (2, 3, 2, 2, 2)
    z.sum().backward()
    assert tuple(x.grad.shape) == (2, 3, 4, 4, 4)


def _pair(m):
    return m.nn.functional.max_pool3d(m.tensor(X), 2, return_indices=True)


def _raw(m, v, i, size=(4, 6, 6), stride=(2, 2, 2)):
    """torch's max_unpool3d below F's output-size rule (refusals only the kernel makes)."""
    if m is torch:
        return torch._C._nn.max_unpool3d(v, i, size, stride, (0, 0, 0))
    from engine.ops.nn.unpool3d import MaxUnpool3d

    return MaxUnpool3d.apply(v, i, op="max_unpool3d", output_size=size, stride=stride)


@pytest.mark.parametrize(
    "call",
    [
        lambda m: m.nn.functional.max_unpool3d(_pair(m)[0], _pair(m)[1].int(), 2),
        lambda m: m.nn.functional.max_unpool3d(_pair(m)[0], _pair(m)[1][:, :, :1], 2),
        lambda m: m.nn.functional.max_unpool3d(_pair(m)[0][0, 0], _pair(m)[1][0, 0], 2),
        lambda m: m.nn.functional.max_unpool3d(_pair(m)[0][0, 0], _pair(m)[1][0, 0, :1], 2),
        lambda m: m.nn.functional.max_unpool3d(*_pair(m), 2, output_size=(9, 9, 9)),
        lambda m: m.nn.functional.max_unpool3d(*_pair(m), 2, output_size=(4, 4)),
        lambda m: m.nn.functional.max_unpool3d(_pair(m)[0].long(), _pair(m)[1], 2),
        lambda m: m.nn.functional.max_unpool3d(_pair(m)[0][:, :, :0], _pair(m)[1][:, :, :0], 2),
        lambda m: _raw(m, *_pair(m), stride=(0, 2, 2)),
    ],
)
def test_max_unpool3d_refusals_as_torch(call):
    assert_raises_as_torch(call)


def test_an_index_out_of_the_output_is_refused_as_torch():
    # (which invalid index the message names depends on torch's threads: the words around it)
    for m in (engine, torch):
        v, i = _pair(m)
        with pytest.raises(RuntimeError, match=r"^Found an invalid max index: \d+ \(output "):
            m.nn.functional.max_unpool3d(v, i + 1000, 2)


# --- ParameterDict ---------------------------------------------------------------------------
def _pdict(m):
    return m.nn.ParameterDict(
        {"b": m.nn.Parameter(m.zeros(2, 3)), "a": m.ones(1, dtype=m.float64), "c": 3}
    )


def test_parameter_dict_registers_and_prints_as_torch():
    e, t = _pdict(engine), _pdict(torch)
    assert repr(e) == repr(t)
    assert list(e.keys()) == list(t.keys()) == ["a", "b", "c"]  # a plain dict: sorted
    assert [n for n, _ in e.named_parameters()] == [n for n, _ in t.named_parameters()]
    assert isinstance(e["a"], engine.nn.Parameter) and e["c"] == 3
    assert repr(engine.nn.ParameterDict()) == repr(torch.nn.ParameterDict())
    one = [m.nn.ParameterDict({"w": m.nn.Parameter(m.zeros(4))}) for m in (engine, torch)]
    assert repr(one[0]) == repr(one[1])
    sd = [list(m.nn.Sequential(OrderedDict(p=_pdict(m))).state_dict()) for m in (engine, torch)]
    assert sd[0] == sd[1]


def test_parameter_dict_behaves_as_a_dict_as_torch():
    out = []
    for m in (engine, torch):
        d = m.nn.ParameterDict(OrderedDict([("z", m.zeros(1)), ("y", m.zeros(2))]))
        d.update([("x", m.zeros(3))])
        d["w"] = m.nn.Parameter(m.zeros(4))
        steps = [list(d), list(reversed(d)), "y" in d, len(d)]
        steps += [d.pop("z").shape[0], d.popitem()[0], d.setdefault("v", m.zeros(5)).shape[0]]
        steps += [d.get("nope", 7), list(d.copy()), list(d | m.nn.ParameterDict({"u": m.zeros(1)}))]
        d |= m.nn.ParameterDict({"t": m.zeros(1)})
        steps += [list(d), list(d.fromkeys(["q", "r"]))]
        d.clear()
        steps += [len(d), len(list(d.parameters()))]
        out.append(steps)
    assert out[0] == out[1]


@pytest.mark.parametrize(
    "call",
    [
        lambda m: m.nn.ParameterDict({"a": m.zeros(1)})[1],
        lambda m: m.nn.ParameterDict(3),
        lambda m: m.nn.ParameterDict([3]),
        lambda m: m.nn.ParameterDict([("a", m.zeros(1), 1)]),
        lambda m: m.nn.ParameterDict({"a": m.zeros(1)})(m.zeros(1)),
        lambda m: m.nn.ParameterDict({"a": m.zeros(1)})["b"],
    ],
)
def test_parameter_dict_refusals_as_torch(call):
    assert_raises_as_torch(call)


def test_strided_values_and_indices_are_copied_as_torch():
    """torch's kernel reads contiguous copies of a strided input and of its indices (made before
    the output, freed when it returns)."""

    def make(m):
        v, i = m.nn.functional.max_pool3d(m.tensor(X, dtype=m.float32), 2, return_indices=True)
        vt, it, held = v.transpose(3, 4), i.transpose(3, 4), {}

        def forward():
            held["y"] = m.nn.functional.max_unpool3d(vt, it, 2, output_size=(4, 6, 6))

        return (forward,)

    assert_steps_as_torch(make)


def test_backward_through_strided_indices_is_refused_as_torch():
    def call(m):
        v, i = m.nn.functional.max_pool3d(m.tensor(X), 2, return_indices=True)
        vt = v.detach().transpose(3, 4).requires_grad_()
        y = m.nn.functional.max_unpool3d(vt, i.transpose(3, 4), 2, output_size=(4, 6, 6))
        y.sum().backward()

    assert_raises_as_torch(call)
