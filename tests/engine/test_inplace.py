"""In-place ops: the same object back, 0 bytes allocated, the version bumped by exactly one.

Seed 002 (Paddle's relu/relu_ peak on 1x64x512x512) and seed 004 (the caching allocator's
382.0 MiB for randn(10000, 10000), out-of-place relu adds as much again, relu_ adds 0).
"""

from __future__ import annotations

import numpy as np
import pytest

import engine
from engine import memory

POS = lambda: engine.rand(3, 4) + 0.5  # noqa: E731
OTHER = lambda: engine.rand(4) + 0.5  # noqa: E731

# name: (make the input, call the in-place op, the out-of-place equivalent)
INPLACE = {
    "neg_": (POS, lambda x: x.neg_(), lambda x: x.neg()),
    "exp_": (POS, lambda x: x.exp_(), lambda x: x.exp()),
    "log_": (POS, lambda x: x.log_(), lambda x: x.log()),
    "sqrt_": (POS, lambda x: x.sqrt_(), lambda x: x.sqrt()),
    "sin_": (POS, lambda x: x.sin_(), lambda x: x.sin()),
    "cos_": (POS, lambda x: x.cos_(), lambda x: x.cos()),
    "tanh_": (POS, lambda x: x.tanh_(), lambda x: x.tanh()),
    "sigmoid_": (POS, lambda x: x.sigmoid_(), lambda x: x.sigmoid()),
    "relu_": (lambda: engine.randn(3, 4), lambda x: x.relu_(), lambda x: x.relu()),
    "engine.relu_": (lambda: engine.randn(3, 4), lambda x: engine.relu_(x), engine.relu),
    "abs_": (lambda: engine.randn(3, 4), lambda x: x.abs_(), lambda x: x.abs()),
    "sign_": (lambda: engine.randn(3, 4), lambda x: x.sign_(), lambda x: x.sign()),
    "erf_": (lambda: engine.randn(3, 4), lambda x: x.erf_(), lambda x: x.erf()),
    "clamp_": (
        lambda: engine.randn(3, 4),
        lambda x: x.clamp_(-0.5, 0.5),
        lambda x: x.clamp(-0.5, 0.5),
    ),
    "clip_": (lambda: engine.randn(3, 4), lambda x: x.clip_(max=0.1), lambda x: x.clip(max=0.1)),
    "pow_": (POS, lambda x: x.pow_(2), lambda x: x.pow(2)),
    "pow_tensor": (POS, lambda x: x.pow_(OTHER_T), lambda x: x.pow(OTHER_T)),
    "add_": (POS, lambda x: x.add_(2.0), lambda x: x.add(2.0)),
    "add_tensor_alpha": (
        POS,
        lambda x: x.add_(OTHER_T, alpha=2),
        lambda x: x.add(OTHER_T, alpha=2),
    ),
    "sub_": (POS, lambda x: x.sub_(OTHER_T), lambda x: x.sub(OTHER_T)),
    "subtract_": (POS, lambda x: x.subtract_(OTHER_T, alpha=2), lambda x: x - OTHER_T * 2),
    "mul_": (POS, lambda x: x.mul_(3.0), lambda x: x.mul(3.0)),
    "mul_tensor": (POS, lambda x: x.mul_(OTHER_T), lambda x: x * OTHER_T),
    "div_": (POS, lambda x: x.div_(OTHER_T), lambda x: x / OTHER_T),
    "scale_": (POS, lambda x: x.scale_(2.0, bias=1.0), lambda x: x * 2 + 1),
    "maximum_": (POS, lambda x: x.maximum_(OTHER_T), lambda x: x.maximum(OTHER_T)),
    "iadd": (POS, lambda x: x.__iadd__(OTHER_T), lambda x: x + OTHER_T),
    "isub": (POS, lambda x: x.__isub__(1), lambda x: x - 1),
    "imul": (POS, lambda x: x.__imul__(OTHER_T), lambda x: x * OTHER_T),
    "itruediv": (POS, lambda x: x.__itruediv__(2.0), lambda x: x / 2.0),
    "zero_": (POS, lambda x: x.zero_(), lambda x: engine.zeros(3, 4)),
    "fill_": (POS, lambda x: x.fill_(7.0), lambda x: engine.full((3, 4), 7.0)),
    "fill_0d_tensor": (POS, lambda x: x.fill_(SCALAR_T), lambda x: engine.full((3, 4), 2.0)),
    "copy_": (POS, lambda x: x.copy_(OTHER_T), lambda x: OTHER_T.expand(3, 4)),
    "masked_fill_": (POS, lambda x: x.masked_fill_(MASK, 0.0), lambda x: x.masked_fill(MASK, 0.0)),
    "t_": (POS, lambda x: x.t_(), lambda x: x.t()),
    "transpose_": (POS, lambda x: x.transpose_(0, 1), lambda x: x.transpose(0, 1)),
    "transpose_perm": (POS, lambda x: x.transpose_([1, 0]), lambda x: x.permute(1, 0)),
}
OTHER_T = SCALAR_T = MASK = None


