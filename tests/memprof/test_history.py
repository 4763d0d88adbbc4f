"""memprof.history: rows appended to a real SQLite file and read back, also from several
processes writing at once; and `memprof history` printing the trend."""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from memprof import history
from memprof.cli.app import app
from tests.memprof.test_check_evaluate import MiB, make_report, make_variant, size_expectation


def _report(peak_a, peak_b, created_at, *, commit="c0ffee", scenario="relu"):
    return make_report(
        scenario,
        [
            make_variant(
                "out_of_place",
                peak_a,
                expectations=[size_expectation("peak_allocated", "<=", 100 * MiB, peak_a)],
            ),
            make_variant("inplace", peak_b),
        ],
        created_at=created_at,
        git_commit=commit,
        run_id=f"{created_at.replace(':', '').replace('-', '')}-{scenario}-{peak_a}",
    )


def test_append_then_query_reads_every_variant_back(tmp_path):
    report = _report(128 * MiB, 64 * MiB, "2026-11-21T05:15:00Z")

    added = history.append(tmp_path, report)

    assert added == 2
    rows = history.query(tmp_path, "relu")
    assert rows == [
        {
            "run_id": report["run_id"],
            "created_at": "2026-11-21T05:15:00Z",
            "scenario": "relu",
            "variant": "out_of_place",
            "peak_allocated_bytes": 128 * MiB,
            "peak_reserved_bytes": 128 * MiB,
            "status": "ok",
            "passed": False,
            "duration_s": 0.25,
            "git_commit": "c0ffee",
            "device": "cpu",
            "allocator": "exact",
            "source": "run",
            "scenario_path": "scenarios/relu.yaml",
        },
        {
            "run_id": report["run_id"],
            "created_at": "2026-11-21T05:15:00Z",
            "scenario": "relu",
            "variant": "inplace",
            "peak_allocated_bytes": 64 * MiB,
            "peak_reserved_bytes": 64 * MiB,
            "status": "ok",
            "passed": True,
            "duration_s": 0.25,
            "git_commit": "c0ffee",
            "device": "cpu",
            "allocator": "exact",
            "source": "run",
            "scenario_path": "scenarios/relu.yaml",
        },
    ]
    assert (tmp_path / "history.sqlite").is_file()


def test_rows_come_back_oldest_first_filtered_and_limited(tmp_path):
    history.append(tmp_path, _report(3 * MiB, 1, "2026-11-23T00:00:00Z"))
    history.append(tmp_path, _report(1 * MiB, 1, "2026-11-21T00:00:00Z"))
    history.append(tmp_path, _report(2 * MiB, 1, "2026-11-22T00:00:00Z"))
    history.append(tmp_path, _report(9 * MiB, 1, "2026-11-22T00:00:00Z", scenario="conv"))

    peaks = [
        r["peak_allocated_bytes"] for r in history.query(tmp_path, "relu", variant="out_of_place")
    ]
    newest_two = history.query(tmp_path, "relu", variant="out_of_place", limit=2)

    assert peaks == [1 * MiB, 2 * MiB, 3 * MiB]
    assert [r["peak_allocated_bytes"] for r in newest_two] == [2 * MiB, 3 * MiB]
    assert len(history.query(tmp_path)) == 8
    assert history.scenarios(tmp_path) == ["conv", "relu"]


def test_appending_the_same_report_twice_adds_nothing(tmp_path):
    report = _report(1, 2, "2026-11-21T00:00:00Z")

    assert history.append(tmp_path, report) == 2
    assert history.append(tmp_path, report) == 0
    assert len(history.query(tmp_path)) == 2


def test_a_callers_verdict_overrides_the_expectations(tmp_path):
    history.append(
        tmp_path, _report(1, 2, "2026-11-21T00:00:00Z"), source="check", passed={"inplace": False}
    )

    rows = {r["variant"]: r for r in history.query(tmp_path)}

    assert rows["inplace"]["passed"] is False and rows["out_of_place"]["passed"] is True
    assert rows["inplace"]["source"] == "check"


def test_query_without_history_is_empty_and_creates_nothing(tmp_path):
    assert history.query(tmp_path / "runs", "relu") == []
    assert history.scenarios(tmp_path / "runs") == []
    assert not (tmp_path / "runs").exists()


def test_the_database_is_in_wal_mode_with_a_schema_version(tmp_path):
    history.append(tmp_path, _report(1, 2, "2026-11-21T00:00:00Z"))

    conn = sqlite3.connect(tmp_path / "history.sqlite")
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("PRAGMA user_version").fetchone()[0] == history.SCHEMA_VERSION
    finally:
        conn.close()


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_without_a_commit_in_the_report_it_asks_git(tmp_path, monkeypatch):
    repo = tmp_path / "repo"
    repo.mkdir()
    git = [
        "git",
        "-c",
        "user.name=t",
        "-c",
        "user.email=t@example.com",
        "-c",
        "init.defaultBranch=main",
    ]
    subprocess.run([*git, "init", "-q"], cwd=repo, check=True)
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "init"], cwd=repo, check=True)
    head = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True, check=True
    ).stdout.strip()
    monkeypatch.chdir(repo)

    history.append(tmp_path / "runs", _report(1, 2, "2026-11-21T00:00:00Z", commit=None))

    assert {r["git_commit"] for r in history.query(tmp_path / "runs")} == {head}


