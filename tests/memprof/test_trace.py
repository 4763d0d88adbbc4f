"""The trace reporter: a report as Chrome Trace Event JSON (memprof/reports/trace.py), from the
library and from `memprof report --trace`."""

from __future__ import annotations

import copy
import json
from collections import defaultdict
from pathlib import Path

import pytest
from typer.testing import CliRunner

from memprof.cli.app import app
from memprof.reports.store import save_report
from memprof.reports.trace import ALLOCATOR_TID, OPS_TID, PHASES_TID, render_trace, write_trace
from tests.web.synthetic import make_failed_report, make_report

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()


def ns(us: float) -> int:
    """A trace time (microseconds) as integer nanoseconds, so comparisons are exact."""
    return round(us * 1000)


def check_trace(trace: dict, report: dict) -> None:
    """What every trace of `report` must satisfy; used by the dashboard's tests too."""
    assert trace["displayTimeUnit"] == "ms"
    events = trace["traceEvents"]
    names = {
        e["pid"]: e["args"]["name"]
        for e in events
        if e["ph"] == "M" and e["name"] == "process_name"
    }
    assert len(names) == len(report["variants"])  # one process per variant
    for pid, variant in enumerate(report["variants"], start=1):
        assert names[pid].startswith(variant["name"])
        timeline = variant["timeline"]
        mine = [e for e in events if e.get("pid") == pid]

        # counters: one sample per event, equal to the timeline's bytes, time never going back
        counters = [e for e in mine if e["ph"] == "C"]
        assert {e["name"] for e in counters} <= {"memory"}
        assert [e["args"]["allocated"] for e in counters] == timeline["allocated"]
        assert [e["args"]["reserved"] for e in counters] == timeline["reserved"]
        stamps = [ns(e["ts"]) for e in counters]
        assert stamps == sorted(stamps)

        # allocator instants: one per event, saying what it was
        instants = [e for e in mine if e["ph"] == "i" and e["cat"] != "peak"]
        assert all(e["tid"] == ALLOCATOR_TID and e["s"] == "t" for e in instants)
        assert [e["cat"] for e in instants] == timeline["action"]
        assert [e["args"]["bytes"] for e in instants] == timeline["bytes"]
        assert [e["args"]["tensor"] for e in instants] == timeline["tensor"]
        assert [e["args"]["category"] for e in instants] == timeline["category"]
        assert [ns(e["ts"]) for e in instants] == stamps

        # spans: every op row on the ops thread in order, every phase on its own thread
        spans = defaultdict(list)
        for e in mine:
            if e["ph"] == "X":
                assert e["dur"] >= 0
                spans[e["tid"]].append(e)
        assert set(spans) <= {PHASES_TID, OPS_TID}
        assert [e["args"]["node"] for e in spans[OPS_TID]] == [o["node"] for o in variant["ops"]]
        assert [e["args"]["peak_bytes"] for e in spans[OPS_TID]] == [
            o["peak_bytes"] for o in variant["ops"]
        ]
        assert [e["cat"] for e in spans[PHASES_TID]] == ["phase"] * len(variant["phases"])
        for thread in spans.values():
            assert_properly_nested(thread)


def assert_properly_nested(spans: list[dict]) -> None:
    """Two spans of one thread are disjoint or one contains the other, never half over."""
    intervals = sorted(
        ((ns(e["ts"]), ns(e["ts"]) + ns(e["dur"]), e["name"]) for e in spans),
        key=lambda iv: (iv[0], -iv[1]),
    )
    open_spans: list[tuple[int, int, str]] = []
    for start, end, name in intervals:
        while open_spans and open_spans[-1][1] <= start:
            open_spans.pop()
        if open_spans:
            assert end <= open_spans[-1][1], f"{name} overlaps {open_spans[-1][2]} partly"
        open_spans.append((start, end, name))


def parse(report: dict) -> dict:
    return json.loads(render_trace(report))


# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def synthetic() -> dict:
    return make_report(scenario="mlp-train", layers=4, iterations=2)


@pytest.fixture(scope="module")
def real_reports() -> list[dict]:
    from memprof.runner import run_scenario

    return [
        run_scenario(ROOT / "scenarios" / name)
        for name in ("mlp_train.yaml", "resnet_block.yaml", "relu.yaml")
    ]


def test_a_report_becomes_a_trace_perfetto_can_read(synthetic):
    trace = parse(synthetic)
    check_trace(trace, synthetic)
    assert trace["otherData"]["run_id"] == synthetic["run_id"]


def test_reports_of_real_runs_become_valid_traces(real_reports):
    for report in real_reports:
        check_trace(parse(report), report)


