"""engine.linalg against torch 2.13: vector_norm, matrix_norm, norm (its dispatch), vecdot,
cross, matmul, diagonal and multi_dot (its order choice): values, gradients (torch and float64
central differences), node chains, torch's refusals, the blocks its CPU profiler shows forward
and backward, and meta shapes."""

from __future__ import annotations

import math

import numpy as np
import pytest

import engine
from tests.conftest import assert_raises_as_torch, node_chain
from tests.engine.test_memory_vs_torch import (
    assert_steps_as_torch,
    engine_sequence,
    forward_backward,
    torch_sequence,
)

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(7)
X = RNG.standard_normal((3, 4, 5))
A = RNG.standard_normal((4, 6))
B = RNG.standard_normal((6, 2))
C = RNG.standard_normal((2, 7))
inf = math.inf

CASES = {  # name -> call(m, x, a); x is [3, 4, 5], a is [4, 6]
    "vector_all": lambda m, x, a: m.linalg.vector_norm(x),
    "vector_dim_keepdim": lambda m, x, a: m.linalg.vector_norm(x, dim=1, keepdim=True),
    "vector_1": lambda m, x, a: m.linalg.vector_norm(x, 1, dim=-1),
    "vector_inf": lambda m, x, a: m.linalg.vector_norm(x, inf),
    "vector_neg_inf": lambda m, x, a: m.linalg.vector_norm(x, -inf, dim=(0, 2)),
    "vector_0": lambda m, x, a: m.linalg.vector_norm(x, 0, dim=-1),
    "vector_3_5": lambda m, x, a: m.linalg.vector_norm(x, 3.5, dim=(0, -1)),
    "vector_0_5": lambda m, x, a: m.linalg.vector_norm(x, 0.5, dim=0),
    "vector_dtype": lambda m, x, a: m.linalg.vector_norm(x.float(), dtype=m.float64),
    "vector_dtype_dim": lambda m, x, a: m.linalg.vector_norm(x.float(), 3, dim=1, dtype=m.float64),
    "vector_inf_dtype_dim": lambda m, x, a: m.linalg.vector_norm(
        x.float(), inf, 2, dtype=m.float64
    ),
    "matrix_fro": lambda m, x, a: m.linalg.matrix_norm(x),
    "matrix_1": lambda m, x, a: m.linalg.matrix_norm(x, 1),
    "matrix_neg_1_keepdim": lambda m, x, a: m.linalg.matrix_norm(x, -1, keepdim=True),
    "matrix_inf": lambda m, x, a: m.linalg.matrix_norm(x, inf, dim=(0, 2)),
    "matrix_neg_inf": lambda m, x, a: m.linalg.matrix_norm(x, -inf, dim=(2, 0)),
    "norm_default": lambda m, x, a: m.linalg.norm(x),
    "norm_2d_ord_1": lambda m, x, a: m.linalg.norm(a, 1),
    "norm_fro": lambda m, x, a: m.linalg.norm(a, "fro"),
    "norm_two_dims_inf": lambda m, x, a: m.linalg.norm(x, inf, dim=(1, 2)),
    "norm_one_dim": lambda m, x, a: m.linalg.norm(x, 3, dim=1),
    "vecdot": lambda m, x, a: m.linalg.vecdot(x, x.exp()),
    "cross": lambda m, x, a: m.linalg.cross(x[:, :3], x[:, 1:], dim=1),
    "matmul": lambda m, x, a: m.linalg.matmul(x[0], a.T[:5]),
    "diagonal": lambda m, x, a: m.linalg.diagonal(x, offset=1),
    "multi_dot_2": lambda m, x, a: m.linalg.multi_dot([a, a.T]),
    "multi_dot_3": lambda m, x, a: m.linalg.multi_dot([a, a.T, a]),
    "multi_dot_vectors": lambda m, x, a: m.linalg.multi_dot([a[0], a.T, a, a.T[:, 0]]),
    "multi_dot_4": lambda m, x, a: m.linalg.multi_dot([a.T, a, a.T, a]),
}


