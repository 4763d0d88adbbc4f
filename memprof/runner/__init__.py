"""Run scenarios on the engine and produce reports (docs/report-format.md).

>>> report = run_scenario("scenarios/relu.yaml")
>>> [v["peak_allocated_bytes"] for v in report["variants"]]
[67108864, 134217728]
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any

# The engine's allocators are process-wide: runs in one process take turns (the dashboard may
# start runs from several threads).
_RUN_LOCK = threading.Lock()


def run_scenario(
    path: str | os.PathLike,
    *,
    variants: list[str] | None = None,
    device: str | None = None,
    allocator: str | None = None,
    progress: Callable[[dict[str, Any]], None] | None = None,
    runs_dir: str | os.PathLike | None = None,
    on_iteration: Callable[[str, int, int], None] | None = None,
) -> dict[str, Any]:
    """Check the scenario, run each variant from a fresh engine state, and return the report.

    progress: called with {"variant", "index", "total", "stage": "start"|"done"} around each
    variant. on_iteration(variant, k, n): after each iteration (for progress bars).
    runs_dir: also save the report there (atomically) as `<run_id>.json`.
    Raises memprof.errors.InvalidInput (with `file:line:col` problems) for a bad scenario.
    """
    from memprof.scenario import load_scenario

    loaded = load_scenario(path, variants=variants, device=device, allocator=allocator)
    return run_loaded(loaded, progress=progress, runs_dir=runs_dir, on_iteration=on_iteration)


def run_loaded(loaded, *, progress=None, runs_dir=None, on_iteration=None) -> dict[str, Any]:
    """run_scenario for an already loaded and checked scenario."""
    from memprof.reports.build import ScenarioInfo, assemble, environment
    from memprof.runner.execute import backend_of

    with _RUN_LOCK:
        results = _run_variants(loaded, progress, on_iteration)
    first = results[0] if results else {"device": "cpu", "allocator": "exact"}
    env = environment(first["device"], backend_of(first["device"]), first["allocator"])
    info = ScenarioInfo(
        name=loaded.name,
        description=loaded.description,
        path=loaded.path,
        sha256=loaded.sha256,
        # stale reads are reported per variant, with the iteration, by the run
        warnings=[str(w) for w in loaded.warnings if w.kind != "stale_read"],
    )
    report = assemble(info, env, results, loaded.baseline)
    if runs_dir is not None:
        from memprof.reports.store import save_report

        save_report(report, runs_dir)
    return report


def _run_variants(loaded, progress, on_iteration) -> list[dict[str, Any]]:
    from memprof.runner.execute import run_variant

    results = []
    total = len(loaded.variants)
    for i, variant in enumerate(loaded.variants):
        if progress is not None:
            progress({"variant": variant.name, "index": i, "total": total, "stage": "start"})
        hook = None
        if on_iteration is not None:

            def hook(k, n, _name=variant.name):
                on_iteration(_name, k, n)

        results.append(run_variant(variant, on_iteration=hook))
        if progress is not None:
            progress({"variant": variant.name, "index": i, "total": total, "stage": "done"})
    return results


__all__ = ["run_scenario", "run_loaded"]
