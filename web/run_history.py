"""The past runs of a run's scenario, from the runs directory's history (memprof/history.py).

The run page charts them and `GET /api/runs/{run_id}/history` serves them: the rows of up to
`limit` runs of the same scenario, oldest first, each marked `current` when it belongs to the
run asked about. The window is the newest `limit` runs, or, for an older run, the `limit` runs
up to and including it.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from memprof import history

DEFAULT_LIMIT = 50


class HistoryUnreadable(Exception):
    """The runs directory's history.sqlite exists but cannot be read."""


def past_runs(
    runs_dir: str | Path, scenario: str | None, run_id: str, *, limit: int = DEFAULT_LIMIT
) -> list[dict[str, Any]]:
    """History rows (memprof.history.query's dicts plus `current`) of the scenario's runs.

    Raises HistoryUnreadable for a history database that is not one (or is locked for good).
    """
    if not scenario:
        return []
    try:
        rows = history.query(runs_dir, scenario)
    except sqlite3.Error as exc:
        raise HistoryUnreadable(f"{history.db_path(runs_dir).name} cannot be read: {exc}") from None
    runs = list(dict.fromkeys(r["run_id"] for r in rows))
    end = len(runs)
    if run_id in runs and runs.index(run_id) < len(runs) - limit:
        end = runs.index(run_id) + 1
    kept = set(runs[max(0, end - limit) : end])
    return [{**r, "current": r["run_id"] == run_id} for r in rows if r["run_id"] in kept]
