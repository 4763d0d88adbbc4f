"""A report as a PyTorch memory snapshot (`memprof report RUN --snapshot out.pickle`).

The file has the format of ``torch.cuda.memory._snapshot()``, so PyTorch's memory_viz page
(pytorch.org/memory_viz) and ``python -m torch.cuda._memory_viz`` (stats, trace, trace_plot,
segment_plot) read it. Each variant of the run is one device of the snapshot (variant 0 is
device 0, ...): its allocations and frees, in order, are fed to a fresh accounting model of the
variant's kind (exact or caching, engine.allocator.snapshot.replay), which hands out the same
addresses, segments and blocks the run's model had, so the trace has alloc / free_requested /
free_completed / segment_alloc / segment_free / oom entries and the segments are the state at the
end of the run.

Frames: an allocation's frames name its tensor (when the report names it), its op, and its node
and phase; an op node of `memprof.profile` (``relu @ train.py:12``) gives the file and line.
Categories are the report's (parameter, activation, ...), plus 'unknown' for the viewer.
"""

from __future__ import annotations

import re
from typing import Any

_LOCATION = re.compile(r"^(?P<op>.*?) @ (?P<file>.+):(?P<line>\d+)$")


def _frames(node, op, phase, tensor, iteration) -> list[dict]:
    frames = []
    if tensor:
        frames.append({"filename": "<tensor>", "line": 0, "name": str(tensor)})
    match = _LOCATION.match(node) if isinstance(node, str) else None
    if match:
        frames.append(
            {
                "filename": match["file"],
                "line": int(match["line"]),
                "name": str(op or match["op"]),
            }
        )
    else:
        frames.append({"filename": "<op>", "line": 0, "name": str(op or "?")})
    where = f"{phase or '?'}" + (f" (iteration {iteration})" if iteration is not None else "")
    frames.append({"filename": f"<{where}>", "line": 0, "name": str(node or "?")})
    return frames


def variant_events(variant: dict[str, Any]) -> list[dict]:
    """The allocator events of one report variant, as engine.allocator.snapshot.replay takes."""
    tl = variant.get("timeline") or {}
    actions = tl.get("action") or []
    events = []
    for i, action in enumerate(actions):
        if action not in ("alloc", "free", "oom"):
            continue
        events.append(
            {
                "action": action,
                "requested": int(tl["requested"][i]),
                "storage": tl["storage"][i],
                "time_us": int(round(float(tl["time_s"][i] or 0) * 1e6)),
                "category": tl["category"][i] if action == "alloc" else None,
                "frames": _frames(
                    tl["node"][i], tl["op"][i], tl["phase"][i], tl["tensor"][i], tl["iteration"][i]
                )
                if action != "free"
                else [],
            }
        )
    return events


def report_snapshot(report: dict[str, Any]) -> dict:
    """The snapshot dict of a report: one device per variant."""
    from engine.allocator.snapshot import replay

    segments: list[dict] = []
    traces: list[list[dict]] = []
    for index, variant in enumerate(report.get("variants") or []):
        snap = replay(
            variant_events(variant),
            variant.get("allocator") or "exact",
            device=f"cuda:{index}",
            device_index=index,
        )
        segments += snap["segments"]
        traces.append(snap["device_traces"][index])
    return {"segments": segments, "device_traces": traces}


def render_snapshot(report: dict[str, Any]) -> bytes:
    """The pickled snapshot of a report (protocol 4, integers within 8 bytes)."""
    from engine.allocator.snapshot import dumps

    return dumps(report_snapshot(report))


def write_snapshot(path, data: bytes):
    """Write pickled snapshot bytes to `path` atomically; a failure is InvalidInput naming it."""
    import os
    import tempfile
    from pathlib import Path

    from memprof.errors import InvalidInput
    from memprof.reports.store import output_problem

    path = Path(path)
    problem = output_problem(path)
    if problem:
        raise InvalidInput(problem)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            os.replace(tmp, path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
    except OSError as exc:
        raise InvalidInput(f"{path}: cannot write: {exc.strerror or exc}") from None
    return path
