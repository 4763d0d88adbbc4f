"""`memprof run`: run scenarios, print what the memory did, save each report for the dashboard."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from memprof.cli.options import DEFAULT_RUNS, RunsDir


def run(
    scenarios: Annotated[
        list[Path],
        typer.Argument(help="Scenario YAML files, or directories of them.", show_default=False),
    ],
    variant: Annotated[
        list[str] | None,
        typer.Option(
            "--variant",
            metavar="NAME",
            help="Run only this variant (repeat for several).",
            show_default=False,
        ),
    ] = None,
    device: Annotated[
        str | None,
        typer.Option(
            help="Override the scenario's device: cpu, cuda, meta or auto.", show_default=False
        ),
    ] = None,
    allocator: Annotated[
        str | None,
        typer.Option(help="Override the allocator model: exact or caching.", show_default=False),
    ] = None,
    json_out: Annotated[
        str | None,
        typer.Option(
            "--json",
            metavar="PATH",
            help="Also write the report JSON to PATH ('-' for stdout; a list for several "
            "scenarios).",
            show_default=False,
        ),
    ] = None,
    runs_dir: RunsDir = DEFAULT_RUNS,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Print only failures.")] = False,
    top: Annotated[
        int,
        typer.Option(
            "--top", metavar="N", min=1, help="List the N largest tensors live at each peak."
        ),
    ] = 5,
    all_live: Annotated[
        bool, typer.Option("--all", help="List every tensor live at each peak.")
    ] = False,
    jobs: Annotated[
        int | None,
        typer.Option(
            "--jobs",
            "-j",
            metavar="N",
            min=1,
            help="Run the variants in N worker processes (default: the number of cores when "
            "several scenarios are given; 1 runs everything in this process). Reports are the "
            "same as a serial run's.",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Run each scenario once per variant and show where the memory went and what in-place saved.

    Exit code 1 when an expectation fails or a variant fails unexpectedly, 2 on invalid input.
    """
    from memprof.cli._runcmd import run_command

    run_command(
        scenarios,
        variants=variant,
        device=device,
        allocator=allocator,
        json_out=json_out,
        runs_dir=runs_dir,
        quiet=quiet,
        top=None if all_live else top,
        jobs=jobs,
    )
