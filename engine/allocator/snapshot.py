"""PyTorch's memory snapshot for the engine's allocators (torch.cuda.memory._snapshot()'s format).

A snapshot is a dict ``{"segments": [...], "device_traces": [[...], ...]}`` that PyTorch's
memory_viz page and ``python -m torch.cuda._memory_viz`` read:

- each segment: ``device, address, total_size, allocated_size, active_size, requested_size,
  stream, segment_type ('small'|'large'), segment_pool_id, is_expandable, frames, blocks``; its
  blocks in address order cover the whole segment (the viewer adds sizes from the segment's
  address), each ``address, size, requested_size, state ('active_allocated'|'inactive'), frames``;
- each trace entry: ``action`` (alloc, free_requested, free_completed, segment_alloc,
  segment_free, oom), ``addr``, ``size`` (alloc and free: the bytes requested, as PyTorch records
  them; segments: the segment size), ``stream``, ``time_us``, ``frames`` (``{filename, line,
  name}``, innermost first), ``category`` on allocs and ``device_free`` on an oom.

``MemoryHistory`` records a live allocator (``engine.memory._record_memory_history``);
``replay`` rebuilds the history of a run from its alloc/free sequence (what a memprof report
keeps) by feeding it to a fresh accounting model, which hands out the same addresses as the run.

>>> import engine
>>> engine.memory._record_memory_history(device="meta")
>>> x = engine.empty(1024, device="meta")
>>> [e["action"] for e in engine.memory._snapshot("meta")["device_traces"][0]]
['segment_alloc', 'alloc']
"""

from __future__ import annotations

import os
import pickle
import sys
import time
from collections import deque
from collections.abc import Iterable

_ENGINE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ACTIONS = (
    "alloc",
    "free_requested",
    "free_completed",
    "segment_alloc",
    "segment_free",
    "oom",
)
# The viewer's JavaScript unpickler reads protocols 2-4 and integers of at most 8 bytes.
PICKLE_PROTOCOL = 4
_MAX_FRAMES = 64


def python_frames(skip_engine: bool = True, limit: int = _MAX_FRAMES) -> list[dict]:
    """The calling Python stack as snapshot frames, innermost first, without the engine's own."""
    out = []
    frame = sys._getframe(1)
    while frame is not None and len(out) < limit:
        code = frame.f_code
        filename = code.co_filename
        if not (skip_engine and filename.startswith(_ENGINE_DIR)):
            out.append({"filename": filename, "line": frame.f_lineno, "name": code.co_name})
        frame = frame.f_back
    return out


def location_frames(location: str | None, name: str = "") -> list[dict]:
    """One frame from a recorded ``file:line`` (the allocator's event location)."""
    if not location:
        return []
    filename, _, line = location.rpartition(":")
    if not filename or not line.isdigit():
        return [{"filename": location, "line": 0, "name": name}]
    return [{"filename": filename, "line": int(line), "name": name}]


def _device_index(device: str) -> int:
    _, _, index = str(device).partition(":")
    return int(index) if index.isdigit() else 0


class MemoryHistory:
    """The trace hook of one allocator's accounting model: records PyTorch trace entries.

    enabled: "all" keeps the trace and the frames of live blocks, "state" only the frames of live
    blocks. context: None (no frames), "state" (live blocks only), "alloc" (also on alloc
    entries), "all" (also on frees). stacks: "python" or "all" (the same here: Python frames).
    max_entries: keep the newest this many entries. skip_actions: actions not to record.
    categories: put a ``category`` on each alloc entry, from the allocator context's
    ``category`` ("unknown" where none is set).
    """

    def __init__(
        self,
        allocator,
        *,
        enabled: str = "all",
        context: str | None = "all",
        stacks: str = "all",
        max_entries: int = sys.maxsize,
        skip_actions: Iterable[str] = (),
        categories: bool = True,
    ):
        if enabled not in ("all", "state"):
            raise ValueError(f"enabled must be None, 'state' or 'all', got {enabled!r}")
        if context not in (None, "state", "alloc", "all"):
            raise ValueError(f"context must be None, 'state', 'alloc' or 'all', got {context!r}")
        if stacks not in ("python", "all"):
            raise ValueError(f"stacks must be 'python' or 'all', got {stacks!r}")
        unknown = [a for a in skip_actions if a not in ACTIONS + ("snapshot",)]
        if unknown:
            raise ValueError(f"unknown action {unknown[0]!r} in skip_actions; one of {ACTIONS}")
        self.allocator = allocator
        self.record_trace = enabled == "all"
        self.context = context
        self.skip = frozenset(skip_actions)
        self.categories = categories
        self.entries: deque = deque(maxlen=None if max_entries >= sys.maxsize else max_entries)
        self.block_frames: dict[int, list] = {}
        self._model = None

    # --- wiring -----------------------------------------------------------------------------
    def attach(self) -> None:
        self._model = self.allocator.model
        self._model.trace = self

    def detach(self) -> None:
        model = self.allocator.model
        if model.trace is self:
            model.trace = None
        if self._model is not None and self._model.trace is self:
            self._model.trace = None

    # --- the hook ---------------------------------------------------------------------------
    def __call__(self, action: str, address: int, size: int, requested: int) -> None:
        model = self.allocator.model
        if model is not self._model:  # the allocator was reset: its old blocks are gone
            self._model = model
            self.block_frames.clear()
        context = self.context
        frames: list = []
        if context is not None and (
            action == "alloc"
            or (context == "all" and action != "segment_alloc" and action != "segment_free")
        ):
            frames = python_frames()
        if action == "alloc":
            if context is not None:
                self.block_frames[address] = frames
            if context in (None, "state"):
                frames = []
        elif action == "free_completed":
            self.block_frames.pop(address, None)
        if not self.record_trace or action in self.skip:
            return
        entry = {
            "action": action,
            "addr": address,
            "size": size if action.startswith("segment") else requested,
            "stream": 0,
            "time_us": time.time_ns() // 1000,
            "frames": frames,
        }
        if action == "alloc" and self.categories:
            from engine.allocator.tracked import current_context

            entry["category"] = str(current_context().get("category") or "unknown")
        elif action == "oom":
            limit = model.limit
            entry["device_free"] = max(limit - model.reserved_bytes, 0) if limit else 0
        self.entries.append(entry)

    # --- the snapshot -----------------------------------------------------------------------
    def snapshot(self) -> dict:
        model = self.allocator.model
        frames = self.block_frames if model is self._model else {}
        trace = list(self.entries)
        if self.categories and trace and not any(e.get("category") == "unknown" for e in trace):
            # memory_viz throws when categories are used and 'unknown' is not one of them
            trace.append(_unknown_marker())
        return make_snapshot(model, frames, trace, _device_index(self.allocator.device))