def test_outside_a_checkout_the_commit_is_none(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))

    history.append(tmp_path / "runs", _report(1, 2, "2026-11-21T00:00:00Z", commit=None))

    assert {r["git_commit"] for r in history.query(tmp_path / "runs")} == {None}


WRITER = textwrap.dedent("""
    import os, sys, time
    from memprof import history
    from tests.memprof.test_history import _report

    runs, go, worker, count = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    while not os.path.exists(go):
        time.sleep(0.001)
    for i in range(count):
        history.append(runs, _report(worker * 1000 + i, 1, f"2026-11-21T00:00:{i % 60:02d}Z",
                                     scenario=f"w{worker}"))
""")


def test_processes_writing_at_once_lose_nothing(tmp_path):
    """Four processes append 40 reports each, released at the same instant."""
    runs, go = tmp_path / "runs", tmp_path / "go"
    workers, count = 4, 40
    root = str(Path(__file__).resolve().parents[2])
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(runs), str(go), str(w), str(count)],
            cwd=root,
            stderr=subprocess.PIPE,
            text=True,
        )
        for w in range(workers)
    ]
    time.sleep(0.5)  # let every writer reach the starting line
    go.touch()

    errors = [p.communicate(timeout=120)[1] for p in procs]

    assert [p.returncode for p in procs] == [0] * workers, errors
    rows = history.query(runs)
    assert len(rows) == workers * count * 2
    for w in range(workers):
        peaks = sorted(
            r["peak_allocated_bytes"] for r in history.query(runs, f"w{w}", variant="out_of_place")
        )
        assert peaks == [w * 1000 + i for i in range(count)]


# --- memprof history --------------------------------------------------------------------------


def _cli(*args):
    return CliRunner().invoke(app, ["history", *map(str, args)])


def test_history_prints_the_trend_of_each_variant(tmp_path):
    history.append(
        tmp_path, _report(64 * MiB, 64 * MiB, "2026-11-21T00:00:00Z", commit="aaaaaaaa11")
    )
    history.append(
        tmp_path, _report(128 * MiB, 64 * MiB, "2026-11-22T00:00:00Z", commit="bbbbbbbb22")
    )

    result = _cli("relu", "--runs", tmp_path)

    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].startswith(
        "relu/out_of_place: 2 runs, latest peak 128.00 MiB (+100.0% since the first)"
    )
    assert lines[2].split() == [
        "2026-11-21",
        "00:00:00Z",
        "aaaaaaaa",
        "ok",
        "pass",
        "64.00",
        "MiB",
        "64.00",
        "MiB",
        "0.25",
        "s",
        "run",
    ]
    assert lines[3].split()[2:9] == ["bbbbbbbb", "ok", "FAIL", "128.00", "MiB", "+100.0%", "128.00"]
    assert (
        "relu/inplace: 2 runs, latest peak 64.00 MiB (unchanged since the first)" in result.stdout
    )


def test_history_of_an_unknown_scenario_exits_2_naming_the_known_ones(tmp_path):
    history.append(tmp_path, _report(1, 1, "2026-11-21T00:00:00Z"))

    result = _cli("relu-typo", "--runs", tmp_path)

    assert result.exit_code == 2
    assert "no runs of scenario 'relu-typo' recorded; recorded scenarios: relu" in result.stderr


def test_history_of_an_unknown_variant_exits_2_naming_the_recorded_ones(tmp_path):
    history.append(tmp_path, _report(1, 1, "2026-11-21T00:00:00Z"))

    result = _cli("relu", "--variant", "in_place", "--out-dir", tmp_path)  # the other spelling

    assert result.exit_code == 2
    assert result.stderr.strip() == (
        f"error: {tmp_path / 'history.sqlite'}: no runs of variant 'in_place' of scenario 'relu' "
        "recorded; recorded variants: inplace, out_of_place"
    )


def test_history_without_any_runs_says_so(tmp_path):
    result = _cli("--runs", tmp_path)

    assert result.exit_code == 0
    assert result.stdout.startswith("no history in ")


def test_history_as_json_is_the_query_rows(tmp_path):
    import json

    history.append(tmp_path, _report(1, 2, "2026-11-21T00:00:00Z"))

    result = _cli("relu", "--variant", "inplace", "--json", "--runs", tmp_path)

    assert json.loads(result.stdout) == history.query(tmp_path, "relu", variant="inplace")


def test_a_corrupt_history_file_exits_2_naming_it(tmp_path):
    (tmp_path / "history.sqlite").write_text("this is not a database")

    result = _cli("--runs", tmp_path)

    assert result.exit_code == 2
    assert result.stderr.strip() == (
        f"error: {tmp_path / 'history.sqlite'}: cannot read the history: file is not a database"
    )
