"""autocast: mixed precision with PyTorch's casting lists and its cast cache.

>>> with engine.autocast("cuda", dtype=engine.bfloat16):   # "meta" follows the cuda lists
...     loss = loss_fn(model(x), y)                          # linear/matmul/conv in bf16
>>> loss.backward()

Inside the region each op is run under its list's policy (torch 2.13's autocast, per device):

- lower precision ("cuda" and "meta"): linear, matmul/mm/bmm, conv1d/conv2d/conv_transpose,
  baddbmm/addmm, einsum, prelu, scaled_dot_product_attention: floating inputs other than
  float64 are cast to the region's dtype (float16 by default on cuda, bfloat16 on cpu).
- float32: exp, log, pow, rsqrt, softplus, layer_norm, group_norm, softmax, log_softmax, sum,
  prod, cumsum, mse_loss, nll_loss (so cross_entropy), binary_cross_entropy_with_logits ...:
  lower-precision inputs are cast to float32.
- every other op runs in its inputs' dtypes with the usual promotion (float16 + float32 ->
  float32).

The lists for device_type="cpu" are PyTorch's CPU lists, which differ from CUDA's: on CPU only the
matmul/convolution family runs in lower precision and only losses (mse_loss, nll_loss,
cross-entropy ...) are pinned to float32; softmax, layer_norm, exp ... follow their inputs.
Tensors on other devices than the region's are left alone (meta counts as cuda).

The cast cache: a float32 leaf that requires grad (a parameter) cast to the lower dtype is cast
once per region and the copy reused by every op in it (a tied weight, a layer run twice); the
cache is emptied when the outermost region exits. So both copies are in memory: the float32
master weights, and the half copies that the region's ops use and their backward keeps.
"""

from __future__ import annotations

import functools
import weakref

from engine import dtypes

# engine.tensor is imported where it is used: engine.autograd imports this module while the
# engine package (and engine.tensor) may still be initialising.

LOWER, FP32 = "lower_precision_fp", "fp32"

# Op names (the functions' names, as in PyTorch's lists) per policy and device kind.
CUDA_LOWER = frozenset(
    """_convolution conv1d conv2d conv3d conv_tbc conv_transpose1d conv_transpose2d
    conv_transpose3d convolution prelu addmm addmv addr matmul einsum mm mv linalg_vecdot linear
    addbmm baddbmm bmm chain_matmul linalg_multi_dot scaled_dot_product_attention""".split()
)
CUDA_FP32 = frozenset(
    """acos asin cosh erfinv exp expm1 log log10 log2 log1p reciprocal rsqrt sinh tan pow
    softplus layer_norm native_layer_norm group_norm frobenius_norm nuclear_norm
    cosine_similarity poisson_nll_loss cosine_embedding_loss nll_loss nll_loss2d
    hinge_embedding_loss kl_div l1_loss smooth_l1_loss huber_loss mse_loss margin_ranking_loss
    multilabel_margin_loss soft_margin_loss triplet_margin_loss multi_margin_loss
    binary_cross_entropy_with_logits dist pdist cdist renorm logsumexp sum prod cumprod cumsum
    linalg_vector_norm norm softmax log_softmax""".split()
)
CPU_LOWER = frozenset(
    """conv1d conv2d conv3d bmm mm linalg_vecdot baddbmm addmm addbmm linear _convolution
    matmul conv_tbc conv_transpose1d conv_transpose2d conv_transpose3d prelu
    scaled_dot_product_attention""".split()
)
CPU_FP32 = frozenset(
    """avg_pool3d binary_cross_entropy grid_sampler polar prod quantile nanquantile stft cdist
    trace cholesky inverse max_pool3d adaptive_avg_pool3d mse_loss cosine_embedding_loss
    nll_loss nll_loss2d hinge_embedding_loss poisson_nll_loss smooth_l1_loss cross_entropy
    l1_loss huber_loss margin_ranking_loss soft_margin_loss triplet_margin_loss
    multi_margin_loss kl_div multilabel_margin_loss binary_cross_entropy_with_logits""".split()
)
LISTS = {"cuda": (CUDA_LOWER, CUDA_FP32), "cpu": (CPU_LOWER, CPU_FP32)}

