"""BLAS-style products with an added input, beside addmm (engine/ops/linalg.py) and baddbmm
(engine/ops/contract.py): addmm_, addmv / addmv_, addr / addr_, addbmm / addbmm_.

Each is one node (AddmmBackward0, AddmvBackward0, AddrBackward0, AddbmmBackward0) whose
forward allocates the result alone, as torch's CPU kernels: beta * input broadcast into it
(input ignored, NaN included, when beta is 0), alpha times the product added. The in-place
forms write into the input and allocate nothing. Backward is derivatives.yaml's: input: grad
times beta (maybe_multiply: no product when the scalar is 1), summed to its shape; the
operands' gradients one product each, times alpha.
"""

from __future__ import annotations

from engine.ops import linalg as L
from engine.ops.registry import register


def _expand_check(shape, target):
    lead = len(target) - len(shape)
    for i, size in enumerate(shape):
        if size not in (1, target[i + lead]):
            raise RuntimeError(
                f"The expanded size of the tensor ({target[i + lead]}) must match the existing "
                f"size ({size}) at non-singleton dimension {i + lead}.  Target sizes: "
                f"{list(target)}.  Tensor sizes: {list(shape)}"
            )


def _inplace_check(input, shape):
    if tuple(input.shape) != tuple(shape):
        raise RuntimeError(
            f"Bad in-place call: input tensor size {list(input.shape)} and output tensor size "
            f"{list(shape)} should match"
        )


class Addmv(L.AddProduct):
    node, op_name = "AddmvBackward0", "addmv"

    @staticmethod
    def product(xp, mat, vec):
        return xp.matmul(mat, vec)

    def grad_a(self, g, vec):  # grad.ger(vec)
        return g.outer(vec)

    def grad_b(self, g, mat):  # mat.t().mv(grad)
        return mat.t().mv(g)


class Addr(L.AddProduct):
    node, op_name = "AddrBackward0", "addr"

    @staticmethod
    def product(xp, v1, v2):
        return xp.multiply.outer(v1, v2)

    def grad_a(self, g, vec2):  # grad.mv(vec2)
        return g.mv(vec2)

    def grad_b(self, g, vec1):  # grad.t().mv(vec1)
        return g.t().mv(vec1)


class Addbmm(L.AddProduct):
    node, op_name = "AddbmmBackward0", "addbmm"
    input_grad_last = True

    @staticmethod
    def product(xp, b1, b2):
        return xp.matmul(b1, b2).sum(axis=0)

    def _expanded(self, g):
        return g.unsqueeze(0).expand(self.a_shape[0], self.a_shape[1], self.b_shape[2])

    def grad_a(self, g, b2):  # grad.unsqueeze(0).expand(...).bmm(batch2.transpose(1, 2))
        return self._expanded(g).bmm(b2.transpose(1, 2))

    def grad_b(self, g, b1):  # batch1.transpose(1, 2).bmm(grad.unsqueeze(0).expand(...))
        return b1.transpose(1, 2).bmm(self._expanded(g))


def _addmv_shape(input, mat, vec):
    if mat.ndim != 2 or vec.ndim != 1 or input.ndim > 1:
        raise RuntimeError(
            f"vector + matrix @ vector expected, got {input.ndim}, {mat.ndim}, {vec.ndim}"
        )
    n, k = mat.shape
    if vec.shape[0] != k or (input.ndim == 1 and input.shape[0] not in (1, n)):
        shape = "x".join(str(s) for s in mat.shape)
        raise RuntimeError(
            f"size mismatch, got input ({input.shape[0] if input.ndim else 1}), mat ({shape}), "
            f"vec ({vec.shape[0]})"
        )
    return (n,)


def addmv(input, mat, vec, *, beta=1, alpha=1, out=None):
    """beta * input + alpha * (mat @ vec) (torch.addmv)."""
    shape = _addmv_shape(input, mat, vec)
    return Addmv.apply(input, mat, vec, out=out, op="addmv", beta=beta, alpha=alpha, shape=shape)


def addmv_(input, mat, vec, *, beta=1, alpha=1):
    shape = _addmv_shape(input, mat, vec)
    _inplace_check(input, shape)
    return Addmv.apply(input, mat, vec, out=input, op="addmv_", beta=beta, alpha=alpha, shape=shape)


def _addr_shape(input, vec1, vec2):
    for name, v in (("vec1", vec1), ("vec2", vec2)):
        if v.ndim != 1:
            raise RuntimeError(f"addr: Expected 1-D argument {name}, but got {v.ndim}-D")
    shape = (vec1.shape[0], vec2.shape[0])
    _expand_check(input.shape, shape)
    return shape


def addr(input, vec1, vec2, *, beta=1, alpha=1, out=None):
    """beta * input + alpha * outer(vec1, vec2) (torch.addr)."""
    shape = _addr_shape(input, vec1, vec2)
    return Addr.apply(input, vec1, vec2, out=out, op="addr", beta=beta, alpha=alpha, shape=shape)


def addr_(input, vec1, vec2, *, beta=1, alpha=1):
    shape = _addr_shape(input, vec1, vec2)
    _inplace_check(input, shape)
    return Addr.apply(input, vec1, vec2, out=input, op="addr_", beta=beta, alpha=alpha, shape=shape)


def _addbmm_shape(input, b1, b2):
    for name, b in (("batch1", b1), ("batch2", b2)):
        if b.ndim != 3:
            raise RuntimeError(f"{name} must be a 3D tensor")
    if b1.shape[0] != b2.shape[0]:
        raise RuntimeError(
            "batch1 and batch2 must have same number of batches, got "
            f"{b1.shape[0]} and {b2.shape[0]}"
        )
    if b1.shape[2] != b2.shape[1]:
        raise RuntimeError(
            f"Incompatible matrix sizes for bmm ({b1.shape[1]}x{b1.shape[2]} and "
            f"{b2.shape[1]}x{b2.shape[2]})"
        )
    shape = (b1.shape[1], b2.shape[2])
    _expand_check(input.shape, shape)
    return shape


def addbmm(input, batch1, batch2, *, beta=1, alpha=1, out=None):
    """beta * input + alpha * sum_b batch1[b] @ batch2[b] (torch.addbmm)."""
    shape = _addbmm_shape(input, batch1, batch2)
    return Addbmm.apply(
        input, batch1, batch2, out=out, op="addbmm", beta=beta, alpha=alpha, shape=shape
    )


def addbmm_(input, batch1, batch2, *, beta=1, alpha=1):
    shape = _addbmm_shape(input, batch1, batch2)
    _inplace_check(input, shape)
    return Addbmm.apply(
        input, batch1, batch2, out=input, op="addbmm_", beta=beta, alpha=alpha, shape=shape
    )


def addmm_(input, mat1, mat2, *, beta=1, alpha=1):
    """input = beta * input + alpha * (mat1 @ mat2), in place (AddmmBackward0)."""
    if mat1.ndim == 2 and mat2.ndim == 2 and mat1.shape[1] == mat2.shape[0]:
        _inplace_check(input, (mat1.shape[0], mat2.shape[1]))
    return L.Addmm.apply(input, mat1, mat2, out=input, op="addmm_", beta=beta, alpha=alpha)


register("addmv", addmv, method=True, inplace="addmv_")
register("addmv_", addmv_, method=True)
register("addr", addr, method=True, inplace="addr_")
register("addr_", addr_, function=False, method=True)
register("addbmm", addbmm, method=True, inplace="addbmm_")
register("addbmm_", addbmm_, function=False, method=True)
register("addmm_", addmm_, function=False, method=True)
