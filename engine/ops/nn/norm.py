"""Normalisation: batch_norm, layer_norm."""

from __future__ import annotations

import math

import numpy as np

from engine import kernels
from engine.autograd.function import Function
from engine.ops.common import result_buffer
from engine.ops.nn.common import _SCRATCH, _live, _needs, _reshaped


def _channel_sums(xp, a3, b3=None):
    """Per-channel sum of a (or of a*b) over [N, C, L] in float64, on CuPy (the cpu passes are
    kernels.row_sums): one reduction over the batch and the positions (a call per sample made
    BatchNorm2d 5 ms of bench small-cnn's 27 ms step on an H200)."""
    if b3 is None:
        return xp.sum(a3, axis=(0, 2), dtype=np.float64)
    return _gpu_reduction(xp, "dot", a3.dtype)(a3, b3, axis=(0, 2))


def _centered_dot(xp, g3, x3, mean):
    """Per-channel sum of g * (x - mean) over [N, C, L] on CuPy: one reduction kernel, no
    scratch."""
    kernel = _gpu_reduction(xp, "centered", x3.dtype)
    return kernel(g3, x3, mean[None, :, None], axis=(0, 2))


_GPU_REDUCTIONS: dict = {}


def _gpu_reduction(xp, name: str, dtype):
    """CuPy reduction kernels over [N, C, L] to [C] in float64 (made once per kind of input
    dtype): "dot" sums a * b, "centered" sums g * (x - mean[c]); each reads its operands once,
    with no temporary."""
    half = np.dtype(dtype).itemsize < 4  # CuPy's float16 converts to float, not to double
    kernel = _GPU_REDUCTIONS.get((name, half))
    if kernel is None:
        d = "(double)(float)" if half else "(double)"
        if name == "dot":
            params, expr = "T a, T b", f"{d}a * {d}b"
        else:
            params, expr = "T g, T x, M m", f"{d}g * ({d}x - (double)m)"
        kernel = xp.ReductionKernel(
            params,
            "float64 y",
            expr,
            "a + b",
            "y = a",
            "0",
            f"memprof_channel_{name}",
            reduce_type="double",
        )
        _GPU_REDUCTIONS[name, half] = kernel
    return kernel


def _temporary_pair(c, dt, dev) -> None:
    """Two [C] blocks made and freed, the second first (a kernel's per-channel workspace)."""
    a = kernels.empty((c,), dt, dev)
    b = kernels.empty((c,), dt, dev)
    del b, a


def _per_thread_stats(x) -> bool:
    """Whether torch's cpu batch norm kernels take their channels-last path for x: a contiguous
    input whose image size is 1 ((N, C), (N, C, 1, 1)), float32 or float64 (the reduced
    precision kernels are others). Its statistics and gradient sums are per-thread partial sums
    over C in a buffer of their own. (A channels-last 4-D input takes it too; the engine makes
    batch norm's output contiguous, so that case is not modelled.)"""
    return (
        x._dtype.name in ("float32", "float64")
        and math.prod(x.shape[2:]) == 1
        and x.is_contiguous()
    )


def _dense(t) -> bool:
    from engine.backends.strided import is_dense

    return is_dense(tuple(t.shape), t.stride())


