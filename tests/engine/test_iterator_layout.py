"""Elementwise results are laid out as PyTorch's TensorIterator lays them out: C order when the
inputs are C-contiguous, else the inputs' layout (the first input decides; broadcast dims do not
count). So a later .contiguous() copies, .view() refuses and matmul copies exactly when torch's
do, and the bytes follow."""

from __future__ import annotations

import numpy as np
import pytest

import engine
from tests.engine.test_memory_vs_torch import SCALAR_SLACK, engine_peak, torch_peak

LAYOUTS = {
    "heads": lambda m: m.randn(2, 8, 4, 16).transpose(1, 2),
    "transposed": lambda m: m.randn(4, 16).t(),
    "channels_last": lambda m: m.randn(2, 3, 4, 5).permute(0, 2, 3, 1),
    "sliced": lambda m: m.randn(3, 8)[:, ::2],
    "expanded": lambda m: m.randn(4, 1, 3).expand(4, 5, 3),
    "contiguous": lambda m: m.randn(3, 4),
}
OPS = {
    "mul_scalar": lambda m, x: x * 2,
    "add_self": lambda m, x: x + x,
    "exp": lambda m, x: m.exp(x),
    "relu": lambda m, x: x.relu(),
    "add_broadcast_row": lambda m, x: x + m.ones(x.shape[-1]),
    "first_input_decides": lambda m, x: x * x.contiguous(),
    "compare": lambda m, x: x > 0,
    "clamp": lambda m, x: x.clamp(-0.5, 0.5),
    "tanh": lambda m, x: m.tanh(x),
}


@pytest.mark.parametrize("op", list(OPS))
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_result_strides_are_torchs(layout, op):
    torch = pytest.importorskip("torch")
    e = OPS[op](engine, LAYOUTS[layout](engine))
    t = OPS[op](torch, LAYOUTS[layout](torch))
    assert (tuple(e.shape), e.stride()) == (tuple(t.shape), t.stride())


@pytest.mark.parametrize("layout", ["heads", "transposed", "channels_last"])
def test_gradient_strides_are_torchs(layout):
    torch = pytest.importorskip("torch")
    grads = []
    for lib in (engine, torch):
        x = LAYOUTS[layout](lib).detach().requires_grad_()
        y = lib.tanh(x) * 3
        y.backward(lib.ones_like(y))
        grads.append(x.grad.stride())
    assert grads[0] == grads[1]


def test_values_are_the_same_whatever_the_layout():
    a = np.random.default_rng(0).standard_normal((4, 6)).astype(np.float32)
    xt = engine.tensor(a.T.copy()).t()  # the same values, stored transposed
    np.testing.assert_array_equal((xt * 2 + 1).numpy(), a * 2 + 1)
    np.testing.assert_array_equal(engine.exp(xt).numpy(), np.exp(a))


def test_a_transposed_result_is_copied_by_contiguous_and_refused_by_view():
    x = engine.randn(16, 32).t()
    y = x * 2
    assert not y.is_contiguous()
    with pytest.raises(RuntimeError, match="view size is not compatible"):
        y.view(-1)
    before = engine.memory.memory_allocated()
    z = y.contiguous()
    assert engine.memory.memory_allocated() - before == 16 * 32 * 4 and z.is_contiguous()


@pytest.mark.parametrize(
    "program",
    [
        lambda m, x: (x.transpose(1, 2) * 2).contiguous().sum(),
        # (squared: a dense gradient; .sum()'s expanded one makes torch's cpu bmm copy each
        # matrix, a kernel's temporaries)
        lambda m, x: (
            m.matmul(x.transpose(1, 2) * 0.5, x.transpose(1, 2).transpose(-2, -1)).pow(2).sum()
        ),
        lambda m, x: (x.permute(0, 2, 1, 3).relu() + 1).reshape(-1).sum(),
    ],
)
def test_forward_and_backward_peak_as_torchs(program):
    torch = pytest.importorskip("torch")
    a = np.random.default_rng(1).standard_normal((2, 8, 4, 16)).astype(np.float32)
    peaks = []
    for lib, measure in ((engine, engine_peak), (torch, torch_peak)):
        x = lib.tensor(a, requires_grad=True)
        peaks.append(measure(lambda lib=lib, x=x: program(lib, x).backward()))
    assert abs(peaks[0] - peaks[1]) <= SCALAR_SLACK, peaks
