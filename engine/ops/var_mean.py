"""torch.var_mean / torch.std_mean: one node with two outputs (VarMeanBackward0 /
StdMeanBackward0), the variance (or deviation) made first, then the mean; backward is torch's
var_mean_backward / std_mean_backward: var's (std's) gradient, then the mean's share
(grad expanded / n), summed into a new buffer."""

from __future__ import annotations

import numpy as np

from engine import dtypes, kernels
from engine.ops.reduce import reduced_shape
from engine.ops.registry import Scenario, register
from engine.ops.shape import _VAR_SCENARIO_ARGS, Var, _var_args


class VarMean(Var):
    num_outputs = 2

    def forward(self, x, out=None, dim=None, correction=1, keepdim=False, std=False):
        name = "std_mean" if std else "var_mean"
        if not x._dtype.is_floating_point:
            raise RuntimeError(f"{name} only support floating point and complex dtypes")
        v = super().forward(x, dim=dim, correction=correction, keepdim=keepdim, std=std)
        mean = kernels.empty(v.shape, x._dtype, x._device)
        if x._device.type != "meta":
            xp = kernels.xp_of(x)
            axes = self.dims if self.dims else None
            mean._data[...] = xp.mean(x._data, axis=axes, keepdims=keepdim) if x.numel() else xp.nan
        return v, mean

    def backward(self, g_var, g_mean=None):
        gx = self._var_backward(g_var) if g_var is not None else None
        if g_mean is not None:
            gm = g_mean
            if not self.keepdim and self.dims and len(self.in_shape) > 0:
                for d in self.dims:
                    gm = gm.unsqueeze(d)
            part = gm.expand(*self.in_shape) / self.n
            if gx is None:
                gx = part
            else:
                total = gx + part
                del gx, part
                gx = total
        return (gx,)

    def _var_backward(self, g):
        """torch's var_backward / std_backward in its order: std: grad_var = (g / (result *
        2)).masked_fill_(result == 0, 0); var: (2 / dof) * grad * (x - x.mean(dims, true)),
        whose right operand gcc evaluates first (mean, diff, then 2 / dof * grad, the product),
        the temporaries freed last made first."""
        saved = self.saved_tensors
        x = saved[0]
        dev, dt = g._device, g._dtype
        live = dev.type != "meta"
        xp = kernels.xp_of(g) if live else None
        kshape = reduced_shape(self.in_shape, self.dims, True) if self.dims else ()
        if self.std:
            y = saved[1]
            twice = kernels.empty(y.shape, dt, dev)
            grad_var = kernels.empty(g.shape, dt, dev)
            zero = kernels.empty(y.shape, dtypes.bool_, dev)
            if live:
                xp.multiply(y._data, 2.0, out=twice._data)
                xp.divide(g._data, twice._data, out=grad_var._data)
                xp.equal(y._data, 0, out=zero._data)
                grad_var._data[zero._data] = 0
            del zero, twice
            g = grad_var
        dof = self.n - self.correction
        mean = kernels.empty(kshape, dt, dev)
        diff = kernels.empty(self.in_shape, dt, dev)
        t = kernels.empty(g.shape, dt, dev)
        gx = kernels.empty(self.in_shape, dt, dev)
        if live:
            axes = self.dims if self.dims else None
            xp.mean(x._data, axis=axes, keepdims=bool(self.dims), out=mean._data)
            xp.subtract(x._data, mean._data, out=diff._data)
            xp.multiply(g._data, 2.0 / dof if dof > 0 else np.nan, out=t._data)
            tk = t._data
            if not self.keepdim and self.dims:
                tk = tk.reshape(kshape)
            xp.multiply(tk, diff._data, out=gx._data)
        del t, diff, mean
        return gx

    def name(self):
        return "StdMeanBackward0" if self.std else "VarMeanBackward0"


class StdMean(VarMean):
    retain_output = True


def var_mean(input, dim=None, unbiased=None, keepdim=False, *, correction=None):  # noqa: A002
    """(var, mean) over `dim` (every dim by default), with `correction` (1: Bessel's)."""
    dim, correction = _var_args(dim, unbiased, correction, keepdim, "var_mean")
    return VarMean.apply(input, op="var_mean", dim=dim, correction=correction, keepdim=keepdim)


def std_mean(input, dim=None, unbiased=None, keepdim=False, *, correction=None):  # noqa: A002
    """(std, mean) over `dim` (every dim by default), with `correction` (1: Bessel's)."""
    dim, correction = _var_args(dim, unbiased, correction, keepdim, "std_mean")
    return StdMean.apply(
        input, op="std_mean", dim=dim, correction=correction, keepdim=keepdim, std=True
    )


register("var_mean", var_mean, scenario=Scenario(args=_VAR_SCENARIO_ARGS, doc="(var, mean)"))
register("std_mean", std_mean, scenario=Scenario(args=_VAR_SCENARIO_ARGS, doc="(std, mean)"))