# The engine's primitives (Function subclasses) and the op name each runs for; composites
# (cross_entropy, scaled_dot_product_attention) call `cast_inputs` themselves.
_PRIMITIVES = {
    "engine.ops.nn.linear.Linear": "linear",
    "engine.ops.linalg.Matmul": "matmul",
    "engine.ops.contract.Baddbmm": "baddbmm",
    "engine.ops.conv_transpose.ConvTranspose2d": "conv_transpose2d",
    "engine.ops.group_norm.GroupNorm": "group_norm",
    "engine.ops.nn.conv.Conv2d": "conv2d",
    "engine.ops.reduce.Softmax": "softmax",
    "engine.ops.reduce.LogSoftmax": "log_softmax",
    "engine.ops.reduce.Sum": "sum",
    "engine.ops.elementwise.Exp": "exp",
    "engine.ops.elementwise.Log": "log",
    "engine.ops.elementwise.PowScalar": "pow",
    "engine.ops.elementwise.PowTensor": "pow",
    "engine.ops.activations.Softplus": "softplus",
    "engine.ops.nn.norm.LayerNorm": "layer_norm",
    "engine.ops.nn.loss.MseLoss": "mse_loss",
    "engine.ops.nn.loss.NllLoss": "nll_loss",
}


class _State:
    """What the op dispatch reads: `active` is False outside any region (the only check on the
    hot path); `suspended` while a cast op's own internals run (PyTorch excludes autocast there)."""

    active = False
    depth = 0
    device_type = "cuda"
    dtype = None
    suspended = False
    cache_enabled = True
    cache: dict = {}
    names: dict = {}  # Function subclass -> op name


STATE = _State()


def _name_of(cls) -> str | None:
    names = STATE.names
    if cls not in names:
        names[cls] = _PRIMITIVES.get(f"{cls.__module__}.{cls.__qualname__}")
    return names[cls]


def register_primitive(cls, name: str) -> None:
    """Put a primitive (a Function subclass) under autocast's policy for op `name`."""
    STATE.names[cls] = name


def _applies_to(t) -> bool:
    kind = t._device.type
    if STATE.device_type == "cpu":
        return kind == "cpu"
    return kind in ("cuda", "meta") if STATE.device_type in ("cuda", "meta") else False


def _policy(name: str) -> str | None:
    lists = LISTS["cpu" if STATE.device_type == "cpu" else "cuda"]
    if name in lists[0]:
        return LOWER
    if name in lists[1]:
        return FP32
    return None


def _cast(t, to):
    """t.to(to), through the cast cache for a parameter cast to the lower dtype."""
    cacheable = (
        STATE.cache_enabled
        and to is STATE.dtype
        and t._dtype is dtypes.float32
        and t.requires_grad
        and t._grad_fn is None
        and t._base is None
    )
    if cacheable:
        hit = STATE.cache.get(id(t))
        if hit is not None and hit[0]() is t:
            return hit[1]
    prev = STATE.suspended
    STATE.suspended = True
    try:
        c = t.to(to)
    finally:
        STATE.suspended = prev
    if cacheable:
        STATE.cache[id(t)] = (weakref.ref(t), c)
    return c


def policy(name: str) -> str | None:
    """The policy op `name` runs under now: LOWER, FP32, or None (outside a region too)."""
    if not STATE.active or STATE.suspended:
        return None
    return _policy(name)


def cast_inputs(name: str, args):
    """args with their tensors cast as op `name`'s policy says (unchanged outside a region)."""
    if not STATE.active or STATE.suspended:
        return args
    policy = _policy(name)
    if policy is None:
        return args
    from engine.tensor import Tensor

    out = list(args)
    # Last argument first, as PyTorch's C++ autocast wrappers evaluate their casts (GCC builds):
    # the order of the casts is the order of their nodes, so of their backward.
    for i in range(len(out) - 1, -1, -1):
        a = out[i]
        if isinstance(a, Tensor) and a._dtype.is_floating_point and _applies_to(a):
            if policy == LOWER and a._dtype is not dtypes.float64 and a._dtype is not STATE.dtype:
                out[i] = _cast(a, STATE.dtype)
            elif policy == FP32 and a._dtype in (dtypes.float16, dtypes.bfloat16):
                out[i] = _cast(a, dtypes.float32)
    return tuple(out)


