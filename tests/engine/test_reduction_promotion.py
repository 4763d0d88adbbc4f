"""Reductions and scans that change dtype on cpu, and amax/amin/max/min's backward, block for
block against torch 2.13's CPU profiler.

torch's CPU TensorIterator runs a reduction or scan whose input's dtype is not the one it
computes in (bool.sum() in int64, float32.sum(dtype=float64), int32.cumsum(), float32.any())
on a temporary copy of the whole input, made after the result and freed when the op returns;
a half or bfloat16 mean sums into a float32 temporary. meta, which plans a GPU run (CUDA's
kernels cast as they load), makes no copy. Blocks of 64 bytes or less are compared where the
engine models them (MIN0 cases); mean's division by the count wraps the count in a few-byte
scalar the engine does not model (as everywhere else), hence the default filter there.
"""

from __future__ import annotations

import numpy as np
import pytest

import engine
from tests.engine.test_memory_vs_torch import (
    SCALAR_SLACK,
    engine_sequence,
    forward_backward,
    torch_sequence,
)

torch = pytest.importorskip("torch")

MASK = np.random.default_rng(4).standard_normal((64, 64)) > 0
I32 = (np.arange(64 * 64).reshape(64, 64) % 7 + 1).astype(np.int32)
F32 = np.random.default_rng(3).standard_normal((64, 64)).astype(np.float32)
TIES = np.random.default_rng(5).integers(0, 4, (64, 64)).astype(np.float64)  # many ties
SMALL = np.array([[1.0, 3.0, 3.0], [2.0, 2.0, 0.0]])


def _operands(m):
    return {"mask": m.tensor(MASK), "i32": m.tensor(I32), "f32": m.tensor(F32)}


FORWARD = {  # name -> (op(m, t), min_bytes)
    "bool_sum": (lambda m, t: t["mask"].sum(), 0),
    "bool_sum_dim": (lambda m, t: t["mask"].sum(0), 0),
    "bool_sum_keepdim": (lambda m, t: t["mask"].sum(1, keepdim=True), 0),
    "transposed_bool_sum": (lambda m, t: t["mask"].t().sum(0), 0),
    "small_view_bool_sum": (lambda m, t: t["mask"][:3, :4].sum(), 0),
    "zero_d_bool_sum": (lambda m, t: t["mask"][0, 0].sum(), 0),
    "int32_sum": (lambda m, t: t["i32"].sum(), 0),
    "int32_sum_as_int32": (lambda m, t: t["i32"].sum(dtype=m.int32), 0),  # no copy
    "float_sum_float64": (lambda m, t: t["f32"].sum(dtype=m.float64), 0),
    "float_sum_dim_float64": (lambda m, t: t["f32"].sum(0, dtype=m.float64), 0),
    "float_sum_float16": (lambda m, t: t["f32"].sum(dtype=m.float16), 0),
    "bool_sum_out": (lambda m, t: m.sum(t["mask"], 0, out=m.empty(64, dtype=m.int64)), 0),
    "bool_mean_float32": (lambda m, t: t["mask"].mean(dtype=m.float32), SCALAR_SLACK),
    "int_mean_dim_float64": (lambda m, t: t["i32"].mean(0, dtype=m.float64), SCALAR_SLACK),
    "float_mean_float64": (lambda m, t: t["f32"].mean(dtype=m.float64), SCALAR_SLACK),
    "bfloat16_mean": (lambda m, t: t["f32"].bfloat16().mean(), SCALAR_SLACK),
    "float16_mean_dim": (lambda m, t: t["f32"].half().mean(1), SCALAR_SLACK),
    "bool_prod": (lambda m, t: t["mask"].prod(), 0),
    "int32_prod_dim": (lambda m, t: t["i32"].prod(1), 0),
    "bool_cumsum": (lambda m, t: t["mask"].cumsum(0), 0),
    "int32_cumsum": (lambda m, t: t["i32"].cumsum(1), 0),
    "bool_cumsum_int32": (lambda m, t: t["mask"].cumsum(0, dtype=m.int32), 0),
    "float_cumsum_float64": (lambda m, t: t["f32"].cumsum(1, dtype=m.float64), 0),
    "zero_d_int_cumsum": (lambda m, t: t["i32"][0, 0].cumsum(0), 0),  # no copy
    "bool_cumprod": (lambda m, t: t["mask"].cumprod(0), 0),
    "int32_cumprod": (lambda m, t: t["i32"].cumprod(1), 0),
    "int32_nansum": (lambda m, t: t["i32"].nansum(), 0),
    "float_nansum_float64": (lambda m, t: t["f32"].nansum(dtype=m.float64), 0),
    "float_any": (lambda m, t: t["f32"].any(), 0),
    "float_all_dim": (lambda m, t: t["f32"].all(0), 0),
    "int_any_dim": (lambda m, t: t["i32"].any(1, keepdim=True), 0),
    "bool_any": (lambda m, t: t["mask"].any(), 0),  # no copy
}


