"""The dispatch fast paths keep Function.apply's rules.

Unary.apply and Binary.apply spell the operands out instead of packing them (a small op's
dispatch is a large part of its time); relu, clamp and sum take numpy's quickest call on small
tensors and their blocked, threaded kernels on large ones. Each test is one rule that must hold
on every path.
"""

from __future__ import annotations

import numpy as np
import pytest

import engine
from engine import kernels
from engine.autograd.function import LEAF_MSG

SMALL, LARGE = 6, kernels.PARALLEL_MIN_ELEMS + 3  # LARGE: threads, and relu's blocked loop


# --------------------------------------------------------------------------------------------
# Unary.apply / Binary.apply


@pytest.mark.parametrize(
    "inplace",
    [lambda x, y: x.relu_(), lambda x, y: x.exp_(), lambda x, y: x.add_(y), lambda x, y: x.mul_(2)],
    ids=["relu_", "exp_", "add_", "mul_"],
)
def test_inplace_returns_self_and_bumps_the_version_once(inplace):
    x, y = engine.rand(4), engine.rand(4)
    version = x._version
    assert inplace(x, y) is x
    assert x._version == version + 1


@pytest.mark.parametrize(
    "call, expected",
    [
        (lambda x, out: engine.exp(x, out=out), np.exp),
        (lambda x, out: engine.add(x, 1, out=out), lambda v: v + 1),
        (lambda x, out: engine.maximum(x, x, out=out), lambda v: v),
    ],
    ids=["exp", "add", "maximum"],
)
def test_out_is_written_and_its_version_bumped(call, expected):
    x, out = engine.rand(4), engine.empty(4)
    version = out._version
    assert call(x, out) is out
    assert out._version == version + 1
    assert np.allclose(out.numpy(), expected(x.numpy()))


@pytest.mark.parametrize("op", [lambda w: w.relu_(), lambda w: w.add_(1)], ids=["relu_", "add_"])
def test_inplace_on_a_leaf_that_requires_grad_is_refused(op):
    w = engine.rand(3, requires_grad=True)
    with pytest.raises(RuntimeError, match=LEAF_MSG):
        op(w)
    assert w._version == 0


def test_inplace_on_a_view_made_under_no_grad_is_refused_with_grad_on():
    # given a view of a leaf that requires grad, made under no_grad (so it requires no grad
    # itself and takes the no-history path)
    w = engine.rand(4, requires_grad=True)
    with engine.no_grad():
        v = w[1:]
    # when it is written in place with grad on, then PyTorch's error
    with pytest.raises(RuntimeError, match="created in no_grad mode"):
        v.add_(1)
    with pytest.raises(RuntimeError, match="created in no_grad mode"):
        v.exp_()


def test_a_parameter_on_either_side_records_history():
    # given a Parameter (a Tensor subclass) as the first or the second operand
    p = engine.nn.Parameter(engine.rand(3))
    x = engine.rand(3)
    for y in (x * p, p * x, x + p, p.exp()):
        # then the result has history and the gradient reaches the parameter
        assert y.requires_grad and y.grad_fn is not None
        p.grad = None
        y.sum().backward()
        assert p.grad is not None


def test_no_history_under_no_grad_and_for_comparisons():
    g = engine.rand(3, requires_grad=True)
    with engine.no_grad():
        assert not (g * 2).requires_grad and not g.exp().requires_grad
    assert not (g > 0.5).requires_grad and (g > 0.5).grad_fn is None
    assert (g * 2).grad_fn.name() == "MulBackward0"


def test_bool_and_mixed_dtype_rules_hold_on_the_fast_path():
    b = engine.tensor([True, False])
    with pytest.raises(RuntimeError, match="Subtraction, the `-` operator, with a bool tensor"):
        b - b
    with pytest.raises(RuntimeError, match="Boolean inputs not supported for relu"):
        b.relu()
    i = engine.tensor([3, 4])
    assert (i / i).dtype is engine.float32 and (i + 0.5).dtype is engine.float32
    assert (i + i).dtype is engine.int64 and i.exp().dtype is engine.float32


# --------------------------------------------------------------------------------------------
# relu: one numpy call when small, blocks against a constant when large


@pytest.mark.parametrize("n", [SMALL, kernels.BLOCK_ELEMS - 1, kernels.BLOCK_ELEMS, LARGE])
@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64"])
def test_relu_matches_numpy_on_both_paths(n, dtype):
    values = (np.random.default_rng(0).standard_normal(n) * 5).astype(dtype)
    x = engine.from_numpy(values.copy())
    assert np.array_equal(x.relu().numpy(), np.maximum(values, 0))
    assert x.relu().dtype is x.dtype
    x.relu_()
    assert np.array_equal(x.numpy(), np.maximum(values, 0))


# --------------------------------------------------------------------------------------------
# clamp with two number bounds: one pass (np.clip)


