"""scaled_dot_product_attention: PyTorch's math path, and the fused kernels' accounting.

Two ways to run the same attention, chosen like PyTorch with
`engine.nn.attention.sdpa_kernel(SDPBackend.MATH | FLASH_ATTENTION | EFFICIENT_ATTENTION)`:

- MATH is composed of ordinary ops exactly as ATen's
  `_scaled_dot_product_attention_math` is (torch 2.13): the boolean or causal mask becomes a float
  mask first (`where(mask, 0, -inf)`, L x S), then `q * sqrt(scale)` and
  `k.transpose(-2, -1) * sqrt(scale)` (two new tensors, both kept by the matmul), `attn = q @ k^T`
  (B x H x L x S), `attn.add_(mask)`, `_safe_softmax` (its result is kept; a bool `isneginf`
  and an `all` row mask are temporaries), dropout (its scaled mask is kept), `attn @ v`.
  Every intermediate is a real tensor of the engine, so its bytes and lifetime are the ones
  torch's profiler shows for `sdpa_kernel(SDPBackend.MATH)`.
- FLASH_ATTENTION / EFFICIENT_ATTENTION account the attention as the fused kernels do: one
  primitive whose forward allocates only the output and the log-sum-exp (B x H x L, float32) and
  keeps q, k, v, the output and the log-sum-exp for backward; backward allocates grad_q, grad_k
  and grad_v. The L x S scores are recomputed tile by tile in the kernel and never reach memory,
  so the values here are computed in uncharged scratch, runs of (batch, head) slices at a time
  (one slice at a time with dropout or broadcast batch dims). Dropout keeps no mask (the kernels
  keep a random seed and regenerate it in backward; so does this).

With nothing chosen (no sdpa_kernel), the backend is PyTorch's own choice (_default_backend):
on cpu its flash kernel when the inputs fit it, else MATH; MATH on meta (as torch's meta
device); on cuda the memory-efficient kernel for float32, MATH for other dtypes (torch's flash
and cuDNN choices are not modelled). On cpu the fused accounting follows torch's CPU flash
kernel (FlashAttentionKernel) event by event, and where the device runs torch's CUDA kernels
(cuda, or meta under the caching model) EFFICIENT_ATTENTION with float32 follows torch's CUDA
memory-efficient kernel: see FusedAttention.
"""

from __future__ import annotations

import math

import numpy as np

from engine import dtypes, host_cache, kernels
from engine.autograd.function import Function, SavedTensor
from engine.autograd.grad_mode import no_grad
from engine.backends import cuda_reduce
from engine.backends.strided import is_dense
from engine.tensor import Tensor

# ---------------------------------------------------------------------------------------------
# backend choice (engine.nn.attention.sdpa_kernel sets it)
# ---------------------------------------------------------------------------------------------
MATH, FLASH_ATTENTION, EFFICIENT_ATTENTION = "MATH", "FLASH_ATTENTION", "EFFICIENT_ATTENTION"
_FUSED = (FLASH_ATTENTION, EFFICIENT_ATTENTION)


class _Choice:
    # None: PyTorch's own choice (_default_backend); sdpa_kernel sets a tuple of names
    backends: tuple[str, ...] | None = None


CHOICE = _Choice()


def _backend(query, key, value, attn_mask, dropout_p) -> str:
    allowed = CHOICE.backends
    if allowed is None:
        return _default_backend(query, key, value, attn_mask, dropout_p)
    # The first allowed one, like PyTorch's priority order when several are allowed: fused first.
    for b in (FLASH_ATTENTION, EFFICIENT_ATTENTION, MATH):
        if b in allowed:
            return b
    raise RuntimeError("scaled_dot_product_attention: no backend is enabled (sdpa_kernel([]))")


_CPU_FLASH_DTYPES = ("float32", "float64", "bfloat16", "float16")


def _default_backend(query, key, value, attn_mask, dropout_p) -> str:
    """What torch 2.13 runs when nothing restricts it (`torch._fused_sdp_choice`): on cpu its
    flash kernel whenever the inputs fit it (sdp_utils_cpp's use_flash_attention_cpp: no
    dropout; q, k, v 4-D with equal batch, heads and head dims, a last-dim stride of 1 and
    non-empty sequences; a mask that does not require grad, 2-D or 4-D, broadcasting over
    batch and heads only by size 1), the math path otherwise; on meta always the math path.
    On cuda, float32 4-D inputs whose head dims are multiples of 4 take the memory-efficient
    kernel (torch 2.11 on an H100 chose it for every float32 case recorded, masks and dropout
    included: bench/data/cuda_sdpa_h100.json); other dtypes the math path (torch picks flash or
    cuDNN kernels for them by GPU; not modelled: choose one with sdpa_kernel)."""
    if query._device.type == "cuda":
        return _cuda_default(query, key, value, attn_mask)
    if query._device.type != "cpu" or dropout_p > 0.0:
        return MATH
    q, k, v = query, key, value
    if not _fused_inputs_fit(q, k, v, attn_mask) or q._dtype.name not in _CPU_FLASH_DTYPES:
        return MATH
    if v.shape[3] != q.shape[3]:
        return MATH
    if attn_mask is not None:
        m = attn_mask
        if m.shape[-2] not in (q.shape[2], 1):
            return MATH
        if m.shape[-1] not in (k.shape[2], 1):
            return MATH
        if m.ndim == 4:
            if m.shape[0] not in (1, q.shape[0]) or m.shape[1] not in (1, q.shape[1]):
                return MATH
        elif m.ndim != 2:
            return MATH
    return FLASH_ATTENTION


