"""Dtypes with PyTorch's names. Each wraps the numpy dtype used by the cpu/cuda/meta backends."""

from __future__ import annotations

import builtins

import numpy as np


class dtype:  # noqa: N801 - PyTorch's spelling
    """`np`: the numpy dtype values are held in; `itemsize`: the bytes one element is charged
    (they differ only for an emulated dtype: bfloat16 is held in float32, charged 2 bytes)."""

    __slots__ = (
        "name",
        "np",
        "itemsize",
        "is_floating_point",
        "is_signed",
        "torch_tensor_name",
        "scalar_name",
        "emulated",
        "_alone",
        "_paired",
    )

    def __init__(self, name: str, np_dtype, tensor_name: str, itemsize: int | None = None):
        self.name = name
        self.np = np.dtype(np_dtype)
        self.itemsize = self.np.itemsize if itemsize is None else itemsize
        self.is_floating_point = self.np.kind == "f"
        self.is_signed = self.np.kind in "fi"
        self.torch_tensor_name = tensor_name
        # torch's ScalarType name (Float, Long, BFloat16, ...), as its messages print it
        self.scalar_name = tensor_name.removesuffix("Tensor")
        self.emulated = itemsize is not None and itemsize != self.np.itemsize
        # (self,) and (self, self), shared: a node's input dtypes (autograd keeps one per node)
        self._alone = (self,)
        self._paired = (self, self)

    def __repr__(self) -> str:
        return f"engine.{self.name}"

    def __reduce__(self):
        return (from_any, (self.name,))


float16 = half = dtype("float16", np.float16, "HalfTensor")
float32 = float = dtype("float32", np.float32, "FloatTensor")
float64 = double = dtype("float64", np.float64, "DoubleTensor")
int32 = int = dtype("int32", np.int32, "IntTensor")
int64 = long = dtype("int64", np.int64, "LongTensor")
bool_ = dtype("bool", np.bool_, "BoolTensor")
uint8 = dtype("uint8", np.uint8, "ByteTensor")
# bfloat16: numpy (and CuPy) have no such type. Values are held in float32 and rounded to
# bfloat16 (round to nearest even) after every op and at creation, so they are bfloat16 values;
# each element is charged 2 bytes, as on a device with bfloat16. On meta only the bytes exist.
bfloat16 = dtype("bfloat16", np.float32, "BFloat16Tensor", itemsize=2)

ALL = (float16, bfloat16, float32, float64, int32, int64, bool_, uint8)
_BY_NP = {d.np: d for d in ALL if not d.emulated}
_BY_NAME = {d.name: d for d in ALL}
_BY_NAME.update(
    {
        "half": float16,
        "float": float32,
        "double": float64,
        "int": int32,
        "long": int64,
        "bool_": bool_,
    }
)

_default = float32


def get_default_dtype() -> dtype:
    return _default


def set_default_dtype(d) -> None:
    global _default
    d = from_any(d)
    if not d.is_floating_point:
        raise TypeError(f"only floating-point types are supported as the default type, got {d}")
    _default = d


def from_numpy_dtype(np_dtype) -> dtype:
    """The engine dtype for a numpy dtype; raises TypeError for unsupported ones."""
    try:
        return _BY_NP[np.dtype(np_dtype)]
    except (KeyError, TypeError):
        names = ", ".join(d.name for d in ALL)
        raise TypeError(f"unsupported dtype {np_dtype!r}; expected one of {names}") from None


def from_any(value) -> dtype:
    """Accept an engine dtype, a name ("float32"), a numpy dtype or Python type."""
    if isinstance(value, dtype):
        return value
    if value is None:
        return _default
    if isinstance(value, str):
        key = value.removeprefix("engine.").removeprefix("torch.")
        if key in _BY_NAME:
            return _BY_NAME[key]
        names = ", ".join(d.name for d in ALL)
        raise TypeError(f"unknown dtype {value!r}; expected one of {names}")
    if value is builtins.float:
        return _default
    if value is builtins.int:
        return int64
    if value is builtins.bool:
        return bool_
    return from_numpy_dtype(value)


def result_dtype_for_scalar(value) -> dtype:
    """The dtype a bare Python scalar gets when it becomes a tensor (torch.tensor(2.0) -> float32)."""
    if isinstance(value, builtins.bool):
        return bool_
    if isinstance(value, builtins.int):
        return int64
    return _default


def round_to_bfloat16_(arr) -> None:
    """Round a float32 array (numpy or CuPy, any strides) in place to bfloat16 values: round to
    nearest, ties to even, on the top 16 bits; nan stays nan, inf stays inf."""
    if arr.size == 0:
        return
    bits = arr.view(np.uint32)
    nan = arr != arr
    lsb = (bits >> 16) & 1
    bits += 0x7FFF + lsb
    bits &= 0xFFFF0000
    if nan.any():
        arr[nan] = np.nan
