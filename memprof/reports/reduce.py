"""Reduce a report's allocation timeline to a few thousand points without losing its peak.

A variant's timeline has one row per allocator event; a million of them freeze a browser.
`TimelineArrays` holds the columns as numpy arrays (strings as integer codes), and
`reduce_timeline` picks, per bucket of consecutive events, the samples where allocated and
reserved bytes are lowest and highest (a min/max envelope, so no spike disappears), plus the
first and last sample of the window and the exact peak of allocated bytes. It also returns the
live bytes per category at each kept sample, so charts can stack them.

Example::

    arrays = TimelineArrays.from_columns(variant["timeline"])
    series = reduce_timeline(arrays, max_points=2000)
    max(series["allocated"]) == variant["peak_allocated_bytes"]   # True
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

# Stacking order for charts: long-lived storage at the bottom, short-lived on top.
CATEGORIES = (
    "input",
    "parameter",
    "optimizer_state",
    "gradient",
    "saved_for_backward",
    "activation",
    "temporary",
    "other",
)
UNTRACKED = "untracked"  # bytes in `allocated` that no event in the timeline accounts for

_INT_MIN = np.iinfo(np.int64).min
_INT_MAX = np.iinfo(np.int64).max


@dataclass(frozen=True)
class Labels:
    """A string column as integer codes into `names` (None stays None)."""

    codes: np.ndarray
    names: tuple[str | None, ...]

    def __len__(self) -> int:
        return len(self.codes)

    @classmethod
    def encode(cls, values: list[Any] | Labels, n: int) -> Labels:
        if isinstance(values, Labels):  # unpacked from a report file: already codes
            return values
        if not len(values):
            return cls(np.zeros(n, dtype=np.int32), (None,))
        lut: dict[Any, int] = {}
        codes = np.fromiter((lut.setdefault(v, len(lut)) for v in values), dtype=np.int32, count=n)
        return cls(codes, tuple(lut))

    def take(self, index: np.ndarray) -> list[str | None]:
        names = np.empty(len(self.names), dtype=object)
        names[:] = self.names
        return names[self.codes[index]].tolist()


@dataclass(frozen=True)
class TimelineArrays:
    """One variant's timeline as numpy columns. Build it once, reduce it many times."""

    n: int
    time_s: np.ndarray
    bytes: np.ndarray
    allocated: np.ndarray
    reserved: np.ndarray
    signed_bytes: np.ndarray  # +bytes for an alloc, -bytes for a free, 0 for an oom
    action: Labels
    node: Labels
    op: Labels
    tensor: Labels
    phase: Labels
    category: Labels
    peak_index: int  # first event at which allocated bytes are highest; -1 when empty

    @classmethod
    def from_columns(cls, timeline: dict[str, list[Any]] | None) -> TimelineArrays:
        """Convert the report's columnar timeline (docs/report-format.md) to arrays.

        Raises ValueError when the columns do not have one length.
        """
        timeline = timeline or {}

        def col(key: str):  # lists from a report dict; arrays and Labels from a packed file
            column = timeline.get(key)
            return column if column is not None and len(column) else None

        allocated_col = col("allocated")
        n = 0 if allocated_col is None else len(allocated_col)
        for key, column in timeline.items():
            if hasattr(column, "__len__") and len(column) != n:
                raise ValueError(
                    f"timeline column {key!r} has {len(column)} entries, 'allocated' has {n}"
                )

        def ints(key: str) -> np.ndarray:
            column = col(key)
            if column is None:
                return np.zeros(n, dtype=np.int64)
            if isinstance(column, np.ndarray):
                return column.astype(np.int64, copy=False)
            return np.fromiter(column, dtype=np.int64, count=n)

        allocated = ints("allocated")
        reserved = ints("reserved") if col("reserved") is not None else allocated.copy()
        time_col = col("time_s")
        if time_col is None:
            time_s = np.arange(n, dtype=np.float64)
        elif isinstance(time_col, np.ndarray):
            time_s = time_col.astype(np.float64, copy=False)
        else:
            time_s = np.fromiter(time_col, dtype=np.float64, count=n)
        size = ints("bytes")

        def labels(key: str) -> Labels:
            return Labels.encode(col(key) if col(key) is not None else [], n)

        action = labels("action")
        # An alloc adds its bytes, a free removes them, an "oom" (a refused request) neither.
        sign = np.array(
            [1 if a == "alloc" else -1 if a == "free" else 0 for a in action.names], dtype=np.int64
        )
        signed = size * sign[action.codes] if col("action") is not None else size
        return cls(
            n=n,
            time_s=time_s,
            bytes=size,
            allocated=allocated,
            reserved=reserved,
            signed_bytes=signed,
            action=action,
            node=labels("node"),
            op=labels("op"),
            tensor=labels("tensor"),
            phase=labels("phase"),
            category=labels("category"),
            peak_index=int(np.argmax(allocated)) if n else -1,
        )

    @property
    def nbytes(self) -> int:
        """Memory held by the arrays (for cache budgets)."""
        arrays = (self.time_s, self.bytes, self.allocated, self.reserved, self.signed_bytes)
        labels = (self.action, self.node, self.op, self.tensor, self.phase, self.category)
        return sum(a.nbytes for a in arrays) + sum(lab.codes.nbytes for lab in labels)