class BatchNorm(Function):
    """native_batch_norm: output plus save_mean / save_invstd [C]; running stats updated in place."""

    def prepare(self, *args):
        self.present = tuple(a is not None for a in args[1:5])

    def forward(
        self,
        x,
        weight=None,
        bias=None,
        running_mean=None,
        running_var=None,
        out=None,
        training=True,
        momentum=0.1,
        eps=1e-5,
    ):
        self.present = (
            weight is not None,
            bias is not None,
            running_mean is not None,
            running_var is not None,
        )
        if x.ndim < 2:
            raise ValueError(f"batch_norm: expected at least 2-D input (got {x.ndim}D input)")
        n, c = x.shape[:2]
        length = math.prod(x.shape[2:])
        if training and n * length <= 1:
            raise ValueError(
                f"Expected more than 1 value per channel when training, got input size {list(x.shape)}"
            )
        if not training and (running_mean is None or running_var is None):
            raise RuntimeError("running_mean and running_var must be defined in evaluation mode")
        self.training, self.eps, self.x_shape = training, eps, x.shape
        dev, dt = x._device, x._dtype
        y = result_buffer(out, x.shape, dt, dev, "batch_norm")
        # torch's cpu kernel: in training save_mean / save_invstd [C] (kept), then two [C]
        # temporaries for the statistics and two for the transform's scale and shift, each
        # pair freed last made first; in eval only the transform's pair (its saved stats are
        # empty: backward reads the running ones)
        cpu_kernel = dev.type == "cpu"  # (meta plans a GPU run: cuda's kernels)
        if training:
            mean = kernels.empty((c,), dt, dev)
            invstd = kernels.empty((c,), dt, dev)
            if cpu_kernel:
                if _per_thread_stats(x) and n * length > kernels.get_num_threads():
                    # the channels-last collect_stats: mean and var_sum [C], and while they
                    # live a [threads, C] buffer of per-thread partial sums
                    a = kernels.empty((c,), dt, dev)
                    b = kernels.empty((c,), dt, dev)
                    partials = kernels.empty((kernels.get_num_threads(), c), dt, dev)
                    del partials, b, a
                else:
                    _temporary_pair(c, dt, dev)
        else:
            mean = kernels.Scratch((c,), dt, dev)
            invstd = kernels.Scratch((c,), dt, dev)
        if cpu_kernel:
            _temporary_pair(c, dt, dev)
        if _live(dev):
            xp = kernels.xp_of(x)
            x3, keep = _reshaped(x, (n, c, length))
            y3 = y._data.reshape(n, c, length)
            m = n * length
            cpu = xp is np
            if training:
                if cpu:  # each row's sums in a fixed order (kernels.row_sums), then the rows'
                    mu = np.add.reduce(kernels.row_sums(0, x3), axis=0) / m
                    mean._data[...] = mu  # var's terms are (x - mean) in x's dtype, squared
                    var = np.add.reduce(kernels.row_sums(1, x3, mean._data), axis=0) / m
                else:
                    mu = _channel_sums(xp, x3) / m
                    mean._data[...] = mu
                    xp.subtract(x3, mean._data[:, None], out=y3)
                    var = _channel_sums(xp, y3, y3) / m
                invstd._data[...] = 1.0 / xp.sqrt(var + eps)
                with_stats = running_mean is not None
                if with_stats:
                    rm, rv = running_mean._data, running_var._data
                    rm[...] = (1 - momentum) * rm + momentum * mu
                    rv[...] = (1 - momentum) * rv + momentum * var * (m / max(m - 1, 1))
                    running_mean._storage.version += 1
                    running_var._storage.version += 1
            else:
                mean.data[...] = running_mean._data
                invstd.data[...] = 1.0 / xp.sqrt(running_var._data.astype(np.float64) + eps)
                if not cpu:
                    xp.subtract(x3, mean.data[:, None], out=y3)
            stats = invstd._data if training else invstd.data
            scale = stats if weight is None else stats * weight._data
            if cpu:  # y = ((x - mean) * scale) + bias in one pass
                mu_t = mean._data if training else mean.data
                b = bias._data.reshape(-1) if bias is not None else None
                kernels.row_affine(x3, mu_t, scale, y3, b)
            else:
                xp.multiply(y3, scale[:, None], out=y3)
                if bias is not None:
                    xp.add(y3, bias._data[:, None], out=y3)
            del keep
        # torch's node keeps the running stats it was given (released with it; never read
        # back here, so a later update of a module's buffers does not trip a version check)
        self.save(running_mean=running_mean, running_var=running_var)
        if training:
            self.save(mean=mean, invstd=invstd)
        else:  # (uncharged workspace: kept as plain arrays for backward, as torch recomputes)
            self.eval_stats = (mean.data, invstd.data)
            mean.release()
            invstd.release()
        return y

    def to_save(self, tensors):
        return (0, 1) if self.present[0] else (0,)

    def backward(self, g):
        saved = self.saved_tensors
        x = saved[0]
        weight = saved[1] if self.present[0] else None
        if self.training:
            mean, invstd = self.kept("mean")._data, self.kept("invstd")._data
        else:
            mean, invstd = self.eval_stats
        needs = _needs(self)
        present = [True, *self.present]
        slots = [i for i, p in enumerate(present) if p]  # arg position of each tensor input
        want = {slot: needs[k] for k, slot in enumerate(slots)}
        dev, dt = g._device, g._dtype
        n, c = self.x_shape[:2]
        length = math.prod(self.x_shape[2:])
        m = n * length
        gx = gw = gb = first = None
        # torch's batch_norm_backward_cpu_template makes grad_input, then the weight's and
        # bias's gradients, and on its contiguous path (input and gradient alike) makes
        # grad_input again, the first freed as it is replaced: an input-sized block at the
        # backward's peak (cpu only: cuda's cudnn kernel, and meta planning a GPU run, one)
        if want[0]:
            first = kernels.empty(self.x_shape, dt, dev)
        if want.get(1):
            gw = kernels.empty((c,), dt, dev)
        if want.get(2):
            gb = kernels.empty((c,), dt, dev)
        if want[0]:
            if dev.type == "cpu" and x.stride() == g.stride() and _dense(x):
                gx = kernels.empty(self.x_shape, dt, dev)
                del first
            else:
                gx, first = first, None
        if dev.type == "cpu" and _per_thread_stats(x):
            # the channels-last backward kernel: ones [C] standing in for a missing weight, in
            # eval the invstd [C] it computes, and a [2, threads, C] buffer of per-thread sums
            # (sum and dot), freed together when it returns
            ones = None if weight is not None else kernels.empty((c,), dt, dev)
            inv_eval = None if self.training else kernels.empty((c,), dt, dev)
            partials = kernels.empty((2, kernels.get_num_threads(), c), dt, dev)
            del partials, inv_eval, ones
        if _live(dev):
            xp = kernels.xp_of(g)
            g3, gkeep = _reshaped(g, (n, c, length))
            x3, xkeep = _reshaped(x, (n, c, length))
            inv = invstd.astype(np.float64)
            w = weight._data.astype(np.float64) if weight is not None else 1.0
            if xp is np:  # sum(g) and sum(g * (x - mean)) per row in one pass
                sum_g, dot = (np.add.reduce(p, axis=0) for p in kernels.row_sums(2, g3, mean, x3))
            else:
                sum_g = _channel_sums(xp, g3)
                if gx is not None:  # x - mean in the grad_input buffer, which becomes dx below
                    c3 = gx._data.reshape(n, c, length)
                    xp.subtract(x3, mean[:, None], out=c3)
                    dot = _channel_sums(xp, g3, c3)  # sum(g * (x - mean))
                else:
                    dot = _centered_dot(xp, g3, x3, mean)
            if gw is not None:
                gw._data[...] = dot * inv
            if gb is not None:
                gb._data[...] = sum_g
            if gx is not None:
                gx3 = gx._data.reshape(n, c, length)
                if not self.training:
                    xp.multiply(g3, (inv * w).astype(dt.np)[:, None], out=gx3)
                else:
                    # dx = w*inv * (g - sum_g/m - (x-mean) * inv^2 * dot/m)
                    k = (-(inv * inv) * dot / m).astype(dt.np)
                    gm, s = (sum_g / m).astype(dt.np), (w * inv).astype(dt.np)
                    if xp is np:  # in one pass (kernels.row_affine)
                        kernels.row_affine(x3, mean, k, gx3, gm, g3, s)
                    else:  # gx3 holds x - mean
                        xp.multiply(gx3, k[:, None], out=gx3)
                        xp.add(gx3, g3, out=gx3)
                        xp.subtract(gx3, gm[:, None], out=gx3)
                        xp.multiply(gx3, s[:, None], out=gx3)
            del gkeep, xkeep
        grads = {0: gx, 1: gw, 2: gb}
        return tuple(grads.get(slot) for slot in slots)

    def name(self):
        return "NativeBatchNormBackward0"


