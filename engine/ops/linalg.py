"""matmul (and @): 1-D, 2-D and batched with broadcasting."""

from __future__ import annotations

import numpy as np

from engine import kernels
from engine.autograd.function import Function
from engine.ops.common import device_of, result_buffer, result_type, sum_to
from engine.ops.views import Transpose
from engine.tensor import Tensor


def matmul_shape(sa, sb):
    if not sa or not sb:
        raise RuntimeError(
            "both arguments to matmul need to be at least 1D, but they are "
            f"{len(sa)}D and {len(sb)}D"
        )
    a2 = (1,) + sa if len(sa) == 1 else sa
    b2 = sb + (1,) if len(sb) == 1 else sb
    if a2[-1] != b2[-2]:
        if len(sa) <= 2 and len(sb) <= 2:
            raise RuntimeError(
                f"mat1 and mat2 shapes cannot be multiplied ({a2[-2]}x{a2[-1]} and {b2[-2]}x{b2[-1]})"
            )
        raise RuntimeError(
            f"Expected size for first two dimensions of batch2 tensor to be: [{a2[-1]}] but got: "
            f"[{b2[-2]}] (matmul of shapes {list(sa)} and {list(sb)})"
        )
    try:
        batch = np.broadcast_shapes(a2[:-2], b2[:-2]) if len(a2) > 2 or len(b2) > 2 else ()
    except ValueError:
        raise RuntimeError(
            f"matmul: batch dimensions of {list(sa)} and {list(sb)} cannot be broadcast"
        ) from None
    shape = batch + (a2[-2], b2[-1])
    if len(sa) == 1:
        shape = shape[:-2] + shape[-1:]
    if len(sb) == 1:
        shape = shape[:-1]
    return shape


