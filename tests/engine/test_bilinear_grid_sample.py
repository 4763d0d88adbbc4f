"""F.bilinear / nn.Bilinear (torch's _trilinear), F.affine_grid and F.grid_sample against torch
2.13: values, gradients of every differentiable input (and float64 central
differences), node names, every block forward and backward as torch's CPU profiler shows it,
refusals, meta shapes."""

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

RNG = np.random.default_rng(19)
# bilinear: (input1, input2, weight, bias or None)
BL = {
    "2d_bias": ((5, 6), (5, 7), (3, 6, 7), True),
    "3d_no_bias": ((2, 5, 6), (2, 5, 7), (4, 6, 7), False),
    "4d_bias": ((2, 3, 2, 4), (2, 3, 2, 5), (3, 4, 5), True),
    "wide": ((8, 40), (8, 33), (5, 40, 33), True),
}
X4 = RNG.standard_normal((2, 3, 6, 8))
G4 = RNG.uniform(-1.3, 1.3, (2, 5, 7, 2))
X5 = RNG.standard_normal((2, 3, 4, 5, 6))
G5 = RNG.uniform(-1.3, 1.3, (2, 3, 4, 5, 3))
TH4 = RNG.standard_normal((2, 2, 3))
TH5 = RNG.standard_normal((2, 3, 4))


def _arrays(shapes, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s) for s in shapes]


def _bilinear_call(name):
    s1, s2, sw, bias = BL[name]
    arrays = _arrays([s1, s2, sw] + ([(sw[0],)] if bias else []))
    return arrays, lambda m, *t: m.nn.functional.bilinear(*t)


GS_CASES = {
    f"{d}d_{mode}_{pad}_{'ac' if ac else 'noac'}": (d, mode, pad, ac)
    for d in (4, 5)
    for mode in ("bilinear", "nearest", "bicubic")
    for pad in ("zeros", "border", "reflection")
    for ac in (False, True)
    if not (d == 5 and mode == "bicubic")
}


def _gs_call(name):
    d, mode, pad, ac = GS_CASES[name]
    arrays = [X4, G4] if d == 4 else [X5, G5]
    return arrays, lambda m, x, g: m.nn.functional.grid_sample(
        x, g, mode=mode, padding_mode=pad, align_corners=ac
    )


AFFINE = {
    "4d": (TH4, (2, 3, 5, 7), False),
    "4d_ac": (TH4, (2, 3, 5, 7), True),
    "5d": (TH5, (2, 3, 4, 5, 6), False),
    "5d_ac_unit": (TH5, (2, 3, 4, 1, 6), True),
    "4d_wide": (TH4, (2, 1, 20, 30), False),
}


def _affine_call(name):
    theta, size, ac = AFFINE[name]
    return [theta], lambda m, t: m.nn.functional.affine_grid(t, size, align_corners=ac)


def _run(m, arrays, call, dtype=np.float64):
    ts = [m.tensor(a.astype(dtype), requires_grad=True) for a in arrays]
    y = call(m, *ts)
    g = np.random.default_rng(2).standard_normal(tuple(y.shape)).astype(dtype)
    y.backward(m.tensor(g))
    return y.detach().numpy(), [t.grad.numpy() for t in ts], node_chain(y.grad_fn)


def _check_as_torch(arrays, call, dtype=np.float64, rtol=1e-12, atol=1e-12):
    (ey, eg, en), (ty, tg, tn) = _run(engine, arrays, call, dtype), _run(torch, arrays, call, dtype)
    np.testing.assert_allclose(ey, ty, rtol=rtol, atol=atol)
    for a, b in zip(eg, tg, strict=True):
        np.testing.assert_allclose(a, b, rtol=rtol, atol=atol)
    assert en == tn


def _numeric_grads(arrays, call, eps=1e-6):
    """float64 central differences of sum(call * w) against the engine's gradients."""
    ts = [engine.tensor(a, requires_grad=True) for a in arrays]
    y = call(engine, *ts)
    w = np.random.default_rng(3).standard_normal(tuple(y.shape))
    (y * engine.tensor(w)).sum().backward()
    for i, a in enumerate(arrays):
        num = np.zeros_like(a)
        for j in np.ndindex(a.shape):
            vals = []
            for s in (eps, -eps):
                b = [x.copy() for x in arrays]
                b[i][j] += s
                vals.append(float((call(engine, *map(engine.tensor, b)).numpy() * w).sum()))
            num[j] = (vals[0] - vals[1]) / (2 * eps)
        np.testing.assert_allclose(ts[i].grad.numpy(), num, rtol=1e-6, atol=1e-6)


