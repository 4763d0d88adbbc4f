"""`memprof report`: a run as one self-contained HTML file, or as a trace for Perfetto."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from memprof.cli.options import DEFAULT_RUNS, RunsDir


def report(
    run: Annotated[
        str,
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
    snapshot: Annotated[
        Path | None,
        typer.Option(
            "--snapshot",
            help="Write a PyTorch memory snapshot (torch.cuda.memory._snapshot() format, a "
            "pickle) here, for pytorch.org/memory_viz or python -m torch.cuda._memory_viz; "
            "one device per variant. Without --html, only the files asked for are written.",
        ),
    ] = None,
    runs_dir: RunsDir = DEFAULT_RUNS,
) -> None:
    """Write a run's charts into one HTML file that opens with no network, or its trace.

    The HTML has the same timeline, peak, live-at-peak and per-node views as the dashboard;
    plotly.js and the data are inlined. The trace (--trace) has per variant the memory counter,
    the phases, the nodes as spans and every allocation as an instant.
    """
    from memprof.reports.reporters import get_reporter
    from memprof.reports.store import find_report, read_report

    source = find_report(run, runs_dir)
    data = read_report(source)
    wanted = [("trace", trace), ("snapshot", snapshot)]
    if html is not None or (trace is None and snapshot is None):
        wanted.append(("html", html or source.with_suffix(".html")))
    for name, path in wanted:
        if path is not None:
            typer.echo(get_reporter(name).write(data, path).describe())
