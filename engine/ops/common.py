"""Shared helpers for op forwards: type promotion, result buffers, in-place checks, sum_to."""

from __future__ import annotations

import numpy as np

from engine import dtypes, kernels
from engine.backends import cuda_reduce
from engine.tensor import Tensor

_CAT = {}
for _d in dtypes.ALL:
    _CAT[_d] = 0 if _d is dtypes.bool_ else (2 if _d.is_floating_point else 1)


def _promote_pair(a, b):
    if a is b:
        return a
    ca, cb = _CAT[a], _CAT[b]
    if ca != cb:
        return a if ca > cb else b
    return dtypes.from_numpy_dtype(np.promote_types(a.np, b.np))


def _scalar_category(value) -> int:
    """0 bool, 1 integer, 2 floating (Python or numpy scalars)."""
    if value.__class__ is float:  # the common case first
        return 2
    if isinstance(value, (bool, np.bool_)):
        return 0
    if isinstance(value, (int, np.integer)):
        return 1
    return 2


def result_type(*args) -> dtypes.dtype:
    """PyTorch's promotion: dimensioned tensors, then 0-d tensors, then Python scalars by category."""
    dim_dt = zero_dt = None
    scalar_cat = -1
    for a in args:
        if isinstance(a, Tensor):
            if a._data.ndim:
                dim_dt = a._dtype if dim_dt is None else _promote_pair(dim_dt, a._dtype)
            else:
                zero_dt = a._dtype if zero_dt is None else _promote_pair(zero_dt, a._dtype)
        elif a is not None:
            scalar_cat = max(scalar_cat, _scalar_category(a))
    result = dim_dt
    if zero_dt is not None:
        if result is None or _CAT[zero_dt] > _CAT[result]:
            result = zero_dt if result is None or _CAT[zero_dt] > _CAT[result] else result
    if result is None:
        return {0: dtypes.bool_, 1: dtypes.int64, 2: dtypes.get_default_dtype()}[max(scalar_cat, 0)]
    if scalar_cat > _CAT[result]:
        result = dtypes.get_default_dtype() if scalar_cat == 2 else dtypes.int64
    return result


def scalar_result_type(dtype: dtypes.dtype, value) -> dtypes.dtype:
    """result_type(tensor of `dtype`, Python scalar `value`): the scalar only lifts the category."""
    c = _scalar_category(value)
    if c > _CAT[dtype]:
        return dtypes.get_default_dtype() if c == 2 else dtypes.int64
    return dtype


def device_of(*args):
    dev = None
    for a in args:
        if isinstance(a, Tensor):
            if dev is None:
                dev = a._device
            elif a._device != dev and a._data.ndim:
                raise RuntimeError(
                    "Expected all tensors to be on the same device, but found at least two "
                    f"devices, {dev} and {a._device}!"
                )
    return dev


def data(a):
    return a._data if isinstance(a, Tensor) else a


def check_out(out: Tensor, shape, dtype, opname: str, inputs=()) -> None:
    """An in-place / out= result must broadcast into `out` and be castable to its dtype.

    `inputs`: the operands' shapes, named in the error beside the output's.
    """
    if tuple(out.shape) != tuple(shape):
        try:
            ok = np.broadcast_shapes(out.shape, shape) == tuple(out.shape)
        except ValueError:
            ok = False
        if not ok:
            of = ""
            if inputs:
                of = " of the inputs' shapes " + " and ".join(str(list(s)) for s in inputs)
            raise RuntimeError(
                f"{opname}: output with shape {list(out.shape)} doesn't match the broadcast shape "
                f"{list(shape)}{of}"
            )
    if _CAT[dtype] > _CAT[out._dtype]:
        raise RuntimeError(
            f"{opname}: result type {dtype.scalar_name} can't be cast "
            f"to the desired output type {out._dtype.scalar_name}"
        )


def broadcast_shape(a, b, opname: str):
    sa = a.shape if isinstance(a, Tensor) else ()
    sb = b.shape if isinstance(b, Tensor) else ()
    if sa == sb:
        return sa
    try:
        return np.broadcast_shapes(sa, sb)
    except ValueError:
        raise RuntimeError(
            f"{opname}: the size of tensor a {list(sa)} must match the size of tensor b {list(sb)} "
            "at a non-singleton dimension (shapes cannot be broadcast together)"
        ) from None


