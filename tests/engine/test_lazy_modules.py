"""Lazy modules (LazyLinear, LazyConv*/LazyConvTranspose*, LazyBatchNorm*/LazyInstanceNorm*)
against torch 2.13: what they hold before the first call (UninitializedParameter/Buffer in
parameters(), buffers() and state_dict(), reprs, refusals), the first call's blocks (the
materialized parameters in torch's order, then the forward's own) and a second call's, the
class they become, and values and gradients once both hold the same parameters."""

from __future__ import annotations

import numpy as np
import pytest

import engine
from tests.conftest import assert_raises_as_torch
from tests.engine.test_memory_vs_torch import (
    assert_steps_as_torch,
    engine_sequence,
    torch_sequence,
)

torch = pytest.importorskip("torch")

CASES = {  # name -> (make(m, dtype), input shape)
    "linear": (lambda m, dt: m.nn.LazyLinear(6, dtype=dt), (4, 5)),
    "linear_nobias_3d": (lambda m, dt: m.nn.LazyLinear(3, bias=False, dtype=dt), (2, 4, 5)),
    "conv1d": (lambda m, dt: m.nn.LazyConv1d(4, 3, stride=2, dtype=dt), (2, 3, 9)),
    "conv2d": (lambda m, dt: m.nn.LazyConv2d(4, 3, stride=2, dtype=dt), (2, 3, 8, 8)),
    "conv2d_groups": (lambda m, dt: m.nn.LazyConv2d(4, 3, groups=2, dtype=dt), (1, 4, 6, 6)),
    "conv3d": (lambda m, dt: m.nn.LazyConv3d(2, 2, dtype=dt), (1, 3, 4, 4, 4)),
    "conv_t1d": (lambda m, dt: m.nn.LazyConvTranspose1d(4, 3, stride=2, dtype=dt), (2, 3, 7)),
    "conv_t2d": (lambda m, dt: m.nn.LazyConvTranspose2d(2, 3, dtype=dt), (2, 3, 5, 5)),
    "conv_t3d": (lambda m, dt: m.nn.LazyConvTranspose3d(2, 2, dtype=dt), (1, 3, 3, 3, 3)),
    "batch_norm1d": (lambda m, dt: m.nn.LazyBatchNorm1d(dtype=dt), (8, 16)),
    "batch_norm2d": (lambda m, dt: m.nn.LazyBatchNorm2d(dtype=dt), (4, 16, 5, 5)),
    "batch_norm3d": (lambda m, dt: m.nn.LazyBatchNorm3d(affine=False, dtype=dt), (2, 16, 3, 4, 4)),
    "instance_norm1d": (lambda m, dt: m.nn.LazyInstanceNorm1d(dtype=dt), (2, 16, 10)),
    "instance_norm2d": (
        lambda m, dt: m.nn.LazyInstanceNorm2d(track_running_stats=False, dtype=dt),
        (2, 16, 5, 5),
    ),
    "instance_norm3d": (lambda m, dt: m.nn.LazyInstanceNorm3d(dtype=dt), (2, 16, 3, 3, 3)),
}


