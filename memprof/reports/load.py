"""Reading a report back: is this JSON a report every reader can use (docs/report-format.md)?

`check_report(data, source)` validates a parsed report against the report schema
(memprof/reports/schema.py) plus what the schema cannot say (every timeline column as long as
the others, phase and peak indexes inside the timeline, variant names unique, comparison rows
naming variants) and raises `UnreadableReport` naming the first bad field:

    runs/x.json: unreadable report: variants[0].peak_allocated_bytes: expected an integer,
    found "12 MiB"

`memprof report`, `compare`, `check --baseline` (through memprof.reports.store.read_report) and
the dashboard's run index (web/cache.py) all read reports through it, so one bad file is one
clear message (exit 2 on the command line, an "unreadable" row on the dashboard) and never a
traceback or a broken index.
"""

from __future__ import annotations

import math
from typing import Any

from pydantic import ValidationError

from memprof.errors import InvalidInput
from memprof.reports.schema import Report


class UnreadableReport(InvalidInput):
    """A file that is JSON but not a report this memprof can read (exit 2)."""


_TIMELINE_COLUMNS = (
    "seq",
    "time_s",
    "action",
    "bytes",
    "requested",
    "allocated",
    "reserved",
    "node",
    "op",
    "phase",
    "category",
    "tensor",
    "iteration",
    "storage",
)
INT64 = 2**63


def check_report(report: Any, source: str = "report") -> dict[str, Any]:
    """The report, unchanged, if every reader can use it; else UnreadableReport."""
    from memprof.reports.build import SCHEMA_VERSION

    if not isinstance(report, dict):
        _fail(source, None, f"not a memprof report (expected a JSON object, found {_kind(report)})")
    version = report.get("schema_version")
    if version != SCHEMA_VERSION:
        raise UnreadableReport(
            f"{source}: unreadable report: schema_version {_short(version)}; this memprof reads "
            f"schema_version {SCHEMA_VERSION}"
        )
    try:
        Report.model_validate(report)
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        _fail(source, _loc(err["loc"]), _message(err))
    except RecursionError:  # a JSON value nested too deep for pydantic
        _fail(source, None, "expected a report, found values nested too deep")
    _check_consistency(report, source)
    return report


def _check_consistency(report: dict[str, Any], source: str) -> None:
    names: set[str] = set()
    for i, v in enumerate(report["variants"]):
        where = f"variants[{i}]"
        if v["name"] in names:
            _fail(source, f"{where}.name", f"expected a unique variant name, found {v['name']!r}")
        names.add(v["name"])
        tl = v["timeline"]
        n = len(tl["seq"])
        for col in _TIMELINE_COLUMNS:
            if len(tl[col]) != n:
                _fail(
                    source,
                    f"{where}.timeline.{col}",
                    f"expected {n} entries (as timeline.seq), found {len(tl[col])}",
                )
        for col in ("bytes", "requested", "allocated", "reserved", "seq", "storage"):
            if any(not -INT64 <= x < INT64 for x in tl[col]):
                _fail(source, f"{where}.timeline.{col}", "expected 64-bit integers, found larger")
        _times(source, f"{where}.timeline.time_s", tl["time_s"])
        _times(source, f"{where}.duration_s", [v["duration_s"], v["program_duration_s"]])
        for j, p in enumerate(v["phases"]):
            _times(source, f"{where}.phases[{j}]", [p["start_s"], p["end_s"]])
        for j, op in enumerate(v["ops"]):
            _times(source, f"{where}.ops[{j}]", [op["duration_s"], op.get("start_s") or 0.0])
        for field in (
            "peak_allocated_bytes",
            "peak_reserved_bytes",
            "baseline_bytes",
            "final_allocated_bytes",
        ):
            if not -INT64 <= v[field] < INT64:
                _fail(source, f"{where}.{field}", f"expected a 64-bit integer, found {v[field]}")
        for j, p in enumerate(v["phases"]):
            if not (0 <= p["start_index"] <= p["end_index"] <= n):
                _fail(
                    source,
                    f"{where}.phases[{j}]",
                    f"expected 0 <= start_index <= end_index <= {n} (the timeline's length), "
                    f"found {p['start_index']}..{p['end_index']}",
                )
        index = v["peak"]["event_index"]
        if index is not None and not 0 <= index < max(n, 1):
            _fail(
                source,
                f"{where}.peak.event_index",
                f"expected an index into the timeline (0 to {n - 1}), found {index}",
            )
    baseline = report.get("baseline_variant")
    if baseline is not None and baseline not in names:
        _fail(source, "baseline_variant", f"expected a variant name, found {baseline!r}")
    for j, row in enumerate(report["comparison"]["rows"]):
        numbers = [row.get(k) for k in _COMPARISON_FLOATS if row.get(k) is not None]
        _times(source, f"comparison.rows[{j}]", numbers, "a finite number")
        if row["variant"] not in names:
            _fail(
                source,
                f"comparison.rows[{j}].variant",
                f"expected a variant name, found {row['variant']!r}",
            )


MAX_SECONDS = 1e12  # ~30,000 years: past it a time cannot be a run's (and overflows ns)
_COMPARISON_FLOATS = (
    "ratio",
    "saving_pct",
    "duration_s",
    "program_duration_s",
    "program_duration_ratio",
)


def _times(source: str, field: str, values, what: str = "a time in seconds") -> None:
    """Times are finite and of a run's size (Python's json reads NaN and Infinity, and 1e308
    seconds overflows every nanosecond clock)."""
    for x in values:
        if not (isinstance(x, (int, float)) and math.isfinite(x) and abs(x) <= MAX_SECONDS):
            _fail(source, field, f"expected {what} (finite, at most {MAX_SECONDS:g}), found {x!r}")


def _fail(source: str, field: str | None, message: str):
    what = f"{field}: " if field else ""
    raise UnreadableReport(f"{source}: unreadable report: {what}{message}")


def _loc(loc: tuple) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out or "the report"


_TYPES = {
    "int_type": "an integer",
    "int_parsing": "an integer",
    "int_from_float": "an integer",
    "float_type": "a number",
    "float_parsing": "a number",
    "string_type": "a string",
    "bool_type": "true or false",
    "bool_parsing": "true or false",
    "list_type": "a list",
    "dict_type": "an object",
    "model_type": "an object",
    "model_attributes_type": "an object",
}


def _message(err: dict) -> str:
    kind = err["type"]
    value = err.get("input")
    if kind == "missing":
        return "expected this field, found none"
    if kind in _TYPES:
        return f"expected {_TYPES[kind]}, found {_short(value)}"
    if kind == "literal_error":
        return (
            f"expected {err.get('ctx', {}).get('expected', 'a known value')}, found {_short(value)}"
        )
    if kind == "string_pattern_mismatch":
        return f"expected text matching {err['ctx']['pattern']}, found {_short(value)}"
    msg = err["msg"]
    if msg.startswith("Input should be "):
        msg = "expected " + msg[len("Input should be ") :]
    return f"{msg}, found {_short(value)}"


def _kind(value: Any) -> str:
    if isinstance(value, list):
        return "a list"
    if value is None:
        return "null"
    return f"{type(value).__name__} {_short(value)}"


def _short(value: Any) -> str:
    import json

    if isinstance(value, (list, dict)):
        return "a list" if isinstance(value, list) else "an object"
    try:
        text = json.dumps(value)
    except (TypeError, ValueError, RecursionError):
        text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


__all__ = ["UnreadableReport", "check_report"]
