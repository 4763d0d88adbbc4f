"""`memprof schema`: print the JSON Schema of scenario files (or of reports)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def schema(
    report: Annotated[
        bool, typer.Option("--report", help="The report format instead of scenarios.")
    ] = False,
    output: Annotated[
        Path | None,
        typer.Option(
            "--output", "-o", help="Write to this file instead of stdout.", show_default=False
        ),
    ] = None,
) -> None:
    """Print the JSON Schema of the scenario format (editors use it to complete and check files)."""
    from memprof.reports.store import write_output
    from memprof.schemas import REPORT, SCENARIO, dump, generate

    text = dump(generate()[REPORT if report else SCENARIO])
    if output is None:
        typer.echo(text, nl=False)
    else:
        write_output(output, text)
