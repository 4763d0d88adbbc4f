"""Convolution modules as torch 2.13's: their reprs (every argument torch prints), padding_mode
(reflect, replicate, circular: torch's F.pad then an unpadded convolution, values, gradients,
nodes and blocks), and load_state_dict through torch's per-module load pre-hooks (a lazy module
inside a container materializes what it loads)."""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
import pytest

import engine
from tests.conftest import assert_raises_as_torch
from tests.engine.test_memory_vs_torch import assert_steps_as_torch, forward_backward

torch = pytest.importorskip("torch")

CONV_ARGS = [
    {},
    {"padding": 1},
    {"padding": (1, 2, 0)},
    {"stride": 2},
    {"dilation": 2},
    {"groups": 2},
    {"bias": False},
    {"padding": 2, "stride": 2, "dilation": 3, "groups": 2, "bias": False},
]
CONV_ONLY = [
    {"padding": "same"},
    {"padding": "valid"},
    {"padding": 1, "padding_mode": "reflect"},
    {"padding": 1, "padding_mode": "circular", "bias": False},
    {"padding": "same", "padding_mode": "replicate", "dilation": 2},
]
TRANSPOSE_ONLY = [{"output_padding": 1, "stride": 2}, {"output_padding": (1, 0, 1), "stride": 3}]


def _args(kw, nd):
    """A tuple argument written for 3 dims, cut to nd."""
    return {k: v[:nd] if isinstance(v, tuple) else v for k, v in kw.items()}


REPR_CASES = [
    (f"Conv{t}{nd}d", _args(kw, nd))
    for nd in (1, 2, 3)
    for t in ("", "Transpose")
    for kw in CONV_ARGS + (TRANSPOSE_ONLY if t else CONV_ONLY)
]


@pytest.mark.parametrize("name,kw", REPR_CASES, ids=[f"{n}-{kw}" for n, kw in REPR_CASES])
def test_conv_repr_as_torch(name, kw):
    assert repr(getattr(engine.nn, name)(4, 6, 3, **kw)) == repr(
        getattr(torch.nn, name)(4, 6, 3, **kw)
    )


@pytest.mark.parametrize("nd", [1, 2, 3])
def test_lazy_conv_repr_as_torch(nd):
    for kw in ({"padding": 1, "bias": False}, {"stride": 2, "dilation": 2}):
        for kind in ("LazyConv", "LazyConvTranspose"):
            e = getattr(engine.nn, f"{kind}{nd}d")(6, 3, **kw)
            t = getattr(torch.nn, f"{kind}{nd}d")(6, 3, **kw)
            assert repr(e) == repr(t)


PAD_CASES = [
    (nd, mode, pad)
    for nd in (1, 2, 3)
    for mode in ("reflect", "replicate", "circular")
    for pad in (1, "same", (2, 1, 1))
]


