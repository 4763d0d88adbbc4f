"""The one place a finished run is recorded: its report saved in the runs directory (atomically,
as `<run_id>.json`) and its variants appended to the directory's history.

`memprof run`, `memprof check`, the dashboard's jobs and `memprof.profile` all call
`record_run`; the runner itself saves nothing.

>>> recorded = record_run("memprof-runs", report, source="run")
>>> recorded.path, recorded.problem
(PosixPath('memprof-runs/20261122T081500Z-relu-1a2b3c.json'), None)
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from memprof.reports.types import Report


@dataclass(frozen=True)
class RecordedRun:
    """What `record_run` managed to do.

    path: where the report was saved (None: it could not be saved).
    in_history: whether its variants reached the history database.
    problem: why not everything was recorded, naming the runs directory (None: all went well).
    """

    run_id: str
    path: Path | None
    in_history: bool
    problem: str | None = None

    @property
    def ok(self) -> bool:
        return self.problem is None


def record_run(
    runs_dir: str | os.PathLike,
    report: Report,
    *,
    source: str,
    passed: Mapping[str, bool] | None = None,
) -> RecordedRun:
    """Save `report` atomically under `runs_dir` and append it to the history there.

    source: who ran it ("run", "check", "web", "profile"); passed: variant name -> verdict when
    the caller judged more than the report's own expectations (see memprof.history.append).
    Never raises for a runs directory that cannot be written (full disk, no permission, a
    locked or corrupt history database): the caller still has the report in hand, so the
    failure comes back in `problem` for it to show. A report that cannot be saved is not
    appended to the history either (the history would point at a run with no report).
    """
    from memprof import history
    from memprof.reports.store import save_report

    run_id = str(report.get("run_id", "?"))
    try:
        path = save_report(dict(report), runs_dir)
    except (OSError, ValueError) as exc:
        return RecordedRun(run_id, None, False, _problem(runs_dir, run_id, "save", exc))
    try:
        history.append(runs_dir, report, source=source, passed=passed)
    except (OSError, sqlite3.Error) as exc:
        return RecordedRun(run_id, path, False, _problem(runs_dir, run_id, "history", exc))
    return RecordedRun(run_id, path, True)


def _problem(runs_dir, run_id: str, what: str, exc: BaseException) -> str:
    reason = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
    if what == "save":
        return f"{runs_dir}: cannot save run {run_id} there: {reason}"
    return f"{runs_dir}: saved run {run_id}, but cannot add it to the history there: {reason}"


__all__ = ["RecordedRun", "record_run"]
