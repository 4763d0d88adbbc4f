"""conv_transpose2d: the gradient of conv2d with respect to its input, as a layer.

Forward keeps the input and the weight (as ATen's convolution does) and allocates the output;
per sample it forms the columns W^T @ x_n ([C_out/g * kh * kw, H * W]) and scatters them into
the output (col2im). Backward: grad_input is conv2d(grad, W) with the same geometry, grad_weight
is x_n @ im2col(grad_n)^T summed over samples, grad_bias the sum over N, H, W. The columns are
kernel workspace, reported as scratch (engine.kernels.Scratch) like conv2d's, not charged.
"""

from __future__ import annotations

import numpy as np

from engine import kernels
from engine.autograd.function import Function
from engine.backends import cuda_reduce
from engine.ops.nn.common import _pair
from engine.ops.nn.conv3d import ConvTransposeNd, _slow_cpu


def _live(t) -> bool:
    return t._device.type != "meta"


def _out_size(size, k, s, p, d, op):
    return (size - 1) * s - 2 * p + d * (k - 1) + op + 1


def _spans(n_in, k, s, p, d):
    """For each kernel offset j: (output slice start, input slice) so that
    out[j * d - p + i * s] += col[j, i] for the i with 0 <= j * d - p + i * s < n_out."""
    return [(j * d - p, s) for j in range(k)]


def _col2im(xp, cols, out, geom):
    """out[c, oy, ox] += cols[c, ky, kx, iy, ix] at oy = iy*s - p + ky*d (same for x)."""
    (kh, kw), (sh, sw), (ph, pw), (dh, dw), (h, w) = geom
    _, hout, wout = out.shape
    for ky in range(kh):
        oy0 = ky * dh - ph
        iy = np.arange(h)
        oy = oy0 + iy * sh
        my = (oy >= 0) & (oy < hout)
        if not my.any():
            continue
        for kx in range(kw):
            ox0 = kx * dw - pw
            ix = np.arange(w)
            ox = ox0 + ix * sw
            mx = (ox >= 0) & (ox < wout)
            if not mx.any():
                continue
            iys, ixs = iy[my], ix[mx]
            out[:, oy[my][:, None], ox[mx][None, :]] += cols[:, ky, kx][:, iys][:, :, ixs]


def _im2col(xp, g, geom, cols):
    """cols[c, ky, kx, iy, ix] = g[c, iy*s - p + ky*d, ix*s - p + kx*d] (0 outside)."""
    (kh, kw), (sh, sw), (ph, pw), (dh, dw), (h, w) = geom
    _, hout, wout = g.shape
    cols[...] = 0
    for ky in range(kh):
        oy = ky * dh - ph + np.arange(h) * sh
        my = (oy >= 0) & (oy < hout)
        for kx in range(kw):
            ox = kx * dw - pw + np.arange(w) * sw
            mx = (ox >= 0) & (ox < wout)
            if my.any() and mx.any():
                sub = g[:, oy[my]][:, :, ox[mx]]
                view = cols[:, ky, kx]
                view[np.ix_(np.arange(view.shape[0]), np.where(my)[0], np.where(mx)[0])] = sub


