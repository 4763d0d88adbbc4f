"""The proof: re-run the variant with some candidates switched to in place and compare.

A re-run passes when it finishes without an error, reports no stale read the original did not,
and (off meta) every tensor the program binds, every gradient and every parameter at the end is
bitwise equal to the original run's. On meta there are no values: the re-run is checked by the
engine's version counters (a write over a saved tensor fails backward) and stale reads only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from memprof.advise.analysis import AdviceRun
from memprof.scenario.model import ModuleCall


@dataclass
class RunResult:
    entry: dict[str, Any]
    values: dict[tuple, Any]
    facts: dict = field(default_factory=dict)
    state: dict = field(default_factory=dict)
    inputs: dict = field(default_factory=dict)

    @property
    def peak(self) -> int:
        return int(self.entry["peak_allocated_bytes"])

    @property
    def peak_reserved(self) -> int:
        return int(self.entry["peak_reserved_bytes"])

    def clone_bytes(self, node_id: str) -> int:
        return sum(
            int(w.get("bytes") or 0)
            for w in self.entry.get("warnings", [])
            if w.get("kind") == "inplace_clone" and w.get("node") == node_id
        )


def switched(variant, node_ids) -> Any:
    """A copy of `variant` with the given nodes switched to their in-place form.

    A module call switches its module's `inplace`; a module other nodes also call (and that stay
    out of place) is copied for the switched node, so each node switches alone.
    """
    from memprof.scenario import Variant

    ids = set(node_ids)
    spec = variant.spec.model_copy(deep=True)
    users: dict[str, list[str]] = {}
    for node in spec.program:
        if isinstance(node, ModuleCall):
            users.setdefault(node.module, []).append(node.id)
    for node in spec.program:
        if node.id not in ids:
            continue
        if isinstance(node, ModuleCall):
            name = node.module
            if not set(users[name]) <= ids:
                copy_name = f"{name}__{node.id}"
                spec.modules[copy_name] = spec.modules[name].model_copy(deep=True)
                node.module = name = copy_name
            spec.modules[name].inplace = True
        else:
            node.inplace = True
    return Variant(variant.name, dict(variant.params), spec, None)


def run_once(variant) -> RunResult:
    """Run a variant through the runner, recording the facts and values advice needs."""
    from memprof.runner import _RUN_LOCK
    from memprof.runner.execute import _failed_entry, _measure, _serialisable

    with _RUN_LOCK:
        run = None
        try:
            run = AdviceRun(variant)
            run.prepare()
            entry = _serialisable(_measure(run, None))
            if entry["status"] == "ok":
                run.capture_final()
            return RunResult(
                entry, run.values, run.facts, run.state_storages(), run.input_storages()
            )
        except Exception as exc:  # preparing the variant failed: a failed run, not a crash
            return RunResult(_failed_entry(variant, exc, run), getattr(run, "values", {}))
        finally:
            if run is not None:
                run.finish()
                run.teardown()


def difference(ref: RunResult, run: RunResult) -> tuple[str, list[str]] | None:
    """Why `run` does not reproduce `ref` (a text and the nodes it names), or None if it does."""
    entry = run.entry
    if entry["status"] != "ok":
        err = entry.get("error") or {}
        where = err.get("node")
        text = f"{err.get('type', 'error')} at {where}: {err.get('message', '')}".strip()
        return text, [where] if where and not where.startswith("<") else []
    before = {
        (w["node"], w.get("tensor")) for w in ref.entry["warnings"] if w["kind"] == "stale_read"
    }
    for w in entry["warnings"]:
        if w["kind"] == "stale_read" and (w["node"], w.get("tensor")) not in before:
            return w["message"], [w["node"]]
    for key, want in ref.values.items():
        got = run.values.get(key, _MISSING)
        if got is _MISSING:
            return f"{_describe(key)} is missing from the re-run", _nodes(key)
        if want is None or got is None:  # meta: no values to compare
            continue
        if not _bitwise_equal(want, got):
            return f"{_describe(key)} differs from the original run's", _nodes(key)
    return None


_MISSING = object()


def _bitwise_equal(a, b) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def _describe(key: tuple) -> str:
    if key[0] == "node":
        return f"node {key[2]}'s result (iteration {key[1]})"
    if key[0] == "grad":
        return f"{key[2]}.grad (iteration {key[1]})"
    return f"{key[1]} at the end"


def _nodes(key: tuple) -> list[str]:
    return [key[2]] if key[0] == "node" else []