@pytest.mark.parametrize("name", sorted(FORWARD))
def test_dtype_changing_reduction_blocks_as_torch(name):
    op, min_bytes = FORWARD[name]
    seqs = {}
    for m, sequence in ((torch, torch_sequence), (engine, engine_sequence)):
        t = _operands(m)
        seqs[m] = sequence(lambda m=m, t=t: op(m, t), min_bytes)
    assert seqs[engine] == seqs[torch]


@pytest.mark.parametrize("name", ["bool_sum", "int32_cumsum", "float_any", "bfloat16_mean"])
def test_reduction_copies_are_cpu_only(name):
    op, _ = FORWARD[name]
    peaks = {}
    for device in ("cpu", "meta"):
        t = {k: v.to(device) for k, v in _operands(engine).items()}
        if name == "bfloat16_mean":
            t["f32"] = t["f32"].bfloat16()
        engine.memory.reset_peak_memory_stats(device)
        base = engine.memory.memory_allocated(device)
        y = op(engine, t)
        peaks[device] = engine.memory.max_memory_allocated(device) - base
        assert engine.memory.memory_allocated(device) - base == y.numel() * y.element_size()
    extra = {"bool_sum": 64 * 64 * 8, "int32_cumsum": 64 * 64 * 8, "float_any": 64 * 64}
    # bfloat16 mean: the float32 result and the float32 copy of the input (cpu's way)
    assert peaks["cpu"] == peaks["meta"] + extra.get(name, 4 + 64 * 64 * 4)


@pytest.mark.parametrize("name", sorted(FORWARD))
def test_dtype_changing_reduction_values_as_torch(name):
    op, _ = FORWARD[name]
    got = op(engine, _operands(engine))
    want = op(torch, _operands(torch))
    assert str(got.dtype).split(".")[-1] == str(want.dtype).split(".")[-1]
    assert got.shape == tuple(want.shape)
    np.testing.assert_allclose(
        got.float().numpy().astype(np.float64), want.float().numpy(), rtol=2e-6, atol=1e-6
    )


BACKWARD = {  # name -> (op(m, x) of a float32 leaf, min_bytes)
    "sum_float64": (lambda m, x: x.sum(dtype=m.float64), 0),
    "sum_dim_float64": (lambda m, x: x.sum(1, dtype=m.float64), 0),
    "mean_float64": (lambda m, x: x.mean(dtype=m.float64), SCALAR_SLACK),
    "mean_keepdim_float64": (lambda m, x: x.mean(0, keepdim=True, dtype=m.float64), SCALAR_SLACK),
    "cumsum_float64": (lambda m, x: x.cumsum(1, dtype=m.float64), 0),
    "cumprod_float64": (lambda m, x: x.cumprod(1, dtype=m.float64), SCALAR_SLACK),
    "prod_dim_float64": (lambda m, x: x.prod(1, dtype=m.float64), SCALAR_SLACK),
    "nansum_float64": (lambda m, x: x.nansum(dtype=m.float64), 0),
    "bfloat16_mean": (lambda m, x: x.bfloat16().mean(), SCALAR_SLACK),
    "float16_mean_dim": (lambda m, x: x.half().mean(1), SCALAR_SLACK),
}


def _steps_as_torch(run, arr, dtype="float32", min_bytes=0):
    """forward and backward of run(m, x) on a leaf x: each step's blocks as torch's profiler
    shows them (min_bytes: the smallest block compared), the node chain, x.grad."""
    out = {}
    for m, sequence in ((torch, torch_sequence), (engine, engine_sequence)):
        x = m.tensor(arr, dtype=getattr(m, dtype), requires_grad=True)
        held = {}
        region = forward_backward(m, lambda m=m, x=x: run(m, x), held)
        steps = [sequence(s, min_bytes) for s in region]
        names, fn = [], held["y"].grad_fn
        while fn is not None:
            names.append(fn.name().removeprefix("torch::autograd::"))
            fn = fn.next_functions[0][0] if fn.next_functions else None
        out[m] = steps, names, x.grad.double().numpy()
    (e_steps, e_names, e_grad), (t_steps, t_names, t_grad) = out[engine], out[torch]
    assert e_steps == t_steps
    assert e_names == t_names
    np.testing.assert_allclose(e_grad, t_grad, rtol=1e-6 if dtype == "float32" else 1e-13)


