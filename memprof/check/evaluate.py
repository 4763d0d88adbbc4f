"""Judge a run report: every variant's expectations and budgets, and its peak against a baseline.

A *budget* is a size expectation that bounds memory from above (`peak_allocated: "<= 64 MiB"`,
or an exact `==`); the runner has already measured and compared it, so here it only gets its
explanation. A *regression* is a peak above the baseline's peak of the same scenario and variant
by more than `max_increase_pct`. A variant that errored without expecting to fails too.

>>> results = evaluate_report(report, baseline, max_increase_pct=5.0)
>>> [(r.name, r.passed) for r in results]
[('relu-block/out_of_place', False), ('relu-block/inplace', True)]
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from memprof.check.baseline import Baseline, BaselineEntry
from memprof.check.explain import (
    exact_message,
    limit_message,
    live_at_peak_lines,
    regression_message,
)
from memprof.reports.build import failed_unexpectedly
from memprof.units import format_bytes

SIZE_METRICS = (
    "peak_allocated",
    "peak_reserved",
    "final_allocated",
    "baseline",
    "peak_over_baseline",
)
BUDGET_OPS = ("<=", "<", "==")
DEFAULT_MAX_INCREASE_PCT = 5.0


@dataclass
class Check:
    """One verdict on one variant.

    kind: budget (a size bound from the scenario), expectation (any other expectation),
    status (the variant errored unexpectedly) or regression (peak against the baseline).
    """

    kind: str
    metric: str
    op: str
    expected: Any
    actual: Any
    passed: bool
    message: str
    explanation: str | None = None

    @property
    def is_size(self) -> bool:
        return self.kind == "regression" or self.metric in SIZE_METRICS

    @property
    def expected_text(self) -> str:
        value = (
            format_bytes(self.expected)
            if self.is_size and isinstance(self.expected, int)
            else self.expected
        )
        return f"{self.op} {value}"

    @property
    def actual_text(self) -> str:
        if self.actual is None:
            return "not measured"
        if self.is_size and isinstance(self.actual, int):
            return format_bytes(self.actual)
        return str(self.actual)

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "metric": self.metric,
            "op": self.op,
            "expected": self.expected,
            "actual": self.actual,
            "passed": self.passed,
            "message": self.message,
            "explanation": self.explanation,
        }


@dataclass
class VariantResult:
    """Everything `memprof check` decided about one scenario variant."""

    scenario: str
    variant: str
    status: str
    checks: list[Check]
    peak_allocated_bytes: int | None = None
    peak_reserved_bytes: int | None = None
    duration_s: float | None = None
    device: str | None = None
    allocator: str | None = None
    live_at_peak: list[dict[str, Any]] = field(default_factory=list)
    run_id: str | None = None
    path: str | None = None
    baseline: BaselineEntry | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        return f"{self.scenario}/{self.variant}"

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.checks)

    @property
    def failures(self) -> list[Check]:
        return [c for c in self.checks if not c.passed]

    def headline(self) -> Check | None:
        """The check a one-line summary shows: the first failure, else the peak's budget, else
        the regression check, else any check."""
        if self.failures:
            return self.failures[0]
        for wanted in (
            lambda c: c.kind == "budget" and c.metric == "peak_allocated",
            lambda c: c.kind == "budget",
            lambda c: c.kind == "regression",
        ):
            for c in self.checks:
                if wanted(c):
                    return c
        return self.checks[0] if self.checks else None

    def peak_budget(self) -> Check | None:
        """The bound the peak met: its budget (`peak_allocated <= ...`), else the regression
        check against the baseline; None when nothing bounds the peak."""
        for c in self.checks:
            if c.kind == "budget" and c.metric == "peak_allocated":
                return c
        for c in self.checks:
            if c.kind == "regression":
                return c
        return None

    def explanation(self, *, top: int = 5) -> list[str]:
        """Why it failed: one sentence per failed check, then the largest tensors live at the
        peak with their nodes. Empty when it passed."""
        if self.passed:
            return []
        lines = [c.explanation or f"{self.name}: {c.message}" for c in self.failures]
        lines += live_at_peak_lines(self.live_at_peak, top=top, total=self.peak_allocated_bytes)
        return lines

    def to_dict(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario,
            "variant": self.variant,
            "name": self.name,
            "path": self.path,
            "run_id": self.run_id,
            "passed": self.passed,
            "status": self.status,
            "device": self.device,
            "allocator": self.allocator,
            "peak_allocated_bytes": self.peak_allocated_bytes,
            "peak_reserved_bytes": self.peak_reserved_bytes,
            "duration_s": self.duration_s,
            "baseline": self.baseline.to_dict() if self.baseline else None,
            "checks": [c.to_dict() for c in self.checks],
            "explanation": self.explanation(),
            "notes": list(self.notes),
            "live_at_peak": list(self.live_at_peak),
        }


def evaluate_report(
    report: Mapping[str, Any],
    baseline: Baseline | None = None,
    *,
    max_increase_pct: float = DEFAULT_MAX_INCREASE_PCT,
) -> list[VariantResult]:
    """One VariantResult per variant of a run report (docs/report-format.md), in report order."""
    scenario = report["scenario"]["name"]
    env = report.get("environment") or {}
    results = []
    for v in report["variants"]:
        subject = f"{scenario}/{v['name']}"
        peak = v.get("peak") or {}
        result = VariantResult(
            scenario=scenario,
            variant=v["name"],
            status=v.get("status", "ok"),
            checks=[_expectation_check(subject, e) for e in v.get("expectations") or []],
            peak_allocated_bytes=v.get("peak_allocated_bytes"),
            peak_reserved_bytes=v.get("peak_reserved_bytes"),
            duration_s=v.get("duration_s"),
            device=v.get("device") or env.get("device"),
            allocator=v.get("allocator") or env.get("allocator"),
            live_at_peak=[dict(r) for r in peak.get("live") or []],
            run_id=report.get("run_id"),
            path=report["scenario"].get("path"),
        )
        status_check = _status_check(subject, v)
        if status_check is not None:
            result.checks.insert(0, status_check)
        if baseline is not None:
            _compare_with_baseline(result, baseline, max_increase_pct)
        results.append(result)
    return results


def _expectation_check(subject: str, e: Mapping[str, Any]) -> Check:
    metric, op, expected, actual = e["metric"], e["op"], e.get("expected"), e.get("actual")
    passed = bool(e["passed"])
    message = e.get("message") or f"{metric} {op} {expected} (actual {actual})"
    is_budget = metric in SIZE_METRICS and op in BUDGET_OPS
    explanation = None
    if not passed:
        if is_budget and op == "==":
            explanation = exact_message(subject, expected, actual, metric)
        elif is_budget:
            explanation = limit_message(subject, expected, actual, metric, op)
        else:
            explanation = f"{subject} did not meet its expectation: {message}"
    return Check(
        "budget" if is_budget else "expectation",
        metric,
        op,
        expected,
        actual,
        passed,
        message,
        explanation,
    )


def _status_check(subject: str, v: Mapping[str, Any]) -> Check | None:
    """A failing check when the variant errored and no expectation said it would."""
    if not failed_unexpectedly(v):  # finished, or the scenario's expectation decides
        return None
    status = v.get("status", "ok")
    err = v.get("error") or {}
    what = f"{err.get('type', 'Error')}: {err.get('message', '')}".rstrip(": ")
    at = f" at node {err['node']}" if err.get("node") else ""
    return Check(
        "status",
        "status",
        "==",
        "ok",
        status,
        False,
        f"status == ok (actual {status})",
        f"{subject} failed{at} ({status}): {what}",
    )


def _compare_with_baseline(
    result: VariantResult, baseline: Baseline, max_increase_pct: float
) -> None:
    entry = baseline.get(result.scenario, result.variant)
    if entry is None:
        result.notes.append(f"no baseline for {result.name} in {baseline.path}")
        return
    result.baseline = entry
    ours_ok = result.status == "ok" and result.peak_allocated_bytes is not None
    theirs_ok = entry.status == "ok" and entry.peak_allocated_bytes is not None
    if not (ours_ok and theirs_ok):
        if ours_ok or theirs_ok:  # both failing (as the scenario expects, say) needs no note
            which = "this run" if theirs_ok else f"the baseline ({entry.source})"
            status = result.status if theirs_ok else entry.status
            result.notes.append(
                f"not compared with the baseline: the variant did not finish in "
                f"{which} (status {status})"
            )
        return
    mismatch = [
        f"{what} {theirs} (now {ours})"
        for what, theirs, ours in (
            ("device", entry.device, result.device),
            ("allocator", entry.allocator, result.allocator),
        )
        if theirs and ours and theirs != ours
    ]
    if mismatch:
        result.notes.append(
            f"not compared with the baseline: it ran with {', '.join(mismatch)}; "
            f"peaks under different accounting do not compare"
        )
        return
    base, actual = entry.peak_allocated_bytes, result.peak_allocated_bytes
    allowed = base * (1.0 + max_increase_pct / 100.0)
    passed = actual <= allowed
    limit = math.floor(allowed)
    message = (
        f"peak_allocated <= {format_bytes(limit)} (baseline {format_bytes(base)} "
        f"+{max_increase_pct:g}%; actual {format_bytes(actual)})"
    )
    explanation = (
        None if passed else regression_message(result.name, base, actual, max_increase_pct)
    )
    result.checks.append(
        Check("regression", "peak_allocated", "<=", limit, actual, passed, message, explanation)
    )
