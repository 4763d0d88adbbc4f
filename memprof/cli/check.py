"""`memprof check`: run scenarios as a CI gate on memory budgets and regressions."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from memprof.cli.options import DEFAULT_RUNS, RunsDir


def check(
    scenarios: Annotated[
        list[Path] | None,
        typer.Argument(
            help="Scenario files or directories of them (default: scenarios/).", show_default=False
        ),
    ] = None,
    baseline: Annotated[
        Path | None,
        typer.Option(
            "--baseline",
            help="Earlier peaks to compare with: a `check --json` result, a run report, "
            "or a directory of them.",
            show_default=False,
        ),
    ] = None,
    max_increase: Annotated[
        str,
        typer.Option(
            "--max-increase", metavar="PERCENT", help="How far a peak may rise above its baseline."
        ),
    ] = "5%",
    json_out: Annotated[
        Path | None,
        typer.Option(
            "--json",
            help="Write the combined result here (usable later as --baseline).",
            show_default=False,
        ),
    ] = None,
    junit: Annotated[
        Path | None,
        typer.Option(
            "--junit",
            help="Write JUnit XML here: one testcase per scenario variant.",
            show_default=False,
        ),
    ] = None,
    html: Annotated[
        Path | None,
        typer.Option(
            "--html",
            help="Write each scenario's offline HTML report into this directory.",
            show_default=False,
        ),
    ] = None,
    allocator: Annotated[
        str | None,
        typer.Option(help="Override the allocator model: exact or caching.", show_default=False),
    ] = None,
    device: Annotated[
        str | None,
        typer.Option(
            help="Override the scenarios' device: cpu, cuda, meta or auto.", show_default=False
        ),
    ] = None,
    runs_dir: RunsDir = DEFAULT_RUNS,
) -> None:
    """Run the scenarios and check their budgets, expectations and regressions.

    Every variant's expectations and budgets are checked, and its peak against the baseline of
    the same scenario and variant. Prints one line per variant (PASS/FAIL, metric, expected,
    actual) and, for a failure, why and which tensors were live at the peak.

    Exit code 0 when all pass, 1 when a budget, expectation or regression fails, 2 on invalid input.
    """
    from memprof.check import result_lines, run_check
    from memprof.check.junit import junit_xml
    from memprof.check.result import dumps
    from memprof.errors import CheckFailed, InvalidInput
    from memprof.reports.store import output_problem, write_output
    from memprof.units import parse_percent

    try:
        pct = parse_percent(max_increase)
    except ValueError as exc:
        raise InvalidInput(f"--max-increase: {exc}") from None
    if scenarios is None and not Path("scenarios").exists():
        raise InvalidInput(
            "scenarios: no such directory; name scenario files or directories "
            "(memprof check PATH ...)"
        )
    unwritable = [
        problem
        for path, directory in ((json_out, False), (junit, False), (html, True))
        if path is not None and (problem := output_problem(path, directory=directory))
    ]
    if unwritable:
        raise InvalidInput("invalid input", unwritable)

    width = 32

    def start(names: list[str]) -> None:
        nonlocal width
        width = max([len(n) for n in names] + [24])

    def show(result) -> None:
        for line in result_lines(result, name_width=width):
            typer.echo(line)

    outcome = run_check(
        scenarios or [Path("scenarios")],
        baseline=baseline,
        max_increase_pct=pct,
        allocator=allocator,
        device=device,
        runs_dir=runs_dir,
        on_start=start,
        on_result=show,
    )

    if json_out is not None:
        write_output(json_out, dumps(outcome.combined()))
    if junit is not None:
        write_output(junit, junit_xml(outcome.results))
    if html is not None:
        from memprof.reports.reporters import get_reporter

        for report in outcome.reports:
            get_reporter("html").write(report, html / f"{report['run_id']}.html")
    if outcome.save_errors:
        raise InvalidInput("cannot save", outcome.save_errors)

    failed = len(outcome.failures)
    total = len(outcome.results)
    if not failed:
        typer.echo(f"all {total} variants passed")
    else:
        raise CheckFailed(
            f"{failed} of {total} variants failed: "
            + ", ".join(r.name for r in outcome.failures[:5])
            + (", ..." if failed > 5 else "")
        )
