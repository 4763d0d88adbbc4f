"""Optimizers' foreach and fused updates: PyTorch's allocations, in order, and its values.

PyTorch has three implementations of most optimizers (single-tensor, foreach, fused), picks
foreach by default on cuda and single-tensor on cpu, and their peaks differ by a whole set of
parameter-sized temporaries. torch runs foreach=True and fused=True on cpu too, so the CPU
profiler is the oracle: each step's allocation and free events, sizes in order, matched by
address, equal the engine's (PyTorch wraps Python scalars in 4/8-byte cpu tensors the engine
does not make; those are left out on both sides, as in test_autograd_memory_parity.py).
"""

from __future__ import annotations

import types

import numpy as np
import pytest

import engine
from engine.allocator.events import MemoryObserver
from engine.allocator.tracked import get_allocator
from engine.optim.optimizer import by_device_and_dtype, implementation
from tests.engine.test_autograd_memory_parity import torch_memory_events

SCALAR = 8  # events of at most this many bytes are a wrapped Python scalar or a step counter


class Events(MemoryObserver):
    def __init__(self):
        self.events: list[int] = []

    def on_alloc(self, event):
        self.events.append(event.requested)

    def on_free(self, event):
        self.events.append(-event.requested)


def engine_events(fn) -> list[int]:
    seen = Events()
    with get_allocator("cpu").observing(seen):
        fn()
    return [n for n in seen.events if abs(n) > SCALAR]


def torch_events(fn) -> list[int]:
    """+bytes for an allocation, -bytes for the free of a block allocated inside the region."""
    live: dict[int, list[int]] = {}
    out = []
    for e in torch_memory_events(fn):
        n, addr = e["args"]["Bytes"], e["args"]["Addr"]
        if n > 0:
            live.setdefault(addr, []).append(n)
            out.append(n)
        elif live.get(addr):
            out.append(-live[addr].pop())
    return [n for n in out if abs(n) > SCALAR]


SHAPES = [(24, 16), (24,), (8, 24), (8,)]  # two Linear layers' weights and biases


def _model(m, seed=0, dtype=np.float32):
    rng = np.random.default_rng(seed)
    params = [m.tensor(rng.standard_normal(s).astype(dtype), requires_grad=True) for s in SHAPES]
    x = m.tensor(rng.standard_normal((5, 16)).astype(dtype))

    def loss():
        h = (x @ params[0].t() + params[1]).tanh()
        return ((h @ params[2].t() + params[3]) ** 2).mean()

    return params, loss


CASES = {
    "Adam": dict(),
    "Adam wd": dict(weight_decay=0.1),
    "Adam maximize wd": dict(weight_decay=0.1, maximize=True),
    "Adam amsgrad": dict(amsgrad=True),
    "AdamW": dict(),
    "AdamW maximize amsgrad": dict(maximize=True, amsgrad=True),
    "SGD": dict(lr=0.1),
    "SGD momentum wd": dict(lr=0.1, momentum=0.9, weight_decay=0.01),
    "SGD nesterov maximize": dict(lr=0.1, momentum=0.9, nesterov=True, maximize=True),
    "RMSprop": dict(),
    "RMSprop centered momentum wd": dict(centered=True, momentum=0.5, weight_decay=0.1),
    "Adagrad": dict(),
    "Adagrad wd maximize": dict(weight_decay=0.1, maximize=True, lr_decay=0.01),
}


def _optimizer(m, case, params, **flags):
    name = case.split()[0]
    return getattr(m.optim, name)(params, **CASES[case], **flags)


def _steps(m, case, dtype=np.float32, **flags):
    """(params, optimizer, gradients): `case`, and a function making fresh gradients."""
    params, loss = _model(m, dtype=dtype)
    opt = _optimizer(m, case, params, **flags)

    def grads():
        opt.zero_grad(set_to_none=True)
        loss().backward()

    return params, opt, grads


IMPLS = [dict(foreach=False), dict(foreach=True), dict(fused=True)]
HAS_FUSED = ("Adam", "AdamW", "SGD", "Adagrad")