def _fused_inputs_fit(q, k, v, attn_mask) -> bool:
    """The checks torch's fused kernels share (sdp_utils): q, k, v 4-D with equal batch and
    head counts, q and k head dims equal, non-empty sequences, a last-dim stride of 1, a mask
    that does not require grad."""
    if not (q.ndim == k.ndim == v.ndim == 4):
        return False
    if not (q.shape[0] == k.shape[0] == v.shape[0] and q.shape[1] == k.shape[1] == v.shape[1]):
        return False
    if k.shape[3] != q.shape[3] or q.shape[2] == 0 or k.shape[2] == 0:
        return False
    if any(t.stride(-1) != 1 for t in (q, k, v)):
        return False
    return attn_mask is None or not attn_mask.requires_grad


def _cuda_default(q, k, v, attn_mask) -> str:
    """torch's choice on a GPU, as far as it is modelled: the memory-efficient kernel for
    float32 inputs that pass its checks (sdp_utils' use_mem_efficient_attention: the shared
    ones, _fused_inputs_fit, and head dims a positive multiple of 4); the math path for
    everything else."""
    if not _fused_inputs_fit(q, k, v, attn_mask):
        return MATH
    if not (q._dtype is k._dtype is v._dtype is dtypes.float32):
        return MATH
    E, Ev = q.shape[-1], v.shape[-1]
    if E <= 0 or Ev <= 0 or E % 4 or Ev % 4:
        return MATH
    return EFFICIENT_ATTENTION


def _ops():
    from engine.ops import _ns

    return _ns


def _empty(shape, dtype, device) -> Tensor:
    from engine.creation import empty

    return empty(*shape, dtype=dtype, device=device)


def _live(t: Tensor) -> bool:
    return t._device.type != "meta"


def _xp(t: Tensor):
    from engine.backends import get_xp

    return get_xp(t._device.type)


# ---------------------------------------------------------------------------------------------
# _safe_softmax: softmax whose fully masked rows are 0 instead of nan
# ---------------------------------------------------------------------------------------------
def _softmax_cls():
    from engine.ops.reduce import Softmax

    return Softmax


class SafeSoftmax(Function):
    """at::_safe_softmax: softmax(x) with rows that are all -inf set to 0.

    Keeps its result for backward (like softmax). ATen allocates two temporaries on the way: the
    bool `isneginf(x)` (x's shape) and its `all` over `dim` (keepdim); they die at return.
    """

    retain_output = True

    def forward(self, x, out=None, dim=-1):
        node = _softmax_cls().__new__(_softmax_cls())
        y = node.forward(x, out=out, dim=dim)
        self.dim = node.dim
        masked = _empty(x.shape, dtypes.bool_, x._device)
        keep = list(x.shape)
        keep[self.dim] = 1
        rows = _empty(tuple(keep), dtypes.bool_, x._device)
        if _live(x):
            xp = _xp(x)
            xp.isneginf(x._data, out=masked._data)
            xp.all(masked._data, axis=self.dim, keepdims=True, out=rows._data)
            if rows._data.any():
                xp.copyto(y._data, 0, where=np.broadcast_to(rows._data, y.shape))
        del masked, rows
        return y

    def backward(self, g):
        # _softmax_backward_data: one output, y * (g - sum(g * y)); the row sums stay in
        # uncharged scratch (the fused ATen kernel keeps them in registers).
        (y,) = self.saved_tensors
        gx = _empty(g.shape, g._dtype, g._device)
        # torch's CUDA softmax backward first makes grad * output, a temporary of g's size
        cuda_reduce.transient(g._device, g.numel() * g._dtype.itemsize)
        if _live(g):
            xp = _xp(g)
            xp.multiply(g._data, y._data, out=gx._data)
            rows = gx._data.sum(axis=self.dim, keepdims=True)
            xp.subtract(g._data, rows, out=gx._data)
            xp.multiply(gx._data, y._data, out=gx._data)
        return (gx,)

    def name(self):
        return "SafeSoftmaxBackward0"


def safe_softmax(x: Tensor, dim: int = -1) -> Tensor:
    return SafeSoftmax.apply(x, op="_safe_softmax", dim=dim)


# ---------------------------------------------------------------------------------------------
# masks
# ---------------------------------------------------------------------------------------------
def _causal_mask(L: int, S: int, dtype, device) -> Tensor:
    """ATen's is_causal mask: ones(L, S, bool).tril(), then where(mask, 0, -inf) as `dtype`."""
    with no_grad():
        ones = _empty((L, S), dtypes.bool_, device)
        tril = _empty((L, S), dtypes.bool_, device)
        if device.type != "meta":
            tril._data[...] = (
                np.tri(L, S, dtype=bool)
                if device.type == "cpu"
                else _xp(tril).tri(L, S, dtype=bool)
            )
        del ones
        return _float_mask(tril, dtype)


def _float_mask(mask: Tensor, dtype) -> Tensor:
    """convert_boolean_attn_mask: where(mask, 0, -inf) (a new tensor of mask's shape)."""
    with no_grad():
        out = _empty(mask.shape, dtype, mask._device)
        if _live(mask):
            xp = _xp(mask)
            out._data[...] = xp.where(mask._data, 0.0, -np.inf)
        return out


