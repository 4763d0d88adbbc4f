"""engine/ops/sorting.py against torch: sort / argsort / topk values, indices and gradients
(NaN as the largest value, ties in index order), cumsum (dtypes, the reversed-cumsum backward,
in place), all / any, argmin; peaks as torch's CPU profiler; meta charging as cpu."""

from __future__ import annotations

import numpy as np
import pytest

import engine
from tests.conftest import assert_raises_as_torch
from tests.engine.test_memory_vs_torch import assert_peak_as_torch

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(5)
DISTINCT = RNG.permutation(60).reshape(3, 4, 5) * 0.25 - 7.0
WITH_NAN_AND_TIES = np.array([[3.0, 1.0, np.nan, 2.0, 1.0], [0.5, -1.0, 4.0, -1.0, 2.0]])


def _both(call, arr, grad=True):
    out = []
    for lib in (engine, torch):
        x = lib.tensor(arr, requires_grad=grad)
        res = call(lib, x)
        values, indices = (res[0], res[1]) if isinstance(res, tuple) else (res, None)
        if grad:
            w = lib.tensor(np.linspace(1.0, 3.0, values.numel()).reshape(tuple(values.shape)))
            (values * w).sum().backward()
        out.append(
            (
                values.detach().numpy(),
                None if indices is None else indices.numpy(),
                x.grad.numpy() if grad else None,
                values.grad_fn.name() if grad else None,
            )
        )
    return out


CALLS = {
    "sort": lambda m, x: tuple(x.sort()),
    "sort dim 0": lambda m, x: tuple(m.sort(x, 0)),
    "sort descending": lambda m, x: tuple(x.sort(dim=1, descending=True)),
    "topk": lambda m, x: tuple(x.topk(3)),
    "topk smallest dim 1": lambda m, x: tuple(x.topk(2, dim=1, largest=False)),
    "topk 0": lambda m, x: tuple(x.topk(0, dim=0)),
    "cumsum": lambda m, x: x.cumsum(-1),
    "cumsum dim 0": lambda m, x: m.cumsum(x, 0),
    "cumsum dim of one": lambda m, x: x[:, :1].cumsum(1),
}


@pytest.mark.parametrize("name", list(CALLS))
def test_values_indices_and_gradients_as_torch(name):
    (ev, ei, eg, en), (tv, ti, tg, tn) = _both(CALLS[name], DISTINCT)
    np.testing.assert_allclose(ev, tv, rtol=1e-12)
    if ti is not None:
        np.testing.assert_array_equal(ei, ti)
    np.testing.assert_allclose(eg, tg, rtol=1e-12)
    assert en == tn


@pytest.mark.parametrize("descending", [False, True])
def test_sort_puts_nan_as_the_largest_and_keeps_ties_in_order(descending):
    (ev, ei, _, _), (tv, ti, _, _) = _both(
        lambda m, x: tuple(x.sort(descending=descending, stable=True)), WITH_NAN_AND_TIES, False
    )
    np.testing.assert_array_equal(ev, tv)
    np.testing.assert_array_equal(ei, ti)
    e = engine.tensor(WITH_NAN_AND_TIES)
    t = torch.tensor(WITH_NAN_AND_TIES)
    kw = dict(dim=1, descending=descending)
    np.testing.assert_array_equal(e.argsort(**kw).numpy(), t.argsort(**kw, stable=True).numpy())
    np.testing.assert_array_equal(e.topk(2).values.numpy(), t.topk(2).values.numpy())
    assert e.argmin().item() == t.argmin().item()  # the NaN
    np.testing.assert_array_equal(e.argmin(1).numpy(), t.argmin(1).numpy())


def test_cumsum_dtypes_and_in_place_as_torch():
    for arr in (np.array([[1, 2, 3], [4, 5, 6]], dtype=np.int32), np.array([True, False, True])):
        ours, theirs = engine.tensor(arr).cumsum(0), torch.tensor(arr).cumsum(0)
        assert str(ours.dtype).split(".")[-1] == str(theirs.dtype).split(".")[-1] == "int64"
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    x = engine.tensor(np.arange(6.0).reshape(2, 3))
    assert engine.cumsum(x, 1, dtype=engine.float32).dtype == engine.float32
    version = x._version
    assert x.cumsum_(1) is x and x._version == version + 1
    np.testing.assert_array_equal(x.numpy(), torch.arange(6.0).reshape(2, 3).cumsum_(1).numpy())
    a = engine.tensor(np.arange(4.0), requires_grad=True)
    b = a * 1
    b.cumsum_(0)
    (b * engine.tensor([1.0, 2.0, 3.0, 4.0])).sum().backward()
    np.testing.assert_array_equal(a.grad.numpy(), [10.0, 9.0, 7.0, 4.0])