@pytest.mark.parametrize("name", sorted(BACKWARD))
def test_dtype_changing_reduction_backward_as_torch(name):
    op, min_bytes = BACKWARD[name]
    _steps_as_torch(op, F32 * 0.5 + 1.0, min_bytes=min_bytes)


EXTREMES = {  # name -> (op, min_bytes): amax/amin (scale_grad_by_count), max/min along a dim
    # (value_selecting_reduction_backward), max()/min() (evenly_distribute_backward)
    "amax": (lambda m, x: x.amax(), 0),
    "amax_dim": (lambda m, x: x.amax(1), 0),
    "amax_keepdim": (lambda m, x: x.amax(0, keepdim=True), 0),
    "amin_dims": (lambda m, x: x.amin((0, 1)), 0),
    "amin_dim": (lambda m, x: x.amin(-1), 0),
    "max_dim": (lambda m, x: x.max(1)[0], 0),
    "max_dim_keepdim": (lambda m, x: x.max(0, keepdim=True).values, 0),
    "min_dim": (lambda m, x: x.min(1)[0], 0),
    # grad / mask.sum() of two 0-d tensors: torch charges the count's few-byte float copy
    # (the engine's elementwise rule leaves a 0-d operand's cast uncharged)
    "max": (lambda m, x: x.max(), SCALAR_SLACK),
    "min": (lambda m, x: x.min(), SCALAR_SLACK),
}


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("size", ["small", "64x64"])
@pytest.mark.parametrize("name", sorted(EXTREMES))
def test_extreme_backward_as_torch(name, size, dtype):
    op, min_bytes = EXTREMES[name]
    _steps_as_torch(op, SMALL if size == "small" else TIES, dtype, min_bytes)


def test_max_backward_with_nan_as_torch():
    arr = np.array([[1.0, np.nan, 3.0], [np.nan, 2.0, 0.0]])
    grads = {}
    for m in (engine, torch):
        x = m.tensor(arr, requires_grad=True)
        x.max().backward()
        grads[m] = x.grad.numpy()
    np.testing.assert_array_equal(grads[engine], grads[torch])


@pytest.mark.parametrize("name", ["amax_dim", "max", "max_dim", "amin_dims"])
def test_extreme_backward_on_meta(name):
    op, _ = EXTREMES[name]
    x = engine.randn(64, 64, device="meta", requires_grad=True)
    y = op(engine, x)
    y.backward(engine.ones_like(y))
    assert x.grad.shape == (64, 64) and x.grad.dtype is engine.float32


def test_extreme_gradients_by_central_differences():
    rng = np.random.default_rng(7)
    arr = rng.standard_normal((3, 4))  # no ties: the functions are smooth around arr
    eps = 1e-6
    for name in ("amax_dim", "amin_dims", "max", "max_dim"):
        op, _ = EXTREMES[name]
        x = engine.tensor(arr, requires_grad=True)
        op(engine, x).sum().backward()
        numeric = np.zeros_like(arr)
        for i in np.ndindex(arr.shape):
            hi, lo = arr.copy(), arr.copy()
            hi[i] += eps
            lo[i] -= eps
            f = [float(op(engine, engine.tensor(a)).sum()) for a in (hi, lo)]
            numeric[i] = (f[0] - f[1]) / (2 * eps)
        np.testing.assert_allclose(x.grad.numpy(), numeric, atol=1e-7)


@pytest.mark.parametrize("name", ["nanmean", "median_backward", "nanmean_dim"])
def test_mask_counts_copy_their_mask_on_cpu_only(name):
    """nanmean's count of non-NaN elements and median's backward (mask.sum()) read an int64 copy
    of a bool mask on cpu (TensorIterator's cast); CUDA's kernels cast as they read, and meta
    plans a GPU run: no copy there."""
    peaks = {}
    for device in ("cpu", "meta"):
        x = engine.randn(64, 64, device=device, requires_grad=name == "median_backward")
        engine.memory.reset_peak_memory_stats(device)
        base = engine.memory.memory_allocated(device)
        if name == "nanmean":
            y = x.nanmean()
        elif name == "nanmean_dim":
            y = x.nanmean(dim=1)
        else:
            x.median().backward()
            y = x.grad
        peaks[device] = engine.memory.max_memory_allocated(device) - base
        del x, y
    assert peaks["cpu"] - peaks["meta"] == 64 * 64 * 8  # the int64 copy of the 64x64 mask