def _check_qkv(query, key, value, attn_mask, dropout_p, is_causal, enable_gqa):
    for name, t in (("query", query), ("key", key), ("value", value)):
        if not isinstance(t, Tensor):
            raise TypeError(
                f"scaled_dot_product_attention: {name} must be a Tensor, got {type(t).__name__}"
            )
        if t.ndim < 2:
            raise RuntimeError(
                f"scaled_dot_product_attention: {name} must be at least 2-D ([..., L, E]), "
                f"got shape {list(t.shape)}"
            )
    if query.shape[-1] != key.shape[-1]:
        raise RuntimeError(
            "scaled_dot_product_attention: query and key must have the same embedding size, got "
            f"query {list(query.shape)} and key {list(key.shape)}"
        )
    if key.shape[-2] != value.shape[-2]:
        raise RuntimeError(
            "scaled_dot_product_attention: key and value must have the same sequence length, got "
            f"key {list(key.shape)} and value {list(value.shape)}"
        )
    if not query._dtype is key._dtype is value._dtype:
        raise RuntimeError(
            "Expected query, key, and value to have the same dtype, but got query.dtype: "
            f"{query._dtype.name} key.dtype: {key._dtype.name} and value.dtype: "
            f"{value._dtype.name} instead."
        )
    if is_causal and attn_mask is not None:
        raise RuntimeError(
            "_scaled_dot_product_attention: Explicit attn_mask should not be set when "
            "is_causal=True"
        )
    if not 0.0 <= dropout_p <= 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {dropout_p}")
    if enable_gqa:
        raise NotImplementedError(
            "scaled_dot_product_attention: enable_gqa=True is not supported yet; repeat key and "
            "value over the head groups (repeat_interleave) and call it with enable_gqa=False"
        )
    if attn_mask is not None:
        if not isinstance(attn_mask, Tensor):
            raise TypeError("scaled_dot_product_attention: attn_mask must be a Tensor or None")
        if attn_mask._dtype is not dtypes.bool_ and not attn_mask._dtype.is_floating_point:
            raise RuntimeError(
                "scaled_dot_product_attention: attn_mask must be bool or floating point, got "
                f"{attn_mask._dtype.name}"
            )
        scores = query.shape[:-1] + (key.shape[-2],)
        try:
            np.broadcast_shapes(attn_mask.shape, scores)
        except ValueError:
            raise RuntimeError(
                f"scaled_dot_product_attention: attn_mask of shape {list(attn_mask.shape)} does "
                f"not broadcast to the attention scores' shape {list(scores)}"
            ) from None


# ---------------------------------------------------------------------------------------------
# the math path
# ---------------------------------------------------------------------------------------------
def attention_math(
    query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None
) -> tuple[Tensor, Tensor]:
    """ATen's _scaled_dot_product_attention_math: (output, attention weights)."""
    ops = _ops()
    L, S = query.shape[-2], key.shape[-2]
    if is_causal:
        attn_mask = _causal_mask(L, S, query._dtype, query._device)
    elif attn_mask is not None and attn_mask._dtype is dtypes.bool_:
        attn_mask = _float_mask(attn_mask, query._dtype)
    s = math.sqrt(scale if scale is not None else 1.0 / math.sqrt(query.shape[-1]))
    q = ops["mul"](query, s)
    k = ops["mul"](ops["transpose"](key, -2, -1), s)
    attn = ops["matmul"](q, k)
    del q, k
    if attn_mask is not None:
        attn = ops["add_"](attn, attn_mask)
    attn = safe_softmax(attn, -1)
    if dropout_p > 0.0:
        from engine.nn.functional import dropout

        attn = dropout(attn, dropout_p, True)
    return ops["matmul"](attn, value), attn


