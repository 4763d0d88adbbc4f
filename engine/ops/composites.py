"""Splitting and rearranging ops that torch builds from others, built here the same way (so
their nodes and blocks are torch's): tensor_split / hsplit / vsplit / dsplit (slices),
split_with_sizes, diff (slices and a subtraction, prepend / append concatenated first), rot90
(one node, Rot90Backward0: a flip laid out transposed), diagflat (view then diag), kron (views
of both operands multiplied, _unsafe_view'd back), linalg.cross / cross (LinalgCrossBackward0),
inner (tensordot: permute, view, mm or dot, view).
"""

from __future__ import annotations

import warnings

from engine import dtypes, kernels
from engine.autograd.function import Function, specialised_apply
from engine.ops.common import sum_to
from engine.ops.registry import register
from engine.ops.views import unsafe_view
from engine.tensor import Tensor, _wrap_dim


# ---------------------------------------------------------------------------------------------
# splitting
# ---------------------------------------------------------------------------------------------
def tensor_split(input, indices_or_sections, dim=0):
    """Pieces along dim as slices: `sections` nearly equal parts (the first n % sections one
    longer), or cut at the given indices."""
    d = _wrap_dim(dim, input.ndim)
    n = input.shape[d]
    if isinstance(indices_or_sections, Tensor):
        if indices_or_sections.ndim == 0:
            indices_or_sections = int(indices_or_sections.item())
        else:
            indices_or_sections = [int(v) for v in indices_or_sections.tolist()]
    if isinstance(indices_or_sections, int):
        sections = indices_or_sections
        if sections <= 0:
            raise RuntimeError(f"number of sections must be larger than 0, got {sections}")
        small, extra = divmod(n, sections)
        bounds, start = [], 0
        for i in range(sections):
            end = start + small + (1 if i < extra else 0)
            bounds.append((start, end))
            start = end
    else:
        bounds, start = [], 0  # slice semantics: negative indices wrap, ends clamp
        for c in list(indices_or_sections):
            bounds.append((start, c))
            start = c
        bounds.append((start, n))
    lead = (slice(None),) * d
    return tuple(input[lead + (slice(a, b),)] for a, b in bounds)


def _split_dim(name, dim, min_dims, input, sections):
    if input.ndim < min_dims:
        raise RuntimeError(
            f"torch.{name} requires a tensor with at least {min_dims} dimension, but got a "
            f"tensor with {input.ndim} dimensions!"
        )
    if isinstance(sections, int):
        size = input.shape[dim]
        if sections == 0 or size % sections:
            raise RuntimeError(
                f"torch.{name} attempted to split along dimension {dim}, but the size of the "
                f"dimension {size} is not divisible by the split_size {sections}!"
            )
    return tensor_split(input, sections, dim)


def hsplit(input, indices_or_sections):
    """tensor_split along dim 1 (dim 0 for a 1-D tensor); sections must divide it."""
    if input.ndim < 1:
        raise RuntimeError(
            "torch.hsplit requires a tensor with at least 1 dimension, but got a tensor with 0 "
            "dimensions!"
        )
    return _split_dim("hsplit", 1 if input.ndim > 1 else 0, 1, input, indices_or_sections)


def vsplit(input, indices_or_sections):
    """tensor_split along dim 0 of a tensor of 2 dims or more."""
    return _split_dim("vsplit", 0, 2, input, indices_or_sections)


def dsplit(input, indices_or_sections):
    """tensor_split along dim 2 of a tensor of 3 dims or more."""
    return _split_dim("dsplit", 2, 3, input, indices_or_sections)


def split_with_sizes(input, split_sizes, dim=0):
    """Pieces of the given sizes along dim (views; one SplitWithSizesBackward0 node)."""
    from engine.ops import split

    return split(input, list(split_sizes), dim)


