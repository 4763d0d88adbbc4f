"""The advice as a terminal table: node, op, verdict, reason, clone bytes, saving alone, proven;
then the combined saving (and the budget's answer)."""

from __future__ import annotations

from typing import Any

from memprof.units import format_bytes


def render_advice(advice: dict[str, Any], console) -> None:
    from rich.table import Table

    title = (
        f"{advice['scenario']} · variant {advice['variant']} · in-place advice "
        f"({advice['device']}, proof: {_proof_word(advice)})"
    )
    rows = advice["candidates"]
    if not rows:
        console.print(title)
        console.print(
            "No candidates: no node runs out of place with an in-place form "
            "(an op with a trailing-underscore form, a module with inplace: false)."
        )
    else:
        table = Table(title=title, title_justify="left", show_lines=False)
        for col, kw in (
            ("node", {}),
            ("op", {}),
            ("verdict", {}),
            ("reason", {"overflow": "fold", "ratio": 1}),
            ("clone", {"justify": "right"}),
            ("saving alone", {"justify": "right"}),
            ("proven", {}),
        ):
            table.add_column(col, **kw)
        for c in rows:
            safe = c["verdict"] == "safe"
            table.add_row(
                c["node"],
                c["op"],
                "[green]safe[/]" if safe else "[red]unsafe[/]",
                c["reason"],
                format_bytes(c["clone_bytes"]) if c["clone_bytes"] else "-",
                _saving(c["saving_bytes"]) if safe else "-",
                "yes" if c["proven"] else "no",
            )
        console.print(table)
    console.print(combined_line(advice))
    for lever in advice.get("levers") or []:
        console.print(lever_line(lever))
    budget = advice.get("budget")
    if budget:
        mark = "[green]met[/]" if budget["met"] else "[red]not met[/]"
        console.print(f"Budget {format_bytes(budget['bytes'])}: {mark}; {budget['message']}")


def combined_line(advice: dict[str, Any]) -> str:
    switched = advice.get("switched") or []
    before, after = advice["peak_before"], advice["peak_after"]
    if not switched:
        return f"Peak allocated {format_bytes(before)}; nothing to switch."
    return (
        f"Combined ({', '.join(switched)} in place): peak allocated {format_bytes(before)} -> "
        f"{format_bytes(after)} ({_saving(before - after)}); reserved "
        f"{format_bytes(advice['peak_reserved_before'])} -> "
        f"{format_bytes(advice['peak_reserved_after'])}"
    )


_LEVER_NAMES = {"optimizer_in_backward": "Optimizer stepped in backward"}


def lever_line(lever: dict[str, Any]) -> str:
    name = _LEVER_NAMES.get(lever["lever"], lever["lever"])
    if lever["verdict"] != "safe":
        return f"{name} ({lever['setting']}): [red]unsafe[/], {lever['reason']}"
    line = (
        f"{name} ({lever['setting']}): [green]safe[/], {_saving(lever['saving_bytes'])} alone "
        f"(peak allocated {format_bytes(lever['peak_after'])}); {lever['reason']}"
    )
    together = lever.get("together")
    if together is not None:
        peak = format_bytes(together["peak_after"])
        if together["verdict"] == "safe":
            line += f". With the switched nodes in place too: [green]safe[/], peak allocated {peak}"
        else:
            line += f". With the switched nodes in place too: [red]unsafe[/], {together['reason']}"
    return line


def _saving(n: int) -> str:
    if n > 0:
        return f"saves {format_bytes(n)}"
    if n < 0:
        return f"costs {format_bytes(-n)}"
    return "saves 0 bytes"


def _proof_word(advice) -> str:
    if advice.get("proof") == "versions":
        return "versions and stale reads (meta has no values)"
    return "bitwise"
