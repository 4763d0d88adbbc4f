"""torch._weight_norm over its fused CPU kernel (`_weight_norm_interface`, WeightNormKernel.cpp):
w = v * g / ||v|| with the norm taken over every dimension but the first or the last.

Blocks as torch's CPU kernel: forward the weight (contiguous) and the norms (g's shape), which
the node keeps; over the last dimension a [threads, N] buffer for the per-thread column sums,
made and freed. Backward (`grad.contiguous()` first) grad_v and grad_g; over the last dimension
a [max(3, threads), N] buffer. The node is `WeightNormInterfaceBackward0`; it keeps v, g and
the norms (released after the incoming gradient, as torch's node).
"""

from __future__ import annotations

from engine import kernels
from engine.autograd.function import Function
from engine.ops.nn.common import _live


def _rows(v, dim):
    """(M, N) and the axis the norm reduces over, for the first (0) or last dim."""
    numel = 1
    for s in v.shape:
        numel *= s
    if dim == 0:
        m = v.shape[0]
        return m, (numel // m if m else 0), 1
    n = v.shape[-1]
    return (numel // n if n else 0), n, 0


class WeightNormInterface(Function):
    retain_inputs = (0, 1)

    def forward(self, v, g, out=None, dim=0):
        self.dim = dim
        dev = v._device
        w = kernels.empty(tuple(v.shape), v._dtype, dev)
        norms = kernels.empty(tuple(g.shape), g._dtype, dev)
        m, n, axis = _rows(v, dim)
        buffer = None
        if dim != 0:  # the last-dim kernel's per-thread column sums
            buffer = kernels.empty((kernels.get_num_threads(), n), g._dtype, dev)
        if _live(dev) and v._data.size:
            xp = kernels.xp_of(v)
            v2 = v._data.reshape(m, n)
            nrm = xp.sqrt((v2 * v2).sum(axis=axis))
            norms._data[...] = nrm.reshape(norms._data.shape)
            scale = g._data.reshape(-1) / nrm
            w._data[...] = (v2 * (scale[:, None] if dim == 0 else scale[None, :])).reshape(
                w._data.shape
            )
        elif _live(dev):
            norms._data[...] = 0
        del buffer
        self.save(norms=norms)
        return w

    def backward(self, grad):
        v, g = self.saved_tensors
        norms = self.kept("norms")
        if not grad.is_contiguous():
            grad = grad.contiguous()
        dev = v._device
        gv = kernels.empty(tuple(v.shape), v._dtype, dev)
        gg = kernels.empty(tuple(g.shape), g._dtype, dev)
        m, n, axis = _rows(v, self.dim)
        buffer = None
        if self.dim != 0:
            buffer = kernels.empty((max(3, kernels.get_num_threads()), n), norms._dtype, dev)
        if _live(dev) and v._data.size:
            v2 = v._data.reshape(m, n)
            gw = grad._data.reshape(m, n)
            nrm = norms._data.reshape(-1)
            sums = (gw * v2).sum(axis=axis)
            grad_g = sums / nrm
            gg._data[...] = grad_g.reshape(gg._data.shape)
            a = g._data.reshape(-1) / nrm
            b = a * grad_g / nrm
            if self.dim == 0:
                a, b = a[:, None], b[:, None]
            gv._data[...] = (a * gw - b * v2).reshape(gv._data.shape)
        elif _live(dev):
            gg._data[...] = 0
        del buffer, grad
        return gv, gg

    def name(self):
        return "WeightNormInterfaceBackward0"


def _weight_norm(v, g, dim=0):
    """torch._weight_norm(v, g, dim) for dim 0 or v.dim() - 1 (the fused kernel; torch too
    takes its composite path for any other dim, -1 included)."""
    if v._device != g._device:
        raise RuntimeError(
            "weight_norm: expected v_in and g_in to be on the same device, but v_in is on "
            f"{v._device} and g_in is on {g._device}"
        )
    if dim != 0 and dim != v.ndim - 1:
        raise NotImplementedError(
            "_weight_norm: only the fused kernel (dim the first or last dimension) is "
            "supported; torch's composite path (v * (g / norm_except_dim(v))) is not modelled"
        )
    if not v.is_contiguous():
        v = v.contiguous()
    if not g.is_contiguous():
        g = g.contiguous()
    return WeightNormInterface.apply(v, g, op="_weight_norm_interface", dim=dim)