@pytest.fixture
def other():
    """Operands made before the op runs, so the op's own allocations are all that is measured."""
    global OTHER_T, SCALAR_T, MASK
    OTHER_T = OTHER()
    SCALAR_T = engine.tensor(2.0)
    MASK = OTHER_T > 1.0
    yield
    OTHER_T = SCALAR_T = MASK = None


@pytest.mark.parametrize("grad", [False, True], ids=["plain", "grad"])
@pytest.mark.parametrize("name", list(INPLACE))
def test_inplace_returns_self_allocates_nothing_bumps_version(name, grad, other):
    make, call, reference = INPLACE[name]
    x = make()
    expected = reference(x.clone()).numpy().copy()
    if grad:  # a non-leaf in a graph: ops that keep their result for backward stay free
        leaf = engine.ones(1, requires_grad=True)
        x = x * leaf
        if name in (
            "sin_",
            "cos_",
            "log_",
            "abs_",
            "pow_",
            "pow_tensor",
            "clamp_",
            "clip_",
            "erf_",
            "maximum_",
            "mul_tensor",
            "div_",
            "imul",
            "masked_fill_",
        ):
            pytest.skip("this op clones its input for backward (tested in test_autograd)")
    v = x._version
    memory.reset_peak_memory_stats()
    before = memory.memory_allocated()
    y = call(x)
    assert y is x
    assert x._version == v + 1
    assert memory.memory_allocated() == before
    assert memory.max_memory_allocated() == before, "no temporary may be charged either"
    np.testing.assert_allclose(x.detach().numpy(), expected, rtol=1e-6)


@pytest.mark.parametrize("name", list(INPLACE))
def test_inplace_on_meta_allocates_nothing(name, other):
    make, call, _ = INPLACE[name]
    global OTHER_T, SCALAR_T, MASK
    x = make().to("meta")
    OTHER_T, SCALAR_T, MASK = OTHER_T.to("meta"), SCALAR_T.to("meta"), MASK.to("meta")
    v = x._version
    memory.reset_peak_memory_stats("meta")
    before = memory.memory_allocated("meta")
    assert call(x) is x
    assert x._version == v + 1
    assert memory.max_memory_allocated("meta") == before


def test_setitem_writes_in_place():
    x = engine.zeros(3, 4)
    ptr, v = x.data_ptr(), x._version
    x[0] = 4.0
    x[:, 1] = engine.tensor([1.0, 2.0, 3.0])
    x[2, 2:] = engine.tensor([7.0, 8.0])
    x[1:, ::3] = 5
    assert x.data_ptr() == ptr and x._version == v + 4
    expected = np.zeros((3, 4), dtype=np.float32)
    expected[0] = 4
    expected[:, 1] = [1, 2, 3]
    expected[2, 2:] = [7, 8]
    expected[1:, ::3] = 5
    np.testing.assert_array_equal(x.numpy(), expected)


def test_setitem_with_tensor_indices_and_masks():
    x = engine.zeros(5)
    x[engine.tensor([0, 3])] = 2.0
    x[x == 0] = engine.tensor(1.0)
    x[[1]] = engine.tensor([9.0])
    assert x.tolist() == [2, 9, 1, 2, 1]
    assert x._version == 3


def test_setitem_shape_mismatch_names_both_shapes():
    x = engine.zeros(3, 4)
    with pytest.raises(RuntimeError, match=r"\[4\].*\[3\]|\[3\].*\[4\]"):
        x[0] = engine.ones(3)
    assert x._version == 0


def test_python_inplace_operators_keep_the_object():
    x = engine.ones(3)
    ident = id(x)
    x += 1
    x -= engine.ones(3)
    x *= 4
    x /= 2
    assert id(x) == ident and x.tolist() == [2, 2, 2] and x._version == 4