def _run(m, name):
    x = m.tensor(X, requires_grad=True)
    a = m.tensor(A, requires_grad=True)
    y = CASES[name](m, x, a) * 1.5
    y.backward(m.tensor(np.random.default_rng(2).standard_normal(tuple(y.shape))))
    grads = [t.grad.numpy() if t.grad is not None else None for t in (x, a)]
    return y.detach().numpy(), grads, node_chain(y.grad_fn)


@pytest.mark.parametrize("name", sorted(CASES))
def test_values_gradients_and_nodes_as_torch(name):
    (ey, eg, en), (ty, tg, tn) = _run(engine, name), _run(torch, name)
    np.testing.assert_allclose(ey, ty, rtol=1e-13, atol=1e-13)
    for e, t in zip(eg, tg, strict=True):
        assert (e is None) == (t is None)
        if e is not None:
            np.testing.assert_allclose(e, t, rtol=1e-12, atol=1e-13)
    assert en == tn


@pytest.mark.parametrize(
    "name", ["vector_all", "vector_3_5", "vector_0_5", "matrix_1", "matrix_inf", "multi_dot_4"]
)
def test_gradients_against_central_differences(name):
    w = np.random.default_rng(3).standard_normal(
        tuple(CASES[name](engine, engine.tensor(X), engine.tensor(A)).shape)
    )
    x = engine.tensor(X, requires_grad=True)
    a = engine.tensor(A, requires_grad=True)
    CASES[name](engine, x, a).backward(engine.tensor(w))
    on_x = x.grad is not None  # multi_dot reads a only
    base, g = (X, x.grad.numpy()) if on_x else (A, a.grad.numpy())

    def f(v):
        args = (
            (engine.tensor(v), engine.tensor(A)) if on_x else (engine.tensor(X), engine.tensor(v))
        )
        return float((CASES[name](engine, *args).numpy() * w).sum())

    h = 1e-6
    for idx in list(np.ndindex(base.shape))[:: max(1, base.size // 12)]:
        up, down = base.copy(), base.copy()
        up[idx] += h
        down[idx] -= h
        num = (f(up) - f(down)) / (2 * h)
        assert abs(num - g[idx]) < 1e-6 * max(1.0, abs(num))


MEMORY = [
    "vector_all",
    "vector_dim_keepdim",
    "vector_inf",
    "vector_1",
    "vector_dtype",
    "vector_dtype_dim",
    "vector_inf_dtype_dim",
    "matrix_fro",
    "matrix_1",
    "norm_default",
    "norm_2d_ord_1",
    "norm_one_dim",
    "vector_3_5",
    "vector_0_5",
    "vector_neg_inf",
    "matrix_inf",
    "vecdot",
]


@pytest.mark.parametrize("name", MEMORY)
def test_allocations_forward_and_backward_as_torch(name):
    xs = np.random.default_rng(5).standard_normal((16, 32, 48)).astype(np.float32)
    as_ = np.random.default_rng(6).standard_normal((32, 40)).astype(np.float32)

    def make(m):
        x = m.tensor(xs, requires_grad=True)
        a = m.tensor(as_, requires_grad=True)
        return forward_backward(m, lambda: CASES[name](m, x, a))

    assert_steps_as_torch(make)


CHAINS = {  # multi_dot of distinct leaves: shapes -> torch's order of products
    "three_left_first": [(4, 6), (6, 2), (2, 7)],
    "three_right_first": [(9, 2), (2, 8), (8, 3)],
    "four": [(10, 3), (3, 12), (12, 2), (2, 9)],
    "five_vectors": [(8,), (8, 3), (3, 12), (12, 2), (2,)],
}


@pytest.mark.parametrize("name", sorted(CHAINS))
def test_multi_dot_order_values_and_blocks_as_torch(name):
    arrays = [np.random.default_rng(i).standard_normal(s) for i, s in enumerate(CHAINS[name])]

    def run(m):
        ts = [m.tensor(a, requires_grad=True) for a in arrays]
        y = m.linalg.multi_dot(ts)
        y.backward(m.ones_like(y))
        return y.detach().numpy(), [t.grad.numpy() for t in ts], node_chain(y.grad_fn)

    (ey, eg, en), (ty, tg, tn) = run(engine), run(torch)
    np.testing.assert_allclose(ey, ty, rtol=1e-13, atol=1e-13)
    for e, t in zip(eg, tg, strict=True):
        np.testing.assert_allclose(e, t, rtol=1e-13, atol=1e-13)
    assert en == tn

    def make(m):
        ts = [m.tensor(a.astype(np.float32) * 1, requires_grad=True) for a in arrays]
        return forward_backward(m, lambda: m.linalg.multi_dot(ts))

    assert_steps_as_torch(make)


REFUSALS = {
    "vector_int": lambda m: m.linalg.vector_norm(m.arange(4)),
    "vector_dtype_int": lambda m: m.linalg.vector_norm(m.ones(3), dtype=m.int64),
    "vector_dtype_narrowing": lambda m: m.linalg.vector_norm(
        m.ones(3, dtype=m.float64), dtype=m.float32
    ),
    "vector_inf_empty": lambda m: m.linalg.vector_norm(m.ones(0, 3), inf),
    "vector_neg_empty_dim": lambda m: m.linalg.vector_norm(m.ones(0, 3), -1, dim=0),
    "matrix_1d": lambda m: m.linalg.matrix_norm(m.ones(3)),
    "matrix_order": lambda m: m.linalg.matrix_norm(m.ones(3, 3), 3),
    "matrix_order_str": lambda m: m.linalg.matrix_norm(m.ones(3, 3), "abc"),
    "matrix_same_dims": lambda m: m.linalg.matrix_norm(m.ones(3, 3), dim=(1, -1)),
    "matrix_int": lambda m: m.linalg.matrix_norm(m.ones(3, 3, dtype=m.int64)),
    "norm_3d_ord": lambda m: m.linalg.norm(m.ones(2, 3, 3), 2),
    "norm_three_dims": lambda m: m.linalg.norm(m.ones(2, 3, 3), dim=(0, 1, 2)),
    "norm_str_3d": lambda m: m.linalg.norm(m.ones(2, 3, 3), "fro"),
    "vecdot_dtypes": lambda m: m.linalg.vecdot(m.ones(3), m.ones(3, dtype=m.float64)),
    "multi_dot_one": lambda m: m.linalg.multi_dot([m.ones(3, 3)]),
    "multi_dot_3d": lambda m: m.linalg.multi_dot([m.ones(2, 3, 3), m.ones(3, 3)]),
    "multi_dot_middle_1d": lambda m: m.linalg.multi_dot([m.ones(3, 3), m.ones(3), m.ones(3, 3)]),
    "multi_dot_shapes": lambda m: m.linalg.multi_dot([m.ones(3, 4), m.ones(3, 3)]),
}


@pytest.mark.parametrize("name", sorted(REFUSALS))
def test_refusals_as_torch(name):
    assert_raises_as_torch(REFUSALS[name])


@pytest.mark.parametrize("ord", [2, -2, "nuc"])
def test_svd_orders_refused_clearly(ord):  # noqa: A002
    with pytest.raises(NotImplementedError, match="supported: 'fro', 1, -1, inf, -inf"):
        engine.linalg.matrix_norm(engine.ones(3, 3), ord)


@pytest.mark.parametrize("name", sorted(CASES))
def test_meta_shapes_and_dtypes(name):
    x = engine.empty(3, 4, 5, device="meta", requires_grad=True)
    a = engine.empty(4, 6, device="meta", requires_grad=True)
    y = CASES[name](engine, x, a)
    t = CASES[name](torch, torch.tensor(X).float(), torch.tensor(A).float())
    assert tuple(y.shape) == tuple(t.shape)
    assert y.dtype.scalar_name == str(t.dtype).removeprefix("torch.").replace(
        "float64", "Double"
    ).replace("float32", "Float")
    y.sum().backward()
    assert x.grad is None or tuple(x.grad.shape) == (3, 4, 5)


# ---------------------------------------------------------------------------------------------
# torch.tensordot, torch.var_mean, torch.std_mean
# ---------------------------------------------------------------------------------------------
TOP = {  # name -> call(m, x, a); x is [3, 4, 5], a is [4, 6]
    "tensordot_2": lambda m, x, a: m.tensordot(x, x.permute(1, 2, 0)),
    "tensordot_lists": lambda m, x, a: m.tensordot(x, x, dims=([1, 2], [1, 2])),
    "tensordot_permuted": lambda m, x, a: m.tensordot(x, a, dims=([1], [0])),
    "tensordot_0": lambda m, x, a: m.tensordot(a[:2], a[:3], dims=0),
    "tensordot_size_one": lambda m, x, a: m.tensordot(x[:, :1], a[:1], dims=([1], [0])),
    "var_mean_all": lambda m, x, a: m.var_mean(x),
    "var_mean_dim": lambda m, x, a: m.var_mean(x, 1),
    "var_mean_dims_keepdim": lambda m, x, a: m.var_mean(x, (0, 2), keepdim=True, correction=0),
    "std_mean_all": lambda m, x, a: m.std_mean(x),
    "std_mean_dim": lambda m, x, a: m.std_mean(x, -1, correction=2),
    "std_mean_unbiased": lambda m, x, a: m.std_mean(x, 0, False),
}


def _run_top(m, name, dtype=np.float64):
    x = m.tensor(X.astype(dtype), requires_grad=True)
    a = m.tensor(A.astype(dtype), requires_grad=True)
    out = TOP[name](m, x, a)
    outs = out if isinstance(out, tuple) else (out,)
    loss = sum((o * float(i + 2)).sum() for i, o in enumerate(outs))
    loss.backward()
    grads = [t.grad.numpy() if t.grad is not None else None for t in (x, a)]
    return [o.detach().numpy() for o in outs], grads, [node_chain(o.grad_fn) for o in outs]


@pytest.mark.parametrize("name", sorted(TOP))
def test_top_level_values_gradients_and_nodes_as_torch(name):
    (ey, eg, en), (ty, tg, tn) = _run_top(engine, name), _run_top(torch, name)
    for e, t in zip(ey, ty, strict=True):
        np.testing.assert_allclose(e, t, rtol=1e-13, atol=1e-13)
    for e, t in zip(eg, tg, strict=True):
        assert (e is None) == (t is None)
        if e is not None:
            np.testing.assert_allclose(e, t, rtol=1e-12, atol=1e-13)
    assert en == tn


@pytest.mark.parametrize("which", [0, 1])
@pytest.mark.parametrize("fn", ["var_mean", "std_mean"])
def test_one_output_used(fn, which):
    def run(m):
        x = m.tensor(X, requires_grad=True)
        getattr(m, fn)(x, 1)[which].sum().backward()
        return x.grad.numpy()

    np.testing.assert_allclose(run(engine), run(torch), rtol=1e-12, atol=1e-13)


# a size-1 contracted dim (tensordot_size_one) is left out: torch's forward makes and frees one
# more block there (an mm operand copy), which the engine does not
TOP_MEMORY = ["tensordot_2", "tensordot_lists", "tensordot_permuted", "tensordot_0", "var_mean_dim"]
TOP_MEMORY += [
    "var_mean_all",
    "var_mean_dims_keepdim",
    "std_mean_all",
    "std_mean_dim",
    "std_mean_unbiased",
]


@pytest.mark.parametrize("name", TOP_MEMORY)
def test_top_level_allocations_as_torch(name):
    def make(m):
        x = m.tensor(
            np.random.default_rng(8).standard_normal((12, 16, 20)).astype(np.float32),
            requires_grad=True,
        )
        a = m.tensor(
            np.random.default_rng(9).standard_normal((16, 24)).astype(np.float32),
            requires_grad=True,
        )
        held = {}

        def forward():
            out = TOP[name](m, x, a)
            outs = out if isinstance(out, tuple) else (out,)
            held["outs"] = outs

        def backward():
            outs = held.pop("outs")
            m.autograd.backward(list(outs), [m.ones_like(o) for o in outs])

        return forward, backward

    assert_steps_as_torch(make)


TOP_REFUSALS = {
    "var_mean_int": lambda m: m.var_mean(m.arange(4)),
    "std_mean_int": lambda m: m.std_mean(m.arange(4)),
    "tensordot_negative": lambda m: m.tensordot(m.ones(2, 3), m.ones(3, 2), dims=-1),
    "tensordot_too_many": lambda m: m.tensordot(m.ones(2, 3), m.ones(3, 2), dims=3),
    "tensordot_sizes": lambda m: m.tensordot(m.ones(2, 3), m.ones(4, 2), dims=1),
    "tensordot_dtypes": lambda m: m.tensordot(m.ones(2, 3), m.ones(3, 2, dtype=m.float64), dims=1),
    "tensordot_lengths": lambda m: m.tensordot(m.ones(2, 3), m.ones(3, 2), dims=([0], [0, 1])),
}


@pytest.mark.parametrize("name", sorted(TOP_REFUSALS))
def test_top_level_refusals_as_torch(name):
    assert_raises_as_torch(TOP_REFUSALS[name])


@pytest.mark.parametrize("name", sorted(TOP))
def test_top_level_meta_shapes(name):
    x = engine.empty(3, 4, 5, device="meta", requires_grad=True)
    a = engine.empty(4, 6, device="meta", requires_grad=True)
    out = TOP[name](engine, x, a)
    ref = TOP[name](torch, torch.tensor(X), torch.tensor(A))
    outs = out if isinstance(out, tuple) else (out,)
    refs = ref if isinstance(ref, tuple) else (ref,)
    assert [tuple(o.shape) for o in outs] == [tuple(r.shape) for r in refs]
    sum(o.sum() for o in outs).backward()
    assert tuple(x.grad.shape) == (3, 4, 5) if x.grad is not None else tuple(a.grad.shape) == (4, 6)


_NORM_X = np.random.default_rng(4).standard_normal((16, 9))
_NORM_X[0, :2] = 0.0


@pytest.mark.parametrize("p", [2, 1, math.inf, -math.inf, 3.0, 0.5, 1.5, 0])
@pytest.mark.parametrize("dim,keepdim", [(None, False), (1, False), (0, True), ((0, 1), False)])
def test_tensor_norm_is_vector_norm_block_for_block(p, dim, keepdim):
    """Tensor.norm is torch.norm, which is linalg.vector_norm: its node, and every block of
    norm_backward's temporaries (the masks included) in torch's order."""

    steps = {}
    for m in (torch, engine):
        x = m.tensor(_NORM_X, requires_grad=True)
        steps[m] = forward_backward(m, lambda m=m, x=x: x.norm(p, dim, keepdim))
        assert x.norm(p, dim, keepdim).grad_fn.name() == "LinalgVectorNormBackward0"
    for t_step, e_step in zip(steps[torch], steps[engine], strict=True):
        assert engine_sequence(e_step, min_bytes=8) == torch_sequence(t_step, min_bytes=8)


@pytest.mark.parametrize(
    "call",
    [
        lambda m, x, y: m.dist(x, y, math.inf),
        lambda m, x, y: m.dist(x, y, 3),
        lambda m, x, y: x.renorm(3, 0, 1.0),
        lambda m, x, y: m.nn.functional.pairwise_distance(x, y, 3.0),
        lambda m, x, y: m.nn.functional.pairwise_distance(x, y, 1.5),
    ],
    ids=["dist-inf", "dist-3", "renorm", "pairwise-3", "pairwise-1.5"],
)
def test_norm_backward_users_block_for_block(call):
    """dist, renorm and pairwise_distance run torch's norm_backward too."""

    steps = {}
    for m in (torch, engine):
        x = m.tensor(_NORM_X, requires_grad=True)
        y = m.tensor(_NORM_X[::-1].copy() + 0.5, requires_grad=True)
        steps[m] = forward_backward(m, lambda m=m, x=x, y=y: call(m, x, y))
    for t_step, e_step in zip(steps[torch], steps[engine], strict=True):
        assert engine_sequence(e_step, min_bytes=8) == torch_sequence(t_step, min_bytes=8)