def test_op_spans_start_when_the_op_started(synthetic):
    # Given op rows that carry start_s (seconds since the variant started)
    variant = synthetic["variants"][1]
    trace = parse(synthetic)

    # then each op's span starts then (or where the previous one ended, when rounding made
    # them touch) and lasts its duration
    spans = [e for e in trace["traceEvents"] if e["ph"] == "X" and e["pid"] == 2]
    ops = [e for e in spans if e["tid"] == OPS_TID]
    expected, end = [], 0
    for o in variant["ops"]:
        start = max(round(o["start_s"] * 1e9), end)
        end = start + round(o["duration_s"] * 1e9)
        expected.append(start)
    assert [ns(e["ts"]) for e in ops] == expected
    assert all(
        abs(a - round(o["start_s"] * 1e9)) <= 1
        for a, o in zip(expected, variant["ops"], strict=True)
    )
    assert [ns(e["dur"]) for e in ops] == [round(o["duration_s"] * 1e9) for o in variant["ops"]]
    assert ops[0]["name"] == "fc0 (matmul)"
    assert ops[0]["args"]["phase"] == "forward" and ops[0]["cat"] == "forward"


def test_ops_without_start_times_are_laid_end_to_end_inside_their_phases(synthetic):
    # Given a report from a runner that recorded no start_s
    report = copy.deepcopy(synthetic)
    for variant in report["variants"]:
        for op in variant["ops"]:
            del op["start_s"]

    # when it is exported
    trace = parse(report)

    # then it is still valid, and each phase's first op starts with its phase
    check_trace(trace, report)
    variant = report["variants"][0]
    ops = [e for e in trace["traceEvents"] if e["ph"] == "X" and e["pid"] == 1]
    ops = [e for e in ops if e["tid"] == OPS_TID]
    backward = next(p for p in variant["phases"] if p["name"] == "backward")
    first_backward = next(e for e in ops if e["cat"] == "backward")
    assert ns(first_backward["ts"]) == round(backward["start_s"] * 1e9)
    for before, after in zip(ops, ops[1:], strict=False):
        assert ns(after["ts"]) >= ns(before["ts"]) + ns(before["dur"])


def test_spans_that_overlap_by_rounding_are_moved_apart(synthetic):
    # Given two ops and two phases whose rounded times overlap by a nanosecond
    report = copy.deepcopy(synthetic)
    variant = report["variants"][0]
    first, second = variant["ops"][0], variant["ops"][1]
    second["start_s"] = first["start_s"] + first["duration_s"] - 1e-9
    variant["phases"][1]["start_s"] = variant["phases"][0]["end_s"] - 1e-9

    # then the trace still nests properly on every thread
    check_trace(parse(report), report)


def test_the_peak_is_a_process_wide_instant(synthetic):
    trace = parse(synthetic)
    for pid, variant in enumerate(synthetic["variants"], start=1):
        peaks = [e for e in trace["traceEvents"] if e.get("cat") == "peak" and e["pid"] == pid]
        assert len(peaks) == 1 and peaks[0]["s"] == "p"
        assert peaks[0]["args"]["allocated"] == variant["peak_allocated_bytes"]
        assert peaks[0]["args"]["event_index"] == variant["peak"]["event_index"]
        index = variant["peak"]["event_index"]
        assert ns(peaks[0]["ts"]) == round(variant["timeline"]["time_s"][index] * 1e9)


def test_a_refused_allocation_is_an_oom_instant_that_changes_no_counter():
    report = make_failed_report(scenario="oom-mlp", layers=3)
    trace = parse(report)
    check_trace(trace, report)
    ooms = [e for e in trace["traceEvents"] if e.get("cat") == "oom"]
    assert len(ooms) == 1 and ooms[0]["pid"] == 2
    assert ooms[0]["args"]["bytes"] == 64 * 1024


def test_write_trace_replaces_the_file_whole(tmp_path, synthetic):
    path = tmp_path / "out" / "run.trace.json"
    write_trace(synthetic, path)
    check_trace(json.loads(path.read_text()), synthetic)
    assert [p.name for p in path.parent.iterdir()] == ["run.trace.json"]  # no temp file left


def test_memprof_report_trace_writes_only_the_trace(tmp_path, synthetic):
    source = save_report(synthetic, tmp_path)
    out = tmp_path / "t" / "run.trace.json"

    result = runner.invoke(app, ["report", str(source), "--trace", str(out)])

    assert result.exit_code == 0, result.output
    assert f"wrote {out}" in result.output and "perfetto" in result.output.lower()
    check_trace(json.loads(out.read_text()), synthetic)
    assert not source.with_suffix(".html").exists()


def test_memprof_report_writes_the_trace_and_the_page_when_both_are_asked_for(tmp_path, synthetic):
    save_report(synthetic, tmp_path / "runs")
    out, page = tmp_path / "run.trace.json", tmp_path / "run.html"
    result = runner.invoke(
        app,
        [
            "report",
            synthetic["run_id"],
            "--runs",
            str(tmp_path / "runs"),
            "--trace",
            str(out),
            "--html",
            str(page),
        ],
    )
    assert result.exit_code == 0, result.output
    assert out.is_file() and page.is_file()


def test_memprof_report_trace_refuses_a_file_that_is_not_a_report(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema_version": 3, "variants": []}')
    result = runner.invoke(app, ["report", str(bad), "--trace", str(tmp_path / "t.json")])
    assert result.exit_code == 2
    assert "schema_version 3" in result.output
    assert not (tmp_path / "t.json").exists()