# ---------------------------------------------------------------------------------------------
# diff, rot90, diagflat
# ---------------------------------------------------------------------------------------------
def diff(input, n=1, dim=-1, prepend=None, append=None):
    """n-th forward difference along dim: input[1:] - input[:-1] (logical_xor for bool)."""
    if input.ndim == 0:
        raise RuntimeError("diff expects input to be at least one-dimensional")
    if n < 0:
        raise RuntimeError(f"order must be non-negative but got {n}")
    from engine.ops.shape import cat

    d = _wrap_dim(dim, input.ndim)
    x = base = input  # base: the concatenation lives until the differences are made
    if prepend is not None or append is not None:
        parts = [t for t in (prepend, input, append) if t is not None]
        x = base = cat(parts, d)
    length = x.shape[d] - 1
    for _ in range(min(n, x.shape[d])):
        # ATen's at::sub(narrow(1), narrow(0)): the arguments are made right to left
        lo = x.narrow(d, 0, length)
        hi = x.narrow(d, 1, length)
        x = hi.logical_xor(lo) if x._dtype is dtypes.bool_ else hi - lo
        del lo, hi
        length -= 1
    del base
    return x


class Rot90(Function):
    """rot90(k, dims): one copy, the node Rot90Backward0; backward rotates the gradient back."""

    apply = specialised_apply(1)

    def forward(self, x, out=None, k=1, dims=(0, 1)):
        dims = tuple(dims)
        if len(dims) != 2:
            raise RuntimeError(f"expected total rotation dims == 2, but got dims = {len(dims)}")
        if x.ndim < 2:
            raise RuntimeError(f"expected total dims >= 2, but got total dims = {x.ndim}")
        d0, d1 = dims
        if _wrap_dim(d0, x.ndim) == _wrap_dim(d1, x.ndim):
            raise RuntimeError(
                f"expected rotation dims to be different, but got dim0 = {d0} and dim1 = {d1}"
            )
        self.k, self.dims = k, dims
        k %= 4
        shape = list(x.shape)
        if k % 2:
            a, b = d0 % x.ndim, d1 % x.ndim
            shape[a], shape[b] = shape[b], shape[a]
        y = kernels.empty(tuple(shape), x._dtype, x._device)
        if x._device.type != "meta":
            y._data[...] = kernels.xp_of(x).rot90(x._data, k, axes=(d0, d1))
        return y

    def backward(self, g):
        return (Rot90.apply(g, op="rot90", k=-self.k, dims=self.dims),)

    def name(self):
        return "Rot90Backward0"


def rot90(input, k=1, dims=(0, 1)):
    """Rotate by 90 degrees k times in the plane of dims (from the first towards the second)."""
    return Rot90.apply(input, op="rot90", k=k, dims=dims)


def diagflat(input, offset=0):
    """torch's composite: input.contiguous().view(-1).diag(offset)."""
    from engine.ops import diag

    return diag(input.contiguous().view(-1), offset)


# ---------------------------------------------------------------------------------------------
# kron, cross, inner
# ---------------------------------------------------------------------------------------------
_unsafe_view = unsafe_view  # torch's _unsafe_view: not a view for autograd


def kron(input, other):
    """Kronecker product, as torch's KronImpl: both operands viewed with interleaved size-1
    dims, multiplied (one allocation), viewed back."""
    maxdim = max(input.ndim, other.ndim)
    pad_self, pad_other = maxdim - input.ndim, maxdim - other.ndim
    a_shape, b_shape, r_shape = [], [], []
    for i in range(maxdim):
        a = input.shape[i - pad_self] if i >= pad_self else 1
        b = other.shape[i - pad_other] if i >= pad_other else 1
        a_shape += [a, 1]
        b_shape += [1, b]
        r_shape.append(a * b)
    product = _unsafe_view(input, a_shape) * _unsafe_view(other, b_shape)
    return _unsafe_view(product, r_shape)


