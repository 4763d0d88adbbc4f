"""Figures and tables shared by the dashboard and the offline report (memprof/reports/charts)."""

from __future__ import annotations

import plotly.graph_objects as go
import pytest

from memprof.reports import charts
from memprof.reports.reduce import TimelineArrays, reduce_timeline
from memprof.units import format_bytes


def series_of(variant: dict, **kwargs) -> dict:
    return reduce_timeline(TimelineArrays.from_columns(variant["timeline"]), **kwargs)


def figures(report: dict) -> list[dict]:
    variant = report["variants"][1]
    series = series_of(variant, max_points=30)
    return [
        charts.timeline_figure(series, phases=variant["phases"]),
        charts.timeline_figure(series, phases=variant["phases"], x="time"),
        charts.overlay_figure([("a", series_of(report["variants"][0])), ("b", series)]),
        charts.peak_figure(report),
        charts.live_by_category_figure(variant),
        charts.live_by_tensor_figure(variant),
        charts.history_figure(history_rows(report), current_run_id="run-1"),
    ]


def history_rows(report: dict, runs: int = 3) -> list[dict]:
    """Rows as memprof.history.query gives them: `runs` runs of the report's variants, the
    peaks growing by 1 KiB a run, oldest first."""
    return [
        {
            "run_id": f"run-{i}",
            "created_at": f"2026-11-2{i}T05:15:00Z",
            "scenario": report["scenario"]["name"],
            "variant": v["name"],
            "peak_allocated_bytes": v["peak_allocated_bytes"] + 1024 * i,
            "peak_reserved_bytes": v["peak_reserved_bytes"],
            "status": v["status"],
            "passed": True,
            "duration_s": 0.1,
            "git_commit": f"{i:040x}",
            "device": "cpu",
            "allocator": "caching",
            "source": "check",
            "scenario_path": None,
        }
        for i in range(runs)
        for v in report["variants"]
    ]


def test_every_figure_is_valid_plotly(report, failed_report):
    for fig in figures(report) + figures(failed_report):
        go.Figure(fig)  # raises on any property plotly does not know


def test_the_timeline_stacks_categories_and_marks_the_peak(report):
    variant = report["variants"][0]
    fig = charts.timeline_figure(series_of(variant, max_points=20), phases=variant["phases"])
    traces = {t["name"]: t for t in fig["data"]}
    stacked = [t for t in fig["data"] if t.get("stackgroup")]
    assert {t["name"] for t in stacked} == set(variant["timeline"]["category"])
    assert all(t["type"] == "scatter" for t in fig["data"])  # scattergl cannot fill
    assert traces["peak"]["x"] == [variant["peak"]["event_index"]]
    assert traces["peak"]["y"] == [variant["peak_allocated_bytes"]]
    peak_label = fig["layout"]["annotations"][0]["text"]
    assert peak_label.startswith(f"peak {format_bytes(variant['peak_allocated_bytes'])}")
    bands = fig["layout"]["shapes"]
    assert len(bands) == len(variant["phases"])
    forward = next(p for p in variant["phases"] if p["name"] == "forward")
    assert any(b["x0"] == forward["start_index"] and b["x1"] == forward["end_index"] for b in bands)


def test_hovering_the_allocated_line_names_node_op_tensor_and_bytes(report):
    variant = report["variants"][0]
    series = series_of(variant)
    allocated = next(t for t in charts.timeline_figure(series)["data"] if t["name"] == "allocated")
    i = variant["peak"]["event_index"]
    row = allocated["customdata"][series["index"].index(i)]
    tl = variant["timeline"]
    assert row == [
        format_bytes(tl["allocated"][i]),
        tl["action"][i],
        format_bytes(tl["bytes"][i]),
        tl["tensor"][i],
        tl["node"][i],
        tl["op"][i],
        tl["phase"][i],
        i,
    ]
    for placeholder in ("customdata[3]", "customdata[4]", "customdata[5]", "customdata[2]"):
        assert placeholder in allocated["hovertemplate"]


def test_an_overlay_ticks_every_event_only_when_every_series_is_short(report):
    long = series_of(report["variants"][0])
    short = series_of(report["variants"][1], start=0, end=4)
    assert long["end"] - long["start"] >= 10

    assert "dtick" not in charts.overlay_figure([("a", long), ("b", short)])["layout"]["xaxis"]
    assert "dtick" not in charts.overlay_figure([("b", short), ("a", long)])["layout"]["xaxis"]
    assert charts.overlay_figure([("b", short)])["layout"]["xaxis"]["dtick"] == 1


