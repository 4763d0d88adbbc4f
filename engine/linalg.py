"""torch.linalg for the engine: the norms, vecdot, cross, matmul, diagonal and multi_dot, built
as torch builds them so that their nodes and blocks are torch's.

`vector_norm` is one node (LinalgVectorNormBackward0; with `dtype` its kernel reads a cast copy
of the input, freed before it returns, and the node keeps the input as given, as torch's); `matrix_norm` is torch's composite (ord 'fro': one vector norm
over both dims; ord +-1 / +-inf: a 1-norm over one dim, then amax / amin over the other);
`norm` dispatches between the two as torch's `linalg_norm`. Orders that need an SVD (2, -2,
'nuc') are refused with NotImplementedError.
"""

from __future__ import annotations

import math

from engine import kernels
from engine.ops import reduce as R
from engine.ops.common import result_buffer
from engine.tensor import _wrap_dim

__all__ = [
    "cross",
    "diagonal",
    "matmul",
    "matrix_norm",
    "multi_dot",
    "norm",
    "vecdot",
    "vector_norm",
]

_SVD_ORDERS = (
    "linalg.matrix_norm: ord 2, -2 and 'nuc' need an SVD, which the engine does not have; "
)
_SVD_ORDERS += "supported: 'fro', 1, -1, inf, -inf"


def _ord_str(ord):  # noqa: A002 - torch's name
    """A Scalar as torch's message prints it: 3, 2.5, inf."""
    f = float(ord)
    if math.isinf(f):
        return "inf" if f > 0 else "-inf"
    return str(int(f)) if f == int(f) and not isinstance(ord, float) else repr(f)


def _check_norm_dtype(dtype, self_dtype, name):
    """torch's check_linalg_norm_dtype."""
    if dtype is None:
        return
    if not dtype.is_floating_point:
        raise RuntimeError(
            f"{name}: dtype should be floating point or complex, but got {dtype.scalar_name}"
        )
    if dtype != self_dtype and (
        not self_dtype.is_floating_point or dtype.itemsize <= self_dtype.itemsize
    ):  # promote_types(self, dtype) != dtype, among floats
        raise RuntimeError(
            f"{name}: the dtype of the input ({self_dtype.scalar_name}) should be convertible "
            f"without narrowing to the specified dtype ({dtype.scalar_name})"
        )


class LinalgVectorNorm(R.VectorNorm):
    """linalg.vector_norm's node (Tensor.norm's too): VectorNorm with torch's `dtype` (the kernel
    reads a cast copy of the input, made after the result and freed before it returns; the node
    keeps the input as given)."""

    def forward(self, x, out=None, ord=2.0, dim=None, keepdim=False, dtype=None):  # noqa: A002
        if dtype is None or dtype == x._dtype:
            return super().forward(x, out=out, ord=ord, dim=dim, keepdim=keepdim)
        dims = R.norm_dims(dim, x.ndim)
        y = result_buffer(out, R.reduced_shape(x.shape, dims, keepdim), dtype, x._device, "norm")
        cast = kernels.empty(x.shape, dtype, x._device)
        if x._device.type != "meta":
            cast._data[...] = x._data
        super().forward(cast, out=y, ord=ord, dim=dim, keepdim=keepdim)
        self.every_dim = dim is None or (not isinstance(dim, int) and len(dim) == 0)
        del cast
        return y


def vector_norm(x, ord=2, dim=None, keepdim=False, *, dtype=None, out=None):  # noqa: A002
    """The vector ord-norm of x over `dim` (every dim by default): ord 2, 1, inf, -inf, 0 or
    any other p; `dtype` widens the computation and the result.

    >>> engine.linalg.vector_norm(engine.tensor([3.0, 4.0]))
    tensor(5.)
    """
    if not x._dtype.is_floating_point:
        raise RuntimeError(
            "linalg.vector_norm: Expected a floating point or complex tensor as input. "
            f"Got {x._dtype.scalar_name}"
        )
    p = float(ord)
    if x.numel() == 0 and (p < 0.0 or p == math.inf):
        dims = () if dim is None else ((dim,) if isinstance(dim, int) else tuple(dim))
        if not dims:
            raise RuntimeError(
                f"linalg.vector_norm cannot compute the {_ord_str(ord)} norm on an empty tensor "
                "because the operation does not have an identity"
            )
        for d in dims:
            if x.shape[d] == 0:
                raise RuntimeError(
                    f"linalg.vector_norm cannot compute the {_ord_str(ord)} norm on the dimension "
                    f"{d}because this dimension is empty and the operation does not have an identity"
                )
    _check_norm_dtype(dtype, x._dtype, "linalg.vector_norm")
    return LinalgVectorNorm.apply(
        x, out=out, op="linalg_vector_norm", ord=p, dim=dim, keepdim=keepdim, dtype=dtype
    )


