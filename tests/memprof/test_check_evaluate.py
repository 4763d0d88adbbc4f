"""memprof.check.evaluate: budgets, expectations, unexpected errors and regressions, judged on
synthetic reports that follow docs/report-format.md.

The builders at the top (`make_report`, `make_variant`, `size_expectation`) are shared with the
other test_check_* modules.
"""

from __future__ import annotations

from typing import Any

import pytest

from memprof.check import Baseline, BaselineEntry, evaluate_report, result_lines
from memprof.units import format_bytes

MiB = 1024**2


# --- synthetic reports ------------------------------------------------------------------------


def size_expectation(metric: str, op: str, expected: int, actual: int | None) -> dict[str, Any]:
    """An expectation row as the runner writes it."""
    ops = {
        "<=": actual is not None and actual <= expected,
        "<": actual is not None and actual < expected,
        "==": actual == expected,
        ">=": actual is not None and actual >= expected,
    }
    shown = "not measured" if actual is None else format_bytes(actual)
    return {
        "metric": metric,
        "op": op,
        "expected": expected,
        "actual": actual,
        "passed": ops[op],
        "message": f"{metric} {op} {format_bytes(expected)} (actual {shown})",
    }


def make_variant(
    name: str,
    peak: int | None,
    *,
    reserved: int | None = None,
    status: str = "ok",
    error: dict | None = None,
    expectations: list[dict] | None = None,
    live: list[dict] | None = None,
    device: str = "cpu",
    allocator: str = "exact",
    duration_s: float = 0.25,
) -> dict[str, Any]:
    """One variant: an input of half the peak, then one activation (when the peak allows)."""
    peak_v = peak or 0
    half = peak_v // 2
    if live is None:
        live = [
            {"tensor": "x", "bytes": half, "category": "input", "node": "<inputs>", "op": "rand"},
            {
                "tensor": "y",
                "bytes": peak_v - half,
                "category": "activation",
                "node": "act",
                "op": "relu",
            },
        ]
    return {
        "name": name,
        "params": {},
        "status": status,
        "error": error,
        "device": device,
        "allocator": allocator,
        "peak_allocated_bytes": peak,
        "peak_reserved_bytes": reserved if reserved is not None else peak,
        "baseline_bytes": half,
        "final_allocated_bytes": peak,
        "num_allocs": 2,
        "num_frees": 0,
        "duration_s": duration_s,
        "timeline": {
            "seq": [0, 1],
            "time_s": [0.0, 0.001],
            "action": ["alloc", "alloc"],
            "bytes": [half, peak_v - half],
            "requested": [half, peak_v - half],
            "allocated": [half, peak_v],
            "reserved": [half, peak_v],
            "node": ["<inputs>", "act"],
            "op": ["rand", "relu"],
            "phase": ["setup", "forward"],
            "category": ["input", "activation"],
            "tensor": ["x", "y"],
            "iteration": [0, 0],
        },
        "phases": [
            {
                "name": "forward",
                "iteration": 0,
                "start_index": 1,
                "end_index": 2,
                "start_s": 0.001,
                "end_s": 0.002,
            }
        ],
        "peak": {
            "event_index": 1,
            "allocated_bytes": peak_v,
            "reserved_bytes": peak_v,
            "live": live,
            "by_category": {"input": half, "activation": peak_v - half},
        },
        "ops": [
            {
                "node": "act",
                "op": "relu",
                "phase": "forward",
                "iteration": 0,
                "allocated_bytes": peak_v - half,
                "freed_bytes": 0,
                "peak_bytes": peak_v,
                "duration_s": 0.001,
                "inplace": False,
                "inplace_cost": None,
                "clone_bytes": 0,
            }
        ],
        "warnings": [],
        "expectations": list(expectations or []),
    }


def make_report(
    scenario: str,
    variants: list[dict],
    *,
    created_at: str = "2026-11-21T05:15:00Z",
    run_id: str | None = None,
    path: str | None = None,
    git_commit: str | None = None,
) -> dict[str, Any]:
    names = [v["name"] for v in variants]
    failed = any(not e["passed"] for v in variants for e in v["expectations"])
    return {
        "schema_version": 1,
        "tool": {"name": "memprof", "version": "0.1.0"},
        "run_id": run_id or f"{created_at.replace('-', '').replace(':', '')}-{scenario}-abc123",
        "created_at": created_at,
        "scenario": {
            "name": scenario,
            "description": "",
            "path": path or f"scenarios/{scenario}.yaml",
            "sha256": "0" * 64,
        },
        "environment": {
            "device": "cpu",
            "backend": "numpy",
            "allocator": "exact",
            "python": "3.11.7",
            "numpy": "2.0.0",
            "cupy": None,
            "platform": "Linux",
            "git_commit": git_commit,
        },
        "status": "expectation_failed" if failed else "ok",
        "baseline_variant": names[0] if names else None,
        "variants": variants,
        "comparison": {"baseline": names[0] if names else None, "rows": []},
    }