# ---------------------------------------------------------------------------------------------
# the fused kernels' accounting
# ---------------------------------------------------------------------------------------------
class FusedAttention(Function):
    """Flash / memory-efficient attention: output and log-sum-exp out, L x S never stored.

    Keeps q, k, v (inputs), the output and the log-sum-exp (B..., L; float32, float64 for
    float64 inputs) for backward. On cpu with 4-D inputs, as torch's CPU flash kernel
    (FlashAttentionKernel.cpp, checked event by event against torch's profiler): the output is
    laid out as the query when the query is dense; backward makes all three gradients laid out
    [B, L, H, E] (unneeded ones die at return), copies grad_out into that layout unless it is
    already, and each side's per-thread tiles (_cpu_splits) are scratch. With `efficient` where
    the device runs torch's CUDA kernels (_cuda_efficient), as torch's CUDA memory-efficient
    kernel: see its branches in forward and backward.
    """

    retain_output = True

    def prepare(self, *args):
        self.has_mask = len(args) == 4

    def to_save(self, tensors):
        return (0, 1, 2, 3) if len(tensors) == 4 else (0, 1, 2)

    def forward(
        self, q, k, v, mask=None, out=None, causal=False, scale=1.0, p=0.0, seed=0, efficient=False
    ):
        self.causal, self.scale, self.p, self.seed = causal, scale, p, seed
        self.efficient = efficient
        self.cuda_efficient = cuda_eff = efficient and _cuda_efficient(q, k, v)
        batch = self.batch = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
        L, Dv = q.shape[-2], v.shape[-1]
        y = _empty(batch + (L, Dv), q._dtype, q._device)
        acc = _accumulation(q._dtype)
        if cuda_eff:
            # torch's CUDA kernel: the output laid out [B, L, H, E]; the log-sum-exp padded to
            # 32 queries, and empty when no input requires grad
            kernels.relayout(y, _blhd(y.shape))
            wanted = any(t.requires_grad for t in (q, k, v))
            lse = _empty(batch + ((-(-L // 32) * 32) if wanted else 0,), acc, q._device)
        else:
            lse = _empty(batch + (L,), acc, q._device)
        lse_rows = lse._data[..., :L] if _live(q) else None  # what the computation writes
        work = None
        if _cpu_kernel(q, k, v) and not cuda_eff:
            # torch's CPU kernel: the output laid out as the query (empty_like), and per thread
            # a tile of scores, its row max and sum and an output tile (scratch: device-specific)
            if y.shape == q.shape and is_dense(q.shape, q.stride()):
                kernels.relayout(y, q.stride())
            qs, kvs = _cpu_splits(L, k.shape[-2])
            work = kernels.Scratch(
                (kernels.get_num_threads() * (qs * kvs + 2 * qs + qs * Dv),), acc, q._device
            )
        if _live(q) and self._batched(q, k, v):
            if not _native_forward(self, q, k, v, y, lse_rows, mask):
                nd, va = q.ndim, v._data

                def part(i, lo, hi):
                    for b0, b1, P, m in self._chunks(q, k, mask, lo=lo, hi=hi):
                        _product(P, _compute(_rows(va, b0, b1, nd), P.dtype), y._data, b0, b1, nd)
                        if lse_rows.size:
                            _put(lse_rows, b0, b1, nd, m)

                kernels.run_parts(part, _ranges(q, k))
            del work
        elif _live(q):
            xp = _xp(q)
            mk = None if mask is None else mask._data
            for idx in np.ndindex(*batch):
                P, m, keep = self._probs(xp, q, k, mk, idx)
                if keep is not None:
                    P = P * keep / (1.0 - self.p)
                if lse_rows.size:
                    lse_rows[idx] = m
                y._data[idx] = P @ _at(v._data, idx, batch)
        self.batch = batch
        self.lse = SavedTensor(lse, None)  # kept for backward (through saved_tensors_hooks too)
        return y

    def _batched(self, q, k, v) -> bool:
        """Whether the slices can be computed many at a time (_chunks): no dropout (its masks
        are drawn per slice) and q, k, v with the same batch dims (nothing broadcast)."""
        return self.p == 0 and q.shape[:-2] == k.shape[:-2] == v.shape[:-2]

    def _chunks(self, q, k, mask, lse=None, lo=0, hi=None):
        """(b0, b1, P, lse) for runs of the leading batch dim: the softmax probabilities of
        those slices [b1 - b0, ..., L, S] and their log-sum-exp [..., L], computed as torch's
        CPU flash kernel does, in float32 (float64 for float64 inputs); given forward's
        log-sum-exp (backward), P = exp(scores - lse) directly. A run holds at most
        _CHUNK_SCORES scores: uncharged scratch, as the kernel's tiles are."""
        xp = _xp(q)
        qa, ka = q._data, k._data
        L, S = qa.shape[-2], ka.shape[-2]
        lead = qa.shape[0] if qa.ndim > 2 else 1
        per = max(1, math.prod(qa.shape[1:-2]) * L * S)
        step = max(1, _CHUNK_SCORES // per)
        ct = _accumulation(q._dtype).np
        add = None
        if self.causal:
            add = xp.zeros((L, S), dtype=ct)
            add[~xp.asarray(np.tri(L, S, dtype=bool))] = -np.inf
        hi = lead if hi is None else hi
        host = xp is np  # numpy: the chunk's arrays on this thread's buffers (host_cache.workspace)
        for b0 in range(lo, hi, step):
            b1 = min(b0 + step, hi)
            # the scale applied to q (L x E) rather than to the scores (L x S)
            qr = _rows(qa, b0, b1, qa.ndim)
            ks = xp.swapaxes(_compute(_rows(ka, b0, b1, qa.ndim), ct), -1, -2)
            if host:
                qs = np.multiply(qr, self.scale, dtype=ct, out=_work("q", qr.shape, ct))
                sc = np.matmul(qs, ks, out=_work("s", qs.shape[:-1] + (S,), ct))
            else:
                sc = xp.multiply(qr, self.scale, dtype=ct) @ ks
            if add is not None:
                sc += add
            if mask is not None:
                m = _lead(mask._data, b0, b1, qa.ndim)
                if m.dtype == np.bool_:
                    xp.copyto(sc, -np.inf, where=~m)
                else:
                    sc += m
            if lse is not None and lse.dtype == ct:
                if host:  # (kernels.softmax_rows: the same bits, one pass)
                    kernels.softmax_rows(sc, _rows(lse, b0, b1, qa.ndim)[..., None], 2)
                else:
                    sc -= _rows(lse, b0, b1, qa.ndim)[..., None]
                if host:
                    kernels.exp_into(sc, sc)
                else:
                    xp.exp(sc, out=sc)
                yield b0, b1, sc, None
                continue
            if host:  # the passes below, each row's in cache (kernels.softmax_rows)
                mx = _work("mx", sc.shape[:-1] + (1,), ct)
                kernels.softmax_rows(sc, mx, 0)
                kernels.exp_into(sc, sc)
                tot = _work("tot", sc.shape[:-1] + (1,), ct)
                kernels.softmax_rows(sc, tot, 1)
                yield b0, b1, sc, (mx + np.log(tot))[..., 0]
                continue
            mx = sc.max(axis=-1, keepdims=True)
            mx[~xp.isfinite(mx)] = 0.0
            sc -= mx
            xp.exp(sc, out=sc)
            tot = sc.sum(axis=-1, keepdims=True)
            tot[tot == 0] = 1.0  # a fully masked row: probabilities 0, as the kernels give
            sc /= tot
            yield b0, b1, sc, (mx + xp.log(tot))[..., 0]

    def _probs(self, xp, q, k, mk, idx):
        """One (batch, head) slice: softmax probabilities, log-sum-exp, dropout keep mask."""
        batch = self.batch
        qs = _at(q._data, idx, batch).astype(np.float64)
        ks = _at(k._data, idx, batch).astype(np.float64)
        sc = (qs @ ks.T) * self.scale
        L, S = sc.shape
        if self.causal:
            sc = xp.where(xp.asarray(np.tri(L, S, dtype=bool)), sc, -np.inf)
        if mk is not None:
            m = _at(mk, idx, batch)
            sc = xp.where(m, sc, -np.inf) if m.dtype == np.bool_ else sc + m
        mx = sc.max(axis=-1, keepdims=True)
        mx = xp.where(xp.isfinite(mx), mx, 0.0)
        e = xp.exp(sc - mx)
        tot = e.sum(axis=-1, keepdims=True)
        safe = xp.where(tot > 0, tot, 1.0)
        P = e / safe
        lse = (mx + xp.log(safe))[..., 0]
        keep = None
        if self.p > 0:  # the kernels regenerate the mask from a seed: nothing is stored
            keep = xp.asarray(np.random.default_rng((self.seed, *idx)).random(P.shape) >= self.p)
        return P, lse, keep

    def backward(self, g):
        saved = self.saved_tensors
        q, k, v = saved[0], saved[1], saved[2]
        mask = saved[3] if self.has_mask else None
        needs = tuple(e is not None for e in self._edges)
        cpu = _cpu_kernel(q, k, v) and not self.cuda_efficient
        cuda_eff = self.cuda_efficient
        if cuda_eff:
            # torch's CUDA memory-efficient backward: grad_out copied to [B, L, H, E] unless it
            # is laid out so; the three gradients laid out so; delta = rowsum(grad_out * out)
            # (the product, its [B, L, H] sum, made contiguous [B, H, L]); grad_q's float32
            # accumulator (_efficient_workspace). Read off torch 2.11's events on an H100.
            dev = q._device
            held = None if _blhd_laid(g) else _empty(g.shape, g._dtype, dev)
            gq, gk, gv = _blhd_grads(q, k, v)
            B_, H_, L_ = g.shape[:3]
            prod = _empty(g.shape, dtypes.float32, dev)
            rows = _empty((B_, L_, H_), dtypes.float32, dev)
            delta = _empty((B_, H_, L_), dtypes.float32, dev)
            del rows, prod
            workspace = _empty((_efficient_workspace(q),), dtypes.uint8, dev)
        elif cpu:
            # torch's CPU kernel makes all three gradients, laid out [B, L, H, E], then a
            # buffer the size of grad_out, and per thread two tiles of scores (scratch)
            gq, gk, gv = _blhd_grads(q, k, v)
            # grad_out laid out [B, L, H, E] too (a copy unless it already is)
            held = None if _blhd_laid(g) else _empty(g.shape, g._dtype, g._device)
            qs, kvs = _cpu_splits(q.shape[-2], k.shape[-2])
            acc = _accumulation(q._dtype)
            work = (
                kernels.Scratch((kernels.get_num_threads() * 2 * qs * kvs,), acc, q._device),
                kernels.Scratch((qs,), acc, q._device),
            )
        else:
            gq = _empty(q.shape, q._dtype, q._device) if needs[0] else None
            gk = _empty(k.shape, k._dtype, k._device) if needs[1] else None
            gv = _empty(v.shape, v._dtype, v._device) if needs[2] else None
        if _live(g) and self._batched(q, k, v):
            ga, va, qa, ka = g._data, v._data, q._data, k._data
            ya = saved[-1]._data  # the output (retain_output)
            nd = qa.ndim
            lse_a = self.lse.unpack()._data[..., : q.shape[-2]]
            xp = _xp(g)

            def part(i, lo, hi):
                for b0, b1, P, _ in self._chunks(q, k, mask, lse_a, lo=lo, hi=hi):
                    self._grads(xp, P, b0, b1, nd, ga, va, qa, ka, ya, gq, gk, gv)

            if mask is not None or not _native_backward(self, q, k, v, g, ya, lse_a, gq, gk, gv):
                kernels.run_parts(part, _ranges(q, k))
        elif _live(g):
            xp = _xp(g)
            batch = self.batch
            self.lse.unpack()  # what the kernels read (the values are recomputed here)
            for a in (gq, gk, gv):
                if a is not None:
                    a._data[...] = 0
            mk = None if mask is None else mask._data
            for idx in np.ndindex(*batch):
                P, _, keep = self._probs(xp, q, k, mk, idx)
                gs = _at(g._data, idx, batch).astype(np.float64)
                vs = _at(v._data, idx, batch).astype(np.float64)
                dP = gs @ vs.T
                Pd = P
                if keep is not None:
                    Pd = P * keep / (1.0 - self.p)
                    dP = dP * keep / (1.0 - self.p)
                if gv is not None:
                    _acc(gv._data, idx, Pd.T @ gs)
                dS = P * (dP - (dP * P).sum(axis=-1, keepdims=True)) * self.scale
                if gq is not None:
                    _acc(gq._data, idx, dS @ _at(k._data, idx, batch).astype(np.float64))
                if gk is not None:
                    _acc(gk._data, idx, dS.T @ _at(q._data, idx, batch).astype(np.float64))
        if cuda_eff:
            del delta, workspace, held
        elif cpu:
            del work, held
        if cpu or cuda_eff:  # all three were made: the unneeded ones die here
            gq, gk, gv = (
                t if need else None for t, need in zip((gq, gk, gv), needs[:3], strict=True)
            )
        grads = [gq, gk, gv]
        if self.has_mask:
            grads.append(None)
        return tuple(grads)

    def _grads(self, xp, P, b0, b1, nd, ga, va, qa, ka, ya, gq, gk, gv) -> None:
        """Slices b0..b1's gradients from their probabilities P (the batched path), with xp
        the arrays' module (numpy or CuPy)."""
        ct = P.dtype
        host = xp is np  # numpy: temporaries on this thread's buffers (host_cache.workspace)
        # (contiguous: the gradient of a sum is a broadcast view, which numpy's matmul
        # would not hand to BLAS)
        gr = _compute(_rows(ga, b0, b1, nd), ct)
        if host and not gr.flags.c_contiguous:
            gs = _work("g", gr.shape, ct)
            np.copyto(gs, gr)
        else:
            gs = xp.ascontiguousarray(gr)
        Pt = xp.swapaxes(P, -1, -2)
        if gv is not None:
            _product(Pt, gs, gv._data, b0, b1, nd)
        # dS = P * (dP - rowsum(dP * P)) * scale, the scale applied to g (L x E);
        # rowsum(dP * P) = rowsum(g * y): over the head dim, not the L x S scores, as
        # the flash kernels' backward computes it
        vt = xp.swapaxes(_compute(_rows(va, b0, b1, nd), ct), -1, -2)
        if host:
            gsc = np.multiply(gs, self.scale, out=_work("gs", gs.shape, ct))
            dP = np.matmul(gsc, vt, out=_work("dp", P.shape, ct))
        else:
            gsc = gs * self.scale
            dP = gsc @ vt
        rows = xp.einsum("...i,...i->...", gsc, _compute(_rows(ya, b0, b1, nd), ct))
        if host:  # dS = (dP - rows) * P, one pass (kernels.softmax_rows: the same bits)
            kernels.softmax_rows(dP, rows[..., None], 3, P)
        else:
            dP -= rows[..., None]
            dP *= P  # dS
        if gq is not None:
            _product(dP, _compute(_rows(ka, b0, b1, nd), ct), gq._data, b0, b1, nd)
        if gk is not None:
            dSt = xp.swapaxes(dP, -1, -2)
            _product(dSt, _compute(_rows(qa, b0, b1, nd), ct), gk._data, b0, b1, nd)

    def release_saved(self) -> None:
        super().release_saved()
        self.lse = None

    def name(self):
        if self.efficient:
            return "ScaledDotProductEfficientAttentionBackward0"
        return "ScaledDotProductFlashAttentionBackward0"


def _slice_offsets(arr, batch) -> np.ndarray:
    """The byte offsets of arr's (L, E) slices from its first element, batch index by batch
    index in C order (arr's batch dims are `batch`)."""
    off = np.zeros((), np.int64)
    for n, st in zip(batch, arr.strides[: len(batch)], strict=True):
        off = (off[..., None] + np.arange(n, dtype=np.int64) * st) if n else off[..., None][..., :0]
    return off.reshape(-1)


def _gemm_rows(pairs) -> list[int] | None:
    """The row strides (in float32 elements) of (array, row length) pairs whose rows numpy's
    matmul hands to gemm as they are (unit-stride rows at a stride of at least their length:
    its is_blasable2d), 0 for an array None; None if one is not."""
    rows = []
    for a, width in pairs:
        if a is None:
            rows.append(0)
            continue
        rs, cs = a.strides[-2:]
        if cs != 4 or rs % 4 or rs // 4 < width:
            return None
        rows.append(rs // 4)
    return rows


def _native_forward(node, q, k, v, y, lse_rows, mask) -> bool:
    """The float32 forward of _chunks and its part in one call of engine._native's
    attention_forward_f32: per slice, q scaled, numpy's cblas_sgemm calls for the scores and the
    output, the causal -inf, the softmax passes (kernels.softmax_rows' kinds 0 and 1) and
    numpy's exp (kernels.exp_f32) in the slice's cache, on the loops' threads without the GIL;
    the log-sum-exp then as _chunks makes it (mx + np.log(tot)). The same bits as the numpy
    path; False (nothing done) where it does not apply: a mask, another dtype, a dim below 2
    (numpy takes gemv there), rows not unit-stride, or the compiled loops (or numpy's exp, or
    its BLAS's addresses) missing."""
    native = kernels.native
    arrays = (q._data, k._data, v._data, y._data)
    if (
        mask is not None
        or native is None
        or not hasattr(native, "attention_forward_f32")
        or not all(type(a) is np.ndarray and a.dtype == np.float32 for a in arrays)
        or arrays[0].ndim < 2
    ):
        return False
    qa, ka, va, ya = arrays
    L, E, S, Dv = qa.shape[-2], qa.shape[-1], ka.shape[-2], va.shape[-1]
    if min(L, E, S, Dv) < 2:
        return False
    rows = _gemm_rows(((qa, E), (ka, E), (va, Dv), (ya, Dv)))
    if rows is None or not (kernels.native_exp_f32() and kernels._load_native_gemm()):
        return False
    batch = qa.shape[:-2]
    slices = math.prod(batch)
    offsets = np.stack([_slice_offsets(a, batch) for a in arrays])
    m = np.empty(slices * L, np.float32)
    t = np.empty(slices * L, np.float32)
    dims = (L, S, E, Dv, *rows)
    addresses = [a.ctypes.data for a in arrays]
    _native_call(
        _native_parts(q, k), native.attention_forward_f32,
        *addresses, offsets, m, t, dims, node.scale, node.causal,
    )  # fmt: skip
    if lse_rows.size:
        lse_rows[...] = (m + np.log(t)).reshape(lse_rows.shape)
    return True


def _native_parts(q, k) -> int:
    """The threads the compiled attention's slices take: the engine's when parts pay
    (_ranges), else 1 (and 1 on the pool's own threads)."""
    if len(_ranges(q, k)) > 1 and not kernels._on_pool.yes:
        return kernels.get_num_threads()
    return 1


def _native_call(parts: int, fn, *args) -> None:
    """fn(*args, parts), BLAS held to one thread meanwhile when the slices take several (as
    kernels.run_parts holds it)."""
    held = kernels._blas_to_one(kernels._blas_controllers() or ()) if parts > 1 else []
    try:
        fn(*args, parts)
    finally:
        kernels._blas_back(held)


def _native_backward(node, q, k, v, g, ya, lse_a, gq, gk, gv) -> bool:
    """The float32 backward of _chunks (given the log-sum-exp) and _grads in one call of
    engine._native's attention_backward_f32, per slice in its cache, on the loops' threads:
    g * scale and the rows' sums of (g * scale) * y are made first as _grads makes them (numpy's
    multiply and einsum, over all slices at once: the same values row by row), then per slice
    P, gv, dP, dS, gq and gk by numpy's cblas_sgemm calls and the softmax passes. The same bits
    as the numpy path; False (nothing done) where _native_forward would not apply (a mask is
    the caller's to refuse)."""
    native = kernels.native
    outs = [a._data if a is not None else None for a in (gq, gk, gv)]
    arrays = [q._data, k._data, v._data, g._data, ya, *[a for a in outs if a is not None]]
    if (
        native is None
        or not hasattr(native, "attention_backward_f32")
        or not all(type(a) is np.ndarray and a.dtype == np.float32 for a in arrays)
        or arrays[0].ndim < 2
        or lse_a.dtype != np.float32
        or not any(a is not None for a in outs)
    ):
        return False
    qa, ka, va, ga = arrays[:4]
    L, E, S, Dv = qa.shape[-2], qa.shape[-1], ka.shape[-2], va.shape[-1]
    if min(L, E, S, Dv) < 2 or ga.shape != ya.shape or ga.shape[-1] != Dv:
        return False
    rows = _gemm_rows(((qa, E), (ka, E), (va, Dv), *zip(outs, (E, E, Dv), strict=True)))
    if rows is None or not (kernels.native_exp_f32() and kernels._load_native_gemm()):
        return False
    batch = qa.shape[:-2]
    # what _grads makes per chunk: g * scale and its rows' sums with the output (the same
    # values row by row); g as it is laid out where its rows are numpy's gemm operands (BLAS
    # packs them: the leading dimension changes no value), else a contiguous copy as _grads'
    gc = ga if _gemm_rows(((ga, Dv),)) is not None else np.ascontiguousarray(ga)
    gsc = np.multiply(gc, node.scale)  # (laid out as gc)
    sums = np.einsum("...i,...i->...", gsc, ya)
    lse = np.ascontiguousarray(lse_a, dtype=np.float32).reshape(-1)
    sums = np.ascontiguousarray(sums, dtype=np.float32).reshape(-1)
    placed = [qa, ka, va, gc, gsc, *[a if a is not None else qa for a in outs]]
    offsets = np.stack([_slice_offsets(a, batch) for a in placed])
    addresses = tuple(a.ctypes.data for a in placed[:5]) + tuple(
        a.ctypes.data if a is not None else 0 for a in outs
    )
    dims = (L, S, E, Dv, *rows, gc.strides[-2] // 4, gsc.strides[-2] // 4)
    _native_call(
        _native_parts(q, k), native.attention_backward_f32,
        addresses, offsets, lse, sums, dims, node.scale, node.causal,
    )  # fmt: skip
    return True


def _ranges(q, k) -> list[tuple[int, int]]:
    """Ranges of the leading batch dim for kernels.run_parts: one per thread, BLAS then
    single-threaded in each, when a sample's work pays (kernels.split_ranges). A sample's
    work counted as 5 products of H x L x S x E (backward has 5; forward 2 and the softmax's
    passes over the scores, and it gains too: (8, 4, 128, 64) float32 forward 6.2 -> 4.2 ms,
    backward 10.6 -> 8.4 ms, against numpy's BLAS threading each small product itself)."""
    lead = q.shape[0] if q.ndim > 2 else 1
    per = math.prod(q.shape[1:-2]) * q.shape[-2] * k.shape[-2] * q.shape[-1] * 5
    return kernels.split_ranges(lead, per, _PARTS_PER_THREAD)


# Ranges per thread, handed out as threads get free (kernels.run_parts): a thread that is late
# (descheduled on a busy machine) leaves its share to the others. Any split gives the same bits.
_PARTS_PER_THREAD = 4


def _cuda_efficient(q, k, v) -> bool:
    """Whether torch's CUDA memory-efficient kernel's buffers apply: 4-D float32 inputs on a
    device that runs torch's CUDA kernels (cuda, or meta under the caching model). Its layouts
    and buffers were read off torch 2.11 on an H100 (bench/data/cuda_sdpa_h100.json)."""
    return (
        q.ndim == k.ndim == v.ndim == 4
        and q._dtype is dtypes.float32
        and cuda_reduce.runs_cuda_kernels(q._device)
    )


def _efficient_workspace(q) -> int:
    """Bytes of the efficient backward's float32 workspace: grad_q's accumulator, one
    (align(L, I), align(E, 64)) block per batch and head, I = 64 queries per block for head
    dims to 64 and 128 above (the sm80 kernels' tiles), and a few bytes of counters."""
    B_, H_, L_, E_ = q.shape
    rows = 64 if E_ <= 64 else 128
    return B_ * H_ * (-(-L_ // rows) * rows) * (-(-E_ // 64) * 64) * 4 + 4 * B_ * H_


def _cpu_kernel(q, k, v) -> bool:
    """Whether torch's CPU flash kernel's layouts and buffers apply (cpu, 4-D inputs)."""
    return q._device.type == "cpu" and q.ndim == k.ndim == v.ndim == 4


def _accumulation(dtype):
    """The dtype the kernels accumulate in (the log-sum-exp's, the tiles'): float64 for
    float64 inputs, else float32."""
    return dtypes.float64 if dtype is dtypes.float64 else dtypes.float32


def _cpu_splits(L: int, S: int) -> tuple[int, int]:
    """The query and key/value tile sizes of torch's CPU flash kernel (FlashAttentionKernel)."""
    qs = 256 if L >= 768 else 64 if L >= 192 else 32
    return min(qs, L), 512 if S >= 512 else S


def _blhd_laid(t) -> bool:
    """Whether [B, H, L, E] `t` is laid out as [B, L, H, E] (its transpose(1, 2) contiguous,
    size-1 dims aside, as torch's is_contiguous)."""
    want = _blhd(t.shape)
    return all(n == 1 or s == w for n, s, w in zip(t.shape, t.stride(), want, strict=True))


def _blhd_grads(q, k, v) -> tuple:
    """Gradients of q, k and v laid out [B, L, H, E], as both fused kernels make them."""
    return tuple(
        kernels.relayout(_empty(t.shape, t._dtype, t._device), _blhd(t.shape)) for t in (q, k, v)
    )


def _blhd(shape) -> tuple:
    """Strides (elements) of [B, H, L, E] laid out as [B, L, H, E]."""
    B_, H_, L_, E_ = shape
    return (L_ * H_ * E_, E_, H_ * E_, 1)


# scores per run of _chunks (4 MiB of float32)
_CHUNK_SCORES = 1 << 20


def _compute(arr, dtype):
    """arr in the computation's dtype (a copy only when it is another dtype)."""
    return arr if arr.dtype == dtype else arr.astype(dtype)


def _lead(arr, b0: int, b1: int, nd: int):
    """Rows b0..b1 of the leading batch dim of an array broadcast against [B, ..., L, S] (nd
    dims): sliced when it has that dim, as it is when it broadcasts over it."""
    if arr.ndim == nd and nd > 2 and arr.shape[0] != 1:
        return arr[b0:b1]
    return arr


def _rows(arr, b0: int, b1: int, nd: int):
    """Rows b0..b1 of the leading batch dim of an array of a computation whose inputs have `nd`
    dims (the whole array when they have no batch dims)."""
    return arr[b0:b1] if nd > 2 else arr


def _put(arr, b0: int, b1: int, nd: int, value) -> None:
    """Rows b0..b1 of an output or gradient written (_rows)."""
    _rows(arr, b0, b1, nd)[...] = value


def _product(a, b, arr, b0: int, b1: int, nd: int) -> None:
    """Rows b0..b1 of an output or gradient = a @ b: numpy's product written in place when
    it has their dtype (the same values as through a temporary), else put (_put)."""
    dest = _rows(arr, b0, b1, nd)
    if (
        type(dest) is np.ndarray
        and dest.dtype == a.dtype == b.dtype
        and dest.shape
        == (np.broadcast_shapes(a.shape[:-2], b.shape[:-2]) + (a.shape[-2], b.shape[-1]))
    ):
        np.matmul(a, b, out=dest)
    else:
        dest[...] = a @ b


def _work(key, shape, ct):
    """A temporary on this thread's buffer (host_cache.workspace), for the attention's chunks."""
    return host_cache.workspace(("attention", key), shape, ct)


def _at(arr, idx, batch):
    """The (L, E) slice of `arr` at batch index `idx`, broadcasting arr's leading dims."""
    lead = arr.ndim - 2
    if lead <= 0:
        return arr
    sub = idx[len(idx) - lead :]
    shape = arr.shape[:lead]
    return arr[tuple(0 if n == 1 else i for i, n in zip(sub, shape, strict=True))]


def _acc(arr, idx, value):
    """Add a slice's gradient into arr (summing over batch dims that arr broadcast)."""
    lead = arr.ndim - 2
    sub = idx[len(idx) - lead :] if lead > 0 else ()
    key = tuple(0 if n == 1 else i for i, n in zip(sub, arr.shape[:lead], strict=True))
    arr[key] += value.astype(arr.dtype)


def attention_fused(
    query,
    key,
    value,
    attn_mask=None,
    dropout_p=0.0,
    is_causal=False,
    scale=None,
    efficient=False,
):
    from engine.creation import get_generator

    sc = scale if scale is not None else 1.0 / math.sqrt(query.shape[-1])
    seed = int(get_generator().integers(0, 2**31)) if dropout_p > 0 else 0
    if attn_mask is not None and attn_mask._dtype is dtypes.bool_:
        # convert_boolean_attn_mask, before any backend: the float mask is what the kernel
        # keeps for backward
        attn_mask = _float_mask(attn_mask, query._dtype)
    if efficient and attn_mask is not None and _cuda_efficient(query, key, value):
        attn_mask = _padded_mask(attn_mask)
    args = (query, key, value) if attn_mask is None else (query, key, value, attn_mask)
    return FusedAttention.apply(
        *args,
        op="scaled_dot_product_attention",
        causal=is_causal,
        scale=sc,
        p=dropout_p,
        seed=seed,
        efficient=efficient,
    )


def _padded_mask(mask: Tensor) -> Tensor:
    """The CUDA memory-efficient kernel's bias: a last dim that is not a multiple of 16 is
    copied into a tensor padded to one (kept for backward) and read through a view of it."""
    S = mask.shape[-1]
    if S % 16 == 0:
        return mask
    with no_grad():
        padded = _empty(mask.shape[:-1] + (-(-S // 16) * 16,), mask._dtype, mask._device)
        view = padded[..., :S]
        if _live(mask):
            view._data[...] = mask._data
        return view


# ---------------------------------------------------------------------------------------------
# the public function
# ---------------------------------------------------------------------------------------------
def scaled_dot_product_attention(
    query,
    key,
    value,
    attn_mask=None,
    dropout_p=0.0,
    is_causal=False,
    scale=None,
    enable_gqa=False,
):
    """softmax(q @ k^T * scale + mask) @ v over the last two dims (PyTorch's signature).

    `attn_mask`: bool (True = take part) or float (added to the scores), broadcast to
    [..., L, S]. `is_causal`: the upper triangle is masked. `dropout_p` is applied whenever it is
    non-zero (as in PyTorch: pass 0.0 in eval). Memory follows the backend chosen by
    `engine.nn.attention.sdpa_kernel`, or PyTorch's own choice (see this module's docstring).
    """
    from engine.amp import autocast_mode

    if autocast_mode.STATE.active and not autocast_mode.STATE.suspended:
        # in autocast's lower-precision list: cast once here, run the internals as they are
        query, key, value, attn_mask = autocast_mode.cast_inputs(
            "scaled_dot_product_attention", (query, key, value, attn_mask)
        )
        with autocast_mode.suspended():
            return scaled_dot_product_attention(
                query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa
            )
    _check_qkv(query, key, value, attn_mask, dropout_p, is_causal, enable_gqa)
    backend = _backend(query, key, value, attn_mask, dropout_p)
    if backend == MATH:
        return attention_math(query, key, value, attn_mask, dropout_p, is_causal, scale)[0]
    return attention_fused(
        query,
        key,
        value,
        attn_mask,
        dropout_p,
        is_causal,
        scale,
        efficient=backend == EFFICIENT_ATTENTION,
    )


__all__ = ["scaled_dot_product_attention", "safe_softmax", "attention_math"]


def _register() -> None:
    from engine.ops.registry import Scenario, register

    register(
        "scaled_dot_product_attention",
        scaled_dot_product_attention,
        function=False,
        functional=True,
        scenario=Scenario(
            inputs=("query", "key", "value"),
            optional_inputs=("attn_mask",),
            args=(
                ("dropout_p", float, 0.0, "dropout on the attention weights"),
                ("is_causal", bool, False, "mask the upper triangle (no attn_mask then)"),
                ("scale", float | None, None, "default 1/sqrt(E)"),
            ),
            doc="softmax(q k^T * scale + mask) v; memory of the backend sdpa_kernel picks",
        ),
    )


_register()
