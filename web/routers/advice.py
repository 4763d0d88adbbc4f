"""/api/runs/{run_id}/advice: `memprof advise` for a run's scenario, run on request.

POST computes the advice for one variant of the run (default: the run's baseline) from the
scenario file of the same name in the scenarios folder, on meta unless the dashboard was started
with --real-devices; GET returns the last advice computed by this server (204 when there is
none). The run page's "In-place advice" panel calls them (web/static/advice.js).
"""

from __future__ import annotations

import threading
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Query, Request, Response

from web.deps import CacheDep, JobsDep, ScenariosDep, load_run
from web.models import Message

router = APIRouter(prefix="/api/runs", tags=["advice"])

VariantQuery = Annotated[
    str | None,
    Query(max_length=200, description="the variant to advise (default: the run's baseline)"),
]
_LOCK = threading.Lock()
_MAX_KEPT = 64  # advice kept per server, oldest dropped first


def _store(request: Request) -> dict[tuple[str, str], dict[str, Any]]:
    state = request.app.state
    if not hasattr(state, "advice"):
        state.advice = {}
    return state.advice


def _variant(run, variant: str | None) -> str:
    names = [str(v.get("name")) for v in run.report.get("variants", [])]
    name = variant or run.report.get("baseline_variant") or (names[0] if names else None)
    if name is None or name not in names:
        raise HTTPException(
            404,
            f"run {run.run_id!r} has no variant {name!r} (it has: {', '.join(names) or 'none'})",
        )
    return name


@router.get(
    "/{run_id}/advice",
    responses={
        204: {"description": "no advice computed for this run and variant yet"},
        404: {"model": Message, "description": "no such run or variant"},
    },
)
def get_advice(run_id: str, request: Request, cache: CacheDep, variant: VariantQuery = None):
    """The in-place advice last computed here for this run and variant (docs/report-format.md,
    "Advice"), or 204 No Content when none was computed yet (POST computes it; a browser logs
    no error for a 204)."""
    run = load_run(cache, run_id)
    name = _variant(run, variant)
    with _LOCK:
        found = _store(request).get((run_id, name))
    if found is None:
        return Response(status_code=204)
    return found


@router.post(
    "/{run_id}/advice",
    responses={
        404: {"model": Message, "description": "no such run, variant or scenario file"},
        422: {"model": Message, "description": "the scenario cannot be advised"},
    },
)
def post_advice(
    run_id: str,
    request: Request,
    cache: CacheDep,
    scenarios: ScenariosDep,
    jobs: JobsDep,
    variant: VariantQuery = None,
):
    """Advise which nodes of the run's scenario can run in place (`memprof advise`): a verdict
    per candidate node, each proven by re-running the variant, and what each saves."""
    from memprof.advise import advise
    from memprof.errors import MemprofError

    run = load_run(cache, run_id)
    name = _variant(run, variant)
    scenario_name = str((run.report.get("scenario") or {}).get("name") or "")
    scenario = scenarios.find(scenario_name)
    if scenario is None or scenario.error:
        raise HTTPException(
            404, f"no scenario {scenario_name!r} in the scenarios folder to advise from"
        )
    device = None if jobs.real_devices else "meta"
    try:
        result = advise(scenario.path, variant=name, device=device)
    except MemprofError as exc:  # the file changed since the run, say: no server paths
        raise HTTPException(422, str(exc).replace(str(scenario.path), scenario.id)) from None
    result["path"] = scenario.id
    with _LOCK:
        store = _store(request)
        store[(run_id, name)] = result
        while len(store) > _MAX_KEPT:
            store.pop(next(iter(store)))
    return result
