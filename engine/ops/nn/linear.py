"""linear: y = x @ W.T + b in one primitive (PyTorch's addmm)."""

from __future__ import annotations

import math

from engine import kernels
from engine.amp.autocast_mode import STATE as _AUTOCAST
from engine.autograd.function import Function
from engine.backends import cuda_reduce
from engine.ops.common import device_of, result_buffer, result_type
from engine.ops.nn.common import _blas_operand, _live, _needs, _reshaped, _same_dtype
from engine.ops.views import UnsafeView, view_array


class Linear(Function):
    """y = x @ W.T + b with one output buffer (PyTorch's addmm for 2-D input)."""

    def to_save(self, tensors):
        idx = []
        if tensors[1].requires_grad:
            idx.append(0)  # grad_W = g.T @ x
        if tensors[0].requires_grad:
            idx.append(1)  # grad_x = g @ W
        self._save_idx = tuple(idx)
        return self._save_idx

    def forward(self, x, weight, bias=None, out=None):
        if weight.ndim != 2:
            raise RuntimeError(
                f"linear: weight must be 2-D [out_features, in_features], got {list(weight.shape)}"
            )
        n_out, n_in = weight.shape
        if x.ndim == 0 or x.shape[-1] != n_in:
            rows = math.prod(x.shape[:-1]) if x.ndim else 1
            raise RuntimeError(
                f"mat1 and mat2 shapes cannot be multiplied ({rows}x{x.shape[-1] if x.ndim else 1} "
                f"and {n_in}x{n_out})"
            )
        if bias is not None and bias.shape not in ((n_out,), ()):
            raise RuntimeError(f"linear: bias must have shape [{n_out}], got {list(bias.shape)}")
        _same_dtype("linear", x, weight, bias)
        self.x_shape, self.w_shape, self.has_bias = x.shape, weight.shape, bias is not None
        dev = device_of(x, weight, bias)
        shape = x.shape[:-1] + (n_out,)
        y = result_buffer(out, shape, result_type(x, weight), dev, "linear")
        if _live(dev):
            xp = kernels.xp_of_device(dev)
            rows = math.prod(x.shape[:-1])
            x2, keep = (x._data, x) if x.ndim == 2 else _reshaped(x, (rows, n_in))
            y2 = y._data if y.ndim == 2 else y._data.reshape(rows, n_out)
            kernels.matmul_into(xp, x2, weight._data.T, y2)
            if bias is not None:
                xp.add(y2, bias._data, out=y2)
            del keep
        return y

    def backward(self, g):
        saved = dict(zip(self._save_idx, self.saved_tensors, strict=True))
        needs = _needs(self)
        n_out, n_in = self.w_shape
        rows = math.prod(self.x_shape[:-1])
        dev, dt = g._device, g._dtype
        g2, gkeep = _reshaped(g, (rows, n_out))
        xp = kernels.xp_of(g)
        gx = gw = gb = None
        # PyTorch's gradients here are views (weight: mm(...).t() through TBackward0; bias:
        # sum(0, keepdim=True).view(out); an N-d input's: mm(...).view(x.shape)), so the same
        # buffers, kept as views of them: a second gradient reaching one of them is added out of
        # place, as PyTorch's InputBuffer does for a view (its storage is shared with the base).
        if needs[0]:
            w = saved[1]
            gx = kernels.empty((rows, n_in), dt, dev)
            if _live(dev):
                ga, gcopy = _blas_operand(g, g2)
                kernels.matmul_into(xp, ga, w._data, gx._data)
                del ga, gcopy
            gx = gx.view(self.x_shape) if len(self.x_shape) != 2 else gx
        if needs[1]:
            x = saved[0]
            gw = kernels.empty(self.w_shape, dt, dev)
            if _live(dev):
                x2, xkeep = _reshaped(x, (rows, n_in))
                ga, gcopy = _blas_operand(g, g2)
                kernels.matmul_into(xp, ga.T, x2, gw._data)
                del xkeep, x2, ga, gcopy
            del x
            gw = gw.view(self.w_shape)
        # The bias's gradient is PyTorch's sum_to in validate_outputs, after AddmmBackward0's
        # apply returned: its unpacked saved tensors are gone by then, which frees a tensor a
        # checkpoint recomputed (the unpack hook handed over its only reference) first.
        del saved
        if self.has_bias and needs[2]:
            gb = kernels.empty((1, n_out), dt, dev)
            if _live(dev):
                xp.sum(g2, axis=0, out=gb._data[0])
            cuda_reduce.charge(dev, g2, (0,))  # torch's global-reduce staging on a GPU
            gb = gb.view(n_out)
        del gkeep
        return (gx, gw, gb) if self.has_bias else (gx, gw)

    @property
    def edge_order(self):
        return (2, 0, 1) if self.has_bias else None  # addmm(bias, input, weight.t())

    t_edges = (1,)  # the weight: torch's node reaches it through weight.t()'s TBackward0

    def name(self):
        return "AddmmBackward0" if len(self.x_shape) == 2 else "LinearBackward0"


