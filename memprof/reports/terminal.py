"""Render reports for a terminal with rich: the per-scenario table, what was live at the peak,
in-place calls, warnings and failed expectations; and the table of `memprof compare`."""

from __future__ import annotations

from typing import Any

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

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
    """Bytes saved against the baseline and the percentage; a cost shows as negative."""
    if row is None or row.get("is_baseline"):
        return "[dim]baseline[/dim]"
    saved = -row["delta_bytes"]
    pct = row.get("saving_pct")
    pct_text = f" {pct:.1f}%" if pct is not None else ""
    text = f"{format_bytes(saved)}{pct_text}"
    return f"[green]{text}[/green]" if saved > 0 else (f"[red]{text}[/red]" if saved < 0 else text)


def _label(entry: dict[str, Any]) -> str:
    if entry.get("tensor"):
        return escape(entry["tensor"])
    return f"<{escape(entry.get('op') or 'unnamed')}>"


def render(report: dict[str, Any], console: Console, *, top: int = 5) -> None:
    """The summary of one report: a table of variants, then details that explain the numbers."""
    sc = report["scenario"]
    env = report["environment"]
    comp = {r["variant"]: r for r in report["comparison"]["rows"]}
    baseline = report["comparison"]["baseline"]
    console.print(
        f"[bold]{escape(sc['name'])}[/bold]  {escape(sc['path'])}  "
        f"({escape(env['device'])}, {escape(env['backend'])}, {escape(env['allocator'])} allocator)"
    )
    if sc.get("description"):
        console.print(f"[dim]{escape(sc['description'])}[/dim]")
    table = Table(
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        caption=(
            f"saving: peak allocated against {escape(baseline)}; time: the program without setup"
        )
        if baseline
        else None,
        caption_justify="left",
    )
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
        table.add_row(
            escape(v["name"]),
            f"[{_STATUS_STYLE.get(st, 'white')}]{st}[/]",
            format_bytes(v["peak_allocated_bytes"]),
            format_bytes(v["peak_reserved_bytes"]),
            _saving(comp.get(v["name"])),
            format_seconds(v.get("program_duration_s", v["duration_s"])),
            checks,
        )
    console.print(table)

    many = len(report["variants"]) > 3
    for v in report["variants"]:
        live = v["peak"]["live"][: (3 if many else top)]
        if live:
            parts = ", ".join(
                f"{_label(e)} {format_bytes(e['bytes'])} ({e['category']})" for e in live
            )
            more = len(v["peak"]["live"]) - len(live)
            extra = f", +{more} more" if more > 0 else ""
            console.print(
                f"  [bold]{escape(v['name'])}[/bold] at peak: {parts}{extra}", highlight=False
            )
        calls = _inplace_summary(v)
        if calls:
            console.print(f"    in place: {escape(calls)}", highlight=False)
        if v["error"]:
            e = v["error"]
            where = f" at node {e['node']}" if e.get("node") else ""
            console.print(
                f"    [red]{escape(e['type'] + where)}:[/red] {escape(e['message'])}",
                highlight=False,
            )
    for w in sc.get("warnings", []):
        console.print(f"[yellow]{escape(w)}[/yellow]", highlight=False)
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


def render_failures(report: dict[str, Any], console: Console) -> None:
    """Only what went wrong (for --quiet)."""
    name = report["scenario"]["name"]
    for v in report["variants"]:
        if v["error"] and v["status"] != "ok":
            expected = any(
                e["metric"] in ("error", "status") and e["passed"] for e in v["expectations"]
            )
            if not expected:
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
