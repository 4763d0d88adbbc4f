"""Reports read back (issue 14): a report with a missing or wrong-typed field is exit 2
"unreadable report: FIELD ..." for `memprof report` and `memprof compare`, never a traceback."""

from __future__ import annotations

import copy
import json

import pytest
from typer.testing import CliRunner

from memprof.cli.app import app
from memprof.reports.load import UnreadableReport, check_report
from memprof.runner import run_scenario
from tests.memprof.report_factory import report as make_report

runner = CliRunner()


def _drop(path):
    def change(r):
        *head, last = path
        target = r
        for p in head:
            target = target[p]
        del target[last]

    return change


def _set(path, value):
    def change(r):
        *head, last = path
        target = r
        for p in head:
            target = target[p]
        target[last] = value

    return change


CASES = [
    (_drop(("tool",)), "tool: expected this field"),
    (_drop(("variants", 0, "peak_allocated_bytes")), "variants[0].peak_allocated_bytes: expected"),
    (_set(("variants", 0, "peak_allocated_bytes"), "12 MiB"), "variants[0].peak_allocated_bytes"),
    (_set(("variants", 0, "status"), "fine"), "variants[0].status"),
    (_set(("variants", 0, "timeline", "allocated"), [1]), "variants[0].timeline.allocated"),
    (_set(("variants", 0, "timeline", "bytes"), [2**70, 0]), "variants[0].timeline.bytes"),
    (_set(("variants", 0, "phases", 0, "end_index"), 99), "variants[0].phases[0]"),
    (_set(("variants", 0, "peak", "event_index"), 7), "variants[0].peak.event_index"),
    (_set(("variants", 1, "name"), "a"), "variants[1].name: expected a unique variant name"),
    (_set(("baseline_variant",), "zz"), "baseline_variant: expected a variant name"),
    (_set(("comparison", "rows", 0, "variant"), "zz"), "comparison.rows[0].variant"),
    (_set(("variants",), {}), "variants: expected a list"),
    (_set(("schema_version",), 3), "schema_version 3"),
    (_set(("variants", 0, "timeline", "time_s"), [0.0, 1e308]), "variants[0].timeline.time_s"),
    (_set(("variants", 0, "duration_s"), float("nan")), "variants[0].duration_s"),
    (_set(("comparison", "rows", 0, "duration_s"), float("inf")), "comparison.rows[0]"),
]


@pytest.mark.parametrize(("change", "field"), CASES)
def test_report_and_compare_name_the_unreadable_field(tmp_path, change, field):
    bad = make_report({"a": 100, "b": 200})
    change(bad)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(bad))
    good = tmp_path / "good.json"
    good.write_text(json.dumps(make_report({"a": 100, "b": 200})))
    for args in (
        ["report", str(path), "--html", str(tmp_path / "r.html"), "--trace", str(tmp_path / "t")],
        ["compare", str(good), str(path)],
    ):
        res = runner.invoke(app, args)
        assert res.exit_code == 2, res.output
        assert f"{path}: unreadable report: {field}" in res.output
        assert "Traceback" not in res.output


def test_a_real_report_is_readable(tmp_path):
    (tmp_path / "s.yaml").write_text(
        "name: r\ninputs:\n  x: {shape: [8, 8]}\nprogram:\n  - {id: y, op: relu, in: x}\n"
        "  - {id: z, op: sum, in: y}\nphases: [forward]\n"
    )
    report = run_scenario(tmp_path / "s.yaml")
    assert check_report(copy.deepcopy(report)) == report


def test_json_nested_too_deep_is_unreadable_not_a_crash(tmp_path):
    path = tmp_path / "deep.json"
    path.write_text("[" * 100000 + "]" * 100000)
    res = runner.invoke(app, ["report", str(path)])
    assert res.exit_code == 2 and "nested too deep" in res.output


def test_unreadable_report_is_invalid_input():
    with pytest.raises(UnreadableReport) as info:
        check_report({"schema_version": 1}, "x.json")
    assert info.value.exit_code == 2
    assert str(info.value).startswith("x.json: unreadable report: ")


@pytest.mark.parametrize("command", ["report", "compare", "check"])
def test_a_5000_digit_integer_in_a_report_is_exit_2(tmp_path, command):
    """Found by the fuzzer: Python's json refuses integers of more than 4300 digits with a
    ValueError that is not a JSONDecodeError."""
    path = tmp_path / "big.json"
    text = json.dumps(make_report({"a": 1})).replace(
        '"num_allocs": 1', '"num_allocs": ' + "9" * 5000
    )
    path.write_text(text)
    (tmp_path / "s.yaml").write_text(
        "name: r\ninputs:\n  x: {shape: [2]}\nprogram:\n  - {id: y, op: relu, in: x}\n"
    )
    args = {
        "report": ["report", str(path)],
        "compare": ["compare", str(path), str(path)],
        "check": [
            "check",
            str(tmp_path / "s.yaml"),
            "--baseline",
            str(path),
            "--runs",
            str(tmp_path / "r"),
        ],
    }[command]
    res = runner.invoke(app, args)
    assert res.exit_code == 2, res.output
    assert "4300 digits" in res.output and "Traceback" not in res.output
