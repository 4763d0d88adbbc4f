"""Accounting models: how many bytes an allocation accounts for, and the counters PyTorch keeps.

- ``ExactModel`` ("exact"): a request accounts exactly its bytes and nothing is cached, so
  reserved == allocated. One segment per allocation.
- ``CachingModel`` ("caching"): PyTorch's CUDA caching allocator with its default settings and a
  single stream (c10/cuda/CUDACachingAllocator.cpp): sizes round up to 512 bytes, a small pool
  (<= 1 MiB, 2 MiB segments) and a large pool, best fit by (size, address), split and merge,
  freed blocks stay cached (reserved) until ``empty_cache()``.

Both keep PyTorch's statistics (``memory_stats()`` has torch.cuda.memory_stats()'s flat keys) and
raise ``OutOfMemoryError`` with PyTorch's message when an allocation would pass ``limit``; an
out-of-memory leaves every counter as it was except ``num_ooms`` and ``num_alloc_retries``.

>>> model = make_model("caching", "cuda")
>>> block = model.malloc(400_000_000)          # torch.randn(10000, 10000) on a GPU
>>> model.allocated_bytes, model.reserved_bytes
(400556032, 400556032)
>>> model.free(block)
>>> model.allocated_bytes, model.reserved_bytes  # the segment stays cached
(0, 400556032)
"""

from __future__ import annotations

from engine.allocator.models.base import (
    LARGE_BUFFER,
    MIN_BLOCK_SIZE,
    MIN_LARGE_ALLOC,
    POOL_SCOPES,
    ROUND_LARGE,
    SMALL_BUFFER,
    SMALL_SIZE,
    STAT_NAMES,
    AccountingModel,
    Block,
    round_size,
    segment_size,
)
from engine.allocator.models.caching import CachingModel
from engine.allocator.models.exact import ExactModel

MODELS: dict[str, type[AccountingModel]] = {"caching": CachingModel, "exact": ExactModel}


def make_model(name: str, device: str, limit: int | None = None) -> AccountingModel:
    """The accounting model called ``name`` ("exact" or "caching") for ``device``.

    >>> make_model("exact", "cpu", limit=1024).limit
    1024
    """
    try:
        cls = MODELS[name]
    except (KeyError, TypeError):
        choices = ", ".join(repr(n) for n in sorted(MODELS))
        raise ValueError(f"unknown accounting model {name!r}; choose one of {choices}") from None
    return cls(device, limit)


__all__ = [
    "LARGE_BUFFER",
    "MIN_BLOCK_SIZE",
    "MIN_LARGE_ALLOC",
    "MODELS",
    "POOL_SCOPES",
    "ROUND_LARGE",
    "SMALL_BUFFER",
    "SMALL_SIZE",
    "STAT_NAMES",
    "AccountingModel",
    "Block",
    "CachingModel",
    "ExactModel",
    "make_model",
    "round_size",
    "segment_size",
]
