"""memprof.check.baseline: a check result, a run report or a directory of them; bad ones are
named with the reason (InvalidInput, exit 2)."""

from __future__ import annotations

import json

import pytest

from memprof.check import combined_result, evaluate_report, load_baseline
from memprof.errors import InvalidInput
from tests.memprof.test_check_evaluate import MiB, make_report, make_variant


def _write(path, data):
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def test_a_run_report_is_a_baseline(tmp_path):
    file = _write(
        tmp_path / "run.json",
        make_report("relu", [make_variant("a", 64 * MiB), make_variant("b", 32 * MiB)]),
    )

    base = load_baseline(file)

    assert base.get("relu", "a").peak_allocated_bytes == 64 * MiB
    assert base.get("relu", "b").peak_allocated_bytes == 32 * MiB
    assert base.get("relu", "b").source == str(file)
    assert base.get("relu", "c") is None


def test_a_check_result_is_a_baseline(tmp_path):
    report = make_report("relu", [make_variant("a", 64 * MiB)])
    combined = combined_result(evaluate_report(report), [report], baseline=None, max_increase_pct=5)
    file = _write(tmp_path / "check.json", combined)

    base = load_baseline(file)

    entry = base.get("relu", "a")
    assert (entry.peak_allocated_bytes, entry.allocator, entry.device) == (64 * MiB, "exact", "cpu")


def test_in_a_directory_the_newest_report_of_a_variant_wins(tmp_path):
    _write(
        tmp_path / "old.json",
        make_report("relu", [make_variant("a", 64 * MiB)], created_at="2026-01-01T00:00:00Z"),
    )
    (tmp_path / "sub").mkdir()
    _write(
        tmp_path / "sub" / "new.json",
        make_report("relu", [make_variant("a", 48 * MiB)], created_at="2026-02-01T00:00:00Z"),
    )
    _write(tmp_path / "other.json", make_report("conv", [make_variant("a", 1 * MiB)]))
    (tmp_path / "history.sqlite").write_bytes(b"SQLite format 3\0")
    (tmp_path / ".run.json.123.tmp").write_text("{half a fi")

    base = load_baseline(tmp_path)

    assert base.get("relu", "a").peak_allocated_bytes == 48 * MiB
    assert base.get("conv", "a").peak_allocated_bytes == 1 * MiB
    assert len(base.files) == 3


def test_variants_that_errored_are_kept_with_their_status_and_no_peak(tmp_path):
    err = {"type": "RuntimeError", "message": "boom", "node": "act"}
    file = _write(
        tmp_path / "run.json",
        make_report(
            "relu", [make_variant("a", None, status="error", error=err), make_variant("b", 8 * MiB)]
        ),
    )

    base = load_baseline(file)

    a, b = base.get("relu", "a"), base.get("relu", "b")
    assert (a.status, a.peak_allocated_bytes) == ("error", None)
    assert (b.status, b.peak_allocated_bytes) == ("ok", 8 * MiB)


def test_a_missing_baseline_is_invalid_input_naming_the_path(tmp_path):
    with pytest.raises(InvalidInput) as info:
        load_baseline(tmp_path / "nope.json")

    assert (
        str(info.value)
        == f"{tmp_path / 'nope.json'}: baseline not found (no such file or directory)"
    )
    assert info.value.exit_code == 2


def test_malformed_json_is_reported_with_file_line_and_column(tmp_path):
    file = tmp_path / "bad.json"
    file.write_text('{\n  "schema_version": 1,\n  "variants": [,]\n}\n')

    with pytest.raises(InvalidInput) as info:
        load_baseline(file)

    assert info.value.problems == [f"{file}:3:16: invalid JSON: Expecting value"]


@pytest.mark.parametrize(
    "content, problem",
    [
        ("", "empty file; expected a memprof run report or check result (JSON)"),
        (
            "[1, 2]",
            "expected a memprof run report or check result (a JSON object), found a list of 2 item(s)",
        ),
        (
            '{"name": "x"}',
            "expected a memprof run report (with `scenario` and `variants`) or a "
            '`memprof check --json` result (`"kind": "memprof-check"`), found an object '
            "with keys name",
        ),
        (
            '{"schema_version": 3, "scenario": {"name": "s"}, "variants": []}',
            "expected a report with schema_version 1, 2, found 3 (written by a newer memprof?)",
        ),
        (
            '{"schema_version": 1, "scenario": {"name": "s"}, "variants": [{"name": "v", "status": "ok", '
            '"peak_allocated_bytes": "64 MiB"}]}',
            "expected variants[0].peak_allocated_bytes to be a number of bytes, found a string ('64 MiB')",
        ),
        (
            '{"kind": "memprof-check", "schema_version": 1, "results": {}}',
            "expected `results` to be a list, found an object",
        ),
        (
            '{"kind": "memprof-check", "schema_version": 1, "results": [{"scenario": "s", "status": "ok", '
            '"peak_allocated_bytes": 1}]}',
            "expected results[0].variant to be a string, found nothing (null or missing)",
        ),
    ],
)
def test_a_file_that_is_not_a_baseline_says_why(tmp_path, content, problem):
    file = tmp_path / "base.json"
    file.write_text(content)

    with pytest.raises(InvalidInput) as info:
        load_baseline(file)

    assert info.value.problems == [f"{file}: {problem}"]


def test_every_bad_file_in_a_directory_is_named(tmp_path):
    _write(tmp_path / "good.json", make_report("relu", [make_variant("a", 64 * MiB)]))
    (tmp_path / "a.json").write_text("{")
    (tmp_path / "b.json").write_text("null")

    with pytest.raises(InvalidInput) as info:
        load_baseline(tmp_path)

    assert [p.split(":")[0] for p in info.value.problems] == [
        str(tmp_path / "a.json"),
        str(tmp_path / "b.json"),
    ]


def test_a_directory_without_reports_is_invalid_input(tmp_path):
    (tmp_path / "notes.txt").write_text("hi")

    with pytest.raises(InvalidInput, match="no baseline in this directory"):
        load_baseline(tmp_path)
