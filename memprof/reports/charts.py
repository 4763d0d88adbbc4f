"""Charts and tables of a report, shared by the dashboard (web/) and the offline HTML report.

Figures are plain Plotly figure dicts (`{"data": [...], "layout": {...}}`) that plotly.js draws
as they are, so building them needs no plotly import and they serialise with `json`. Tables are
`Table`s of (text, sort key) cells that both HTML front ends render with one macro.

The timeline takes a reduced series (see memprof/reports/reduce.py), never the raw events.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from memprof.reports.reduce import UNTRACKED
from memprof.reports.saving import row_saving_text, saving_text
from memprof.units import format_bytes, format_seconds

CATEGORY_COLORS = {
    "input": "#4e79a7",
    "parameter": "#59a14f",
    "optimizer_state": "#b07aa1",
    "gradient": "#f28e2b",
    "saved_for_backward": "#edc948",
    "activation": "#76b7b2",
    "temporary": "#ff9da7",
    "other": "#9c755f",
    UNTRACKED: "#bab0ac",
}
PHASE_COLORS = {
    "setup": "#9ca3af",
    "forward": "#3b82f6",
    "backward": "#f59e0b",
    "optimizer": "#10b981",
    "release": "#a855f7",
}
ALLOCATED_COLOR = "#1f2937"
RESERVED_COLOR = "#6b7280"
PEAK_COLOR = "#d62728"
WARNING_COLOR = "#f59e0b"
SERIES_COLORS = ("#2563eb", "#dc2626", "#059669", "#7c3aed")  # overlays in the compare view
HISTORY_COLORS = (  # one per variant on the history chart
    "#2563eb",
    "#059669",
    "#d97706",
    "#7c3aed",
    "#0891b2",
    "#db2777",
    "#65a30d",
    "#4b5563",
)
FEW_POINTS = 200  # draw the samples as dots too, or a one-event timeline shows nothing
FONT = "system-ui, -apple-system, 'Segoe UI', Roboto, 'Helvetica Neue', Arial, sans-serif"

# --------------------------------------------------------------------------------------------
# Figures


def warning_marks(
    variant: dict[str, Any], time_s: Sequence[float], allocated: Sequence[int]
) -> list[dict[str, Any]]:
    """Where each warning (stale read, in-place clone) goes on the timeline: at the first event
    of its node in its iteration (found by the node's start time within its phase), with the
    allocated bytes there. time_s and allocated: the variant's whole timeline columns."""
    import numpy as np

    n = len(time_s)
    if not n:
        return []
    times = np.asarray(time_s, dtype=np.float64)
    spans = {
        (p.get("name"), p.get("iteration")): (p.get("start_index") or 0, p.get("end_index") or n)
        for p in variant.get("phases") or []
    }
    starts = {}
    for op in variant.get("ops") or []:
        key = (op.get("node"), op.get("iteration"))
        if op.get("phase") == "forward" and key not in starts and op.get("start_s") is not None:
            starts[key] = op["start_s"]
    marks = []
    for w in warnings_of(variant):
        key = (w.get("node"), w.get("iteration"))
        lo, hi = spans.get(("forward", w.get("iteration")), (0, n))
        hi = min(max(hi, lo + 1), n)
        start = starts.get(key)
        if start is None:
            i = lo
        else:
            i = lo + int(np.searchsorted(times[lo:hi], start, side="left"))
        i = min(max(i, 0), n - 1)
        marks.append(
            {
                "index": i,
                "time_s": float(times[i]),
                "allocated": int(allocated[i]),
                "kind": w.get("kind") or "warning",
                "node": w.get("node"),
                "message": w.get("message") or "",
            }
        )
    return marks


def timeline_figure(
    series: dict[str, Any],
    *,
    phases: Iterable[dict[str, Any]] = (),
    x: str = "index",
    title: str | None = None,
    warnings: Sequence[dict[str, Any]] = (),
) -> dict[str, Any]:
    """Allocated bytes stacked by category, the allocated and reserved totals, the peak marked
    and phases (forward, backward, optimizer) as bands. `x` is "index" (event index) or "time".

    Hovering a point shows the event there: action, bytes, tensor, node and op. Lines are
    steps (memory stays put between events); on the index axis the last step is drawn to
    `end + 1`, so a timeline of one event still shows its bytes. `warnings` (warning_marks)
    inside the window are marked at their node, their message on hover.
    """
    xs = series["index"] if x == "index" else series["time_s"]
    tail = 1 if x == "index" else 0  # the repeated last sample that closes the last step

    def closed(values: list[Any]) -> list[Any]:
        return values + values[-1:] * tail

    xs_drawn = xs + [series["end"] + 1] * tail
    data: list[dict[str, Any]] = []
    for category, ys in series["categories"].items():
        color = CATEGORY_COLORS.get(category, CATEGORY_COLORS["other"])
        data.append(
            {
                "type": "scatter",
                "mode": "lines",
                "name": category,
                "x": xs_drawn,
                "y": closed(ys),
                "stackgroup": "live",
                "line": {"width": 0.5, "color": color, "shape": "hv"},
                "fillcolor": _rgba(color, 0.6),
                "customdata": closed([format_bytes(v) for v in ys]),
                "hovertemplate": f"{category}: %{{customdata}}<extra></extra>",
            }
        )
    events = [
        [
            format_bytes(a),
            act or "",
            format_bytes(b),
            tensor or "-",
            node or "-",
            op or "-",
            phase or "-",
            i,
        ]
        for a, act, b, tensor, node, op, phase, i in zip(
            series["allocated"],
            series["action"],
            series["bytes"],
            series["tensor"],
            series["node"],
            series["op"],
            series["phase"],
            series["index"],
            strict=True,
        )
    ]
    data.append(
        {
            "type": "scatter",
            "name": "allocated",
            "x": xs_drawn,
            "y": closed(series["allocated"]),
            "mode": "lines+markers" if len(xs) <= FEW_POINTS else "lines",
            "marker": {"size": [5] * len(xs) + [0] * tail, "color": ALLOCATED_COLOR},
            "line": {"width": 1.6, "color": ALLOCATED_COLOR, "shape": "hv"},
            "customdata": closed(events),
            "hovertemplate": (
                "<b>allocated %{customdata[0]}</b><br>"
                "%{customdata[1]} %{customdata[2]} · tensor %{customdata[3]}<br>"
                "node %{customdata[4]} (%{customdata[5]}) · %{customdata[6]} · "
                "event %{customdata[7]}<extra></extra>"
            ),
        }
    )
    data.append(
        {
            "type": "scatter",
            "mode": "lines",
            "name": "reserved",
            "x": xs_drawn,
            "y": closed(series["reserved"]),
            "line": {"width": 1.2, "color": RESERVED_COLOR, "dash": "dash", "shape": "hv"},
            "customdata": closed([format_bytes(v) for v in series["reserved"]]),
            "hovertemplate": "reserved %{customdata}<extra></extra>",
        }
    )

    annotations: list[dict[str, Any]] = []
    peak = series["window_peak"]
    peak_x = peak["event_index"] if x == "index" else peak["time_s"]
    where = " · ".join(p for p in (peak["node"], peak["op"]) if p)
    data.append(
        {
            "type": "scatter",
            "mode": "markers",
            "name": "peak",
            "x": [peak_x],
            "y": [peak["allocated_bytes"]],
            "marker": {
                "size": 11,
                "color": PEAK_COLOR,
                "symbol": "diamond",
                "line": {"width": 1, "color": "#ffffff"},
            },
            "customdata": [
                [format_bytes(peak["allocated_bytes"]), where or "-", peak["event_index"]]
            ],
            "hovertemplate": (
                "<b>peak %{customdata[0]}</b> at %{customdata[1]}, event %{customdata[2]}"
                "<extra></extra>"
            ),
        }
    )
    is_global = peak["event_index"] == series["peak"]["event_index"]
    annotations.append(
        {
            "x": peak_x,
            "y": peak["allocated_bytes"],
            "text": f"{'peak' if is_global else 'window peak'} "
            f"{format_bytes(peak['allocated_bytes'])}" + (f"<br>{where}" if where else ""),
            "showarrow": True,
            "arrowhead": 2,
            "arrowcolor": PEAK_COLOR,
            "ax": 40,
            "ay": -30,
            "font": {"size": 11, "color": PEAK_COLOR},
            "bgcolor": "rgba(255,255,255,0.85)",
            "align": "left",
        }
    )

    shown = [w for w in warnings if series["start"] <= w["index"] <= series["end"]]
    if shown:
        data.append(
            {
                "type": "scatter",
                "mode": "markers",
                "name": "warnings",
                "x": [w["index"] if x == "index" else w["time_s"] for w in shown],
                "y": [w["allocated"] for w in shown],
                "marker": {
                    "size": 12,
                    "color": WARNING_COLOR,
                    "symbol": "triangle-down",
                    "line": {"width": 1, "color": "#ffffff"},
                },
                "customdata": [
                    [w["kind"].replace("_", " "), w["node"] or "-", w["message"]] for w in shown
                ],
                "hovertemplate": (
                    "<b>%{customdata[0]}</b> at node %{customdata[1]}<br>%{customdata[2]}"
                    "<extra></extra>"
                ),
            }
        )

    shapes, labels = _phase_bands(series, list(phases), x)
    annotations.extend(labels)
    top = max(peak["allocated_bytes"], max(series["reserved"]))
    layout = _base_layout(title, height=460)
    layout.update(
        {
            "hovermode": "x unified",
            "xaxis": event_axis(x, series["end"] - series["start"] + 1),
            "yaxis": {**byte_axis(top), "title": {"text": "bytes"}},
            "shapes": shapes,
            "annotations": annotations,
            "margin": {"l": 70, "r": 20, "t": 28, "b": 40},
            "legend": {
                "orientation": "h",
                "x": 0,
                "y": -0.14,
                "yanchor": "top",
                "traceorder": "normal",
            },
            "meta": {
                "x": x,
                "start": series["start"],
                "end": series["end"],
                "total_events": series["total_events"],
                "reduced": series["reduced"],
                "points": len(xs),
            },
        }
    )
    return {"data": data, "layout": layout}


def overlay_figure(
    named_series: Sequence[tuple[str, dict[str, Any]]],
    *,
    x: str = "index",
    aligned: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Allocated bytes of several runs or variants on one chart, each with its peak marked.

    x: "index", "time", or "step" with `aligned` (web.compare.align_by_step): the series lined
    up by phase and node, each step of the programs one unit wide. Every series is held at its
    last value to the end of its last step, so a variant of one event is drawn as a line.
    """
    data: list[dict[str, Any]] = []
    annotations = []
    top = 0
    for i, (label, series) in enumerate(named_series):
        color = SERIES_COLORS[i % len(SERIES_COLORS)]
        ys = list(series["allocated"])
        hover_rows = list(
            zip(series["allocated"], series["node"], series["op"], series["tensor"], strict=True)
        )
        if x == "step" and aligned is not None:
            xs = list(aligned["xs"][i]) + [aligned["ends"][i]]
        else:
            xs = list(series["index"] if x == "index" else series["time_s"])
            if len(xs) == 1:  # one event: hold it over one unit so it shows as a line
                xs.append(xs[0] + (1 if x == "index" else 1e-9))
        if len(xs) > len(ys):
            ys.append(ys[-1])
            hover_rows.append(hover_rows[-1])
        data.append(
            {
                "type": "scatter",
                "mode": "lines",
                "name": label,
                "x": xs,
                "y": ys,
                "line": {"width": 1.6, "color": color, "shape": "hv"},
                "customdata": [
                    [format_bytes(a), node or "-", op or "-", tensor or "-"]
                    for a, node, op, tensor in hover_rows
                ],
                "hovertemplate": (
                    f"{label}: %{{customdata[0]}} · %{{customdata[1]}} (%{{customdata[2]}}) "
                    "· %{customdata[3]}<extra></extra>"
                ),
            }
        )
        peak = series["peak"]
        if x == "step" and aligned is not None:
            peak_x = aligned["peaks"][i]
        else:
            peak_x = peak["event_index"] if x == "index" else peak["time_s"]
        top = max(top, peak["allocated_bytes"])
        data.append(
            {
                "type": "scatter",
                "mode": "markers",
                "name": f"{label} peak",
                "x": [peak_x],
                "y": [peak["allocated_bytes"]],
                "marker": {
                    "size": 10,
                    "color": color,
                    "symbol": "diamond",
                    "line": {"width": 1, "color": "#ffffff"},
                },
                "showlegend": False,
                "hovertemplate": f"{label} peak {format_bytes(peak['allocated_bytes'])}"
                "<extra></extra>",
            }
        )
        annotations.append(
            {
                "x": peak_x,
                "y": peak["allocated_bytes"],
                "text": f"{label}: {format_bytes(peak['allocated_bytes'])}",
                "showarrow": True,
                "arrowhead": 2,
                "arrowcolor": color,
                "ax": 30 if i % 2 == 0 else -30,
                "ay": -28 - 18 * i,
                "font": {"size": 11, "color": color},
                "bgcolor": "rgba(255,255,255,0.85)",
            }
        )
    layout = _base_layout(None, height=420)
    layout.update(
        {
            "hovermode": "x unified",
            # every series, not only the last one drawn, decides the ticks
            "xaxis": step_axis(aligned)
            if x == "step" and aligned is not None
            else event_axis(x, max(s["end"] - s["start"] + 1 for _, s in named_series)),
            "yaxis": {**byte_axis(top), "title": {"text": "allocated bytes"}},
            "annotations": annotations,
            "legend": {"orientation": "h", "y": 1.02, "yanchor": "bottom", "x": 0},
        }
    )
    return {"data": data, "layout": layout}


def peak_figure(report: dict[str, Any]) -> dict[str, Any]:
    """Peak allocated and reserved bytes per variant, side by side, each labelled with its
    saving against the baseline variant in bytes and percent."""
    variants = report.get("variants") or []
    baseline = baseline_variant(report)
    names = [_variant_label(v) for v in variants]
    allocated = [v.get("peak_allocated_bytes") or 0 for v in variants]
    reserved = [v.get("peak_reserved_bytes") or 0 for v in variants]
    colors = ["#9ca3af" if v.get("name") == baseline else "#2563eb" for v in variants]
    savings = [variant_saving(report, v) for v in variants]
    data = [
        {
            "type": "bar",
            "name": "peak allocated",
            "x": names,
            "y": allocated,
            "marker": {"color": colors},
            "text": [format_bytes(b) for b in allocated],
            "textposition": "outside",
            "cliponaxis": False,
            "customdata": savings,
            "hovertemplate": "%{x}<br>peak allocated %{text}<br>%{customdata}<extra></extra>",
        },
        {
            "type": "bar",
            "name": "peak reserved",
            "x": names,
            "y": reserved,
            "marker": {
                "color": "rgba(107,114,128,0.35)",
                "line": {"color": RESERVED_COLOR, "width": 1},
            },
            "text": [format_bytes(b) for b in reserved],
            "textposition": "outside",
            "cliponaxis": False,
            "hovertemplate": "%{x}<br>peak reserved %{text}<extra></extra>",
        },
    ]
    annotations = [
        {
            "x": name,
            "y": 0,
            "yref": "y",
            "text": f"<b>{text}</b>",
            "showarrow": False,
            "yshift": -36,
            "font": {"size": 12, "color": _saving_color(text)},
        }
        for name, text in zip(names, savings, strict=True)
        if text
    ]
    layout = _base_layout(None, height=360)
    layout.update(
        {
            "barmode": "group",
            "bargap": 0.35,
            "margin": {"l": 70, "r": 20, "t": 30, "b": 70},
            "yaxis": {**byte_axis(max([*allocated, *reserved, 1]) * 1.12)},
            # a lone pair of bars would fill the chart: leave room around few variants
            "xaxis": {
                "tickfont": {"size": 12},
                **({"range": [-0.9, len(names) - 0.1]} if len(names) <= 2 else {}),
            },
            "annotations": annotations,
            "legend": {"orientation": "h", "y": 1.04, "yanchor": "bottom", "x": 0},
        }
    )
    return {"data": data, "layout": layout}


def history_figure(
    rows: Sequence[dict[str, Any]], *, current_run_id: str | None = None
) -> dict[str, Any]:
    """Peak allocated bytes over past runs of one scenario: one line per variant, runs oldest
    to newest along x, the run `current_run_id` ringed. A variant that errored or ran out of
    memory is drawn as a cross (its peak is up to the failure).

    `rows` are memprof.history.query's dicts (oldest first): run_id, created_at, variant,
    peak_allocated_bytes, status, git_commit, source.
    """
    runs = list(dict.fromkeys(r["run_id"] for r in rows))
    position = {run_id: i for i, run_id in enumerate(runs)}
    created = {r["run_id"]: str(r.get("created_at") or "") for r in rows}
    variants = list(dict.fromkeys(r["variant"] for r in rows))
    data: list[dict[str, Any]] = []
    for i, name in enumerate(variants):
        mine = [r for r in rows if r["variant"] == name]
        color = HISTORY_COLORS[i % len(HISTORY_COLORS)]
        data.append(
            {
                "type": "scatter",
                "mode": "lines+markers",
                "name": name,
                "x": [position[r["run_id"]] for r in mine],
                "y": [r.get("peak_allocated_bytes") or 0 for r in mine],
                "line": {"width": 1.8, "color": color},
                "marker": {
                    "size": 7,
                    "color": color,
                    "symbol": ["circle" if r.get("status", "ok") == "ok" else "x" for r in mine],
                },
                "customdata": [_history_hover(r) for r in mine],
                "hovertemplate": (
                    f"<b>{name}</b> %{{customdata[0]}}<br>%{{customdata[1]}} · commit "
                    "%{customdata[2]}<br>%{customdata[3]} · from %{customdata[4]}<br>"
                    "%{customdata[5]}<extra></extra>"
                ),
            }
        )
    shapes = []
    current = [r for r in rows if r["run_id"] == current_run_id]
    if current:
        x = position[current_run_id]
        data.append(
            {
                "type": "scatter",
                "mode": "markers",
                "name": "this run",
                "x": [x] * len(current),
                "y": [r.get("peak_allocated_bytes") or 0 for r in current],
                "marker": {
                    "size": 15,
                    "symbol": "circle-open",
                    "color": PEAK_COLOR,
                    "line": {"width": 2.5, "color": PEAK_COLOR},
                },
                "customdata": [
                    [r["variant"], format_bytes(r.get("peak_allocated_bytes") or 0)]
                    for r in current
                ],
                "hovertemplate": "this run: %{customdata[0]} %{customdata[1]}<extra></extra>",
            }
        )
        shapes.append(
            {
                "type": "line",
                "xref": "x",
                "yref": "paper",
                "x0": x,
                "x1": x,
                "y0": 0,
                "y1": 1,
                "line": {"color": PEAK_COLOR, "width": 1, "dash": "dot"},
                "layer": "below",
            }
        )
    step = max(1, math.ceil(len(runs) / 10))  # about ten labelled runs at most
    ticks = list(range(0, len(runs), step))
    top = max([r.get("peak_allocated_bytes") or 0 for r in rows] or [1])
    layout = _base_layout(None, height=340)
    layout.update(
        {
            "hovermode": "closest",
            "margin": {"l": 70, "r": 20, "t": 30, "b": 60},
            "xaxis": {
                "title": {"text": "runs, oldest to newest"},
                "tickvals": ticks,
                "ticktext": [_short_date(created[runs[i]]) for i in ticks],
                "range": [-0.5, max(len(runs) - 0.5, 0.5)],
                "showgrid": False,
                "zeroline": False,
            },
            "yaxis": {**byte_axis(top * 1.08), "title": {"text": "peak allocated"}},
            "shapes": shapes,
            "legend": {"orientation": "h", "y": 1.02, "yanchor": "bottom", "x": 0},
            "meta": {"runs": len(runs), "variants": variants, "current": current_run_id},
        }
    )
    return {"data": data, "layout": layout}


def _history_hover(row: dict[str, Any]) -> list[str]:
    return [
        format_bytes(row.get("peak_allocated_bytes") or 0),
        str(row.get("created_at") or "").replace("T", " ").replace("Z", " UTC"),
        (row.get("git_commit") or "-")[:8],
        row.get("status") or "ok",
        row.get("source") or "-",
        row["run_id"],
    ]


def _short_date(created_at: str) -> str:
    """``11-21 05:15`` from ``2026-11-21T05:15:00Z`` (the axis has little room)."""
    date, _, time = created_at.partition("T")
    return f"{date[5:]} {time[:5]}".strip() if time else created_at


def live_by_category_figure(variant: dict[str, Any]) -> dict[str, Any]:
    """What is live at the peak, per category (largest first)."""
    by_category = (variant.get("peak") or {}).get("by_category") or {}
    items = sorted(by_category.items(), key=lambda kv: -kv[1])
    labels = [c for c, _ in items]
    total = sum(b for _, b in items) or 1
    data = [
        {
            "type": "bar",
            "orientation": "h",
            "x": [b for _, b in items],
            "y": [c for c, _ in items],
            "marker": {
                "color": [CATEGORY_COLORS.get(c, CATEGORY_COLORS["other"]) for c, _ in items]
            },
            "text": [f"{format_bytes(b)} ({100 * b / total:.1f}%)" for _, b in items],
            "textposition": "auto",
            "hovertemplate": "%{y}: %{text}<extra></extra>",
        }
    ]
    layout = _base_layout(None, height=max(200, 60 + 34 * len(items)))
    layout.update(
        {
            "showlegend": False,
            "margin": {"l": _label_margin(labels), "r": 20, "t": 10, "b": 40},
            "xaxis": byte_axis(max([b for _, b in items] or [1]) * 1.05),
            "yaxis": {"autorange": "reversed"},
        }
    )
    return {"data": data, "layout": layout}


def live_by_tensor_figure(variant: dict[str, Any], top: int = 15) -> dict[str, Any]:
    """The largest storages live at the peak, coloured by category."""
    live = ((variant.get("peak") or {}).get("live") or [])[:top]
    labels = []
    for item in live:
        label = item.get("tensor") or f"<{item.get('op') or item.get('node') or 'op'} output>"
        while label in labels:
            label += " "  # plotly merges equal category labels
        labels.append(label)
    data = [
        {
            "type": "bar",
            "orientation": "h",
            "x": [item.get("bytes", 0) for item in live],
            "y": labels,
            "marker": {
                "color": [CATEGORY_COLORS.get(item.get("category"), "#9c755f") for item in live]
            },
            "text": [format_bytes(item.get("bytes", 0)) for item in live],
            "textposition": "auto",
            "customdata": [
                [item.get("category") or "-", item.get("node") or "-", item.get("op") or "-"]
                for item in live
            ],
            "hovertemplate": (
                "%{y}: %{text}<br>%{customdata[0]} · node %{customdata[1]} "
                "(%{customdata[2]})<extra></extra>"
            ),
        }
    ]
    layout = _base_layout(None, height=max(200, 60 + 26 * len(live)))
    layout.update(
        {
            "showlegend": False,
            "margin": {"l": _label_margin(labels), "r": 20, "t": 10, "b": 40},
            "xaxis": byte_axis(max([item.get("bytes", 0) for item in live] or [1]) * 1.05),
            "yaxis": {"autorange": "reversed", "type": "category"},
        }
    )
    return {"data": data, "layout": layout}


def event_axis(x: str, events: int) -> dict[str, Any]:
    """The x axis of a timeline: event index or time; a tick per event when there are few."""
    return {
        "title": {"text": "event index" if x == "index" else "time (s)"},
        "showgrid": False,
        "zeroline": False,
        **({"dtick": 1} if x == "index" and events <= 10 else {}),
    }


def step_axis(aligned: dict[str, Any], max_ticks: int = 40) -> dict[str, Any]:
    """The x axis of timelines aligned by step: one labelled tick per node (thinned when many)."""
    vals, texts = aligned["tickvals"], aligned["ticktext"]
    every = max(1, -(-len(vals) // max_ticks))
    return {
        "title": {"text": "program steps (phase, node), aligned"},
        "showgrid": False,
        "zeroline": False,
        "tickmode": "array",
        "tickvals": vals[::every],
        "ticktext": texts[::every],
        "tickangle": -45 if len(vals) > 8 else 0,
    }


def byte_axis(top: float) -> dict[str, Any]:
    """Axis ticks in binary units (`64 MiB`), about five of them from 0 to `top`."""
    top = max(float(top), 1.0)
    unit, scale = "B", 1
    for name, s in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if top >= s:
            unit, scale = name, s
            break
    raw = top / scale / 5
    magnitude = 10 ** math.floor(math.log10(raw)) if raw > 0 else 1
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    if unit == "B":
        step = max(1, round(step))
    ticks = []
    value = 0.0
    while value <= top / scale * 1.0001 + step:
        ticks.append(value)
        value += step
    return {
        "tickvals": [t * scale for t in ticks],
        "ticktext": [f"{t:g} {unit}" if t else "0" for t in ticks],
        "rangemode": "tozero",
        "gridcolor": "#eceff3",
        "zeroline": False,
    }


def _phase_bands(
    series: dict[str, Any], phases: list[dict[str, Any]], x: str
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    if not phases or not series["index"]:
        return [], []
    if x == "index":
        lo, hi = series["start"], series["end"]
        spans = [(p, p.get("start_index"), p.get("end_index")) for p in phases]
    else:
        lo, hi = series["time_s"][0], series["time_s"][-1]
        spans = [(p, p.get("start_s"), p.get("end_s")) for p in phases]
    width = (hi - lo) or 1
    iterations = {p.get("iteration") for p in phases} - {None}
    shapes, labels = [], []
    for phase, x0, x1 in spans:  # end_index is one past the phase's last event
        if x0 is None or x1 is None or x1 <= x0 or x1 < lo or x0 > hi:
            continue
        x0, x1 = max(x0, lo), min(x1, hi)
        name = phase.get("name") or "phase"
        color = PHASE_COLORS.get(name, "#9ca3af")
        shapes.append(
            {
                "type": "rect",
                "xref": "x",
                "yref": "paper",
                "x0": x0,
                "x1": x1,
                "y0": 0,
                "y1": 1,
                "fillcolor": color,
                "opacity": 0.09,
                "line": {"width": 0},
                "layer": "below",
            }
        )
        if (x1 - x0) / width >= 0.05:
            number = phase.get("iteration")
            text = name if len(iterations) <= 1 or number is None else f"{name} {number}"
            labels.append(
                {
                    "x": (x0 + x1) / 2,
                    "y": 1,
                    "xref": "x",
                    "yref": "paper",
                    "yanchor": "bottom",
                    "text": text,
                    "showarrow": False,
                    "font": {"size": 11, "color": color},
                }
            )
    return shapes, labels


def _label_margin(labels: Sequence[str]) -> int:
    """Room for horizontal bar labels (about 7 px a character at 12 px)."""
    return min(300, max(60, 12 + 7 * max((len(str(t)) for t in labels), default=0)))


def _base_layout(title: str | None, *, height: int) -> dict[str, Any]:
    layout: dict[str, Any] = {
        "height": height,
        "margin": {"l": 70, "r": 20, "t": 40, "b": 50},
        "font": {"family": FONT, "size": 12, "color": "#1f2937"},
        "paper_bgcolor": "#ffffff",
        "plot_bgcolor": "#ffffff",
        "hoverlabel": {"font": {"family": FONT, "size": 12}},
    }
    if title:
        layout["title"] = {"text": title, "x": 0, "font": {"size": 14}}
    return layout


def _rgba(hex_color: str, alpha: float) -> str:
    r, g, b = (int(hex_color[i : i + 2], 16) for i in (1, 3, 5))
    return f"rgba({r},{g},{b},{alpha})"


def _variant_label(variant: dict[str, Any]) -> str:
    name = str(variant.get("name", "?"))
    status = variant.get("status", "ok")
    return name if status == "ok" else f"{name} ({status})"


def _saving_color(text: str) -> str:  # green for a saving, red for a cost
    if text.startswith("saves"):
        return "#047857"
    if text.startswith("costs"):
        return "#b91c1c"
    return "#6b7280"


# --------------------------------------------------------------------------------------------
# Numbers shared by figures and tables


def baseline_variant(report: dict[str, Any]) -> str | None:
    """The variant others are compared against: the report's choice, else the first."""
    names = [v.get("name") for v in report.get("variants") or []]
    for candidate in (
        report.get("baseline_variant"),
        (report.get("comparison") or {}).get("baseline"),
    ):
        if candidate in names:
            return candidate
    return names[0] if names else None


def variant_saving(report: dict[str, Any], variant: dict[str, Any]) -> str:
    """The variant's saving as every screen words it (memprof.reports.saving): against the
    variant differing from it only in place, else the baseline; none for a variant (or a
    reference) that did not finish; "baseline" or "reference" for one compared with none."""
    rows = (report.get("comparison") or {}).get("rows") or []
    row = next((r for r in rows if r.get("variant") == variant.get("name")), None)
    if row is None:  # a report without comparison rows: against the baseline variant
        baseline = baseline_variant(report)
        if variant.get("name") == baseline:
            return "baseline"
        base = next((v for v in report.get("variants") or [] if v.get("name") == baseline), None)
        if base is None or not base.get("peak_allocated_bytes"):
            return ""
        if variant.get("status", "ok") != "ok":
            return f"not comparable ({variant.get('status')})"
        return saving_text(variant.get("peak_allocated_bytes") or 0, base["peak_allocated_bytes"])
    return row_saving_text(row) or ("baseline" if row.get("is_baseline") else "reference")


def warnings_of(variant: dict[str, Any]) -> list[dict[str, Any]]:
    """The variant's warnings, plus one `inplace_clone` per in-place op that paid a clone and
    has no warning of its own (older runners only put it in the op row)."""
    found = [dict(w) for w in variant.get("warnings") or []]
    cloned_nodes = {w.get("node") for w in found if w.get("kind") == "inplace_clone"}
    for op in variant.get("ops") or []:
        if op.get("inplace_cost") == "clone" and op.get("node") not in cloned_nodes:
            cloned_nodes.add(op.get("node"))
            found.append(
                {
                    "kind": "inplace_clone",
                    "node": op.get("node"),
                    "tensor": None,
                    "message": f"node {op.get('node')} ({op.get('op')}) was asked to run in "
                    f"place but had to clone its input ({format_bytes(op.get('clone_bytes') or 0)})",
                }
            )
    return found


# --------------------------------------------------------------------------------------------
# Tables


@dataclass(frozen=True)
class Column:
    label: str
    numeric: bool = False


@dataclass
class Table:
    """Rows of (text, sort key) cells; `total` is the row count before any truncation."""

    columns: list[Column]
    rows: list[list[tuple[str, Any]]] = field(default_factory=list)
    total: int = 0


def ops_table(variant: dict[str, Any], limit: int = 1000) -> Table:
    """One row per executed node: what it allocated, freed and peaked at, and in-place cost.

    Past `limit` rows it keeps the `limit` with the highest peak (in execution order): a long
    training run has hundreds of thousands of rows, and the high ones are the ones to read.
    """
    columns = [
        Column("node"),
        Column("op"),
        Column("phase"),
        Column("iter", True),
        Column("allocated", True),
        Column("freed", True),
        Column("peak", True),
        Column("time", True),
        Column("in place"),
        Column("clone", True),
    ]
    ops = variant.get("ops") or []
    shown = ops
    if len(ops) > limit:
        order = sorted(range(len(ops)), key=lambda i: -(ops[i].get("peak_bytes") or 0))
        shown = [ops[i] for i in sorted(order[:limit])]
    rows = []
    for op in shown:
        rows.append(
            [
                _text(op.get("node")),
                _text(op.get("op")),
                _text(op.get("phase")),
                _int(op.get("iteration")),
                _bytes(op.get("allocated_bytes")),
                _bytes(op.get("freed_bytes")),
                _bytes(op.get("peak_bytes")),
                _seconds(op.get("duration_s")),
                _inplace_cell(op),
                _bytes(op.get("clone_bytes")) if op.get("clone_bytes") else ("", 0),
            ]
        )
    return Table(columns, rows, len(ops))


def live_table(variant: dict[str, Any], limit: int = 200) -> Table:
    """Storages live at the peak, largest first."""
    columns = [
        Column("tensor"),
        Column("category"),
        Column("node"),
        Column("op"),
        Column("bytes", True),
    ]
    live = (variant.get("peak") or {}).get("live") or []
    rows = [
        [
            _text(item.get("tensor")),
            _text(item.get("category")),
            _text(item.get("node")),
            _text(item.get("op")),
            _bytes(item.get("bytes")),
        ]
        for item in live[:limit]
    ]
    return Table(columns, rows, len(live))


def expectations_table(variant: dict[str, Any]) -> Table:
    columns = [
        Column("metric"),
        Column("check"),
        Column("expected"),
        Column("actual"),
        Column("result"),
    ]
    rows = []
    for e in variant.get("expectations") or []:
        rows.append(
            [
                _text(e.get("metric")),
                _text(e.get("op")),
                _maybe_bytes(e.get("metric"), e.get("expected")),
                _maybe_bytes(e.get("metric"), e.get("actual")),
                ("passed" if e.get("passed") else "FAILED", bool(e.get("passed"))),
            ]
        )
    return Table(columns, rows, len(rows))


def variant_summaries(report: dict[str, Any]) -> list[dict[str, Any]]:
    """One card per variant: peaks, saving against the baseline, events, time, warnings."""
    variants = report.get("variants") or []
    baseline = baseline_variant(report)
    cards = []
    for v in variants:
        peak = v.get("peak_allocated_bytes") or 0
        is_baseline = v.get("name") == baseline
        cards.append(
            {
                "name": v.get("name"),
                "params": ", ".join(
                    f"{k}={json.dumps(val)}" for k, val in (v.get("params") or {}).items()
                ),
                "status": v.get("status", "ok"),
                "error": v.get("error"),
                "peak_allocated": format_bytes(peak),
                "peak_allocated_bytes": peak,
                "peak_reserved": format_bytes(v.get("peak_reserved_bytes") or 0),
                "baseline": is_baseline,
                "saving": variant_saving(report, v),
                "events": v.get("num_allocs", 0) + v.get("num_frees", 0),
                "duration": _seconds(v.get("duration_s"))[0],
                "warnings": len(warnings_of(v)),
            }
        )
    return cards


def inplace_text(op: dict[str, Any]) -> str:
    """``no``, ``yes, free`` or ``yes, paid a clone`` for an op row."""
    if not op.get("inplace"):
        return "no"
    return "yes, paid a clone" if op.get("inplace_cost") == "clone" else "yes, free"


def _inplace_cell(op: dict[str, Any]) -> tuple[str, Any]:
    text = inplace_text(op)
    return (text, {"no": 0, "yes, free": 1}.get(text, 2))


def _text(value: Any) -> tuple[str, Any]:
    return ("" if value is None else str(value), "" if value is None else str(value))


def _int(value: Any) -> tuple[str, Any]:
    return ("" if value is None else str(value), value if value is not None else -1)


def _bytes(value: Any) -> tuple[str, Any]:
    return (format_bytes(value or 0), value or 0)


def _seconds(value: Any) -> tuple[str, Any]:
    return ("", -1) if value is None else (format_seconds(value), value)


def _maybe_bytes(metric: Any, value: Any) -> tuple[str, Any]:
    """Expectation values are bytes except for these metrics (docs/report-format.md)."""
    is_number = isinstance(value, (int, float)) and not isinstance(value, bool)
    not_bytes = ("status", "error", "values:", "warnings:", "inplace:")
    if is_number and not str(metric).startswith(not_bytes):
        return _bytes(value)
    return _text(value)