class LayerNorm(Function):
    """native_layer_norm over the trailing dims: output plus mean / rstd per row."""

    def prepare(self, *args):
        self.present = (args[1] is not None, args[2] is not None)

    def forward(self, x, weight=None, bias=None, out=None, normalized_shape=(), eps=1e-5):
        normalized_shape = tuple(normalized_shape)
        k = len(normalized_shape)
        if k == 0 or x.shape[x.ndim - k :] != normalized_shape:
            raise RuntimeError(
                f"Given normalized_shape={list(normalized_shape)}, expected input with shape "
                f"[*, {', '.join(str(s) for s in normalized_shape)}], but got input of size{list(x.shape)}"
            )
        self.present = (weight is not None, bias is not None)
        d = math.prod(normalized_shape)
        rows = x.numel() // d if d else 0
        self.x_shape, self.dims, self.eps = x.shape, (rows, d), eps
        self.normalized_shape = normalized_shape
        dev, dt = x._device, x._dtype
        y = result_buffer(out, x.shape, dt, dev, "layer_norm")
        mean = kernels.empty((rows,), dt, dev)
        rstd = kernels.empty((rows,), dt, dev)
        if _live(dev):
            xp = kernels.xp_of(x)
            x2, keep = _reshaped(x, (rows, d))
            y2 = y._data.reshape(rows, d)
            if xp is np:  # one pass a row (kernels.layer_norm_forward)
                w = weight._data.reshape(-1) if weight is not None else None
                b = bias._data.reshape(-1) if bias is not None else None
                kernels.layer_norm_forward(x2, w, b, y2, mean._data, rstd._data, eps)
            else:
                xp.mean(x2, axis=1, out=mean._data)
                xp.subtract(x2, mean._data[:, None], out=y2)
                var = xp.einsum("md,md->m", y2, y2) / d
                rstd._data[...] = 1.0 / xp.sqrt(var + eps)
                xp.multiply(y2, rstd._data[:, None], out=y2)
                if weight is not None:
                    xp.multiply(y2, weight._data.reshape(-1), out=y2)
                if bias is not None:
                    xp.add(y2, bias._data.reshape(-1), out=y2)
            del keep
        self.save(mean=mean, rstd=rstd)
        return y

    def to_save(self, tensors):
        return (0, 1) if self.present[0] else (0,)

    def backward(self, g):
        saved = self.saved_tensors
        x = saved[0]
        weight = saved[1] if self.present[0] else None
        mean, rstd = self.kept("mean"), self.kept("rstd")
        needs = _needs(self)
        slots = [0] + [i + 1 for i, p in enumerate(self.present) if p]
        want = {slot: needs[k] for k, slot in enumerate(slots)}
        rows, d = self.dims
        dev, dt = g._device, g._dtype
        gx = gw = gb = None
        if want[0]:
            gx = kernels.empty(self.x_shape, dt, dev)
        if want.get(1):
            gw = kernels.empty(self.normalized_shape, dt, dev)
        if want.get(2):
            gb = kernels.empty(self.normalized_shape, dt, dev)
        if dev.type == "cpu" and (gw is not None or gb is not None):
            # torch's cpu kernel sums dgamma and dbeta per thread first: one block of 2 x
            # threads x D, made and freed (cuda reduces in shared memory; meta plans a GPU run)
            partials = kernels.empty((2, kernels.get_num_threads(), d), dt, dev)
            del partials
        if _live(dev) and isinstance(g._data, np.ndarray):  # (kernels.layer_norm_backward)
            g2, gkeep = _reshaped(g, (rows, d))
            x2, xkeep = _reshaped(x, (rows, d))
            kernels.layer_norm_backward(
                x2,
                g2,
                weight._data.reshape(-1) if weight is not None else None,
                mean._data,
                rstd._data,
                gx._data.reshape(rows, d) if gx is not None else None,
                gw._data.reshape(-1) if gw is not None else None,
                gb._data.reshape(-1) if gb is not None else None,
            )
            del gkeep, xkeep
        elif _live(dev):
            xp = kernels.xp_of(g)
            g2, gkeep = _reshaped(g, (rows, d))
            x2, xkeep = _reshaped(x, (rows, d))
            # x-hat in grad_input's buffer, or in workspace when none is wanted (torch's kernel
            # makes no block of the input's size)
            xhat = gx if gx is not None else kernels.Scratch(self.x_shape, dt, dev)
            h2 = xhat._data.reshape(rows, d) if gx is not None else xhat.data.reshape(rows, d)
            xp.subtract(x2, mean._data[:, None], out=h2)
            xp.multiply(h2, rstd._data[:, None], out=h2)
            if gw is not None:
                kernels.einsum_into(xp, "md,md->d", g2, h2, out=gw._data.reshape(-1))
            if gb is not None:
                xp.sum(g2, axis=0, out=gb._data.reshape(-1))
            if gx is not None:
                wv = weight._data.reshape(-1) if weight is not None else None
                if wv is not None:
                    a1 = g2 @ wv  # row sums of g*w
                    a2 = xp.einsum("md,md,d->m", g2, h2, wv)
                else:
                    a1 = g2.sum(axis=1)
                    a2 = xp.einsum("md,md->m", g2, h2)
                # dx = rstd * (g*w - a1/d - xhat * a2/d)
                xp.multiply(h2, (-a2 / d)[:, None], out=h2)
                xp.subtract(h2, (a1 / d)[:, None], out=h2)
                _add_product_rows(xp, h2, g2, wv)
                xp.multiply(h2, rstd._data[:, None], out=h2)
            del xhat, gkeep, xkeep
        grads = {0: gx, 1: gw, 2: gb}
        return tuple(grads.get(slot) for slot in slots)

    def name(self):
        return "NativeLayerNormBackward0"