def test_int_tensor_inplace_ops():
    x = engine.tensor([1, -2, 3])
    x.add_(1).mul_(2).relu_().neg_().abs_()
    assert x.tolist() == [4, 0, 8] and x.dtype is engine.int64
    x.fill_(2.7)
    assert x.tolist() == [2, 2, 2]
    with pytest.raises(
        RuntimeError, match="result type Float can't be cast to the desired output type Long"
    ):
        x.div_(2)
    with pytest.raises(
        RuntimeError, match="result type Float can't be cast to the desired output type Long"
    ):
        x.mul_(2.5)
    with pytest.raises(RuntimeError, match="can't be cast"):
        x.exp_()
    assert x.tolist() == [2, 2, 2] and x._version == 6


# ---------------------------------------------------------------------------------------------
# bad in-place results: an error naming both shapes; nothing written, nothing allocated
@pytest.mark.parametrize(
    "shape, call",
    [
        ((2, 3, 4), lambda x, o: x.add_(o)),
        ((5,), lambda x, o: x.mul_(o)),
        ((2, 3, 4), lambda x, o: x.sub_(o, alpha=2)),
        ((2, 4), lambda x, o: x.copy_(o)),
        ((3, 3, 4), lambda x, o: x.pow_(o)),
        ((2, 3, 4), lambda x, o: engine.add(x, o, out=x)),
        ((2, 1, 1), lambda x, o: x.maximum_(o)),
        ((2, 3, 4), lambda x, o: x.masked_fill_(o > 0, 1.0)),
        ((2, 3, 4), lambda x, o: x.__iadd__(o)),
        ((4, 3), lambda x, o: x.__setitem__(slice(None), o)),
    ],
    ids=[
        "add_",
        "mul_",
        "sub_",
        "copy_",
        "pow_",
        "add_out",
        "maximum_",
        "masked_fill_",
        "+=",
        "setitem",
    ],
)
def test_unbroadcastable_inplace_raises_naming_shapes_and_changes_nothing(shape, call):
    x = engine.rand(3, 4)
    o = engine.ones(*shape)
    if "masked_fill_" in call.__code__.co_names:
        o = o > 0  # the mask: made before measuring
        call = lambda x, o: x.masked_fill_(o, 1.0)  # noqa: E731
    values, v = x.numpy().copy(), x._version
    memory.reset_peak_memory_stats()
    allocated = memory.memory_allocated()
    count = memory.memory_stats()["allocation.all.allocated"]
    with pytest.raises(RuntimeError, match=r"\[3, 4\]") as info:
        call(x, o)
    assert str(list(shape)) in str(info.value)
    assert x._version == v
    np.testing.assert_array_equal(x.numpy(), values)
    assert memory.memory_allocated() == allocated
    assert memory.memory_stats()["allocation.all.allocated"] == count


def test_binary_shape_mismatch_names_both_shapes_and_allocates_nothing():
    a, b = engine.ones(3), engine.ones(4)
    allocated = memory.memory_allocated()
    for op in (engine.add, engine.mul, engine.sub, engine.div, engine.maximum, engine.eq):
        with pytest.raises(RuntimeError, match=r"\[3\].*\[4\]"):
            op(a, b)
    assert memory.memory_allocated() == allocated
    assert memory.memory_stats()["allocation.all.allocated"] == 2


# ---------------------------------------------------------------------------------------------
# the seeds
@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_seed_002_relu_peak_halves_in_place(device):
    x = engine.rand(1, 64, 512, 512, device=device)
    memory.reset_peak_memory_stats(device)
    y = engine.relu(x)
    assert memory.max_memory_allocated(device) == 134217728
    del y
    memory.reset_peak_memory_stats(device)
    y = engine.relu_(x)
    assert y is x
    assert memory.max_memory_allocated(device) == 67108864


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_seed_004_caching_model_relu_vs_relu_(device):
    memory.set_allocator_model("caching", device)
    mib = 1024**2
    start = memory.memory_allocated(device)
    t = engine.randn(10000, 10000, device=device)
    assert memory.memory_allocated(device) - start == 400556032
    assert (memory.memory_allocated(device) - start) / mib == 382.0
    memory.reset_peak_memory_stats(device)
    before, peak = memory.memory_allocated(device), memory.max_memory_allocated(device)
    out = engine.relu(t)
    assert memory.memory_allocated(device) - before == 400556032
    assert memory.max_memory_allocated(device) - peak == 400556032
    del out
    memory.reset_peak_memory_stats(device)
    before, peak = memory.memory_allocated(device), memory.max_memory_allocated(device)
    assert engine.relu_(t) is t
    assert memory.memory_allocated(device) - before == 0
    assert memory.max_memory_allocated(device) - peak == 0
