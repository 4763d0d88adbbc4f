"""record_run: the one place a finished run is saved and appended to the history."""

from __future__ import annotations

import json

import pytest

from memprof import history
from memprof.reports.record import record_run
from memprof.reports.store import read_report
from memprof.runner import run_scenario
from tests.memprof.test_runner_engine import RELU, scenario


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    return run_scenario(scenario(tmp_path_factory.mktemp("sc"), RELU))


def test_a_run_is_saved_whole_and_appended_to_the_history(tmp_path, report):
    recorded = record_run(tmp_path / "runs", report, source="run")

    assert recorded.ok and recorded.in_history
    assert recorded.path == tmp_path / "runs" / f"{report['run_id']}.json"
    assert read_report(recorded.path) == json.loads(json.dumps(report))  # (packed or not)
    rows = history.query(tmp_path / "runs", "relu")
    assert {(r["variant"], r["peak_allocated_bytes"]) for r in rows} == {
        (v["name"], v["peak_allocated_bytes"]) for v in report["variants"]
    }
    assert {r["source"] for r in rows} == {"run"}
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == sorted(
        [recorded.path.name, history.db_path(tmp_path / "runs").name]
    )  # no temporary files left


def test_a_check_verdict_goes_to_the_history(tmp_path, report):
    record_run(tmp_path, report, source="check", passed={"inplace": False, "out_of_place": True})
    rows = {r["variant"]: r for r in history.query(tmp_path, "relu")}
    assert (rows["inplace"]["passed"], rows["out_of_place"]["passed"]) == (0, 1)


def test_a_history_that_cannot_be_written_keeps_the_saved_report(tmp_path, report):
    (tmp_path / history.DB_NAME).mkdir()  # sqlite cannot open a directory

    recorded = record_run(tmp_path, report, source="web")

    assert recorded.path is not None and recorded.path.exists()
    assert not recorded.in_history
    assert recorded.problem.startswith(
        f"{tmp_path}: saved run {report['run_id']}, but cannot add it to the history there: "
    )


def test_a_runs_directory_that_cannot_hold_reports_saves_nothing_and_says_so(tmp_path, report):
    runs = tmp_path / "runs"
    runs.write_text("a file, not a directory")

    recorded = record_run(runs, report, source="run")

    assert recorded.path is None and not recorded.in_history
    assert recorded.problem.startswith(f"{runs}: cannot save run {report['run_id']} there: ")
    assert runs.read_text() == "a file, not a directory"
    assert not history.db_path(tmp_path).exists()  # no history for a run without a report
