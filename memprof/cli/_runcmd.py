"""The work behind `memprof run` (kept out of run.py so `memprof --help` imports nothing heavy)."""

from __future__ import annotations

import sys
from contextlib import nullcontext
from pathlib import Path

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from memprof.errors import CheckFailed, InvalidInput
from memprof.reports import terminal
from memprof.reports.build import failed_unexpectedly
from memprof.reports.record import record_run
from memprof.reports.store import dumps_report, output_problem, write_output
from memprof.runner import progress_fraction, run_loaded
from memprof.scenario import load_scenarios
from memprof.scenario.discover import scenario_files


def run_command(
    scenarios: list[Path],
    *,
    variants,
    device,
    allocator,
    json_out,
    runs_dir: Path,
    quiet: bool,
    top: int | None = 5,
    jobs: int | None = None,
) -> None:
    to_stdout = json_out == "-"
    out = terminal.make_console(stderr=to_stdout)
    err = terminal.make_console(stderr=True)

    # Several scenarios (or --jobs N): the workers start first, and import while this process
    # validates the files (the variants then run in them, after every file has passed); none
    # outlives the runs.
    files, _ = scenario_files(scenarios)
    if jobs is None:  # several scenarios: the machine's cores; one: this process
        from memprof.runner.parallel import default_jobs

        jobs = default_jobs() if len(files) > 1 else 1
    starting = nullcontext()
    if jobs > 1 and any(f.suffix.lower() != ".py" for f in files):
        from memprof.runner.parallel import Workers

        starting = Workers(jobs)
    with starting as workers:
        loaded, problems = load_scenarios(
            scenarios, variants=variants, device=device, allocator=allocator
        )
        problems += [
            problem
            for problem in (
                output_problem(runs_dir, directory=True),
                None if not json_out or to_stdout else output_problem(json_out),
            )
            if problem
        ]
        if problems:
            raise InvalidInput("invalid input", problems)

        reports = []
        units = sum(len(sc.variants) * max(v.spec.iterations for v in sc.variants) for sc in loaded)
        show_bar = not quiet and units > 1 and err.is_terminal
        progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=err,
            transient=True,
            disable=not show_bar,
        )
        parallel = jobs > 1 and sum(len(sc.variants) for sc in loaded) > 1
        with progress:
            if parallel:
                from memprof.runner.parallel import run_many

                task = progress.add_task(f"{len(loaded)} scenarios, {jobs} jobs", total=units)
                reports = run_many(
                    loaded,
                    jobs,
                    device=device,
                    allocator=allocator,
                    on_done=lambda i, name: progress.advance(
                        task, max(v.spec.iterations for v in loaded[i].variants)
                    ),
                    workers=workers,
                )
            for sc in [] if parallel else loaded:
                iters = {v.name: v.spec.iterations for v in sc.variants}
                task = progress.add_task(sc.name, total=sum(iters.values()))

                def on_progress(ev, _task=task, _name=sc.name, _total=sum(iters.values())):
                    progress.update(
                        _task,
                        description=f"{_name} [{ev['index'] + 1}/{ev['total']}] {ev['variant']}",
                        completed=progress_fraction(ev) * _total,
                    )

                reports.append(run_loaded(sc, progress=on_progress))
                progress.remove_task(task)

    unsaved = []
    for i, report in enumerate(reports):
        recorded = record_run(runs_dir, report, source="run")
        path = recorded.path
        if recorded.problem:  # still show and --json what was measured
            unsaved.append(recorded.problem)
        if not quiet:
            if i:
                out.rule(style="dim")
            terminal.render(report, out, top=top)
            if path is not None:
                out.print(f"[dim]report: {path}[/dim]")
        elif report["status"] != "ok":
            terminal.render_failures(report, err)

    if json_out:
        payload = reports[0] if len(reports) == 1 else reports
        if to_stdout:
            sys.stdout.write(dumps_report(payload) + "\n")
            sys.stdout.flush()
        else:
            write_output(json_out, dumps_report(payload))
    if unsaved:
        raise InvalidInput("cannot save", unsaved)

    failures = [_failure_line(r) for r in reports if r["status"] != "ok"]
    if failures:
        raise CheckFailed("; ".join(failures))


def _failure_line(report: dict) -> str:
    name = report["scenario"]["name"]
    bad_exp = [
        f"{v['name']}: {e['message']}"
        for v in report["variants"]
        for e in v["expectations"]
        if not e["passed"]
    ]
    bad_run = [
        f"{v['name']}: {v['error']['type']}"
        for v in report["variants"]
        if failed_unexpectedly(v) and v["error"]
    ]
    parts = bad_run + bad_exp
    what = "failed" if report["status"] == "failed" else "expectation failed"
    return f"{name}: {what} ({'; '.join(parts[:3])}{'; ...' if len(parts) > 3 else ''})"