def test_peak_bars_put_variants_side_by_side_with_their_saving(report):
    fig = charts.peak_figure(report)
    allocated, reserved = fig["data"]
    assert allocated["y"] == [v["peak_allocated_bytes"] for v in report["variants"]]
    assert reserved["y"] == [v["peak_reserved_bytes"] for v in report["variants"]]
    base, inplace = (v["peak_allocated_bytes"] for v in report["variants"])
    pct = 100 * (base - inplace) / base
    labels = [a["text"] for a in fig["layout"]["annotations"]]
    assert labels == [
        "<b>baseline</b>",
        f"<b>saves {format_bytes(base - inplace)} ({pct:.1f}%)</b>",
    ]


@pytest.mark.parametrize(
    ("peak", "baseline", "text"),
    [
        (50, 100, "saves 50 bytes (50.0%)"),
        (150, 100, "costs 50 bytes (50.0%)"),
        (100, 100, "same peak"),
        (64 * 2**20, 128 * 2**20, "saves 64.00 MiB (50.0%)"),
    ],
)
def test_saving_text(peak, baseline, text):
    assert charts.saving_text(peak, baseline) == text


@pytest.mark.parametrize("top", [1, 700, 5000, 3 * 2**20, 10 * 2**30])
def test_byte_axis_ticks_are_round_binary_sizes_covering_the_data(top):
    axis = charts.byte_axis(top)
    assert axis["tickvals"][0] == 0 and axis["tickvals"][-1] >= top
    assert 2 <= len(axis["tickvals"]) <= 12
    assert all(t == "0" or t.split()[1] in ("B", "KiB", "MiB", "GiB") for t in axis["ticktext"])


def test_in_place_calls_that_paid_a_clone_are_warnings_even_without_a_warning_row(report):
    variant = report["variants"][1]
    variant["warnings"] = [w for w in variant["warnings"] if w["kind"] != "inplace_clone"]
    found = charts.warnings_of(variant)
    clone = [w for w in found if w["kind"] == "inplace_clone"]
    assert [w["node"] for w in clone] == ["act0"]
    assert "clone its input (1.00 MiB)" in clone[0]["message"]
    assert any(w["kind"] == "stale_read" for w in found)


def test_the_per_node_table_has_a_row_per_op_with_sortable_numbers(report):
    variant = report["variants"][1]
    table = charts.ops_table(variant)
    assert table.total == len(variant["ops"]) == len(table.rows)
    labels = [c.label for c in table.columns]
    first = dict(zip(labels, table.rows[1], strict=True))  # act0: the ReLU that paid a clone
    assert first["node"] == ("act0", "act0")
    assert first["in place"][0] == "yes, paid a clone"
    assert first["peak"] == (
        format_bytes(variant["ops"][1]["peak_bytes"]),
        variant["ops"][1]["peak_bytes"],
    )


def test_history_draws_a_line_per_variant_over_runs_and_rings_the_current_run(failed_report):
    rows = history_rows(failed_report, runs=4)
    fig = charts.history_figure(rows, current_run_id="run-2")
    traces = {t["name"]: t for t in fig["data"]}
    assert list(traces) == ["out_of_place", "inplace", "this run"]
    for v in failed_report["variants"]:
        line = traces[v["name"]]
        assert line["x"] == [0, 1, 2, 3]
        assert line["y"] == [v["peak_allocated_bytes"] + 1024 * i for i in range(4)]
    assert traces["inplace"]["marker"]["symbol"] == ["x"] * 4  # it ran out of memory
    assert traces["out_of_place"]["marker"]["symbol"] == ["circle"] * 4
    assert traces["this run"]["x"] == [2, 2]
    assert fig["layout"]["shapes"][0]["x0"] == 2
    assert fig["layout"]["xaxis"]["ticktext"][0] == "11-20 05:15"
    assert fig["layout"]["meta"] == {
        "runs": 4,
        "variants": ["out_of_place", "inplace"],
        "current": "run-2",
    }


def test_history_without_the_current_run_marks_nothing(report):
    fig = charts.history_figure(history_rows(report), current_run_id="elsewhere")
    assert [t["name"] for t in fig["data"]] == ["out_of_place", "inplace"]
    assert fig["layout"]["shapes"] == []


def test_history_labels_about_ten_runs_however_many_there_are(report):
    fig = charts.history_figure(history_rows(report, runs=45))
    assert len(fig["layout"]["xaxis"]["tickvals"]) <= 10
    assert len(fig["data"][0]["x"]) == 45
