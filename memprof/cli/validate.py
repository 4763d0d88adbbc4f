"""`memprof validate`: check scenario files without running them."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def validate(
    scenarios: Annotated[
        list[Path],
        typer.Argument(help="Scenario YAML files, or directories of them.", show_default=False),
    ],
) -> None:
    """Check scenarios (format, names, shapes via a dry run on the meta device) without running them.

    Prints one `file:line:col: what was expected, what was found` line per problem; exit code 2.
    """
    from memprof.errors import InvalidInput
    from memprof.scenario import load_scenario
    from memprof.scenario.discover import scenario_files

    files, problems = scenario_files(scenarios)
    for path in files:
        try:
            sc = load_scenario(path)
        except InvalidInput as exc:
            problems += exc.problems or [str(exc)]
            continue
        for w in sc.warnings:
            typer.echo(str(w), err=True)
        n = len(sc.variants)
        typer.echo(f"{path}: ok ({sc.name}, {n} variant{'s' if n != 1 else ''})")
    if problems:
        raise InvalidInput("invalid scenario", problems)
