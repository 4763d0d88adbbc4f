"""GroupNorm, RMSNorm, Conv1d, ModuleDict and ParameterList: values and gradients vs float64
central differences and torch, memory vs torch's CPU profiler (conv1d: the bytes kept between
forward and backward, its kernel workspace being scratch like conv2d's)."""

from __future__ import annotations

import numpy as np
import pytest

import engine
from tests.engine.test_memory_vs_torch import SCALAR_SLACK, engine_peak, torch_peak
from tests.engine.test_nn import gradcheck

try:
    import torch
except ImportError:  # pragma: no cover
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="needs PyTorch as an oracle")


def _arr(shape, seed):
    return np.random.default_rng(seed).standard_normal(shape)


@pytest.mark.parametrize("affine", [True, False])
def test_group_norm_gradients_match_central_differences_and_torch(affine):
    arrays = [_arr((3, 6, 2, 3), 0)]
    if affine:
        arrays += [_arr(6, 1), _arr(6, 2)]

    def fn(m, x, *wb):
        return m.nn.functional.group_norm(x, 3, *wb, eps=1e-5)

    gradcheck(fn, arrays, torch=torch)


@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
def test_rms_norm_gradients_match_central_differences_and_torch(layout):
    def fn(m, x, w):
        return m.nn.functional.rms_norm(x, (x.shape[-1],), w, 1e-6)

    gradcheck(fn, [_arr((4, 5), 0), _arr(5, 1)], layout=layout, torch=torch)


