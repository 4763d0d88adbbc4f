"""group_norm (a primitive, as ATen's native_group_norm) and rms_norm (composed, as ATen's
_fused_rms_norm is on CPU), with PyTorch's memory.

group_norm keeps the input, the weight and per (sample, group) mean and rstd (N x G) for
backward; backward allocates grad_input, grad_weight, grad_bias and two N x C partial sums
(ATen's ds and db), which die at its end. Per-sample work in backward is done in uncharged
scratch of one sample's size.

rms_norm is x * rsqrt(mean(x^2, normalized dims) + eps) * weight, the same ops in the same order
as PyTorch's, so its memory (the x^2 temporary, the per-row rstd kept, two products) is theirs.
"""

from __future__ import annotations

import math

from engine import kernels
from engine.autograd.function import Function, SavedTensor
from engine.tensor import Tensor


def _live(t: Tensor) -> bool:
    return t._device.type != "meta"


class GroupNorm(Function):
    """native_group_norm: y = (x - mean_g) * rstd_g * weight[c] + bias[c] over C/G channels."""

    def prepare(self, *args):
        self.present = (
            len(args) > 1 and args[1] is not None,
            len(args) > 2 and args[2] is not None,
        )

    def to_save(self, tensors):
        return (0, 1) if self.present[0] else (0,)

    def forward(self, x, weight=None, bias=None, out=None, num_groups=1, eps=1e-5):
        if x.ndim < 2:
            raise RuntimeError(
                f"Expected at least 2 dimensions for input tensor but received {x.ndim}"
            )
        n, c = x.shape[0], x.shape[1]
        if c % num_groups:
            raise RuntimeError(
                f"Expected number of channels in input to be divisible by num_groups, but got "
                f"input of shape {list(x.shape)} and num_groups={num_groups}"
            )
        for name, t in (("weight", weight), ("bias", bias)):
            if t is not None and tuple(t.shape) != (c,):
                raise RuntimeError(
                    f"Expected {name} to be a vector of size equal to the number of channels in "
                    f"input, but got {name} of shape {list(t.shape)} and input of shape "
                    f"{list(x.shape)}"
                )
        self.present = (weight is not None, bias is not None)
        g = num_groups
        hw = math.prod(x.shape[2:])
        self.dims, self.eps, self.x_shape = (n, c, g, hw), eps, x.shape
        dev, dt = x._device, x._dtype
        y = kernels.empty(x.shape, dt, dev)
        mean = kernels.empty((n, g), dt, dev)
        rstd = kernels.empty((n, g), dt, dev)
        if _live(x):
            xp = kernels.xp_of(x)
            xg = (
                x._data.reshape(n, g, -1) if x.is_contiguous() else x._data.copy().reshape(n, g, -1)
            )
            yg = y._data.reshape(n, g, -1)
            xp.mean(xg, axis=2, out=mean._data)
            xp.subtract(xg, mean._data[:, :, None], out=yg)
            var = xp.einsum("ngi,ngi->ng", yg, yg) / yg.shape[2]
            rstd._data[...] = 1.0 / xp.sqrt(var + eps)
            xp.multiply(yg, rstd._data[:, :, None], out=yg)
            yc = y._data.reshape(n, c, hw)
            if weight is not None:
                xp.multiply(yc, weight._data[None, :, None], out=yc)
            if bias is not None:
                xp.add(yc, bias._data[None, :, None], out=yc)
        self.mean, self.rstd = SavedTensor(mean, None), SavedTensor(rstd, None)
        return y

    def backward(self, gy):
        saved = self.saved_tensors
        x = saved[0]
        weight = saved[1] if self.present[0] else None
        mean, rstd = self.mean.unpack(), self.rstd.unpack()
        n, c, g, hw = self.dims
        needs = [e is not None for e in self._edges]
        slots = [0] + [i + 1 for i, p in enumerate(self.present) if p]
        want = {slot: needs[k] for k, slot in enumerate(slots)}
        dev, dt = gy._device, gy._dtype
        ds = kernels.empty((n, c), dt, dev)  # sum over hw of dy * x, per (n, c)
        if not gy.is_contiguous():  # ATen's kernel reads dY.contiguous(): a charged copy
            gy = kernels.copy_new(gy, contiguous=True)
        db = kernels.empty((n, c), dt, dev)  # sum over hw of dy, per (n, c)
        gx = kernels.empty(self.x_shape, dt, dev) if want[0] else None
        gw = kernels.empty((c,), dt, dev) if want.get(1) else None
        gb = kernels.empty((c,), dt, dev) if want.get(2) else None
        if _live(gy):
            xp = kernels.xp_of(gy)
            dy = gy._data.reshape(n, c, hw)
            xc = x._data.reshape(n, c, hw)
            kernels.einsum_into(xp, "nci,nci->nc", dy, xc, out=ds._data)
            xp.sum(dy, axis=2, out=db._data)
            m = mean._data.repeat(c // g, axis=1)  # (n, c): small
            r = rstd._data.repeat(c // g, axis=1)
            if gw is not None:  # sum_n (ds - db * mean) * rstd
                gw._data[...] = ((ds._data - db._data * m) * r).sum(axis=0)
            if gb is not None:
                gb._data[...] = db._data.sum(axis=0)
            if gx is not None:
                w = weight._data if weight is not None else xp.ones(c, dtype=dt.np)
                cg = c // g
                count = cg * hw
                # per (n, g): dx = rstd * w * dy + (b_ng * x + c_ng) with ATen's coefficients
                dsw = (ds._data * w).reshape(n, g, cg).sum(axis=2)
                dbw = (db._data * w).reshape(n, g, cg).sum(axis=2)
                mu, rs = mean._data, rstd._data
                b_ng = (dbw * mu - dsw) * rs**3 / count
                c_ng = -b_ng * mu - dbw * rs / count
                gxc = gx._data.reshape(n, c, hw)
                for i in range(n):  # one sample of scratch at a time
                    coef = (r[i] * w)[:, None]
                    xp.multiply(dy[i], coef, out=gxc[i])
                    bb = b_ng[i].repeat(cg)[:, None]
                    cc = c_ng[i].repeat(cg)[:, None]
                    gxc[i] += xc[i] * bb + cc
        del ds, db
        grads = {0: gx, 1: gw, 2: gb}
        return tuple(grads.get(s) for s in slots)

    def release_saved(self) -> None:
        super().release_saved()
        self.mean = self.rstd = None

    def name(self):
        return "NativeGroupNormBackward0"


def group_norm(input, num_groups, weight=None, bias=None, eps=1e-5):
    """Normalise over groups of num_groups channels (PyTorch's F.group_norm)."""
    args = [input]
    if weight is not None or bias is not None:
        args += [weight, bias]
    return GroupNorm.apply(*args, op="group_norm", num_groups=num_groups, eps=eps)


def rms_norm(input, normalized_shape, weight=None, eps=None):
    """x * rsqrt(mean(x^2) + eps) [* weight] over the trailing normalized_shape dims."""
    if isinstance(normalized_shape, int):
        normalized_shape = (normalized_shape,)
    normalized_shape = tuple(normalized_shape)
    k = len(normalized_shape)
    if tuple(input.shape[input.ndim - k :]) != normalized_shape:
        raise RuntimeError(
            f"Given normalized_shape={list(normalized_shape)}, expected input with shape "
            f"[*, {', '.join(str(s) for s in normalized_shape)}], but got input of size"
            f"{list(input.shape)}"
        )
    if eps is None:
        import numpy as np

        eps = float(np.finfo(input._dtype.np).eps)
    dims = tuple(range(input.ndim - k, input.ndim))
    rstd = input.pow(2).mean(dims, keepdim=True).add_(eps).rsqrt()
    y = input * rstd
    return y * weight if weight is not None else y


def _register() -> None:
    from engine.ops.registry import Scenario, register

    register(
        "group_norm",
        group_norm,
        functional=True,
        scenario=Scenario(
            inputs=("input",),
            optional_inputs=("weight", "bias"),
            args=(
                ("num_groups", int, ..., "groups of channels"),
                ("eps", float, 1e-5, "added to the variance"),
            ),
            doc="group normalisation: keeps mean and rstd per (sample, group)",
        ),
    )
    register(
        "rms_norm",
        rms_norm,
        functional=True,
        scenario=Scenario(
            inputs=("input",),
            optional_inputs=("weight",),
            args=(
                ("normalized_shape", list[int], ..., "the trailing dims normalised"),
                ("eps", float | None, None, "default: the dtype's epsilon"),
            ),
            doc="x * rsqrt(mean(x^2) + eps) * weight",
        ),
    )


_register()

__all__ = ["group_norm", "rms_norm"]
