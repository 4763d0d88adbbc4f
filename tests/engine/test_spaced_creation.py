"""linspace, logspace and eye against torch 2.13: torch's two-sided linspace formula (both ends
exact), integer results from truncated ends, logspace's float64 power, one allocation each, and
the refusals."""

from __future__ import annotations

import numpy as np
import pytest

import engine
from tests.conftest import assert_raises_as_torch

torch = pytest.importorskip("torch")

ARGS = [(0, 1, 5), (0, 10, 7), (-1, 1, 1), (3.0, -2.0, 6), (0, 1, 0), (0.5, 7.25, 33), (-3, 3, 13)]
DTYPES = [None, "float64", "int64", "int32"]


def _dt(m, name):
    return None if name is None else getattr(m, name)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("args", ARGS)
def test_linspace_is_torchs_to_the_bit(args, dtype):
    e = engine.linspace(*args, dtype=_dt(engine, dtype))
    t = torch.linspace(*args, dtype=_dt(torch, dtype))
    assert str(e.dtype) == str(t.dtype).replace("torch", "engine")
    assert e.tolist() == t.tolist()


@pytest.mark.parametrize("base", [10.0, 2.0, 2.5])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("args", ARGS)
def test_logspace_as_torch(args, dtype, base):
    e = engine.logspace(*args, base=base, dtype=_dt(engine, dtype)).numpy()
    t = torch.logspace(*args, base=base, dtype=_dt(torch, dtype)).numpy()
    assert e.dtype == t.dtype
    if dtype == "float64":  # numpy's pow against C's: within an ulp
        np.testing.assert_allclose(e, t, rtol=3e-16, atol=0)
    else:
        np.testing.assert_array_equal(e, t)


@pytest.mark.parametrize("shape", [(3,), (2, 4), (4, 2), (0,), (1, 0)])
def test_eye_as_torch(shape):
    for dtype in (None, "int64"):
        e, t = (
            engine.eye(*shape, dtype=_dt(engine, dtype)),
            torch.eye(*shape, dtype=_dt(torch, dtype)),
        )
        assert e.tolist() == t.tolist() and tuple(e.shape) == tuple(t.shape)


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_one_allocation_each(device):
    engine.memory.reset_peak_memory_stats(device)
    base = engine.memory.memory_allocated(device)
    made = [
        engine.linspace(0, 1, 100, device=device),
        engine.logspace(0, 1, 50, dtype=engine.float64, device=device),
        engine.eye(8, 4, device=device),
    ]
    assert engine.memory.memory_allocated(device) - base == 400 + 400 + 128
    assert engine.memory.max_memory_allocated(device) - base == 928
    assert engine.linspace(0, 1, 3, requires_grad=True, device=device).requires_grad
    del made


@pytest.mark.parametrize(
    "call",
    [
        lambda m: m.linspace(0, 1, -1),
        lambda m: m.logspace(0, 1, -2),
        lambda m: m.eye(-1),
        lambda m: m.eye(2, -3),
    ],
)
def test_refusals_as_torch(call):
    assert_raises_as_torch(call)
