"""/api/runs/{run_id}/variants/{variant}/timeline: a variant's allocation timeline, reduced.

A million events do not fit in a browser; the server sends at most `max_points` of them: per
bucket of events the lowest and highest allocated and reserved samples, plus the first, the
last and the exact peak (memprof/reports/reduce.py). Zooming asks again for a smaller window.
"""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, HTTPException, Query
from fastapi.responses import JSONResponse

from memprof.reports import charts
from memprof.reports.html import timeline_note
from web.cache import LoadedRun, RunCache
from web.deps import CacheDep, load_run, load_variant, reduced
from web.models import Message, TimelineSeries

router = APIRouter(prefix="/api/runs/{run_id}/variants/{variant}", tags=["timeline"])

Start = Annotated[int | None, Query(ge=0, description="first event index (default 0)")]
End = Annotated[int | None, Query(ge=0, description="last event index, inclusive (default last)")]
MaxPoints = Annotated[
    int,
    Query(ge=3, le=100_000, description="at most this many samples (first, last and peak kept)"),
]
ERRORS = {404: {"model": Message}, 422: {"model": Message}}


@router.get("/timeline", response_model=TimelineSeries, responses=ERRORS)
def get_timeline(
    run_id: str,
    variant: str,
    cache: CacheDep,
    start: Start = None,
    end: End = None,
    max_points: MaxPoints = 2000,
) -> dict:
    """Allocated and reserved bytes over events [start, end], reduced to `max_points`."""
    _, series = _window(cache, run_id, variant, start, end, max_points)
    return {"run_id": run_id, "variant": variant, **series}


@router.get("/timeline/figure", responses=ERRORS)
def get_timeline_figure(
    run_id: str,
    variant: str,
    cache: CacheDep,
    start: Start = None,
    end: End = None,
    max_points: MaxPoints = 2000,
    x: Annotated[Literal["index", "time"], Query(description="x axis")] = "index",
) -> JSONResponse:
    """The run page's timeline chart for [start, end], as a Plotly figure (data and layout)."""
    run, series = _window(cache, run_id, variant, start, end, max_points)
    entry = run.variant(variant)
    phases = entry.get("phases") or []
    arrays = load_variant(run, variant)
    marks = charts.warning_marks(entry, arrays.time_s, arrays.allocated)
    fig = charts.timeline_figure(series, phases=phases, x=x, warnings=marks)
    fig["layout"]["meta"]["note"] = timeline_note(series)
    return JSONResponse(fig)


def _window(
    cache: RunCache, run_id: str, variant: str, start: int | None, end: int | None, max_points: int
) -> tuple[LoadedRun, dict]:
    """The run and the variant's reduced series of [start, end]; 404 when it has no events."""
    run = load_run(cache, run_id)
    series = reduced(load_variant(run, variant), start, end, max_points)
    if series is None:
        raise HTTPException(404, f"variant {variant!r} of run {run_id!r} recorded no events")
    return run, series
