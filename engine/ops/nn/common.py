"""Helpers shared by the nn primitives (engine/ops/nn/*.py)."""

from __future__ import annotations

import math

import numpy as np

from engine import kernels
from engine.autograd.function import Function
from engine.ops.views import view_array
from engine.tensor import Tensor

_SCRATCH = kernels.SCRATCH_ELEMS
_BLOCK = kernels.POOL_BLOCK  # flat blocks on the pool


def _live(dev) -> bool:
    """True when the device holds values (meta tensors only have shapes)."""
    return dev.type != "meta"


def _needs(node: Function) -> tuple[bool, ...]:
    """Which tensor arguments of a recorded call want a gradient."""
    return tuple(e is not None for e in node._edges)


def _batched(arr, ndim: int):
    """An unbatched array (one dim short of `ndim`) as a batch of one (a view); a batched one
    as it is."""
    return arr if arr.ndim == ndim else arr[None]


def _reshaped(t: Tensor, shape):
    """t's array viewed as `shape`; a charged contiguous copy when the strides forbid a view.

    Returns (array, owner): keep `owner` alive while the array is in use.
    """
    arr = view_array(t, tuple(shape))
    if arr is not None:
        return arr, t
    c = kernels.copy_new(t)
    return c._data.reshape(shape), c


def _dense(t: Tensor, shape):
    """Like _reshaped, but also copies broadcast (zero-stride) arrays, which BLAS cannot read."""
    arr, owner = _reshaped(t, shape)
    if type(arr) is np.ndarray and 0 in arr.strides and arr.size > 1:
        owner = kernels.copy_new(t)
        arr = owner._data.reshape(shape)
    return arr, owner


def _blas_operand(t: Tensor, arr):
    """(array, owner): `arr` (a view of t) as a BLAS product reads it: a broadcast (zero-stride)
    one copied first, as torch's CPU mm copies an operand BLAS cannot read, after allocating the
    product's result and freed once it is made (each product its own copy). Keep `owner` alive
    while using the array."""
    if type(arr) is np.ndarray and 0 in arr.strides and arr.size > 1:
        owner = kernels.copy_new(t)
        return owner._data.reshape(arr.shape), owner
    return arr, None


def _first_element(arr):
    """A 0-d view of an array's first element (numpy, cupy and meta)."""
    return arr[(0,) * arr.ndim + (Ellipsis,)]


def _work(shape, dtype, dev):
    """(array, owner) for scratch: small arrays (<= SCRATCH_ELEMS) are plain and not charged,
    bigger ones come from the tracked allocator. Keep `owner` alive while using the array."""
    if math.prod(shape) <= _SCRATCH:
        return kernels.xp_of_device(dev).empty(shape, dtype=dtype.np), None
    t = kernels.empty(shape, dtype, dev)
    return t._data, t


def _pair(v, name="value"):
    if isinstance(v, (tuple, list)):
        if len(v) == 1:
            return (int(v[0]), int(v[0]))
        if len(v) != 2:
            raise ValueError(f"{name} must be an int or a pair of ints, got {v!r}")
        return (int(v[0]), int(v[1]))
    return (int(v), int(v))


def _span(n_out: int, stride: int, pad: int, offset: int, size: int):
    """Outputs o in [lo, hi) whose input index o*stride - pad + offset lies in [0, size).

    Returns (lo, hi, first) where `first` is the input index of output lo. Windows that hang over
    the padding are handled by clipping instead of materialising a padded copy of the input.
    """
    start = offset - pad
    lo = 0 if start >= 0 else (-start + stride - 1) // stride
    hi = (size - 1 - start) // stride + 1 if size - 1 - start >= 0 else 0
    hi = max(min(hi, n_out), lo)
    return lo, hi, lo * stride + start


def _sl(first: int, count: int, stride: int) -> slice:
    return slice(first, first + (count - 1) * stride + 1, stride)


def _same_dtype(opname: str, *tensors) -> None:
    """linear/conv2d need one dtype, as in PyTorch (no silent casts through hidden copies)."""
    first = tensors[0]._dtype
    for t in tensors[1:]:
        if t is not None and t._dtype is not first:
            a = first.scalar_name
            b = t._dtype.scalar_name
            raise RuntimeError(
                f"{opname}: expected all inputs to have the same dtype, but got {a} and {b}"
            )


