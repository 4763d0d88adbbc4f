"""One `memprof check`: find the scenarios, check them all before running any, run each, judge
every variant, save the reports and append them to the history.

>>> outcome = run_check(["scenarios/"], baseline="main.json", max_increase_pct=5.0)
>>> outcome.passed, [r.name for r in outcome.failures]
(False, ['relu-block/out_of_place'])
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memprof.check.baseline import Baseline, load_baseline
from memprof.check.evaluate import DEFAULT_MAX_INCREASE_PCT, VariantResult, evaluate_report
from memprof.check.result import combined_result
from memprof.errors import InvalidInput


@dataclass
class CheckOutcome:
    results: list[VariantResult] = field(default_factory=list)
    reports: list[dict[str, Any]] = field(default_factory=list)
    baseline: Baseline | None = None
    max_increase_pct: float = DEFAULT_MAX_INCREASE_PCT
    saved: list[Path] = field(default_factory=list)
    save_errors: list[str] = field(default_factory=list)  # reports the runs directory refused

    @property
    def passed(self) -> bool:
        return all(r.passed for r in self.results)

    @property
    def failures(self) -> list[VariantResult]:
        return [r for r in self.results if not r.passed]

    def combined(self) -> dict[str, Any]:
        """The `--json` document (memprof/check/result.py)."""
        return combined_result(
            self.results,
            self.reports,
            baseline=self.baseline.path if self.baseline else None,
            max_increase_pct=self.max_increase_pct,
        )


def run_check(
    paths: Sequence[str | os.PathLike],
    *,
    baseline: str | os.PathLike | None = None,
    max_increase_pct: float = DEFAULT_MAX_INCREASE_PCT,
    allocator: str | None = None,
    device: str | None = None,
    runs_dir: str | os.PathLike | None = None,
    on_start: Callable[[list[str]], None] | None = None,
    on_result: Callable[[VariantResult], None] | None = None,
) -> CheckOutcome:
    """Run and judge every scenario under `paths`.

    Invalid input (a missing path, a bad scenario file, an unreadable baseline, an unknown
    allocator) raises InvalidInput before anything runs, with every problem found.
    runs_dir: save each report there and append its variants to the history (None: neither);
    a report that cannot be saved is noted in `save_errors` and the check goes on.
    on_start: called once everything is valid, with the `scenario/variant` names to be run.
    on_result: called with each VariantResult as soon as it is decided (for printing).
    """
    from memprof.reports.store import output_problem
    from memprof.scenario import load_scenarios

    scenarios, problems = load_scenarios(paths, device=device, allocator=allocator)
    base = None
    if baseline is not None:
        try:
            base = load_baseline(baseline)
        except InvalidInput as exc:
            problems += exc.problems or [str(exc)]
    loaded, names = [], {}
    for sc in scenarios:
        if sc.name in names:
            problems.append(
                f"{sc.path}: scenario name {sc.name!r} is also used by {names[sc.name]}; "
                f"baselines and history match scenarios by name, so names must differ"
            )
            continue
        names[sc.name] = sc.path
        loaded.append(sc)
    if runs_dir is not None and (problem := output_problem(runs_dir, directory=True)):
        problems.append(problem)
    if problems:
        raise InvalidInput("invalid input", problems)

    from memprof.reports.record import record_run
    from memprof.runner import run_loaded

    outcome = CheckOutcome(baseline=base, max_increase_pct=max_increase_pct)
    if on_start is not None:
        on_start([f"{sc.name}/{v.name}" for sc in loaded for v in sc.variants])
    for sc in loaded:
        report = run_loaded(sc)
        results = evaluate_report(report, base, max_increase_pct=max_increase_pct)
        outcome.reports.append(report)
        outcome.results += results
        if runs_dir is not None:  # judge and report the rest regardless of a refusal
            recorded = record_run(
                runs_dir, report, source="check", passed={r.variant: r.passed for r in results}
            )
            if recorded.path is not None:
                outcome.saved.append(recorded.path)
            if recorded.problem:
                outcome.save_errors.append(recorded.problem)
        for r in results:
            if on_result is not None:
                on_result(r)
    return outcome