def for_primitive(cls, args):
    """Called by Function.apply inside a region: the cast arguments, or None to leave them."""
    if STATE.suspended:
        return None
    name = _name_of(cls)
    if name is None:
        return None
    return cast_inputs(name, args)


class suspended:  # noqa: N801
    """Run a composite's internals without autocast (PyTorch excludes the autocast key there)."""

    def __enter__(self):
        self._prev = STATE.suspended
        STATE.suspended = True
        return self

    def __exit__(self, *exc):
        STATE.suspended = self._prev
        return False


def _default_dtype(device_type: str):
    return dtypes.bfloat16 if device_type == "cpu" else dtypes.float16


class autocast:  # noqa: N801 - PyTorch's spelling
    """Context manager and decorator: ops in it run in mixed precision (see the module doc)."""

    def __init__(self, device_type: str, dtype=None, enabled: bool = True, cache_enabled=None):
        if not isinstance(device_type, str):
            raise ValueError(
                f"Expected `device_type` of type `str`, got: `{type(device_type).__name__}`"
            )
        if device_type not in ("cuda", "cpu", "meta"):
            raise RuntimeError(
                f"User specified an unsupported autocast device_type '{device_type}' (expected "
                "'cuda', 'cpu' or 'meta')"
            )
        self.device_type = device_type
        self.fast_dtype = (
            dtypes.from_any(dtype) if dtype is not None else _default_dtype(device_type)
        )
        if self.fast_dtype not in (dtypes.float16, dtypes.bfloat16):
            raise RuntimeError(
                f"In autocast, but the target dtype is not supported: {self.fast_dtype.name}. "
                "Expected float16 or bfloat16."
            )
        self.enabled = bool(enabled)
        self.cache_enabled = True if cache_enabled is None else bool(cache_enabled)

    def __enter__(self):
        s = STATE
        self._prev = (s.active, s.device_type, s.dtype, s.cache_enabled)
        s.depth += 1
        s.active = self.enabled
        s.device_type, s.dtype = self.device_type, self.fast_dtype
        s.cache_enabled = self.cache_enabled
        return self

    def __exit__(self, *exc):
        s = STATE
        s.depth -= 1
        s.active, s.device_type, s.dtype, s.cache_enabled = self._prev
        if s.depth == 0:
            s.cache.clear()  # the half copies of the parameters die here (or with the graph)
        return False

    def __call__(self, func):
        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            with autocast(self.device_type, self.fast_dtype, self.enabled, self.cache_enabled):
                return func(*args, **kwargs)

        return wrapper


def is_autocast_enabled(device_type: str | None = None) -> bool:
    if not STATE.active:
        return False
    return device_type is None or device_type == STATE.device_type


def get_autocast_dtype(device_type: str):
    if STATE.active and STATE.device_type == device_type:
        return STATE.dtype
    return _default_dtype(device_type)


def custom_fwd(fwd=None, *, device_type: str = "cuda", cast_inputs=None):
    """torch.amp.custom_fwd: run `fwd` with autocast off, its floating inputs cast to
    `cast_inputs` when given and a region is active."""
    if fwd is None:
        return functools.partial(custom_fwd, device_type=device_type, cast_inputs=cast_inputs)

    @functools.wraps(fwd)
    def wrapper(*args, **kwargs):
        from engine.tensor import Tensor

        if cast_inputs is not None and STATE.active:
            to = dtypes.from_any(cast_inputs)
            args = tuple(
                a.to(to) if isinstance(a, Tensor) and a._dtype.is_floating_point else a
                for a in args
            )
            with suspended():
                return fwd(*args, **kwargs)
        return fwd(*args, **kwargs)

    return wrapper


__all__ = [
    "autocast",
    "cast_inputs",
    "custom_fwd",
    "get_autocast_dtype",
    "is_autocast_enabled",
    "register_primitive",
]
