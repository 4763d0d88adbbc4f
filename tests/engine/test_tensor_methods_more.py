"""Reductions, scans and selections the engine adds beside sum/cumsum/sort (prod, cumprod,
cummax/cummin, logcumsumexp, nansum, nanmean, median, nanmedian, kthvalue, mode, nonzero,
argwhere, masked_select, take_along_dim, unique, unique_consecutive) against torch 2.13: values,
gradients (and float64 central differences), node names, the index returned on ties, the blocks
torch's CPU profiler shows forward and backward, refusals, meta shapes."""

from __future__ import annotations

import numpy as np
import pytest

import engine
from tests.conftest import assert_raises_as_torch, node_chain
from tests.engine.test_memory_vs_torch import assert_steps_as_torch, forward_backward

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(7)
X = RNG.standard_normal((12, 10))
X_ZERO = X.copy()  # one zero: prod's safe-zeros backward
X_ZERO[3, 4] = 0.0
X_ZEROS = X.copy()  # zeros in two rows (and two in one row)
X_ZEROS[2, 1] = X_ZEROS[2, 7] = X_ZEROS[5, 0] = 0.0
X_NAN = X.copy()
X_NAN[1, 2] = X_NAN[4, 0] = np.nan
X_NAN[6, :] = np.nan
X_TIES = RNG.integers(0, 4, (12, 40)).astype(np.float64)  # many ties
X_POS = RNG.uniform(0.5, 1.5, (6, 5))

# name -> (input, call(m, x)): the differentiable calls, their result a float tensor
CASES = {
    "prod": (X, lambda m, x: x.prod()),
    "prod_one_zero": (X_ZERO, lambda m, x: x.prod()),
    "prod_zeros": (X_ZEROS, lambda m, x: x.prod()),
    "prod_dim": (X, lambda m, x: x.prod(0)),
    "prod_dim_keepdim": (X, lambda m, x: x.prod(1, keepdim=True)),
    "prod_dim_zeros": (X_ZEROS, lambda m, x: m.prod(x, 1)),
    "prod_dim_zero": (X_ZERO, lambda m, x: m.prod(x, -2, True)),
    "cumprod": (X, lambda m, x: x.cumprod(1)),
    "cumprod_dim0": (X, lambda m, x: m.cumprod(x, 0)),
    "cumprod_zeros": (X_ZEROS, lambda m, x: x.cumprod(1)),
    "cummax": (X, lambda m, x: x.cummax(1)[0]),
    "cummin_dim0": (X, lambda m, x: m.cummin(x, 0).values),
    "cummax_ties": (X_TIES, lambda m, x: x.cummax(1).values),
    "logcumsumexp": (X, lambda m, x: x.logcumsumexp(1)),
    "logcumsumexp_dim0": (X, lambda m, x: m.logcumsumexp(x, 0)),
    "nansum": (X_NAN, lambda m, x: x.nansum()),
    "nansum_dim": (X_NAN, lambda m, x: m.nansum(x, 1)),
    "nanmean": (X_NAN, lambda m, x: x.nanmean()),
    "nanmean_dim": (X_NAN, lambda m, x: x.nanmean(0, keepdim=True)),
    "median": (X, lambda m, x: x.median()),
    "median_ties": (X_TIES, lambda m, x: x.median()),
    "median_dim": (X, lambda m, x: x.median(1).values),
    "median_dim0": (X_TIES, lambda m, x: m.median(x, 0)[0]),
    "median_nan": (X_NAN, lambda m, x: x.median(1, keepdim=True).values),
    "nanmedian": (X_NAN, lambda m, x: x.nanmedian()),
    "nanmedian_dim": (X_NAN, lambda m, x: x.nanmedian(1).values),
    "nanmedian_dim0": (X_NAN, lambda m, x: m.nanmedian(x, 0).values),
    "kthvalue": (X, lambda m, x: x.kthvalue(3, 1).values),
    "kthvalue_ties": (X_TIES, lambda m, x: m.kthvalue(x, 17, 1, True)[0]),
    "kthvalue_dim0": (X_TIES, lambda m, x: x.kthvalue(5, 0).values),
    "mode": (X_TIES, lambda m, x: x.mode(1).values),
    "mode_dim0": (X_TIES, lambda m, x: m.mode(x, 0, True)[0]),
    "masked_select": (X, lambda m, x: x.masked_select(x > 0.3)),
    "masked_select_broadcast": (X, lambda m, x: m.masked_select(x, x[0] > 0)),
    "take_along_dim": (X, lambda m, x: m.take_along_dim(x, (x.detach() > 0).long()[:, :3], 1)),
    "take_along_dim_flat": (X, lambda m, x: x.take_along_dim(m.tensor([3, 0, 17]))),
}

