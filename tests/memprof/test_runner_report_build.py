"""The report builder on synthetic allocator records: timeline, peak, ops rows, comparison, status."""

import datetime as dt

import jsonschema
import pytest

from memprof.reports.build import (
    ScenarioInfo,
    assemble,
    comparison,
    evaluate,
    op_row,
    overall_status,
    peak,
    timeline,
)
from memprof.runner.recorder import Record
from memprof.scenario.model import Expectation
from memprof.schemas import REPORT, read_schema

MiB = 2**20


def alloc(
    seq, nbytes, allocated, storage, node="n", category="activation", tensor=None, phase="forward"
):
    return Record(
        seq,
        1_000 + seq,
        "alloc",
        nbytes,
        nbytes,
        allocated,
        allocated,
        storage,
        node,
        "op",
        phase,
        0,
        None,
        category,
        tensor,
    )


def free(seq, owner, allocated, node="n"):
    return Record(
        seq,
        1_000 + seq,
        "free",
        owner.bytes,
        owner.requested,
        allocated,
        allocated,
        owner.storage,
        node,
        None,
        "forward",
        0,
        owner,
    )


def test_timeline_is_columnar_and_a_free_carries_its_allocation_category_and_name():
    a = alloc(0, 64, 64, 1, node="<inputs>", category="input", tensor="x", phase="setup")
    b = alloc(1, 32, 96, 2, tensor="y")
    recs = [a, b, free(2, b, 64, node="m")]
    cols = timeline(recs, t0_ns=1_000)
    assert {len(v) for v in cols.values()} == {3}
    assert cols["action"] == ["alloc", "alloc", "free"]
    assert cols["allocated"] == [64, 96, 64]
    assert cols["tensor"] == ["x", "y", "y"]
    assert cols["node"] == ["<inputs>", "n", "m"]
    assert cols["time_s"] == [0.0, 1e-9, 2e-9]
    assert cols["storage"] == [1, 2, 2]


def test_a_category_refined_later_shows_on_both_alloc_and_free():
    b = alloc(0, 32, 32, 2)
    recs = [b, free(1, b, 0)]
    b.category = "temporary"
    assert timeline(recs, 0)["category"] == ["temporary", "temporary"]


def test_peak_is_the_first_maximum_and_lists_what_was_live_there():
    x = alloc(0, 4 * MiB, 4 * MiB, 1, category="input", tensor="x")
    t = alloc(1, 2 * MiB, 6 * MiB, 2, category="temporary")
    y = alloc(3, 2 * MiB, 6 * MiB, 3, tensor="y")
    recs = [x, t, free(2, t, 4 * MiB), y]
    p = peak(recs)
    assert p["event_index"] == 1
    assert p["allocated_bytes"] == 6 * MiB
    assert [(e["tensor"], e["bytes"], e["category"]) for e in p["live"]] == [
        ("x", 4 * MiB, "input"),
        (None, 2 * MiB, "temporary"),
    ]
    assert p["by_category"] == {"input": 4 * MiB, "temporary": 2 * MiB}


def test_peak_of_no_events_is_zero():
    assert peak([])["allocated_bytes"] == 0


def test_op_row_sums_its_records_and_marks_in_place_cost():
    t = alloc(1, 10, 110, 2)
    row = op_row(
        node="h",
        op="sin",
        phase="forward",
        iteration=0,
        records=[t, free(2, t, 100)],
        allocated_before=100,
        duration_s=0.5,
        inplace=True,
        clone_bytes=10,
    )
    assert row == {
        "node": "h",
        "op": "sin",
        "phase": "forward",
        "iteration": 0,
        "allocated_bytes": 10,
        "freed_bytes": 10,
        "peak_bytes": 110,
        "duration_s": 0.5,
        "inplace": True,
        "inplace_cost": "clone",
        "clone_bytes": 10,
    }
    free_row = op_row(
        node="h",
        op="relu",
        phase="forward",
        iteration=0,
        records=[],
        allocated_before=100,
        duration_s=0.1,
        inplace=True,
    )
    assert (free_row["inplace_cost"], free_row["peak_bytes"]) == ("free", 100)


def variant(name, peak_bytes, status="ok", error=None, expectations=(), duration=1.0):
    return {
        "name": name,
        "params": {},
        "status": status,
        "error": error,
        "device": "cpu",
        "allocator": "exact",
        "peak_allocated_bytes": peak_bytes,
        "peak_reserved_bytes": peak_bytes,
        "baseline_bytes": 64,
        "final_allocated_bytes": 64,
        "num_allocs": 1,
        "num_frees": 0,
        "duration_s": duration,
        "program_duration_s": duration,
        "timeline": timeline([], 0),
        "phases": [],
        "peak": peak([]),
        "ops": [],
        "warnings": [],
        "expectations": list(expectations),
    }