def _add_product_rows(xp, out2, g2, wv):
    """out2 += g2 * wv (wv broadcast over rows, or None for 1) with bounded scratch."""
    if wv is None:
        xp.add(out2, g2, out=out2)
        return
    rows, d = out2.shape
    step = max(1, _SCRATCH // max(d, 1))
    scratch = xp.empty((min(step, rows), d), dtype=out2.dtype)
    for i in range(0, rows, step):
        j = min(i + step, rows)
        s = scratch[: j - i]
        xp.multiply(g2[i:j], wv, out=s)
        xp.add(out2[i:j], s, out=out2[i:j])


def batch_norm(
    input, running_mean, running_var, weight=None, bias=None, training=False, momentum=0.1, eps=1e-5
):
    """F.batch_norm's argument order; running stats (when given) are updated in place in training."""
    return BatchNorm.apply(
        input,
        weight,
        bias,
        running_mean,
        running_var,
        op="batch_norm",
        training=training,
        momentum=momentum,
        eps=eps,
    )


def layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5):
    if isinstance(normalized_shape, int):
        normalized_shape = (normalized_shape,)
    return LayerNorm.apply(
        input, weight, bias, op="layer_norm", normalized_shape=tuple(normalized_shape), eps=eps
    )


def instance_norm(
    input,
    running_mean=None,
    running_var=None,
    weight=None,
    bias=None,
    use_input_stats=True,
    momentum=0.1,
    eps=1e-5,
):
    """torch's at::instance_norm: batch norm of the input viewed as [1, N*C, ...] (weight, bias
    and running stats repeated N times), the running stats averaged back over N, the result
    viewed back."""
    shape = tuple(input.shape)
    if use_input_stats:
        spatial = shape[0] * math.prod(shape[2:])
        if spatial == 1:
            raise ValueError(
                f"Expected more than 1 spatial element when training, got input size "
                f"torch.Size({list(shape)})"
            )
    elif running_mean is None or running_var is None:
        raise RuntimeError(
            "Expected running_mean and running_var to be defined when use_input_stats is false"
        )
    b, c = shape[0], shape[1]
    weight_ = None if weight is None else weight.repeat(b)
    bias_ = None if bias is None else bias.repeat(b)
    mean_ = None if running_mean is None else running_mean.repeat(b)
    var_ = None if running_var is None else running_var.repeat(b)
    x = input.contiguous().view((1, b * c) + shape[2:])
    out = batch_norm(x, mean_, var_, weight_, bias_, use_input_stats, momentum, eps)
    from engine.autograd.grad_mode import no_grad

    with no_grad():
        if running_mean is not None:
            running_mean.copy_(mean_.view(b, c).mean(0))
        if running_var is not None:
            running_var.copy_(var_.view(b, c).mean(0))
    return out.view(shape)