def baseline_of(report: dict[str, Any], path: str = "base.json") -> Baseline:
    """A Baseline holding a report's peaks, as load_baseline would build it."""
    base = Baseline(path=path)
    for v in report["variants"]:
        base.add(
            BaselineEntry(
                scenario=report["scenario"]["name"],
                variant=v["name"],
                peak_allocated_bytes=v["peak_allocated_bytes"],
                peak_reserved_bytes=v["peak_reserved_bytes"],
                source=path,
                status=v["status"],
                run_id=report["run_id"],
                created_at=report["created_at"],
                device=v["device"],
                allocator=v["allocator"],
            )
        )
    return base


# --- budgets ----------------------------------------------------------------------------------


def test_a_budget_that_holds_passes():
    report = make_report(
        "relu",
        [
            make_variant(
                "inplace",
                64 * MiB,
                expectations=[size_expectation("peak_allocated", "<=", 64 * MiB, 64 * MiB)],
            )
        ],
    )

    [result] = evaluate_report(report)

    assert result.passed
    assert result.name == "relu/inplace"
    assert result.checks[0].kind == "budget"
    assert result.explanation() == []


def test_a_broken_budget_is_explained_like_pytest_memray_with_the_tensors_at_the_peak():
    report = make_report(
        "relu",
        [
            make_variant(
                "out_of_place",
                128 * MiB,
                expectations=[size_expectation("peak_allocated", "<=", 64 * MiB, 128 * MiB)],
            )
        ],
    )

    [result] = evaluate_report(report)

    assert not result.passed
    lines = result.explanation()
    assert lines[0] == "relu/out_of_place was limited to 64.00 MiB but peaked at 128.00 MiB"
    assert lines[1] == "live at the peak (128.00 MiB):"
    assert "64.00 MiB" in lines[2] and "node <inputs> (rand)" in lines[2]
    assert "node act (relu)" in lines[3]


@pytest.mark.parametrize(
    "metric, words",
    [
        ("peak_reserved", "was limited to 64.00 MiB reserved but reserved 128.00 MiB"),
        ("final_allocated", "was limited to 64.00 MiB at the end but still held 128.00 MiB"),
        (
            "peak_over_baseline",
            "was limited to 64.00 MiB above its inputs and parameters but added 128.00 MiB",
        ),
    ],
)
def test_each_size_metric_reads_naturally_when_over_budget(metric, words):
    report = make_report(
        "s",
        [
            make_variant(
                "v", 256 * MiB, expectations=[size_expectation(metric, "<=", 64 * MiB, 128 * MiB)]
            )
        ],
    )

    [result] = evaluate_report(report)

    assert result.explanation()[0] == f"s/v {words}"


def test_an_exact_size_expectation_that_misses_says_what_was_measured():
    report = make_report(
        "s",
        [
            make_variant(
                "v",
                96 * MiB,
                expectations=[size_expectation("peak_allocated", "==", 64 * MiB, 96 * MiB)],
            )
        ],
    )

    [result] = evaluate_report(report)

    assert result.checks[0].kind == "budget"
    assert (
        result.explanation()[0]
        == "s/v was expected to measure peak_allocated == 64.00 MiB but measured 96.00 MiB"
    )


def test_a_non_size_expectation_that_fails_quotes_the_runner_message():
    exp = {
        "metric": "warnings:stale_read",
        "op": "==",
        "expected": 0,
        "actual": 1,
        "passed": False,
        "message": "stale_read warnings == 0 (actual 1)",
    }
    report = make_report("s", [make_variant("v", 8 * MiB, expectations=[exp])])

    [result] = evaluate_report(report)

    assert result.checks[0].kind == "expectation"
    assert (
        result.explanation()[0]
        == "s/v did not meet its expectation: stale_read warnings == 0 (actual 1)"
    )


# --- variants that errored --------------------------------------------------------------------


def test_a_variant_that_errors_unexpectedly_fails_with_its_error_and_node():
    err = {"type": "OutOfMemoryError", "message": "tried to allocate 64.00 MiB", "node": "act"}
    report = make_report("s", [make_variant("v", 64 * MiB, status="oom", error=err)])

    [result] = evaluate_report(report)

    assert not result.passed
    assert result.checks[0].kind == "status"
    assert (
        result.explanation()[0]
        == "s/v failed at node act (oom): OutOfMemoryError: tried to allocate 64.00 MiB"
    )


def test_a_variant_expected_to_fail_passes_on_its_expectation():
    err = {"type": "OutOfMemoryError", "message": "tried to allocate", "node": "act"}
    exp = {
        "metric": "status",
        "op": "==",
        "expected": "oom",
        "actual": "oom",
        "passed": True,
        "message": "status == oom (actual oom)",
    }
    report = make_report(
        "s", [make_variant("v", 64 * MiB, status="oom", error=err, expectations=[exp])]
    )

    [result] = evaluate_report(report)

    assert result.passed


# --- regressions ------------------------------------------------------------------------------


