"""Activation checkpointing (engine.utils.checkpoint) and saved_tensors_hooks: gradients equal to
the plain run's (dropout included: the random state is replayed), peak memory of forward+backward
against torch's CPU profiler with and without checkpointing, and by hand."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import engine
from engine.autograd.graph import saved_tensors_hooks
from engine.utils.checkpoint import CheckpointError, checkpoint, checkpoint_sequential
from tests.engine.test_memory_vs_torch import SCALAR_SLACK, engine_peak, torch_peak
from tests.engine.test_nn import gradcheck

try:
    import torch
    import torch.utils.checkpoint as torch_checkpoint
except ImportError:  # pragma: no cover
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="needs PyTorch as an oracle")


def _blocks(m, n=6, dropout=0.1):
    nn = m.nn
    m.manual_seed(0)
    return [
        nn.Sequential(
            nn.Linear(64, 128, bias=False),
            nn.GELU(),
            nn.Dropout(dropout),
            nn.Linear(128, 64, bias=False),
            nn.LayerNorm(64),
        )
        for _ in range(n)
    ]


def _copy(engine_blocks, torch_blocks):
    with torch.no_grad():
        for eb, tb in zip(engine_blocks, torch_blocks, strict=True):
            for p, tp in zip(eb.parameters(), tb.parameters(), strict=True):
                tp.copy_(torch.tensor(p.detach().numpy()))


def _program(m, blocks, x, mode):
    ck = checkpoint if m is engine else torch_checkpoint.checkpoint

    def region():
        h = x
        for b in blocks:
            if mode == "plain":
                h = b(h)
            else:
                h = ck(b, h, use_reentrant=mode == "reentrant")
        (h * h).sum().backward()

    return region


def _x(m):
    arr = np.random.default_rng(0).standard_normal((512, 64)).astype(np.float32)
    return m.tensor(arr, requires_grad=True)


# ---------------------------------------------------------------------------------------------
# values
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["non_reentrant", "reentrant"])
def test_checkpointed_gradients_equal_the_plain_run_with_dropout_replayed(mode):
    grads = {}
    for run in ("plain", mode):
        blocks, x = _blocks(engine, n=3, dropout=0.3), _x(engine)
        engine.manual_seed(7)  # the same dropout draws in both runs' forward
        _program(engine, blocks, x, run)()
        grads[run] = [x.grad.numpy()] + [p.grad.numpy() for b in blocks for p in b.parameters()]
    for a, b in zip(grads["plain"], grads[mode], strict=True):
        np.testing.assert_array_equal(a, b)


@needs_torch
@pytest.mark.torch
@pytest.mark.parametrize("mode", ["non_reentrant", "reentrant"])
def test_checkpointed_gradients_match_torch(mode):
    eb, tb = _blocks(engine, n=2, dropout=0.0), _blocks(torch, n=2, dropout=0.0)
    _copy(eb, tb)
    ex, tx = _x(engine), _x(torch)
    _program(engine, eb, ex, mode)()
    _program(torch, tb, tx, mode)()
    np.testing.assert_allclose(ex.grad.numpy(), tx.grad.numpy(), rtol=1e-4, atol=1e-5)
    for b, c in zip(eb, tb, strict=True):
        for p, tp in zip(b.parameters(), c.parameters(), strict=True):
            np.testing.assert_allclose(p.grad.numpy(), tp.grad.numpy(), rtol=1e-4, atol=1e-4)


def test_checkpoint_gradients_match_central_differences():
    w = engine.tensor(np.random.default_rng(1).standard_normal((3, 3)), requires_grad=True)

    def block(x):
        return (x @ w).tanh().sin() * x

    def fn(m, x):
        return checkpoint(block, x, use_reentrant=False)

    gradcheck(fn, [np.random.default_rng(2).standard_normal((4, 3))])


# ---------------------------------------------------------------------------------------------
# memory
# ---------------------------------------------------------------------------------------------
@needs_torch
@pytest.mark.torch
@pytest.mark.parametrize("mode", ["plain", "non_reentrant", "reentrant"])
def test_peak_with_and_without_checkpointing_matches_torch_profiler(mode):
    eb, tb = _blocks(engine), _blocks(torch)
    e = engine_peak(_program(engine, eb, _x(engine), mode))
    t = torch_peak(_program(torch, tb, _x(torch), mode))
    assert abs(e - t) <= SCALAR_SLACK, (e, t)


def test_checkpointing_keeps_only_the_region_boundaries_between_forward_and_backward():
    # Given 6 blocks (Linear 64->128, GELU, Dropout, Linear 128->64, LayerNorm) on [512, 64]:
    # plain, each block keeps x, gelu's input, dropout's mask and output, the second linear's
    # input... checkpointed, only each block's output (its LayerNorm's result) and the 5056-byte
    # random state PyTorch stashes per call stay alive until backward.
    def kept_after_forward(mode):
        blocks, x = _blocks(engine), _x(engine)
        before = engine.memory.memory_allocated()
        h = x
        for b in blocks:
            h = b(h) if mode == "plain" else checkpoint(b, h, use_reentrant=False)
        return engine.memory.memory_allocated() - before

    live = {mode: kept_after_forward(mode) for mode in ("plain", "non_reentrant")}
    out = 512 * 64 * 4
    assert live["non_reentrant"] == 6 * (out + 5056)
    # plain keeps per block: gelu in (512x128) + dropout mask + dropout out (512x128 each) +
    # LayerNorm's input (512x64), output, mean and rstd (512 each)
    hidden = 512 * 128 * 4
    assert live["plain"] == 6 * (3 * hidden + 2 * out + 2 * 512 * 4)


def test_recomputation_happens_once_per_region_in_backward():
    calls = []

    def block(x):
        calls.append(engine.is_grad_enabled())
        return x.sin().cos()

    x = engine.randn(8, requires_grad=True)
    y = checkpoint(block, x, use_reentrant=False)
    assert calls == [True]
    y.sum().backward()
    assert calls == [True, True]


def test_recomputation_that_differs_is_an_error():
    shapes = iter([(4,), (2, 2)])

    def block(x):
        return x.reshape(next(shapes)).sin()

    y = checkpoint(block, engine.randn(4, requires_grad=True), use_reentrant=False)
    with pytest.raises(CheckpointError, match="different metadata"):
        y.sum().backward()


def test_use_reentrant_not_given_warns_like_torch():
    x = engine.randn(3, requires_grad=True)
    with pytest.warns(UserWarning, match="use_reentrant"):
        checkpoint(lambda t: t.sin(), x)


def test_checkpoint_sequential_runs_every_module_once_forward():
    model = engine.nn.Sequential(*[engine.nn.Linear(4, 4) for _ in range(4)])
    x = engine.randn(2, 4, requires_grad=True)
    y = checkpoint_sequential(model, 2, x, use_reentrant=False)
    np.testing.assert_allclose(y.detach().numpy(), model(x).detach().numpy())
    y.sum().backward()
    assert all(p.grad is not None for p in model.parameters())


# ---------------------------------------------------------------------------------------------
# saved_tensors_hooks
# ---------------------------------------------------------------------------------------------
def test_saved_tensors_hooks_see_every_saved_tensor_and_their_unpack_is_used():
    packed = []

    def pack(t):
        packed.append(tuple(t.shape))
        return t.detach().numpy().copy()

    def unpack(arr):
        return engine.tensor(arr)

    x = engine.randn(3, 4, requires_grad=True)
    with saved_tensors_hooks(pack, unpack):
        y = x.sin().relu()
    assert packed == [(3, 4), (3, 4)]  # sin keeps x, relu keeps its result
    y.sum().backward()
    expected = np.cos(x.detach().numpy()) * (np.sin(x.detach().numpy()) > 0)
    np.testing.assert_allclose(x.grad.numpy(), expected, rtol=1e-6)


def test_saved_tensors_hooks_free_the_bytes_the_graph_would_hold():
    x = engine.randn(256, 256, requires_grad=True)
    before = engine.memory.memory_allocated()
    with saved_tensors_hooks(lambda t: None, lambda _: None):
        y = x.exp().sin()  # exp keeps its result, sin keeps its input: the same tensor
    assert engine.memory.memory_allocated() - before == 256 * 256 * 4  # only y
    del y


def test_unpack_returning_a_non_tensor_is_an_error():
    x = engine.randn(3, requires_grad=True)
    with saved_tensors_hooks(lambda t: 1, lambda v: v):
        y = x.sin()
    with pytest.raises(TypeError, match="unpack hook returned int"):
        y.sum().backward()


def test_no_warning_with_use_reentrant_given():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        checkpoint(lambda t: t.sin(), engine.randn(3, requires_grad=True), use_reentrant=False)


@pytest.mark.parametrize("backend", ["MATH", "FLASH_ATTENTION"])
@pytest.mark.parametrize("amp", [False, True])
def test_rerun_uses_the_first_runs_autocast_and_attention_backend(backend, amp):
    # Given a checkpointed attention block run inside autocast / sdpa_kernel, backward outside
    # both: the recomputation must make the same tensors (PyTorch restores autocast too).
    from engine.nn.attention import SDPBackend, sdpa_kernel

    engine.manual_seed(0)
    mha = engine.nn.MultiheadAttention(8, 2, batch_first=True)
    x = engine.randn(2, 4, 8, requires_grad=True)
    mask = engine.ones(4, 4, dtype=engine.bool)

    def block(h):
        return mha(h, h, h, attn_mask=mask, is_causal=True, need_weights=False)[0]

    grads = []
    for ck in (False, True):
        x.grad = None
        with sdpa_kernel(SDPBackend[backend]):
            with engine.autocast("cpu", dtype=engine.bfloat16, enabled=amp):
                y = checkpoint(block, x, use_reentrant=False) if ck else block(x)
        y.float().sum().backward()
        grads.append(x.grad.numpy().copy())
    np.testing.assert_array_equal(grads[0], grads[1])
