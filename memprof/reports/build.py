"""Build the report (docs/report-format.md) from what a run recorded.

The runner hands over allocator event records (anything with the attributes of `Record`; the
runner's own type lives with its recorder),
per-node spans and what it observed; this module turns them into the documented JSON shape:
the columnar timeline, the peak and what was live at it, per-op rows, expectations, and the
comparison across variants. It knows nothing about the engine.
"""

from __future__ import annotations

import datetime as _dt
import os
import platform
import re
import secrets
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, get_args

from memprof import __version__
from memprof.reports.types import Comparison, Report, Variant
from memprof.reports.vocab import Category
from memprof.units import format_bytes

SCHEMA_VERSION = 2
CATEGORIES: tuple[str, ...] = get_args(Category)  # input, parameter, ..., temporary, other
TIMELINE_COLUMNS = (
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


class Record(Protocol):
    """What the builder reads of one allocator event (memprof.runner.recorder.Record is the
    runner's; tests may pass their own). A free's `storage_category` and `storage_tensor` are
    those of its allocation."""

    seq: int
    time_ns: int
    action: str  # alloc | free | oom
    bytes: int
    requested: int
    allocated: int
    reserved: int
    storage: int
    node: str | None
    op: str | None
    phase: str | None
    iteration: int | None
    category: str | None
    tensor: str | None
    clone_of: str | None

    @property
    def storage_category(self) -> str: ...

    @property
    def storage_tensor(self) -> str | None: ...


def timeline(records: Sequence[Record], t0_ns: int) -> dict[str, list]:
    """Columnar timeline: one entry per event in every column. A free carries where it happened
    (node, op, phase) and what was freed (category, tensor of its allocation). A recorder's
    columnar log (memprof.runner.eventlog) gives its columns directly."""
    if hasattr(records, "columns"):
        return records.columns(t0_ns)
    cols: dict[str, list] = {c: [] for c in TIMELINE_COLUMNS}
    for r in records:
        cols["seq"].append(r.seq)
        cols["time_s"].append(round((r.time_ns - t0_ns) / 1e9, 9))
        cols["action"].append(r.action)
        cols["bytes"].append(r.bytes)
        cols["requested"].append(r.requested)
        cols["allocated"].append(r.allocated)
        cols["reserved"].append(r.reserved)
        cols["node"].append(r.node)
        cols["op"].append(r.op)
        cols["phase"].append(r.phase)
        cols["category"].append(r.storage_category)
        cols["tensor"].append(r.storage_tensor)
        cols["iteration"].append(r.iteration)
        cols["storage"].append(r.storage)
    return cols


def peak(records: Sequence[Record], *, top: int | None = None) -> dict[str, Any]:
    """The first event at which allocated bytes peaked, and the storages live right after it."""
    if hasattr(records, "peak_index"):  # a recorder's columnar log: its own fast scan
        index = records.peak_index()
        live_rows = [] if index is None else records.live_rows(index)
    else:
        best, index = -1, None
        for i, r in enumerate(records):
            if r.action != "oom" and r.allocated > best:
                best, index = r.allocated, i
    if index is None:
        return {
            "event_index": None,
            "allocated_bytes": 0,
            "reserved_bytes": 0,
            "live": [],
            "by_category": {},
        }
    if hasattr(records, "peak_index"):
        live = {row: records[records.first[row]] for row in live_rows}
    else:
        live = {}
        for r in records[: index + 1]:
            if r.action == "alloc":
                live[r.storage] = r
            elif r.action == "free":
                live.pop(r.storage, None)
    rows = sorted(live.values(), key=lambda r: (-r.bytes, r.seq))
    by_category: dict[str, int] = {}
    for r in rows:
        by_category[r.storage_category] = by_category.get(r.storage_category, 0) + r.bytes
    entries = [
        {
            "tensor": r.tensor,
            "bytes": r.bytes,
            "category": r.storage_category,
            "node": r.node,
            "op": r.op,
            "phase": r.phase,
            "iteration": r.iteration,
        }
        for r in (rows if top is None else rows[:top])
    ]
    return {
        "event_index": index,
        "allocated_bytes": records[index].allocated,
        "reserved_bytes": records[index].reserved,
        "live": entries,
        "by_category": dict(sorted(by_category.items(), key=lambda kv: -kv[1])),
    }


def op_row(
    *,
    node: str,
    op: str | None,
    phase: str,
    iteration: int,
    records: Iterable[Record],
    allocated_before: int,
    duration_s: float,
    inplace: bool,
    clone_bytes: int = 0,
    module: str | None = None,
    start_s: float | None = None,
) -> dict[str, Any]:
    """One row of `ops`: what one node (or phase step) allocated, freed and peaked at.

    start_s: when the node started, in seconds since the variant started (the clock of
    `timeline.time_s`); the trace export places the node's span with it.
    """
    totals = getattr(records, "totals", None)  # the recorder's columns add up without views
    if totals is not None:
        alloc, freed, peak_bytes = totals(allocated_before)
    else:
        alloc = freed = 0
        peak_bytes = allocated_before
        for r in records:
            if r.action == "alloc":
                alloc += r.bytes
            elif r.action == "free":
                freed += r.bytes
            if r.action != "oom":
                peak_bytes = max(peak_bytes, r.allocated)
    row = {
        "node": node,
        "op": op,
        "phase": phase,
        "iteration": iteration,
        "allocated_bytes": alloc,
        "freed_bytes": freed,
        "peak_bytes": peak_bytes,
        "duration_s": round(duration_s, 9),
        "inplace": inplace,
        "inplace_cost": ("clone" if clone_bytes else "free") if inplace else None,
        "clone_bytes": clone_bytes,
    }
    if module is not None:
        row["module"] = module
    if start_s is not None:
        row["start_s"] = round(start_s, 9)
    return row


# --- expectations -----------------------------------------------------------------------------

_OPS = {
    "==": lambda a, b: a == b,
    "<=": lambda a, b: a <= b,
    ">=": lambda a, b: a >= b,
    "<": lambda a, b: a < b,
    ">": lambda a, b: a > b,
}

SIZE_METRICS = {
    "peak_allocated": "peak_allocated_bytes",
    "peak_reserved": "peak_reserved_bytes",
    "final_allocated": "final_allocated_bytes",
    "baseline": "baseline_bytes",
}


def _sizes(expected: int, actual: int | None) -> tuple[str, str]:
    """The two sizes as a message shows them: in bytes too where the rounded units would read
    the same but the numbers differ (24.09 MiB against 24.09 MiB says nothing)."""
    if actual is None:
        return format_bytes(expected), "not measured"
    want, got = format_bytes(expected), format_bytes(actual)
    if want == got and expected != actual:
        want, got = f"{want} = {expected:,} bytes", f"{got} = {actual:,} bytes"
    return want, got


def _size_row(metric: str, op: str, expected: int, actual: int | None) -> dict[str, Any]:
    passed = actual is not None and _OPS[op](actual, expected)
    want, shown = _sizes(expected, actual)
    return {
        "metric": metric,
        "op": op,
        "expected": expected,
        "actual": actual,
        "passed": passed,
        "message": f"{metric} {op} {want} (actual {shown})",
    }


def evaluate(
    expect, variant: dict[str, Any], observed_values: dict[str, Any] | None = None
) -> list[dict]:
    """Check an `Expectation` (scenario model) against a built variant dict.

    observed_values: for `values` expectations, tensor name -> (min, max) or an error string.
    """
    if expect is None:
        return []
    rows: list[dict] = []
    err = variant.get("error")
    if expect.error is not None:
        want = expect.error
        got_type = err["type"] if err else None
        got_msg = err["message"] if err else ""
        passed = got_type == want.type and (want.message is None or want.message in got_msg)
        expected_text = want.type + (f": ...{want.message}..." if want.message else "")
        actual_text = f"{got_type}: {got_msg}" if err else "no error"
        rows.append(
            {
                "metric": "error",
                "op": "matches",
                "expected": expected_text,
                "actual": actual_text,
                "passed": passed,
                "message": f"expected {expected_text}, found {actual_text}",
            }
        )
    status_want = expect.status
    if status_want is None and expect.error is not None:
        status_want = "oom" if expect.error.type == "OutOfMemoryError" else "error"
    if status_want is not None:
        actual = variant["status"]
        rows.append(
            {
                "metric": "status",
                "op": "==",
                "expected": status_want,
                "actual": actual,
                "passed": actual == status_want,
                "message": f"status == {status_want} (actual {actual})",
            }
        )
    for metric, key in SIZE_METRICS.items():
        check = getattr(expect, metric)
        if check is not None:
            rows.append(_size_row(metric, check[0], check[1], variant.get(key)))
    if expect.peak_over_baseline is not None:
        op, n = expect.peak_over_baseline
        actual = variant["peak_allocated_bytes"] - variant["baseline_bytes"]
        rows.append(_size_row("peak_over_baseline", op, n, actual))
    by_cat = variant["peak"]["by_category"]
    for cat, (op, n) in (expect.peak_by_category or {}).items():
        row = _size_row(f"peak_by_category:{cat}", op, n, by_cat.get(cat, 0))
        want, shown = _sizes(n, by_cat.get(cat, 0))
        row["message"] = f"{cat} at the peak {op} {want} (actual {shown})"
        rows.append(row)
    for name, value in (expect.values or {}).items():
        obs = (observed_values or {}).get(name)
        if isinstance(obs, tuple):
            lo, hi = obs
            passed = abs(lo - value) <= 1e-6 * max(1.0, abs(value)) and abs(
                hi - value
            ) <= 1e-6 * max(1.0, abs(value))
            actual = lo if lo == hi else [lo, hi]
            shown = f"{lo:g}" if lo == hi else f"{lo:g} .. {hi:g}"
        else:
            passed, actual, shown = False, None, obs or "not available"
        rows.append(
            {
                "metric": f"values:{name}",
                "op": "==",
                "expected": value,
                "actual": actual,
                "passed": passed,
                "message": f"every element of {name} == {value:g} (actual {shown})",
            }
        )
    counts: dict[str, int] = {}
    for w in variant.get("warnings", []):
        counts[w["kind"]] = counts.get(w["kind"], 0) + 1
    for kind, n in (expect.warnings or {}).items():
        actual = counts.get(kind, 0)
        rows.append(
            {
                "metric": f"warnings:{kind}",
                "op": "==",
                "expected": n,
                "actual": actual,
                "passed": actual == n,
                "message": f"{kind} warnings == {n} (actual {actual})",
            }
        )
    for node, cost in (expect.inplace or {}).items():
        costs = [r["inplace_cost"] for r in variant.get("ops", []) if r["node"] == node]
        actual = costs[0] if costs else None
        if any(c != actual for c in costs):
            actual = "clone" if "clone" in costs else actual
        rows.append(
            {
                "metric": f"inplace:{node}",
                "op": "==",
                "expected": cost,
                "actual": actual,
                "passed": actual == cost,
                "message": f"in-place cost of node {node} == {cost} (actual {actual or 'not in place'})",
            }
        )
    return rows


# --- the whole report -------------------------------------------------------------------------


def comparison(
    variants: list[Variant], baseline: str | None, inplace: Iterable[str] = ()
) -> Comparison:
    """Peak allocated of each variant against its reference (memprof.reports.saving): the
    variant differing from it only in the in-place parameters `inplace`, else the baseline.
    Delta, ratio and saving % are None-free only when both finished (status ok)."""
    from memprof.reports.saving import references, saving_pct

    if not variants:
        return {"baseline": None, "rows": []}
    names = [v["name"] for v in variants]
    if baseline not in names:
        baseline = names[0]
    by_name = {v["name"]: v for v in variants}
    refs = references(variants, inplace, baseline)
    rows = []
    for v in variants:
        ref_name = refs[v["name"]]
        ref = by_name[ref_name] if ref_name is not None else v
        p, r_peak = v["peak_allocated_bytes"], ref["peak_allocated_bytes"]
        both_ok = v["status"] == "ok" and ref["status"] == "ok"
        comparable = both_ok and ref_name is not None
        r_time = ref["program_duration_s"]
        rows.append(
            {
                "variant": v["name"],
                "status": v["status"],
                "is_baseline": v["name"] == baseline,
                "compared_with": ref_name,
                "reference_status": ref["status"],
                "reference_peak_bytes": r_peak,
                "peak_allocated_bytes": p,
                "delta_bytes": p - r_peak,
                "ratio": round(p / r_peak, 6) if r_peak and both_ok else None,
                "saving_pct": saving_pct(p, r_peak) if comparable else None,
                "peak_reserved_bytes": v["peak_reserved_bytes"],
                "reserved_delta_bytes": v["peak_reserved_bytes"] - ref["peak_reserved_bytes"],
                "duration_s": v["duration_s"],
                "program_duration_s": v["program_duration_s"],
                "program_duration_ratio": round(v["program_duration_s"] / r_time, 4)
                if r_time and both_ok
                else None,
            }
        )
    return {"baseline": baseline, "rows": rows}


def expects_failure(variant: dict[str, Any]) -> bool:
    """Whether the scenario expects this variant to fail (an `error` or `status` expectation):
    then that expectation, not the failure itself, decides the verdict."""
    return any(e["metric"] in ("error", "status") for e in variant.get("expectations") or [])


def failed_unexpectedly(variant: dict[str, Any]) -> bool:
    """The variant did not finish (error, oom) and nothing in the scenario expected it to.
    The one judgement of a failed run: the report's status, `memprof run`'s exit code and
    failure lines, and `memprof check`'s status check all ask this."""
    return (variant.get("status") or "ok") != "ok" and not expects_failure(variant)


def overall_status(variants: list[Variant]) -> str:
    """failed: a variant errored without expecting to; expectation_failed: a check failed."""
    if any(failed_unexpectedly(v) for v in variants):
        return "failed"
    if any(not e["passed"] for v in variants for e in v["expectations"]):
        return "expectation_failed"
    return "ok"


def make_run_id(name: str, when: _dt.datetime) -> str:
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-.")[:60] or "scenario"
    return f"{when.strftime('%Y%m%dT%H%M%SZ')}-{slug}-{secrets.token_hex(3)}"


def environment(device: str, backend: str, allocator: str) -> dict[str, Any]:
    import numpy

    cupy_version = None
    if "cupy" in sys.modules:
        cupy_version = getattr(sys.modules["cupy"], "__version__", None)
    return {
        "device": device,
        "backend": backend,
        "allocator": allocator,
        "python": platform.python_version(),
        "numpy": numpy.__version__,
        "cupy": cupy_version,
        "platform": platform.platform(),
        "git_commit": git_commit(),
    }


def git_commit(start: str | os.PathLike = ".") -> str | None:
    """HEAD's commit hash read from .git (no subprocess), or None outside a repository."""
    try:
        here = os.path.abspath(start)
        while True:
            git = os.path.join(here, ".git")
            if os.path.isdir(git):
                break
            parent = os.path.dirname(here)
            if parent == here:
                return None
            here = parent
        with open(os.path.join(git, "HEAD"), encoding="utf-8") as fh:
            head = fh.read().strip()
        if not head.startswith("ref: "):
            return head or None
        ref = head[5:]
        ref_path = os.path.join(git, ref)
        if os.path.isfile(ref_path):
            with open(ref_path, encoding="utf-8") as fh:
                return fh.read().strip() or None
        packed = os.path.join(git, "packed-refs")
        if os.path.isfile(packed):
            with open(packed, encoding="utf-8") as fh:
                for line in fh:
                    parts = line.split()
                    if len(parts) == 2 and parts[1] == ref:
                        return parts[0]
        return None
    except OSError:
        return None


@dataclass
class ScenarioInfo:
    name: str
    description: str
    path: str
    sha256: str
    warnings: list[str] = field(default_factory=list)
    inplace_params: list[str] = field(default_factory=list)  # see memprof.reports.saving


def assemble(
    scenario: ScenarioInfo,
    env: dict[str, Any],
    variants: list[Variant],
    baseline: str | None,
    *,
    created: _dt.datetime | None = None,
) -> Report:
    """The whole report (schema_version 1)."""
    created = created or _dt.datetime.now(_dt.timezone.utc)
    comp = comparison(variants, baseline, scenario.inplace_params)
    report = {
        "schema_version": SCHEMA_VERSION,
        "tool": {"name": "memprof", "version": __version__},
        "run_id": make_run_id(scenario.name, created),
        "created_at": created.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "scenario": {
            "name": scenario.name,
            "description": scenario.description,
            "path": scenario.path,
            "sha256": scenario.sha256,
            "warnings": list(scenario.warnings),
        },
        "environment": env,
        "status": overall_status(variants),
        "baseline_variant": comp["baseline"],
        "variants": variants,
        "comparison": comp,
    }
    return report
