"""Render reports for a terminal with rich: the per-scenario table, what was live at the peak,
in-place calls, warnings and failed expectations; and the table of `memprof compare`."""

from __future__ import annotations

from typing import Any

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from memprof.reports.build import failed_unexpectedly
from memprof.reports.saving import compared_with, row_saving_text
from memprof.reports.types import Report
from memprof.units import format_bytes, format_seconds

_STATUS_STYLE = {
    "ok": "green",
    "error": "red",
    "oom": "red",
    "failed": "red",
    "expectation_failed": "yellow",
}


def make_console(stderr: bool = False) -> Console:
    """A console for stdout or stderr; 120 columns when not a terminal, so piped tables do not wrap."""
    probe = Console(stderr=stderr)
    return Console(stderr=stderr, highlight=False, width=None if probe.is_terminal else 120)


def _saving(row: dict[str, Any] | None) -> str:
    """The saving cell: the one wording (memprof.reports.saving.row_saving_text), coloured."""
    text = row_saving_text(row)
    if not text:
        if row is None:
            return ""
        return "[dim]baseline[/dim]" if row.get("is_baseline") else "[dim]reference[/dim]"
    if text.startswith("saves"):
        return f"[green]{escape(text)}[/green]"
    if text.startswith("costs"):
        return f"[red]{escape(text)}[/red]"
    return f"[dim]{escape(text)}[/dim]"


def _label(entry: dict[str, Any]) -> str:
    if entry.get("tensor"):
        return escape(entry["tensor"])
    return f"<{escape(entry.get('op') or 'unnamed')}>"


def environment_text(env: dict[str, Any]) -> str:
    """`cpu via numpy, exact allocator`; the backend only when it is not the device's name."""
    device, backend = env.get("device") or "?", env.get("backend")
    where = device if not backend or backend == device.split(":")[0] else f"{device} via {backend}"
    return f"{where}, {env.get('allocator', '?')} allocator"