def _impl_cases():
    for case in CASES:
        for flags in IMPLS:
            if "fused" in flags and case.split()[0] not in HAS_FUSED:
                continue
            name = "single" if flags == dict(foreach=False) else next(iter(flags))
            yield pytest.param(case, flags, id=f"{case}-{name}")


@pytest.mark.torch
@pytest.mark.parametrize("case,flags", list(_impl_cases()))
def test_step_allocations_match_pytorch_in_order(case, flags, torch):
    """The first step (state made) and the second (state there) of each implementation."""
    got, want = [], []
    for m, events, out in ((engine, engine_events, got), (torch, torch_events, want)):
        _, opt, grads = _steps(m, case, **flags)
        for _ in range(2):
            grads()
            out.append(events(opt.step))
    assert got == want


@pytest.mark.torch
@pytest.mark.parametrize("case,flags", list(_impl_cases()))
def test_values_match_pytorch(case, flags, torch):
    """Three steps in float64: parameters and every state tensor (centered RMSprop's
    square_avg - grad_avg**2 cancels: float32 rounding alone moves it by 1e-4)."""
    results = {}
    for m in (engine, torch):
        params, opt, grads = _steps(m, case, np.float64, **flags)
        for _ in range(3):
            grads()
            opt.step()
        state = [
            {k: np.asarray(v.detach().numpy()) for k, v in opt.state[p].items() if k != "step"}
            for p in params
        ]
        results[m.__name__] = ([p.detach().numpy().copy() for p in params], state)
    (e_params, e_state), (t_params, t_state) = results["engine"], results["torch"]
    for e, t in zip(e_params, t_params, strict=True):
        np.testing.assert_allclose(e, t, rtol=1e-10, atol=1e-12)
    for e, t in zip(e_state, t_state, strict=True):
        assert e.keys() == t.keys()
        for k in e:
            np.testing.assert_allclose(e[k], t[k], rtol=1e-10, atol=1e-12, err_msg=k)


def test_foreach_peak_by_hand():
    """Adam's foreach step holds the square roots of every exp_avg_sq at once; the
    single-tensor step a parameter's sqrt and quotient, while the previous parameter's denom is
    still alive (torch's loop rebinds it only then); fused nothing."""
    peaks = {}
    for impl in ("single", "foreach", "fused"):
        params, loss = _model(engine)
        order = [params[2], params[0], params[1], params[3]]  # a weight after a weight
        flags = {"single": dict(foreach=False), "foreach": dict(foreach=True)}.get(
            impl, dict(fused=True)
        )
        opt = engine.optim.Adam(order, **flags)
        loss().backward()
        opt.step()  # state made
        loss().backward()
        base = engine.memory.memory_allocated("cpu")
        engine.memory.reset_peak_memory_stats("cpu")
        opt.step()
        peaks[impl] = engine.memory.max_memory_allocated("cpu") - base
    sizes = [4 * int(np.prod(p.shape)) for p in order]  # 768, 1536, 96, 32 bytes
    previous = [0] + sizes[:-1]
    assert peaks["single"] == max(b + 2 * n for b, n in zip(previous, sizes, strict=True)) == 3840
    assert peaks["foreach"] == sum(sizes)
    assert peaks["fused"] == 0


def test_default_is_pytorchs_choice():
    """foreach=None, fused=None: foreach when every parameter is on cuda, else single-tensor."""
    cpu = [engine.zeros(2)]
    meta = [engine.zeros(2, device="meta")]
    # a cuda parameter as the rule reads it (no GPU here: tests/engine/test_cuda.py has real ones)
    cuda = [types.SimpleNamespace(device=types.SimpleNamespace(type="cuda"))]
    group = {"foreach": None, "fused": None}
    assert implementation(group, cuda) == "foreach"
    assert implementation(group, cuda + cpu) == "single"
    assert implementation({"foreach": False, "fused": None}, cuda) == "single"
    assert implementation(group, cpu) == "single"
    assert implementation(group, meta) == "single"
    assert implementation({"foreach": True, "fused": None}, cpu) == "foreach"
    assert implementation({"foreach": None, "fused": True}, cpu) == "fused"
    assert implementation({"foreach": False, "fused": False}, cpu) == "single"
    assert implementation({**group, "differentiable": True}, cpu) == "single"


