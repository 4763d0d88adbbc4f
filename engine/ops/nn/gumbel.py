"""F.gumbel_softmax: torch's composite, op for op (so its blocks and nodes are torch's):

    gumbels = -empty_like(logits).exponential_().log()
    y_soft = ((logits + gumbels) / tau).softmax(dim)
    hard: y_hard = zeros_like(logits).scatter_(dim, y_soft.max(dim, keepdim=True)[1], 1.0)
          ret = y_hard - y_soft.detach() + y_soft          (straight through)

The exponential noise comes from the engine's generator (engine.manual_seed), so values are
not torch's for the same seed; exponential_noise_ re-derives it.
"""

from __future__ import annotations

import warnings

from engine.ops.nn.common import _live


def exponential_noise_(t, generator=None, bump_version: bool = True):
    """Fill t in place with Exp(1) samples from the engine's generator (torch's exponential_();
    bump_version=False for a caller whose autograd Function moves the version itself)."""
    from engine import creation, kernels

    dev = t._device
    if _live(dev):
        arr = t._data
        if dev.type == "cuda":
            xp = kernels.xp_of(t)
            arr[...] = xp.random.standard_exponential(arr.shape, dtype=arr.dtype)
        else:
            gen = generator or creation._generator
            if arr.dtype.name in ("float32", "float64") and arr.flags.c_contiguous:
                gen.standard_exponential(out=arr, dtype=arr.dtype)
            else:
                arr[...] = gen.standard_exponential(arr.shape)
    if bump_version:
        t._storage.version += 1
    return t


def gumbel_softmax(logits, tau: float = 1, hard: bool = False, eps: float = 1e-10, dim: int = -1):
    """Samples of the Gumbel-softmax distribution (hard: one-hot, straight-through gradient)."""
    import engine

    if eps != 1e-10:
        warnings.warn("`eps` parameter is deprecated and has no effect.", stacklevel=2)
    gumbels = -exponential_noise_(engine.empty_like(logits)).log()
    gumbels = (logits + gumbels) / tau
    y_soft = gumbels.softmax(dim)
    if hard:
        index = y_soft.max(dim, keepdim=True)[1]
        y_hard = engine.zeros_like(logits).scatter_(dim, index, 1.0)
        return y_hard - y_soft.detach() + y_soft
    return y_soft
