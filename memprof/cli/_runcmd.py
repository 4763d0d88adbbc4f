"""The work behind `memprof run` (kept out of run.py so `memprof --help` imports nothing heavy)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from memprof import history
from memprof.errors import CheckFailed, InvalidInput
from memprof.reports import terminal
from memprof.reports.store import atomic_write_text, save_report
from memprof.runner import run_loaded
from memprof.scenario import load_scenario


def run_command(scenarios: list[Path], *, variants, device, allocator, json_out, out_dir: Path,
                quiet: bool) -> None:
    to_stdout = json_out == "-"
    out = terminal.make_console(stderr=to_stdout)
    err = terminal.make_console(stderr=True)

    loaded, problems = [], []
    for path in scenarios:
        try:
            loaded.append(load_scenario(path, variants=variants, device=device, allocator=allocator))
        except InvalidInput as exc:
            problems += exc.problems or [str(exc)]
    if problems:
        raise InvalidInput("invalid input", problems)

    reports = []
    units = sum(len(sc.variants) * max(v.spec.iterations for v in sc.variants) for sc in loaded)
    show_bar = not quiet and units > 1 and err.is_terminal
    progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                        TimeElapsedColumn(), console=err, transient=True, disable=not show_bar)
    with progress:
        for sc in loaded:
            iters = {v.name: v.spec.iterations for v in sc.variants}
            task = progress.add_task(sc.name, total=sum(iters.values()))

            def on_progress(ev, _task=task, _name=sc.name):
                if ev["stage"] == "start":
                    progress.update(_task, description=f"{_name} [{ev['index'] + 1}/{ev['total']}] {ev['variant']}")

            def on_iteration(_variant, _k, _n, _task=task):
                progress.advance(_task)

            reports.append(run_loaded(sc, progress=on_progress, on_iteration=on_iteration))
            progress.remove_task(task)

    for report in reports:
        path = save_report(report, out_dir)
        history.append(out_dir, report, source="run")
        report_failed = report["status"] != "ok"
        if not quiet:
            terminal.render(report, out)
            out.print(f"[dim]report: {path}[/dim]")
        elif report_failed:
            terminal.render_failures(report, err)

    if json_out:
        payload = reports[0] if len(reports) == 1 else reports
        text = json.dumps(payload, separators=(",", ":"), allow_nan=False)
        if to_stdout:
            sys.stdout.write(text + "\n")
            sys.stdout.flush()
        else:
            atomic_write_text(json_out, text)

    failures = [_failure_line(r) for r in reports if r["status"] != "ok"]
    if failures:
        raise CheckFailed("; ".join(failures))


def _failure_line(report: dict) -> str:
    name = report["scenario"]["name"]
    bad_exp = [f"{v['name']}: {e['message']}" for v in report["variants"]
               for e in v["expectations"] if not e["passed"]]
    bad_run = [f"{v['name']}: {v['error']['type']}" for v in report["variants"]
               if v["status"] != "ok" and v["error"]
               and not any(e["metric"] in ("error", "status") and e["passed"] for e in v["expectations"])]
    parts = bad_run + bad_exp
    what = "failed" if report["status"] == "failed" else "expectation failed"
    return f"{name}: {what} ({'; '.join(parts[:3])}{'; ...' if len(parts) > 3 else ''})"
