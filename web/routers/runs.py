"""/api/runs: the runs of the runs directory, each run's report, and starting new runs."""

from __future__ import annotations

import json
from typing import Annotated

from fastapi import APIRouter, HTTPException, Query, Request, Response
from fastapi.responses import FileResponse, JSONResponse, StreamingResponse

from memprof.reports.store import report_path
from memprof.reports.trace import trace_chunks
from web.cache import UnreadableReport
from web.deps import CacheDep, JobsDep, ScenariosDep, load_run
from web.jobs import QueueFull
from web.models import JobInfo, Message, RunReport, RunRequest, RunSummary

router = APIRouter(prefix="/api/runs", tags=["runs"])


@router.get("", response_model=list[RunSummary])
def list_runs(
    cache: CacheDep,
    scenario: Annotated[str | None, Query(max_length=200, description="only this scenario")] = None,
) -> list[dict]:
    """Every run, newest first: scenario, date, status, and per variant its peak and warnings."""
    summaries = cache.summaries()
    if scenario is not None:
        summaries = [s for s in summaries if s["scenario"] == scenario]
    return summaries


@router.get("/{run_id}", response_model=RunReport, responses={404: {"model": Message}})
def get_run(
    run_id: str,
    cache: CacheDep,
    timeline: Annotated[
        bool, Query(description="include each variant's event timeline (large)")
    ] = True,
) -> Response:
    """The run's report as it was written (docs/report-format.md)."""
    if timeline:
        path = report_path(cache.runs_dir, run_id)
        if path is None:
            raise HTTPException(404, f"no run {run_id!r} in the runs directory")
        return FileResponse(path, media_type="application/json")
    return JSONResponse(load_run(cache, run_id).report)


def _whole_report(cache: CacheDep, run_id: str) -> dict:
    """The run's report with its timelines (the cache keeps none): 404 for no such run, 500
    for a file that is not a report."""
    run = load_run(cache, run_id)
    from memprof.errors import InvalidInput
    from memprof.reports.store import require_report

    try:
        report = json.loads(run.path.read_bytes())  # the cache keeps no timeline lists
        return require_report(report, run.path.name)  # packed columns back as lists
    except FileNotFoundError:
        raise HTTPException(404, f"no run {run_id!r} in the runs directory") from None
    except (OSError, ValueError, InvalidInput) as exc:
        raise UnreadableReport(f"{run.path.name} cannot be read: {exc}") from None


@router.get(
    "/{run_id}/trace",
    response_class=StreamingResponse,
    responses={
        200: {
            "content": {"application/json": {}},
            "description": "Chrome Trace Event JSON (`traceEvents`), as a file download",
        },
        404: {"model": Message},
    },
)
def get_trace(run_id: str, cache: CacheDep) -> StreamingResponse:
    """The run as a Chrome Trace Event file to open in ui.perfetto.dev: per variant a process
    with the memory counter, the phases, one span per node and every allocation as an
    instant (memprof/reports/trace.py)."""
    report = _whole_report(cache, run_id)
    return StreamingResponse(
        trace_chunks(report),
        media_type="application/json",
        headers={"Content-Disposition": f'attachment; filename="{run_id}.trace.json"'},
    )


@router.get(
    "/{run_id}/snapshot",
    response_class=Response,
    responses={
        200: {
            "content": {"application/octet-stream": {}},
            "description": "PyTorch memory snapshot (torch.cuda.memory._snapshot() pickle)",
        },
        404: {"model": Message},
    },
)
def get_snapshot(run_id: str, cache: CacheDep) -> Response:
    """The run as a PyTorch memory snapshot for pytorch.org/memory_viz or
    `python -m torch.cuda._memory_viz`: each variant is one device (memprof/reports/snapshot.py)."""
    from memprof.reports.snapshot import render_snapshot

    report = _whole_report(cache, run_id)
    return Response(
        render_snapshot(report),
        media_type="application/octet-stream",
        headers={"Content-Disposition": f'attachment; filename="{run_id}.snapshot.pickle"'},
    )


def _refuse_invalid(request: Request, scenario, variants: list[str] | None) -> None:
    """422 when the file is invalid as `memprof validate` (and the scenarios page) decides it,
    or when a requested variant is not one of its variants. The check is cached per file
    version and shared with the scenarios page; a file not checked yet (a run holds the
    runner) is left to the job, which validates it again."""
    from memprof.scenario.catalog import suggest
    from web.scenario_check import ScenarioChecks

    checks = getattr(request.app.state, "scenario_checks", None)
    if checks is None:
        checks = request.app.state.scenario_checks = ScenarioChecks()
    result = checks.check(scenario.path)
    if result.status == "invalid":
        where = [
            f"{scenario.id}:{p}" if p[:1].isdigit() else f"{scenario.id}: {p}"
            for p in result.problems
        ]
        raise HTTPException(422, "; ".join(where))
    if result.status == "valid" and variants:
        for name in variants:
            if name not in result.variants:
                raise HTTPException(
                    422,
                    f"scenario {scenario.id!r}: unknown variant {name!r}"
                    f"{suggest(name, result.variants)}; the scenario defines: "
                    + ", ".join(result.variants),
                )


@router.post(
    "",
    status_code=202,
    response_model=JobInfo,
    responses={
        400: {"model": Message, "description": "the body is not valid JSON"},
        403: {"model": Message, "description": "a real device on a meta-only server"},
        404: {"model": Message},
        413: {"model": Message},
        422: {"description": "a malformed body, an invalid scenario file or an unknown variant"},
        429: {"model": Message},
    },
)
def start_run(
    body: RunRequest,
    request: Request,
    response: Response,
    scenarios: ScenariosDep,
    jobs: JobsDep,
):
    """Run a scenario of the scenarios folder in the background. Follow the job at
    /api/jobs/{id} (the Location header) until its status is done (then it has a run_id) or
    failed. A file `memprof validate` refuses, or a variant it does not define, is refused
    here (422) with the same message, before any job is queued."""
    if body.device not in (None, "meta") and not jobs.real_devices:
        raise HTTPException(
            403,
            f"device {body.device!r}: this dashboard runs scenarios on the meta device only "
            "(start it with `memprof serve --real-devices`)",
        )
    scenario = scenarios.find(body.scenario)
    if scenario is None:
        raise HTTPException(404, f"no scenario {body.scenario!r} in the scenarios folder")
    if scenario.error:
        raise HTTPException(422, f"scenario {scenario.id!r} cannot be read: {scenario.error}")
    _refuse_invalid(request, scenario, body.variants)
    try:
        job = jobs.submit(
            scenario.path,
            scenario.id,
            scenario.name,
            variants=body.variants,
            device=body.device,
            allocator=body.allocator,
        )
    except QueueFull as exc:
        raise HTTPException(429, str(exc)) from None
    response.headers["Location"] = f"/api/jobs/{job['id']}"
    return job