@pytest.mark.parametrize("n", [SMALL, LARGE])
@pytest.mark.parametrize("lo, hi", [(-0.5, 0.5), (0.7, 0.2), (-1, None), (None, 1)], ids=str)
def test_clamp_number_bounds_match_torch_on_both_paths(n, lo, hi, torch):
    values = np.random.default_rng(1).standard_normal(n).astype(np.float32)
    values[::5] = np.nan
    values[1::7] = np.inf
    expected = torch.from_numpy(values.copy()).clamp(lo, hi).numpy()
    out = engine.from_numpy(values.copy()).clamp(lo, hi).numpy()
    assert np.array_equal(out, expected, equal_nan=True)
    x = engine.from_numpy(values.copy())
    x.clamp_(lo, hi)
    assert np.array_equal(x.numpy(), expected, equal_nan=True)


# --------------------------------------------------------------------------------------------
# sum: the full reduction


@pytest.mark.parametrize("shape", [(), (4,), (3, 4), (2, 3, 4)], ids=str)
@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "bool"])
def test_full_sum_matches_torch(shape, dtype, torch):
    values = np.asarray(np.random.default_rng(2).standard_normal(shape) * 4).astype(dtype)
    ours = engine.from_numpy(values.copy()).sum()
    theirs = torch.from_numpy(values.copy()).sum()
    assert ours.shape == tuple(theirs.shape) and str(ours.dtype).endswith(str(theirs.dtype)[6:])
    assert np.allclose(ours.numpy(), theirs.numpy(), rtol=1e-6)


# --------------------------------------------------------------------------------------------
# view: shape arguments


@pytest.mark.parametrize(
    "shape, expected",
    [
        ((2, 6), (2, 6)),
        ((-1, 3), (4, 3)),
        ((np.int64(3), 4), (3, 4)),
        (([12],), (12,)),
        (((2, 2, 3),), (2, 2, 3)),
        ((12,), (12,)),
    ],
    ids=str,
)
def test_view_shapes(shape, expected):
    v = engine.arange(12.0).view(*shape)
    assert v.shape == expected and all(type(n) is int for n in v.shape)


@pytest.mark.parametrize(
    "shape, message",
    [
        ((-2, -6), "invalid shape dimension"),
        ((5, 3), "is invalid for input of size 12"),
        ((-1, -1), "only one dimension can be inferred"),
    ],
    ids=str,
)
def test_view_refuses_bad_shapes(shape, message):
    with pytest.raises(RuntimeError, match=message):
        engine.arange(12.0).view(*shape)


# --------------------------------------------------------------------------------------------
# the direct forms: operators and plain ops are the dispatcher with class and op name bound


class _Ops(engine.allocator.MemoryObserver):
    def __init__(self):
        self.ops = []

    def on_alloc(self, event):
        self.ops.append(event.context.get("op"))


@pytest.mark.parametrize(
    "call, op, node",
    [
        (lambda a, b: a + b, "add", "AddBackward0"),
        (lambda a, b: 2 + a, "add", "AddBackward0"),
        (lambda a, b: a - b, "sub", "SubBackward0"),
        (lambda a, b: a * b, "mul", "MulBackward0"),
        (lambda a, b: 3 * a, "mul", "MulBackward0"),
        (lambda a, b: a / b, "div", "DivBackward0"),
        (lambda a, b: a.exp(), "exp", "ExpBackward0"),
        (lambda a, b: engine.maximum(a, b), "maximum", "MaximumBackward0"),
    ],
    ids=["add", "radd", "sub", "mul", "rmul", "div", "exp", "maximum"],
)
def test_operators_name_their_op_record_history_and_match_the_functions(call, op, node):
    rng = np.random.default_rng(0)
    a = engine.tensor(rng.random(5, dtype=np.float32) + 0.5, requires_grad=True)
    b = engine.tensor(rng.random(5, dtype=np.float32) + 0.5)
    rec = _Ops()
    alloc = engine.allocator.get_allocator("cpu")
    alloc.add_observer(rec)
    try:
        y = call(a, b)
    finally:
        alloc.remove_observer(rec)
    assert rec.ops == [op]  # the result's allocation is attributed to the op, as engine.<op>'s
    assert y.grad_fn.name() == node
    y.sum().backward()
    assert a.grad is not None and a.grad.shape == (5,)
    with engine.no_grad():
        z = call(a, b)
    assert z.grad_fn is None and np.array_equal(z.numpy(), y.detach().numpy())


def test_direct_forms_take_out_and_refuse_unknown_keywords():
    x = engine.tensor(np.array([-1.0, 2.0], np.float32))
    y = engine.empty(2)
    assert engine.relu(x, out=y) is y and y.tolist() == [0.0, 2.0]
    assert engine.maximum(x, 0.5, out=y) is y and y.tolist() == [0.5, 2.0]
    with pytest.raises(TypeError):
        engine.relu(x, inplace=True)
    with pytest.raises(TypeError):
        x.__add__(x, alpha=2)  # Tensor.add takes alpha; the operator does not
