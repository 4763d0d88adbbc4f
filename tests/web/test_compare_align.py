"""The compare page lines two timelines up by node and phase, not by event index: variants
with different event counts match step for step, and a one-event variant is drawn as a line."""

from __future__ import annotations

import textwrap

import pytest

from memprof.reports import charts
from memprof.reports.reduce import TimelineArrays, reduce_timeline
from memprof.reports.store import save_report
from memprof.runner import run_scenario
from web.compare import align_by_step, steps_of, union_order

TWO = """\
name: two-nodes
inputs:
  x: {shape: [256], init: rand}
program:
  - {id: a, op: relu, in: x, inplace: $inplace}
  - {id: b, op: sigmoid, in: a, inplace: $inplace}
  - {id: c, op: mul, in: [a, b]}
variants:
  inplace: {inplace: true}
  out_of_place: {inplace: false}
baseline: out_of_place
"""


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    path = tmp_path_factory.mktemp("c") / "two.yaml"
    path.write_text(textwrap.dedent(TWO))
    return run_scenario(path)


def sides_of(report):
    out = []
    for v in report["variants"]:
        arrays = TimelineArrays.from_columns(v["timeline"])
        out.append((arrays, reduce_timeline(arrays, max_points=2000)))
    return out


def test_union_order_keeps_each_sides_order_and_puts_extra_steps_where_they_ran():
    a = [("setup", "<inputs>", 1), ("forward", "a", 1), ("forward", "c", 1)]
    b = [("setup", "<inputs>", 1), ("forward", "b", 1), ("forward", "c", 1)]
    assert union_order([a, b]) == [
        ("setup", "<inputs>", 1),
        ("forward", "a", 1),
        ("forward", "b", 1),
        ("forward", "c", 1),
    ]


def test_variants_with_different_event_counts_line_up_node_by_node(report):
    sides = sides_of(report)
    counts = [arrays.n for arrays, _ in sides]
    assert counts[0] != counts[1]  # in place makes fewer events
    aligned = align_by_step(sides)
    for i, (arrays, series) in enumerate(sides):
        steps = {key: first for key, first, _ in steps_of(arrays)}
        xs = dict(zip(series["index"], aligned["xs"][i], strict=True))
        # the first event of node c sits at c's step on both sides
        assert xs[steps[("forward", "c", 1)]] == aligned["steps"].index(("forward", "c", 1))
    # both sides end where their last step ends, at the same place
    assert aligned["ends"][0] == aligned["ends"][1] == len(aligned["steps"])
    assert "c" in aligned["ticktext"]


def test_the_overlay_draws_aligned_steps_and_holds_the_last_value(report):
    sides = sides_of(report)
    aligned = align_by_step(sides)
    fig = charts.overlay_figure(
        [(v["name"], s) for v, (_, s) in zip(report["variants"], sides, strict=True)],
        x="step",
        aligned=aligned,
    )
    lines = [t for t in fig["data"] if t["mode"] == "lines"]
    for trace, (_, series) in zip(lines, sides, strict=True):
        assert trace["x"][-1] == aligned["ends"][0]
        assert trace["y"][-1] == series["allocated"][-1]
    assert fig["layout"]["xaxis"]["tickmode"] == "array"


def test_a_one_event_variant_is_drawn_as_a_line():
    arrays = TimelineArrays.from_columns(
        {
            "seq": [0],
            "time_s": [0.0],
            "action": ["alloc"],
            "bytes": [64],
            "requested": [64],
            "allocated": [64],
            "reserved": [64],
            "node": ["<inputs>"],
            "op": ["rand"],
            "phase": ["setup"],
            "category": ["input"],
            "tensor": ["x"],
            "iteration": [None],
            "storage": [1],
        }
    )
    series = reduce_timeline(arrays)
    for x in ("index", "time"):
        [line] = [
            t for t in charts.overlay_figure([("one", series)], x=x)["data"] if t["mode"] == "lines"
        ]
        assert len(line["x"]) == 2 and line["x"][1] > line["x"][0] and line["y"] == [64, 64]
    aligned = align_by_step([(arrays, series)])
    [line] = [
        t
        for t in charts.overlay_figure([("one", series)], x="step", aligned=aligned)["data"]
        if t["mode"] == "lines"
    ]
    assert line["x"] == [0.0, 1.0] and line["y"] == [64, 64]


def test_the_compare_page_defaults_to_the_aligned_axis(client, runs_dir, report):
    save_report(report, runs_dir)
    rid = report["run_id"]
    page = client.get(f"/compare?a={rid}:out_of_place&b={rid}:inplace")
    assert page.status_code == 200
    assert "aligned by node and phase" in page.text
    assert client.get(f"/compare?a={rid}:out_of_place&b={rid}:inplace&x=index").status_code == 200
    assert client.get(f"/compare?a={rid}:out_of_place&b={rid}:inplace&x=bad").status_code == 422
