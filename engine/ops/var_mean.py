"""torch.var_mean / torch.std_mean: one node with two outputs (VarMeanBackward0 /
StdMeanBackward0), the variance (or deviation) made first, then the mean; backward is torch's
var_mean_backward / std_mean_backward: var's (std's) gradient, then the mean's share
(grad expanded / n), summed into a new buffer."""

from __future__ import annotations

from engine import kernels
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