def test_fused_step_counters_live_on_the_parameters_device():
    assert engine.memory.memory_allocated("meta") == 0
    engine.memory.set_allocator_model("caching", device="meta")
    try:
        p = engine.zeros(1000, device="meta", requires_grad=True)
        opt = engine.optim.AdamW([p], fused=True)
        p.grad = engine.zeros(1000, device="meta")
        before = engine.memory.memory_allocated("meta")
        engine.memory.reset_peak_memory_stats("meta")
        opt.step()
        # exp_avg, exp_avg_sq (4000 bytes: 4096-byte blocks) and the 0-d step (a 512-byte block)
        assert engine.memory.memory_allocated("meta") - before == 2 * 4096 + 512
        assert engine.memory.max_memory_allocated("meta") - before == 2 * 4096 + 512
        assert opt.state[p]["step"].device.type == "meta"
        assert opt.state[p]["exp_avg"].shape == (1000,)
        del opt, p
    finally:
        engine.memory.set_allocator_model("exact", device="meta")


def test_groups_by_device_and_dtype_in_order_of_first_appearance():
    a, b = engine.zeros(2), engine.zeros(2, dtype=engine.float64)
    c, d = engine.zeros(3), engine.zeros(3, device="meta")
    groups = by_device_and_dtype([a, b, c, d], ["A", "B", "C", "D"])
    assert [
        [t is x for t, x in zip(g[0], ts, strict=True)]
        for g, ts in zip(groups, [[a, c], [b], [d]], strict=True)
    ] == [[True, True], [True], [True]]
    assert [g[1] for g in groups] == [["A", "C"], ["B"], ["D"]]


@pytest.mark.parametrize(
    "make,message",
    [
        (lambda p: engine.optim.Adam(p, foreach=True, fused=True), "cannot be `True` together"),
        (lambda p: engine.optim.SGD(p, fused=True, differentiable=True), "does not support"),
        (lambda p: engine.optim.AdamW(p, capturable=True), "capturable=True"),
        (lambda p: engine.optim.RMSprop(p, differentiable=True), "differentiable=True"),
        (lambda p: engine.optim.Adagrad(p, fused=True, foreach=True), "cannot be `True`"),
    ],
)
def test_flags_pytorch_refuses_or_the_engine_does_not_model(make, message):
    with pytest.raises((RuntimeError, NotImplementedError), match=message):
        make([engine.zeros(2, requires_grad=True)])


def test_fused_refuses_an_integer_parameter_as_pytorch_does():
    p = engine.zeros(2, dtype=engine.int64)
    opt = engine.optim.SGD([p], lr=0.1, fused=True)
    p.grad = engine.zeros(2, dtype=engine.int64)
    with pytest.raises(RuntimeError, match="requires all the params to be floating point"):
        opt.step()


# --- engine._foreach_*: torch's names, for user code (an EMA of a model's parameters) ---------
def _lists(m, seed=3):
    rng = np.random.default_rng(seed)
    make = [m.tensor(rng.standard_normal(s).astype(np.float32)) for s in SHAPES]
    other = [m.tensor((np.abs(rng.standard_normal(s)) + 0.5).astype(np.float32)) for s in SHAPES]
    return make, other


