"""Each gradient reaches the node that made an input in that input's dtype, as PyTorch's engine
casts it (validate_outputs): under autocast a float32 residual added to a bfloat16 branch sends
a bfloat16 gradient into the branch (was: a float32 gradient, and the branch's matmul backward
failed with 'expected scalar type BFloat16 but found Float')."""

from __future__ import annotations

import numpy as np
import pytest

import engine

X = np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)


def _program(m, device, weights=None):
    x = m.tensor(X) if device == "cpu" else m.randn(4, 8, device=device)
    x.requires_grad_(True)
    lin = m.nn.Linear(8, 8) if device == "cpu" else m.nn.Linear(8, 8, device=device)
    if weights is not None:
        lin.load_state_dict(weights)
    with m.autocast(device, dtype=m.bfloat16):
        y = lin(x)  # bfloat16
    seen = {}

    def hook(g):
        seen["y"] = str(g.dtype).split(".")[-1]

    y.register_hook(hook)
    (y + x).sum().backward()  # float32: add hands y a float32 gradient, cast to bfloat16
    return x, lin, seen


def test_the_bf16_branch_gets_a_bf16_gradient_on_meta():
    x, lin, seen = _program(engine, "meta")
    assert seen["y"] == "bfloat16"
    assert x.grad.dtype is engine.float32 and lin.weight.grad.dtype is engine.float32


@pytest.mark.torch
def test_gradient_dtypes_and_values_match_torch(torch):
    torch.manual_seed(0)
    tx, tlin, tseen = _program(torch, "cpu")
    weights = {k: v.detach().numpy() for k, v in tlin.state_dict().items()}
    ex, elin, eseen = _program(engine, "cpu", weights)
    assert eseen["y"] == tseen["y"] == "bfloat16"
    assert ex.grad.dtype is engine.float32 and tx.grad.dtype is torch.float32
    np.testing.assert_allclose(ex.grad.numpy(), tx.grad.numpy(), rtol=2e-2, atol=2e-2)
    np.testing.assert_allclose(
        elin.weight.grad.numpy(), tlin.weight.grad.numpy(), rtol=2e-2, atol=2e-2
    )