@pytest.mark.parametrize("padding", [0, 2, "same"])
@pytest.mark.parametrize("stride_dilation_groups", [(1, 1, 1), (2, 1, 1), (1, 2, 2)])
def test_conv1d_gradients_match_central_differences_and_torch(padding, stride_dilation_groups):
    s, d, g = stride_dilation_groups
    if padding == "same" and s != 1:
        pytest.skip("padding='same' needs stride 1 (as in PyTorch)")

    def fn(m, x, w, b):
        return m.nn.functional.conv1d(x, w, b, s, padding, d, g)

    gradcheck(fn, [_arr((2, 4, 9), 0), _arr((6, 4 // g, 3), 1), _arr(6, 2)], torch=torch)


@needs_torch
@pytest.mark.torch
def test_modules_match_torch_layouts_and_values():
    for make in (
        lambda m: m.nn.GroupNorm(2, 8),
        lambda m: m.nn.GroupNorm(4, 8, affine=False),
        lambda m: m.nn.RMSNorm([5, 6]),
        lambda m: m.nn.Conv1d(8, 4, 3, stride=2, padding=1, bias=False),
    ):
        em, tm = make(engine), make(torch)
        assert [n for n, _ in em.named_parameters()] == [n for n, _ in tm.named_parameters()]
        for p, tp in zip(em.parameters(), tm.parameters(), strict=True):
            assert tuple(p.shape) == tuple(tp.shape)
            with torch.no_grad():
                tp.copy_(torch.tensor(p.detach().numpy()))
        shape = (2, 8, 5, 6) if not isinstance(em, engine.nn.Conv1d) else (2, 8, 11)
        x = _arr(shape, 3).astype(np.float32)
        np.testing.assert_allclose(
            em(engine.tensor(x)).detach().numpy(),
            tm(torch.tensor(x)).detach().numpy(),
            rtol=1e-5,
            atol=1e-5,
        )


def _norm_step(m, kind):
    m.manual_seed(0)
    mod = m.nn.GroupNorm(4, 32) if kind == "group_norm" else m.nn.RMSNorm(256)
    shape = (8, 32, 16, 16) if kind == "group_norm" else (64, 256)
    x = m.tensor(_arr(shape, 0).astype(np.float32), requires_grad=True)

    def region():
        (mod(x) * 2).sum().backward()

    return region


@needs_torch
@pytest.mark.torch
@pytest.mark.parametrize("kind", ["group_norm", "rms_norm"])
def test_norm_peak_matches_torch_profiler(kind):
    e, t = engine_peak(_norm_step(engine, kind)), torch_peak(_norm_step(torch, kind))
    assert abs(e - t) <= SCALAR_SLACK, (e, t)


def test_group_norm_keeps_mean_and_rstd_per_sample_and_group():
    x = engine.randn(8, 32, 16, 16, requires_grad=True)
    gn = engine.nn.GroupNorm(4, 32)
    before = engine.memory.memory_allocated()
    y = gn(x)
    # the output and mean/rstd (8 x 4 float32 each); x and the weight are kept by reference
    assert engine.memory.memory_allocated() - before == 8 * 32 * 16 * 16 * 4 + 2 * 8 * 4 * 4
    assert y.grad_fn.name() == "NativeGroupNormBackward0"


def test_conv1d_keeps_only_its_output_between_forward_and_backward():
    conv = engine.nn.Conv1d(32, 64, 3, padding=1)
    x = engine.randn(8, 32, 100, requires_grad=True)
    before = engine.memory.memory_allocated()
    y = conv(x)
    assert engine.memory.memory_allocated() - before == 8 * 64 * 100 * 4
    y.sum().backward()
    assert conv.weight.grad.shape == (64, 32, 3) and x.grad.shape == x.shape


def test_errors_name_the_problem():
    with pytest.raises(RuntimeError, match="divisible by num_groups"):
        engine.nn.functional.group_norm(engine.randn(2, 6, 3), 4)
    with pytest.raises(ValueError, match="divisible by num_groups"):
        engine.nn.GroupNorm(4, 6)
    with pytest.raises(RuntimeError, match="normalized_shape"):
        engine.nn.functional.rms_norm(engine.randn(2, 3), (4,))
    with pytest.raises(RuntimeError, match="weight must be 3-D"):
        engine.nn.functional.conv1d(engine.randn(1, 2, 5), engine.randn(3, 2))


# ---------------------------------------------------------------------------------------------
# containers
# ---------------------------------------------------------------------------------------------
@needs_torch
@pytest.mark.torch
def test_module_dict_and_parameter_list_register_like_torch():
    def build(m):
        model = m.nn.Module()
        model.heads = m.nn.ModuleDict({"a": m.nn.Linear(2, 3), "b": m.nn.Linear(3, 1)})
        model.heads["c"] = m.nn.Linear(1, 1)
        model.scales = m.nn.ParameterList([m.nn.Parameter(m.ones(2)), m.zeros(3)])
        model.scales.append(m.nn.Parameter(m.ones(1)))
        return model

    e, t = build(engine), build(torch)
    assert [n for n, _ in e.named_parameters()] == [n for n, _ in t.named_parameters()]
    assert list(e.heads.keys()) == ["a", "b", "c"] and "b" in e.heads and len(e.heads) == 3
    assert len(e.scales) == 3 and e.scales[1].shape == (3,) and e.scales[-1].requires_grad
    popped = e.heads.pop("b")
    assert isinstance(popped, engine.nn.Linear) and list(e.heads) == ["a", "c"]
    assert [tuple(p.shape) for p in e.scales[:2]] == [(2,), (3,)]


def test_containers_refuse_bad_entries():
    with pytest.raises(TypeError, match="ParameterList holds Parameters"):
        engine.nn.ParameterList([3])
    with pytest.raises(ValueError, match="element #0 should be a"):
        engine.nn.ModuleDict([engine.nn.Linear(1, 1)])


# ---------------------------------------------------------------------------------------------
# ConvTranspose2d
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "stride, padding, output_padding, groups, dilation",
    [(1, 0, 0, 1, 1), (2, 1, 1, 1, 1), (2, 0, 0, 2, 1), (1, 1, 0, 1, 2), (3, 2, 2, 1, 1)],
)
def test_conv_transpose2d_gradients_match_central_differences_and_torch(
    stride, padding, output_padding, groups, dilation
):
    def fn(m, x, w, b):
        return m.nn.functional.conv_transpose2d(
            x, w, b, stride, padding, output_padding, groups, dilation
        )

    arrays = [_arr((2, 4, 3, 4), 0), _arr((4, 3, 3, 2), 1), _arr(3 * groups, 2)]
    gradcheck(fn, arrays, torch=torch)


@needs_torch
@pytest.mark.torch
def test_conv_transpose2d_module_matches_torch_shape_and_init_layout():
    em = engine.nn.ConvTranspose2d(8, 4, 4, stride=2, padding=1)
    tm = torch.nn.ConvTranspose2d(8, 4, 4, stride=2, padding=1)
    assert [(n, tuple(p.shape)) for n, p in em.named_parameters()] == [
        (n, tuple(p.shape)) for n, p in tm.named_parameters()
    ]
    x = engine.randn(2, 8, 16, 16)
    assert em(x).shape == tuple(tm(torch.randn(2, 8, 16, 16)).shape) == (2, 4, 32, 32)


def test_conv_transpose2d_memory_by_hand():
    # forward: the output only (x and the weight are kept by reference); the columns of one
    # sample are kernel workspace (scratch, not allocated memory)
    m = engine.nn.ConvTranspose2d(16, 8, 4, stride=2, padding=1)
    x = engine.randn(4, 16, 8, 8, requires_grad=True)
    before = engine.memory.memory_allocated()
    engine.memory.reset_peak_memory_stats()
    y = m(x)
    out = 4 * 8 * 16 * 16 * 4
    assert engine.memory.memory_allocated() - before == out
    assert engine.memory.max_memory_scratch() >= 8 * 4 * 4 * 8 * 8 * 4
    # backward: grad of the sum (a broadcast view, 4 bytes), grad_input (x's size), grad_weight
    # and grad_bias
    peak = engine_peak(lambda: y.sum().backward())
    assert peak == 4 + 4 + 4 * 16 * 8 * 8 * 4 + 16 * 8 * 4 * 4 * 4 + 8 * 4