def _steps(arrays, call, dtype=np.float32, needs=None):
    def make(m):
        ts = [
            m.tensor(a.astype(dtype), requires_grad=needs is None or needs[i])
            for i, a in enumerate(arrays)
        ]
        return forward_backward(m, lambda: call(m, *ts))

    assert_steps_as_torch(make)


# --- bilinear ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(BL))
def test_bilinear_values_gradients_and_nodes_as_torch(name):
    _check_as_torch(*_bilinear_call(name))


def test_bilinear_float32_as_torch():
    _check_as_torch(*_bilinear_call("2d_bias"), dtype=np.float32, rtol=1e-5, atol=1e-5)


def test_bilinear_gradients_match_central_differences():
    arrays = _arrays([(3, 2), (3, 3), (2, 2, 3), (2,)], seed=4)
    _numeric_grads(arrays, lambda m, *t: m.nn.functional.bilinear(*t))


def test_bilinear_trilinear_node_and_its_edges_are_torchs():
    arrays, call = _bilinear_call("3d_no_bias")
    edges = {}
    for m in (engine, torch):
        y = call(m, *(m.tensor(a, requires_grad=True) for a in arrays))
        trilinear = y.grad_fn.next_functions[0][0]
        names = [f.name().removeprefix("torch::autograd::") for f, _ in trilinear.next_functions]
        edges[m] = (trilinear.name(), names)
    assert (
        edges[engine]
        == edges[torch]
        == (
            "TrilinearBackward0",
            ["ViewBackward0", "AccumulateGrad", "ViewBackward0"],
        )
    )


@pytest.mark.parametrize("name", sorted(BL))
def test_bilinear_blocks_forward_and_backward_as_torch(name):
    arrays, call = _bilinear_call(name)

    def make(m):
        ts = [m.tensor(a.astype(np.float32), requires_grad=True) for a in arrays]
        return forward_backward(m, lambda: call(m, *ts))

    programs = {m: make(m) for m in (torch, engine)}
    for t_step, e_step in zip(programs[torch], programs[engine], strict=True):
        # every block, the few-byte ones included: _trilinear's per-feature products
        assert engine_sequence(e_step, 0) == torch_sequence(t_step, 0)


def test_bilinear_frozen_weight_blocks_as_torch():
    arrays, call = _bilinear_call("2d_bias")
    _steps(arrays, call, needs=[True, False, False, True])


def test_bilinear_module_as_torch():
    e, t = engine.nn.Bilinear(20, 30, 40), torch.nn.Bilinear(20, 30, 40)
    assert repr(e) == repr(t)
    assert [n for n, _ in e.named_parameters()] == [n for n, _ in t.named_parameters()]
    for (_, pe), (_, pt) in zip(e.named_parameters(), t.named_parameters(), strict=True):
        assert tuple(pe.shape) == tuple(pt.shape)
        bound = 1 / math.sqrt(20)
        values = pe.detach().numpy()
        assert np.abs(values).max() <= bound and np.abs(values).max() > 0.8 * bound
    assert engine.nn.Bilinear(2, 3, 4, bias=False).bias is None
    x1, x2 = engine.ones(7, 20), engine.ones(7, 30)
    assert tuple(e(x1, x2).shape) == (7, 40)
    with pytest.raises(ValueError, match=r"in1_features must be > 0, but got \(in1_features=0\)"):
        engine.nn.Bilinear(0, 2, 3)


def test_bilinear_module_loads_torchs_state_dict():
    t = torch.nn.Bilinear(3, 4, 2)
    e = engine.nn.Bilinear(3, 4, 2)
    with torch.no_grad():
        for (_, pe), (_, pt) in zip(e.named_parameters(), t.named_parameters(), strict=True):
            pe.detach().numpy()[...] = pt.numpy()
    x1, x2 = RNG.standard_normal((5, 3)), RNG.standard_normal((5, 4))
    ours = e(engine.tensor(x1, dtype=engine.float32), engine.tensor(x2, dtype=engine.float32))
    theirs = t(torch.tensor(x1, dtype=torch.float32), torch.tensor(x2, dtype=torch.float32))
    np.testing.assert_allclose(ours.detach().numpy(), theirs.detach().numpy(), rtol=1e-5)


