"""Options several commands share, so they are spelled and explained the same everywhere."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

DEFAULT_RUNS = Path("memprof-runs")

# `--runs` everywhere; `--out-dir` is accepted as another name for it (run and check used it).
RunsDir = Annotated[
    Path,
    typer.Option(
        "--runs",
        "--out-dir",
        metavar="DIR",
        help="Runs directory: one <run_id>.json report per run and history.sqlite.",
    ),
]
