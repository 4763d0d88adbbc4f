"""Measure the engine allocations made inside a block: their peak, and what was live at it.

Used by the pytest plugin's `@pytest.mark.memprof(max_peak=...)`. Only storages allocated inside
the block count (tensors made before it, such as fixtures, are not charged), so the peak is what
the block itself added on top of what it found.

>>> with measure("cpu") as m:
...     y = engine.relu(x)
>>> m.peak_bytes, m.top_sites()[0]["op"]
(67108864, 'relu')
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from engine.allocator import AllocEvent, MemoryObserver, get_allocator


class PeakRecorder(MemoryObserver):
    """Follows the storages allocated while subscribed: live bytes, their peak, and a log that
    replays the live set at the peak (cheaper than copying it at every new high)."""

    def __init__(self, reserved_at_start: int = 0):
        self.current_bytes = 0
        self.peak_bytes = 0
        self.peak_reserved_bytes = 0
        self.num_allocs = 0
        self.num_ooms = 0
        self._reserved_at_start = reserved_at_start
        self._live: dict[int, int] = {}
        self._sites: dict[
            int, tuple[int, str | None, str | None]
        ] = {}  # id -> (bytes, op, location)
        self._log: list[tuple[int, bool]] = []  # (storage id, allocated?)
        self._peak_at = -1  # index into _log where the peak was first reached

    def on_alloc(self, event: AllocEvent) -> None:
        self.num_allocs += 1
        self._live[event.storage_id] = event.bytes
        self._sites[event.storage_id] = (event.bytes, event.context.get("op"), event.location)
        self._log.append((event.storage_id, True))
        self.current_bytes += event.bytes
        if self.current_bytes > self.peak_bytes:
            self.peak_bytes = self.current_bytes
            self._peak_at = len(self._log) - 1
        self.peak_reserved_bytes = max(
            self.peak_reserved_bytes, event.reserved - self._reserved_at_start
        )

    def on_free(self, event: AllocEvent) -> None:
        nbytes = self._live.pop(event.storage_id, None)
        if nbytes is None:
            return  # allocated before the block: not ours
        self.current_bytes -= nbytes
        self._log.append((event.storage_id, False))

    def on_oom(self, event: AllocEvent) -> None:
        self.num_ooms += 1

    def live_at_peak(self) -> list[int]:
        """Storage ids live when the peak was first reached."""
        live: dict[int, None] = {}
        for sid, allocated in self._log[: self._peak_at + 1]:
            if allocated:
                live[sid] = None
            else:
                live.pop(sid, None)
        return list(live)

    def top_sites(self, top: int | None = None) -> list[dict[str, Any]]:
        """What was live at the peak grouped by (op, location), largest first:
        [{"op": "relu", "location": "test_x.py:12", "bytes": 67108864, "count": 1}, ...]."""
        groups: dict[tuple[str | None, str | None], dict[str, Any]] = {}
        for sid in self.live_at_peak():
            nbytes, op, location = self._sites[sid]
            g = groups.setdefault(
                (op, location), {"op": op, "location": location, "bytes": 0, "count": 0}
            )
            g["bytes"] += nbytes
            g["count"] += 1
        rows = sorted(groups.values(), key=lambda g: (-g["bytes"], str(g["op"])))
        return rows if top is None else rows[:top]


@contextlib.contextmanager
def measure(device: str = "cpu", *, locations: bool = True) -> Iterator[PeakRecorder]:
    """Record the allocations made on `device` inside the block.

    locations: have the allocator note the `file:line` of the user code behind each allocation
    (restored afterwards), so a failure can point at the lines that used the memory.
    """
    alloc = get_allocator(device)
    recorder = PeakRecorder(reserved_at_start=alloc.model.reserved_bytes)
    saved = alloc.record_locations
    alloc.record_locations = saved or locations
    try:
        with alloc.observing(recorder):
            yield recorder
    finally:
        alloc.record_locations = saved
