"""torch.tensordot as torch's composite (aten/native/Linear.cpp): size-1 contracted dims summed
away first, both operands permuted and reshaped to matrices (a copy only where the permuted
operand cannot be viewed), one mm, the result reshaped; so its nodes (ViewBackward0,
MmBackward0, ...) and blocks are torch's."""

from __future__ import annotations

import math

from engine.ops.registry import Scenario, register
from engine.tensor import Tensor, _wrap_dim


def _reshape(t, shape):
    """at::reshape: a view when the strides allow, else a contiguous clone _unsafe_view'd
    (CloneBackward0, UnsafeViewBackward0)."""
    from engine.ops import clone
    from engine.ops import views as V
    from engine.ops.composites import _unsafe_view

    if V.view_array(t, shape) is not None:
        return t.view(*shape)
    return _unsafe_view(clone(t), shape)


def _dims_lists(a, b, dims):
    """torch.functional.tensordot's reading of `dims`: an int n (the last n dims of a with the
    first n of b), a pair of lists, or a tensor of either."""
    if isinstance(dims, Tensor):
        if dims.numel() > 1:
            if dims.shape[0] != 2:
                raise AssertionError(
                    f"dims tensor must have size 2 in first dimension, got {dims.shape[0]}"
                )
            return [int(v) for v in dims[0].tolist()], [int(v) for v in dims[1].tolist()]
        n = int(dims.item())
        if n < 0:
            raise RuntimeError(f"tensordot expects dims >= 0, but got dims={dims}")
        return list(range(-n, 0)), list(range(n))
    if isinstance(dims, bool) or not isinstance(dims, (tuple, list, int)):
        raise RuntimeError(
            "tensordot expects dims to be int or tuple[list[int], list[int]] or list[list[int]] "
            f"containing two lists, but got dims={dims}"
        )
    if isinstance(dims, int):
        if dims < 0:
            raise RuntimeError(f"tensordot expects dims >= 0, but got dims={dims}")
        if dims > min(a.ndim, b.ndim):
            raise RuntimeError(f"tensordot expects dims < ndim_a or ndim_b, but got dims={dims}")
        return list(range(-dims, 0)), list(range(dims))
    dims_a, dims_b = dims
    dims_a = [dims_a] if isinstance(dims_a, int) else list(dims_a)
    dims_b = [dims_b] if isinstance(dims_b, int) else list(dims_b)
    return dims_a, dims_b


def tensordot(a, b, dims=2, out=None):
    """Contract a's dims `dims[0]` with b's `dims[1]` (an int n: a's last n with b's first n).

    >>> engine.tensordot(engine.ones(3, 4, 5), engine.ones(4, 5, 6)).shape
    (3, 6)
    """
    from engine.ops import matmul

    if out is not None:
        raise NotImplementedError("tensordot: out= is not supported")
    dims1, dims2 = _dims_lists(a, b, dims)
    if len(dims1) != len(dims2):
        raise RuntimeError("both dimension lists should have same length")
    if a._dtype != b._dtype:
        raise RuntimeError("both inputs should have same dtype")
    csize = 1
    t1, t2 = a, b
    for d1, d2 in zip(dims1, dims2, strict=True):
        s1, s2 = a.shape[d1], b.shape[d2]
        if s2 == 1:  # broadcast dims are summed right away
            t1 = t1.sum(d1, keepdim=True)
        elif s1 == 1:
            t2 = t2.sum(d2, keepdim=True)
        else:
            if s1 != s2:
                raise RuntimeError(
                    f"contracted dimensions need to match, but first has size {s1} in dim {d1} "
                    f"and second has size {s2} in dim {d2}"
                )
            csize *= s1
    c1 = {_wrap_dim(d, a.ndim) for d in dims1}
    c2 = {_wrap_dim(d, b.ndim) for d in dims2}
    p1 = [i for i in range(a.ndim) if i not in c1] + [_wrap_dim(d, a.ndim) for d in dims1]
    p2 = [_wrap_dim(d, b.ndim) for d in dims2] + [i for i in range(b.ndim) if i not in c2]
    rsizes = [t1.shape[i] for i in range(a.ndim) if i not in c1]
    rsizes += [t2.shape[i] for i in range(b.ndim) if i not in c2]
    size1, size2 = math.prod(rsizes[: a.ndim - len(c1)]), math.prod(rsizes[a.ndim - len(c1) :])
    m1 = _reshape(t1.permute(*p1), (size1, csize))
    m2 = _reshape(t2.permute(*p2), (csize, size2))
    return _reshape(matmul(m1, m2), tuple(rsizes))


register(
    "tensordot",
    tensordot,
    scenario=Scenario(
        inputs=("a", "b"),
        args=(("dims", int, 2, "contract a's last `dims` dims with b's first"),),
        doc="torch.tensordot (permute, reshape, mm, reshape)",
    ),
)