def _blocked(func, out, *arrays) -> bool:
    """func(out_chunk, *chunks, scratch) over flat chunks with one small scratch per thread
    (work of one block on one thread: func(out, *arrays, scratch) once, as they are).

    Only for C-contiguous arrays of out's shape (numpy); returns False when it does not apply.
    """
    if type(out) is not np.ndarray or not out.flags.c_contiguous:
        return False
    for a in arrays:
        if isinstance(a, np.ndarray) and (a.shape != out.shape or not a.flags.c_contiguous):
            return False
    n = out.size
    threads = kernels.pool_threads(n)
    if threads == 1 and n <= _BLOCK:  # one block: as is, without flattening or a part
        func(out, *arrays, np.empty_like(out))
        return True
    fo = out.reshape(-1)
    flats = [a.reshape(-1) if isinstance(a, np.ndarray) else a for a in arrays]

    def part(bounds):
        lo, hi = bounds
        scratch = np.empty(min(_BLOCK, max(hi - lo, 1)), dtype=fo.dtype)
        for i in range(lo, hi, _BLOCK):
            j = min(i + _BLOCK, hi)
            func(
                fo[i:j],
                *[f[i:j] if isinstance(f, np.ndarray) else f for f in flats],
                scratch[: j - i],
            )

    if threads > 1:
        per = -(-n // threads)
        list(kernels._get_pool().map(part, [(i, min(i + per, n)) for i in range(0, n, per)]))
    else:
        part((0, n))
    return True


# ---------------------------------------------------------------------------------------------
# ATen's C++ composites' scalar arithmetic (torch's own composites call these, not Python's
# operators, and their nodes are named for it)
# ---------------------------------------------------------------------------------------------
_SCALAR_UFUNC = {"add": "add", "sub": "subtract", "mul": "multiply", "div": "divide"}
_SCALAR_NODE = {
    "add": "AddBackward1",
    "sub": "SubBackward1",
    "mul": "MulBackward1",
    "div": "DivBackward1",
}


class _ScalarOp(Function):
    """tensor (+ - * /) number as ATen's C++ composites write them (add.Scalar, sub.Scalar,
    mul.Scalar, div.Scalar): torch's AddBackward1 / SubBackward1 (the gradient passed on as it
    is), MulBackward1 / DivBackward1 (the gradient times / over the number: one new block).
    (Python's `t + 0.5` wraps the number in a tensor: AddBackward0, the engine's operators.)"""

    def forward(self, x, out=None, kind="add", value=0.0):
        self.kind, self.value = kind, value
        y = kernels.empty(tuple(x.shape), x._dtype, x._device)
        if _live(x._device):
            xp = kernels.xp_of(x)
            getattr(xp, _SCALAR_UFUNC[kind])(x._data, value, out=y._data, casting="unsafe")
        return y

    def backward(self, g):
        if self.kind == "mul":
            return (g * self.value,)
        if self.kind == "div":
            return (g / self.value,)
        return (g,)

    def name(self):
        return _SCALAR_NODE[self.kind]


def add_scalar(t: Tensor, value) -> Tensor:
    """C++'s `t + number` (AddBackward1)."""
    return _ScalarOp.apply(t, op="add", kind="add", value=float(value))


def sub_scalar(t: Tensor, value) -> Tensor:
    """C++'s `t - number` (SubBackward1)."""
    return _ScalarOp.apply(t, op="sub", kind="sub", value=float(value))


def mul_scalar(t: Tensor, value) -> Tensor:
    """C++'s `t * number` or `number * t` (MulBackward1)."""
    return _ScalarOp.apply(t, op="mul", kind="mul", value=value)


def div_scalar(t: Tensor, value) -> Tensor:
    """C++'s `t / number` (DivBackward1)."""
    return _ScalarOp.apply(t, op="div", kind="div", value=value)


def rsub_scalar(value, t: Tensor) -> Tensor:
    """C++'s `number - t`: a tensor filled with the number, t subtracted in place
    (SubBackward0; Python's `number - t` is torch's rsub, RsubBackward1)."""
    from engine import creation

    return creation.full_like(t, float(value)).sub_(t)
