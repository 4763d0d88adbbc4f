"""Run scenarios on the engine and produce reports (docs/report-format.md).

>>> report = run_scenario("scenarios/relu.yaml")
>>> [v["peak_allocated_bytes"] for v in report["variants"]]
[67108864, 134217728]
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from memprof.reports.types import Report

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
) -> Report:
    """Check the scenario, run each variant from a fresh engine state, and return the report.

    progress: called with progress events (see `progress_fraction`). The runner saves nothing:
    `memprof.reports.record.record_run` records a finished report.
    Raises memprof.errors.InvalidInput (with `file:line:col` problems) for a bad scenario.
    """
    from memprof.scenario import load_scenario

    loaded = load_scenario(path, variants=variants, device=device, allocator=allocator)
    return run_loaded(loaded, progress=progress)


def run_loaded(loaded, *, progress=None) -> Report:
    """run_scenario for an already loaded and checked scenario."""
    if getattr(loaded, "run", None) is not None:  # a Python scenario file (scenario/python_file)
        with _RUN_LOCK:
            return loaded.run(progress=progress)
    with _RUN_LOCK:
        results = _run_variants(loaded, progress)
    return assemble_report(loaded, results)


def assemble_report(loaded, results: list[dict[str, Any]]) -> Report:
    """The report of a loaded YAML scenario from its variants' entries (in its variant order),
    however they were run (here, or in worker processes: memprof/runner/parallel.py)."""
    from memprof.reports.build import ScenarioInfo, assemble, environment
    from memprof.reports.saving import inplace_params
    from memprof.runner.execute import backend_of

    first = results[0] if results else {"device": "cpu", "allocator": "exact"}
    env = environment(first["device"], backend_of(first["device"]), first["allocator"])
    info = ScenarioInfo(
        name=loaded.name,
        description=loaded.description,
        path=loaded.path,
        sha256=loaded.sha256,
        # stale reads are reported per variant, with the iteration, by the run
        warnings=[str(w) for w in loaded.warnings if w.kind != "stale_read"],
        inplace_params=sorted(inplace_params(loaded.doc.data)),
    )
    return assemble(info, env, results, loaded.baseline)


def _run_variants(loaded, progress) -> list[dict[str, Any]]:
    from memprof.runner.execute import run_variant

    results = []
    total = len(loaded.variants)
    for i, variant in enumerate(loaded.variants):
        base = {
            "variant": variant.name,
            "index": i,
            "total": total,
            "iterations": variant.spec.iterations,
            "nodes": len(variant.spec.program),
        }
        on_iteration = on_node = None
        if progress is not None:
            progress({**base, "stage": "start", "iteration": 0, "node": 0})

            def on_iteration(k, n, _base=base):
                progress({**_base, "stage": "iteration", "iteration": k + 1, "node": 0})

            def on_node(k, j, m, _base=base):
                progress({**_base, "stage": "node", "iteration": k, "node": j})

        results.append(run_variant(variant, on_iteration=on_iteration, on_node=on_node))
        if progress is not None:
            progress({**base, "stage": "done", "iteration": variant.spec.iterations, "node": 0})
    return results


def progress_fraction(event: dict[str, Any]) -> float:
    """How far a run is, 0..1, from one progress event. Every variant counts the same; inside
    one, iterations count the same and each forward node a share of its iteration.

    Events: {"stage": "start" | "node" | "iteration" | "done", "variant", "index", "total",
    "iterations", "nodes", "iteration" (iterations finished, or for "node" the one running),
    "node" (forward nodes finished in it)}.
    """
    total = max(int(event.get("total") or 1), 1)
    index = int(event.get("index") or 0)
    if event.get("stage") == "done":
        return min(1.0, (index + 1) / total)
    iterations = max(int(event.get("iterations") or 1), 1)
    nodes = max(int(event.get("nodes") or 1), 1)
    within = (int(event.get("iteration") or 0) + int(event.get("node") or 0) / nodes) / iterations
    return min(1.0, (index + min(within, 1.0)) / total)


__all__ = ["progress_fraction", "run_loaded", "run_scenario"]
