"""F.linear_cross_entropy (torch 2.13): linear then cross_entropy, and LinearCrossEntropyOptions.

The reference path (options=None) is torch's own composite: linear(input, W, b) (W and b
flattened for a K-dimensional loss), the logits reshaped to (*N, C, *out_features), then
cross_entropy; it allocates exactly what those two allocate, forward and backward.

torch's chunked path (options given, reduction mean/sum/none, no label smoothing, int64 target,
no K-dimensional loss) is torch.nn.modules.linear_cross_entropy's pair of custom ops, written
here as two Functions for float32 / float64 inputs (acc_dtype the input's): the logits exist only
as one (batch_chunk_size, num_classes) buffer. mean/sum compute the loss *and* the gradients
in forward, chunk by chunk, and keep the gradient buffers for backward (which scales them by
the upstream gradient in place, after torch's autograd materialises zeros for the three unused
gradient outputs); none computes the per-row loss in forward and recomputes the gradients, chunk
by chunk, in backward. Every buffer, and the order they are made and freed, is torch's CPU one
(tests/engine/test_linear_cross_entropy.py); the few-byte scalars torch wraps (the mean's
divisor, the dot products) are kept as Python numbers. float16/bfloat16 inputs (the
mixed-precision acc_dtype layouts) are refused with NotImplementedError.
"""

from __future__ import annotations

import dataclasses
import math
import warnings

from engine import kernels
from engine.autograd.function import Function
from engine.ops.nn.common import _live

_AUTO_FALLBACK = ("compact", "aspect_ratio:2")
_AUTO_DEFAULTS = {  # (device type, dtype name) -> (acc_policy, chunking_method), as torch's
    ("cuda", "bfloat16"): ("compact", "aspect_ratio:2"),
    ("cuda", "float16"): ("compact", "aspect_ratio:2"),
    ("cpu", "bfloat16"): ("accurate", "aspect_ratio"),
    ("cpu", "float16"): ("accurate", "aspect_ratio"),
}
_ACC_DTYPES = ("float16", "bfloat16", "float32", "float64")


def _dtype_name(dtype) -> str:
    return str(dtype).removeprefix("engine.").removeprefix("torch.")


@dataclasses.dataclass(slots=True, frozen=True)
class LinearCrossEntropyOptions:
    """torch.nn.LinearCrossEntropyOptions: the chunking strategy of linear_cross_entropy's
    chunked path (validated as torch validates it)."""

    allow_retain_graph: bool = False
    batch_chunk_size: int | None = None
    chunking_method: str | None = "auto"
    acc_policy: str = "auto"
    acc_dtype: object = None

    def __post_init__(self):
        if self.acc_policy not in {"auto", "accurate", "balanced", "compact"}:
            raise ValueError(f"invalid acc_policy: {self.acc_policy!r}")
        if self.chunking_method is not None and self.chunking_method != "auto":
            name, sep, factor = self.chunking_method.partition(":")
            if not sep:
                factor = "1"
            if not (name == "aspect_ratio" and factor.isdigit() and int(factor) > 0):
                raise ValueError(f"invalid chunking_method: {self.chunking_method!r}")
        if not (
            self.batch_chunk_size is None
            or (isinstance(self.batch_chunk_size, int) and self.batch_chunk_size > 0)
        ):
            raise ValueError(
                f"batch_chunk_size must be positive int or None, got {self.batch_chunk_size!r}"
            )
        if self.acc_dtype is not None and _dtype_name(self.acc_dtype) not in _ACC_DTYPES:
            raise ValueError(
                f"acc_dtype must be one of {{None, torch.float16, torch.bfloat16, "
                f"torch.float32, torch.float64}}, got {self.acc_dtype!r}. Pass "
                "acc_dtype=None to let the op pick automatically."
            )


