"""`memprof compare`: peak memory per variant, before and after."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def compare(
    before: Annotated[Path, typer.Argument(help="The earlier report (JSON).", show_default=False)],
    after: Annotated[Path, typer.Argument(help="The later report (JSON).", show_default=False)],
    max_increase: Annotated[str | None, typer.Option(
        "--max-increase", help="Fail (exit 1) when a variant's peak grows by more than this, e.g. 5%.",
        show_default=False)] = None,
) -> None:
    """Compare two reports variant by variant: peak allocated before and after, delta and percent."""
    from memprof.errors import CheckFailed, InvalidInput
    from memprof.reports.compare import compare_reports, load_report_file
    from memprof.reports.terminal import make_console, render_compare
    from memprof.units import parse_percent

    limit = None
    if max_increase is not None:
        try:
            limit = parse_percent(max_increase)
        except ValueError as exc:
            raise InvalidInput(f"--max-increase: {exc}") from None
    rows = compare_reports(load_report_file(before), load_report_file(after), limit)
    render_compare(rows, make_console(), limit_pct=limit)
    over = [r for r in rows if r["over_limit"]]
    if over:
        names = ", ".join(f"{r['variant']} ({r['pct']:+.1f}%)" for r in over)
        raise CheckFailed(f"peak allocated grew past the {limit:g}% limit: {names}")
