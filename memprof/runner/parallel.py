"""`memprof run --jobs N`: the variants of many scenarios in N worker processes.

Each YAML scenario variant is one task: a worker (a fresh interpreter, started with "spawn": the
engine and its allocators hold process-wide state) loads the scenario file itself, keeps that
one variant, runs it with the serial path's `run_variant`, and returns the report entry (plain
JSON data). The parent, which has already validated every file, assembles each scenario's
report from the entries in the scenario's own variant order, exactly as `run_loaded` does, so a
parallel report differs from a serial one only in what is measured in time (durations,
timestamps) and the run id. Python scenario files run in the parent, serially, as before.
`memprof run` starts the workers (Workers) before it validates the files, so that they import
the engine and memprof meanwhile; a file that fails validation stops them before any variant.

The thread budget is shared out: each worker's engine pool and BLAS get cores // N threads
(at least one), so N workers do not oversubscribe the machine. A worker that dies (killed, out
of memory, a crash in a native library) fails its variant with a message; Ctrl-C stops the
workers.
"""

from __future__ import annotations

import os
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from contextlib import nullcontext
from typing import Any

_THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def default_jobs() -> int:
    return max(1, os.cpu_count() or 1)


def _init_worker(threads: int) -> None:
    import engine

    engine.set_num_threads(threads)


def _warm() -> None:
    """A worker's first task: import what running a variant needs, while the parent is still
    validating the scenario files."""
    import memprof.runner.execute  # noqa: F401
    import memprof.scenario  # noqa: F401


_LOADED: dict[tuple, dict] = {}  # in a worker: each scenario file is parsed once


def _run_task(path: str, name: str, device: str | None, allocator: str | None) -> dict:
    """In a worker: load `path` (validated by the parent; parsed once per worker), run variant
    `name`, return its entry."""
    from memprof.runner.execute import run_variant
    from memprof.scenario import load_scenario

    key = (path, device, allocator)
    variants = _LOADED.get(key)
    if variants is None:
        loaded = load_scenario(path, device=device, allocator=allocator, check_shapes=False)
        variants = _LOADED[key] = {v.name: v for v in loaded.variants}
    return run_variant(variants[name])


def _crashed_entry(variant, message: str) -> dict[str, Any]:
    """The entry of a variant whose worker died before it returned."""
    from memprof.runner.execute import _failed_entry

    entry = _failed_entry(variant, RuntimeError(message), None)
    entry["error"]["type"] = "WorkerDied"
    return entry


def _pool(workers: int, threads: int) -> ProcessPoolExecutor:
    import multiprocessing

    return ProcessPoolExecutor(
        max_workers=workers,
        mp_context=multiprocessing.get_context("spawn"),
        initializer=_init_worker,
        initargs=(threads,),
    )


def _stop(pool: ProcessPoolExecutor) -> None:
    """Ctrl-C or an error here: no worker outlives the command."""
    procs = list((getattr(pool, "_processes", None) or {}).values())
    # (taken before shutdown forgets it) the pool's own thread joins the workers too, and one
    # it reaped first reads as alive here until that thread is done
    manager = getattr(pool, "_executor_manager_thread", None)
    for proc in procs:
        proc.terminate()
    pool.shutdown(wait=False, cancel_futures=True)
    if manager is not None:  # every worker reaped before the command goes on (or exits)
        manager.join(timeout=5)
    for proc in procs:
        proc.join(timeout=5)


def _run_pool(pool, tasks, task_fn, args_of, entries, on_done) -> list:
    """Run `tasks` on `pool`; returns the tasks a dead worker took down unfinished (a dead
    worker breaks the whole pool, so which one died is not known yet)."""
    broken = []
    try:
        futures = {pool.submit(task_fn, *args_of(t)): t for t in tasks}
        for fut in as_completed(futures):
            t = futures[fut]
            i, j, v = t
            try:
                entries[(i, j)] = fut.result()
            except BrokenProcessPool:
                broken.append(t)
                continue
            except Exception as exc:  # the worker raised outside the variant's handling
                entries[(i, j)] = _crashed_entry(v, f"{type(exc).__name__}: {exc}")
            if on_done is not None:
                on_done(i, v.name)
    except BaseException:
        _stop(pool)
        raise
    pool.shutdown(wait=True)
    return broken