def _check(input, linear_weight, target, linear_bias, ignore_index):
    if input.ndim < 1 or input.ndim > 2:
        raise RuntimeError(f"expected input with dimensionality 1 or 2, got {input.ndim}")
    if linear_weight.ndim < 2:
        raise RuntimeError(
            f"expected linear_weight with dimensionality at least 2, got {linear_weight.ndim}"
        )
    num_batches = tuple(input.shape[:-1])
    in_features = input.shape[-1]
    if in_features != linear_weight.shape[-1]:
        raise RuntimeError(
            "expected equal input and linear_weight last dimensions (in_features), "
            f"got {input.shape[-1]} and {linear_weight.shape[-1]}, respectively"
        )
    num_classes = linear_weight.shape[0]
    out_features = tuple(linear_weight.shape[1:-1])
    if linear_bias is not None and tuple(linear_bias.shape) != (num_classes, *out_features):
        raise RuntimeError(
            "expected linear_bias shape "
            f"{(num_classes, *out_features)}, got {tuple(linear_bias.shape)}"
        )
    if out_features and not num_batches:
        raise RuntimeError(
            f"K-dimensional loss defined by linear_weight shape {tuple(linear_weight.shape)} "
            f"requires batched input, (N, {in_features}), got unbatched"
            f" input with shape {tuple(input.shape)}"
        )
    logits_shape = (*num_batches, num_classes, *out_features)
    if tuple(target.shape) == logits_shape and ignore_index is not None:
        raise RuntimeError("ignore_index cannot be specified when target contains probabilities")
    return in_features, num_classes, out_features, logits_shape


def linear_cross_entropy(
    input,
    linear_weight,
    target,
    *,
    linear_bias=None,
    weight=None,
    reduction: str = "mean",
    ignore_index: int | None = None,
    label_smoothing: float = 0.0,
    options: LinearCrossEntropyOptions | None = None,
):
    """cross_entropy(linear(input, linear_weight, linear_bias), target, ...) (torch 2.13's
    F.linear_cross_entropy; options=None, the reference path, only)."""
    from engine.ops.nn.linear import linear
    from engine.ops.nn.loss import cross_entropy

    in_features, num_classes, out_features, logits_shape = _check(
        input, linear_weight, target, linear_bias, ignore_index
    )
    ignore_index = -100 if ignore_index is None else ignore_index
    if options is not None:
        chunked = (
            not out_features
            and reduction in {"mean", "sum", "none"}
            and label_smoothing == 0.0
            and _dtype_name(target.dtype) == "int64"
        )
        if not chunked:
            warnings.warn(
                "linear_cross_entropy: ``options`` ignored; chunked path needs "
                "reduction in {'mean','sum','none'}, label_smoothing == 0, target.dtype"
                " == int64, out_features == (). Got "
                f"reduction={reduction!r}, label_smoothing={label_smoothing}, "
                f"target.dtype=torch.{_dtype_name(target.dtype)}, "
                f"out_features={tuple(out_features)}, tracing=False, linear_bias.shape="
                f"{tuple(linear_bias.shape) if linear_bias is not None else None}.",
                stacklevel=2,
            )
        else:
            return _chunked(
                input, linear_weight, target, linear_bias, weight, reduction, ignore_index,
                options,
            )  # fmt: skip
    if out_features:
        flat = math.prod(out_features, start=num_classes)
        linear_weight = linear_weight.reshape((flat, in_features))
        if linear_bias is not None:
            linear_bias = linear_bias.reshape(flat)
    logits = linear(input, linear_weight, linear_bias).reshape(logits_shape)
    return cross_entropy(
        logits,
        target,
        weight=weight,
        reduction=reduction,
        ignore_index=ignore_index,
        label_smoothing=label_smoothing,
    )


# ---------------------------------------------------------------------------------------------
# the chunked path (torch.nn.modules.linear_cross_entropy)

