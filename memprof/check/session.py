"""One `memprof check`: find the scenarios, check them all before running any, run each, judge
every variant, save the reports and append them to the history.

>>> outcome = run_check(["scenarios/"], baseline="main.json", max_increase_pct=5.0)
>>> outcome.passed, [r.name for r in outcome.failures]
(False, ['relu-block/out_of_place'])
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memprof.check.baseline import Baseline, load_baseline
from memprof.check.evaluate import DEFAULT_MAX_INCREASE_PCT, VariantResult, evaluate_report
from memprof.check.result import combined_result
from memprof.errors import InvalidInput

ALLOCATORS = ("exact", "caching")
DEVICES = ("cpu", "cuda", "meta", "auto")


@dataclass
class CheckOutcome:
    results: list[VariantResult] = field(default_factory=list)
    reports: list[dict[str, Any]] = field(default_factory=list)
    baseline: Baseline | None = None
    max_increase_pct: float = DEFAULT_MAX_INCREASE_PCT
    saved: list[Path] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return all(r.passed for r in self.results)

    @property
    def failures(self) -> list[VariantResult]:
        return [r for r in self.results if not r.passed]

    def combined(self) -> dict[str, Any]:
        """The `--json` document (memprof/check/result.py)."""
        return combined_result(self.results, self.reports,
                               baseline=self.baseline.path if self.baseline else None,
                               max_increase_pct=self.max_increase_pct)


def scenario_files(paths: Sequence[str | os.PathLike]) -> list[Path]:
    """Scenario files named directly or found in directories (*.yaml, *.yml), in order, once each.

    Raises InvalidInput naming each path that is missing or holds no scenario.
    """
    from memprof.scenario import discover

    files: list[Path] = []
    problems = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            found = [p for p, _name, _desc in discover(path)]
            if not found:
                problems.append(f"{path}: no scenario files (*.yaml, *.yml) in this directory")
            files += found
        elif path.is_file():
            files.append(path)
        else:
            problems.append(f"{path}: no such scenario file or directory")
    if problems:
        raise InvalidInput("invalid input", problems)
    unique, seen = [], set()
    for f in files:
        key = f.resolve()
        if key not in seen:
            seen.add(key)
            unique.append(f)
    return unique


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
    runs_dir: save each report there and append its variants to the history (None: neither).
    on_start: called once everything is valid, with the `scenario/variant` names to be run.
    on_result: called with each VariantResult as soon as it is decided (for printing).
    """
    from memprof.scenario import load_scenario

    if allocator is not None and allocator not in ALLOCATORS:
        raise InvalidInput(f"--allocator: expected one of {', '.join(ALLOCATORS)}, found {allocator!r}")
    if device is not None and device not in DEVICES:
        raise InvalidInput(f"--device: expected one of {', '.join(DEVICES)}, found {device!r}")
    problems: list[str] = []
    files: list[Path] = []
    base = None
    try:
        files = scenario_files(paths)
    except InvalidInput as exc:
        problems += exc.problems or [str(exc)]
    if baseline is not None:
        try:
            base = load_baseline(baseline)
        except InvalidInput as exc:
            problems += exc.problems or [str(exc)]

    loaded, names = [], {}
    for path in files:
        try:
            sc = load_scenario(path, device=device, allocator=allocator)
        except InvalidInput as exc:
            problems += exc.problems or [str(exc)]
            continue
        if sc.name in names:
            problems.append(f"{path}: scenario name {sc.name!r} is also used by {names[sc.name]}; "
                            f"baselines and history match scenarios by name, so names must differ")
            continue
        names[sc.name] = path
        loaded.append(sc)
    if problems:
        raise InvalidInput("invalid input", problems)

    from memprof import history
    from memprof.reports.store import save_report
    from memprof.runner import run_loaded

    outcome = CheckOutcome(baseline=base, max_increase_pct=max_increase_pct)
    if on_start is not None:
        on_start([f"{sc.name}/{v.name}" for sc in loaded for v in sc.variants])
    for sc in loaded:
        report = run_loaded(sc)
        results = evaluate_report(report, base, max_increase_pct=max_increase_pct)
        outcome.reports.append(report)
        outcome.results += results
        if runs_dir is not None:
            try:
                outcome.saved.append(save_report(report, runs_dir))
                history.append(runs_dir, report, source="check",
                               passed={r.variant: r.passed for r in results})
            except (OSError, sqlite3.Error) as exc:
                raise InvalidInput(f"{runs_dir}: cannot save the report and its history there: "
                                   f"{getattr(exc, 'strerror', None) or exc}") from None
        for r in results:
            if on_result is not None:
                on_result(r)
    return outcome
