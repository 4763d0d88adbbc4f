"""`memprof report`: a run as one self-contained HTML file, or as a trace for Perfetto."""

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
    trace: Annotated[
        Path | None,
        typer.Option(
            "--trace",
            help="Write a Chrome Trace Event JSON file (opens in ui.perfetto.dev) here. "
            "Without --html, only the trace is written.",
        ),
    ] = None,
    runs: Annotated[
        Path, typer.Option("--runs", help="Runs directory to look a run id up in.")
    ] = Path("memprof-runs"),
) -> None:
    """Write a run's charts into one HTML file that opens with no network, or its trace.

    The HTML has the same timeline, peak, live-at-peak and per-node views as the dashboard;
    plotly.js and the data are inlined. The trace (--trace) has per variant the memory counter,
    the phases, the nodes as spans and every allocation as an instant.
    """
    import json

    from memprof.errors import InvalidInput
    from memprof.reports.html import require_report
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
    data = require_report(data, str(source))
    if trace is not None:
        from memprof.reports.trace import render_trace

        text = render_trace(data)
        atomic_write_text(trace, text)
        typer.echo(f"wrote {trace} ({_mib(text)}); open it in https://ui.perfetto.dev")
    if html is not None or trace is None:
        from memprof.reports.html import render_html

        page = render_html(data)
        out = html or source.with_suffix(".html")
        atomic_write_text(out, page)
        typer.echo(f"wrote {out} ({_mib(page)})")


def _mib(text: str) -> str:
    return f"{len(text.encode()) / 1024**2:.1f} MiB"
