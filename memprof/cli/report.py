"""`memprof report`: one self-contained HTML file with a run's charts."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def report(
    run: Annotated[
        Path,
        typer.Argument(help="A report JSON file (memprof-runs/<run_id>.json), or a run id."),
    ],
    html: Annotated[
        Path | None,
        typer.Option("--html", help="Where to write the page (default: next to RUN, .html)."),
    ] = None,
    runs: Annotated[
        Path, typer.Option("--runs", help="Runs directory to look a run id up in.")
    ] = Path("memprof-runs"),
) -> None:
    """Write a run's charts into one HTML file that opens with no network.

    The same timeline, peak, live-at-peak and per-node views as the dashboard; plotly.js and
    the data are inlined.
    """
    import json

    from memprof.errors import InvalidInput
    from memprof.reports.html import render_html, require_report
    from memprof.reports.store import atomic_write_text, report_path

    source = run
    if not source.is_file():
        found = report_path(runs, str(run))
        if found is None:
            raise InvalidInput(f"{run}: no such report file, and no run {str(run)!r} in {runs}/")
        source = found
    try:
        data = json.loads(source.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise InvalidInput(f"{source}: cannot read the report: {exc}") from None
    page = render_html(require_report(data, str(source)))
    out = html or source.with_suffix(".html")
    atomic_write_text(out, page)
    typer.echo(f"wrote {out} ({len(page.encode()) / 1024**2:.1f} MiB)")
