"""The trace reporter: a report as Chrome Trace Event JSON, which Perfetto (ui.perfetto.dev) and
chrome://tracing open.

    {"traceEvents": [...], "displayTimeUnit": "ms", "otherData": {...}}

Each variant is one process (pid 1, 2, ... in report order; its clock starts when the variant
started, as `timeline.time_s`), with:

- a counter track `memory` with one sample per timeline event, `allocated` and `reserved` bytes
  after it (`"ph": "C"`);
- thread 1, `phases`: setup / forward / backward / optimizer / release as spans (`"ph": "X"`);
- thread 2, `ops`: one span per row of `ops` (each executed node, the backward pass, optimizer
  steps), laid end to end in the order they ran;
- thread 3, `allocator`: every alloc, free and refused allocation (oom) as an instant
  (`"ph": "i"`) whose args say bytes, tensor, category, node and op; the peak is a
  process-wide instant.

`ts` and `dur` are microseconds. Spans on one thread never overlap: a span that would start
before the previous one ended (rounding) starts at its end. An op row's span starts at its
`start_s`; in a report whose op rows have none, each op is placed right after the previous one
and no earlier than the start of its phase (an estimate: the gaps between nodes are unknown).

Example::

    from memprof.reports.trace import write_trace
    write_trace(report, "run.trace.json")        # then open it in https://ui.perfetto.dev
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from memprof.reports.store import require_report
from memprof.units import format_bytes

PHASES_TID = 1
OPS_TID = 2
ALLOCATOR_TID = 3
THREADS = {PHASES_TID: "phases", OPS_TID: "ops", ALLOCATOR_TID: "allocator"}
COUNTER = "memory"
CHUNK_EVENTS = 5000  # events per piece of text trace_chunks yields


def render_trace(report: dict[str, Any]) -> str:
    """The report as Chrome Trace Event JSON text (one event per line)."""
    return "".join(trace_chunks(report))


def write_trace(report: dict[str, Any], path: str | os.PathLike) -> Path:
    """Write the trace of a report to `path` atomically; returns the path."""
    from memprof.reports.store import atomic_write_text

    return atomic_write_text(path, render_trace(report))


def trace_chunks(report: dict[str, Any]) -> Iterator[str]:
    """The trace JSON in pieces (for streaming a large trace without holding it all)."""
    report = require_report(report)
    yield '{"traceEvents":[\n'
    batch: list[str] = []
    separator = ""
    for event in trace_events(report):
        batch.append(json.dumps(event, separators=(",", ":")))
        if len(batch) == CHUNK_EVENTS:
            yield separator + ",\n".join(batch)
            batch, separator = [], ",\n"
    if batch:
        yield separator + ",\n".join(batch)
    scenario = report.get("scenario") or {}
    other = {
        "run_id": report.get("run_id"),
        "scenario": scenario.get("name"),
        "created_at": report.get("created_at"),
        "status": report.get("status"),
        "tool": report.get("tool"),
    }
    yield f'\n],"displayTimeUnit":"ms","otherData":{json.dumps(other, separators=(",", ":"))}}}\n'


def trace_events(report: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every trace event of the report: metadata, then per variant its phases, ops, and the
    memory counter with the allocator's instants in time order."""
    scenario = (report.get("scenario") or {}).get("name") or report.get("run_id") or "run"
    for i, variant in enumerate(report.get("variants") or []):
        pid = i + 1
        yield from _metadata(pid, f"{variant.get('name', pid)} ({scenario})", sort_index=i)
        yield from _phase_spans(pid, variant.get("phases") or [])
        yield from _op_spans(pid, variant.get("ops") or [], variant.get("phases") or [])
        yield from _memory(pid, variant)


# --------------------------------------------------------------------------------------------


def _ns(seconds: Any) -> int:
    return round(float(seconds or 0.0) * 1e9)


def _us(ns: int) -> float | int:
    """Microseconds, exact to the nanosecond (an int when it is whole, for a shorter file)."""
    return ns // 1000 if ns % 1000 == 0 else ns / 1000


def _metadata(pid: int, name: str, *, sort_index: int) -> Iterator[dict[str, Any]]:
    yield {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": name}}
    yield {
        "ph": "M",
        "name": "process_sort_index",
        "pid": pid,
        "tid": 0,
        "args": {"sort_index": sort_index},
    }
    for tid, thread in THREADS.items():
        yield {"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": thread}}
        yield {
            "ph": "M",
            "name": "thread_sort_index",
            "pid": pid,
            "tid": tid,
            "args": {"sort_index": tid},
        }


