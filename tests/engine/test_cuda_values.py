"""The ops whose results are not float gradients (predicates, indices, counts, integer and bool
outputs) computed on a GPU: CuPy's paths give exactly what the CPU's numpy paths give, dtype and
shape included. The float programs and their gradients run on cuda in test_nn.py."""

from __future__ import annotations

import numpy as np
import pytest

import engine
from tests.conftest import requires_cuda

RNG = np.random.default_rng(11)
X = RNG.permutation(24).reshape(4, 6) * 0.5 - 5.0
SPECIAL = np.array([[1.0, np.nan, -np.inf, 0.0], [-0.0, np.inf, 2.5, -3.0]])
INTS = RNG.integers(-7, 8, size=(3, 5))

CASES = {
    "isnan_isinf_isfinite_signbit": (
        SPECIAL,
        lambda x: [x.isnan(), x.isinf(), x.isfinite(), x.signbit()],
    ),
    "nan_to_num": (SPECIAL, lambda x: [x.nan_to_num(), x.nan_to_num(0.5, 9.0, -9.0)]),
    "sort_argsort_topk": (
        X,
        lambda x: [
            *x.sort(dim=1),
            *x.sort(dim=0, descending=True),
            x.argsort(dim=1, descending=True),
            *x.topk(3, dim=1),
            *x.topk(2, dim=0, largest=False),
        ],
    ),
    "sort_with_nan": (SPECIAL, lambda x: [*x.sort(dim=1), *x.sort(dim=1, descending=True)]),
    "argmin_argmax_max_min": (
        X,
        lambda x: [
            x.argmin(),
            x.argmax(),
            x.argmin(dim=1),
            x.argmax(dim=0, keepdim=True),
            *x.max(dim=1),
            *x.min(dim=0, keepdim=True),
            *x.reshape(-1).min(0),
            x.amin(),
            x.amax(dim=1),
        ],
    ),
    "linspace_logspace_eye_xlogy": (
        INTS,
        lambda x: [
            engine.linspace(-2.0, 3.0, 9),
            engine.linspace(0.5, 7.25, 6, dtype=engine.int64),
            engine.logspace(0, 3, 7),
            engine.eye(3, 4),
            engine.xlogy(x, x.abs()),
            engine.broadcast_tensors(x[:1], x)[0],
        ],
    ),
    "clamp_both_bounds": (
        SPECIAL,
        lambda x: [x.clamp(-1.0, 2.0), x.clamp(2.0, 1.0), x.clamp(x * 0.5, x.abs())],
    ),
    "all_any_count_nonzero": (
        INTS,
        lambda x: [
            x.all(),
            x.any(dim=1),
            (x > 0).all(dim=0),
            x.count_nonzero(),
            x.count_nonzero(dim=1),
        ],
    ),
    "int_cumsum_remainder_fmod": (
        INTS,
        lambda x: [x.cumsum(1), x.cumsum(0, dtype=engine.float64), x.remainder(3), x.fmod(3)],
    ),
    "int_floor_ceil_round_trunc_abs": (
        INTS,
        lambda x: [x.floor(), x.ceil(), x.round(), x.trunc(), x.abs(), x.clamp_min(0)],
    ),
    "round_decimals_frac": (X * 0.37, lambda x: [x.round(decimals=1), x.frac(), x.trunc()]),
    "isclose_logical_xor": (
        X,
        lambda x: [x.isclose(x + 1e-9), x.isclose(x * 1.01), (x > 0).logical_xor(x < 1)],
    ),
    "logsumexp_norm_reductions": (
        X,
        lambda x: [
            x.logsumexp(1),
            x.norm(p=0),
            x.norm(p=0, dim=1, keepdim=True),
            x.norm(p=0, dim=(0, 1)),
            x.norm(p=float("-inf"), dim=1),
        ],
    ),
}


def _values(device, arr, fn):
    engine.set_default_device(device)
    try:
        return [(t.dtype, tuple(t.shape), t.cpu().numpy()) for t in fn(engine.tensor(arr))]
    finally:
        engine.set_default_device(None)


@pytest.mark.cuda
@requires_cuda
@pytest.mark.parametrize("name", sorted(CASES))
def test_cuda_gives_what_cpu_gives(name):
    arr, fn = CASES[name]
    cpu, cuda = _values("cpu", arr, fn), _values("cuda", arr, fn)
    assert len(cuda) == len(cpu)
    for (cd, cs, cv), (gd, gs, gv) in zip(cpu, cuda, strict=True):
        assert (gd, gs) == (cd, cs)
        np.testing.assert_allclose(gv, cv, rtol=1e-13, atol=0)


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_cases_run_on_cpu(name):
    """What the cuda test compares against is computable: every case runs on cpu here."""
    arr, fn = CASES[name]
    assert _values("cpu", arr, fn)
