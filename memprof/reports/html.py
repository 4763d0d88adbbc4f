"""The HTML reporter: one self-contained page per report, readable with no network.

Plotly.js comes from the installed plotly package and is inlined with the charts' data, the
stylesheet and the table script, so the file opens anywhere. The dashboard (web/) renders its
run page from the same templates (`templates/_macros.html`) and the same figures
(memprof/reports/charts.py), so both look alike.

Example::

    from memprof.reports.html import render_html
    Path("run.html").write_text(render_html(report), encoding="utf-8")
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from memprof import __version__
from memprof.errors import InvalidInput
from memprof.reports import charts
from memprof.reports.reduce import TimelineArrays, reduce_timeline
from memprof.reports.store import require_report

TEMPLATES_DIR = Path(__file__).with_name("templates")
OFFLINE_MAX_POINTS = 4000  # per variant: a few hundred KB of JSON, smooth in any browser


def render_html(report: dict[str, Any], *, max_points: int = OFFLINE_MAX_POINTS) -> str:
    """Render a report (docs/report-format.md) as one HTML page with everything inlined."""
    report = require_report(report)
    variants = []
    for i, variant in enumerate(report.get("variants") or []):
        try:
            arrays = TimelineArrays.from_columns(variant.get("timeline"))
        except (TypeError, ValueError) as exc:
            raise InvalidInput(f"variant {variant.get('name')!r}: {exc}") from None
        series = reduce_timeline(arrays, max_points=max_points) if arrays.n else None
        variants.append(variant_view(report, variant, series, index=i))
    env = template_environment()
    return env.get_template("report.html").render(
        **run_view(report),
        variants=variants,
        version=__version__,
        css=shared_asset("report.css"),
        js=shared_asset("report.js"),
        plotly_js=plotly_js_path().read_text(encoding="utf-8").replace("</script", "<\\/script"),
    )


def run_view(report: dict[str, Any]) -> dict[str, Any]:
    """What the top of a run page shows: scenario, environment, variant cards, peak chart."""
    env = report.get("environment") or {}
    return {
        "run_id": report.get("run_id", ""),
        "created_at": report.get("created_at", ""),
        "status": report.get("status", "ok"),
        "scenario": report.get("scenario") or {"name": report.get("run_id", "run")},
        "environment": [(k, env[k]) for k in ("device", "backend", "allocator") if env.get(k)],
        "baseline": charts.baseline_variant(report),
        "cards": charts.variant_summaries(report),
        "peak_fig": charts.peak_figure(report),
    }


def variant_view(
    report: dict[str, Any],
    variant: dict[str, Any],
    series: dict[str, Any] | None,
    *,
    index: int = 0,
    x: str = "index",
    marks: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """Figures and tables for one variant; `series` is its reduced timeline (None if empty).
    marks: its warnings on the timeline (charts.warning_marks); by default found from the
    variant's own timeline columns."""
    if marks is None:
        columns = variant.get("timeline") or {}
        marks = charts.warning_marks(
            variant, columns.get("time_s") or [], columns.get("allocated") or []
        )
    live = (variant.get("peak") or {}).get("live") or []
    by_category = (variant.get("peak") or {}).get("by_category") or {}
    return {
        "id": f"v{index}-" + re.sub(r"[^A-Za-z0-9_-]+", "-", str(variant.get("name", ""))),
        "name": variant.get("name", f"variant {index}"),
        "status": variant.get("status", "ok"),
        "timeline_fig": (
            charts.timeline_figure(
                series,
                phases=variant.get("phases") or [],
                x=x,
                warnings=marks,
            )
            if series
            else None
        ),
        "timeline_note": timeline_note(series),
        "has_live": bool(live or by_category),
        "by_category_fig": charts.live_by_category_figure(variant),
        "by_tensor_fig": charts.live_by_tensor_figure(variant),
        "warnings": charts.warnings_of(variant),
        "ops": charts.ops_table(variant),
        "live": charts.live_table(variant),
        "expectations": charts.expectations_table(variant),
    }


def timeline_note(series: dict[str, Any] | None) -> str:
    """What the timeline shows: every event, or which of them."""
    if not series:
        return "No allocator events were recorded."
    shown = len(series["index"])
    window = series["end"] - series["start"] + 1
    how = (
        "the lowest and highest allocated and reserved bytes of each stretch of events, "
        "with the exact peak kept."
    )
    if window < series["total_events"]:
        where = f"Events {series['start']:,} to {series['end']:,} of {series['total_events']:,}"
        return f"{where}: {shown:,} of them shown, {how}" if series["reduced"] else f"{where}."
    if series["reduced"]:
        return f"{shown:,} of {window:,} events shown: {how}"
    return "1 event." if window == 1 else f"All {window:,} events."


def template_environment(extra_dirs: Iterable[str | Path] = ()):
    """A Jinja environment over `extra_dirs` first, then the shared report templates."""
    import jinja2

    loaders = [jinja2.FileSystemLoader(str(d)) for d in extra_dirs]
    loaders.append(jinja2.FileSystemLoader(str(TEMPLATES_DIR)))
    env = jinja2.Environment(
        loader=jinja2.ChoiceLoader(loaders),
        autoescape=jinja2.select_autoescape(["html"]),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    # figures are large: compact JSON, keys in the order they were built
    env.policies["json.dumps_kwargs"] = {"sort_keys": False, "separators": (",", ":")}
    return env


def shared_asset(name: str) -> str:
    """The text of a stylesheet or script shared by the dashboard and the offline report."""
    return (TEMPLATES_DIR / name).read_text(encoding="utf-8")


def plotly_js_path() -> Path:
    """plotly.min.js as shipped inside the installed plotly package (no CDN)."""
    spec = importlib.util.find_spec("plotly")
    if spec is None or not spec.submodule_search_locations:
        raise InvalidInput("the plotly package is not installed; `pip install plotly`")
    path = Path(next(iter(spec.submodule_search_locations))) / "package_data" / "plotly.min.js"
    if not path.is_file():
        raise InvalidInput(f"plotly.min.js is missing from the plotly package ({path})")
    return path
