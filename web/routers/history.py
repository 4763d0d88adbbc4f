"""/api/runs/{run_id}/history: the peaks of past runs of the run's scenario, per variant."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, HTTPException, Query

from web.deps import CacheDep, load_run
from web.models import Message, RunHistory
from web.run_history import DEFAULT_LIMIT, HistoryUnreadable, past_runs

router = APIRouter(prefix="/api/runs/{run_id}/history", tags=["history"])


@router.get(
    "", response_model=RunHistory, responses={404: {"model": Message}, 500: {"model": Message}}
)
def get_history(
    run_id: str,
    cache: CacheDep,
    limit: Annotated[
        int,
        Query(ge=1, le=1000, description="at most this many runs (the newest, or up to this one)"),
    ] = DEFAULT_LIMIT,
) -> dict:
    """The recorded runs of this run's scenario (history.sqlite of the runs directory), oldest
    first: one row per variant per run with its peaks, status and commit; `current` marks this
    run's rows. `memprof run`, `memprof check` and runs started here record them."""
    run = load_run(cache, run_id)
    scenario = (run.report.get("scenario") or {}).get("name")
    try:
        rows = past_runs(cache.runs_dir, scenario, run_id, limit=limit)
    except HistoryUnreadable as exc:
        raise HTTPException(500, str(exc)) from None
    return {
        "run_id": run_id,
        "scenario": scenario,
        "recorded": any(r["current"] for r in rows),
        "runs": len({r["run_id"] for r in rows}),
        "variants": list(dict.fromkeys(r["variant"] for r in rows)),
        "rows": rows,
    }
