"""The combined result of one `memprof check` (`--json PATH`): every variant's verdict in one file.

A later check reads it back as `--baseline` (memprof/check/baseline.py):

    {"kind": "memprof-check", "schema_version": 1, "created_at": "...Z", "passed": false,
     "max_increase_pct": 5.0, "baseline": "main.json", "git_commit": "...",
     "summary": {"variants": 2, "passed": 1, "failed": 1},
     "scenarios": [{"name": "relu-block", "path": "...", "run_id": "...", "status": "ok"}],
     "results": [{"scenario": "relu-block", "variant": "inplace", "passed": true, "status": "ok",
                  "peak_allocated_bytes": 67108864, "checks": [...], "explanation": [], ...}]}
"""

from __future__ import annotations

import datetime as _dt
import json
from collections.abc import Mapping, Sequence
from typing import Any

from memprof import __version__
from memprof.check.baseline import CHECK_KIND, CHECK_SCHEMA_VERSION
from memprof.check.evaluate import VariantResult


def combined_result(
    results: Sequence[VariantResult],
    reports: Sequence[Mapping[str, Any]],
    *,
    baseline: str | None,
    max_increase_pct: float,
    created: _dt.datetime | None = None,
) -> dict[str, Any]:
    """The `--json` document for these verdicts and the reports they came from."""
    created = created or _dt.datetime.now(_dt.timezone.utc)
    commits = {(r.get("environment") or {}).get("git_commit") for r in reports} - {None}
    failed = sum(not r.passed for r in results)
    return {
        "kind": CHECK_KIND,
        "schema_version": CHECK_SCHEMA_VERSION,
        "tool": {"name": "memprof", "version": __version__},
        "created_at": created.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "git_commit": commits.pop() if len(commits) == 1 else None,
        "passed": failed == 0,
        "max_increase_pct": max_increase_pct,
        "baseline": baseline,
        "summary": {"variants": len(results), "passed": len(results) - failed, "failed": failed},
        "scenarios": [
            {
                "name": r["scenario"]["name"],
                "path": r["scenario"].get("path"),
                "run_id": r.get("run_id"),
                "status": r.get("status"),
            }
            for r in reports
        ],
        "results": [r.to_dict() for r in results],
    }


def dumps(result: Mapping[str, Any]) -> str:
    return json.dumps(result, indent=1, allow_nan=False) + "\n"
