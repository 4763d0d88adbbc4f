"""F.embedding / nn.Embedding with max_norm: the picked rows renormalised in place first
(torch.embedding_renorm_): values, gradients, the weight's version, and every block of the
forward and backward above the scalars' slack (torch's kernel makes and frees a few 4- and 8-byte
scalars per row, the norm and its copies for item(): the engine one 0-d norm)."""

from __future__ import annotations

import numpy as np
import pytest

import engine
from tests.engine.test_memory_vs_torch import engine_sequence, forward_backward, torch_sequence

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.torch

W0 = (np.random.default_rng(0).standard_normal((10, 4)) * 3).astype(np.float32)
IDX = np.array([[1, 3], [1, 7]])


@pytest.mark.parametrize("norm_type", [2.0, 1.0, float("inf")])
@pytest.mark.parametrize("max_norm", [1.0, 100.0])
def test_rows_renormalised_as_torch(max_norm, norm_type):
    ew = engine.nn.Parameter(engine.tensor(W0.copy()))
    tw = torch.nn.Parameter(torch.tensor(W0.copy()))
    ey = engine.nn.functional.embedding(
        engine.tensor(IDX), ew, max_norm=max_norm, norm_type=norm_type
    )
    ty = torch.nn.functional.embedding(
        torch.tensor(IDX), tw, max_norm=max_norm, norm_type=norm_type
    )
    np.testing.assert_allclose(ey.detach().numpy(), ty.detach().numpy(), rtol=1e-6)
    np.testing.assert_allclose(ew.detach().numpy(), tw.detach().numpy(), rtol=1e-6)
    assert ew._version == tw._version == 1  # one in-place op, rows changed or not
    ey.sum().backward()
    ty.sum().backward()
    np.testing.assert_allclose(ew.grad.numpy(), tw.grad.numpy())


def test_module_takes_max_norm():
    m = engine.nn.Embedding(10, 4, max_norm=1.0, norm_type=1.0)
    m(engine.tensor([0, 1]))
    assert abs(m.weight[0].abs().sum().item() - 1.0) < 1e-6
    with pytest.raises(NotImplementedError, match="scale_grad_by_freq and sparse"):
        engine.nn.Embedding(10, 4, sparse=True)


def test_blocks_as_torch():
    w0 = (np.random.default_rng(1).standard_normal((1000, 64)) * 3).astype(np.float32)
    idx = np.random.default_rng(2).integers(0, 1000, (8, 16))

    def program(m):
        w = m.nn.Parameter(m.tensor(w0.copy()))
        i = m.tensor(idx)
        return forward_backward(m, lambda: m.nn.functional.embedding(i, w, max_norm=1.0))

    ours, theirs = program(engine), program(torch)
    for step in (0, 1):  # forward, then backward (the output and the weight's gradient)
        seq = engine_sequence(ours[step])
        assert seq == torch_sequence(theirs[step]), step
        assert seq, step
