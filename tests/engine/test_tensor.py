"""Tensors: creation, dtypes, devices, metadata, values, repr, and bad input."""

from __future__ import annotations

import numpy as np
import pytest

import engine
from engine.device import cuda_available
from tests.conftest import ALL_DEVICES, DATA_DEVICES

DTYPES = ["float16", "float32", "float64", "int32", "int64", "bool"]


# ---------------------------------------------------------------------------------------------
# creation
@pytest.mark.parametrize("device", ALL_DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_creation_functions_give_shape_dtype_device(dtype, device):
    dt = getattr(engine, dtype if dtype != "bool" else "bool_")
    for make in (engine.zeros, engine.ones, engine.empty):
        t = make(2, 3, dtype=dt, device=device)
        assert t.shape == (2, 3) and t.dtype is dt and t.device == engine.device(device)
        assert t.ndim == 2 and t.numel() == 6 and t.dim() == 2
    t = engine.full((2, 3), 1, dtype=dt, device=device)
    assert t.dtype is dt
    assert engine.zeros((4,), dtype=dtype, device=device).shape == (4,)
    like = engine.zeros_like(t)
    assert like.shape == t.shape and like.dtype is dt and like.device == t.device


@pytest.mark.parametrize("device", DATA_DEVICES)
def test_creation_values(device):
    assert engine.zeros(2, 2, device=device).tolist() == [[0, 0], [0, 0]]
    assert engine.ones(3, device=device).tolist() == [1, 1, 1]
    assert engine.full((2,), 7.5, device=device).tolist() == [7.5, 7.5]
    assert engine.full((2,), 7).dtype is engine.int64
    assert engine.full((2,), 7.0).dtype is engine.float32
    assert engine.full((2,), True).dtype is engine.bool_
    assert engine.arange(5, device=device).tolist() == [0, 1, 2, 3, 4]
    assert engine.arange(5).dtype is engine.int64
    assert engine.arange(1, 2, 0.25).tolist() == [1.0, 1.25, 1.5, 1.75]
    assert engine.arange(1, 2, 0.25).dtype is engine.float32
    assert engine.arange(5, 0, -2).tolist() == [5, 3, 1]
    assert engine.ones_like(engine.zeros(2, dtype=engine.int32)).tolist() == [1, 1]
    assert engine.full_like(engine.zeros(2), 3).tolist() == [3.0, 3.0]


def test_size_as_tuple_or_varargs_and_zero_sizes():
    assert engine.zeros((2, 3)).shape == engine.zeros(2, 3).shape == engine.zeros([2, 3]).shape
    assert engine.zeros(()).shape == ()
    assert engine.zeros(0, 3).numel() == 0
    with pytest.raises(RuntimeError, match=r"negative dimension -1: \[2, -1\]"):
        engine.zeros(2, -1)


def test_tensor_infers_dtypes_like_torch(torch):
    for data in (
        [1, 2],
        [1.0, 2],
        [True, False],
        3,
        2.5,
        True,
        [[1, 2], [3, 4]],
        np.array([1, 2], dtype=np.int32),
        np.array([1.0], dtype=np.float64),
        np.float16(1.5),
    ):
        t, tt = engine.tensor(data), torch.tensor(data)
        assert str(t.dtype) == str(tt.dtype).replace("torch", "engine"), data
        assert t.shape == tuple(tt.shape)
        np.testing.assert_array_equal(t.numpy(), tt.numpy())


def test_tensor_copies_its_input():
    a = np.ones(3, dtype=np.float32)
    t = engine.tensor(a)
    a[0] = 5
    assert t.tolist() == [1, 1, 1]
    u = engine.tensor(t)
    t.add_(1)
    assert u.tolist() == [1, 1, 1]


def test_tensor_with_dtype_casts():
    assert engine.tensor([1.7, -1.7], dtype=engine.int64).tolist() == [1, -1]
    assert engine.tensor([1, 2], dtype="float64").dtype is engine.float64


def test_ragged_input_raises():
    with pytest.raises((ValueError, TypeError), match="ragged|can't make a tensor"):
        engine.tensor([[1, 2], [3]])


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_rand_and_randn(device):
    engine.manual_seed(3)
    a = engine.rand(1000, device=device)
    assert a.dtype is engine.float32 and a.shape == (1000,)
    if device == "cpu":
        v = a.numpy()
        assert v.min() >= 0 and v.max() < 1
        n = engine.randn(10000).numpy()
        assert abs(n.mean()) < 0.05 and abs(n.std() - 1) < 0.05
        engine.manual_seed(3)
        assert (engine.rand(1000).numpy() == v).all()
        assert engine.rand(3, dtype=engine.float64).dtype is engine.float64
        assert engine.randn_like(a).shape == a.shape and engine.rand_like(a).shape == a.shape


def test_rand_of_int_dtype_raises():
    with pytest.raises(RuntimeError, match="not implemented for 'Long'"):
        engine.rand(3, dtype=engine.int64)


# ---------------------------------------------------------------------------------------------
# dtypes and devices
def test_dtype_names_and_aliases():
    assert engine.float is engine.float32 and engine.double is engine.float64
    assert (
        engine.half is engine.float16 and engine.long is engine.int64 and engine.int is engine.int32
    )
    assert engine.bool is engine.bool_
    assert repr(engine.float32) == "engine.float32"
    assert engine.float32.itemsize == 4 and engine.float32.is_floating_point


@pytest.mark.parametrize("bad", ["float33", "torch.complex64", "cfloat"])
def test_unknown_dtype_names_the_value(bad):
    with pytest.raises(TypeError, match=bad):
        engine.zeros(2, dtype=bad)


def test_unsupported_numpy_dtype_names_it():
    with pytest.raises(TypeError, match="complex128"):
        engine.from_numpy(np.zeros(2, dtype=np.complex128))


@pytest.mark.parametrize("bad", ["tpu", "cuda:x", "cpux"])
def test_unknown_device_names_the_value(bad):
    with pytest.raises(ValueError, match=bad):
        engine.zeros(2, device=bad)
    with pytest.raises(ValueError, match=bad):
        engine.device(bad)


def test_device_spellings():
    assert engine.device("gpu") == engine.device("cuda") == engine.device("cuda:0")
    assert engine.device("CPU") == "cpu"
    assert str(engine.device("cuda", 1)) == "cuda:1"
    assert engine.zeros(1, device="meta").device == "meta"
    assert engine.zeros(1).is_meta is False and engine.zeros(1, device="meta").is_meta


@pytest.mark.skipif(cuda_available(), reason="a GPU is present")
def test_cuda_without_a_gpu_raises_clearly():
    with pytest.raises(RuntimeError, match="cuda"):
        engine.zeros(2, device="cuda")


def test_set_default_dtype():
    engine.set_default_dtype(engine.float64)
    assert engine.tensor([1.5]).dtype is engine.float64
    assert engine.zeros(2).dtype is engine.float64
    assert (engine.tensor([1, 2]) / 2).dtype is engine.float64
    with pytest.raises(TypeError, match="floating-point"):
        engine.set_default_dtype(engine.int64)


# ---------------------------------------------------------------------------------------------
# metadata and values
def test_metadata():
    t = engine.zeros(2, 3, 4)
    assert t.size() == (2, 3, 4) and t.size(1) == 3 and t.size(-1) == 4
    assert t.stride() == (12, 4, 1) and t.stride(0) == 12
    assert t.is_contiguous() and t.element_size() == 4 and t.nbytes == 96
    assert t.transpose(0, 2).stride() == (1, 4, 12) and not t.transpose(0, 2).is_contiguous()
    assert t[1].storage_offset() == 12
    assert len(t) == 2
    assert t.is_floating_point() and not engine.zeros(1, dtype=engine.int64).is_floating_point()
    with pytest.raises(
        IndexError,
        match=r"Dimension out of range \(expected to be in range of \[-3, 2\], but got 3\)",
    ):
        t.size(3)


def test_item_and_conversions():
    assert engine.tensor(2.5).item() == 2.5
    assert engine.tensor([[7]]).item() == 7
    assert isinstance(engine.tensor([3]).item(), int)
    assert float(engine.tensor(1.5)) == 1.5 and int(engine.tensor(3)) == 3
    assert bool(engine.tensor([True]))
    assert [1, 2, 3][engine.tensor(1)] == 2
    with pytest.raises(
        RuntimeError, match="a Tensor with 2 elements cannot be converted to Scalar"
    ):
        engine.tensor([1, 2]).item()
    with pytest.raises(RuntimeError, match="ambiguous"):
        bool(engine.tensor([1, 2]))
    with pytest.raises(TypeError, match="0-d"):
        len(engine.tensor(1.0))


def test_iteration_yields_rows():
    rows = list(engine.tensor([[1, 2], [3, 4]]))
    assert [r.tolist() for r in rows] == [[1, 2], [3, 4]]


def test_numpy_of_a_tensor_that_requires_grad_raises():
    t = engine.ones(2, requires_grad=True)
    with pytest.raises(RuntimeError, match=r"detach\(\).numpy\(\)"):
        t.numpy()
    assert t.detach().numpy().tolist() == [1, 1]


def test_to_changes_dtype_and_returns_self_when_nothing_changes():
    t = engine.tensor([1.5, 2.5])
    assert t.to(engine.float32) is t
    assert t.to(engine.int64).tolist() == [1, 2]
    assert t.double().dtype is engine.float64 and t.half().dtype is engine.float16
    assert t.long().dtype is engine.int64 and t.int().dtype is engine.int32
    assert t.bool().tolist() == [True, True]
    assert t.to("meta").device == "meta" and t.to("meta").shape == (2,)
    assert t.to(dtype="float64", device="cpu").dtype is engine.float64
    assert t.cpu() is t
    with pytest.raises(RuntimeError, match="meta"):
        engine.zeros(2, device="meta").to("cpu")


def test_repr_like_torch(torch):
    for make in (
        lambda m: m.tensor([1.0, 2.0]),
        lambda m: m.tensor([1, 2]),
        lambda m: m.tensor(3.5),
        lambda m: m.tensor([[1.123456, 2.0], [3.0, 4.0]]),
        lambda m: m.tensor([1.0, 2.0], dtype=m.float64),
        lambda m: m.tensor([1, 2], dtype=m.int32),
        lambda m: m.zeros(2, 3, device="meta"),
        lambda m: m.tensor([1.0, 2.0], requires_grad=True) * 2,
        lambda m: m.tensor([1.0, 2.0], requires_grad=True),
        lambda m: m.tensor([1e-5, 1.0]),
    ):
        assert repr(make(engine)) == repr(make(torch)).replace("torch.", "engine.")


def test_tensor_constructor_is_not_public():
    with pytest.raises(TypeError, match="engine.tensor"):
        engine.Tensor([1, 2])


def test_hash_is_identity_and_eq_is_elementwise():
    a = engine.tensor([1, 2])
    assert {a: 1}[a] == 1
    assert (a == engine.tensor([1, 3])).tolist() == [True, False]
