"""Linear on a contiguous N-d input with a bias is PyTorch's _flatten_nd_linear: addmm over the
input's 2-D view, and the result is a view of addmm's. An in-place write to it then goes through
CopySlices, with torch's memory (with and without activation checkpointing)."""

from __future__ import annotations

import pytest

import engine
from tests.engine.test_memory_vs_torch import assert_peak_as_torch


@pytest.mark.parametrize("shape", [(2, 5, 4), (2, 2, 5, 4)])
def test_linear_with_bias_on_a_contiguous_nd_input_is_a_view_of_addmm(shape):
    lin = engine.nn.Linear(4, 3)
    y = lin(engine.randn(*shape, requires_grad=True))
    assert y._base is not None and y.shape == shape[:-1] + (3,)
    assert y.grad_fn.name() == "ViewBackward0"
    # without a bias (matmul's path) or on a non-contiguous input it is not
    nobias = engine.nn.functional.linear(engine.randn(*shape), lin.weight)
    assert nobias._base is None


def _inplace_on_linear(m, checkpointed):
    def program():
        m.manual_seed(0)
        lin = m.nn.Linear(64, 64)
        x = m.randn(2, 32, 64, requires_grad=True)

        def f(x):
            return lin(x).add_(x)

        if checkpointed:
            if m is engine:
                from engine.utils.checkpoint import checkpoint
            else:
                from torch.utils.checkpoint import checkpoint
            y = checkpoint(f, x, use_reentrant=False)
        else:
            y = f(x)
        y.sum().backward()

    return program


@pytest.mark.torch
@pytest.mark.parametrize("checkpointed", [False, True])
def test_inplace_write_into_a_linear_result_peaks_as_torch(checkpointed):
    pytest.importorskip("torch")
    assert_peak_as_torch(lambda m: _inplace_on_linear(m, checkpointed))
