"""einsum and baddbmm (issue 10) against PyTorch; factories and random fills.

einsum: the contractions attention and MLPs use (and a few more), values and gradients vs
float64 differences and torch, and the memory of the forward and backward against torch's CPU
profiler (both go through bmm). baddbmm: values, gradients, in-place form free.
new_* / randint / normal_ / uniform_ / bernoulli_: dtypes, shapes, ranges, gradients and bytes.
"""

from __future__ import annotations

import numpy as np
import pytest

import engine
from tests.engine.test_autograd import gradcheck
from tests.engine.test_memory_vs_torch import SCALAR_SLACK, engine_peak, torch_peak


def _x(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


EINSUM = {
    "attention_scores": ("bhqd,bhkd->bhqk", [(2, 2, 3, 4), (2, 2, 5, 4)]),
    "attention_values": ("bhqk,bhkd->bhqd", [(2, 2, 3, 5), (2, 2, 5, 4)]),
    "mlp_linear": ("btd,fd->btf", [(2, 3, 4), (5, 4)]),
    "mlp_ellipsis": ("...d,de->...e", [(2, 3, 4), (4, 5)]),
    "matmul_implicit": ("ij,jk", [(3, 4), (4, 5)]),
    "outer": ("i,j->ij", [(3,), (4,)]),
    "transpose": ("bhqd->bqhd", [(2, 3, 4, 5)]),
    "sum_dims": ("bij->j", [(2, 3, 4)]),
    "dot_all": ("ij,ij->", [(3, 4), (3, 4)]),
    "three_operands": ("bi,ij,bj->b", [(2, 3), (3, 4), (2, 4)]),
    "broadcast_batch": ("bij,bjk->bik", [(1, 3, 4), (2, 4, 5)]),
    "summed_only_one_side": ("ijk,jl->il", [(2, 3, 4), (3, 5)]),
}


@pytest.mark.parametrize("name", sorted(EINSUM))
def test_einsum_gradients_vs_numeric_and_torch(torch, name):
    eq, shapes = EINSUM[name]
    arrays = [_x(*s, seed=i) for i, s in enumerate(shapes)]
    gradcheck(lambda m, *ts: m.einsum(eq, *ts), arrays, torch=torch)


def test_einsum_accepts_a_list_and_checks_the_equation():
    a, b = engine.ones(2, 3), engine.ones(3, 4)
    assert engine.einsum("ij,jk->ik", [a, b]).shape == (2, 4)
    with pytest.raises(ValueError, match="2 operand"):
        engine.einsum("ij,jk->ik", a)
    with pytest.raises(RuntimeError, match="does not match the number of dimensions"):
        engine.einsum("ijk,jk->ik", a, b)
    with pytest.raises(RuntimeError, match="output subscript z does not appear"):
        engine.einsum("ij,jk->iz", a, b)
    with pytest.raises(RuntimeError, match="subscript j has size 3"):
        engine.einsum("ij,jk->ik", a, engine.ones(2, 4))
    with pytest.raises(RuntimeError, match="subscript i is repeated for operand 0"):
        engine.einsum("ii->i", engine.ones(3, 2))  # a diagonal needs equal sizes


def _attention(m, backward):
    rng = np.random.default_rng(0)
    q = m.tensor(rng.standard_normal((2, 4, 64, 32)).astype(np.float32), requires_grad=True)
    k = m.tensor(rng.standard_normal((2, 4, 64, 32)).astype(np.float32), requires_grad=True)
    v = m.tensor(rng.standard_normal((2, 4, 64, 32)).astype(np.float32), requires_grad=True)

    def region():
        s = m.einsum("bhqd,bhkd->bhqk", q, k)
        o = m.einsum("bhqk,bhkd->bhqd", s, v)
        if backward:
            o.backward(m.ones(*o.shape))

    return region


@pytest.mark.parametrize("backward", [False, True])
def test_einsum_attention_memory_matches_torch_profiler(torch, backward):
    assert engine_peak(_attention(engine, backward)) == torch_peak(_attention(torch, backward))


def test_einsum_on_meta():
    q = engine.empty(8, 12, 1024, 64, device="meta", requires_grad=True)
    k = engine.empty(8, 12, 1024, 64, device="meta", requires_grad=True)
    before = engine.memory.memory_allocated("meta")
    s = engine.einsum("bhqd,bhkd->bhqk", q, k)
    assert s.shape == (8, 12, 1024, 1024)
    assert engine.memory.memory_allocated("meta") - before == 8 * 12 * 1024 * 1024 * 4
    s.sum().backward()
    assert q.grad.shape == q.shape


# ---------------------------------------------------------------------------------------------
# baddbmm
# ---------------------------------------------------------------------------------------------
BADDBMM = {
    "plain": lambda m, x, a, b: m.baddbmm(x, a, b),
    "beta_alpha": lambda m, x, a, b: m.baddbmm(x, a, b, beta=0.5, alpha=-2.0),
    "broadcast_input": lambda m, x, a, b: m.baddbmm(x[0, :1], a, b, alpha=3.0),
    "method_inplace": lambda m, x, a, b: (x * 1).baddbmm_(a, b, beta=2.0, alpha=0.5),
}


@pytest.mark.parametrize("name", sorted(BADDBMM))
def test_baddbmm_gradients_vs_numeric_and_torch(torch, name):
    arrays = [_x(2, 3, 4), _x(2, 3, 5, seed=1), _x(2, 5, 4, seed=2)]
    gradcheck(BADDBMM[name], arrays, torch=torch)


def test_baddbmm_beta_zero_ignores_nan_input(torch):
    x = np.full((1, 2, 2), np.nan)
    a, b = _x(1, 2, 3), _x(1, 3, 2, seed=1)
    got = engine.baddbmm(engine.tensor(x), engine.tensor(a), engine.tensor(b), beta=0).numpy()
    want = torch.baddbmm(torch.tensor(x), torch.tensor(a), torch.tensor(b), beta=0).numpy()
    np.testing.assert_allclose(got, want)


def _baddbmm_fwd(m, inplace):
    rng = np.random.default_rng(0)
    x = m.tensor(rng.standard_normal((4, 64, 64)).astype(np.float32), requires_grad=True).clone()
    a = m.tensor(rng.standard_normal((4, 64, 32)).astype(np.float32), requires_grad=True)
    b = m.tensor(rng.standard_normal((4, 32, 64)).astype(np.float32), requires_grad=True)
    keep = []

    def region():
        keep.append(x.baddbmm_(a, b, alpha=0.5) if inplace else m.baddbmm(x, a, b, alpha=0.5))

    return region


@pytest.mark.parametrize("inplace", [False, True])
def test_baddbmm_in_place_is_free_like_torch(torch, inplace):
    got = engine_peak(_baddbmm_fwd(engine, inplace))
    assert got == torch_peak(_baddbmm_fwd(torch, inplace)) == (0 if inplace else 4 * 64 * 64 * 4)


# ---------------------------------------------------------------------------------------------
# factories and random fills
# ---------------------------------------------------------------------------------------------
def test_new_factories_follow_torch(torch):
    e = engine.ones(2, dtype=engine.float64)
    t = torch.ones(2, dtype=torch.float64)
    for name, args in [
        ("new_zeros", (2, 3)),
        ("new_ones", ((4,),)),
        ("new_empty", (3,)),
        ("new_full", ((2, 2), 7)),
    ]:
        ey, ty = getattr(e, name)(*args), getattr(t, name)(*args)
        assert ey.shape == tuple(ty.shape) and ey.dtype == engine.float64
        if name != "new_empty":
            np.testing.assert_array_equal(ey.numpy(), ty.numpy())
    assert e.new_zeros(2, dtype=engine.int64).dtype == engine.int64
    m = e.new_ones(1024, 1024, device="meta")
    assert m.device.type == "meta" and m.dtype == engine.float64
    assert e.new_zeros(3, requires_grad=True).requires_grad


def test_randint_and_like():
    x = engine.randint(3, 7, (1000,))
    assert x.dtype == engine.int64 and x.shape == (1000,)
    vals = set(x.numpy().tolist())
    assert vals == {3, 4, 5, 6}
    assert engine.randint(5, (2, 3)).numpy().max() < 5
    assert engine.randint(10, size=(4,), dtype=engine.int32).dtype == engine.int32
    r = engine.randint_like(engine.zeros(50, 2), 4)
    assert r.dtype == engine.float32 and r.numpy().max() <= 3
    assert engine.randint(100, (64, 1024), device="meta").shape == (64, 1024)
    with pytest.raises(RuntimeError, match="less than 'to'"):
        engine.randint(5, 5, (2,))


def test_random_fills_in_place():
    x = engine.empty(20000)
    assert x.normal_(2.0, 0.5) is x and x._version == 1
    assert abs(x.numpy().mean() - 2.0) < 0.02 and abs(x.numpy().std() - 0.5) < 0.02
    x.uniform_(-3, -1)
    assert x.numpy().min() >= -3 and x.numpy().max() < -1
    x.uniform_(**{"from": 5, "to": 6})
    assert 5 <= x.numpy().min() and x.numpy().max() < 6
    x.bernoulli_(0.25)
    assert set(np.unique(x.numpy())) <= {0.0, 1.0} and abs(x.numpy().mean() - 0.25) < 0.02
    x.bernoulli_(engine.tensor([0.0, 1.0]).repeat(10000))
    np.testing.assert_array_equal(x.numpy(), np.tile([0.0, 1.0], 10000))
    assert x._version == 5
    d = engine.bernoulli(engine.full((1000,), 0.5))
    assert set(np.unique(d.numpy())) <= {0.0, 1.0}
    assert engine_peak(lambda: x.normal_()) == 0  # in place: nothing allocated


def test_random_fills_autograd_like_torch(torch):
    with pytest.raises(RuntimeError, match="leaf Variable"):
        engine.zeros(3, requires_grad=True).normal_()
    for name, call in [
        ("normal", lambda t: t.normal_()),
        ("uniform", lambda t: t.uniform_()),
        ("bernoulli_p", lambda t: t.bernoulli_(0.5)),
    ]:
        leaf = engine.ones(3, requires_grad=True)
        y = call(leaf * 2)
        tleaf = torch.ones(3, requires_grad=True)
        ty = call(tleaf * 2)
        assert y.grad_fn.name() == ty.grad_fn.name(), name
        (y * 3).sum().backward()
        np.testing.assert_array_equal(leaf.grad.numpy(), np.zeros(3))
    with engine.no_grad():
        w = engine.empty(4, 4, requires_grad=True)
        w.normal_(0, 0.02)  # initialising a parameter under no_grad is fine
    assert w.requires_grad and w.grad_fn is None


@pytest.mark.parametrize(
    ("name", "args"),
    [
        ("zeros_like", ()),
        ("ones_like", ()),
        ("empty_like", ()),
        ("full_like", (2.5,)),
        ("rand_like", ()),
        ("randn_like", ()),
        ("randint_like", (7,)),
    ],
)
def test_like_family_follows_torch(torch, name, args):
    for dtype in ("float64", "int64"):
        if name in ("rand_like", "randn_like") and dtype == "int64":
            continue
        e = getattr(engine, name)(engine.zeros(2, 3, dtype=getattr(engine, dtype)), *args)
        t = getattr(torch, name)(torch.zeros(2, 3, dtype=getattr(torch, dtype)), *args)
        assert (
            e.shape == tuple(t.shape) and str(e.dtype).split(".")[-1] == str(t.dtype).split(".")[-1]
        )
        if name in ("zeros_like", "ones_like", "full_like"):
            np.testing.assert_array_equal(e.numpy(), t.numpy())
    m = getattr(engine, name)(engine.empty(1024, 1024, device="meta"), *args)
    assert m.device.type == "meta" and m.shape == (1024, 1024)
    f = getattr(engine, name)(engine.zeros(3), *args, dtype=engine.float64)
    assert f.dtype == engine.float64


def _fill_program(m, name):
    x = m.ones(256, 256, requires_grad=True).clone()
    calls = {
        "normal_": lambda: x.normal_(),
        "uniform_": lambda: x.uniform_(),
        "bernoulli_": lambda: x.bernoulli_(0.5),
    }

    def region():
        calls[name]()
        x.backward(m.ones(256, 256))

    return region


@pytest.mark.parametrize("name", ["normal_", "uniform_", "bernoulli_"])
def test_random_fill_step_memory_matches_torch_profiler(torch, name):
    """In place: nothing allocated; backward: the seed and one zero gradient for the leaf."""
    got = engine_peak(_fill_program(engine, name))
    assert got == torch_peak(_fill_program(torch, name)) == 2 * 256 * 256 * 4


def test_baddbmm_on_meta():
    x = engine.empty(16, 512, 512, device="meta", requires_grad=True).clone()
    a = engine.empty(16, 512, 64, device="meta", requires_grad=True)
    b = engine.empty(16, 64, 512, device="meta", requires_grad=True)
    before = engine.memory.memory_allocated("meta")
    y = engine.baddbmm(x, a, b, alpha=0.125)
    assert y.shape == (16, 512, 512)
    assert engine.memory.memory_allocated("meta") - before == 16 * 512 * 512 * 4
    z = x.baddbmm_(a, b)
    assert z is x and engine.memory.memory_allocated("meta") - before == 16 * 512 * 512 * 4
    (y.sum() + z.sum()).backward()
    assert a.grad.shape == a.shape and b.grad.shape == b.shape


def _baddbmm_step(m):
    rng = np.random.default_rng(0)
    x = m.tensor(rng.standard_normal((4, 32, 16)).astype(np.float32), requires_grad=True)
    a = m.tensor(rng.standard_normal((4, 32, 8)).astype(np.float32), requires_grad=True)
    b = m.tensor(rng.standard_normal((4, 8, 16)).astype(np.float32), requires_grad=True)

    def region():
        y = m.baddbmm(x, a, b, alpha=0.5, beta=2.0)
        y.backward(m.ones(y.shape))

    return region


def test_baddbmm_step_memory_matches_torch_profiler(torch):
    """Within the bytes torch spends wrapping the Python scalars alpha and beta."""
    got, want = engine_peak(_baddbmm_step(engine)), torch_peak(_baddbmm_step(torch))
    assert 0 <= want - got <= SCALAR_SLACK


@pytest.mark.parametrize(
    "name",
    [
        "mlp_linear",
        "mlp_ellipsis",
        "transpose",
        "sum_dims",
        "dot_all",
        "three_operands",
        "summed_only_one_side",
    ],
)
def test_einsum_step_memory_matches_torch_profiler(torch, name):
    eq, shapes = EINSUM[name]

    def program(m):
        rng = np.random.default_rng(0)
        ts = [
            m.tensor(rng.standard_normal([n * 4 for n in s]).astype(np.float32), requires_grad=True)
            for s in shapes
        ]

        def region():
            y = m.einsum(eq, *ts)
            y.backward(m.ones(y.shape))

        return region

    assert engine_peak(program(engine)) == torch_peak(program(torch))