_GRAD = np.random.default_rng(3)


def _run(m, name):
    arr, call = CASES[name]
    x = m.tensor(arr, requires_grad=True)
    y = call(m, x)
    g = _GRAD.standard_normal(tuple(y.shape)) if y.ndim else np.array(1.7)
    y.backward(m.tensor(g))
    return y.detach().numpy(), x.grad.numpy(), node_chain(y.grad_fn)


@pytest.mark.parametrize("name", sorted(CASES))
def test_values_gradients_and_nodes_as_torch(name):
    global _GRAD
    _GRAD = np.random.default_rng(3)
    ey, eg, en = _run(engine, name)
    _GRAD = np.random.default_rng(3)
    ty, tg, tn = _run(torch, name)
    np.testing.assert_allclose(ey, ty, rtol=1e-12, atol=1e-300, equal_nan=True)
    np.testing.assert_allclose(eg, tg, rtol=1e-10, atol=1e-12)
    assert en == tn


@pytest.mark.parametrize(
    "name",
    [
        "prod",
        "prod_one_zero",
        "prod_dim",
        "prod_dim_zeros",
        "cumprod",
        "logcumsumexp",
        "nansum_dim",
        "nanmean_dim",
        "median",
        "kthvalue",
        "masked_select",
        "take_along_dim",
    ],
)
def test_gradients_against_central_differences(name):
    arr, call = CASES[name]
    arr = np.where(np.isnan(arr), 0.5, arr)[:4, :5].copy() if name != "prod_one_zero" else arr
    if name == "prod_one_zero":
        arr = X_POS.copy()
        arr[2, 3] = 0.0
    if name == "prod_dim_zeros":
        arr = X_POS.copy()
        arr[1, 1] = arr[1, 3] = arr[4, 0] = 0.0
    rng = np.random.default_rng(1)
    x = engine.tensor(arr, requires_grad=True)
    y = call(engine, x)
    w = rng.standard_normal(tuple(y.shape))
    (y * engine.tensor(w)).sum().backward()
    num = np.zeros_like(arr)
    eps = 1e-6
    for i in np.ndindex(arr.shape):
        for sign in (1, -1):
            a = arr.copy()
            a[i] += sign * eps
            v = call(engine, engine.tensor(a)).numpy()
            num[i] += sign * float((v * w).sum()) / (2 * eps)
    np.testing.assert_allclose(x.grad.numpy(), num, rtol=1e-5, atol=1e-7)


MEMORY = [
    "prod",
    "prod_one_zero",
    "prod_zeros",
    "prod_dim",
    "prod_dim_keepdim",
    "prod_dim_zeros",
    "cumprod",
    "cumprod_dim0",
    "cummax",
    "cummin_dim0",
    "logcumsumexp",
    "logcumsumexp_dim0",
    "nansum",
    "nansum_dim",
    "nanmean",
    "nanmean_dim",
    "median",
    "median_dim",
    "median_dim0",
    "nanmedian",
    "nanmedian_dim0",
    "kthvalue",
    "kthvalue_dim0",
    "mode",
    "mode_dim0",
    "masked_select",
    "masked_select_broadcast",
    "take_along_dim",
]


@pytest.mark.parametrize("name", MEMORY)
def test_blocks_forward_and_backward_as_torch(name):
    arr, call = CASES[name]
    big = np.tile(arr, (6, 4))  # blocks above the scalar slack

    def make(m):
        x = m.tensor(big.astype(np.float32), requires_grad=True)
        return forward_backward(m, lambda: call(m, x))

    assert_steps_as_torch(make)


def test_masked_select_parallel_path_blocks_as_torch():
    # 32768 elements or more: torch's kernel builds an int64 mask and its prefix sum
    big = np.random.default_rng(0).standard_normal((256, 160))

    def make(m):
        x = m.tensor(big.astype(np.float32), requires_grad=True)
        return forward_backward(m, lambda: x.masked_select(x > 0))

    assert_steps_as_torch(make)


