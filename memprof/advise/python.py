"""Advice for a Python scenario (`@memprof.scenario`): its candidates are module calls.

The function runs inside a `memprof.profile`, as `memprof run` runs it, with two global module
hooks more. Each call of a module without children is a node, named as the profile names it
(`act`, `layers.1`; its second call `act@2`, ...): what it read, what the autograd nodes it made
saved, its operand, and its result's values. A call of a module whose `inplace` is false (ReLU,
Dropout, SiLU, ...) is a candidate, switched in a re-run by setting `inplace` for that call only.

Plain tensor code between module calls is not a node: the verdicts see the reads and saves of
module calls only, and the proof (every module result, every parameter's gradient and value at
the end, bitwise) is what catches a hazard in the code between them.
"""

from __future__ import annotations

import weakref
from types import SimpleNamespace
from typing import Any

from memprof.advise.analysis import _snapshot, make_facts, record_result, verdicts
from memprof.advise.proof import RunResult


class _Hooks:
    """The global module hooks of one run."""

    def __init__(self, prof, switch: frozenset):
        import engine

        self.engine = engine
        self.prof = prof
        self.switch = switch
        self.calls: dict[str, int] = {}
        self.stack: list = []
        self.facts: dict = {}
        self.values: dict[tuple, Any] = {}
        self.names: dict[int, str] = {}
        self.seen: weakref.WeakSet = weakref.WeakSet()
        self.leaves: dict[int, tuple[str, Any]] = {}  # id -> (path, module) of modules called

    def pre(self, module, args):
        if any(True for _ in module.children()):
            self.stack.append(None)
            return None
        from memprof.scenario.build import storage_key

        path = self.prof._module_path(module)
        n = self.calls[path] = self.calls.get(path, 0) + 1
        cid = path if n == 1 else f"{path}@{n}"
        self.leaves.setdefault(id(module), (path, module))
        tensors = [a for a in args if isinstance(a, self.engine.Tensor)][:1]
        candidate = getattr(module, "inplace", None) is False
        names = [self.names.get(storage_key(t), "its input") for t in tensors]
        self.facts[cid] = make_facts(
            len(self.facts), cid, type(module).__name__, candidate, names, tensors
        )
        restore = None
        if cid in self.switch and candidate:
            restore, module.inplace = module.inplace, True
        self.stack.append((cid, module, restore))
        return None

    def post(self, module, args, output):
        if not self.stack:
            return None
        item = self.stack.pop()
        if item is None:
            return None
        from memprof.scenario.build import storage_key

        cid, module, restore = item
        if restore is not None:
            module.inplace = restore
        if isinstance(output, self.engine.Tensor):
            record_result(self.facts[cid], [output], self.seen)
            self.names[storage_key(output)] = f"{cid}'s result"
            self.values[("node", 0, cid)] = _snapshot(output)
        return None

    def named_state(self) -> list[tuple[str, Any]]:
        """(name, tensor) of every parameter and buffer of the modules called."""
        out = []
        for path, module in self.leaves.values():
            for pname, p in module.named_parameters():
                out.append((f"{path}.{pname}", p))
            buffers = getattr(module, "named_buffers", None)
            if buffers is not None:
                for bname, b in buffers():
                    out.append((f"{path}.{bname}", b))
        return out

    def capture_end(self) -> None:
        for name, t in self.named_state():
            g = getattr(t, "grad", None)
            if g is not None:
                self.values[("grad", 0, name)] = _snapshot(g)
            self.values[("final", name)] = _snapshot(t.detach())


def run_python(loaded, variant, switch: frozenset = frozenset()) -> RunResult:
    """Run one variant of a Python scenario as `memprof run` does, recording module calls."""
    from engine.nn.modules.module import (
        register_module_forward_hook,
        register_module_forward_pre_hook,
    )
    from memprof.profile import Profile
    from memprof.runner import _RUN_LOCK
    from memprof.scenario.build import storage_key

    spec = variant.spec
    prof = Profile(
        loaded.name,
        device=spec.device,
        allocator=spec.allocator,
        save=False,
        standalone=False,
        seed=spec.seed,
        memory_limit=spec.memory_limit,
        variant=variant.name,
        params=variant.params,
        description=loaded.description,
        path=loaded.path,
    )
    hooks = None
    with _RUN_LOCK:
        try:
            with prof:
                hooks = _Hooks(prof, switch)
                handles = [
                    register_module_forward_pre_hook(hooks.pre),
                    register_module_forward_hook(hooks.post),
                ]
                try:
                    loaded.definition.fn(**variant.params)
                finally:
                    for h in handles:
                        h.remove()
        except Exception:  # the variant failed: its entry says how
            pass
        state = {}
        if hooks is not None:
            if prof.entry["status"] == "ok":
                hooks.capture_end()
            state = {storage_key(t): name for name, t in hooks.named_state()}
        result = RunResult(
            prof.entry,
            hooks.values if hooks else {},
            hooks.facts if hooks else {},
            state,
            {},
        )
        if hooks is not None:
            hooks.leaves.clear()  # the modules' storages go with the run
    return result


class PythonRuns:
    """How advice runs a Python scenario's variant (see `advise_loaded`)."""

    def __init__(self, loaded, variant):
        self.loaded = loaded
        self.variant = variant
        self._order: dict[str, int] = {}

    def record(self) -> RunResult:
        ref = run_python(self.loaded, self.variant)
        self._order = {cid: f.index for cid, f in ref.facts.items()}
        return ref

    def switched(self, ids) -> RunResult:
        return run_python(self.loaded, self.variant, frozenset(ids))

    def verdicts(self, ref):
        backward = any(p.get("name") == "backward" for p in ref.entry.get("phases", []))
        spec = SimpleNamespace(
            phases=[SimpleNamespace(backward="loss")] if backward else ["forward"],
            iterations=1,  # a later iteration's calls are nodes of their own (`act@2`)
        )
        return verdicts(spec, ref.facts, ref.state, ref.inputs)

    def order(self, cid: str) -> tuple:
        return (self._order.get(cid, len(self._order)), ())