def _x(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


@pytest.mark.parametrize("name", sorted(CASES))
def test_before_the_first_call_as_torch(name):
    make, _ = CASES[name]
    e, t = make(engine, engine.float64), make(torch, torch.float64)
    assert repr(e) == repr(t)
    assert [repr(p) for p in e.parameters()] == [repr(p) for p in t.parameters()]
    assert [repr(b) for b in e.buffers()] == [repr(b) for b in t.buffers()]
    es, ts = e.state_dict(), t.state_dict()
    assert list(es) == list(ts)
    assert [repr(v) for v in es.values()] == [repr(v) for v in ts.values()]
    for ep, tp in zip(e.parameters(), t.parameters(), strict=True):
        assert str(ep.dtype).split(".")[-1] == str(tp.dtype).split(".")[-1]
        assert ep.requires_grad == tp.requires_grad
    assert_raises_as_torch(lambda m: next(iter(make(m, None).parameters())).shape)


@pytest.mark.parametrize("name", sorted(CASES))
def test_first_call_becomes_the_plain_module_and_values_match(name):
    make, shape = CASES[name]
    mods, outs, grads = {}, {}, {}
    for m in (torch, engine):
        mod = make(m, m.float64)
        params = list(mod.parameters())  # torch's optimizers accept uninitialized parameters
        opt = m.optim.SGD(params, lr=0.1) if params else None
        mod(m.tensor(_x(shape)))
        mods[m] = (mod, opt)
    (e, eopt), (t, topt) = mods[engine], mods[torch]
    assert type(e).__name__ == type(t).__name__ and repr(e) == repr(t)
    assert not hasattr(e, "_initialize_hook")
    assert [type(p).__name__ for p in e.parameters()] == ["Parameter"] * len(list(t.parameters()))
    assert [type(b).__name__ for b in e.buffers()] == ["Tensor"] * len(list(t.buffers()))
    assert {k: tuple(v.shape) for k, v in e.state_dict().items()} == {
        k: tuple(v.shape) for k, v in t.state_dict().items()
    }
    e.load_state_dict({k: engine.tensor(v.numpy()) for k, v in t.state_dict().items()})
    for m, mod, opt in ((engine, e, eopt), (torch, t, topt)):  # the second call, and a step
        x = m.tensor(_x(shape, 1), requires_grad=True)
        y = mod(x)
        y.backward(m.tensor(_x(tuple(y.shape), 2)))
        outs[m] = y.detach().numpy()
        grads[m] = [x.grad.numpy()] + [p.grad.numpy() for p in mod.parameters()]
        if opt is not None:
            opt.step()
            grads[m] += [p.detach().numpy() for p in mod.parameters()]
    np.testing.assert_allclose(outs[engine], outs[torch], rtol=1e-12, atol=1e-12)
    for a, b in zip(grads[engine], grads[torch], strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-11, atol=1e-12)


# The plain module's own blocks differ from torch's profiler here (not the lazy part): Conv1d/
# Conv2d/ConvTranspose2d keep their im2col columns as uncharged scratch, and torch's BatchNorm1d on
# a 2-D input shows a save_mean/save_invstd pair the engine does not make.
PLAIN_DIFFERS = {"conv1d", "conv2d", "conv2d_groups", "conv_t2d", "batch_norm1d"}


def _program(name, lazy=True):
    make, shape = CASES[name]

    def program(m):
        mod = make(m, m.float64)  # (float32 convolutions run oneDNN in torch: not modelled)
        x = m.tensor(_x(shape), requires_grad=True)
        if not lazy:
            mod(x)
        held = {}

        def first():  # materialize weight, bias (, running stats), then the forward's blocks
            held["y"] = mod(x)

        def backward():
            held["y"].backward(m.ones_like(held["y"]))

        def second():
            held["y2"] = mod(x)

        return first, backward, second

    return program


@pytest.mark.parametrize("name", sorted(set(CASES) - PLAIN_DIFFERS))
def test_first_and_second_calls_allocate_as_torch(name):
    assert_steps_as_torch(_program(name))


@pytest.mark.parametrize("name", sorted(PLAIN_DIFFERS))
def test_first_call_materializes_as_torch_before_the_plain_forward(name):
    """The first call's blocks are the materialized tensors, in torch's sizes and order, then
    exactly what the plain module's call makes."""
    seqs = {}
    for m, seq in ((torch, torch_sequence), (engine, engine_sequence)):
        lazy_first = seq(_program(name)(m)[0])
        plain_first = seq(_program(name, lazy=False)(m)[0])
        k = len(lazy_first) - len(plain_first)
        assert k > 0 and all(b.startswith("+") for b in lazy_first[:k])
        seqs[m] = lazy_first[:k]
    assert seqs[engine] == seqs[torch]


def test_meta_device_materializes_shapes():
    fc = engine.nn.LazyLinear(7, device="meta")
    conv = engine.nn.LazyConv2d(4, 3, device="meta")
    bn = engine.nn.LazyBatchNorm2d(device="meta")
    y = bn(conv(engine.empty(2, 3, 8, 8, device="meta")))
    z = fc(y.flatten(1))
    assert tuple(conv.weight.shape) == (4, 3, 3, 3) and tuple(bn.running_mean.shape) == (4,)
    assert tuple(z.shape) == (2, 7) and z.device.type == "meta"


def test_cast_before_the_first_call_stays_uninitialized_as_torch():
    kinds = {}
    for m in (torch, engine):
        bn = m.nn.LazyBatchNorm1d().double()
        kinds[m] = [
            (type(t).__name__, str(t.dtype).split(".")[-1]) for t in bn.state_dict().values()
        ]
        bn(m.ones(4, 3, dtype=m.float64))
        kinds[m] += [str(t.dtype).split(".")[-1] for t in bn.state_dict().values()]
    assert kinds[engine] == kinds[torch]


def test_load_state_dict_into_lazy_module_as_torch():
    shapes = {}
    for m in (torch, engine):
        fc = m.nn.LazyLinear(3)
        fc.load_state_dict(m.nn.Linear(4, 3).state_dict())
        before = (type(fc).__name__, tuple(fc.weight.shape), fc.in_features)
        fc(m.ones(2, 4))
        shapes[m] = before + (type(fc).__name__, fc.in_features)
    assert shapes[engine] == shapes[torch] == ("LazyLinear", (3, 4), 0, "Linear", 4)


@pytest.mark.parametrize(
    "call",
    [
        lambda m: m.nn.LazyConv2d(4, 3)(m.ones(2, 5, 5, 5, 5)),
        lambda m: m.nn.LazyConv1d(4, 3)(m.ones(5)),
        lambda m: m.nn.LazyConv2d(4, 3, groups=2)(m.ones(2, 5, 5, 5)),
        lambda m: m.nn.Linear(4, 3).load_state_dict(m.nn.LazyLinear(3).state_dict()),
        lambda m: m.nn.LazyBatchNorm2d()(m.ones(2, 3, 4)),
    ],
)
def test_refusals_as_torch(call):
    assert_raises_as_torch(call)