# ---------------------------------------------------------------------------------------------
# ties and indices
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("op", ["median", "nanmedian", "mode"])
@pytest.mark.parametrize("n", [7, 16, 17, 40, 300])
def test_index_on_ties_as_torch(op, n):
    a = np.random.default_rng(n).integers(0, 3, (20, n)).astype(np.float64)
    a[0, ::3] = np.nan
    ev, ei = getattr(engine.tensor(a), op)(1)
    tv, ti = getattr(torch.tensor(a), op)(1)
    np.testing.assert_array_equal(ev.numpy(), tv.numpy())
    np.testing.assert_array_equal(ei.numpy(), ti.numpy())


@pytest.mark.parametrize("k", [1, 5, 20, 40])
def test_kthvalue_index_on_ties_as_torch(k):
    a = np.random.default_rng(k).integers(0, 3, (20, 40)).astype(np.float32)
    ev, ei = engine.tensor(a).kthvalue(k, 1)
    tv, ti = torch.tensor(a).kthvalue(k, 1)
    np.testing.assert_array_equal(ev.numpy(), tv.numpy())
    np.testing.assert_array_equal(ei.numpy(), ti.numpy())


def test_cummax_cummin_indices_nan_and_integers_as_torch():
    a = np.array([[1.0, 3.0, 3.0, np.nan, 2.0, np.nan], [2.0, 2.0, 1.0, 1.0, 5.0, 0.0]])
    for op in ("cummax", "cummin"):
        for arr in (a, np.nan_to_num(a).astype(np.int64)):
            ev, ei = getattr(engine.tensor(arr), op)(1)
            tv, ti = getattr(torch.tensor(arr), op)(1)
            np.testing.assert_array_equal(ev.numpy(), tv.numpy())
            np.testing.assert_array_equal(ei.numpy(), ti.numpy())


# ---------------------------------------------------------------------------------------------
# dtypes
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "call",
    [
        lambda m, x: x.prod(),
        lambda m, x: x.prod(1),
        lambda m, x: x.prod(0, dtype=m.float64),
        lambda m, x: x.cumprod(0),
        lambda m, x: x.nansum(),
        lambda m, x: x.nansum(1),
        lambda m, x: x.cummax(0).values,
        lambda m, x: x.median(),
        lambda m, x: x.median(1).values,
        lambda m, x: x.kthvalue(2, 1).values,
        lambda m, x: x.mode(1).values,
        lambda m, x: m.nonzero(x),
        lambda m, x: m.argwhere(x),
        lambda m, x: x.unique(),
    ],
)
@pytest.mark.parametrize("dtype", ["int32", "uint8", "bool", "int64"])
def test_integer_and_bool_inputs_as_torch(call, dtype):
    a = np.random.default_rng(0).integers(0, 3, (4, 5)).astype(dtype)
    try:
        t = call(torch, torch.tensor(a))
    except NotImplementedError:  # torch refuses bool here: so does the engine, in its words
        assert_raises_as_torch(lambda m: call(m, m.tensor(a)))
        return
    e = call(engine, engine.tensor(a))
    assert str(e.dtype).split(".")[1] == str(t.dtype).split(".")[1]
    np.testing.assert_array_equal(e.numpy(), t.numpy())


# ---------------------------------------------------------------------------------------------
# nonzero, argwhere, masked_select, unique
# ---------------------------------------------------------------------------------------------
def test_nonzero_as_tuple_and_argwhere_as_torch():
    a = np.array([[0.0, 1.5, 0.0], [2.0, 0.0, -1.0]])
    for m_call in (
        lambda m: m.nonzero(m.tensor(a)),
        lambda m: m.tensor(a).nonzero(as_tuple=True),
        lambda m: m.argwhere(m.tensor(a)),
        lambda m: m.tensor(3.0).nonzero(),
        lambda m: m.tensor(0.0).nonzero(as_tuple=True),
        lambda m: m.tensor(a[0]).nonzero(as_tuple=True),
    ):
        e, t = m_call(engine), m_call(torch)
        e, t = (e, t) if isinstance(t, tuple) else ((e,), (t,))
        assert len(e) == len(t)
        for p, q in zip(e, t, strict=True):
            assert tuple(p.shape) == tuple(q.shape)
            np.testing.assert_array_equal(p.numpy(), q.numpy())


@pytest.mark.parametrize(
    "call",
    [
        lambda m, x: x.nonzero(),
        lambda m, x: m.nonzero(x > 0, as_tuple=True),
        lambda m, x: m.argwhere(x > 0.5),
    ],
)
def test_nonzero_blocks_as_torch(call):
    a = np.random.default_rng(2).standard_normal((64, 32)).astype(np.float32)
    a[a < -1] = 0.0
    assert_steps_as_torch(lambda m: [lambda: call(m, m.tensor(a))])