def select_indices(arrays: TimelineArrays, start: int, end: int, max_points: int) -> np.ndarray:
    """Sorted event indexes in [start, end] to plot: at most `max_points`, always including
    `start`, `end` and the first index where allocated bytes peak inside the window, plus the
    lowest and highest sample of allocated and reserved bytes in each bucket of events.

    Uses as many buckets as fit: each bucket adds up to four samples, but they often coincide,
    so it first tries `max_points / 2` buckets and shrinks until the union fits.
    """
    if max_points < 3:
        raise ValueError("max_points must be at least 3 (first, last and peak)")
    if not 0 <= start <= end < arrays.n:
        raise ValueError(f"window [{start}, {end}] is outside the timeline (0..{arrays.n - 1})")
    length = end - start + 1
    if length <= max_points:
        return np.arange(start, end + 1, dtype=np.int64)

    window = slice(start, end + 1)
    allocated, reserved = arrays.allocated[window], arrays.reserved[window]
    anchors = np.array([0, length - 1, int(np.argmax(allocated))], dtype=np.int64)
    budget = max_points - len(anchors)
    buckets = budget // 2
    while True:
        picked = _bucket_extremes((allocated, reserved), buckets)
        chosen = np.union1d(anchors, picked)
        if len(chosen) <= max_points or buckets <= budget // 4:
            break
        buckets = max(budget // 4, int(buckets * budget / len(chosen)))
    # 4 samples per bucket and at most budget // 4 buckets always fits.
    return chosen + start


def _bucket_extremes(columns: tuple[np.ndarray, ...], buckets: int) -> np.ndarray:
    """Local indexes of the min and max of each column in each of `buckets` equal runs."""
    length = len(columns[0])
    if buckets < 1:
        return np.empty(0, dtype=np.int64)
    width = -(-length // buckets)  # ceil
    rows = -(-length // width)
    pad = rows * width - length
    offsets = np.arange(rows, dtype=np.int64) * width
    picked = []
    for column in columns:
        for reducer, fill in ((np.argmax, _INT_MIN), (np.argmin, _INT_MAX)):
            grid = np.concatenate([column, np.full(pad, fill, dtype=np.int64)]) if pad else column
            picked.append(reducer(grid.reshape(rows, width), axis=1) + offsets)
    return np.concatenate(picked)


def category_stacks(arrays: TimelineArrays, index: np.ndarray) -> dict[str, np.ndarray]:
    """Live bytes per category at each of the sorted event `index`es.

    Sums signed event sizes per (segment between kept samples, category) with one bincount and
    accumulates over segments, so it is O(events) with no per-category pass. Bytes in
    `allocated` that the events do not explain (recording started late) go to `untracked`.
    """
    if len(index) == 0:
        return {}
    last = int(index[-1])
    # segment[j] = number of kept indexes before event j: event j counts for every kept k >= j.
    marks = np.zeros(last + 1, dtype=np.int64)
    marks[index[:-1] + 1] += 1
    segment = np.cumsum(marks)
    names = arrays.category.names
    ncat = len(names)
    key = segment * ncat + arrays.category.codes[: last + 1]
    sums = np.bincount(key, weights=arrays.signed_bytes[: last + 1], minlength=len(index) * ncat)
    live = np.rint(np.cumsum(sums.reshape(len(index), ncat), axis=0)).astype(np.int64)

    stacks: dict[str, np.ndarray] = {}
    for code, name in enumerate(names):
        label = name if name in CATEGORIES else "other"
        stacks[label] = stacks.get(label, 0) + live[:, code]
    ordered = {c: stacks[c] for c in CATEGORIES if c in stacks and np.any(stacks[c])}
    residual = arrays.allocated[index] - live.sum(axis=1)
    if np.any(residual):
        ordered[UNTRACKED] = residual
    return ordered


def reduce_timeline(
    arrays: TimelineArrays,
    *,
    start: int | None = None,
    end: int | None = None,
    max_points: int = 2000,
) -> dict[str, Any]:
    """A JSON-ready reduced series of the events in [start, end] (inclusive event indexes).

    Keys: `total_events`, `start`, `end`, `max_points`, `reduced` (whether points were dropped),
    `peak` (the whole timeline's first highest sample) and `window_peak`, then one list per
    column for the kept samples: `index`, `time_s`, `allocated`, `reserved`, `action`, `bytes`,
    `node`, `op`, `tensor`, `phase`, `category`, and `categories` (live bytes per category).
    Raises ValueError for an empty or out-of-range window.
    """
    if arrays.n == 0:
        raise ValueError("the timeline has no events")
    start = 0 if start is None else start
    end = arrays.n - 1 if end is None else end
    index = select_indices(arrays, start, end, max_points)
    window_peak = int(start + np.argmax(arrays.allocated[start : end + 1]))
    return {
        "total_events": arrays.n,
        "start": start,
        "end": end,
        "max_points": max_points,
        "reduced": len(index) < end - start + 1,
        "peak": _sample(arrays, arrays.peak_index),
        "window_peak": _sample(arrays, window_peak),
        "index": index.tolist(),
        "time_s": arrays.time_s[index].tolist(),
        "allocated": arrays.allocated[index].tolist(),
        "reserved": arrays.reserved[index].tolist(),
        "action": arrays.action.take(index),
        "bytes": arrays.bytes[index].tolist(),
        "node": arrays.node.take(index),
        "op": arrays.op.take(index),
        "tensor": arrays.tensor.take(index),
        "phase": arrays.phase.take(index),
        "category": arrays.category.take(index),
        "categories": {k: v.tolist() for k, v in category_stacks(arrays, index).items()},
    }


def _sample(arrays: TimelineArrays, i: int) -> dict[str, Any]:
    return {
        "event_index": i,
        "time_s": float(arrays.time_s[i]),
        "allocated_bytes": int(arrays.allocated[i]),
        "reserved_bytes": int(arrays.reserved[i]),
        "node": arrays.node.names[arrays.node.codes[i]],
        "op": arrays.op.names[arrays.op.codes[i]],
        "tensor": arrays.tensor.names[arrays.tensor.codes[i]],
    }
