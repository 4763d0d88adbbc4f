"""`memprof history`: the peak of each scenario variant over past runs and checks."""

from __future__ import annotations

from typing import Annotated

import typer

from memprof.cli.options import DEFAULT_RUNS, RunsDir

_SPARK = "▁▂▃▄▅▆▇█"


def history(
    scenario: Annotated[
        str | None, typer.Argument(help="Only this scenario (by name).", show_default=False)
    ] = None,
    variant: Annotated[
        str | None,
        typer.Option("--variant", metavar="NAME", help="Only this variant.", show_default=False),
    ] = None,
    limit: Annotated[
        int,
        typer.Option(
            "--limit", min=1, help="Show at most this many of the newest runs per variant."
        ),
    ] = 20,
    json_out: Annotated[
        bool, typer.Option("--json", help="Print the rows as JSON instead of a table.")
    ] = False,
    runs: RunsDir = DEFAULT_RUNS,
) -> None:
    """Print the trend of each variant's peak over past runs, oldest first.

    The runs are those `memprof run` and `memprof check` recorded in the runs directory's
    history.sqlite; each row shows the change since the run before it.
    """
    import json
    import sqlite3

    from memprof import history as store
    from memprof.errors import InvalidInput

    try:
        rows = store.query(runs, scenario, variant=variant)
        known = store.scenarios(runs) if not rows else []
        variants = (
            sorted({r["variant"] for r in store.query(runs, scenario)})
            if not rows and variant is not None
            else []
        )
    except sqlite3.DatabaseError as exc:
        raise InvalidInput(f"{store.db_path(runs)}: cannot read the history: {exc}") from None
    if not rows:
        if scenario is not None and scenario not in known:
            raise InvalidInput(
                f"{store.db_path(runs)}: no runs of scenario {scenario!r} recorded"
                + (f"; recorded scenarios: {', '.join(known)}" if known else "")
            )
        if variants:
            of = f" of scenario {scenario!r}" if scenario is not None else ""
            raise InvalidInput(
                f"{store.db_path(runs)}: no runs of variant {variant!r}{of} "
                f"recorded; recorded variants: {', '.join(variants)}"
            )
        if json_out:
            typer.echo("[]")
            return
        typer.echo(f"no history in {store.db_path(runs)} (memprof run and memprof check record it)")
        return

    groups: dict[tuple[str, str], list[dict]] = {}
    for row in rows:
        groups.setdefault((row["scenario"], row["variant"]), []).append(row)
    if json_out:
        typer.echo(json.dumps([r for g in groups.values() for r in g[-limit:]], indent=1))
        return
    first = True
    for (name, var), group in groups.items():
        if not first:
            typer.echo("")
        first = False
        for line in _group_lines(name, var, group, limit):
            typer.echo(line)


def _group_lines(scenario: str, variant: str, rows: list[dict], limit: int) -> list[str]:
    from memprof.units import format_bytes

    peaks = [r["peak_allocated_bytes"] for r in rows if r["peak_allocated_bytes"] is not None]
    head = f"{scenario}/{variant}: {len(rows)} run{'s' if len(rows) != 1 else ''}"
    if peaks:
        head += f", latest peak {format_bytes(peaks[-1])}"
        if len(peaks) > 1:
            change = _change(peaks[0], peaks[-1])
            head += f" ({'unchanged' if change == '=' else change} since the first)"
        head += f"  {_sparkline(peaks[-40:])}"
    shown = rows[-limit:]
    lines = [head]
    if len(shown) < len(rows):
        lines.append(f"  ... {len(rows) - len(shown)} older runs not shown (--limit)")
    table = [
        (
            "created",
            "commit",
            "status",
            "verdict",
            "peak allocated",
            "change",
            "peak reserved",
            "duration",
            "source",
        )
    ]
    previous = None
    for r in rows[: len(rows) - len(shown)]:
        previous = r["peak_allocated_bytes"] if r["peak_allocated_bytes"] is not None else previous
    for r in shown:
        peak = r["peak_allocated_bytes"]
        table.append(
            (
                r["created_at"].replace("T", " "),
                (r["git_commit"] or "-")[:8],
                r["status"],
                {True: "pass", False: "FAIL", None: "-"}[r["passed"]],
                format_bytes(peak) if peak is not None else "-",
                _change(previous, peak) if previous is not None and peak is not None else "",
                format_bytes(r["peak_reserved_bytes"])
                if r["peak_reserved_bytes"] is not None
                else "-",
                f"{r['duration_s']:.2f} s" if r["duration_s"] is not None else "-",
                r["source"],
            )
        )
        previous = peak if peak is not None else previous
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    for row in table:
        lines.append(
            "  " + "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        )
    return lines


def _change(old: int, new: int) -> str:
    if old == new:
        return "="
    if old == 0:
        return f"+{new} bytes"
    return f"{100.0 * (new - old) / old:+.1f}%"


def _sparkline(values: list[int]) -> str:
    lo, hi = min(values), max(values)
    if hi == lo:
        return _SPARK[0] * len(values)
    return "".join(_SPARK[round((v - lo) / (hi - lo) * (len(_SPARK) - 1))] for v in values)