UNIQUE = {
    "plain": lambda m, x: m.unique(x),
    "inverse": lambda m, x: x.unique(return_inverse=True),
    "counts": lambda m, x: m.unique(x, sorted=False, return_counts=True),
    "both": lambda m, x: m.unique(x, return_inverse=True, return_counts=True),
    "consecutive": lambda m, x: m.unique_consecutive(x),
    "consecutive_both": lambda m, x: x.unique_consecutive(return_inverse=True, return_counts=True),
    "consecutive_counts": lambda m, x: m.unique_consecutive(x, return_counts=True),
}


@pytest.mark.parametrize("name", sorted(UNIQUE))
@pytest.mark.parametrize("dtype", ["float32", "int64", "uint8"])
def test_unique_values_and_blocks_as_torch(name, dtype):
    a = np.random.default_rng(0).integers(0, 40, (64, 32)).astype(dtype)
    a[:, 5] = a[:, 4]  # runs for unique_consecutive
    call = UNIQUE[name]
    e, t = call(engine, engine.tensor(a)), call(torch, torch.tensor(a))
    e, t = (e, t) if isinstance(t, tuple) else ((e,), (t,))
    for p, q in zip(e, t, strict=True):
        np.testing.assert_array_equal(p.numpy(), q.numpy())
    assert_steps_as_torch(lambda m: [lambda: call(m, m.tensor(a))])


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_unique_along_a_dim_as_torch(dim):
    a = np.random.default_rng(1).integers(0, 2, (6, 5, 3)).astype(np.float64)
    a[1] = a[0]
    for call in (
        lambda m, x: m.unique(x, dim=dim, return_inverse=True, return_counts=True),
        lambda m, x: m.unique_consecutive(x, dim=dim, return_inverse=True, return_counts=True),
    ):
        for p, q in zip(call(engine, engine.tensor(a)), call(torch, torch.tensor(a)), strict=True):
            np.testing.assert_array_equal(p.numpy(), q.numpy())


def test_unique_has_no_gradient_as_torch():
    for call in (lambda m, x: m.unique(x), lambda m, x: m.unique_consecutive(x)):
        e = call(engine, engine.tensor([1.0, 2.0, 2.0], requires_grad=True))
        t = call(torch, torch.tensor([1.0, 2.0, 2.0], requires_grad=True))
        assert e.grad_fn.name() == t.grad_fn.name()
        assert_raises_as_torch(
            lambda m, c=call: c(m, m.tensor([1.0, 2.0], requires_grad=True)).sum().backward()
        )


# ---------------------------------------------------------------------------------------------
# in place, refusals, meta
# ---------------------------------------------------------------------------------------------
def test_cumprod_in_place_as_torch():
    for m in (engine, torch):
        x = m.tensor(X_POS, requires_grad=True)
        y = x * 1.0
        y.cumprod_(1)
        y.backward(m.ones_like(y))
        if m is engine:
            ey, eg, en = y.detach().numpy(), x.grad.numpy(), node_chain(y.grad_fn)
    np.testing.assert_allclose(ey, y.detach().numpy(), rtol=1e-13)
    np.testing.assert_allclose(eg, x.grad.numpy(), rtol=1e-12)
    assert en == node_chain(y.grad_fn)


@pytest.mark.parametrize(
    "call",
    [
        lambda m: m.ones(2, 3).prod(2),
        lambda m: m.ones(2, 3).cumprod(-3),
        lambda m: m.ones(2, 3, dtype=m.int64).logcumsumexp(0),
        lambda m: m.ones(2, 3).kthvalue(4, 1),
        lambda m: m.ones(2, 3).kthvalue(0, 1),
        lambda m: m.ones(2, 0).median(1),
        lambda m: m.ones(2, 0).mode(1),
        lambda m: m.ones(2, 3, dtype=m.int64).nanmean(),
        lambda m: m.ones(2, 3).masked_select(m.ones(2, 3)),
        lambda m: m.ones(2, 3).masked_select(m.ones(4, dtype=m.bool)),
        lambda m: m.take_along_dim(m.ones(2, 3), m.ones(2, 3)),
        lambda m: m.take_along_dim(m.ones(2, 3), m.ones(3, dtype=m.int64), 1),
    ],
)
def test_refusals_as_torch(call):
    assert_raises_as_torch(call)


