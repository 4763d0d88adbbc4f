"""normalize, cosine_similarity, pairwise_distance, broadcast_tensors and meshgrid; log_sigmoid,
glu and the composites softsign, softmin, tanhshrink: values, gradients and node names against
torch 2.13, the blocks its CPU profiler shows forward and backward, refusals, and their modules."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import engine
from tests.conftest import assert_raises_as_torch
from tests.engine.test_memory_vs_torch import assert_steps_as_torch, forward_backward

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(21)
A = RNG.standard_normal((64, 128))
B = RNG.standard_normal((64, 128)) * 2 + 0.5
ROW = RNG.standard_normal(128)

# name -> call(m, a, b): a and b require grad (b may be unused)
CASES = {
    "normalize": lambda m, a, b: m.nn.functional.normalize(a),
    "normalize_p1_dim0": lambda m, a, b: m.nn.functional.normalize(a, p=1.0, dim=0),
    "cosine_similarity": lambda m, a, b: m.nn.functional.cosine_similarity(a, b),
    "cosine_similarity_dim0_broadcast": lambda m, a, b: m.nn.functional.cosine_similarity(
        a, b[:1], dim=0
    ),
    "pairwise_distance": lambda m, a, b: m.nn.functional.pairwise_distance(a, b),
    "pairwise_distance_p1_keepdim": lambda m, a, b: m.nn.functional.pairwise_distance(
        a, b, p=1.0, keepdim=True
    ),
    "broadcast_tensors": lambda m, a, b: m.broadcast_tensors(a[:, :1], b[:1])[0] * b,
    "meshgrid_ij": lambda m, a, b: m.meshgrid(a[0], b[1], indexing="ij")[1] * 2,
    "meshgrid_xy": lambda m, a, b: m.meshgrid(a[0], b[1], a[2], indexing="xy")[0] * 2,
    "logsigmoid": lambda m, a, b: m.nn.functional.logsigmoid(a * 4),
    "glu": lambda m, a, b: m.nn.functional.glu(a),
    "glu_dim0": lambda m, a, b: m.nn.functional.glu(a, 0),
    "softsign": lambda m, a, b: m.nn.functional.softsign(a),
    "softmin": lambda m, a, b: m.nn.functional.softmin(a, 1),
    "tanhshrink": lambda m, a, b: m.nn.functional.tanhshrink(a),
}


def _run(m, name, dtype=np.float64):
    a = m.tensor(A.astype(dtype), requires_grad=True)
    b = m.tensor(B.astype(dtype), requires_grad=True)
    y = CASES[name](m, a, b)
    g = m.tensor(np.random.default_rng(5).standard_normal(tuple(y.shape)).astype(dtype))
    y.backward(g)
    grads = [None if v.grad is None else v.grad.numpy() for v in (a, b)]
    return y.detach().numpy(), grads, y.grad_fn.name()


@pytest.mark.parametrize("name", sorted(CASES))
def test_values_gradients_and_node_as_torch(name):
    (ey, eg, en), (ty, tg, tn) = _run(engine, name), _run(torch, name)
    np.testing.assert_allclose(ey, ty, rtol=1e-12, atol=1e-14)
    for e, t in zip(eg, tg, strict=True):
        assert (e is None) == (t is None)
        if e is not None:
            np.testing.assert_allclose(e, t, rtol=1e-10, atol=1e-13)
    assert en == tn


@pytest.mark.parametrize("name", sorted(CASES))
def test_float32_as_torch(name):
    (ey, eg, _), (ty, tg, _) = _run(engine, name, np.float32), _run(torch, name, np.float32)
    assert ey.dtype == ty.dtype
    np.testing.assert_allclose(ey, ty, rtol=1e-5, atol=1e-6)
    # the first operand's gradient (b's, where it is broadcast, sums terms that cancel to
    # float32's noise; the float64 test checks it); summed over a grid, in torch's own order
    e, t = next((e, t) for e, t in zip(eg, tg, strict=True) if t is not None)
    np.testing.assert_allclose(e, t, rtol=1e-4, atol=1e-5 * np.abs(t).max())


@pytest.mark.parametrize("name", sorted(CASES))
def test_allocations_forward_and_backward_as_torch(name):
    def make(m):
        a = m.tensor(A.astype(np.float32), requires_grad=True)
        b = m.tensor(B.astype(np.float32), requires_grad=True)
        return forward_backward(m, lambda: CASES[name](m, a, b))

    assert_steps_as_torch(make)


def test_logsigmoid_keeps_its_buffer_until_backward():
    """torch's log_sigmoid keeps exp(-|x|), input-sized, with its node on cpu."""
    x = engine.randn(256, 64, requires_grad=True)
    before = engine.memory.memory_allocated("cpu")
    y = engine.nn.functional.logsigmoid(x)
    assert engine.memory.memory_allocated("cpu") - before == 2 * x.nbytes
    y.sum().backward()
    assert engine.memory.memory_allocated("cpu") - before == 2 * x.nbytes  # y, and x.grad
    del y
    assert engine.memory.memory_allocated("cpu") - before == x.nbytes


def test_broadcast_tensors_hands_back_a_tensor_of_the_shape_itself():
    a, b = engine.ones(2, 3), engine.ones(3)
    a2, b2 = engine.broadcast_tensors(a, b)
    assert a2 is a and tuple(b2.shape) == (2, 3) and b2.stride() == (0, 1)
    assert engine.broadcast_shapes((2, 1), 3, (1, 1, 3)) == (1, 2, 3)
    assert torch.broadcast_shapes((2, 1), 3, (1, 1, 3)) == (1, 2, 3)


def test_meshgrid_without_indexing_warns_and_uses_ij():
    for m in (engine, torch):
        with pytest.warns(UserWarning, match="indexing"):
            gx, gy = m.meshgrid(m.tensor([1.0, 2.0]), m.tensor([3.0, 4.0, 5.0]))
        assert tuple(gx.shape) == (2, 3) and gx.tolist() == [[1.0] * 3, [2.0] * 3]


@pytest.mark.parametrize(
    "call",
    [
        lambda m: m.broadcast_tensors(m.ones(2), m.ones(3)),
        lambda m: m.broadcast_shapes((2,), (3,)),
        lambda m: m.meshgrid(m.ones(2), indexing="yx"),
        lambda m: m.nn.functional.glu(m.ones(3, 5)),
        lambda m: m.nn.functional.glu(m.ones(4), 1),
        lambda m: m.nn.functional.glu(m.tensor(1.0)),
        lambda m: m.nn.functional.logsigmoid(m.ones(3, dtype=m.int64)),
    ],
)
def test_refusals_as_torch(call):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert_raises_as_torch(call)


def test_modules_as_torch():
    x, y = RNG.standard_normal((4, 6)), RNG.standard_normal((4, 6))
    for name, args in [
        ("LogSigmoid", ()),
        ("Softsign", ()),
        ("Tanhshrink", ()),
        ("Softmin", (1,)),
        ("GLU", (0,)),
        ("CosineSimilarity", (0, 1e-6)),
        ("PairwiseDistance", (1.0, 1e-3, True)),
    ]:
        outs = []
        for m in (engine, torch):
            mod = getattr(m.nn, name)(*args)
            two = name in ("CosineSimilarity", "PairwiseDistance")
            out = mod(m.tensor(x), m.tensor(y)) if two else mod(m.tensor(x))
            outs.append((out.numpy(), repr(mod)))
        np.testing.assert_allclose(outs[0][0], outs[1][0], rtol=1e-12, err_msg=name)
        assert outs[0][1] == outs[1][1]