def live_at_peak_order(live: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Activations first (what the program made), then the rest; largest first in each."""
    return sorted(live, key=lambda e: (e.get("category") != "activation", -int(e.get("bytes", 0))))


def freed_by_inplace(variant: dict[str, Any], reference: dict[str, Any] | None) -> list[dict]:
    """Tensors live at the reference's peak that this variant's peak does not hold: what its
    in-place calls freed (by name; unnamed storages do not compare)."""
    if reference is None:
        return []
    ours = {e.get("tensor") for e in variant["peak"]["live"] if e.get("tensor")}
    return [e for e in reference["peak"]["live"] if e.get("tensor") and e.get("tensor") not in ours]


def render(report: Report, console: Console, *, top: int | None = 5) -> None:
    """The summary of one report: a table of variants, then for each variant what in place
    freed and what was live at its peak (one tensor per line; `top` lines, None for all), its
    in-place calls and error; then warnings and failed expectations, each naming its variant."""
    sc = report["scenario"]
    env = report["environment"]
    comp = {r["variant"]: r for r in report["comparison"]["rows"]}
    by_name = {v["name"]: v for v in report["variants"]}
    console.print(
        f"[bold]{escape(sc['name'])}[/bold]  {escape(sc['path'])}  ({escape(environment_text(env))})"
    )
    if sc.get("description"):
        console.print(f"[dim]{escape(sc['description'])}[/dim]")
    refs = {compared_with(r) for r in comp.values()} - {None}
    caption = None
    if len(refs) == 1:
        caption = f"saving: peak allocated against {escape(next(iter(refs)))}"
    elif refs:
        caption = "saving: peak allocated against the same variant out of place"
        if report["comparison"].get("baseline"):
            caption += f" (else {escape(report['comparison']['baseline'])})"
    if caption:
        caption += "; time: the program without setup"
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, caption=caption, caption_justify="left")
    table.add_column("variant", no_wrap=True)
    table.add_column("status", no_wrap=True)
    table.add_column("peak alloc", justify="right", no_wrap=True)
    table.add_column("peak reserved", justify="right", no_wrap=True)
    table.add_column("saving", justify="right", no_wrap=True)
    table.add_column("time", justify="right", no_wrap=True)
    table.add_column("checks", justify="right", no_wrap=True)
    for v in report["variants"]:
        exps = v["expectations"]
        failed = sum(1 for e in exps if not e["passed"])
        checks = (
            "-"
            if not exps
            else (
                f"[green]{len(exps)} ok[/green]"
                if not failed
                else f"[red]{failed}/{len(exps)} failed[/red]"
            )
        )
        st = v["status"]
        row = comp.get(v["name"])
        cells = [
            escape(v["name"]),
            f"[{_STATUS_STYLE.get(st, 'white')}]{st}[/]",
            format_bytes(v["peak_allocated_bytes"]),
            format_bytes(v["peak_reserved_bytes"]),
            _saving(row),
        ]
        cells += [format_seconds(v.get("program_duration_s", v["duration_s"])), checks]
        table.add_row(*cells)
    console.print(table)

    for v in report["variants"]:
        row = comp.get(v["name"])
        ref = by_name.get(compared_with(row)) if row else None
        console.print(
            f"[bold]{escape(v['name'])}[/bold]: peak {format_bytes(v['peak_allocated_bytes'])}",
            highlight=False,
        )
        if v["status"] == "ok" and ref is not None and ref["status"] == "ok":
            freed = live_at_peak_order(freed_by_inplace(v, ref))
            for e in freed if top is None else freed[:top]:
                console.print(
                    f"  [green]freed in place[/green]  {_label(e)}  {format_bytes(e['bytes'])} "
                    f"({e['category']}; live at {escape(ref['name'])}'s peak)",
                    highlight=False,
                )
        live = live_at_peak_order(v["peak"]["live"])
        shown = live if top is None else live[:top]
        if shown:
            console.print("  live at the peak:", highlight=False)
        width = max((len(_label(e)) for e in shown), default=0)
        for e in shown:
            where = f"node {e['node']}" if e.get("node") and e["node"][0] != "<" else ""
            console.print(
                f"    {_label(e).ljust(width)}  {format_bytes(e['bytes']):>11}  "
                f"{e['category']}{'  ' + escape(where) if where else ''}",
                highlight=False,
            )
        more = len(live) - len(shown)
        if more > 0:
            rest = sum(e["bytes"] for e in live[len(shown) :])
            console.print(
                f"    [dim]+{more} more ({format_bytes(rest)}); --all lists them[/dim]",
                highlight=False,
            )
        calls = _inplace_summary(v)
        if calls:
            console.print(f"  in place: {escape(calls)}", highlight=False)
        if v["error"]:
            e = v["error"]
            where = f" at node {e['node']}" if e.get("node") else ""
            console.print(
                f"  [red]{escape(e['type'] + where)}:[/red] {escape(e['message'])}",
                highlight=False,
            )
    for w in sc.get("warnings", []):
        console.print(f"[yellow]warning[/yellow] (scenario): {escape(w)}", highlight=False)
    for v in report["variants"]:
        for w in v["warnings"]:
            console.print(
                f"[yellow]warning[/yellow] ({escape(v['name'])}): {escape(w['message'])}",
                highlight=False,
            )
        for e in v["expectations"]:
            if not e["passed"]:
                console.print(
                    f"[red]expectation failed[/red] ({escape(v['name'])}): {escape(e['message'])}",
                    highlight=False,
                )


def _inplace_summary(v: dict[str, Any]) -> str:
    seen: dict[str, str] = {}
    for row in v["ops"]:
        if row["inplace"] and row["node"] not in seen:
            cost = row["inplace_cost"]
            seen[row["node"]] = (
                f"{row['node']} free"
                if cost == "free"
                else f"{row['node']} paid a {format_bytes(row['clone_bytes'])} clone"
            )
    return ", ".join(seen.values())


def render_compare(
    rows: list[dict[str, Any]], console: Console, *, limit_pct: float | None
) -> None:
    """Rows from memprof.reports.compare.compare_reports."""
    table = Table(
        title="peak allocated, before -> after",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
    )
    for col, just in (
        ("variant", "left"),
        ("before", "right"),
        ("after", "right"),
        ("delta", "right"),
        ("%", "right"),
        ("", "left"),
    ):
        table.add_column(col, justify=just)
    for r in rows:
        before = "-" if r["before"] is None else format_bytes(r["before"])
        after = "-" if r["after"] is None else format_bytes(r["after"])
        delta = (
            "-"
            if r["delta"] is None
            else ("+" if r["delta"] > 0 else "") + format_bytes(r["delta"])
        )
        pct = "-" if r["pct"] is None else f"{r['pct']:+.1f}%"
        flag = r.get("note") or ""
        if r.get("over_limit"):
            flag = f"[red]over the {limit_pct:g}% limit[/red]"
        else:
            flag = escape(flag)
        table.add_row(escape(r["variant"]), before, after, delta, pct, flag)
    console.print(table)


def render_failures(report: Report, console: Console) -> None:
    """Only what went wrong (for --quiet)."""
    name = report["scenario"]["name"]
    for v in report["variants"]:
        if v["error"] and failed_unexpectedly(v):
            e = v["error"]
            console.print(
                f"[red]{escape(name)}/{escape(v['name'])}: {escape(e['type'])}:[/red] "
                f"{escape(e['message'])}",
                highlight=False,
            )
        for e in v["expectations"]:
            if not e["passed"]:
                console.print(
                    f"[red]{escape(name)}/{escape(v['name'])}: expectation failed:[/red] "
                    f"{escape(e['message'])}",
                    highlight=False,
                )
