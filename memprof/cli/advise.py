"""`memprof advise`: which nodes of a scenario can run in place, proven by re-running."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

_LEVER_WORDS = {"optimizer_in_backward": "optimizer in backward"}


def advise(
    scenario: Annotated[
        Path,
        typer.Argument(
            help="A scenario: a YAML file, or a Python file with an @memprof.scenario function.",
            show_default=False,
        ),
    ],
    variant: Annotated[
        str | None,
        typer.Option(
            "--variant",
            metavar="NAME",
            help="The variant to advise (default: the scenario's baseline).",
            show_default=False,
        ),
    ] = None,
    device: Annotated[
        str | None,
        typer.Option(
            help="Override the scenario's device: cpu, cuda, meta or auto (meta re-runs fast and "
            "proves by version counters and stale reads, without values).",
            show_default=False,
        ),
    ] = None,
    json_out: Annotated[
        str | None,
        typer.Option(
            "--json",
            metavar="PATH",
            help="Also write the advice as JSON to PATH ('-' for stdout).",
            show_default=False,
        ),
    ] = None,
    write: Annotated[
        Path | None,
        typer.Option(
            "--write",
            metavar="OUT.yaml",
            help="Write the scenario with a new variant 'advised' that switches the proven-safe "
            "nodes to in place (comments kept).",
            show_default=False,
        ),
    ] = None,
    budget: Annotated[
        str | None,
        typer.Option(
            "--budget",
            metavar="SIZE",
            help="Stop at the fewest safe nodes that bring the peak within SIZE (e.g. 1.5 GiB), "
            "or say that in-place alone cannot.",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Advise which nodes can run in place: for every node that runs out of place but has an
    in-place form, a verdict from the recorded run (stale read, saved for backward, leaf, input,
    shape or dtype, or safe), proven by re-running the variant with the node switched alone and
    with all safe nodes together, every value compared bitwise; with what each saves.

    Exit code 1 when a --budget is not met, 2 on invalid input.
    """
    import json
    import sys

    from memprof.advise import advise as run_advice
    from memprof.errors import CheckFailed, InvalidInput
    from memprof.reports.terminal import make_console
    from memprof.units import parse_size

    limit = None
    if budget is not None:
        try:
            limit = parse_size(budget)
        except ValueError as exc:
            raise InvalidInput(f"--budget: {exc}") from None
    if device is not None and device not in ("cpu", "cuda", "meta", "auto"):
        raise InvalidInput(f"--device: expected cpu, cuda, meta or auto, found {device!r}")
    if write is not None and str(scenario).lower().endswith(".py"):
        raise InvalidInput(
            f"--write: {scenario} is a Python scenario; --write edits YAML scenarios (switch the "
            "advised modules' inplace in the code)"
        )
    to_stdout = json_out == "-"
    err = make_console(stderr=True)
    progress = None if to_stdout else (lambda msg: err.print(f"[dim]{msg}[/]"))
    result = run_advice(
        str(scenario), variant=variant, device=device, budget=limit, progress=progress
    )
    if json_out is not None:
        text = json.dumps(result, indent=2) + "\n"
        if to_stdout:
            sys.stdout.write(text)
        else:
            try:
                Path(json_out).write_text(text, encoding="utf-8")
            except OSError as exc:
                raise InvalidInput(f"{json_out}: cannot write: {exc.strerror}") from None
    if not to_stdout:
        from memprof.advise.terminal import render_advice

        render_advice(result, make_console())
    if write is not None:
        from memprof.advise import written_levers
        from memprof.advise.write import write_advised

        levers = written_levers(result)
        notes = write_advised(
            str(scenario), result["variant"], result["switched"], str(write), levers
        )
        for note in notes:
            typer.echo(f"note: {note}", err=True)
        if not to_stdout:
            changes = list(result["switched"]) + [_LEVER_WORDS[lv] for lv in levers]
            typer.echo(f"wrote {write} (variant advised: {', '.join(changes) or 'no change'})")
    b = result.get("budget")
    if b is not None and not b["met"]:
        raise CheckFailed(f"budget {budget}: {b['message']}")
