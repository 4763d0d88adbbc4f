"""The HTML pages: runs, one run, compare, and running a scenario."""

from __future__ import annotations

from typing import Annotated, Literal
from urllib.parse import urlencode

from fastapi import APIRouter, HTTPException, Query, Request
from fastapi.responses import HTMLResponse

from memprof.reports import charts
from memprof.reports.html import run_view, timeline_note, variant_view
from memprof.units import format_bytes
from web.compare import align_by_step, node_deltas
from web.deps import CacheDep, JobsDep, ScenariosDep, load_run, load_variant, reduced
from web.run_history import HistoryUnreadable, past_runs

router = APIRouter(include_in_schema=False)

PAGE_POINTS = 2000  # samples per timeline on a page; zooming fetches more detail
XAxis = Annotated[Literal["index", "time"], Query()]
CompareAxis = Annotated[Literal["step", "index", "time"], Query()]


def _render(request: Request, name: str, **context) -> HTMLResponse:
    return request.app.state.templates.TemplateResponse(request, name, context)


@router.get("/", response_class=HTMLResponse)
def runs_page(request: Request, cache: CacheDep, scenario: str | None = None) -> HTMLResponse:
    runs = cache.summaries()
    scenarios = sorted({r["scenario"] for r in runs if r["scenario"]})
    return _render(
        request,
        "runs.html",
        page="runs",
        charts=False,
        runs=runs,
        scenarios=scenarios,
        selected=scenario,
        format_bytes=format_bytes,
    )


@router.get("/runs/{run_id}", response_class=HTMLResponse)
def run_page(
    request: Request,
    run_id: str,
    cache: CacheDep,
    variant: str | None = None,
    x: XAxis = "index",
) -> HTMLResponse:
    run = load_run(cache, run_id)
    report = run.report
    names = [str(v.get("name")) for v in report["variants"]]
    if variant is not None and variant not in names:
        raise HTTPException(404, f"run {run_id!r} has no variant {variant!r}")
    selected = variant or (names[0] if names else None)
    view = None
    if selected is not None:
        index = names.index(selected)
        arrays = load_variant(run, selected)
        series = reduced(arrays, None, None, PAGE_POINTS)
        entry = report["variants"][index]
        marks = charts.warning_marks(entry, arrays.time_s, arrays.allocated)
        view = variant_view(report, entry, series, index=index, x=x, marks=marks)
    baseline = charts.baseline_variant(report)
    scenario = (report.get("scenario") or {}).get("name")
    try:
        past, history_error = past_runs(cache.runs_dir, scenario, run_id), None
    except HistoryUnreadable as exc:  # the rest of the page does not need it
        past, history_error = [], str(exc)
    other = next((n for n in names if n != selected), None)
    compare_url = None
    if selected and other:
        a, b = (other, selected) if selected != baseline else (selected, other)
        compare_url = "/compare?" + urlencode({"a": f"{run_id}:{a}", "b": f"{run_id}:{b}"})
    return _render(
        request,
        "run.html",
        page="run",
        **run_view(report),
        names=names,
        variant_links={
            n: "?" + urlencode({"variant": n, **({"x": x} if x != "index" else {})}) for n in names
        },
        selected=selected,
        x=x,
        v=view,
        warning_counts={str(v.get("name")): len(charts.warnings_of(v)) for v in report["variants"]},
        compare_url=compare_url,
        history_fig=charts.history_figure(past, current_run_id=run_id) if past else None,
        history_runs=len({r["run_id"] for r in past}),
        in_history=any(r["current"] for r in past),
        history_error=history_error,
    )


@router.get("/compare", response_class=HTMLResponse)
def compare_page(
    request: Request,
    cache: CacheDep,
    a: Annotated[str | None, Query(max_length=400)] = None,
    b: Annotated[str | None, Query(max_length=400)] = None,
    x: CompareAxis = "step",
) -> HTMLResponse:
    runs = [r for r in cache.summaries() if r["variants"]]
    options = [(r, f"{r['run_id']}:{v['name']}", v["name"]) for r in runs for v in r["variants"]]
    if (a is None or b is None) and runs:  # default: the newest run, baseline vs the next one
        first = runs[0]
        names = [v["name"] for v in first["variants"]]
        base = first["baseline_variant"] or names[0]
        other = next((n for n in names if n != base), base)
        a = a or f"{first['run_id']}:{base}"
        b = b or f"{first['run_id']}:{other}"
    same_run = bool(a and b) and a.partition(":")[0] == b.partition(":")[0]
    sides = []
    for ref in (a, b):
        if ref is None:
            continue
        run_id, sep, name = ref.partition(":")
        if not sep:
            raise HTTPException(422, f"{ref!r}: expected RUN_ID:VARIANT")
        run = load_run(cache, run_id)
        arrays = load_variant(run, name)
        series = reduced(arrays, None, None, PAGE_POINTS)
        label = name if same_run else f"{name} ({run_id})"
        sides.append(
            {
                "ref": ref,
                "run": run,
                "variant": run.variant(name),
                "series": series,
                "arrays": arrays,
                "label": label,
                "name": name,
                "note": timeline_note(series),
            }
        )
    context = {"page": "compare", "options": options, "a": a, "b": b, "x": x, "sides": sides}
    if len(sides) == 2:
        va, vb = sides[0]["variant"], sides[1]["variant"]
        if sides[0]["label"] == sides[1]["label"]:
            sides[0]["label"] += " (A)"
            sides[1]["label"] += " (B)"
        with_events = [s for s in sides if s["series"]]
        drawn = [(s["label"], s["series"]) for s in with_events]
        aligned = (
            align_by_step([(s["arrays"], s["series"]) for s in with_events])
            if x == "step" and drawn
            else None
        )
        peak_a, peak_b = va.get("peak_allocated_bytes") or 0, vb.get("peak_allocated_bytes") or 0
        context.update(
            overlay_fig=charts.overlay_figure(drawn, x=x, aligned=aligned) if drawn else None,
            peak_a=peak_a,
            peak_b=peak_b,
            verdict=charts.saving_text(peak_b, peak_a) if peak_a else "",
            deltas=node_deltas(va, vb),
            format_bytes=format_bytes,
        )
    return _render(request, "compare.html", **context)


@router.get("/scenarios", response_class=HTMLResponse)
def scenarios_page(request: Request, scenarios: ScenariosDep, jobs: JobsDep) -> HTMLResponse:
    from web.scenario_check import ALLOCATORS, DEVICES, ScenarioCheck, ScenarioChecks

    checks = getattr(request.app.state, "scenario_checks", None)
    if checks is None:
        checks = request.app.state.scenario_checks = ScenarioChecks()
    listed = scenarios.list()
    results = {
        s.id: (checks.check(s.path) if not s.error else ScenarioCheck("invalid", (s.error,)))
        for s in listed
    }
    return _render(
        request,
        "scenarios.html",
        page="scenarios",
        charts=False,
        scenarios=listed,
        checks=results,
        devices=DEVICES,
        allocators=ALLOCATORS,
        folder=scenarios.root,
        jobs=jobs.list()[:10],
    )
