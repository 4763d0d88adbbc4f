"""Activations of issue 10: values, gradients and in-place memory against PyTorch.

For every activation: forward values vs torch (float32 and float64, contiguous and transposed),
gradients vs float64 central differences and vs torch (out of place and in place), the autograd
node torch records, and what the in-place form costs: PyTorch's CPU profiler says which in-place
forms are free (backward keeps the result) and which pay a clone (backward keeps the input), and
the engine must allocate the same bytes. The same bytes are checked by hand on meta.
"""

from __future__ import annotations

import numpy as np
import pytest

import engine
import engine.nn as enn
import engine.nn.functional as EF
from tests.engine.test_autograd import gradcheck
from tests.engine.test_memory_vs_torch import engine_peak, torch_peak

# name: (call(F, x, inplace), domain of test values, in place keeps the result (free))
ACTS = {
    "silu": (lambda F, x, ip: F.silu(x, inplace=ip), False),
    "mish": (lambda F, x, ip: F.mish(x, inplace=ip), False),
    "leaky_relu": (lambda F, x, ip: F.leaky_relu(x, 0.2, inplace=ip), True),
    "elu": (lambda F, x, ip: F.elu(x, 1.3, inplace=ip), True),
    "celu": (lambda F, x, ip: F.celu(x, 0.7, inplace=ip), True),
    "selu": (lambda F, x, ip: F.selu(x, inplace=ip), True),
    "hardtanh": (lambda F, x, ip: F.hardtanh(x, -0.8, 1.1, inplace=ip), False),
    "relu6": (lambda F, x, ip: F.relu6(x, inplace=ip), False),
    "hardswish": (lambda F, x, ip: F.hardswish(x, inplace=ip), False),
    "hardsigmoid": (lambda F, x, ip: F.hardsigmoid(x, inplace=ip), False),
    "threshold": (lambda F, x, ip: F.threshold(x, 0.3, -2.0, inplace=ip), False),
}
OUT_OF_PLACE_ONLY = {
    "softplus": lambda F, x: F.softplus(x),
    "softplus_beta": lambda F, x: F.softplus(x, beta=2.0, threshold=3.0),
    "gelu_tanh": lambda F, x: F.gelu(x, approximate="tanh"),
    "gelu": lambda F, x: F.gelu(x),
}


