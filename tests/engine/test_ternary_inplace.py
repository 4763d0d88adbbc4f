"""addcmul_ / addcdiv_ / lerp_ in place (the optimizers' arithmetic): operands of the output's
shape, dtype and device take a short path; values, versions and errors as PyTorch's."""

from __future__ import annotations

import numpy as np
import pytest

import engine

RNG = np.random.default_rng(0)
# small (one numpy pass) and large (the blocked loop, over 4096 elements)
SHAPES = {"small": (3, 5), "large": (70, 100)}
VALUES = {
    k: [RNG.standard_normal(s).astype(np.float32) for _ in range(2)]
    + [np.abs(RNG.standard_normal(s)).astype(np.float32) + 0.5]
    for k, s in SHAPES.items()
}

OPS = {
    "addcmul_": lambda m, s, a, b: s.addcmul_(a, b, value=0.3),
    "addcdiv_": lambda m, s, a, b: s.addcdiv_(a, b, value=-0.7),
    "lerp_ scalar": lambda m, s, a, b: s.lerp_(a, 0.25),
    "lerp_ scalar >= 0.5": lambda m, s, a, b: s.lerp_(a, 0.75),
    "lerp_ tensor": lambda m, s, a, b: s.lerp_(a, b),
}


@pytest.mark.torch
@pytest.mark.parametrize("size", list(SHAPES))
@pytest.mark.parametrize("name", list(OPS))
def test_values_and_version_match_pytorch(name, size, torch):
    out = {}
    for m in (engine, torch):
        s, a, b = (m.tensor(v.copy()) for v in VALUES[size])
        v = s._version
        r = OPS[name](m, s, a, b)
        assert r is s and s._version == v + 1
        out[m.__name__] = s.numpy().copy()
    # (a few results near zero differ by an ulp of the operands: atol one float32 ulp of 4)
    np.testing.assert_allclose(out["engine"], out["torch"], rtol=1e-6, atol=5e-7)


@pytest.mark.torch
@pytest.mark.parametrize(
    "make",
    [
        lambda m: (m.zeros(3, 5), m.zeros(4, 5), m.ones(4, 5)),  # the result does not fit
        lambda m: (m.zeros(3, 5), m.zeros(3, 5, dtype=m.float64), m.ones(3, 5)),
        lambda m: (m.zeros(3, 5, dtype=m.int64), m.zeros(3, 5), m.ones(3, 5)),
    ],
)
@pytest.mark.parametrize("name", ["addcmul_", "addcdiv_", "lerp_ tensor"])
def test_operands_fail_where_pytorch_fails(make, name, torch):
    """A result that does not fit fails; a float64 operand is cast into the float32 output by
    addcmul_ / addcdiv_ but refused by lerp_; a float result never goes into an int64 one."""
    try:
        OPS[name](torch, *make(torch))
    except RuntimeError:
        with pytest.raises(RuntimeError):
            OPS[name](engine, *make(engine))
    else:
        OPS[name](engine, *make(engine))


@pytest.mark.parametrize("rows", [3, 2000])
def test_broadcast_operands_take_the_general_path(rows):
    """Its full-size temporary is kernel scratch, reported apart (_Ternary's docstring), small
    outputs included."""
    s, t1, t2 = engine.zeros(rows, 5), engine.ones(5), engine.full((rows, 1), 2.0)
    engine.memory.reset_peak_memory_stats("cpu")
    s.addcmul_(t1, t2, value=0.5)
    np.testing.assert_array_equal(s.numpy(), np.ones((rows, 5), np.float32))
    assert engine.memory.max_memory_scratch("cpu") == rows * 5 * 4


def test_meta_in_place_checks_shapes_and_allocates_nothing():
    s, a = engine.zeros(64, 64, device="meta"), engine.zeros(64, 64, device="meta")
    before = engine.memory.memory_allocated("meta")
    s.addcmul_(a, a).addcdiv_(a, a).lerp_(a, 0.1)
    assert engine.memory.memory_allocated("meta") == before and s._version == 3
    with pytest.raises(RuntimeError, match="output with shape"):
        s.addcmul_(engine.zeros(2, 64, 64, device="meta"), a)
