"""`memprof list`: the scenarios in a directory, with their descriptions."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def list_scenarios(
    directory: Annotated[Path, typer.Argument(help="Directory to search (recursively).")] = Path(
        "scenarios"
    ),
) -> None:
    """List scenario files with their names and descriptions."""
    from rich.markup import escape
    from rich.table import Table

    from memprof.errors import InvalidInput
    from memprof.reports.terminal import make_console
    from memprof.scenario import discover

    if not directory.is_dir():
        raise InvalidInput(
            f"{directory}: no such directory; name the folder of scenario files (memprof list DIR)"
        )
    found = discover(directory)
    console = make_console()
    if not found:
        console.print(f"no scenario files (*.yaml, *.yml) under {escape(str(directory))}")
        return
    table = Table(show_edge=False, box=None, pad_edge=False)
    table.add_column("scenario", style="bold")
    table.add_column("name")
    table.add_column("description", overflow="fold")
    for path, summary in found:
        description = f"({summary.error})" if summary.error else summary.description
        table.add_row(escape(str(path)), escape(summary.name), escape(description))
    console.print(table)
