"""What the routers take from the app: the run cache, the scenarios folder, the job manager."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, HTTPException, Request

from memprof.reports.reduce import TimelineArrays, reduce_timeline
from web.cache import LoadedRun, RunCache
from web.jobs import JobManager
from web.scenario_files import ScenarioFolder


def get_cache(request: Request) -> RunCache:
    return request.app.state.cache


def get_scenarios(request: Request) -> ScenarioFolder:
    return request.app.state.scenarios


def get_jobs(request: Request) -> JobManager:
    return request.app.state.jobs


CacheDep = Annotated[RunCache, Depends(get_cache)]
ScenariosDep = Annotated[ScenarioFolder, Depends(get_scenarios)]
JobsDep = Annotated[JobManager, Depends(get_jobs)]


def load_run(cache: RunCache, run_id: str) -> LoadedRun:
    """The run, or a 404 naming the id."""
    run = cache.get(run_id)
    if run is None:
        raise HTTPException(404, f"no run {run_id!r} in the runs directory")
    return run


def load_variant(run: LoadedRun, name: str) -> TimelineArrays:
    """The variant's timeline arrays, or a 404 listing the variants there are."""
    if run.variant(name) is None:
        names = ", ".join(str(v.get("name")) for v in run.report["variants"]) or "none"
        raise HTTPException(404, f"run {run.run_id!r} has no variant {name!r} (it has: {names})")
    return run.timelines[name]


def reduced(
    arrays: TimelineArrays, start: int | None, end: int | None, max_points: int
) -> dict | None:
    """The reduced series of [start, end], None for an empty timeline, 422 for a bad window."""
    if arrays.n == 0:
        if start not in (None, 0) or end not in (None, 0):
            raise HTTPException(422, "the timeline has no events")
        return None
    last = arrays.n - 1
    lo = 0 if start is None else start
    hi = last if end is None else end
    if lo > last:
        raise HTTPException(422, f"start {lo} is past the last event ({last})")
    if hi > last:
        raise HTTPException(422, f"end {hi} is past the last event ({last})")
    if lo > hi:
        raise HTTPException(422, f"start {lo} is after end {hi}")
    return reduce_timeline(arrays, start=lo, end=hi, max_points=max_points)
