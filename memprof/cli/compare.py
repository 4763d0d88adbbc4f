"""`memprof compare`: peak memory per variant, before and after."""

from __future__ import annotations

from typing import Annotated

import typer

from memprof.cli.options import DEFAULT_RUNS, RunsDir


def compare(
    before: Annotated[
        str,
        typer.Argument(
            help="The earlier report: a JSON file, or a run id in the runs directory.",
            show_default=False,
        ),
    ],
    after: Annotated[
        str,
        typer.Argument(
            help="The later report: a JSON file, or a run id in the runs directory.",
            show_default=False,
        ),
    ],
    max_increase: Annotated[
        str | None,
        typer.Option(
            "--max-increase",
            metavar="PERCENT",
            help="Fail (exit 1) when a variant's peak grows by more than this, e.g. 5%.",
            show_default=False,
        ),
    ] = None,
    runs_dir: RunsDir = DEFAULT_RUNS,
) -> None:
    """Compare two reports variant by variant: peak allocated before and after, delta and percent."""
    from memprof.errors import CheckFailed, InvalidInput
    from memprof.reports.compare import compare_reports
    from memprof.reports.store import find_report, read_report
    from memprof.reports.terminal import make_console, render_compare
    from memprof.units import parse_percent

    limit = None
    if max_increase is not None:
        try:
            limit = parse_percent(max_increase)
        except ValueError as exc:
            raise InvalidInput(f"--max-increase: {exc}") from None
    reports = [read_report(find_report(ref, runs_dir)) for ref in (before, after)]
    rows = compare_reports(*reports, limit)
    render_compare(rows, make_console(), limit_pct=limit)
    over = [r for r in rows if r["over_limit"]]
    if over:
        names = ", ".join(f"{r['variant']} ({r['pct']:+.1f}%)" for r in over)
        raise CheckFailed(f"peak allocated grew past the {limit:g}% limit: {names}")