def test_a_peak_beyond_the_allowed_increase_over_the_baseline_is_a_regression():
    base = baseline_of(make_report("relu", [make_variant("v", 64 * MiB)]))
    report = make_report("relu", [make_variant("v", 72 * MiB)])  # +12.5%

    [result] = evaluate_report(report, base, max_increase_pct=5.0)

    assert not result.passed
    check = result.checks[-1]
    assert (check.kind, check.metric, check.passed) == ("regression", "peak_allocated", False)
    assert result.explanation()[0] == (
        "relu/v peaked at 72.00 MiB, 12.5% above its baseline of 64.00 MiB (allowed: +5%)"
    )


@pytest.mark.parametrize(
    "peak, passed",
    [
        (64 * MiB, True),
        (int(64 * MiB * 1.05), True),
        (int(64 * MiB * 1.05) + 1, False),
        (32 * MiB, True),
    ],
)
def test_the_allowed_increase_is_inclusive(peak, passed):
    base = baseline_of(make_report("relu", [make_variant("v", 64 * MiB)]))

    [result] = evaluate_report(
        make_report("relu", [make_variant("v", peak)]), base, max_increase_pct=5.0
    )

    assert result.passed is passed


def test_zero_allowed_increase_fails_on_a_single_byte():
    base = baseline_of(make_report("relu", [make_variant("v", 64 * MiB)]))

    [result] = evaluate_report(
        make_report("relu", [make_variant("v", 64 * MiB + 1)]), base, max_increase_pct=0.0
    )

    assert not result.passed


def test_a_variant_missing_from_the_baseline_passes_with_a_note():
    base = baseline_of(make_report("relu", [make_variant("other", 64 * MiB)]))

    [result] = evaluate_report(make_report("relu", [make_variant("v", 640 * MiB)]), base)

    assert result.passed
    assert result.notes == ["no baseline for relu/v in base.json"]


def test_a_variant_that_errored_in_the_baseline_is_not_compared():
    err = {"type": "RuntimeError", "message": "boom", "node": "act"}
    base = baseline_of(make_report("relu", [make_variant("v", None, status="error", error=err)]))

    [result] = evaluate_report(make_report("relu", [make_variant("v", 640 * MiB)]), base)

    assert result.passed
    assert result.notes == [
        "not compared with the baseline: the variant did not finish in the "
        "baseline (base.json) (status error)"
    ]


def test_a_variant_expected_to_fail_in_both_runs_needs_no_note():
    err = {"type": "RuntimeError", "message": "boom", "node": "act"}
    exp = {
        "metric": "status",
        "op": "==",
        "expected": "error",
        "actual": "error",
        "passed": True,
        "message": "status == error (actual error)",
    }
    failing = make_variant("v", None, status="error", error=err, expectations=[exp])
    base = baseline_of(make_report("relu", [failing]))

    [result] = evaluate_report(make_report("relu", [failing]), base)

    assert result.passed and result.notes == []


def test_peaks_under_a_different_allocator_model_are_not_compared():
    base = baseline_of(make_report("relu", [make_variant("v", 64 * MiB, allocator="caching")]))

    [result] = evaluate_report(make_report("relu", [make_variant("v", 640 * MiB)]), base)

    assert result.passed
    assert "allocator caching (now exact)" in result.notes[0]


def test_the_same_variant_name_in_another_scenario_is_not_its_baseline():
    base = baseline_of(make_report("other", [make_variant("v", 1 * MiB)]))

    [result] = evaluate_report(make_report("relu", [make_variant("v", 64 * MiB)]), base)

    assert result.passed and result.baseline is None


# --- the terminal line ------------------------------------------------------------------------


def test_the_line_shows_verdict_metric_expected_and_actual():
    report = make_report(
        "relu",
        [
            make_variant(
                "out_of_place",
                128 * MiB,
                expectations=[size_expectation("peak_allocated", "<=", 64 * MiB, 128 * MiB)],
            ),
            make_variant(
                "inplace",
                64 * MiB,
                expectations=[size_expectation("peak_allocated", "<=", 64 * MiB, 64 * MiB)],
            ),
        ],
    )

    bad, good = evaluate_report(report)

    fail_lines = result_lines(bad)
    assert fail_lines[0].split() == [
        "FAIL",
        "relu/out_of_place",
        "peak",
        "128.00",
        "MiB",
        "peak_allocated",
        "<=",
        "64.00",
        "MiB,",
        "actual",
        "128.00",
        "MiB",
    ]
    assert (
        fail_lines[1].strip()
        == "relu/out_of_place was limited to 64.00 MiB but peaked at 128.00 MiB"
    )
    assert result_lines(good) == [result_lines(good)[0]]
    assert result_lines(good)[0].split()[:5] == ["PASS", "relu/inplace", "peak", "64.00", "MiB"]


def test_a_variant_without_budget_shows_its_peak():
    [result] = evaluate_report(make_report("relu", [make_variant("v", 64 * MiB)]))

    assert result_lines(result)[0].split() == [
        "PASS",
        "relu/v",
        "peak",
        "64.00",
        "MiB",
        "no",
        "budget",
        "on",
        "the",
        "peak",
    ]