@pytest.mark.parametrize(
    "call",
    [
        lambda m: m.nn.functional.bilinear(m.ones(2, 3), m.ones(2, 2, 4), m.ones(5, 3, 4)),
        lambda m: m.nn.functional.bilinear(m.ones(2, 3), m.ones(3, 4), m.ones(5, 3, 4)),
        lambda m: m.nn.functional.bilinear(m.ones(2, 2), m.ones(2, 4), m.ones(5, 3, 4)),
        lambda m: m.nn.functional.bilinear(m.ones(2, 3), m.ones(2, 5), m.ones(5, 3, 4)),
        lambda m: m.nn.functional.bilinear(m.ones(2, 3), m.ones(2, 4), m.ones(5, 3, 4), m.ones(4)),
    ],
)
def test_bilinear_refusals_as_torch(call):
    assert_raises_as_torch(call)


# --- grid_sample ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(GS_CASES))
def test_grid_sample_values_gradients_and_node_as_torch(name):
    _check_as_torch(*_gs_call(name))


@pytest.mark.parametrize("name", ["4d_bilinear_zeros_noac", "5d_nearest_border_ac"])
def test_grid_sample_float32_as_torch(name):
    _check_as_torch(*_gs_call(name), dtype=np.float32, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    "mode,pad", [("bilinear", "zeros"), ("bilinear", "reflection"), ("bicubic", "border")]
)
def test_grid_sample_gradients_match_central_differences(mode, pad):
    x = RNG.standard_normal((1, 2, 3, 4))
    grid = RNG.uniform(-0.9, 0.9, (1, 2, 3, 2))
    _numeric_grads(
        [x, grid],
        lambda m, a, g: m.nn.functional.grid_sample(
            a, g, mode=mode, padding_mode=pad, align_corners=False
        ),
    )


@pytest.mark.parametrize(
    "name",
    ["4d_bilinear_zeros_noac", "4d_nearest_reflection_ac", "4d_bicubic_border_noac"]
    + ["5d_bilinear_zeros_ac"],
)
def test_grid_sample_blocks_forward_and_backward_as_torch(name):
    _steps(*_gs_call(name))


@pytest.mark.parametrize("needs", [[False, True], [True, False]])
def test_grid_sample_backward_makes_grad_input_only_when_needed(needs):
    # torch's output_mask: grad_input only for an input that needs it; grad_grid always
    _steps(*_gs_call("4d_bilinear_border_noac"), needs=needs)


def test_grid_sample_of_affine_grid_blocks_as_torch():
    def call(m, x, theta):
        grid = m.nn.functional.affine_grid(theta, (2, 3, 9, 11), align_corners=False)
        return m.nn.functional.grid_sample(x, grid, align_corners=False)

    _steps([X4, TH4], call)


@pytest.mark.parametrize(
    "call",
    [
        lambda m: m.nn.functional.grid_sample(m.ones(2, 3, 4, 4), m.ones(2, 3, 3, 2).double()),
        lambda m: m.nn.functional.grid_sample(m.ones(2, 3, 4, 4), m.ones(2, 3, 3, 1)),
        lambda m: m.nn.functional.grid_sample(m.ones(1, 3, 4, 4), m.ones(2, 3, 3, 2)),
        lambda m: m.nn.functional.grid_sample(m.ones(3, 4, 4), m.ones(3, 3, 2)),
        lambda m: m.nn.functional.grid_sample(m.ones(2, 3, 4, 4), m.ones(3, 3, 2)),
        lambda m: m.nn.functional.grid_sample(m.ones(2, 3, 0, 4), m.ones(2, 3, 3, 2)),
        lambda m: m.nn.functional.grid_sample(
            m.ones(2, 3, 4, 4, 4), m.ones(2, 3, 3, 3, 3), mode="bicubic"
        ),
        lambda m: m.nn.functional.grid_sample(m.ones(2, 3, 4, 4), m.ones(2, 3, 3, 2), mode="area"),
        lambda m: m.nn.functional.grid_sample(
            m.ones(2, 3, 4, 4), m.ones(2, 3, 3, 2), padding_mode="circular"
        ),
    ],
)
def test_grid_sample_refusals_as_torch(call):
    assert_raises_as_torch(call)


