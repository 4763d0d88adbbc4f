"""The checks the one dispatcher (Function.apply) runs before a kernel writes: PyTorch's errors.

- an op called with out= whose operands (or out) require grad: "functions with out=... arguments
  don't support automatic differentiation";
- an in-place op (or out=) into an expanded tensor: "more than one element of the written-to
  tensor refers to a single memory location".
Nothing is written and nothing allocated when they raise. Checked against torch when installed.
"""

from __future__ import annotations

import pytest

import engine

OUT_MSG = (
    r"{}\(\): functions with out=\.\.\. arguments don't support automatic differentiation, "
    r"but one of the arguments requires grad\."
)
OVERLAP_MSG = (
    "unsupported operation: more than one element of the written-to tensor refers to a single "
    "memory location. Please clone() the tensor before performing the operation."
)


@pytest.mark.parametrize(
    "name, call",
    [
        ("exp", lambda m, x, o: m.exp(x, out=o)),
        ("add", lambda m, x, o: m.add(x, x, out=o)),
        ("mul", lambda m, x, o: m.mul(x, 2.0, out=o)),
        ("sum", lambda m, x, o: m.sum(x, out=o[0, 0])),
        ("clamp", lambda m, x, o: m.clamp(x, 0.1, 0.9, out=o)),
        ("where", lambda m, x, o: m.where(x > 0.5, x, 0.0, out=o)),
    ],
)
def test_out_with_an_operand_that_requires_grad_raises(name, call):
    x = engine.rand(2, 3, requires_grad=True)
    out = engine.zeros(2, 3)
    before = engine.memory.memory_allocated()
    with pytest.raises(RuntimeError, match=OUT_MSG.format(name)):
        call(engine, x, out)
    assert out._version == 0 and out.abs().sum().item() == 0.0
    assert engine.memory.memory_allocated() == before


def test_out_that_requires_grad_raises_too():
    out = engine.zeros(3, requires_grad=True)
    with pytest.raises(RuntimeError, match=OUT_MSG.format("exp")):
        engine.exp(engine.rand(3), out=out)


def test_out_is_fine_without_grad_or_under_no_grad():
    x = engine.rand(3, requires_grad=True)
    out = engine.zeros(3)
    with engine.no_grad():
        assert engine.exp(x, out=out) is out
    assert engine.exp(x.detach(), out=out) is out


@pytest.mark.parametrize(
    "call",
    [
        lambda y: y.add_(1),
        lambda y: y.relu_(),
        lambda y: y.mul_(2.0),
        lambda y: y.copy_(engine.rand(2, 3)),
        lambda y: y.clamp_(0.2, 0.8),
        lambda y: engine.exp(engine.rand(2, 3), out=y),
    ],
)
def test_writing_into_an_expanded_tensor_raises(call):
    y = engine.rand(1, 3).expand(2, 3)
    before = y.tolist()
    with pytest.raises(RuntimeError, match=OVERLAP_MSG.replace("(", r"\(").replace(")", r"\)")):
        call(y)
    assert y.tolist() == before


def test_the_messages_are_torchs():
    torch = pytest.importorskip("torch")
    x = torch.rand(2, 3, requires_grad=True)
    with pytest.raises(RuntimeError) as info:
        torch.exp(x, out=torch.zeros(2, 3))
    assert info.value.args[0] == OUT_MSG.format("exp").replace("\\", "")
    with pytest.raises(RuntimeError) as info:
        torch.rand(1, 3).expand(2, 3).add_(1)
    assert info.value.args[0] == OVERLAP_MSG


@pytest.mark.parametrize(
    "call, value",
    [
        (lambda y: y.fill_(2.5), 2.5),
        (lambda y: y.zero_(), 0.0),
        (lambda y: y.fill_(engine.tensor(-1.0)), -1.0),
    ],
)
def test_fill_and_zero_write_through_an_expanded_tensor_as_torchs_do(call, value):
    # PyTorch lets fill_ / zero_ write into an expanded tensor (every alias gets the same value);
    # the write lands in the base's storage and bumps its version once.
    base = engine.rand(2, 3)
    y = base[1:].expand(4, 3)
    assert call(y) is y
    assert y.tolist() == [[value] * 3] * 4
    assert base[1].tolist() == [value] * 3 and base[0].tolist() != [value] * 3
    assert base._version == 1


def test_fill_of_an_expanded_tensor_matches_torch():
    torch = pytest.importorskip("torch")
    t = torch.arange(6.0).reshape(2, 3)
    e = engine.arange(6.0).reshape(2, 3)
    t[:, :1].expand(2, 3).fill_(7)
    e[:, :1].expand(2, 3).fill_(7)
    assert e.tolist() == t.tolist()