@pytest.mark.parametrize(
    "call, shape, dtype",
    [
        (lambda m, x: x.prod(), (), "float32"),
        (lambda m, x: x.prod(1, keepdim=True), (4, 1), "float32"),
        (lambda m, x: x.cumprod(0), (4, 6), "float32"),
        (lambda m, x: x.cummax(1).indices, (4, 6), "int64"),
        (lambda m, x: x.logcumsumexp(1), (4, 6), "float32"),
        (lambda m, x: x.nansum(0), (6,), "float32"),
        (lambda m, x: x.nanmean(1), (4,), "float32"),
        (lambda m, x: x.median(0).values, (6,), "float32"),
        (lambda m, x: x.median(), (), "float32"),
        (lambda m, x: x.kthvalue(2, 1).indices, (4,), "int64"),
        (lambda m, x: x.mode(1).values, (4,), "float32"),
        (lambda m, x: x.quantile(0.3, 1), (4,), "float32"),
        (lambda m, x: x.nanquantile(0.5, 0, True), (1, 6), "float32"),
    ],
)
def test_meta_shapes_and_dtypes(call, shape, dtype):
    x = engine.empty(4, 6, device="meta", requires_grad=True)
    y = call(engine, x)
    assert tuple(y.shape) == shape and str(y.dtype) == f"engine.{dtype}"
    if y.requires_grad:
        y.sum().backward()
        assert tuple(x.grad.shape) == (4, 6)


def test_meta_refuses_what_depends_on_values():
    x = engine.empty(4, 6, device="meta")
    for call in (lambda: x.nonzero(), lambda: x.masked_select(x > 0), lambda: x.unique()):
        with pytest.raises(NotImplementedError, match="meta tensor"):
            call()


# ---------------------------------------------------------------------------------------------
# quantile / nanquantile
# ---------------------------------------------------------------------------------------------
Q_NAN = X[:6, :7].copy()
Q_NAN[1, 2] = np.nan
Q_NAN[3, :] = np.nan
QUANTILES = {
    "whole": lambda m, x, mode: x.quantile(0.3, interpolation=mode),
    "dim": lambda m, x, mode: x.quantile(0.7, 1, interpolation=mode),
    "dim0_tensor_q": lambda m, x, mode: m.quantile(
        x, m.tensor([0.1, 0.5, 1.0], dtype=x.dtype), 0, True, interpolation=mode
    ),
    "keepdim_last": lambda m, x, mode: x.quantile(0.5, -1, keepdim=True, interpolation=mode),
    "nan_dim": lambda m, x, mode: x.nanquantile(0.25, 1, interpolation=mode),
    "nan_tensor_q": lambda m, x, mode: m.nanquantile(
        x, m.tensor([0.0, 0.6], dtype=x.dtype), 1, interpolation=mode
    ),
}


@pytest.mark.parametrize("mode", ["linear", "lower", "higher", "midpoint", "nearest"])
@pytest.mark.parametrize("name", sorted(QUANTILES))
def test_quantile_values_gradients_and_nodes_as_torch(name, mode):
    call = QUANTILES[name]
    for arr in (X[:6, :7], Q_NAN):
        res = []
        for m in (engine, torch):
            x = m.tensor(arr, requires_grad=True)
            y = call(m, x, mode)
            y.backward(m.tensor(np.arange(1.0, y.numel() + 1).reshape(tuple(y.shape))))
            res.append((y.detach().numpy(), x.grad.numpy(), node_chain(y.grad_fn)))
        (ey, eg, en), (ty, tg, tn) = res
        np.testing.assert_allclose(ey, ty, rtol=1e-13, equal_nan=True)
        if not (name == "whole" and arr is Q_NAN):  # NaNs tie in a 42-element sort: see below
            np.testing.assert_allclose(eg, tg, rtol=1e-12, atol=1e-14)
        assert en == tn


@pytest.mark.parametrize(
    "call",
    [
        lambda m: m.ones(3).quantile(1.5),
        lambda m: m.ones(3).quantile(m.tensor([0.2, 1.5])),
        lambda m: m.ones(3).quantile(0.5, interpolation="foo"),
        lambda m: m.ones(3, dtype=m.int64).quantile(0.5),
        lambda m: m.ones(3).quantile(m.tensor([[0.2]])),
        lambda m: m.ones(3).quantile(m.tensor([0.2], dtype=m.float64)),
        lambda m: m.ones(0).nanquantile(0.5),
    ],
)
def test_quantile_refusals_as_torch(call):
    assert_raises_as_torch(call)