# --- affine_grid ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(AFFINE))
def test_affine_grid_values_gradients_and_node_as_torch(name):
    _check_as_torch(*_affine_call(name))


def test_affine_grid_gradients_match_central_differences():
    _numeric_grads(
        [TH4[:1]],
        lambda m, t: m.nn.functional.affine_grid(t, (1, 1, 3, 4), align_corners=False),
    )


@pytest.mark.parametrize("name", sorted(AFFINE))
def test_affine_grid_blocks_forward_and_backward_as_torch(name):
    _steps(*_affine_call(name))


@pytest.mark.parametrize(
    "call",
    [
        lambda m: m.nn.functional.affine_grid(m.ones(2, 2, 3), (2, 3, 4), align_corners=False),
        lambda m: m.nn.functional.affine_grid(m.ones(2, 3, 3), (2, 3, 4, 5), align_corners=False),
        lambda m: m.nn.functional.affine_grid(
            m.ones(2, 2, 3), (2, 3, 4, 5, 6), align_corners=False
        ),
        lambda m: m.nn.functional.affine_grid(
            m.ones(2, 2, 3, dtype=m.int32), (2, 3, 4, 5), align_corners=False
        ),
        lambda m: m.nn.functional.affine_grid(m.ones(2, 2, 3), (2, 3, 0, 5), align_corners=False),
        lambda m: m.nn.functional.affine_grid(m.ones(2, 2, 3), (3, 3, 4, 5), align_corners=False),
    ],
)
def test_affine_grid_refusals_as_torch(call):
    assert_raises_as_torch(call)


# --- meta -------------------------------------------------------------------------------------


def test_meta_shapes_and_backward():
    x1 = engine.ones(4, 5, 6, device="meta", requires_grad=True)
    x2 = engine.ones(4, 5, 7, device="meta", requires_grad=True)
    w = engine.ones(3, 6, 7, device="meta", requires_grad=True)
    y = engine.nn.functional.bilinear(x1, x2, w)
    assert tuple(y.shape) == (4, 5, 3) and y.device.type == "meta"
    y.sum().backward()
    assert tuple(w.grad.shape) == (3, 6, 7)

    theta = engine.ones(2, 2, 3, device="meta", requires_grad=True)
    grid = engine.nn.functional.affine_grid(theta, (2, 3, 5, 7), align_corners=False)
    x = engine.ones(2, 3, 8, 8, device="meta", requires_grad=True)
    out = engine.nn.functional.grid_sample(x, grid, mode="bicubic", align_corners=False)
    assert tuple(out.shape) == (2, 3, 5, 7) and out.dtype == engine.float32
    out.sum().backward()
    assert tuple(theta.grad.shape) == (2, 2, 3) and tuple(x.grad.shape) == (2, 3, 8, 8)


@pytest.mark.parametrize("name", ["4d_bilinear_zeros_noac", "4d_bicubic_reflection_ac"])
def test_grid_sample_in_small_blocks_as_torch(name, monkeypatch):
    # the sampler works on blocks of output points ([C, block] within SCRATCH_ELEMS)
    monkeypatch.setattr(engine.kernels, "SCRATCH_ELEMS", 7)
    _check_as_torch(*_gs_call(name))


@pytest.mark.parametrize(
    "call",
    [
        lambda m, x, g: m.nn.functional.grid_sample(
            x.transpose(2, 3), g.transpose(1, 2), align_corners=True
        ),
        lambda m, x, g: m.nn.functional.grid_sample(x[:, :, ::2], g[:, ::2], mode="bicubic"),
    ],
    ids=["transposed", "strided"],
)
def test_grid_sample_of_non_contiguous_input_and_grid_as_torch(call):
    # torch's CPU kernel reads strided input and grid in place: no copy
    _check_as_torch([X4, G4], call)
    _steps([X4, G4], call)