def broadcast_shapes(opname: str, *shapes):
    """np.broadcast_shapes with an error naming every shape."""
    try:
        return np.broadcast_shapes(*shapes)
    except ValueError:
        named = ", ".join(str(list(s)) for s in shapes)
        raise RuntimeError(f"{opname}: shapes {named} cannot be broadcast together") from None


def result_buffer(out, shape, dtype, device, opname, inputs=()):
    """A new result tensor, or `out` after checking the result fits in it (shape and dtype)."""
    if out is None:
        return kernels.empty(shape, dtype, device)
    check_out(out, shape, dtype, opname, inputs)
    return out


def sum_to(g: Tensor, shape) -> Tensor:
    """Reduce a broadcast gradient back to `shape` (one allocation, or none when equal)."""
    shape = tuple(shape)
    if g.shape == shape:
        return g
    lead = g.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(
        lead + i for i, n in enumerate(shape) if n == 1 and g.shape[lead + i] != 1
    )
    out = kernels.empty(shape, g._dtype, g._device)
    if g._device.type != "meta":
        xp = kernels.xp_of(g)
        reduced = tuple(n for i, n in enumerate(g.shape) if i not in axes)
        xp.sum(g._data, axis=axes, out=out._data.reshape(reduced))
    cuda_reduce.charge(g._device, g._data, axes)  # torch's global-reduce staging on a GPU
    return out


def cast_copy(x: Tensor, dtype):
    """torch's CPU TensorIterator computes on a temporary copy, in its dtype, of an input whose
    dtype is not the one the op computes in (`op.tensor().to(common_dtype)`, laid out as the
    input): elementwise ops make it before their result (elementwise._promoted), reductions and
    scans after theirs (bool.sum() in int64, float32.sum(dtype=float64), int32.cumsum()); freed
    when the op returns. CUDA's kernels cast as they load, and meta plans a GPU run: no copy
    there. Returns the array to compute on and the copy (None when there is none), to hold
    until the op returns."""
    xd = x._data
    if x._dtype is dtype or x._device.type != "cpu":
        return xd, None
    c = kernels.empty_for(xd.shape, dtype, x._device, xd)
    np.copyto(c._data, xd, casting="unsafe")
    if dtype.emulated:
        dtypes.round_to_bfloat16_(c._data)
    return c._data, c


def scan_into(x: Tensor, y: Tensor, dim: int, dtype, name: str) -> None:
    """y = the running `name` ("cumsum", "cumprod") of x along dim, in y's dtype: a 0-d x
    copied as it is; an input of another dtype through its cast_copy (made after y); bfloat16
    rounded. Nothing on meta."""
    if x._device.type == "meta":
        return
    if not x.ndim:
        y._data[...] = x._data
    else:
        xd, copy = cast_copy(x, dtype)
        xp, yd = kernels.xp_of(x), y._data
        if xp is np and yd.dtype.kind == "f":
            # torch's cpu kernel: a running value in double from 0 (cumsum) or 1 (cumprod),
            # each step rounded to the result's dtype: float32's sums are float64's rounded,
            # and a cumsum is never -0.0 (0 + -0.0 is +0.0; numpy starts from the first value)
            run = getattr(np, name)(xd, axis=dim, dtype=np.float64)
            if name == "cumsum":
                run += 0.0
            np.copyto(yd, run, casting="same_kind")
        else:
            getattr(xp, name)(xd, axis=dim, dtype=yd.dtype, out=yd)
        del copy
    if dtype.emulated:
        dtypes.round_to_bfloat16_(y._data)


def infer_size(a, b) -> tuple:
    """torch's infer_size: the broadcast shape, or its error (naming the first dim that clashes
    counted from the right)."""
    n = max(len(a), len(b))
    out = []
    for i in range(n - 1, -1, -1):
        da = a[i - n + len(a)] if i - n + len(a) >= 0 else 1
        db = b[i - n + len(b)] if i - n + len(b) >= 0 else 1
        if da != db and da != 1 and db != 1:
            raise RuntimeError(
                f"The size of tensor a ({da}) must match the size of tensor b ({db}) at "
                f"non-singleton dimension {i}"
            )
        out.append(da if db == 1 else db)
    return tuple(reversed(out))