@pytest.mark.parametrize("nd,mode,pad", PAD_CASES)
def test_padding_mode_values_gradients_and_nodes_as_torch(nd, mode, pad):
    pad = pad[:nd] if isinstance(pad, tuple) else pad
    x = np.random.default_rng(nd).standard_normal((2, 4) + (5,) * nd)
    out = {}
    for m in (torch, engine):
        conv = getattr(m.nn, f"Conv{nd}d")(4, 6, 3, padding=pad, padding_mode=mode, dtype=m.float64)
        if m is engine:
            conv.load_state_dict({k: engine.tensor(v.numpy()) for k, v in out[torch][3].items()})
        xt = m.tensor(x, requires_grad=True)
        y = conv(xt)
        y.backward(m.tensor(np.random.default_rng(5).standard_normal(tuple(y.shape))))
        out[m] = (y.detach().numpy(), xt.grad.numpy(), conv.weight.grad.numpy(), conv.state_dict())
        out[m] += ([y.grad_fn.name(), y.grad_fn.next_functions[0][0].name()],)
    for a, b in zip(out[engine][:3], out[torch][:3], strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
    if nd > 1:  # (the engine's conv1d is unsqueeze, conv2d, squeeze: its own nodes)
        assert out[engine][4] == [n.replace("torch::autograd::", "") for n in out[torch][4]]


@pytest.mark.parametrize("nd,mode", [(2, "reflect"), (2, "circular"), (3, "replicate")])
def test_padding_mode_blocks_forward_and_backward_as_torch(nd, mode):
    x = np.random.default_rng(0).standard_normal((2, 3) + (6,) * nd)

    def make(m):
        m.manual_seed(0)
        conv = getattr(m.nn, f"Conv{nd}d")(3, 4, 3, padding=1, padding_mode=mode, dtype=m.float64)
        xt = m.tensor(x, requires_grad=True)
        return forward_backward(m, lambda: conv(xt))

    assert_steps_as_torch(make)


@pytest.mark.parametrize(
    "call",
    [
        lambda m: m.nn.Conv2d(4, 6, 3, padding_mode="mirror"),
        lambda m: m.nn.Conv1d(4, 6, 3, padding_mode="zero"),
        lambda m: m.nn.Conv3d(4, 6, 3, padding_mode="reflection"),
        lambda m: m.nn.ConvTranspose2d(4, 6, 3, padding_mode="reflect"),
        lambda m: m.nn.ConvTranspose3d(4, 6, 3, padding_mode="circular"),
    ],
)
def test_padding_mode_refusals_as_torch(call):
    """Torch's type and words; the set of modes in the message is a set literal whose order
    comes from the .pyc it was compiled into (a frozenset constant, rebuilt in the order
    marshal stored it under the compiling process's hash seed), so it is compared as a set."""
    import re

    import torch

    def refusal(m):
        with pytest.raises(Exception) as info:
            call(m)
        text = str(info.value)
        found = re.search(r"\{[^}]*\}", text)
        modes = sorted(re.findall(r"'(\w+)'", found.group(0))) if found else None
        return type(info.value), re.sub(r"\{[^}]*\}", "{...}", text), modes

    assert refusal(engine) == refusal(torch)


# --- load_state_dict and its pre-hooks -------------------------------------------------------
def _trained(m):
    m.manual_seed(0)
    return m.nn.Sequential(m.nn.Linear(3, 4, dtype=m.float64), m.nn.ReLU())


def _to(m, sd):
    return OrderedDict((k, m.tensor(v.numpy())) for k, v in sd.items())


def test_a_container_of_a_lazy_module_loads_as_torch():
    sd = _trained(torch).state_dict()
    x = np.random.default_rng(0).standard_normal((2, 3))
    out = {}
    for m in (torch, engine):
        model = m.nn.Sequential(m.nn.LazyLinear(4, dtype=m.float64), m.nn.ReLU())
        result = model.load_state_dict(_to(m, sd))
        loaded = (list(result.missing_keys), list(result.unexpected_keys))
        still_lazy = type(model[0]).__name__
        y = model(m.tensor(x))
        out[m] = (loaded, still_lazy, tuple(model[0].weight.shape), type(model[0]).__name__)
        out[m] += (model[0].in_features, y.detach().numpy(), repr(model))
    for a, b in zip(out[engine], out[torch], strict=True):
        if isinstance(a, np.ndarray):
            np.testing.assert_allclose(a, b, rtol=1e-13, atol=1e-15)
        else:
            assert a == b
    assert out[engine][1] == "LazyLinear" and out[engine][3] == "Linear"


def test_a_lazy_module_loads_an_uninitialized_one_and_stays_lazy_as_torch():
    for m in (torch, engine):
        target = m.nn.Sequential(m.nn.LazyLinear(4))
        result = target.load_state_dict(m.nn.Sequential(m.nn.LazyLinear(4)).state_dict())
        assert (list(result.missing_keys), list(result.unexpected_keys)) == ([], [])
        assert repr(target[0].weight) == "<UninitializedParameter>"


def test_missing_and_unexpected_keys_through_a_lazy_module_as_torch():
    sd = _trained(torch).state_dict()
    extra = {"x": torch.zeros(1), "1.y": torch.zeros(1), "0.z.w": torch.zeros(1)}
    out = []
    for m in (torch, engine):
        model = m.nn.Sequential(m.nn.LazyLinear(4), m.nn.ReLU())
        result = model.load_state_dict(_to(m, {**sd, **extra}), strict=False)
        out.append((list(result.missing_keys), list(result.unexpected_keys)))
    assert out[0] == out[1]
    assert_raises_as_torch(
        lambda m: m.nn.Sequential(m.nn.LazyLinear(4)).load_state_dict({"0.weight": m.zeros(4, 3)})
    )
    assert_raises_as_torch(
        lambda m: m.nn.Sequential(m.nn.LazyLinear(4)).load_state_dict(
            {"0.weight": m.zeros(4, 3), "0.bias": m.zeros(4), "0.extra": m.zeros(1)}
        )
    )


def test_load_state_dict_pre_hooks_run_per_module_before_its_entries_as_torch():
    calls = {}
    for m in (torch, engine):
        model = m.nn.Sequential(m.nn.Linear(3, 4), m.nn.Sequential(m.nn.Linear(4, 2)))
        seen = []

        def hook(module, state_dict, prefix, *rest, seen=seen):
            seen.append((type(module).__name__, prefix, sorted(state_dict)))
            if prefix == "1.0.":  # a hook may rewrite what its module loads
                state_dict[prefix + "bias"] = state_dict[prefix + "bias"] * 0 + 7

        model.register_load_state_dict_pre_hook(hook)
        handle = model[1][0].register_load_state_dict_pre_hook(hook)
        model.load_state_dict(_to(m, m.nn.Sequential(m.nn.Linear(3, 4),
                                                     m.nn.Sequential(m.nn.Linear(4, 2))).state_dict()))  # fmt: skip
        seen.append(model[1][0].bias.detach().numpy().tolist())
        handle.remove()
        model.load_state_dict(model.state_dict())
        calls[m] = seen
    assert calls[engine] == calls[torch]


def test_parameter_list_repr_as_torch():
    for shapes in ([(2, 3)], [(2, 3), (4,)], []):
        e, t = (
            m.nn.ParameterList([m.nn.Parameter(m.zeros(*s, dtype=m.float64)) for s in shapes])
            for m in (engine, torch)
        )
        assert repr(e) == repr(t)


def test_load_state_dict_result_prints_as_torch():
    for m in (engine, torch):
        model = m.nn.Linear(2, 2)
        full = model.load_state_dict(model.state_dict())
        partial = model.load_state_dict({"weight": model.weight.detach(), "x": m.zeros(1)}, False)
        if m is engine:
            ours = (repr(full), repr(partial))
        else:
            assert ours == (repr(full), repr(partial))