class ConvTranspose2d(Function):
    def prepare(self, *args):
        self.has_bias = len(args) > 2 and args[2] is not None

    def to_save(self, tensors):
        return (0, 1)

    def forward(self, x, weight, bias=None, out=None, stride=(1, 1), padding=(0, 0),
                output_padding=(0, 0), groups=1, dilation=(1, 1)):  # fmt: skip
        if x.ndim != 4 or weight.ndim != 4:
            raise RuntimeError(
                "conv_transpose2d: expected input [N, C, H, W] and weight "
                f"[C_in, C_out/groups, kh, kw], got {list(x.shape)} and {list(weight.shape)}"
            )
        n, cin, h, w = x.shape
        if weight.shape[0] != cin:
            raise RuntimeError(
                f"Given transposed=1, weight of size {list(weight.shape)}, expected input"
                f"{list(x.shape)} to have {weight.shape[0]} channels, but got {cin} channels "
                "instead"
            )
        g = groups
        cout_g, kh, kw = weight.shape[1], weight.shape[2], weight.shape[3]
        cout = cout_g * g
        (sh, sw), (ph, pw), (oph, opw), (dh, dw) = stride, padding, output_padding, dilation
        hout = _out_size(h, kh, sh, ph, dh, oph)
        wout = _out_size(w, kw, sw, pw, dw, opw)
        if hout <= 0 or wout <= 0:
            raise RuntimeError(
                f"conv_transpose2d: the output size {hout}x{wout} is not positive for input "
                f"{list(x.shape)}"
            )
        self.has_bias = bias is not None
        self.geom = ((kh, kw), (sh, sw), (ph, pw), (dh, dw), (h, w))
        self.g, self.shape = g, (n, cout, hout, wout)
        dev, dt = x._device, x._dtype
        y = kernels.empty((n, cout, hout, wout), dt, dev)
        if _live(x):
            xp = kernels.xp_of(x)
            y._data[...] = 0
            cin_g = cin // g
            cols = kernels.Scratch((cout_g, kh, kw, h, w), dt, dev)
            for i in range(n):
                for gi in range(g):
                    xs = x._data[i, gi * cin_g : (gi + 1) * cin_g].reshape(cin_g, h * w)
                    wg = weight._data[gi * cin_g : (gi + 1) * cin_g].reshape(cin_g, -1)
                    cols.data.reshape(-1, h * w)[...] = wg.T @ xs
                    _col2im(xp, cols.data, y._data[i, gi * cout_g : (gi + 1) * cout_g], self.geom)
            cols.release()
            if bias is not None:
                y._data += bias._data[None, :, None, None]
        return y

    def backward(self, gy):
        x, weight = self.saved_tensors
        needs = [e is not None for e in self._edges]
        n, cout, hout, wout = self.shape
        (kh, kw), (sh, sw), (ph, pw), (dh, dw), (h, w) = self.geom
        g = self.g
        cin = x.shape[1]
        cin_g, cout_g = cin // g, cout // g
        dev, dt = gy._device, gy._dtype
        gx = gw = gb = None
        if needs[0]:  # conv2d of the gradient with the same weight and geometry
            from engine.ops.nn.conv import conv2d

            gx = conv2d(gy.detach(), weight.detach(), None, (sh, sw), (ph, pw), (dh, dw), g)
            if gx.shape[2:] != (h, w):  # output_padding rows/cols beyond the input: none
                gx = gx[:, :, :h, :w].contiguous()
        if len(needs) > 1 and needs[1]:
            gw = kernels.zeros(tuple(weight.shape), dt, dev)
            if _live(gy):
                xp = kernels.xp_of(gy)
                cols = kernels.Scratch((cout_g, kh, kw, h, w), dt, dev)
                for i in range(n):
                    for gi in range(g):
                        _im2col(
                            xp, gy._data[i, gi * cout_g : (gi + 1) * cout_g], self.geom, cols.data
                        )
                        xs = x._data[i, gi * cin_g : (gi + 1) * cin_g].reshape(cin_g, h * w)
                        gw._data[gi * cin_g : (gi + 1) * cin_g] += (
                            xs @ cols.data.reshape(-1, h * w).T
                        ).reshape(cin_g, cout_g, kh, kw)
                cols.release()
        if self.has_bias and needs[2]:
            gb = kernels.empty((cout,), dt, dev)
            if _live(gy):
                gb._data[...] = gy._data.sum(axis=(0, 2, 3))
            cuda_reduce.charge(dev, gy._data, (0, 2, 3))  # the bias fallback's GPU staging
        return (gx, gw, gb) if self.has_bias else (gx, gw)

    def name(self):
        return "ConvolutionBackward0"


def conv_transpose2d(
    input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1
):
    """Transposed 2-D convolution of input [N, C_in, H, W] (or unbatched) with weight
    [C_in, C_out/groups, kh, kw] (PyTorch's signature and output size)."""
    unbatched = input.ndim == 3
    x = input.unsqueeze(0) if unbatched else input
    args = (x, weight) if bias is None else (x, weight, bias)
    # float64 on cpu: torch's slow_conv_transpose2d, whose column blocks the rank-generic node
    # charges as the profiler shows them (groups > 1: values only, see conv3d.ConvTransposeNd)
    slow = groups == 1 and x.ndim == 4 and weight.ndim == 4 and _slow_cpu(x._device, x._dtype)
    y = (ConvTransposeNd if slow else ConvTranspose2d).apply(
        *args,
        op="conv_transpose2d",
        stride=_pair(stride, "stride"),
        padding=_pair(padding, "padding"),
        output_padding=_pair(output_padding, "output_padding"),
        groups=groups,
        dilation=_pair(dilation, "dilation"),
    )
    return y.squeeze(0) if unbatched else y


def _register() -> None:
    from engine.ops.registry import Scenario, register

    register(
        "conv_transpose2d",
        conv_transpose2d,
        functional=True,
        scenario=Scenario(
            inputs=("input", "weight"),
            optional_inputs=("bias",),
            args=(
                ("stride", int, 1, ""),
                ("padding", int, 0, ""),
                ("output_padding", int, 0, ""),
                ("groups", int, 1, ""),
                ("dilation", int, 1, ""),
            ),
            doc="transposed 2-D convolution (upsampling)",
        ),
    )


_register()

__all__ = ["conv_transpose2d"]