class MmTransposed(Function):
    """x.mm(w.t()) for a 2-D x, as at::matmul runs it: MmBackward0, whose second input is the
    transposed weight (TBackward0). Backward makes the weight's gradient first, in the weight's
    own layout (torch's mm_mat2_backward), so that TBackward0 hands AccumulateGrad a buffer it
    takes over; then x's."""

    def to_save(self, tensors):
        x, wt = tensors
        idx = []
        if wt.requires_grad:
            idx.append(0)  # grad_w = g.T @ x
        if x.requires_grad:
            idx.append(1)  # grad_x = g @ w
        self._save_idx = tuple(idx)
        return self._save_idx

    def forward(self, x, wt, out=None):
        self.shapes = (x.shape, wt.shape)
        dev = device_of(x, wt)
        y = kernels.empty((x.shape[0], wt.shape[1]), result_type(x, wt), dev)
        if _live(dev):
            kernels.matmul_into(kernels.xp_of_device(dev), x._data, wt._data, y._data)
        return y

    def backward(self, g):
        saved = dict(zip(self._save_idx, self.saved_tensors, strict=True))
        needs = _needs(self)
        (rows, n_in), (_, n_out) = self.shapes
        dev, dt = g._device, g._dtype
        g2, gkeep = _reshaped(g, (rows, n_out))
        xp = kernels.xp_of(g)
        gx = gwt = None
        if needs[1]:
            x = saved[0]
            gw = kernels.empty((n_out, n_in), dt, dev)
            if _live(dev):
                ga, gcopy = _blas_operand(g, g2)
                kernels.matmul_into(xp, ga.T, x._data, gw._data)
                del ga, gcopy
            del x
            gwt = gw.t()
            del gw
        if needs[0]:
            wt = saved[1]
            gx = kernels.empty((rows, n_in), dt, dev)
            if _live(dev):
                ga, gcopy = _blas_operand(g, g2)
                kernels.matmul_into(xp, ga, wt._data.T, gx._data)
                del ga, gcopy
            del wt
        del saved, gkeep
        return gx, gwt

    def name(self):
        return "MmBackward0"


def mm_weight(x, w):
    """x.mm(w.t()) for a 2-D x: MmBackward0 through w.t()'s TBackward0."""
    return MmTransposed.apply(x, w.t(), op="mm")


def linear(input, weight, bias=None):
    """y = input @ weight.T + bias (weight [out_features, in_features]), dispatched as torch's
    at::linear: addmm for a 2-D input with a bias, and for a contiguous N-d one (a vector too)
    viewed as 2-D (_flatten_nd_linear, the result a view of addmm's); otherwise
    at::matmul(input, weight.t()) (one mm through w.t()'s TBackward0; a vector unsqueezed to
    one row and squeezed back in place; an N-d input folded by reshape, which copies one that
    cannot be viewed, and _unsafe_view back) and the bias added in place."""
    args = (input, weight) if bias is None else (input, weight, bias)
    if weight.ndim != 2 or input.ndim == 0 or input.shape[-1] != weight.shape[1]:
        return Linear.apply(*args, op="linear")  # (its refusals)
    if bias is not None and input.ndim == 2:
        return Linear.apply(input, weight, bias, op="linear")
    rows = math.prod(input.shape[:-1])
    if not rows:  # (an empty batch: the one-node form)
        return Linear.apply(*args, op="linear")
    if bias is not None and bias.ndim == 1 and input.is_contiguous():
        # _flatten_nd_linear: addmm over the 2-D view, the result a view of addmm's (an in-place
        # write to it goes through CopySlices, with the memory of torch's)
        flat = input.view(rows, input.shape[-1])
        y = Linear.apply(flat, weight, bias, op="linear")
        return y.view(input.shape[:-1] + (weight.shape[0],))
    if _AUTOCAST.active:
        # autocast's casting policy and parameter cache are linear's: one node (an input that
        # cannot be viewed as 2-D folded by a copy first)
        if input.ndim > 2 and view_array(input, (rows, input.shape[-1])) is None:
            y = linear(input.reshape(rows, input.shape[-1]), weight, bias)
            return y.view(input.shape[:-1] + (weight.shape[0],))
        return Linear.apply(*args, op="linear")
    _same_dtype("linear", input, weight, bias)
    if input.ndim == 1:  # matmul of a vector: unsqueeze(0).mm(w.t()).squeeze_(0) (MmBackward0
        # makes the weight's gradient, then the input's)
        y = mm_weight(input.unsqueeze(0), weight).squeeze_(0)
    elif input.ndim == 2:
        y = mm_weight(input, weight)
    else:
        flat = (rows, input.shape[-1])
        if view_array(input, flat) is not None:
            folded = mm_weight(input.reshape(flat), weight)
        else:  # reshape's copy: _unsafe_view(clone(contiguous)), as torch's
            folded = mm_weight(
                UnsafeView.apply(input.contiguous(), op="_unsafe_view", shape=flat), weight
            )
        y = UnsafeView.apply(folded, op="_unsafe_view", shape=input.shape[:-1] + (weight.shape[0],))
        del folded
    if bias is not None:
        y.add_(bias)
    return y
