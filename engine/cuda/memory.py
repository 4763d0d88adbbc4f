"""torch.cuda.memory's names: the memory functions and the allocator history of engine/memory.py,
the cuda device (the current GPU) by default; device="meta" reads the meta device's."""

from __future__ import annotations

import engine.cuda as _cuda
from engine import memory as _memory


def _history_device(device):
    dev = _cuda._mem_device(device)
    # the accounting model exists without a GPU: history and snapshots of cuda:0 are then empty
    return dev if dev is not None else "cuda"


def _record_memory_history(
    enabled="all",
    context="all",
    stacks="all",
    max_entries=None,
    device=None,
    clear_history: bool = False,
    skip_actions=None,
) -> None:
    kwargs = {} if max_entries is None else {"max_entries": max_entries}
    _memory._record_memory_history(
        enabled,
        context=context,
        stacks=stacks,
        device=_history_device(device),
        clear_history=clear_history,
        skip_actions=skip_actions,
        **kwargs,
    )


def _snapshot(device=None) -> dict:
    return _memory._snapshot(_history_device(device))


def _dump_snapshot(filename: str = "dump_snapshot.pickle", device=None) -> None:
    _memory._dump_snapshot(filename, device=_history_device(device))


def __getattr__(name):
    # memory_allocated, memory_stats, ... as torch.cuda.memory has them too
    if name in _cuda.__all__ and name != "memory":
        return getattr(_cuda, name)
    raise AttributeError(f"module 'engine.cuda.memory' has no attribute {name!r}")
