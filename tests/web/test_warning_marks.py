"""Stale-read and in-place clone warnings are marked on the timeline at their node, in the
dashboard's figure API and the offline report."""

from __future__ import annotations

import pytest

from memprof.reports import charts
from memprof.reports.html import render_html
from memprof.reports.store import save_report
from memprof.runner import run_scenario
from tests.web.conftest import REPO


@pytest.fixture(scope="module")
def report():
    return run_scenario(REPO / "scenarios" / "multi_branch.yaml")


def test_a_stale_read_is_marked_at_the_first_event_of_its_node(report):
    inplace = next(v for v in report["variants"] if v["name"] == "inplace")
    t = inplace["timeline"]
    [mark] = charts.warning_marks(inplace, t["time_s"], t["allocated"])
    first_y = next(
        i for i, (n, p) in enumerate(zip(t["node"], t["phase"], strict=True)) if n == "y"
    )
    assert (mark["kind"], mark["node"], mark["index"]) == ("stale_read", "y", first_y)
    assert mark["allocated"] == t["allocated"][first_y]
    assert "node y reads x1" in mark["message"]
    out = next(v for v in report["variants"] if v["name"] == "out_of_place")
    assert charts.warning_marks(out, out["timeline"]["time_s"], out["timeline"]["allocated"]) == []


def test_the_figure_api_draws_the_marks(client, runs_dir, report):
    save_report(report, runs_dir)
    rid = report["run_id"]
    fig = client.get(f"/api/runs/{rid}/variants/inplace/timeline/figure").json()
    [trace] = [t for t in fig["data"] if t["name"] == "warnings"]
    assert trace["customdata"][0][:2] == ["stale read", "y"]
    assert len(trace["x"]) == 1
    fig = client.get(f"/api/runs/{rid}/variants/out_of_place/timeline/figure").json()
    assert not [t for t in fig["data"] if t["name"] == "warnings"]
    # a window that leaves the node out leaves the mark out
    fig = client.get(f"/api/runs/{rid}/variants/inplace/timeline/figure?start=0&end=3").json()
    assert not [t for t in fig["data"] if t["name"] == "warnings"]


def test_the_offline_report_marks_them_too(report):
    page = render_html(report)
    assert '"name": "warnings"' in page or '"name":"warnings"' in page
