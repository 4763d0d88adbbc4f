"""The proof: re-run the variant with some candidates switched to in place and compare.

A re-run passes when it finishes without an error, reports no stale read the original did not,
and (off meta) every tensor the program binds, every gradient and every parameter at the end is
bitwise equal to the original run's. On meta there are no values: the re-run is checked by the
engine's version counters (a write over a saved tensor fails backward) and stale reads only.
"""

from __future__ import annotations

import re
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


_ID = re.compile(r"^(.+?)((?:\[\d+\])*)$")


def parse_id(cid: str) -> tuple[str, tuple[int, ...]]:
    """`h` -> ("h", ()); `features[1]` -> ("features", (1,)); a layer of a Sequential call."""
    m = _ID.match(cid)
    path = tuple(int(i) for i in re.findall(r"\[(\d+)\]", m.group(2)))
    return m.group(1), path


def layer_spec(module_spec, path: tuple[int, ...]):
    for i in path:
        module_spec = module_spec.layers[i]
    return module_spec


def switched(variant, node_ids) -> tuple[Any, frozenset]:
    """`variant` with the given candidates switched to their in-place form: a copy whose op nodes
    have `inplace: true`, and the module calls to switch while the run goes, as
    (node id, layer path) pairs. A module call is switched by setting the engine module's
    `inplace` for that node's call only, so a module other nodes also call (a ReLU used twice, a
    Sequential with parameters) stays one module with the same parameters.
    """
    from memprof.scenario import Variant

    spec = variant.spec.model_copy(deep=True)
    by_id = {node.id: node for node in spec.program}
    modules = set()
    for cid in node_ids:
        nid, path = parse_id(cid)
        node = by_id[nid]
        if isinstance(node, ModuleCall):
            modules.add((nid, path))
        else:
            node.inplace = True
    return Variant(variant.name, dict(variant.params), spec, None), frozenset(modules)


def with_optimizer_in_backward(variant):
    """`variant` with every optimizer phase stepped in backward (`in_backward: true`)."""
    from memprof.scenario import Variant

    spec = variant.spec.model_copy(deep=True)
    for phase in spec.phases:
        ospec = getattr(phase, "optimizer", None)
        if ospec is not None:
            ospec.in_backward = True
    return Variant(variant.name, dict(variant.params), spec, None)


def run_switched(variant, node_ids) -> RunResult:
    """Run `variant` with the candidates `node_ids` in place."""
    copy, modules = switched(variant, node_ids)
    return run_once(copy, modules)


def run_once(variant, modules: frozenset = frozenset()) -> RunResult:
    """Run a variant through the runner, recording the facts and values advice needs; `modules`:
    (node id, layer path) of module calls to run in place (see `switched`)."""
    from memprof.runner import _RUN_LOCK
    from memprof.runner.execute import _failed_entry, _measure, _serialisable_entry

    with _RUN_LOCK:
        run = None
        try:
            run = AdviceRun(variant, modules)
            run.prepare()
            entry = _serialisable_entry(_measure(run, None), run.rec.records)
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


def difference(
    ref: RunResult, run: RunResult, *, gradients: bool = True
) -> tuple[str, list[str]] | None:
    """Why `run` does not reproduce `ref` (a text and the nodes it names), or None if it does.
    gradients=False: gradients after backward are not compared (an optimizer stepped in backward
    consumes and frees them; what they did shows in every value after)."""
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
        if not gradients and key[0] == "grad":
            continue
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