_SCALAR_NODE = "GeneratedBackwardFor_torch_nn__linear_cross_entropy_batch_chunked_defaultBackward"
_NONE_NODE = (
    "GeneratedBackwardFor_torch_nn__linear_cross_entropy_batch_chunked_no_reduction_defaultBackward"
)


def _resolve(options, num_batches, in_features, num_classes, dtype):
    """LinearCrossEntropyOptions._adjust for a float32/float64 input: (acc_policy, chunk size)."""
    acc_policy, method = options.acc_policy, options.chunking_method
    if method == "auto" and options.batch_chunk_size is not None:
        method = None
    # (torch's per-(device, dtype) picks name only float16/bfloat16: float32/float64 take the
    # fallback on every device)
    ap, cm = _AUTO_DEFAULTS.get(("cpu", _dtype_name(dtype)), _AUTO_FALLBACK)
    if acc_policy == "auto":
        acc_policy = ap
    if method == "auto":
        method = cm
    size = (
        num_batches
        if options.batch_chunk_size is None
        else min(options.batch_chunk_size, num_batches)
    )
    if method is not None:
        factor = int(method.split(":", 1)[1]) if ":" in method else 1
        inc = -(-num_classes // in_features)
        want = -(-num_batches // inc)
        size = min((1 << (want - 1).bit_length()) // factor, num_batches)
        if options.batch_chunk_size is not None and options.batch_chunk_size != size:
            raise ValueError(
                f"batch_chunk_size (={options.batch_chunk_size}) and chunking_method "
                f"('{method}') give different chunk sizes ({options.batch_chunk_size} vs "
                f"{size}); pass only one."
            )
    return acc_policy, max(1, size)


def _chunked(input, linear_weight, target, linear_bias, weight, reduction, ignore_index, options):
    from engine.autograd.grad_mode import is_grad_enabled

    name = _dtype_name(input.dtype)
    if name not in ("float32", "float64") or any(
        t is not None and t.dtype != input.dtype for t in (linear_weight, linear_bias, weight)
    ):
        raise NotImplementedError(
            "linear_cross_entropy: the engine's chunked path (options not None) supports "
            "float32 and float64 inputs (linear_weight, linear_bias and weight of the input's "
            f"dtype), got input {name}; pass options=None for the reference path"
        )
    acc = name if options.acc_dtype is None else _dtype_name(options.acc_dtype)
    if acc != name:
        raise RuntimeError(
            "linear_cross_entropy supports float32 acc_dtype with float16/bfloat16 inputs, but "
            f"got torch.{acc} acc_dtype and torch.{name} inputs."
        )
    batched = input.ndim == 2
    if not batched:
        input, target = input.unsqueeze(0), target.unsqueeze(0)
    n, f = input.shape
    policy, size = _resolve(options, n, f, linear_weight.shape[0], input.dtype)
    grad = is_grad_enabled()
    attrs = {"ignore_index": ignore_index, "size": size, "policy": policy}
    if reduction == "none":
        y = _ChunkedNone.apply(
            input, linear_weight, linear_bias, target, weight, op="linear_cross_entropy", **attrs
        )
    else:
        y = _ChunkedScalar.apply(
            input, linear_weight, linear_bias, target, weight, op="linear_cross_entropy",
            reduction=reduction, retain=options.allow_retain_graph,
            needs=(
                input.requires_grad and grad,
                linear_weight.requires_grad and grad,
                linear_bias is not None and linear_bias.requires_grad and grad,
            ),
            **attrs,
        )  # fmt: skip
    return y if batched else y.squeeze(0)


class _Loop:
    """torch's _ChunkContext for acc_dtype == input dtype: the buffers of one pass over the
    chunks, made and freed in torch's order."""

    def __init__(self, x, lw, b, t, w, reduction, ignore_index, size, policy, needs, go=None):
        from engine import bool as bool_
        from engine import int64

        self.x, self.lw, self.b, self.t, self.w = x, lw, b, t, w
        self.reduction, self.ignore_index, self.go = reduction, ignore_index, go
        self.bool_, self.int64 = bool_, int64
        dt, dev = x._dtype, x._device
        self.dt, self.dev = dt, dev
        self.n, self.f = x.shape
        self.v = lw.shape[0]
        self.live = _live(dev)
        self.xp = kernels.xp_of(x) if self.live else None
        self.logits_buf = kernels.empty((size, self.v), dt, dev)
        self.tmp = kernels.empty((size,), dt, dev)
        self.output = kernels.zeros((), dt, dev)
        self.needs = needs
        self.alloc_wgc = needs[1] and policy != "compact"

    def grads(self):
        """grad_input, grad_linear_weight, grad_linear_bias and the weight-grad scratch (torch's
        rank-matching empties where a gradient is not computed)."""
        dt, dev, (ci, cw, cb) = self.dt, self.dev, self.needs
        self.gi = kernels.empty((self.n, self.f) if ci else (0, 0), dt, dev)
        self.gw = kernels.zeros((self.v, self.f) if cw else (0, 0), dt, dev)
        self.gb = kernels.zeros((self.v,) if cb else (0,), dt, dev)
        self.wgc = kernels.empty((self.v, self.f) if self.alloc_wgc else (0, 0), dt, dev)

    def targets(self):
        """mask, corrected target, and the per-row weights -(w[t] or 1)/d (d: the sum of the
        unmasked weights for mean, 1 for sum; +w[t] for none's forward, -w[t]*go in its
        backward)."""
        xp, n, live = self.xp, self.n, self.live
        self.mask = kernels.empty((n,), self.bool_, self.dev)
        if live:
            xp.equal(self.t._data, self.ignore_index, out=self.mask._data)
        if self.ignore_index < 0 or self.ignore_index >= self.v:
            self.ct = kernels.empty((n,), self.int64, self.dev)
            if live:
                self.ct._data[...] = xp.where(self.mask._data, 0, self.t._data)
        else:
            self.ct = self.t
        if self.w is None:
            inv = kernels.empty((n,), self.bool_, self.dev)
            nwt = kernels.empty((n,), self.dt, self.dev)
            if live:
                xp.logical_not(self.mask._data, out=inv._data)
                nwt._data[...] = inv._data
            del inv
        else:
            picked = kernels.empty((n,), self.dt, self.dev)
            nwt = kernels.empty((n,), self.dt, self.dev)
            if live:
                xp.take(self.w._data, self.ct._data, out=picked._data)
                nwt._data[...] = xp.where(self.mask._data, 0, picked._data)
            del picked
        if live:
            a = nwt._data
            if self.reduction == "mean":
                d = float(a.sum())
                a /= math.nan if d == 0 else -d
            elif self.reduction == "sum":
                xp.negative(a, out=a)
            elif self.go is not None:
                xp.negative(a, out=a)
                a *= self.go._data
        self.nwt = nwt

    def chunks(self):
        size = self.logits_buf.shape[0]
        for start in range(0, self.n, size):
            bs = min(size, self.n - start)
            if start == 0:
                self.targets()
            yield start, bs

    def shifted_logits(self, start, bs):
        """logits of the chunk, less their row maximum (in logits_buf)."""
        xp = self.xp
        L = self.logits_buf._data[:bs]
        kernels.matmul_into(xp, self.x._data[start : start + bs], self.lw._data.T, L)
        if self.b is not None:
            L += self.b._data
        m = self.tmp._data[:bs]
        xp.max(L, axis=1, out=m)
        L -= m[:, None]
        return L

    def gather(self, L, tc, bs):
        g = kernels.empty((bs, 1), self.dt, self.dev)
        if self.live:
            g._data[:, 0] = L[self.xp.arange(bs), tc]
        return g

    def sumexp(self, L, bs):
        s = kernels.empty((bs,), self.dt, self.dev)
        if self.live:
            self.xp.exp(L, out=L)
            self.xp.sum(L, axis=1, out=s._data)
        return s

    def loss_rows(self, out):
        """reduction='none' forward: W[t] * (log sum exp - shifted logit[t]) row by row."""
        ls = s = None
        for start, bs in self.chunks():
            live = self.live
            L = self.shifted_logits(start, bs) if live else None
            tc = self.ct._data[start : start + bs] if live else None
            ls = self.gather(L, tc, bs)  # (the previous chunk's freed as it is replaced)
            prev, s = s, None
            s = self.sumexp(L, bs)
            del prev
            if live:
                xp = self.xp
                xp.log(s._data, out=s._data)
                s._data -= ls._data[:, 0]
                s._data *= self.nwt._data[start : start + bs]
                out._data[start : start + bs] = s._data
        self.finish_none(ls, s)

    def finish_none(self, ls, s):
        del self.tmp, self.mask
        self.ct = None
        del self.nwt, self.logits_buf
        del ls, s

    def run(self):
        """The grad loop: the loss into output and the gradients of what `needs` asks for."""
        ci, cw, cb = self.needs
        xp, live = self.xp, self.live
        s = temp = None
        if self.reduction == "mean" and self.n == 0 and live:
            self.output._data[...] = math.nan
        compute = ci or cw or cb
        for start, bs in self.chunks():
            L = self.shifted_logits(start, bs) if live else None
            tc = self.ct._data[start : start + bs] if live else None
            wc = self.nwt._data[start : start + bs] if live else None
            g = self.gather(L, tc, bs)
            if live:
                self.output._data[...] += xp.dot(wc, g._data[:, 0])
            del g
            prev, s = s, None
            s = self.sumexp(L, bs)
            del prev
            if live and compute:
                factor = self.tmp._data[:bs]
                xp.divide(wc, s._data, out=factor)
                L *= factor[:, None]
            if live:
                xp.log(s._data, out=s._data)
                self.output._data[...] -= xp.dot(wc, s._data)
            if not compute:
                continue
            if cb:
                col = kernels.empty((self.v,), self.dt, self.dev)
                if live:
                    xp.sum(L, axis=0, out=col._data)
                    self.gb._data -= col._data
                del col
                if live:
                    xp.add.at(self.gb._data, tc, wc)
            if ci:
                sel = kernels.empty((bs, self.f), self.dt, self.dev)
                if live:
                    gic = self.gi._data[start : start + bs]
                    xp.take(self.lw._data, tc, axis=0, out=sel._data)
                    xp.multiply(sel._data, wc[:, None], out=gic)
                del sel
                if live:
                    gic -= L @ self.lw._data
            if cw:
                xc = self.x._data[start : start + bs] if live else None
                if self.alloc_wgc and live:
                    kernels.matmul_into(xp, L.T, xc, self.wgc._data)
                elif live:
                    self.gw._data -= L.T @ xc
                if self.v >= self.f:  # (into logits_buf's first columns: the logits are done)
                    if live:
                        dest = self.logits_buf._data[:bs, : self.f]
                        xp.multiply(xc, wc[:, None], out=dest)
                    prev, temp = temp, None
                    del prev
                else:
                    prev, temp = temp, None
                    temp = kernels.empty((bs, self.f), self.dt, self.dev)
                    del prev
                    if live:
                        xp.multiply(xc, wc[:, None], out=temp._data)
                    dest = temp._data if live else None
                if live and self.alloc_wgc:
                    xp.subtract.at(self.wgc._data, tc, dest)
                    self.gw._data -= self.wgc._data
                elif live:
                    xp.add.at(self.gw._data, tc, dest)
        # what torch's frame and context let go of, in the order they go
        del self.tmp, self.mask, s, self.wgc, self.nwt
        self.ct = None
        del self.logits_buf, temp


class _ChunkedScalar(Function):
    """torch_nn::_linear_cross_entropy_batch_chunked: reduction mean/sum, the gradients made in
    forward and kept for backward."""

    def forward(self, x, lw, b, t, w, out=None, **attrs):
        needs = attrs["needs"]
        loop = _Loop(
            x, lw, b, t, w, attrs["reduction"], attrs["ignore_index"], attrs["size"],
            attrs["policy"], needs,
        )  # fmt: skip
        loop.grads()
        loop.run()
        self.retain, self.needs = attrs["retain"], needs
        self.has_bias, self.has_weight = b is not None, w is not None
        if self.retain:
            # torch's ctx holds them as plain attributes: no SavedVariable, so they outlive
            # backward (retain_graph or not) and go with the node
            self.grads = (loop.gi, loop.gw, loop.gb)
        else:
            self.save(gi=loop.gi, gw=loop.gw, gb=loop.gb)
        return loop.output

    def backward(self, g):
        if self.retain:
            gi, gw, gb = self.grads
        elif not self._named:
            raise RuntimeError(
                "linear_cross_entropy chunked backward called twice; retain_graph=True / "
                "double backward are not supported."
            )
        else:
            gi, gw, gb = (self.kept(k) for k in ("gi", "gw", "gb"))
        # torch's autograd materialises the gradients of the three unused outputs (zeros)
        zeros = [kernels.zeros(tuple(a.shape), a._dtype, a._device) for a in (gi, gw, gb)]
        res = []
        for need, a in zip(self.needs, (gi, gw, gb), strict=True):
            if not need:
                res.append(None)
            elif self.retain:
                r = kernels.empty(tuple(a.shape), a._dtype, a._device)
                if _live(a._device):
                    kernels.xp_of(a).multiply(a._data, g._data, out=r._data)
                res.append(r)
            else:
                if _live(a._device):
                    a._data *= g._data
                res.append(a)
        if not self.retain:
            self.release_saved()
        del gi, gw, gb
        while zeros:
            zeros.pop()
        return _edges(res, self.has_bias, self.has_weight)

    def name(self):
        return _SCALAR_NODE


class _ChunkedNone(Function):
    """torch_nn::_linear_cross_entropy_batch_chunked_no_reduction: the loss per row in forward,
    the gradients recomputed chunk by chunk in backward."""

    def forward(self, x, lw, b, t, w, out=None, **attrs):
        loop = _Loop(
            x, lw, b, t, w, "none", attrs["ignore_index"], attrs["size"], attrs["policy"],
            (False, False, False),
        )  # fmt: skip
        y = kernels.empty((x.shape[0],), x._dtype, x._device)
        loop.loss_rows(y)
        self.attrs, self.has_bias, self.has_weight = attrs, b is not None, w is not None
        self.needs = (x.requires_grad, lw.requires_grad, b is not None and b.requires_grad)
        self.save(x=x, lw=lw, b=b, t=t, w=w)
        return y

    def backward(self, g):
        x, lw, b, t, w = (self.kept(k) for k in ("x", "lw", "b", "t", "w"))
        if not any(self.needs):
            return _edges([None, None, None], self.has_bias, self.has_weight)
        a = self.attrs
        loop = _Loop(
            x, lw, b, t, w, "none", a["ignore_index"], a["size"], a["policy"], self.needs, go=g
        )
        loop.grads()
        loop.run()
        ci, cw, cb = self.needs
        res = [loop.gi if ci else None, loop.gw if cw else None, loop.gb if cb else None]
        del loop
        return _edges(res, self.has_bias, self.has_weight)

    def name(self):
        return _NONE_NODE


def _edges(res, has_bias, has_weight):
    """(input, linear_weight[, linear_bias], target[, weight]): one gradient per tensor argument."""
    gi, gw, gb = res
    out = [gi, gw, gb] if has_bias else [gi, gw]
    return (*out, None, None) if has_weight else (*out, None)
