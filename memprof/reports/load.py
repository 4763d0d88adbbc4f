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

import functools
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


READABLE_VERSIONS = (1, 2)  # 1: timeline and ops as plain lists only; 2: packed as well


def check_report(report: Any, source: str = "report", *, arrays: bool = False) -> dict[str, Any]:
    """The report as every reader uses it, if it is one; else UnreadableReport.

    Packed timelines and op rows (schema_version 2, memprof/reports/packed.py) come back as
    plain lists, and a schema_version 1 report (always plain) is read as it is; the result says
    schema_version 2 either way. arrays=True: timelines come back as numpy arrays and `Labels`
    (what the dashboard keeps) instead of lists. The report passed in is not changed.
    """
    from memprof.reports.build import SCHEMA_VERSION

    if not isinstance(report, dict):
        _fail(source, None, f"not a memprof report (expected a JSON object, found {_kind(report)})")
    version = report.get("schema_version")
    if version not in READABLE_VERSIONS or type(version) is not int:
        newer = type(version) is int and version > SCHEMA_VERSION
        raise UnreadableReport(
            f"{source}: unreadable report: schema_version {_short(version)}; this memprof reads "
            f"schema_version {', '.join(map(str, READABLE_VERSIONS))}"
            + (" (upgrade memprof to read newer reports)" if newer else "")
        )
    report, shown, checked_ops = _unpacked(report, source, arrays)
    try:
        Report.model_validate(shown)
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        _fail(source, _loc(err["loc"]), _message(err))
    except RecursionError:  # a JSON value nested too deep for pydantic
        _fail(source, None, "expected a report, found values nested too deep")
    decoded = [v for v in report["variants"] if _is_decoded(v.get("timeline"))]
    for i, v in enumerate(report["variants"]):
        if _is_decoded(v.get("timeline")):
            _check_columns(source, f"variants[{i}].timeline", v["timeline"])
    _check_consistency(report, source, checked_ops)  # on arrays: no pass over a list per event
    if arrays:
        from memprof.reports.reduce import TimelineArrays

        for v in report["variants"]:
            v["timeline"] = TimelineArrays.from_columns(v["timeline"])
    else:
        for v in decoded:
            v["timeline"] = _as_lists(v["timeline"])
    report["schema_version"] = SCHEMA_VERSION
    return report


def _unpacked(report: dict[str, Any], source: str, arrays: bool):
    """(the report with its packed tables unpacked, what pydantic validates): the second has
    each unpacked timeline replaced by an empty one, whose columns `_check_columns` checks."""
    from memprof.reports.packed import PackError, is_packed, unpack_column, unpack_rows

    variants = report.get("variants")
    checked_ops: set[int] = set()
    if not isinstance(variants, list):
        return dict(report), report, checked_ops
    out, shown = [], []
    for i, v in enumerate(variants):
        if not isinstance(v, dict):
            out.append(v)
            shown.append(v)
            continue
        v = dict(v)
        view = v
        where = f"variants[{i}]"
        try:
            if is_packed(v.get("ops")):
                v["ops"] = unpack_rows(v["ops"], f"{where}.ops", _OpColumns(source, where))
                checked_ops.add(i)
                view = {**v, "ops": []}
            tl = v.get("timeline")
            if is_packed(tl):
                n = tl["packed"] if type(tl["packed"]) is int else -1
                columns = tl.get("columns")
                if not (0 <= n < 2**40 and isinstance(columns, dict)):
                    _fail(source, f"{where}.timeline", "expected {'packed': N, 'columns': {...}}")
                missing = [c for c in _TIMELINE_COLUMNS if c not in columns]
                if missing:
                    _fail(source, f"{where}.timeline.columns", f"expected column {missing[0]!r}")
                v["timeline"] = _Decoded(
                    (c, unpack_column(columns[c], n, f"{where}.timeline.{c}", arrays=True))
                    for c in _TIMELINE_COLUMNS
                )
                view = {**view, "timeline": {c: [] for c in _TIMELINE_COLUMNS}}
        except PackError as exc:
            _fail(source, None, str(exc))
        out.append(v)
        shown.append(view)
    return {**report, "variants": out}, {**report, "variants": shown}, checked_ops


@functools.cache
def _op_adapters() -> dict:
    """A pydantic validator per OpRow field, made once per process."""
    from pydantic import TypeAdapter

    from memprof.reports.schema import OpRow

    return {k: TypeAdapter(f.annotation) for k, f in OpRow.model_fields.items()}


class _OpColumns:
    """Checks packed op rows a column at a time, on each column's distinct values (a column of
    numbers as a whole), against the schema's OpRow: what pydantic would say of the rows, in
    a fraction of its time for a run of many ops. Required keys no row may lack."""

    def __init__(self, source: str, where: str):
        from memprof.reports.schema import OpRow

        self.source, self.where = source, where
        self.fields = OpRow.model_fields
        self.adapters = _op_adapters()

    def __call__(self, key: str, column, absent: list) -> None:
        import numpy as np

        field = self.fields.get(key)
        if field is None:
            return  # readers ignore fields they do not know
        where = f"{self.where}.ops.{key}"
        if absent and field.is_required():
            i = absent[0]
            _fail(self.source, f"{self.where}.ops[{i}].{key}", "expected this field, found none")
        if isinstance(column, np.ndarray):
            distinct = [column[:1].tolist()[0]] if len(column) else []
            if key in ("duration_s", "start_s"):
                _times(self.source, where, column)
            elif column.dtype != np.int64:
                distinct = np.unique(column).tolist()
        else:
            distinct = list(column.names) if hasattr(column, "names") else column
        adapter = self.adapters[key]
        for value in distinct:
            try:
                adapter.validate_python(value)
            except ValidationError as exc:
                err = exc.errors(include_url=False)[0]
                _fail(self.source, where, _message(err))
        if key in ("duration_s", "start_s") and not isinstance(column, np.ndarray):
            _times(self.source, where, [x for x in distinct if x is not None])