def _matrix_checks(A, dim, dtype, low_precision=True):
    """torch's _linalg_matrix_norm_checks: the wrapped dims."""
    if A.ndim < 2:
        raise RuntimeError(
            "linalg.matrix_norm: The input tensor A must have at least 2 dimensions."
        )
    if not A._dtype.is_floating_point or (not low_precision and A._dtype.itemsize < 4):
        raise RuntimeError(
            "linalg.matrix_norm: Expected a floating point or complex tensor as input. "
            f"Got {A._dtype.scalar_name}"
        )
    dim = list(dim)
    if len(dim) != 2:
        raise RuntimeError(
            f"linalg.matrix_norm: dim must be a 2-tuple. Got {' '.join(map(str, dim))}"
        )
    dim = [_wrap_dim(d, A.ndim) for d in dim]
    if dim[0] == dim[1]:
        raise RuntimeError(f"linalg.matrix_norm: dims must be different. Got ({dim[0]}, {dim[1]})")
    _check_norm_dtype(dtype, A._dtype, "linalg.matrix_norm")
    return dim


def matrix_norm(A, ord="fro", dim=(-2, -1), keepdim=False, *, dtype=None, out=None):  # noqa: A002
    """The matrix ord-norm over `dim`: 'fro', 1, -1, inf, -inf (2, -2 and 'nuc' refused)."""
    if out is not None:
        raise NotImplementedError("linalg.matrix_norm: out= is not supported")
    if isinstance(ord, str):
        if ord not in ("fro", "nuc"):
            raise RuntimeError(f"linalg.matrix_norm: Order {ord} not supported.")
        dim = _matrix_checks(A, dim, dtype, low_precision=ord != "nuc")
        if ord == "nuc":
            raise NotImplementedError(_SVD_ORDERS)
        return vector_norm(A, 2, dim, keepdim, dtype=dtype)
    p = float(ord)
    if abs(p) not in (1.0, 2.0, math.inf):
        raise RuntimeError(f"linalg.matrix_norm: Order {_ord_str(ord)} not supported.")
    dim = _matrix_checks(A, dim, dtype, low_precision=abs(p) != 2.0)
    if abs(p) == 2.0:
        raise NotImplementedError(_SVD_ORDERS)
    if math.isinf(p):  # the inf norm is the 1 norm of the transpose
        dim = dim[::-1]
    if not keepdim and dim[0] < dim[1]:
        dim[1] -= 1
    col = vector_norm(A, 1.0, (dim[0],), keepdim, dtype=dtype)
    return col.amax(dim[1], keepdim) if p > 0 else col.amin(dim[1], keepdim)


def norm(A, ord=None, dim=None, keepdim=False, *, dtype=None, out=None):  # noqa: A002
    """torch.linalg.norm: a matrix norm when ord is given and the reduction is over two dims
    (dim of length 2, or a 2-D input without dim), a vector norm otherwise."""
    if out is not None:
        raise NotImplementedError("linalg.norm: out= is not supported")
    if isinstance(dim, int):
        dim = (dim,)
    if isinstance(ord, str):
        if dim is not None:
            if len(dim) not in (1, 2):
                raise RuntimeError(
                    f"linalg.norm: If dim is specified, it mut be of length 1 or 2. Got {list(dim)}"
                )
        elif A.ndim not in (1, 2):
            raise RuntimeError(
                "linalg.norm: If dim is not specified but ord is, the input must be 1D or 2D. "
                f"Got {A.ndim}D."
            )
        return matrix_norm(A, ord, (0, 1) if dim is None else dim, keepdim, dtype=dtype)
    if dim is not None:
        if len(dim) not in (1, 2):
            raise RuntimeError(
                f"linalg.norm: If dim is specified, it must be of length 1 or 2. Got {list(dim)}"
            )
    elif ord is not None and A.ndim not in (1, 2):
        raise RuntimeError(
            "linalg.norm: If dim is not specified but ord is, the input must be 1D or 2D. "
            f"Got {A.ndim}D."
        )
    if ord is not None and ((dim is not None and len(dim) == 2) or (dim is None and A.ndim == 2)):
        return matrix_norm(A, ord, (0, 1) if dim is None else dim, keepdim, dtype=dtype)
    return vector_norm(A, 2.0 if ord is None else ord, dim, keepdim, dtype=dtype)


