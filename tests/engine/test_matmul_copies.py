"""Batched matmul keeps what PyTorch's `_matmul_impl` keeps.

PyTorch's matmul is a composite: a batched operand is reshaped to (batch, n, m) for bmm (or to
(-1, k) when the batch folds into one mm), and when that reshape cannot be a view (q, k^T, v of
attention after their transpose, an expanded batch) it is a contiguous copy, which bmm/mm then
saves for backward. The engine makes the same copies, so the bytes held between forward and
backward, the peak of forward+backward, and the gradients are PyTorch's.
"""

from __future__ import annotations

import numpy as np
import pytest

import engine
from tests.engine.test_memory_vs_torch import SCALAR_SLACK, engine_peak, torch_peak

B, H, T, D = 2, 4, 8, 16
F32 = 4


def _attention_scores(lib, x):
    q = x.view(B, T, H, D).transpose(1, 2)
    k = (x * 2).view(B, T, H, D).transpose(1, 2)
    return lib.matmul(q, k.transpose(-2, -1))


def _fold_with_copy(lib, x, w):
    return lib.matmul(x.transpose(1, 2), w)  # (B, T, C) not foldable; w requires grad


def _no_fold(lib, x, w):
    return lib.matmul(x.transpose(1, 2), w.detach())  # bmm path: a 3-D view, no copy


def _broadcast(lib, x, y):
    return lib.matmul(x, y)  # (1, H, T, D) @ (B, H, D, T): x's expanded batch is copied


CASES = {
    # name: (program, input shapes, bytes of the copies kept for backward)
    "attention_scores": (_attention_scores, [(B, T, H * D)], 2 * B * H * T * D * F32),
    "fold_with_copy": (_fold_with_copy, [(B, 32, T), (32, 24)], B * T * 32 * F32),
    "no_fold": (_no_fold, [(B, 32, T), (32, 24)], 0),
    "broadcast": (_broadcast, [(1, H, T, D), (B, H, D, T)], B * H * T * D * F32),
}


def _assert_same_gradients(engine_leaves, torch_leaves):
    """The same leaves have gradients on both sides, and they agree."""
    for e, t in zip(engine_leaves, torch_leaves, strict=True):
        assert (e.grad is None) == (t.grad is None)
        if t.grad is not None:
            np.testing.assert_allclose(
                e.grad.detach().numpy(), t.grad.detach().numpy(), rtol=1e-4, atol=1e-4
            )


def _inputs(lib, shapes, seed=0):
    rng = np.random.default_rng(seed)
    arrays = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    return [lib.tensor(a, requires_grad=True) for a in arrays], arrays


def _kept_after_forward(name):
    """Bytes the engine still holds after forward beyond the inputs and the output: what the
    graph keeps for backward (in the attention case x*2 is not among them: k's copy is saved,
    not k, so x*2 is freed as soon as the copy is made, as in PyTorch)."""
    program, shapes, _ = CASES[name]
    ins, _ = _inputs(engine, shapes)
    before = engine.memory.memory_allocated("cpu")
    out = program(engine, *ins)
    held = engine.memory.memory_allocated("cpu") - before - out.numel() * F32
    return held, out


@pytest.mark.parametrize("name", list(CASES))
def test_the_copies_backward_keeps_are_pytorchs(name):
    held, out = _kept_after_forward(name)
    assert held == CASES[name][2]
    out.sum().backward()


@pytest.mark.parametrize("name", list(CASES))
def test_results_and_gradients_match_torch(name):
    torch = pytest.importorskip("torch")
    program, shapes, _ = CASES[name]
    e_in, arrays = _inputs(engine, shapes)
    t_in = [torch.tensor(a, requires_grad=True) for a in arrays]
    e_out, t_out = program(engine, *e_in), program(torch, *t_in)
    np.testing.assert_allclose(e_out.detach().numpy(), t_out.detach().numpy(), rtol=1e-5, atol=1e-5)
    g = np.random.default_rng(1).standard_normal(tuple(t_out.shape)).astype(np.float32)
    e_out.backward(engine.tensor(g))
    t_out.backward(torch.tensor(g))
    _assert_same_gradients(e_in, t_in)