class Workers:
    """`jobs` worker processes, started (and importing) before there is work for them: the
    command starts them, then validates its scenario files, then hands them to run_many. As a
    context manager: the thread variables the workers read are set while it is open, and no
    worker outlives it."""

    def __init__(self, jobs: int, *, warm: bool = True):
        self.jobs = jobs
        self.threads = max(1, default_jobs() // jobs)
        self.pool: ProcessPoolExecutor | None = None
        self._warm = warm
        self._saved: dict[str, str | None] = {}

    def __enter__(self) -> Workers:
        self._saved = {k: os.environ.get(k) for k in _THREAD_VARS}
        for k in _THREAD_VARS:  # read by BLAS when the worker imports numpy
            os.environ[k] = str(self.threads)
        if self._warm:
            try:
                self.pool = _pool(self.jobs, self.threads)
                for _ in range(self.jobs):  # (each submit while none is idle starts a worker)
                    self.pool.submit(_warm)
            except BaseException:  # (no __exit__ follows a failed __enter__)
                self.__exit__(None, None, None)
                raise
        return self

    def take(self, workers: int) -> ProcessPoolExecutor:
        """The started pool (run_pool shuts it down when its tasks are done), or a new one."""
        pool, self.pool = self.pool, None
        return pool if pool is not None else _pool(workers, self.threads)

    def __exit__(self, *exc) -> None:
        try:
            if self.pool is not None:
                _stop(self.pool)
                self.pool = None
        finally:
            for k, val in self._saved.items():
                if val is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = val


def run_many(
    loaded_list: list,
    jobs: int,
    *,
    device=None,
    allocator=None,
    on_done=None,
    task=None,
    workers: Workers | None = None,
) -> list:
    """Reports of the loaded scenarios (in their order), YAML variants run in `jobs` processes.

    on_done(scenario_index, variant_name): after each variant, for progress. A worker that dies
    breaks its pool: the variants it took down are run again one by one, each in a process of
    its own, so only the variant that kills its process fails (with a message).
    task: what a worker runs per variant (tests pass one that dies); default _run_task.
    workers: started Workers to run on (`memprof run` starts them before validating)."""
    from memprof.runner import assemble_report, run_loaded

    task_fn = task or _run_task
    tasks = []  # (scenario index, variant index, variant)
    for i, sc in enumerate(loaded_list):
        if getattr(sc, "run", None) is None:  # YAML: its variants go to the workers
            tasks += [(i, j, v) for j, v in enumerate(sc.variants)]
    entries: dict[tuple[int, int], dict] = {}

    def args_of(t):
        i, _, v = t
        return (str(loaded_list[i].path), v.name, device, allocator)

    if tasks:
        with Workers(jobs, warm=False) if workers is None else nullcontext(workers) as w:
            pool = w.take(min(jobs, len(tasks)))
            broken = _run_pool(pool, tasks, task_fn, args_of, entries, on_done)
            for t in sorted(broken, key=lambda t: t[:2]):  # alone, in a process of its own
                if _run_pool(w.take(1), [t], task_fn, args_of, entries, on_done):
                    i, j, v = t
                    entries[(i, j)] = _crashed_entry(
                        v, "its worker process died before the variant finished"
                    )
                    if on_done is not None:
                        on_done(i, v.name)
    reports = []
    for i, sc in enumerate(loaded_list):
        if getattr(sc, "run", None) is not None:
            reports.append(run_loaded(sc))
            if on_done is not None:
                on_done(i, None)
            continue
        results = [entries[(i, j)] for j in range(len(sc.variants))]
        reports.append(assemble_report(sc, results))
    return reports