class LinalgCross(Function):
    """The cross product of 3-vectors along dim (inputs broadcast). Backward: self:
    linalg_cross(other, grad); other: linalg_cross(grad, self) (other's first)."""

    apply = specialised_apply(2)

    def to_save(self, tensors):
        return (0, 1)

    def forward(self, a, b, out=None, dim=-1):
        if a.ndim != b.ndim:
            raise RuntimeError("linalg.cross: inputs must have the same number of dimensions.")
        d = _wrap_dim(dim, a.ndim)
        if a.shape[d] != 3 or b.shape[d] != 3:
            raise RuntimeError(
                f"linalg.cross: inputs dimension {dim} must have length 3. Got {a.shape[d]} and "
                f"{b.shape[d]}"
            )
        from engine.ops.common import broadcast_shape, result_type

        shape = tuple(broadcast_shape(a, b, "linalg.cross"))
        self.dim, self.shapes = d, (a.shape, b.shape)
        y = kernels.empty(shape, result_type(a, b), a._device)
        if a._device.type != "meta":
            xp = kernels.xp_of(a)
            y._data[...] = xp.cross(a._data, b._data, axis=d)
        return y

    def backward(self, g):
        a, b = self.saved_tensors
        nf = self._edges
        gb = LinalgCross.apply(g, a, op="linalg_cross", dim=self.dim) if nf[1] is not None else None
        ga = LinalgCross.apply(b, g, op="linalg_cross", dim=self.dim) if nf[0] is not None else None
        return (
            None if ga is None else sum_to(ga, self.shapes[0]),
            None if gb is None else sum_to(gb, self.shapes[1]),
        )

    def name(self):
        return "LinalgCrossBackward0"


def linalg_cross(input, other, *, dim=-1):
    return LinalgCross.apply(input, other, op="linalg_cross", dim=dim)


def cross(input, other, dim=None):
    """torch.cross: linalg.cross along dim; without dim the first dim of size 3 (deprecated in
    torch, which warns)."""
    if dim is None:
        warnings.warn(
            "Using torch.cross without specifying the dim arg is deprecated.\nPlease either pass "
            "the dim explicitly or simply use torch.linalg.cross.\nThe default value of dim "
            "will change to agree with that of linalg.cross in a future release.",
            UserWarning,
            stacklevel=2,
        )
        from engine.ops.common import broadcast_shape

        shape = broadcast_shape(input, other, "cross")
        dim = next((i for i, s in enumerate(shape) if s == 3), -1)
    return LinalgCross.apply(input, other, op="cross", dim=dim)


def inner(input, other):
    """torch's composite: a product with a 0-d operand, else tensordot over the last dims
    (permute, view, dot or mm, view)."""
    if input.ndim == 0 or other.ndim == 0:
        return input * other
    if input.shape[-1] != other.shape[-1]:
        raise RuntimeError(
            "inner() the last dimension must match on both input tensors but got shapes "
            f"{list(input.shape)} and {list(other.shape)}"
        )
    from engine.ops import dot, matmul

    k = input.shape[-1]
    a = input.permute(*range(input.ndim))
    b = other.permute(other.ndim - 1, *range(other.ndim - 1))
    out_shape = input.shape[:-1] + other.shape[:-1]
    if input.ndim == 1 and other.ndim == 1:
        return dot(a, b).view(out_shape)
    a2 = a.reshape(-1, k)
    b2 = b.reshape(k, -1)
    return matmul(a2, b2).view(out_shape)


register("tensor_split", tensor_split, method=True)
register("hsplit", hsplit, method=True)
register("vsplit", vsplit, method=True)
register("dsplit", dsplit, method=True)
register("split_with_sizes", split_with_sizes, method=True)
register("diff", diff, method=True)
register("rot90", rot90, method=True)
register("diagflat", diagflat, method=True)
register("kron", kron, method=True)
register("cross", cross, method=True)
register("inner", inner, method=True)