@pytest.mark.parametrize("name", list(CASES))
def test_peak_of_forward_and_backward_is_torchs(name):
    torch = pytest.importorskip("torch")
    program, shapes, _ = CASES[name]
    e_in, arrays = _inputs(engine, shapes)
    t_in = [torch.tensor(a, requires_grad=True) for a in arrays]

    shape = tuple(program(torch, *t_in).shape)
    g = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    # A dense incoming gradient: backward of .sum() hands bmm a stride-0 gradient, which
    # PyTorch's CPU bmm copies matrix by matrix (a kernel's temporaries, not autograd's).
    e_g, t_g = engine.tensor(g), torch.tensor(g)

    def run(lib, ins, grad):
        def go():
            program(lib, *ins).backward(grad)

        return go

    e, t = engine_peak(run(engine, e_in, e_g)), torch_peak(run(torch, t_in, t_g))
    assert abs(e - t) <= SCALAR_SLACK, (e, t)


def test_without_grad_the_copies_are_temporaries():
    x = engine.randn(B, T, H * D)
    before = engine.memory.memory_allocated("cpu")
    kept = []
    peak = engine_peak(lambda: kept.append(_attention_scores(engine, x)))
    act, out = B * T * H * D * F32, B * H * T * T * F32
    assert peak == act + 2 * act + out  # x*2, the copies of q and k^T, the result
    assert engine.memory.memory_allocated("cpu") - before == out


# (shape of a, shape of b, a requires grad, b requires grad): every branch of _matmul_impl
# the engine follows (fold, transposed fold with a matrix and with a vector, bmm with a
# broadcast batch, the 3-D batch of one that requires grad, a 2-D matrix over a 4-D batch).
SHAPES = [
    ((24, 32), (2, 32, 8), True, True),
    ((24, 32), (2, 32, 8), False, True),
    ((24, 32), (2, 32, 8), True, False),
    ((32,), (2, 32, 8), True, True),
    ((32,), (2, 32, 8), False, True),
    ((2, 8, 32), (32,), True, True),
    ((3, 2, 8, 32), (1, 2, 32, 5), True, True),
    ((1, 8, 32), (3, 32, 5), True, True),
    ((1, 8, 32), (3, 32, 5), False, True),
    ((3, 8, 32), (1, 32, 5), True, True),
    ((2, 3, 8, 32), (32, 5), False, True),
    # bmm of one batch (BmmBackward0's two products on the transposes), either operand alone
    ((3, 8, 32), (3, 32, 5), True, True),
    ((3, 8, 32), (3, 32, 5), True, False),
    ((3, 8, 32), (3, 32, 5), False, True),
    ((2, 3, 8, 32), (2, 3, 32, 5), True, True),
]


@pytest.mark.parametrize("sa, sb, ra, rb", SHAPES)
def test_every_branch_peaks_and_differentiates_as_torch(sa, sb, ra, rb):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    a_np = rng.standard_normal(sa).astype(np.float32)
    b_np = rng.standard_normal(sb).astype(np.float32)
    shape = tuple(torch.matmul(torch.tensor(a_np), torch.tensor(b_np)).shape)
    g_np = rng.standard_normal(shape).astype(np.float32)
    peaks, grads = [], []
    for lib, measure in ((engine, engine_peak), (torch, torch_peak)):
        a = lib.tensor(a_np, requires_grad=ra)
        b = lib.tensor(b_np, requires_grad=rb)
        g = lib.tensor(g_np)
        peaks.append(measure(lambda lib=lib, a=a, b=b, g=g: lib.matmul(a, b).backward(g)))
        grads.append((a, b))
    assert abs(peaks[0] - peaks[1]) <= SCALAR_SLACK, peaks
    _assert_same_gradients(*grads)