class _Decoded(dict):
    """A timeline unpacked from its packed columns (its values are checked by _check_columns)."""


def _is_decoded(timeline) -> bool:
    return isinstance(timeline, _Decoded)


_INT_COLUMNS = ("seq", "bytes", "requested", "allocated", "reserved", "storage")
_NAME_COLUMNS = ("node", "op", "tensor")
_CHOICES = {
    "action": ("alloc", "free", "oom"),
    "phase": ("setup", "forward", "backward", "optimizer", "release", None),
}


def _check_columns(source: str, where: str, tl: dict[str, Any]) -> None:
    """Each unpacked column holds what its list would (integers, times, names or nulls; an
    action, phase or category of the schema's), checked on its distinct values; numbers end as
    numpy arrays, the rest as Labels (a plain "values" list of names stays a list)."""
    import numpy as np

    from memprof.reports.build import CATEGORIES
    from memprof.reports.reduce import Labels

    def bad(col: str, what: str, found) -> None:
        _fail(source, f"{where}.{col}", f"expected {what}, found {_short(found)}")

    for col, v in list(tl.items()):
        numeric = col in _INT_COLUMNS or col == "time_s"
        if isinstance(v, np.ndarray):  # packed as integers or times
            if col in _NAME_COLUMNS or col in _CHOICES or col == "category":
                bad(col, "names", "numbers")
            if col in _INT_COLUMNS and v.dtype != np.int64:
                bad(col, "integers", "times")
            if col == "time_s":
                v = v.astype(np.float64)
            tl[col] = v
            continue
        distinct = list(v.names) if isinstance(v, Labels) else v  # "values": a plain list
        if col in _INT_COLUMNS:
            ok = lambda x: type(x) is int  # noqa: E731
            what = "integers"
        elif col == "time_s":
            ok = lambda x: type(x) in (int, float)  # noqa: E731
            what = "numbers"
        elif col == "iteration":
            ok = lambda x: x is None or type(x) is int  # noqa: E731
            what = "integers or null"
        elif col == "category":
            ok = CATEGORIES.__contains__
            what = "one of " + ", ".join(CATEGORIES)
        elif col in _CHOICES:
            ok = _CHOICES[col].__contains__
            what = "one of " + ", ".join(map(str, _CHOICES[col]))
        else:
            ok = lambda x: x is None or isinstance(x, str)  # noqa: E731
            what = "names or null"
        for x in distinct:
            if not ok(x):
                bad(col, what, x)
        if numeric:
            dtype = np.int64 if col in _INT_COLUMNS else np.float64
            if col in _INT_COLUMNS and any(not -INT64 <= x < INT64 for x in distinct):
                bad(col, "64-bit integers", "larger")
            if isinstance(v, Labels):
                table = np.array(distinct or [0], dtype=dtype)
                tl[col] = table[v.codes]
            else:
                tl[col] = np.array(v, dtype=dtype)


def _as_lists(tl: dict[str, Any]) -> dict[str, list]:
    """A checked, unpacked timeline (_check_columns) as the report's plain lists."""
    from memprof.reports.reduce import Labels

    return {
        col: v.take(slice(None))
        if isinstance(v, Labels)
        else v
        if isinstance(v, list)
        else v.tolist()
        for col, v in tl.items()
    }


def _check_consistency(report: dict[str, Any], source: str, checked_ops=frozenset()) -> None:
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
            if isinstance(tl[col], list) and any(not -INT64 <= x < INT64 for x in tl[col]):
                _fail(source, f"{where}.timeline.{col}", "expected 64-bit integers, found larger")
        _times(source, f"{where}.timeline.time_s", tl["time_s"])
        _times(source, f"{where}.duration_s", [v["duration_s"], v["program_duration_s"]])
        for j, p in enumerate(v["phases"]):
            _times(source, f"{where}.phases[{j}]", [p["start_s"], p["end_s"]])
        for j, op in enumerate([] if i in checked_ops else v["ops"]):
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
    if hasattr(values, "dtype"):  # unpacked nanoseconds: finite by construction
        if len(values) and float(abs(values).max()) > MAX_SECONDS:
            _fail(source, field, f"expected {what} (at most {MAX_SECONDS:g})")
        return
    for x in values:
        if not (isinstance(x, (int, float)) and math.isfinite(x) and abs(x) <= MAX_SECONDS):
            _fail(source, field, f"expected {what} (finite, at most {MAX_SECONDS:g}), found {x!r}")


def _fail(source: str, field: str | None, message: str):
    what = f"{field}: " if field else ""
    raise UnreadableReport(f"{source}: unreadable report: {what}{message}")


_UNION_MEMBERS = ("Timeline", "PackedTable", "list[OpRow]")  # pydantic names a union's branch


def _loc(loc: tuple) -> str:
    out = ""
    for part in loc:
        if part in _UNION_MEMBERS:
            continue
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