def _unknown_marker() -> dict:
    """A zero-size trace entry that carries the 'unknown' category and changes no memory."""
    return {
        "action": "snapshot",
        "addr": 0,
        "size": 0,
        "stream": 0,
        "time_us": time.time_ns() // 1000,
        "frames": [],
        "category": "unknown",
    }


def make_snapshot(
    model, block_frames: dict[int, list], trace: list[dict], device_index: int = 0
) -> dict:
    """The snapshot dict of a model's current segments, with frames per live block, and a trace."""
    segments = []
    for seg in model.segments():
        seg = dict(seg)
        seg["device"] = device_index
        seg.setdefault("segment_pool_id", (0, 0))
        seg.setdefault("is_expandable", False)
        blocks = []
        for block in seg["blocks"]:
            block = dict(block)
            if block["state"] == "active_allocated":
                block["frames"] = block_frames.get(block["address"], [])
            else:
                block["frames"] = []
            blocks.append(block)
        seg["blocks"] = blocks
        seg["frames"] = blocks[0]["frames"] if blocks else []
        segments.append(seg)
    device_traces: list[list[dict]] = [[] for _ in range(device_index + 1)]
    device_traces[device_index] = trace
    return {"segments": segments, "device_traces": device_traces}


def dumps(snapshot: dict) -> bytes:
    """Pickle a snapshot as memory_viz reads it (protocol 4; integers must fit 8 bytes)."""
    _check_ints(snapshot)
    return pickle.dumps(snapshot, protocol=PICKLE_PROTOCOL)


def _check_ints(value) -> None:
    if isinstance(value, bool):
        return
    if isinstance(value, int):
        if not -(2**63) <= value < 2**63:
            raise ValueError(f"{value} does not fit 8 bytes; memory_viz cannot read it")
    elif isinstance(value, dict):
        for v in value.values():
            _check_ints(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            _check_ints(v)


def replay(
    events: Iterable[dict],
    model: str = "caching",
    *,
    device: str = "cuda:0",
    device_index: int = 0,
    limit: int | None = None,
) -> dict:
    """The snapshot of a run rebuilt from its allocator events.

    events: dicts with ``action`` ("alloc" | "free" | "oom"), ``requested`` (bytes asked for),
    ``storage`` (one id per allocation; a free names its allocation's), and optionally
    ``frames`` and ``category`` (for an alloc). A fresh ``model`` ("exact" or "caching") takes
    them in order, so addresses, segments and blocks are the ones that run's model had, if it
    started empty. Returns the snapshot of the state after the last event, with the trace.
    """
    from engine.allocator.models import make_model

    acc = make_model(model, device)
    entries: list[dict] = []
    current: dict = {}

    def hook(action, address, size, requested):
        entry = {
            "action": action,
            "addr": address,
            "size": size if action.startswith("segment") else requested,
            "stream": 0,
            "time_us": current.get("time_us", 0),
            "frames": current.get("frames", []) if not action.startswith("segment") else [],
        }
        if action == "alloc":
            entry["category"] = current.get("category") or "unknown"
        entries.append(entry)

    acc.trace = hook
    handles: dict = {}
    block_frames: dict[int, list] = {}
    for ev in events:
        action = ev["action"]
        current = {
            "frames": list(ev.get("frames") or []),
            "category": ev.get("category"),
            "time_us": int(ev.get("time_us") or 0),
        }
        if action == "alloc":
            handle = acc.charge(int(ev["requested"]))
            handles[ev["storage"]] = handle
            address = _handle_address(handle)
            if address:
                block_frames[address] = current["frames"]
        elif action == "free":
            handle = handles.pop(ev["storage"], None)
            if handle is not None:
                address = _handle_address(handle)
                acc.uncharge(handle)
                block_frames.pop(address, None)
        elif action == "oom":
            reserved = acc.reserved_bytes
            entries.append(
                {
                    "action": "oom",
                    "addr": 0,
                    "size": int(ev["requested"]),
                    "stream": 0,
                    "time_us": current["time_us"],
                    "frames": current["frames"],
                    "device_free": max(limit - reserved, 0) if limit else 0,
                }
            )
    acc.trace = None
    if entries and not any(e.get("category") == "unknown" for e in entries):
        entries.append(_unknown_marker())
    return make_snapshot(acc, block_frames, entries, device_index)


def _handle_address(handle) -> int:
    return handle if isinstance(handle, int) else handle.address
