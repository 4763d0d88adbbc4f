"""The synthetic reports the dashboard tests use follow the report format and add up."""

from __future__ import annotations

import pytest

from memprof.reports.schema import Report


@pytest.fixture(params=["base_report", "other_report", "failed_report"])
def any_report(request):
    return request.getfixturevalue(request.param)


def test_synthetic_reports_validate_against_the_report_schema(any_report):
    Report.model_validate(any_report)


def test_synthetic_numbers_are_consistent(any_report):
    for variant in any_report["variants"]:
        timeline = variant["timeline"]
        assert max(timeline["allocated"]) == variant["peak_allocated_bytes"]
        assert max(timeline["reserved"]) == variant["peak_reserved_bytes"]
        peak = variant["peak"]
        assert timeline["allocated"][peak["event_index"]] == peak["allocated_bytes"]
        assert sum(item["bytes"] for item in peak["live"]) == peak["allocated_bytes"]
        assert sum(peak["by_category"].values()) == peak["allocated_bytes"]
        running = 0
        for action, size, allocated in zip(
            timeline["action"], timeline["bytes"], timeline["allocated"], strict=True
        ):
            running += {"alloc": size, "free": -size}.get(action, 0)
            assert running == allocated
    base = next(v for v in any_report["variants"] if v["name"] == any_report["baseline_variant"])
    for row in any_report["comparison"]["rows"]:
        variant = next(v for v in any_report["variants"] if v["name"] == row["variant"])
        assert row["delta_bytes"] == variant["peak_allocated_bytes"] - base["peak_allocated_bytes"]