def vecdot(x, y, *, dim=-1, out=None):
    """sum(x * y, dim), torch's composite (MulBackward0, SumBackward1)."""
    if x._dtype != y._dtype:
        raise RuntimeError(
            "linalg.vecdot: Expected x and y to have the same dtype, but found x of type "
            f"{x._dtype.scalar_name} and y of type {y._dtype.scalar_name} instead"
        )
    if out is not None:
        raise NotImplementedError("linalg.vecdot: out= is not supported")
    return (x * y).sum(dim)


def cross(input, other, *, dim=-1, out=None):  # noqa: A002
    from engine.ops.composites import linalg_cross

    if out is not None:
        raise NotImplementedError("linalg.cross: out= is not supported")
    return linalg_cross(input, other, dim=dim)


def matmul(input, other, *, out=None):  # noqa: A002
    from engine.ops import matmul as _matmul

    return _matmul(input, other, out=out)


def diagonal(A, *, offset=0, dim1=-2, dim2=-1):
    return A.diagonal(offset, dim1, dim2)


def _chain_order(p):
    """torch's matrix_chain_order: s[i][j], where to split the product of matrices i..j."""
    n = len(p) - 1
    m = [[0] * n for _ in range(n)]
    s = [[0] * n for _ in range(n)]
    for length in range(1, n):
        for i in range(n - length):
            j = i + length
            m[i][j] = None
            for k in range(i, j):
                q = m[i][k] + m[k + 1][j] + p[i] * p[k + 1] * p[j + 1]
                if m[i][j] is None or q < m[i][j]:
                    m[i][j], s[i][j] = q, k
    return s


def _chain(ts, s, i, j, mm):
    if i == j:
        return ts[i]
    # C++ (gcc) evaluates at::mm's arguments right to left: the right factor is made first
    right = _chain(ts, s, s[i][j] + 1, j, mm)
    left = _chain(ts, s, i, s[i][j], mm)
    return mm(left, right)


def multi_dot(tensors, *, out=None):
    """The product of the matrices in the cheapest order (torch's choice: a direct comparison for
    three, the matrix-chain order for more); a 1-D first or last operand is a row or column
    vector and its dim is dropped from the result."""
    from engine.ops import matmul as mm

    if out is not None:
        raise NotImplementedError("linalg.multi_dot: out= is not supported")
    ts = list(tensors)
    n = len(ts)
    if n < 2:
        raise RuntimeError(f"multi_dot(): expected at least 2 tensors but got {n}")
    out_shape = []
    first, last = ts[0], ts[-1]
    if first.ndim == 1:
        ts[0] = first.unsqueeze(0)
    elif first.ndim == 2:
        out_shape.append(first.shape[0])
    else:
        raise RuntimeError(f"multi_dot(): the first tensor must be 1D or 2D but got {first.ndim}D")
    if last.ndim == 1:
        ts[-1] = last.unsqueeze(-1)
    elif last.ndim == 2:
        out_shape.append(last.shape[1])
    else:
        raise RuntimeError(f"multi_dot(): the last tensor must be 1D or 2D but got {last.ndim}D")
    for i in range(1, n - 1):
        if ts[i].ndim != 2:
            raise RuntimeError(f"multi_dot(): tensor {i} must be 2D but got {ts[i].ndim}D")
    for i in range(1, n):
        if ts[i]._dtype != ts[0]._dtype:
            raise RuntimeError(
                "multi_dot(): all tensors must have be the same dtype but tensor 0 is "
                f"{ts[0]._dtype} and tensor {i} {ts[i]._dtype}"
            )
        if ts[i - 1].shape[-1] != ts[i].shape[0]:
            raise RuntimeError(
                f"multi_dot(): tensors {i - 1} and {i} with shapes {list(tensors[i - 1].shape)} "
                f"and {list(tensors[i].shape)} cannot be multiplied"
            )
    if n == 2:
        r = mm(ts[0], ts[1])
    elif n == 3:
        a, b, c, d = ts[0].shape[0], ts[1].shape[0], ts[2].shape[0], ts[2].shape[1]
        if (a * c) * (b + d) > (b * d) * (a + c):
            r = mm(ts[0], mm(ts[1], ts[2]))
        else:
            r = mm(mm(ts[0], ts[1]), ts[2])
    else:
        p = [t.shape[0] for t in ts] + [ts[-1].shape[1]]
        r = _chain(ts, _chain_order(p), 0, n - 1, mm)
    return r.view(tuple(out_shape))
