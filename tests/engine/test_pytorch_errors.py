"""Bad arguments raise PyTorch's errors (type and words), not numpy's; `.data` behaves as PyTorch's.

Each message is written out here as torch 2.13 gives it, so the tests run without torch; the
torch-marked test checks every case against torch itself, so an upgrade that rewords one shows.
"""

from __future__ import annotations

import numpy as np
import pytest

import engine


def _conv(m, F, **kw):
    return F.conv2d(m.ones(1, 3, 8, 8), m.ones(4, 3, 3, 3), **kw)


def _max_pool(m, F, k=2, **kw):
    return F.max_pool2d(m.ones(1, 3, 8, 8), k, **kw)


def _avg_pool(m, F, **kw):
    return F.avg_pool2d(m.ones(1, 3, 8, 8), 2, **kw)


def _matmul(sa, da, sb, db):
    def run(m, F):
        return m.matmul(m.ones(*sa, dtype=getattr(m, da)), m.ones(*sb, dtype=getattr(m, db)))

    return run


CASES = {
    # convolution: _convolution's checks, in its order
    "conv stride 0": (
        lambda m, F: _conv(m, F, stride=0),
        RuntimeError,
        "non-positive stride is not supported",
    ),
    "conv stride -1": (
        lambda m, F: _conv(m, F, stride=(1, -1)),
        RuntimeError,
        "non-positive stride is not supported",
    ),
    "conv dilation 0": (
        lambda m, F: _conv(m, F, dilation=(1, 0)),
        RuntimeError,
        "dilation should be greater than zero, but got [1, 0]",
    ),
    "conv dilation -1": (
        lambda m, F: _conv(m, F, dilation=-1),
        RuntimeError,
        "dilation should be greater than zero",
    ),
    "conv negative padding": (
        lambda m, F: _conv(m, F, padding=(0, -1)),
        RuntimeError,
        "negative padding is not supported",
    ),
    "conv padding before stride": (
        lambda m, F: _conv(m, F, stride=0, padding=-1),
        RuntimeError,
        "negative padding is not supported",
    ),
    # pooling
    "max_pool stride 0": (
        lambda m, F: _max_pool(m, F, stride=0),
        RuntimeError,
        "stride should not be zero",
    ),
    "max_pool stride -1": (
        lambda m, F: _max_pool(m, F, stride=-1),
        RuntimeError,
        "stride should be greater than zero, but got dH: -1 dW: -1",
    ),
    "max_pool dilation 0": (
        lambda m, F: _max_pool(m, F, dilation=(1, 0)),
        RuntimeError,
        "dilation should be greater than zero, but got dilationH: 1 dilationW: 0",
    ),
    "max_pool negative padding": (
        lambda m, F: _max_pool(m, F, padding=-1, dilation=0),
        RuntimeError,
        "pad must be non-negative, but got pad: -1",
    ),
    "max_pool kernel -1": (
        lambda m, F: _max_pool(m, F, k=-1),
        RuntimeError,
        "kernel size should be greater than zero, but got kH: -1 kW: -1",
    ),
    "avg_pool stride 0": (
        lambda m, F: _avg_pool(m, F, stride=0),
        RuntimeError,
        "stride should not be zero",
    ),
    "avg_pool negative padding": (
        lambda m, F: _avg_pool(m, F, stride=-1, padding=-1),
        RuntimeError,
        "pad must be non-negative, but got pad: -1",
    ),
    # matmul: a Python number is a TypeError; two dtypes are refused by the kernel reached
    "matmul with a number": (
        lambda m, F: m.matmul(m.ones(3), 2),
        TypeError,
        "matmul(): argument 'other' (position 2) must be Tensor, not int",
    ),
    "matmul of a number": (
        lambda m, F: m.matmul(2.5, m.ones(3)),
        TypeError,
        "matmul(): argument 'input' (position 1) must be Tensor, not float",
    ),
    "@ a number": (
        lambda m, F: m.ones(3) @ 2,
        TypeError,
        "unsupported operand type(s) for @: 'Tensor' and 'int'",
    ),
    "mm float32 by float64": (
        lambda m, F: m.mm(m.ones(2, 2), m.ones(2, 2, dtype=m.float64)),
        RuntimeError,
        "expected m1 and m2 to have the same dtype, but got: float != double",
    ),
    "mm int64 by float32": (
        _matmul((2, 2), "int64", (2, 2), "float32"),
        RuntimeError,
        "expected m1 and m2 to have the same dtype, but got: long int != float",
    ),
    "folded matmul": (
        _matmul((2, 2, 2), "float32", (2, 2), "float64"),
        RuntimeError,
        "expected m1 and m2 to have the same dtype, but got: float != double",
    ),
    "mv": (
        _matmul((2, 2), "float32", (2,), "float64"),
        RuntimeError,
        "addmv input tensors must have the same dtype, but got Double, Float, and Double",
    ),
    "dot": (
        _matmul((2,), "float64", (2,), "float32"),
        RuntimeError,
        "dot : expected both vectors to have same dtype, but found Double and Float",
    ),
    "bmm": (
        _matmul((2, 2), "float64", (2, 2, 2), "float32"),
        RuntimeError,
        "expected scalar type Double but found Float",
    ),
    # a tensor whose bytes overflow int64 is refused at creation, on meta too
    "meta overflow": (
        lambda m, F: m.empty(2**62, 4, device="meta"),
        RuntimeError,
        "Storage size calculation overflowed with sizes=[4611686018427387904, 4]",
    ),
    "meta overflow float64": (
        lambda m, F: m.zeros(2**61, 2, dtype=m.float64, device="meta"),
        RuntimeError,
        "Storage size calculation overflowed with sizes=[2305843009213693952, 2]",
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_bad_arguments_raise_pytorchs_error(name):
    run, kind, message = CASES[name]
    with pytest.raises(kind) as info:
        run(engine, engine.nn.functional)
    assert str(info.value) == message


@pytest.mark.torch
@pytest.mark.parametrize("name", list(CASES))
def test_the_messages_are_torchs_own(name, torch):
    run, kind, message = CASES[name]
    with pytest.raises(kind) as info:
        run(torch, torch.nn.functional)
    assert str(info.value) == message


def test_the_largest_meta_tensor_that_fits_is_made():
    t = engine.empty(2**60, device="meta")  # 4 EiB of float32: accounted, not refused
    assert t.shape == (2**60,)


# ---------------------------------------------------------------------------------------------
# .data: the same memory, a version counter of its own
# ---------------------------------------------------------------------------------------------
def _saved_then_data_written(m):
    w = m.ones(3, requires_grad=True)
    y = (w * w).sum()  # MulBackward0 saves w
    w.data.mul_(2)  # not a version bump of w: PyTorch allows it
    y.backward()
    return w


def test_writing_w_data_after_w_was_saved_is_allowed():
    w = _saved_then_data_written(engine)
    assert w._version == 0
    np.testing.assert_array_equal(w.grad.numpy(), [4.0, 4.0, 4.0])  # 2 * w, w already doubled


def test_writing_through_detach_is_still_a_version_error():
    w = engine.ones(3, requires_grad=True)
    y = (w * w).sum()
    w.detach().mul_(2)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.backward()


def test_data_shares_memory_and_allocates_nothing():
    w = engine.ones(4, 4, requires_grad=True)
    before = engine.memory.memory_allocated()
    d = w.data
    d[0].fill_(3)
    assert engine.memory.memory_allocated() == before
    assert w[0, 0].item() == 3 and not d.requires_grad
    assert d.data_ptr() == w.data_ptr()
    del w
    assert engine.memory.memory_allocated() == before  # d keeps the memory alive
    del d
    assert engine.memory.memory_allocated() == before - 64


@pytest.mark.torch
def test_data_matches_pytorch(torch):
    e, t = _saved_then_data_written(engine), _saved_then_data_written(torch)
    np.testing.assert_array_equal(e.grad.numpy(), t.grad.numpy())
    assert e._version == t._version