@pytest.mark.parametrize(
    "call",
    [
        lambda m: m.tensor([[1, 0], [1, 1]]).all(),
        lambda m: m.tensor([[1, 0], [1, 1]]).all(1),
        lambda m: m.tensor([[0.0, 0.0], [1.0, 0.0]]).any(0, keepdim=True),
        lambda m: m.tensor([[0.0, 0.0], [1.0, 0.0]]).any(),
        lambda m: m.tensor([1, 0], dtype=m.uint8).all(),
        lambda m: m.tensor([[True], [False]]).any((0, 1)),
        lambda m: m.tensor(2.0).all(),
    ],
)
def test_all_and_any_as_torch(call):
    ours, theirs = call(engine), call(torch)
    assert str(ours.dtype).split(".")[-1] == str(theirs.dtype).split(".")[-1]
    np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    assert ours.grad_fn is None


def test_topk_refuses_k_out_of_range_as_torch():
    for k in (6, -1):
        assert_raises_as_torch(lambda m, k=k: m.ones(2, 5).topk(k), RuntimeError)


def _profile_step(m):
    x = m.tensor(np.random.default_rng(0).standard_normal((64, 128)).astype(np.float32))
    x.requires_grad_(True)

    def region():
        x.grad = None
        top = x.topk(16, dim=1).values
        ranked = x.sort(dim=0, descending=True).values
        (top.cumsum(1).sum() + (ranked * x).mean()).backward()

    region()
    return region


@pytest.mark.torch
def test_peak_matches_pytorch_profiler():
    assert_peak_as_torch(_profile_step)


@pytest.mark.parametrize("name", list(CALLS))
def test_meta_charges_as_cpu(name):
    def run(device):
        engine.memory.reset_peak_memory_stats(device)
        x = engine.ones(3, 4, 5, device=device, requires_grad=True) * 1
        base = engine.memory.memory_allocated(device)
        res = CALLS[name](engine, x)
        values = res[0] if isinstance(res, tuple) else res
        values.sum().backward()
        return tuple(values.shape), engine.memory.max_memory_allocated(device) - base

    assert run("meta") == run("cpu")


LSE = np.array([[1.0, 2.0, 3.0], [1000.0, 1000.0, -np.inf], [-np.inf, -np.inf, -np.inf]])


@pytest.mark.parametrize(
    "call",
    [
        lambda m, x: x[:2].logsumexp(1),
        lambda m, x: m.logsumexp(x[:2], (0, 1)),
        lambda m, x: x[:2].logsumexp(0, keepdim=True),
        lambda m, x: x[:2].t().logsumexp(-1),
    ],
)
def test_logsumexp_values_gradient_and_node_as_torch(call):
    out = []
    for lib in (engine, torch):
        x = lib.tensor(LSE, requires_grad=True)
        y = call(lib, x)
        (y * lib.tensor(np.linspace(1.0, 2.0, y.numel()).reshape(tuple(y.shape)))).sum().backward()
        out.append((y.detach().numpy(), x.grad.numpy(), y.grad_fn.name()))
    (ey, eg, en), (ty, tg, tn) = out
    np.testing.assert_allclose(ey, ty, rtol=1e-12)
    np.testing.assert_allclose(eg, tg, rtol=1e-12, atol=1e-300)
    assert en == tn


def test_logsumexp_edges_as_torch():
    for call in (
        lambda m: m.tensor(LSE).logsumexp(1),  # a row of -inf: -inf, no NaN
        lambda m: m.tensor([1, 2]).logsumexp(0),  # ints: the default float dtype
        lambda m: m.ones(0, 3).logsumexp(0),
    ):
        ours, theirs = call(engine), call(torch)
        assert str(ours.dtype).split(".")[-1] == str(theirs.dtype).split(".")[-1]
        np.testing.assert_allclose(ours.numpy(), theirs.numpy())