def _values(shape, seed=0, scale=3.0):
    """Values spread over the kinks (|x| up to ~9) but at least 0.05 away from each of them."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape) * scale
    for kink in (0.0, 0.3, -0.8, 1.1, 3.0, -3.0, 6.0, 1.5):  # 1.5 = softplus_beta's threshold/beta
        near = np.abs(x - kink) < 0.05
        x[near] = kink + 0.05 * np.sign(x[near] - kink + 1e-12)
    return x


def _torch_F(torch):
    return torch.nn.functional


# ---------------------------------------------------------------------------------------------
# values
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(ACTS) + sorted(OUT_OF_PLACE_ONLY))
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
def test_values_match_torch(torch, name, dtype, layout):
    x = _values((37, 29)).astype(dtype)
    if layout == "transposed":
        ex = engine.tensor(np.ascontiguousarray(x.T)).t()
        tx = torch.tensor(np.ascontiguousarray(x.T)).t()
    else:
        ex, tx = engine.tensor(x), torch.tensor(x)
    if name in ACTS:
        call = ACTS[name][0]
        got = call(EF, ex, False).numpy()
        want = call(_torch_F(torch), tx, False).numpy()
        # in place: the same values, written into the input itself
        ex2 = ex.clone() if layout == "contiguous" else engine.tensor(np.ascontiguousarray(x.T)).t()
        r = call(EF, ex2, True)
        assert r is ex2
        np.testing.assert_allclose(ex2.numpy(), want, rtol=1e-6, atol=1e-6)
    else:
        got = OUT_OF_PLACE_ONLY[name](EF, ex).numpy()
        want = OUT_OF_PLACE_ONLY[name](_torch_F(torch), tx).numpy()
    assert got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("shape", [(300, 200), (600, 500)])  # one thread; split across threads
def test_large_tensor_in_blocks_matches_torch(torch, shape):
    """Bigger than one scratch block, contiguous and strided: the blocked kernels agree."""
    x = _values(shape, seed=3).astype(np.float32)
    for name in ("silu", "mish", "elu", "hardswish"):
        call = ACTS[name][0]
        want = call(_torch_F(torch), torch.tensor(x), False).numpy()
        np.testing.assert_allclose(
            call(EF, engine.tensor(x), False).numpy(), want, rtol=1e-5, atol=1e-6
        )
        et = engine.tensor(np.ascontiguousarray(x.T)).t()
        np.testing.assert_allclose(call(EF, et, False).numpy(), want, rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------------------------------------
# gradients
# ---------------------------------------------------------------------------------------------
def _through(call, inplace):
    # in place on a non-leaf (x * 1): the op must be legal in place
    def fn(m, x):
        F = m.nn.functional
        return call(F, x * 1.0, True) if inplace else call(F, x, False)

    return fn


@pytest.mark.parametrize("name", sorted(ACTS))
@pytest.mark.parametrize("inplace", [False, True])
def test_gradients_vs_numeric_and_torch(torch, name, inplace):
    gradcheck(_through(ACTS[name][0], inplace), [_values((3, 4), seed=1)], torch=torch)


@pytest.mark.parametrize("name", sorted(OUT_OF_PLACE_ONLY))
def test_gradients_out_of_place_only(torch, name):
    fn = OUT_OF_PLACE_ONLY[name]
    gradcheck(lambda m, x: fn(m.nn.functional, x), [_values((3, 4), seed=2)], torch=torch)


def test_broadcast_gradient_is_read_in_place(torch):
    """sum() hands backward an expanded gradient: it is read as is, nothing but grad_input made."""
    x = engine.tensor(_values((64, 64)).astype(np.float32), requires_grad=True)
    y = EF.silu(x)
    loss = y.sum()
    nbytes = 64 * 64 * 4
    peak = engine_peak(lambda: loss.backward())
    assert peak == nbytes + 4  # the loss's 0-d seed gradient and the gradient for x
    t = torch.tensor(x.detach().numpy(), requires_grad=True)
    tloss = torch.nn.functional.silu(t).sum()
    assert torch_peak(lambda: tloss.backward()) == peak
    np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("name", sorted(ACTS))
@pytest.mark.parametrize("inplace", [False, True])
def test_backward_node_is_torchs(torch, name, inplace):
    call = ACTS[name][0]
    ey = call(EF, engine.randn(4, requires_grad=True) * 1.0, inplace)
    ty = call(_torch_F(torch), torch.randn(4, requires_grad=True) * 1.0, inplace)
    assert ey.grad_fn.name() == ty.grad_fn.name()


def test_in_place_on_leaf_and_bad_arguments_raise_like_torch():
    leaf = engine.randn(4, requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf Variable"):
        EF.silu(leaf, inplace=True)
    with pytest.raises(RuntimeError, match=r'"silu" not implemented for \'Long\''):
        EF.silu(engine.arange(4))
    with pytest.raises(ValueError, match="min_val cannot be greater than max_val"):
        EF.hardtanh(engine.randn(3), 2.0, 1.0)
    with pytest.raises(RuntimeError, match="negative slope"):
        EF.elu(engine.randn(3, requires_grad=True) * 1.0, -1.0, inplace=True)
    y = EF.leaky_relu(engine.randn(3, requires_grad=True) * 1.0, -0.5, inplace=True)
    with pytest.raises(RuntimeError, match="negative slope"):
        y.sum().backward()


def test_in_place_read_of_saved_result_after_another_write_raises():
    """leaky_relu_ keeps its result: writing the result again breaks backward, as in torch."""
    x = engine.randn(5, requires_grad=True) * 1.0
    y = EF.leaky_relu(x, 0.1, inplace=True)
    y.mul_(2)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()


# ---------------------------------------------------------------------------------------------
# memory: in place is free or pays a clone, as torch's profiler shows
# ---------------------------------------------------------------------------------------------
N = 1 << 15  # elements: 128 KiB of float32


def _fwd_program(m, name, inplace):
    call = ACTS[name][0]
    leaf = m.tensor(_values((N,)).astype(np.float32), requires_grad=True)
    x = leaf * 1.0
    keep = []

    def region():
        keep.append(call(m.nn.functional, x, inplace))

    return region


def _step_program(m, name, inplace):
    call = ACTS[name][0]
    leaf = m.tensor(_values((N,)).astype(np.float32), requires_grad=True)
    x = leaf.clone()  # a non-leaf whose backward only passes the gradient on
    y = call(m.nn.functional, x, inplace)
    g = m.ones(N)

    def region():
        y.backward(g)

    return region


@pytest.mark.parametrize("name", sorted(ACTS))
@pytest.mark.parametrize("inplace", [False, True])
def test_forward_memory_matches_torch_profiler(torch, name, inplace):
    want = torch_peak(_fwd_program(torch, name, inplace))
    got = engine_peak(_fwd_program(engine, name, inplace))
    assert got == want
    free = ACTS[name][1]
    assert got == (0 if inplace and free else N * 4)  # the result, or the clone, or nothing


@pytest.mark.parametrize("name", sorted(ACTS))
@pytest.mark.parametrize("inplace", [False, True])
def test_backward_memory_matches_torch_profiler(torch, name, inplace):
    want = torch_peak(_step_program(torch, name, inplace))
    got = engine_peak(_step_program(engine, name, inplace))
    assert got == want


@pytest.mark.parametrize("name", sorted(ACTS))
def test_in_place_without_grad_allocates_nothing(name):
    x = engine.randn(N)
    assert engine_peak(lambda: ACTS[name][0](EF, x, True)) == 0


def test_module_in_place_costs_match_the_table():
    """ReLU6(inplace=True) saves nothing (clone), LeakyReLU/ELU/SELU/CELU(inplace) save all."""
    x = engine.randn(N, requires_grad=True) * 1.0
    costs = {}
    for cls in (enn.ReLU6, enn.SiLU, enn.Hardswish, enn.Mish, enn.LeakyReLU, enn.ELU, enn.SELU):
        keep = []
        costs[cls.__name__] = engine_peak(
            lambda cls=cls, keep=keep: keep.append(cls(inplace=True)(x * 1))
        )
    clone = 2 * N * 4  # x * 1 and the clone backward keeps
    free = N * 4  # x * 1 only
    assert costs == {
        "ReLU6": clone,
        "SiLU": clone,
        "Hardswish": clone,
        "Mish": clone,
        "LeakyReLU": free,
        "ELU": free,
        "SELU": free,
    }


# ---------------------------------------------------------------------------------------------
# meta: shapes and bytes by hand
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(ACTS))
@pytest.mark.parametrize("inplace", [False, True])
def test_meta_shapes_and_bytes(name, inplace):
    call, free = ACTS[name]
    shape = (8, 1024, 1024)  # 32 MiB of float32, never materialised
    nbytes = 8 * 1024 * 1024 * 4
    x = engine.randn(*shape, device="meta", requires_grad=True) * 1.0
    before = engine.memory.memory_allocated("meta")
    y = call(EF, x, inplace)
    assert y.shape == shape and y.device.type == "meta"
    assert engine.memory.memory_allocated("meta") - before == (0 if inplace and free else nbytes)
    y.backward(engine.ones(*shape, device="meta"))
    assert x.grad is None  # x is not a leaf
    del y


@pytest.mark.parametrize("name", sorted(OUT_OF_PLACE_ONLY))
def test_meta_out_of_place_only(name):
    x = engine.randn(4, 256, 256, device="meta", requires_grad=True)
    before = engine.memory.memory_allocated("meta")
    y = OUT_OF_PLACE_ONLY[name](EF, x)
    assert y.shape == (4, 256, 256)
    assert engine.memory.memory_allocated("meta") - before == 4 * 256 * 256 * 4
    y.sum().backward()
    assert x.grad.shape == x.shape


# ---------------------------------------------------------------------------------------------
# modules and names
# ---------------------------------------------------------------------------------------------
MODULES = [
    ("SiLU", (True,)),
    ("LeakyReLU", (0.2, True)),
    ("ELU", (2.0, True)),
    ("CELU", ()),
    ("SELU", (True,)),
    ("Hardtanh", (-2, 2, True)),
    ("ReLU6", (True,)),
    ("ReLU6", ()),
    ("Hardswish", (True,)),
    ("Hardsigmoid", ()),
    ("Mish", (True,)),
    ("Threshold", (0.1, 20, True)),
    ("Softplus", (2, 10)),
    ("GELU", ("tanh",)),
]


@pytest.mark.parametrize(("cls", "args"), MODULES)
def test_modules_match_torch(torch, cls, args):
    em, tm = getattr(enn, cls)(*args), getattr(torch.nn, cls)(*args)
    assert repr(em) == repr(tm)
    x = _values((6, 5), seed=4).astype(np.float32)
    ex = engine.tensor(x, requires_grad=True)
    tx = torch.tensor(x, requires_grad=True)
    ey, ty = em(ex * 1), tm(tx * 1)
    np.testing.assert_allclose(ey.detach().numpy(), ty.detach().numpy(), rtol=1e-6, atol=1e-6)
    ey.sum().backward()
    ty.sum().backward()
    np.testing.assert_allclose(ex.grad.numpy(), tx.grad.numpy(), rtol=1e-6, atol=1e-6)


def test_torch_level_names_exist(torch):
    for name in ("selu", "selu_", "celu", "celu_", "threshold", "threshold_"):
        assert hasattr(torch, name) and callable(getattr(engine, name))
    x = _values((5,))
    np.testing.assert_allclose(
        engine.threshold(engine.tensor(x), 0.3, 1.0).numpy(),
        torch.threshold(torch.tensor(x), 0.3, 1.0).numpy(),
    )
    for name in ("silu", "mish", "leaky_relu_", "elu_", "hardtanh_", "relu6", "softplus"):
        assert hasattr(torch.nn.functional, name) and callable(getattr(EF, name))


# ---------------------------------------------------------------------------------------------
# the op table: scenario rows with the right in-place form
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(ACTS) + ["softplus"])
def test_scenario_rows_run_in_place_with_torchs_cost(name):
    from engine.ops import registry

    row = registry.get(name)
    assert row.scenario is not None
    args = {"threshold": 0.3, "value": -2.0} if name == "threshold" else {}
    x = engine.randn(N, device="meta", requires_grad=True) * 1.0
    if name == "softplus":
        assert row.inplace is None  # "softplus has no in-place form"
        return
    assert registry.get(row.inplace) is not None
    before = engine.memory.memory_allocated("meta")
    y = row.run([x], args, True)
    assert y is x
    free = ACTS[name][1]
    assert engine.memory.memory_allocated("meta") - before == (0 if free else N * 4)


@pytest.mark.parametrize("name", ["elu", "silu", "hardtanh"])
def test_in_place_through_a_view_vs_numeric_and_torch(torch, name):
    """In place on a slice: CopySlices routes the gradient, free or with a clone as torch."""
    call = ACTS[name][0]

    def fn(m, x):
        y = x * 1.0
        call(m.nn.functional, y[:, 1:], True)
        return y

    gradcheck(fn, [_values((3, 4), seed=5)], torch=torch)
    e, t = (
        fn(engine, engine.ones(2, 3, requires_grad=True)),
        fn(torch, torch.ones(2, 3, requires_grad=True)),
    )
    assert e.grad_fn.name() == "CopySlices" and t.grad_fn.name().endswith("CopySlices")
