"""Reports of the runs directory, parsed once and kept while their files do not change.

A report with a million events is a few MB of packed columns (memprof/reports/packed.py) that
unpack in well under a second, so the dashboard parses each file once, straight into numpy
arrays (memprof.reports.reduce), never making the Python lists. Entries are keyed by the file's mtime and size, so a report that is
rewritten is read again; the least recently used ones are dropped past an event budget.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memprof.errors import InvalidInput
from memprof.reports import charts
from memprof.reports.reduce import TimelineArrays
from memprof.reports.saving import best_saving_pct, compared_with
from memprof.reports.store import list_report_paths, report_path, require_report


class UnreadableReport(Exception):
    """A file in the runs directory that is not a readable report."""


@dataclass
class LoadedRun:
    """A parsed report whose variants' `timeline` lists were replaced by arrays."""

    run_id: str
    path: Path
    stamp: tuple[int, int]
    report: dict[str, Any]  # without the variants' "timeline" columns
    timelines: dict[str, TimelineArrays]
    summary: dict[str, Any]

    def variant(self, name: str) -> dict[str, Any] | None:
        return next((v for v in self.report["variants"] if v.get("name") == name), None)

    @property
    def events(self) -> int:
        return sum(t.n for t in self.timelines.values())


class RunCache:
    """Summaries of every run, and the most recently used runs in full."""

    def __init__(self, runs_dir: str | Path, *, max_events: int = 4_000_000):
        self.runs_dir = Path(runs_dir)
        self.max_events = max_events
        self._lock = threading.Lock()
        self._loading: dict[Path, threading.Lock] = {}
        self._runs: OrderedDict[Path, LoadedRun] = OrderedDict()
        self._summaries: dict[Path, tuple[tuple[int, int], dict[str, Any]]] = {}

    def summaries(self) -> list[dict[str, Any]]:
        """One summary per report file, newest first. Unreadable files are listed as such."""
        result = []
        paths = list_report_paths(self.runs_dir)
        for path in paths:
            try:
                stamp = _stamp(path)
            except FileNotFoundError:
                continue
            cached = self._summaries.get(path)
            if cached and cached[0] == stamp:
                result.append(cached[1])
                continue
            try:
                summary = self._load(path).summary
            except FileNotFoundError:
                continue
            except Exception as exc:  # one bad file is one "unreadable" row, never a broken index
                message = str(exc) if isinstance(exc, UnreadableReport) else _reason(path, exc)
                summary = _unreadable_summary(path, message)
                self._summaries[path] = (stamp, summary)
            result.append(summary)
        with self._lock:  # forget deleted files
            for gone in set(self._summaries) - set(paths):
                del self._summaries[gone]
        return result

    def get(self, run_id: str) -> LoadedRun | None:
        """The run with this id, or None. Raises UnreadableReport for a broken file."""
        path = report_path(self.runs_dir, run_id)
        if path is None:
            return None
        try:
            return self._load(path)
        except FileNotFoundError:
            return None

    def _load(self, path: Path) -> LoadedRun:
        with self._lock:
            lock = self._loading.setdefault(path, threading.Lock())
        with lock:  # one parse per file, however many requests want it
            stamp = _stamp(path)
            with self._lock:
                run = self._runs.get(path)
                if run is not None and run.stamp == stamp:
                    self._runs.move_to_end(path)
                    return run
            try:
                run = _parse(path, stamp)
            except (FileNotFoundError, UnreadableReport):
                raise
            except Exception as exc:  # whatever else a hostile file trips: unreadable, not a 500
                raise UnreadableReport(_reason(path, exc)) from None
            with self._lock:
                self._runs[path] = run
                self._summaries[path] = (stamp, run.summary)
                while len(self._runs) > 1 and sum(r.events for r in self._runs.values()) > (
                    self.max_events
                ):
                    self._runs.popitem(last=False)
            return run


def _stamp(path: Path) -> tuple[int, int]:
    st = path.stat()
    return (st.st_mtime_ns, st.st_size)


def _parse(path: Path, stamp: tuple[int, int]) -> LoadedRun:
    try:
        with open(path, "rb") as fh:
            report = json.loads(fh.read())
    except (OSError, ValueError, RecursionError) as exc:
        if isinstance(exc, FileNotFoundError):
            raise
        raise UnreadableReport(f"{path.name} is not valid JSON: {exc}") from None
    try:
        report = require_report(report, path.name, arrays=True)
    except InvalidInput as exc:
        raise UnreadableReport(str(exc)) from None
    except (TypeError, ValueError) as exc:
        raise UnreadableReport(f"{path.name}: {exc}") from None
    timelines: dict[str, TimelineArrays] = {}
    for variant in report["variants"]:
        timelines[str(variant.get("name"))] = variant.pop("timeline")
    report.setdefault("run_id", path.stem)
    return LoadedRun(
        run_id=path.stem,
        path=path,
        stamp=stamp,
        report=report,
        timelines=timelines,
        summary=_summary(path, report, timelines),
    )


def _summary(
    path: Path, report: dict[str, Any], timelines: dict[str, TimelineArrays]
) -> dict[str, Any]:
    scenario = report.get("scenario") or {}
    variants = report["variants"]
    rows = {r.get("variant"): r for r in (report.get("comparison") or {}).get("rows") or []}
    return {
        "run_id": path.stem,
        "created_at": report.get("created_at"),
        "scenario": scenario.get("name"),
        "description": scenario.get("description"),
        "status": report.get("status", "ok"),
        "baseline_variant": charts.baseline_variant(report),
        "variants": [
            {
                "name": str(v.get("name")),
                "status": v.get("status", "ok"),
                "peak_allocated_bytes": v.get("peak_allocated_bytes"),
                "peak_reserved_bytes": v.get("peak_reserved_bytes"),
                "events": timelines[str(v.get("name"))].n,
                "warnings": len(charts.warnings_of(v)),
                "compared_with": compared_with(rows[v.get("name")])
                if v.get("name") in rows
                else None,
                "saving_pct": (rows.get(v.get("name")) or {}).get("saving_pct"),
                "saving": charts.variant_saving(report, v),
            }
            for v in variants
        ],
        "warnings": sum(len(charts.warnings_of(v)) for v in variants),
        "best_saving_pct": best_saving_pct(report.get("comparison")),
        "error": None,
    }


def _reason(path: Path, exc: BaseException) -> str:
    return f"{path.name}: unreadable report: {type(exc).__name__}: {exc}"


def _unreadable_summary(path: Path, message: str) -> dict[str, Any]:
    return {
        "run_id": path.stem,
        "created_at": None,
        "scenario": None,
        "description": None,
        "status": "unreadable",
        "baseline_variant": None,
        "variants": [],
        "warnings": 0,
        "best_saving_pct": None,
        "error": message,
    }