FOREACH_CALLS = {
    "add_ list alpha": lambda m, a, b: m._foreach_add_(a, b, alpha=0.5),
    "add_ scalar": lambda m, a, b: m._foreach_add_(a, 2.0),
    "add scalars": lambda m, a, b: m._foreach_add(a, [1.0, 2.0, 3.0, 4.0]),
    "sub list": lambda m, a, b: m._foreach_sub(a, b, alpha=2),
    "sub_ scalar": lambda m, a, b: m._foreach_sub_(a, 1.5),
    "mul_ scalars": lambda m, a, b: m._foreach_mul_(a, [1.0, 2.0, 3.0, 4.0]),
    "mul scalar": lambda m, a, b: m._foreach_mul(a, 3.0),
    "div list": lambda m, a, b: m._foreach_div(a, [2.0, 4.0, 8.0, 16.0]),
    "div_ scalar": lambda m, a, b: m._foreach_div_(a, 4.0),
    "neg": lambda m, a, b: m._foreach_neg(a),
    "neg_": lambda m, a, b: m._foreach_neg_(a),
    "sqrt": lambda m, a, b: m._foreach_sqrt(b),
    "sqrt_": lambda m, a, b: m._foreach_sqrt_(b),
    "lerp_ (EMA)": lambda m, a, b: m._foreach_lerp_(a, b, 0.001),
    "maximum_": lambda m, a, b: m._foreach_maximum_(a, b),
    "addcmul": lambda m, a, b: m._foreach_addcmul(a, b, b, 0.5),
    "addcmul_ scalars": lambda m, a, b: m._foreach_addcmul_(a, b, b, [1.0, 2.0, 3.0, 4.0]),
    "addcdiv_": lambda m, a, b: m._foreach_addcdiv_(a, b, b, 0.25),
    "zero_": lambda m, a, b: m._foreach_zero_(a),
    "copy_": lambda m, a, b: m._foreach_copy_(a, b),
    "norm": lambda m, a, b: m._foreach_norm(a),
}


@pytest.mark.torch
@pytest.mark.parametrize("name", list(FOREACH_CALLS))
def test_foreach_functions_match_pytorch(name, torch):
    """Values (the lists written in place, or returned) and the allocations, in order."""
    got, events = {}, {}
    for m, record in ((engine, engine_events), (torch, torch_events)):
        a, b = _lists(m)
        box = {}

        def call(m=m, a=a, b=b, box=box):
            box["out"] = FOREACH_CALLS[name](m, a, b)

        events[m.__name__] = record(call)
        out = box["out"]
        values = out if out is not None else a if "sqrt_" not in name else b
        got[m.__name__] = [np.asarray(v.numpy()) for v in values]
    assert events["engine"] == events["torch"]
    for e, t in zip(got["engine"], got["torch"], strict=True):
        np.testing.assert_allclose(e, t, rtol=1e-6, atol=1e-7)


def test_foreach_names_are_torchs_and_unknown_ones_fail():
    assert engine._foreach_lerp_ is engine._foreach_lerp_
    with pytest.raises(AttributeError, match="_foreach_frobnicate"):
        engine._foreach_frobnicate  # noqa: B018


# --- a tensor learning rate (lr=torch.tensor(1e-3)) ---------------------------------------------
@pytest.mark.torch
@pytest.mark.parametrize(
    "name,flags",
    [
        ("Adam", {}),
        ("AdamW", {}),
        ("Adam", {"fused": True}),
        ("SGD", {"momentum": 0.9}),
        ("SGD", {"momentum": 0.9, "fused": True}),
        ("RMSprop", {}),
        ("Adagrad", {}),
    ],
)
def test_a_tensor_lr_updates_as_pytorch(name, flags, torch):
    got = {}
    for m in (engine, torch):
        p = m.tensor(np.array([1.0, 2.0, -1.5], np.float32), requires_grad=True)
        opt = getattr(m.optim, name)([p], lr=m.tensor(0.1), **flags)
        for _ in range(3):
            p.grad = m.tensor(np.array([1.0, -0.5, 0.25], np.float32))
            opt.step()
        got[m.__name__] = p.detach().numpy()
    np.testing.assert_allclose(got["engine"], got["torch"], rtol=1e-6)


@pytest.mark.torch
def test_a_tensor_lr_refuses_foreach_as_pytorch(torch):
    for m in (engine, torch):
        with pytest.raises(ValueError, match="lr as a Tensor is not supported"):
            m.optim.Adam([m.zeros(2, requires_grad=True)], lr=m.tensor(0.1), foreach=True)
    group = {"foreach": None, "fused": None, "lr": engine.tensor(0.1)}
    cuda = [types.SimpleNamespace(device=types.SimpleNamespace(type="cuda"))]
    assert implementation(group, cuda) == "single"  # torch does not flip foreach on for it