def test_comparison_against_the_baseline_variant():
    comp = comparison(
        [variant("inplace", 64, duration=0.5), variant("out_of_place", 128)], "out_of_place"
    )
    rows = {r["variant"]: r for r in comp["rows"]}
    assert comp["baseline"] == "out_of_place"
    assert (
        rows["inplace"]["delta_bytes"],
        rows["inplace"]["ratio"],
        rows["inplace"]["saving_pct"],
    ) == (-64, 0.5, 50.0)
    assert rows["inplace"]["program_duration_ratio"] == 0.5
    assert (rows["out_of_place"]["delta_bytes"], rows["out_of_place"]["is_baseline"]) == (0, True)


def test_comparison_falls_back_to_the_first_variant():
    assert comparison([variant("a", 10), variant("b", 20)], "gone")["baseline"] == "a"


def test_expectations_sizes_errors_and_counts():
    v = variant(
        "a",
        64,
        status="error",
        error={"type": "RuntimeError", "message": "a leaf Variable ...", "node": "x"},
    )
    exp = Expectation.model_validate(
        {
            "peak_allocated": "<= 64",
            "baseline": 65,
            "error": {"type": "RuntimeError", "message": "leaf Variable"},
            "warnings": {"stale_read": 0},
        }
    )
    rows = {r["metric"]: r for r in evaluate(exp, v)}
    assert rows["peak_allocated"]["passed"] and not rows["baseline"]["passed"]
    assert rows["baseline"]["message"] == "baseline == 65 bytes (actual 64 bytes)"
    assert rows["error"]["passed"] and rows["status"]["passed"]
    assert rows["warnings:stale_read"]["passed"]


def test_sizes_that_round_alike_are_shown_in_bytes_too():
    # 24.09 MiB against 24.09 MiB (a caching-model run's 512-byte blocks) says nothing: bytes do
    v = variant("a", 25_262_080)
    v["peak"] = {**v["peak"], "by_category": {"optimizer_state": 16_793_600}}
    exp = Expectation.model_validate(
        {
            "peak_allocated": "== 25260032",
            "peak_by_category": {"optimizer_state": 16_793_616},
            "baseline": 64,
        }
    )
    rows = {r["metric"]: r for r in evaluate(exp, v)}
    assert rows["peak_allocated"]["message"] == (
        "peak_allocated == 24.09 MiB = 25,260,032 bytes (actual 24.09 MiB = 25,262,080 bytes)"
    )
    assert rows["peak_by_category:optimizer_state"]["message"] == (
        "optimizer_state at the peak == 16.02 MiB = 16,793,616 bytes "
        "(actual 16.02 MiB = 16,793,600 bytes)"
    )
    assert rows["baseline"]["message"] == "baseline == 64 bytes (actual 64 bytes)"  # equal: short


def test_missing_expected_error_fails():
    exp = Expectation.model_validate({"error": {"type": "RuntimeError"}})
    rows = {r["metric"]: r for r in evaluate(exp, variant("a", 1))}
    assert not rows["error"]["passed"]
    assert rows["error"]["message"] == "expected RuntimeError, found no error"


def test_values_expectation_uses_the_observed_range():
    exp = Expectation.model_validate({"values": {"a.grad": 4}})
    [ok] = evaluate(exp, variant("a", 1), {"a.grad": (4.0, 4.0)})
    [bad] = evaluate(exp, variant("a", 1), {"a.grad": (2.0, 4.0)})
    assert ok["passed"] and not bad["passed"]
    assert bad["message"] == "every element of a.grad == 4 (actual 2 .. 4)"


def test_overall_status():
    passed = {"metric": "error", "passed": True}
    failed = {"metric": "peak_allocated", "passed": False}
    assert overall_status([variant("a", 1)]) == "ok"
    assert overall_status([variant("a", 1, status="error", expectations=[passed])]) == "ok"
    assert overall_status([variant("a", 1, status="oom")]) == "failed"
    assert overall_status([variant("a", 1, expectations=[failed])]) == "expectation_failed"


def test_assembled_report_matches_the_shipped_schema():
    x = alloc(0, 64, 64, 1, category="input", tensor="x", phase="setup")
    v = variant("a", 64)
    v["timeline"] = timeline([x], 0)
    v["peak"] = peak([x])
    info = ScenarioInfo(name="relu block", description="d", path="s.yaml", sha256="0" * 64)
    report = assemble(
        info,
        {
            "device": "cpu",
            "backend": "numpy",
            "allocator": "exact",
            "python": "3",
            "numpy": "2",
            "cupy": None,
            "platform": "p",
            "git_commit": None,
        },
        [v],
        None,
        created=dt.datetime(2026, 11, 21, 5, 15, tzinfo=dt.timezone.utc),
    )
    jsonschema.Draft202012Validator(read_schema(REPORT)).validate(report)
    assert report["run_id"].startswith("20261121T051500Z-relu-block-")
    assert report["created_at"] == "2026-11-21T05:15:00Z"
    bad = {**report, "status": "fine"}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft202012Validator(read_schema(REPORT)).validate(bad)