def _span(
    pid: int, tid: int, name: str, cat: str, start_ns: int, dur_ns: int, args: dict[str, Any]
) -> dict[str, Any]:
    return {
        "ph": "X",
        "name": name,
        "cat": cat,
        "pid": pid,
        "tid": tid,
        "ts": _us(start_ns),
        "dur": _us(dur_ns),
        "args": args,
    }


def _phase_spans(pid: int, phases: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    end = 0
    iterations = {p.get("iteration") for p in phases} - {None}
    for p in phases:
        start = max(_ns(p.get("start_s")), end)
        stop = max(_ns(p.get("end_s")), start)
        end = stop
        name = p.get("name") or "phase"
        if len(iterations) > 1 and p.get("iteration") is not None:
            name = f"{name} {p['iteration']}"
        args = {k: p.get(k) for k in ("iteration", "start_index", "end_index")}
        yield _span(pid, PHASES_TID, name, "phase", start, stop - start, args)


def _op_spans(
    pid: int, ops: list[dict[str, Any]], phases: list[dict[str, Any]]
) -> Iterator[dict[str, Any]]:
    # Without start_s, an op starts where the previous one ended, and no earlier than the
    # first not yet used span of its phase.
    phase_starts: dict[tuple[Any, Any], list[int]] = {}
    for p in phases:
        phase_starts.setdefault((p.get("name"), p.get("iteration")), []).append(
            _ns(p.get("start_s"))
        )
    end = 0
    current = None
    for op in ops:
        dur = max(_ns(op.get("duration_s")), 0)
        if op.get("start_s") is not None:
            start = _ns(op["start_s"])
        else:
            key = (op.get("phase"), op.get("iteration"))
            start = end
            if key != current:
                current = key
                starts = phase_starts.get(key)
                if starts:
                    start = max(start, starts.pop(0))
        start = max(start, end)
        end = start + dur
        node = op.get("node") or "?"
        name = node if not op.get("op") or op.get("op") == node else f"{node} ({op['op']})"
        args = {
            k: op.get(k)
            for k in (
                "node",
                "op",
                "module",
                "phase",
                "iteration",
                "allocated_bytes",
                "freed_bytes",
                "peak_bytes",
                "inplace",
                "inplace_cost",
                "clone_bytes",
            )
            if k in op
        }
        args["peak"] = format_bytes(op.get("peak_bytes") or 0)
        yield _span(pid, OPS_TID, name, op.get("phase") or "op", start, dur, args)


def _memory(pid: int, variant: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The counter sample and the allocator instant of each event, in time order."""
    timeline = variant.get("timeline") or {}
    allocated = timeline.get("allocated") or []
    n = len(allocated)

    def column(key: str) -> list[Any]:
        values = timeline.get(key)
        return values if values and len(values) == n else [None] * n

    times, reserved = column("time_s"), column("reserved")
    action, size, requested = column("action"), column("bytes"), column("requested")
    tensor, category, node, op = column("tensor"), column("category"), column("node"), column("op")
    phase, iteration, storage = column("phase"), column("iteration"), column("storage")
    peak_index = (variant.get("peak") or {}).get("event_index")
    last = 0
    for i in range(n):
        last = max(_ns(times[i]), last)  # the counter track's time never goes back
        ts = _us(last)
        a = allocated[i]
        r = reserved[i] if reserved[i] is not None else a
        yield {
            "ph": "C",
            "name": COUNTER,
            "pid": pid,
            "ts": ts,
            "args": {"allocated": a, "reserved": r},
        }
        kind = action[i] or "event"
        what = tensor[i] or f"<{op[i] or node[i] or 'unnamed'} output>"
        yield {
            "ph": "i",
            "s": "t",
            "name": f"{kind} {what}",
            "cat": kind,
            "pid": pid,
            "tid": ALLOCATOR_TID,
            "ts": ts,
            "args": {
                "bytes": size[i],
                "size": format_bytes(size[i] or 0),
                "requested": requested[i],
                "tensor": tensor[i],
                "category": category[i],
                "node": node[i],
                "op": op[i],
                "phase": phase[i],
                "iteration": iteration[i],
                "storage": storage[i],
                "event_index": i,
                "allocated": a,
                "reserved": r,
            },
        }
        if i == peak_index:
            by_category = (variant.get("peak") or {}).get("by_category") or {}
            yield {
                "ph": "i",
                "s": "p",
                "name": f"peak {format_bytes(a)}",
                "cat": "peak",
                "pid": pid,
                "tid": ALLOCATOR_TID,
                "ts": ts,
                "args": {
                    "allocated": a,
                    "reserved": r,
                    "event_index": i,
                    "by_category": by_category,
                },
            }