def _blas_ready(arr) -> bool:
    """Whether BLAS reads this matrix in place: unit stride along one dim, a leading dimension
    no smaller than the other (PyTorch's test before it copies an mm operand)."""
    n0, n1 = arr.shape
    s0, s1 = (st // arr.itemsize for st in arr.strides)
    if s1 == 1 and (n0 == 1 or s0 >= max(1, n1)):
        return True
    return s0 == 1 and (n1 == 1 or s1 >= max(1, n0))


_CPP_NAMES = {
    "float16": "c10::Half",
    "bfloat16": "c10::BFloat16",
    "float32": "float",
    "float64": "double",
    "int32": "int",
    "int64": "long int",
    "bool": "bool",
    "uint8": "unsigned char",
}


def _dtype_mismatch(a: Tensor, b: Tensor) -> str:
    """PyTorch's error for matmul of two dtypes, from the kernel its dispatch reaches (no
    promotion: dot, mv, mm or bmm, each with its own words)."""
    ta, tb = (t._dtype.scalar_name for t in (a, b))
    if a.ndim == 1 and b.ndim == 1:
        return f"dot : expected both vectors to have same dtype, but found {ta} and {tb}"
    if b.ndim == 1:
        return f"addmv input tensors must have the same dtype, but got {tb}, {ta}, and {tb}"
    if b.ndim == 2:
        ca, cb = _CPP_NAMES[a._dtype.name], _CPP_NAMES[b._dtype.name]
        return f"expected m1 and m2 to have the same dtype, but got: {ca} != {cb}"
    return f"expected scalar type {ta} but found {tb}"


class Matmul(Function):
    def to_save(self, tensors):
        a, b = tensors
        idx = []
        if b.requires_grad:
            idx.append(0)
        if a.requires_grad:
            idx.append(1)
        self._save_idx = tuple(idx)
        return self._save_idx

    def forward(self, a, b, out=None):
        if not isinstance(a, Tensor) or not isinstance(b, Tensor):
            name, pos, v = ("input", 1, a) if not isinstance(a, Tensor) else ("other", 2, b)
            raise TypeError(
                f"matmul(): argument '{name}' (position {pos}) must be Tensor, not "
                f"{type(v).__name__}"
            )
        if a._dtype is not b._dtype:
            raise RuntimeError(_dtype_mismatch(a, b))
        dev = device_of(a, b)
        shape = matmul_shape(a.shape, b.shape)
        self.shapes = (a.shape, b.shape)
        # torch's mm_mat1/mm_mat2_backward make a column-major operand's gradient transposed
        # (so that its .t() comes back contiguous: w.t()'s weight gradient is then taken over
        # by AccumulateGrad, not copied)
        mats = a.ndim == 2 and b.ndim == 2
        self.cols = (mats and _column_major(a._data), mats and _column_major(b._data))
        y = result_buffer(out, shape, a._dtype, dev, "matmul")  # (one dtype: checked above)
        if dev.type != "meta":
            ad, bd = a._data, b._data
            if ad.ndim == 2 and bd.ndim == 2:
                # Like PyTorch's mm (CPU and CUDA), an operand BLAS cannot read in place (a
                # stride-0 expanded gradient, say) is first copied into a contiguous temporary.
                ta = None if _blas_ready(ad) else kernels.copy_new(a)
                tb = None if _blas_ready(bd) else kernels.copy_new(b)
                if ta is not None:
                    ad = ta._data
                if tb is not None:
                    bd = tb._data
                kernels.matmul_into(kernels.xp_of_device(dev), ad, bd, y._data)
                del ta, tb
            else:
                kernels.matmul_into(kernels.xp_of_device(dev), ad, bd, y._data)
        return y

    def backward(self, g):
        # Work on the 2-D (or batched) forms: a vector a is (1, n), a vector b is (n, 1).
        # The second operand's gradient comes first, as in PyTorch's MmBackward0 / BmmBackward0.
        saved = dict(zip(self._save_idx, self.saved_tensors, strict=True))
        sa, sb = self.shapes
        if len(sa) == 3 and len(sb) == 3 and sa[0] == sb[0]:
            # BmmBackward0 (a batched matmul's own bmm): torch's two bmm on the transposes. The
            # general path below comes to the same products and memory through matmul's
            # reshapes and views of unchanged shapes, at several times the calls.
            if self._edges[1] is not None:
                gb = _bmm(_transpose(saved[0], op="transpose", dims=(0, 2, 1)), g, op="bmm")
            else:
                gb = None
            if self._edges[0] is not None:
                ga = _bmm(g, _transpose(saved[1], op="transpose", dims=(0, 2, 1)), op="bmm")
            else:
                ga = None
            return (ga, gb)
        a2s = (1,) + sa if len(sa) == 1 else sa
        b2s = sb + (1,) if len(sb) == 1 else sb
        ga = gb = None
        g2 = g.reshape(matmul_shape(a2s, b2s))
        if len(sa) == 2 and len(sb) == 2 and (self.cols[0] or self.cols[1]):
            return self._mm_backward(saved, g2)
        if self._edges[1] is not None:
            a2 = saved[0].reshape(a2s)
            gb = sum_to(a2.transpose(-1, -2).matmul(g2), b2s).reshape(sb)
        if self._edges[0] is not None:
            b2 = saved[1].reshape(b2s)
            ga = sum_to(g2.matmul(b2.transpose(-1, -2)), a2s).reshape(sa)
        return (ga, gb)

    def _mm_backward(self, saved, g):
        """MmBackward0 with a column-major operand (derivatives.yaml's mm_mat2_backward, then
        mm_mat1_backward): its gradient computed transposed."""
        ga = gb = None
        if self._edges[1] is not None:
            a = saved[0]
            gb = g.t().matmul(a).t() if self.cols[1] else a.t().matmul(g)
        if self._edges[0] is not None:
            b = saved[1]
            ga = b.matmul(g.t()).t() if self.cols[0] else g.matmul(b.t())
        return (ga, gb)

    def name(self):
        # torch's matmul dispatches by the operands' dims: dot, mv, mm (a vector times a matrix
        # is engine.ops.matmul's unsqueeze / mm / squeeze_, as torch's)
        dims = (len(self.shapes[0]), len(self.shapes[1]))
        return _NODES.get(dims, "MatmulBackward0")


_NODES = {
    (1, 1): "DotBackward0",
    (2, 1): "MvBackward0",
    (2, 2): "MmBackward0",
    (3, 3): "BmmBackward0",
}


_bmm = Matmul.apply
_transpose = Transpose.apply


def _maybe_multiply(t, s):
    return t if s == 1 else t * s


class AddProduct(Function):
    """beta * input + alpha * product(a, b). Subclasses give `product` (arrays) and the
    operands' gradients (`grad_a`, `grad_b`)."""

    node = ""
    input_grad_last = False  # torch's generated AddbmmBackward0 makes input's gradient last

    def to_save(self, tensors):
        _, a, b = tensors
        idx = []
        if b.requires_grad:
            idx.append(1)  # b's gradient reads a
        if a.requires_grad:
            idx.append(2)  # a's gradient reads b
        self._save_idx = tuple(idx)
        return self._save_idx

    def forward(self, input, a, b, out=None, beta=1, alpha=1, shape=()):
        self.in_shape, self.beta, self.alpha = input.shape, beta, alpha
        self.a_shape, self.b_shape = a.shape, b.shape
        dev = device_of(input, a, b)
        y = result_buffer(out, shape, result_type(input, a, b), dev, self.op_name)
        if dev.type != "meta":
            xp = kernels.xp_of_device(dev)
            prod = self.product(xp, a._data, b._data)  # the kernel's (BLAS accumulates in place)
            if alpha != 1:
                prod *= alpha
            if beta == 0:
                xp.copyto(y._data, prod)
            else:
                if y is not input:
                    xp.copyto(y._data, xp.broadcast_to(input._data, shape))
                if beta != 1:
                    y._data *= beta
                y._data += prod
        return y

    def backward(self, g):
        saved = dict(zip(self._save_idx, self.saved_tensors, strict=True))
        nf = self._edges
        gi = ga = gb = None
        if nf[0] is not None and not self.input_grad_last:
            gi = sum_to(_maybe_multiply(g, self.beta), self.in_shape)
        if nf[1] is not None:
            ga = _maybe_multiply(self.grad_a(g, saved[2]), self.alpha)
        if nf[2] is not None:
            gb = _maybe_multiply(self.grad_b(g, saved[1]), self.alpha)
        if nf[0] is not None and self.input_grad_last:
            gi = sum_to(_maybe_multiply(g, self.beta), self.in_shape)
        return (gi, ga, gb)

    def name(self):
        return self.node


class Addmm(AddProduct):
    """addmm(input, mat1, mat2, beta, alpha) = beta * input + alpha * mat1 @ mat2: the result
    alone is allocated (input broadcast into it, then the product added, as BLAS's gemm with
    beta). Backward is derivatives.yaml's: input: grad (times beta), summed to its shape;
    mat1: mm_mat1_backward, mat2: mm_mat2_backward (a column-major operand's gradient made
    transposed, as torch does; times alpha)."""

    node, op_name = "AddmmBackward0", "addmm"

    def forward(self, input, mat1, mat2, out=None, beta=1, alpha=1):
        for name, m in (("mat1", mat1), ("mat2", mat2)):
            if m.ndim != 2:
                raise RuntimeError(f"{name} must be a matrix, got {m.ndim}-D tensor")
        (n, k), (k2, p) = mat1.shape, mat2.shape
        if k != k2:
            raise RuntimeError(f"mat1 and mat2 shapes cannot be multiplied ({n}x{k} and {k2}x{p})")
        lead = 2 - input.ndim
        for i, size in enumerate(input.shape):
            target = (n, p)[i + lead]
            if size not in (1, target):
                raise RuntimeError(
                    f"The expanded size of the tensor ({target}) must match the existing size "
                    f"({size}) at non-singleton dimension {i + lead}.  Target sizes: [{n}, {p}]."
                    f"  Tensor sizes: {list(input.shape)}"
                )
        self.m1_cols = _column_major(mat1._data)
        self.m2_cols = _column_major(mat2._data)
        return super().forward(input, mat1, mat2, out=out, beta=beta, alpha=alpha, shape=(n, p))

    @staticmethod
    def product(xp, mat1, mat2):
        return xp.matmul(mat1, mat2)

    def grad_a(self, g, mat2):  # mm_mat1_backward
        if self.m1_cols:  # mat2.mm(grad.t()).t()
            return mat2.matmul(g.t()).t()
        return g.matmul(mat2.t())

    def grad_b(self, g, mat1):  # mm_mat2_backward
        if self.m2_cols:  # grad.t().mm(mat1).t()
            return g.t().matmul(mat1).t()
        return mat1.t().matmul(g)


def _column_major(arr) -> bool:
    """torch's test in mm_mat*_backward: strides (1, rows), a transposed contiguous matrix."""
    if arr.ndim != 2:
        return False
    item = arr.itemsize
    return arr.strides[0] == item and arr.strides[1] == arr.shape[0] * item