@pytest.mark.parametrize(
    "call",
    [
        lambda m, z: z.repeat_interleave(2, dim=1),
        lambda m, z: m.repeat_interleave(z, 3),
        lambda m, z: z.repeat_interleave(m.tensor([1, 0]), dim=0),
        lambda m, z: z.t().repeat_interleave(m.tensor([2]), dim=-1),
    ],
)
def test_repeat_interleave_as_torch(call):
    out = []
    for lib in (engine, torch):
        z = lib.tensor(np.arange(6.0).reshape(2, 3), requires_grad=True)
        r = call(lib, z * 1)
        (r * lib.tensor(np.linspace(-1.0, 1.0, r.numel()).reshape(tuple(r.shape)))).sum().backward()
        out.append((r.detach().numpy(), r.stride(), z.grad.numpy(), r.grad_fn.name()))
    for a, b in zip(*out, strict=True):
        if isinstance(a, str):
            assert a == b
        else:
            np.testing.assert_array_equal(a, b)
    for bad in (
        lambda m: m.ones(2, 3).repeat_interleave(-1, dim=0),
        lambda m: m.ones(2, 3).repeat_interleave(m.tensor([1, 2, 3]), dim=0),
    ):
        assert_raises_as_torch(bad, RuntimeError)


def _lse_step(m):
    x = m.tensor(np.random.default_rng(2).standard_normal((64, 128)).astype(np.float32))
    x.requires_grad_(True)

    def region():
        x.grad = None
        h = x.repeat_interleave(2, dim=0)
        (h.logsumexp(1).sum() + x.logsumexp(0, keepdim=True).mean()).backward()

    region()
    return region


@pytest.mark.torch
def test_logsumexp_and_repeat_interleave_peak_as_pytorch_profiler():
    assert_peak_as_torch(_lse_step)


NORM_IN = np.array([[3.0, -4.0, 0.0, 1.5], [0.0, 0.0, 0.0, 0.0], [-2.0, 2.0, 1.0, -0.5]])


@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("p", [2, 1, np.inf, -np.inf, 3, 1.5, 0.5, 0, "fro"])
def test_norm_values_gradient_and_node_as_torch(p, keepdim):
    out = []
    for lib in (engine, torch):
        x = lib.tensor(NORM_IN, requires_grad=True)
        y = x.norm(p) if p == "fro" else x.norm(p=p, dim=1, keepdim=keepdim)
        (y * lib.tensor(np.linspace(1.0, 2.0, y.numel()).reshape(tuple(y.shape)))).sum().backward()
        grad = None if x.grad is None else x.grad.numpy()
        out.append((y.detach().numpy(), grad, y.grad_fn.name()))
    (ey, eg, en), (ty, tg, tn) = out
    np.testing.assert_allclose(ey, ty, rtol=1e-12)
    assert (eg is None) == (tg is None)
    if eg is not None:
        np.testing.assert_allclose(eg, tg, rtol=1e-12, atol=1e-15)
    assert en == tn


def test_norm_dims_dtypes_and_refusals_as_torch():
    for call in (
        lambda m: m.tensor(NORM_IN).norm(dim=(0, 1), keepdim=True),
        lambda m: m.tensor(NORM_IN.astype(np.float32)).norm(p=1, dim=0),
        lambda m: m.norm(m.tensor(NORM_IN), 2, -1),
    ):
        ours, theirs = call(engine), call(torch)
        assert str(ours.dtype).split(".")[-1] == str(theirs.dtype).split(".")[-1]
        np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-6)
    assert_raises_as_torch(lambda m: m.tensor([1, 2]).norm(), RuntimeError)


def _norm_step(m):
    x = m.tensor(np.random.default_rng(6).standard_normal((64, 128)).astype(np.float32))
    x.requires_grad_(True)

    def region():
        x.grad = None
        h = x.norm() + x.norm(p=1, dim=1).mean() + x.norm(p=3, dim=0).sum()
        h = h + x.norm(p=np.inf, dim=1).sum() + x.norm(p=0.5, dim=1).sum() + x.norm(p=1.5)
        h.backward()

    region()
    return region


@pytest.mark.torch
def test_norm_step_peaks_as_pytorch_profiler():
    assert_peak_as_torch(_norm_step)
