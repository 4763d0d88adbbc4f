"""`memprof check` end to end: real scenarios through the runner, via Typer's CliRunner and a
real subprocess. Exit 0 all pass, 1 a budget or regression fails, 2 invalid input."""

from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from typer.testing import CliRunner

from memprof import history
from memprof.cli.app import app

KiB = 1024

RELU = """\
name: relu-block
description: relu in and out of place
inputs:
  x: {{shape: [{rows}, 256]}}
program:
  - {{id: act, op: relu, in: x, inplace: $inplace}}
variants:
  out_of_place: {{inplace: false}}
  inplace: {{inplace: true}}
baseline: out_of_place
expect:
  out_of_place: {{peak_allocated: "{budget}"}}
  inplace: {{peak_allocated: "<= 256 KiB"}}
"""


def scenario(directory, rows=256, budget="<= 512 KiB", name="relu.yaml"):
    """relu on a float32 [rows, 256] input: 256 KiB per tensor at rows=256."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text(RELU.format(rows=rows, budget=budget), encoding="utf-8")
    return path


def invoke(*args):
    return CliRunner().invoke(app, ["check", *map(str, args)])


def test_all_budgets_hold_exit_0_one_line_per_variant(tmp_path):
    path = scenario(tmp_path / "scenarios")

    result = invoke(path, "--out-dir", tmp_path / "runs")

    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].split()[:2] == ["PASS", "relu-block/out_of_place"]
    # the peak, then the budget it met
    assert lines[0].split()[2:] == [
        "peak",
        "512.00",
        "KiB",
        "peak_allocated",
        "<=",
        "512.00",
        "KiB",
    ]
    assert lines[1].split()[:2] == ["PASS", "relu-block/inplace"]
    assert lines[-1] == "all 2 variants passed"


def test_a_broken_budget_exits_1_with_the_explanation_and_the_tensors_at_the_peak(tmp_path):
    path = scenario(tmp_path, budget="<= 256 KiB")

    result = invoke(path, "--out-dir", tmp_path / "runs")

    assert result.exit_code == 1
    out = result.stdout
    assert out.splitlines()[0].split()[:2] == ["FAIL", "relu-block/out_of_place"]
    assert "relu-block/out_of_place was limited to 256.00 KiB but peaked at 512.00 KiB" in out
    assert "live at the peak (512.00 KiB):" in out
    assert "node act (relu)" in out and "node <inputs>" in out
    assert "error: 1 of 2 variants failed: relu-block/out_of_place" in result.stderr
    assert "Traceback" not in result.output


def test_a_regression_against_an_earlier_json_result_exits_1(tmp_path):
    runs = tmp_path / "runs"
    first = invoke(
        scenario(tmp_path / "before"), "--json", tmp_path / "main.json", "--out-dir", runs
    )
    assert first.exit_code == 0, first.output
    # the same scenario, with an input twice as large and budgets loose enough to pass
    grown = scenario(tmp_path / "after", rows=512, budget="<= 4 MiB").read_text()
    (tmp_path / "after" / "relu.yaml").write_text(grown.replace('"<= 256 KiB"', '"<= 4 MiB"'))

    result = invoke(
        tmp_path / "after",
        "--baseline",
        tmp_path / "main.json",
        "--max-increase",
        "5%",
        "--out-dir",
        runs,
    )

    assert result.exit_code == 1
    assert (
        "relu-block/out_of_place peaked at 1.00 MiB, 100.0% above its baseline of 512.00 KiB "
        "(allowed: +5%)"
    ) in result.stdout
    assert (
        "relu-block/inplace peaked at 512.00 KiB, 100.0% above its baseline of 256.00 KiB "
        "(allowed: +5%)"
    ) in result.stdout


def test_an_unchanged_run_passes_against_its_own_runs_directory(tmp_path):
    runs = tmp_path / "runs"
    path = scenario(tmp_path)
    assert invoke(path, "--out-dir", runs).exit_code == 0

    result = invoke(
        path, "--baseline", runs, "--max-increase", "0", "--out-dir", tmp_path / "runs2"
    )

    assert result.exit_code == 0, result.output
    assert "peak_allocated" in result.stdout and "(2 checks)" in result.stdout


def test_json_and_junit_are_written_and_the_json_is_a_baseline(tmp_path):
    path = scenario(tmp_path, budget="<= 256 KiB")

    result = invoke(
        path,
        "--json",
        tmp_path / "out" / "check.json",
        "--junit",
        tmp_path / "out" / "junit.xml",
        "--out-dir",
        tmp_path / "runs",
    )

    assert result.exit_code == 1
    combined = json.loads((tmp_path / "out" / "check.json").read_text())
    assert combined["kind"] == "memprof-check" and combined["passed"] is False
    assert combined["summary"] == {"variants": 2, "passed": 1, "failed": 1}
    assert [(r["variant"], r["passed"]) for r in combined["results"]] == [
        ("out_of_place", False),
        ("inplace", True),
    ]
    root = ET.parse(tmp_path / "out" / "junit.xml").getroot()
    assert [c.get("name") for c in root.iter("testcase")] == ["out_of_place", "inplace"]
    [failure] = root.iter("failure")
    assert (
        failure.get("message")
        == "relu-block/out_of_place was limited to 256.00 KiB but peaked at 512.00 KiB"
    )

    again = invoke(
        path, "--baseline", tmp_path / "out" / "check.json", "--out-dir", tmp_path / "runs"
    )

    lines = again.stdout.splitlines()
    assert lines[0].startswith("FAIL") and lines[0].endswith("(1 of 2 checks failed)")
    assert [ln for ln in lines if ln.startswith("PASS")][0].endswith("(2 checks)")


def test_check_saves_reports_and_appends_history(tmp_path):
    runs = tmp_path / "runs"

    invoke(scenario(tmp_path), "--out-dir", runs)
    invoke(scenario(tmp_path), "--out-dir", runs)

    rows = history.query(runs, "relu-block")
    assert [r["variant"] for r in rows] == ["out_of_place", "inplace"] * 2
    assert {r["source"] for r in rows} == {"check"}
    assert len(list(runs.glob("*.json"))) == 2


def test_html_reports_are_written_on_request(tmp_path):
    result = invoke(scenario(tmp_path), "--html", tmp_path / "html", "--out-dir", tmp_path / "runs")

    assert result.exit_code == 0, result.output
    [page] = (tmp_path / "html").glob("*.html")
    assert page.read_text().lstrip().lower().startswith("<!doctype html")


# --- invalid input: exit 2, the file and the problem named, no traceback -----------------------


def test_a_missing_baseline_exits_2_with_the_reason(tmp_path):
    result = invoke(
        scenario(tmp_path), "--baseline", tmp_path / "gone.json", "--out-dir", tmp_path / "r"
    )

    assert result.exit_code == 2
    assert f"{tmp_path / 'gone.json'}: baseline not found" in result.stderr
    assert result.stdout == ""  # nothing ran


def test_a_malformed_baseline_exits_2_with_file_line_and_column(tmp_path):
    (tmp_path / "base.json").write_text('{"kind": "memprof-check",\n "results": [}')

    result = invoke(
        scenario(tmp_path), "--baseline", tmp_path / "base.json", "--out-dir", tmp_path / "r"
    )

    assert result.exit_code == 2
    assert result.stderr.strip() == f"{tmp_path / 'base.json'}:2:14: invalid JSON: Expecting value"
    assert "Traceback" not in result.output


def test_an_invalid_scenario_exits_2_before_anything_runs(tmp_path):
    good = scenario(tmp_path / "s", name="a.yaml")
    bad = tmp_path / "s" / "b.yaml"
    bad.write_text("name: broken\nprogram:\n  - {id: act, op: no_such_op, in: x}\n")

    result = invoke(tmp_path / "s", "--out-dir", tmp_path / "runs")

    assert result.exit_code == 2
    assert str(bad) in result.stderr and str(good) not in result.stderr
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["--max-increase", "lots"],
            "error: --max-increase: expected a percentage such as 5%, found 'lots'",
        ),
        (["--allocator", "buddy"], "--allocator: expected one of exact, caching, found 'buddy'"),
        (
            ["--device", "gpu", "--allocator", "buddy"],
            "--device: expected one of cpu, cuda, meta, auto (did you mean 'cpu'?), found 'gpu'\n"
            "--allocator: expected one of exact, caching, found 'buddy'",
        ),
    ],
)
def test_bad_options_exit_2(tmp_path, args, message):
    result = invoke(scenario(tmp_path), *args)

    assert result.exit_code == 2
    assert result.stderr.strip() == message


def test_a_missing_scenario_path_exits_2(tmp_path):
    result = invoke(tmp_path / "nowhere.yaml", tmp_path)

    assert result.exit_code == 2
    assert f"{tmp_path / 'nowhere.yaml'}: no such scenario file or directory" in result.stderr
    assert f"{tmp_path}: no scenario files (*.yaml, *.yml) in this directory" in result.stderr


def test_two_scenarios_with_one_name_exit_2(tmp_path):
    scenario(tmp_path, name="a.yaml")
    scenario(tmp_path, name="b.yaml")

    result = invoke(tmp_path, "--out-dir", tmp_path / "runs")

    assert result.exit_code == 2
    assert "scenario name 'relu-block' is also used by" in result.stderr


def test_the_exit_code_is_real_in_a_subprocess(tmp_path):
    path = scenario(tmp_path, budget="<= 256 KiB")

    done = subprocess.run(
        [sys.executable, "-m", "memprof", "check", str(path), "--out-dir", str(tmp_path / "runs")],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )

    assert done.returncode == 1, done.stderr
    assert "was limited to 256.00 KiB but peaked at 512.00 KiB" in done.stdout
    assert "Traceback" not in done.stderr


def test_every_input_problem_is_named_at_once(tmp_path):
    result = invoke(tmp_path / "nowhere.yaml", "--baseline", tmp_path / "gone.json")

    assert result.exit_code == 2
    assert result.stderr.splitlines() == [
        f"{tmp_path / 'nowhere.yaml'}: no such scenario file or directory",
        f"{tmp_path / 'gone.json'}: baseline not found (no such file or directory)",
    ]


def test_an_unwritable_output_exits_2_naming_it(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")

    result = invoke(
        scenario(tmp_path), "--junit", blocker / "junit.xml", "--out-dir", tmp_path / "runs"
    )

    assert result.exit_code == 2
    assert (
        result.stderr.strip()
        == f"{blocker / 'junit.xml'}: cannot write: {blocker} is a file, not a directory"
    )
    assert result.stdout == ""  # found before anything ran
    assert not (tmp_path / "runs").exists()


def test_a_runs_directory_that_is_a_file_exits_2_before_anything_runs(tmp_path):
    blocker = tmp_path / "runs"
    blocker.write_text("not a directory")

    result = invoke(scenario(tmp_path), "--runs", blocker)

    assert result.exit_code == 2
    assert (
        result.stderr.strip()
        == f"{blocker}: cannot write reports there: it is a file, not a directory"
    )
    assert result.stdout == ""


# --- the shipped scenarios ---------------------------------------------------------------------

SHIPPED_RELU = Path(__file__).resolve().parents[2] / "scenarios" / "relu.yaml"


def test_the_shipped_relu_scenario_passes_and_then_serves_as_its_own_baseline(tmp_path):
    first = invoke(
        SHIPPED_RELU,
        "--json",
        tmp_path / "check.json",
        "--junit",
        tmp_path / "junit.xml",
        "--out-dir",
        tmp_path / "runs",
    )
    assert first.exit_code == 0, first.output
    assert [ln.split()[:2] for ln in first.stdout.splitlines()[:2]] == [
        ["PASS", "relu-block/inplace"],
        ["PASS", "relu-block/out_of_place"],
    ]

    again = invoke(
        SHIPPED_RELU,
        "--baseline",
        tmp_path / "check.json",
        "--max-increase",
        "0%",
        "--out-dir",
        tmp_path / "runs",
    )

    assert again.exit_code == 0, again.output
    root = ET.parse(tmp_path / "junit.xml").getroot()
    assert (root.get("tests"), root.get("failures"), root.get("errors")) == ("2", "0", "0")
    peaks = {
        r["variant"]: r["peak_allocated_bytes"]
        for r in history.query(tmp_path / "runs", "relu-block")
    }
    assert peaks == {"inplace": 64 * 1024**2, "out_of_place": 128 * 1024**2}
