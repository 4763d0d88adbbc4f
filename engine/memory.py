"""Memory statistics named after torch.cuda's functions; each takes an optional device.

>>> engine.memory.reset_peak_memory_stats()
>>> y = x.relu()
>>> engine.memory.max_memory_allocated()
"""

from __future__ import annotations

import sys

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


def memory_scratch(device=None) -> int:
    """Kernel workspace held now that is not charged to memory_allocated (softmax's per-row
    max and sum, a convolution's columns): PyTorch's kernels do not allocate it, or it is
    device-specific. Reported apart so that the allocated figures stay PyTorch's."""
    return _alloc(device).scratch_bytes


def max_memory_scratch(device=None) -> int:
    """The peak of memory_scratch() since the last reset_peak_memory_stats()."""
    return _alloc(device).max_scratch_bytes


def reset_peak_memory_stats(device=None) -> None:
    alloc = _alloc(device)
    alloc.model.reset_peak_stats()
    alloc.max_scratch_bytes = alloc.scratch_bytes


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
    """The accounting model's cached blocks (the caching model) are released; on cpu also the
    engine's cache of freed arrays (engine/host_cache.py), on cuda CuPy's pool."""
    _alloc(device).model.empty_cache()
    dev = as_device(device) if device is not None else None
    if dev is None or dev.type == "cpu":
        from engine import host_cache

        host_cache.clear()
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


def memory_summary(device=None, abbreviated: bool = False) -> str:
    """torch.cuda.memory_summary()'s table, from memory_stats(): every metric's current, peak,
    total allocated and total freed, for all pools and (unless abbreviated) each pool."""
    stats = memory_stats(device)
    dev = as_device(device) if device is not None else as_device("cpu")
    index = dev.index or 0
    title = "PyTorch CUDA memory summary" if dev.type == "cuda" else "memprof engine memory summary"

    def fmt_size(sz, pref_sz):
        prefixes = ["B  ", "KiB", "MiB", "GiB", "TiB", "PiB"]
        prefix = prefixes[0]
        for new_prefix in prefixes[1:]:
            if pref_sz < 768 * 1024:
                break
            prefix = new_prefix
            sz //= 1024
            pref_sz /= 1024
        return f"{sz:6d} {prefix}"

    def fmt_count(cnt, pref_cnt):
        prefixes = [" ", "K", "M"]
        prefix = prefixes[0]
        for new_prefix in prefixes[1:]:
            if pref_cnt < 750 * 1000:
                break
            prefix = new_prefix
            cnt //= 1000
            pref_cnt /= 1000
        return f"{cnt:7d} {prefix} "

    metrics = [
        ("allocated_bytes", "Allocated memory", fmt_size),
        ("active_bytes", "Active memory", fmt_size),
        ("requested_bytes", "Requested memory", fmt_size),
        ("reserved_bytes", "GPU reserved memory", fmt_size),
        ("inactive_split_bytes", "Non-releasable memory", fmt_size),
        ("allocation", "Allocations", fmt_count),
        ("active", "Active allocs", fmt_count),
        ("segment", "GPU reserved segments", fmt_count),
        ("inactive_split", "Non-releasable allocs", fmt_count),
    ]
    lines = ["=" * 75, f" {'':16} {title}, device ID {index:<17d} "[:75].ljust(75)]
    lines.append("-" * 75)
    lines.append(
        f"  {'':9} CUDA OOMs: {stats['num_ooms']:<12d} | {'':6} cudaMalloc retries: "
        f"{stats['num_alloc_retries']:<8d}  "
    )
    lines.append("=" * 75)
    lines.append("        Metric         | Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  ")
    for key, name, formatter in metrics:
        lines.append("-" * 75)
        scopes = [("all", name)]
        if not abbreviated:
            scopes += [
                ("large_pool", "      from large pool"),
                ("small_pool", "      from small pool"),
            ]
        pref = None
        for scope, label in scopes:
            prefix = f"{key}.{scope}."
            values = [stats[prefix + f] for f in ("current", "peak", "allocated", "freed")]
            if pref is None:
                pref = values
            cells = " | ".join(formatter(v, p) for v, p in zip(values, pref, strict=True))
            lines.append(f" {label:<21} | {cells} ")
    for key, name in (
        ("oversize_allocations", "Oversize allocations"),
        ("oversize_segments", "Oversize GPU segments"),
    ):
        lines.append("-" * 75)
        values = [stats[f"{key}.{f}"] for f in ("current", "peak", "allocated", "freed")]
        cells = " | ".join(fmt_count(v, v) for v in values)
        lines.append(f" {name:<21} | {cells} ")
    lines.append("=" * 75)
    return "|" + "|\n|".join(lines) + "|\n"


# --- memory history and snapshots (torch.cuda.memory's private names) --------------------------

_histories: dict = {}


def _record_memory_history(
    enabled: str | None = "all",
    context: str | None = "all",
    stacks: str = "all",
    max_entries: int = sys.maxsize,
    device=None,
    clear_history: bool = False,
    skip_actions: list[str] | None = None,
) -> None:
    """Start (or with enabled=None stop) recording the allocator's history, as PyTorch's
    torch.cuda.memory._record_memory_history: every alloc, free and segment the accounting model
    makes, with the Python frames of the call and the allocation's category. Read it with
    _snapshot() or save it with _dump_snapshot() for PyTorch's memory_viz."""
    from engine.allocator.snapshot import MemoryHistory

    alloc = _alloc(device)
    old = _histories.pop(alloc.device, None)
    if old is not None:
        old.detach()
    if enabled is None:
        return
    history = MemoryHistory(
        alloc,
        enabled=enabled,
        context=context,
        stacks=stacks,
        max_entries=max_entries,
        skip_actions=skip_actions or (),
    )
    if old is not None and not clear_history:
        history.entries.extend(old.entries)
        history.block_frames.update(old.block_frames)
    history.attach()
    _histories[alloc.device] = history


def _snapshot(device=None) -> dict:
    """{"segments": ..., "device_traces": ...} as torch.cuda.memory._snapshot() gives it; the trace
    is empty unless _record_memory_history() is on."""
    from engine.allocator.snapshot import make_snapshot

    alloc = _alloc(device)
    history = _histories.get(alloc.device)
    if history is not None:
        return history.snapshot()
    dev = as_device(alloc.device)
    return make_snapshot(alloc.model, {}, [], dev.index or 0)


def _dump_snapshot(filename: str = "dump_snapshot.pickle", device=None) -> None:
    """Pickle _snapshot() to `filename` for pytorch.org/memory_viz or torch.cuda._memory_viz."""
    from engine.allocator.snapshot import dumps

    data = dumps(_snapshot(device))
    with open(filename, "wb") as fh:
        fh.write(data)
