"""Padding modules (over F.pad), pixel_shuffle / pixel_unshuffle, hardshrink / softshrink and
Unflatten against torch 2.13: values, gradients, node names (ReflectionPad2DBackward0 ...),
the blocks its CPU profiler shows forward and backward, reprs and refusals."""

from __future__ import annotations

import numpy as np
import pytest

import engine
from tests.conftest import assert_raises_as_torch
from tests.engine.test_memory_vs_torch import assert_steps_as_torch, forward_backward

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(13)
X4 = RNG.standard_normal((2, 8, 16, 16))
X3 = RNG.standard_normal((4, 8, 40))
X5 = RNG.standard_normal((1, 2, 6, 7, 8))

CASES = {  # name -> (input, call(m, x))
    "reflect_2d": (X4, lambda m, x: m.nn.ReflectionPad2d(2)(x)),
    "reflect_1d": (X3, lambda m, x: m.nn.ReflectionPad1d((3, 1))(x)),
    "reflect_3d": (X5, lambda m, x: m.nn.ReflectionPad3d(1)(x)),
    "replicate_2d": (X4, lambda m, x: m.nn.ReplicationPad2d((1, 2, 0, 3))(x)),
    "replicate_1d": (X3, lambda m, x: m.nn.ReplicationPad1d(2)(x)),
    "replicate_3d": (X5, lambda m, x: m.nn.ReplicationPad3d((1, 0, 2, 1, 0, 1))(x)),
    "zero_2d": (X4, lambda m, x: m.nn.ZeroPad2d((1, 2, 3, 4))(x)),
    "constant_1d": (X3, lambda m, x: m.nn.ConstantPad1d(3, 2.5)(x)),
    "constant_crop": (X4, lambda m, x: m.nn.ConstantPad2d((-1, 2, 0, -3), 1.0)(x)),
    "pixel_shuffle": (X4, lambda m, x: m.nn.PixelShuffle(2)(x)),
    "pixel_unshuffle": (X4, lambda m, x: m.nn.PixelUnshuffle(4)(x)),
    "pixel_shuffle_3d_input": (X4[0], lambda m, x: m.nn.functional.pixel_shuffle(x, 2)),
    "hardshrink": (X4, lambda m, x: m.nn.Hardshrink(0.7)(x)),
    "softshrink": (X4, lambda m, x: m.nn.Softshrink(0.4)(x)),
    "unflatten": (X4, lambda m, x: m.nn.Unflatten(1, (2, 4))(x)),
    "circular_2d": (X4, lambda m, x: m.nn.CircularPad2d((1, 2, 3, 1))(x)),
    "circular_1d": (X3, lambda m, x: m.nn.CircularPad1d(3)(x)),
    "circular_3d": (X5, lambda m, x: m.nn.CircularPad3d((1, 0, 2, 1, 0, 1))(x)),
    "circular_crop": (X4, lambda m, x: m.nn.functional.pad(x, (-1, 2, 3, -2), mode="circular")),
    "circular_unbatched": (X4[0], lambda m, x: m.nn.functional.pad(x, (2, 2, 1, 1), "circular")),
}


def _node_name(fn):
    """torch names its own autograd nodes torch::autograd::CopySlices ..., the engine
    CopySlices ..."""
    return fn.name().removeprefix("torch::autograd::")


def _run(m, name, dtype=np.float64):
    arr, call = CASES[name]
    x = m.tensor(arr.astype(dtype), requires_grad=True)
    y = call(m, x) * 1.5
    y.backward(m.tensor(np.random.default_rng(2).standard_normal(tuple(y.shape)).astype(dtype)))
    node = y.grad_fn.next_functions[0][0]
    return y.detach().numpy(), x.grad.numpy(), _node_name(node)


@pytest.mark.parametrize("name", sorted(CASES))
def test_values_gradients_and_node_as_torch(name):
    (ey, eg, en), (ty, tg, tn) = _run(engine, name), _run(torch, name)
    np.testing.assert_array_equal(ey, ty)
    np.testing.assert_allclose(eg, tg, rtol=1e-13, atol=1e-14)
    assert en == tn


@pytest.mark.parametrize("name", sorted(CASES))
def test_allocations_forward_and_backward_as_torch(name):
    arr, call = CASES[name]

    def make(m):
        x = m.tensor(arr.astype(np.float32), requires_grad=True)
        return forward_backward(m, lambda: call(m, x) * 1.5)

    assert_steps_as_torch(make)


def test_padding_module_reprs_as_torch():
    for name, args in [
        ("ZeroPad1d", (1,)),
        ("ZeroPad2d", ((1, 2, 3, 4),)),
        ("ZeroPad3d", (2,)),
        ("ConstantPad1d", (2, 3.5)),
        ("ConstantPad2d", (1, 0.0)),
        ("ConstantPad3d", ((1, 2, 3, 4, 5, 6), -1.0)),
        ("ReflectionPad1d", ((1, 2),)),
        ("ReflectionPad2d", (1,)),
        ("ReflectionPad3d", (1,)),
        ("ReplicationPad1d", (3,)),
        ("ReplicationPad2d", ((0, 1, 2, 3),)),
        ("ReplicationPad3d", (1,)),
        ("CircularPad1d", (1,)),
        ("CircularPad2d", (2,)),
        ("CircularPad3d", (1,)),
        ("PixelShuffle", (3,)),
        ("PixelUnshuffle", (2,)),
        ("Hardshrink", ()),
        ("Softshrink", (0.25,)),
        ("Unflatten", (1, (2, 4))),
    ]:
        e, t = getattr(engine.nn, name)(*args), getattr(torch.nn, name)(*args)
        assert repr(e) == repr(t)


def test_circular_padding_is_torchs_chain_of_slice_copies():
    chains = {}
    for m in (engine, torch):
        x = m.tensor(X4, requires_grad=True)
        node, names = m.nn.functional.pad(x, (1, 2, 3, 1), mode="circular").grad_fn, []
        while node is not None:  # the base's history: one CopySlices per copied region
            names.append(_node_name(node))
            node = node.next_functions[0][0]  # ((None, 0) at the end, as torch's)
        chains[m] = names
    assert chains[engine] == chains[torch] == ["CopySlices"] * 5


@pytest.mark.parametrize(
    "call",
    [
        lambda m: m.nn.functional.pad(m.ones(2, 3, 4, 5), (6, 0), mode="circular"),
        lambda m: m.nn.functional.pad(m.ones(2, 3, 4, 5), (0, 0, 5, 0), mode="circular"),
        lambda m: m.nn.functional.pad(m.ones(2, 3, 4, 5), (-3, -3), mode="circular"),
        lambda m: m.nn.functional.pad(m.ones(2, 3, 4, 5), (1, 1), mode="reflect"),
        lambda m: m.nn.functional.pixel_shuffle(m.ones(2, 3), 2),
        lambda m: m.nn.functional.pixel_shuffle(m.ones(1, 6, 2, 2), 2),
        lambda m: m.nn.functional.pixel_unshuffle(m.ones(1, 1, 5, 4), 2),
        lambda m: m.nn.functional.pixel_unshuffle(m.ones(1, 1, 4, 5), 2),
        lambda m: m.nn.functional.softshrink(m.ones(3), -1.0),
    ],
)
def test_refusals_as_torch(call):
    assert_raises_as_torch(call)
