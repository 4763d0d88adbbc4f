"""Memory statistics named after torch.cuda's functions; each takes an optional device.

>>> engine.memory.reset_peak_memory_stats()
>>> y = x.relu()
>>> engine.memory.max_memory_allocated()
"""

from __future__ import annotations

from engine.allocator.tracked import get_allocator
from engine.device import as_device


def _alloc(device):
    return get_allocator(as_device(device) if device is not None else "cpu")


def memory_allocated(device=None) -> int:
    return _alloc(device).model.allocated_bytes


def max_memory_allocated(device=None) -> int:
    return _alloc(device).model.max_allocated_bytes


def memory_reserved(device=None) -> int:
    return _alloc(device).model.reserved_bytes


def max_memory_reserved(device=None) -> int:
    return _alloc(device).model.max_reserved_bytes


def reset_peak_memory_stats(device=None) -> None:
    _alloc(device).model.reset_peak_stats()


def memory_stats(device=None) -> dict:
    """PyTorch's flat keys ("allocated_bytes.all.current", ...); on cuda also the real CuPy pool."""
    alloc = _alloc(device)
    stats = dict(alloc.model.memory_stats())
    dev = as_device(device) if device is not None else None
    if dev is not None and dev.type == "cuda":
        from engine.allocator.cuda_hook import pool_usage

        stats.update(pool_usage(dev.index or 0))
    return stats


def memory_snapshot(device=None) -> list[dict]:
    return _alloc(device).model.segments()


def empty_cache(device=None) -> None:
    _alloc(device).model.empty_cache()
    dev = as_device(device) if device is not None else None
    if dev is not None and dev.type == "cuda":
        import cupy

        cupy.get_default_memory_pool().free_all_blocks()


def set_allocator_model(model: str, device=None) -> None:
    """Account with "exact" (bytes = nbytes) or "caching" (PyTorch's CUDA caching allocator)."""
    if device is None:
        for dev in ("cpu", "meta"):
            _alloc(dev).set_model(model)
        return
    _alloc(device).set_model(model)


def get_allocator_model(device=None) -> str:
    return _alloc(device).model_name


def set_memory_limit(nbytes: int | None, device=None) -> None:
    """Past the limit an allocation raises OutOfMemoryError (PyTorch's wording)."""
    if nbytes is not None and (not isinstance(nbytes, int) or nbytes < 0):
        raise ValueError(
            f"memory limit must be a non-negative number of bytes or None, got {nbytes!r}"
        )
    if device is None:
        for dev in ("cpu", "meta"):
            _alloc(dev).set_limit(nbytes)
        return
    _alloc(device).set_limit(nbytes)
