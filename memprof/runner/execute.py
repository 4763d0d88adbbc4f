"""Run one variant of a scenario on the engine, from a fresh allocator state, and build its part of
the report: timeline, peak, per-op rows, warnings, expectations.
"""

from __future__ import annotations

import gc
import time
from contextlib import contextmanager
from typing import Any

from memprof.reports.build import evaluate, peak, timeline
from memprof.reports.types import Variant
from memprof.scenario.build import (
    Bindings,
    ProgramHooks,
    bound_names,
    build_module,
    forward_options,
    make_input,
    make_optimizer,
    named_parameters,
    optimizers_in_backward,
    resolve_device,
    results,
    run_forward,
    storage_key,
)
from memprof.scenario.model import ModuleCall
from memprof.units import format_bytes

_perf_ns = time.perf_counter_ns


class StaleReadError(RuntimeError):
    """strict: true and a node read a name whose storage was overwritten in place since."""


def backend_of(device: str) -> str:
    return {"cpu": "numpy", "cuda": "cupy", "meta": "meta"}.get(device.split(":")[0], device)


class _Run(ProgramHooks):
    """The state of one variant run (kept on an object so a failure can still be reported); the
    interpreter's hooks record each forward node as a recorder step."""

    def __init__(self, variant, progress=None):
        import engine
        from engine.allocator import get_allocator
        from memprof.runner.recorder import Recorder

        self.engine = engine
        self.variant = variant
        self.spec = variant.spec
        self.device = resolve_device(self.spec.device)
        self.alloc = get_allocator(self.device)
        self.rec = Recorder(self.alloc)
        self.bindings = Bindings()
        self.modules: dict[str, Any] = {}
        self.inputs: dict[str, Any] = {}
        self.optimizers: dict[int, Any] = {}
        self.warnings: list[dict] = []
        self._warned: set = set()
        self.current_node: str | None = None
        self.baseline_bytes = 0
        self.k = 0  # the iteration running
        self._step = None
        self._progress = progress  # (iteration, node index, nodes) after each forward node

    # --- lifecycle ------------------------------------------------------------------------------
    def prepare(self) -> None:
        alloc = self.alloc
        if alloc.model.allocated_bytes:  # something outlived the last run (a reference cycle?)
            gc.collect()
        alloc.reset()
        if alloc.model_name != self.spec.allocator:
            alloc.set_model(self.spec.allocator)
        alloc.set_limit(self.spec.memory_limit)
        self.engine.manual_seed(self.spec.seed)
        alloc.add_observer(self.rec)

    def finish(self) -> None:
        self.alloc.remove_observer(self.rec)

    def teardown(self) -> None:
        self.bindings = Bindings()
        self.inputs.clear()
        self.modules.clear()
        self.optimizers.clear()
        if self.alloc.model.allocated_bytes:  # storages held by reference cycles
            gc.collect()
        self.alloc.set_limit(None)
        self.alloc.reset()

    # --- phases ---------------------------------------------------------------------------------
    def setup(self) -> None:
        with self.rec.phase("setup", None):
            self._make_inputs_and_modules()
        self.baseline_bytes = self.alloc.model.allocated_bytes
        self.levers = forward_options(self.spec, self.device)  # checkpoint:, autocast:

    def _make_inputs_and_modules(self) -> None:
        spec, engine = self.spec, self.engine
        self.current_node = "<inputs>"
        for name, ispec in spec.inputs.items():
            # one step each: what making an input frees (randint's floats) is temporary
            with self._setup_step("<inputs>", ispec.init, "input", name):
                t = make_input(engine, ispec, spec.dtype, self.device)
            self.inputs[name] = t
            self.bindings.bind(name, t)
        self.current_node = "<params>"
        for name, mspec in spec.modules.items():
            with self._setup_step("<params>", mspec.type, "parameter", name):
                self.modules[name] = build_module(engine, mspec, self.device, spec.dtype)
        for pname, t in named_parameters(self.modules):
            self.rec.name_storage(storage_key(t), pname)
        self.current_node = None
        self._optimizers_in_backward()

    def _optimizers_in_backward(self) -> None:
        """An optimizer phase with `in_backward: true`: its per-parameter optimizers and their
        hooks are made before the first backward, which then steps them; what they allocate is
        optimizer state, attributed to the AccumulateGrad node whose hook ran them."""
        from contextlib import contextmanager

        from engine.allocator import context

        @contextmanager
        def around(action: str):
            with self.rec.inner_span(), context(category="optimizer_state", op=action):
                yield

        for i, phase in enumerate(self.spec.phases):
            ospec = getattr(phase, "optimizer", None)
            if ospec is not None and ospec.in_backward:
                self.optimizers[i] = optimizers_in_backward(
                    self.engine, ospec, self.modules, around
                )

    def _setup_step(self, node: str, op: str, category: str, tensor: str):
        """Making one input or module: a step of its own, with no op row."""
        return self.rec.step(
            node, op, "setup", None, category=category, context_op=op, tensor=tensor, row=False
        )

    def iteration(self, k: int) -> None:
        """One training step: the phases in order, then its names are released (a step is a
        function: what it bound dies when it returns; inputs, parameters, gradients and optimizer
        state live on)."""
        self.k = k
        for i, phase in enumerate(self.spec.phases):
            if phase == "forward":
                with self.rec.phase("forward", k):
                    run_forward(self.spec.program, self.bindings, self.modules, self, self.levers)
                self.current_node = None
            elif hasattr(phase, "backward"):
                with self.rec.phase("backward", k):
                    self.backward(k, phase)
            else:
                with self.rec.phase("optimizer", k):
                    self.optimizer_step(k, i, phase.optimizer)
        self.release(k)

    def release(self, k: int) -> None:
        with self.rec.phase("release", k):
            with self.rec.step(
                "<release>", "release", "release", k, context_op="release", row=False
            ):
                self.bindings.drop(bound_names(self.spec.program))

    # --- the interpreter's hooks (the forward program) -------------------------------------------
    def stale(self, index, node, stale) -> None:
        self.current_node = node.id
        self._stale(stale, self.k)

    @contextmanager
    def node(self, index, node, tensors):
        self.current_node = node.id
        is_module = isinstance(node, ModuleCall)
        op = self.spec.modules[node.module].type if is_module else node.op
        with self.rec.step(node.id, op, "forward", self.k, category="activation") as step:
            step.module = node.module if is_module else None
            self._step = step
            yield
        if self._progress is not None:
            self._progress(self.k, index + 1, len(self.spec.program))

    def done(self, index, node, tensors, out, wrote) -> None:
        rec, step = self.rec, self._step
        for name, value in results(node, out):
            sid = storage_key(value)
            if rec.allocated_since(sid, step.first):  # the node's own result: an activation
                rec.name_storage(sid, name, category="activation")
        clone, ops = step.clones()
        step.inplace = wrote or bool(getattr(node, "inplace", False))
        step.clone_bytes = clone
        if clone and (node.id, "clone") not in self._warned:
            self._warned.add((node.id, "clone"))
            self.warnings.append(
                {
                    "kind": "inplace_clone",
                    "node": node.id,
                    "other_node": None,
                    "tensor": node.inputs[0] if node.inputs else None,
                    "iteration": self.k,
                    "bytes": clone,
                    "message": (
                        f"node {node.id}'s in-place {', '.join(ops)} kept a {format_bytes(clone)} "
                        f"clone of its input for backward: it saves no memory"
                    ),
                }
            )

    # --- backward and optimizer -----------------------------------------------------------------
    def backward(self, k: int, phase) -> None:
        self.current_node = "<backward>"
        loss = self.bindings.values[phase.backward]
        with self.rec.step(
            "<backward>",
            "backward",
            "backward",
            k,
            category="gradient",
            per_op=True,
            per_backward_node=True,
        ):
            loss.backward(retain_graph=phase.retain_graph or None)
        self._name_grads()
        self.current_node = None

    def optimizer_step(self, k: int, index: int, ospec) -> None:
        from engine.allocator import context

        rec = self.rec
        self.current_node = "<optimizer>"
        if ospec.in_backward:  # stepped by backward's hooks: only their state to name
            for opt in self.optimizers[index].values():
                self._name_optimizer_state(opt)
            self.current_node = None
            return
        opt = self.optimizers.get(index)
        if opt is None:
            with context(
                phase="optimizer", node="<optimizer>", category="optimizer_state", iteration=k
            ):
                opt = self.optimizers[index] = make_optimizer(self.engine, ospec, self.modules)
        with rec.step(
            "<optimizer>",
            "step",
            "optimizer",
            k,
            category="optimizer_state",
            context_op="step",
        ):
            opt.step()
        self._name_optimizer_state(opt)
        if ospec.zero_grad:
            with rec.step(
                "<optimizer>",
                "zero_grad",
                "optimizer",
                k,
                category="optimizer_state",
                context_op="zero_grad",
            ):
                opt.zero_grad(set_to_none=True)
        self.current_node = None

    # --- helpers --------------------------------------------------------------------------------
    def _stale(self, stale, k: int) -> None:
        if self.spec.strict:
            raise StaleReadError(stale.message + " (strict: true)")
        key = (stale.reader, stale.tensor, stale.writers)
        if key in self._warned:
            return
        self._warned.add(key)
        self.warnings.append(
            {
                "kind": "stale_read",
                "node": stale.reader,
                "other_node": stale.writers[-1],
                "tensor": stale.tensor,
                "iteration": k,
                "message": stale.message,
            }
        )

    def _name_grads(self) -> None:
        named = [(n, t) for n, t in self.inputs.items()] + named_parameters(self.modules)
        for name, t in named:
            g = getattr(t, "grad", None)
            if g is not None:
                sid = storage_key(g)
                if self.rec.live_tensor_name(sid) is None:
                    self.rec.name_storage(sid, f"{name}.grad")

    def _name_optimizer_state(self, opt) -> None:
        state = getattr(opt, "state", None)
        if not state:
            return
        names = {id(t): n for n, t in named_parameters(self.modules)}
        for param, slots in state.items():
            pname = names.get(id(param), "param")
            if not isinstance(slots, dict):
                continue
            for key, value in slots.items():
                if isinstance(value, self.engine.Tensor):
                    sid = storage_key(value)
                    if self.rec.live_tensor_name(sid) is None:
                        self.rec.name_storage(sid, f"{pname}.{key}")

    def observe_values(self, names: list[str]) -> dict[str, Any]:
        import numpy as np

        out: dict[str, Any] = {}
        for key in names:
            base, _, attr = key.partition(".")
            t = self.bindings.values.get(base, self.inputs.get(base))
            if t is None:
                out[key] = f"{base} is not bound"
                continue
            if attr == "grad":
                t = t.grad
                if t is None:
                    out[key] = f"{base} has no gradient"
                    continue
            try:
                with self.engine.no_grad():
                    t = t.detach()
                    if t.device.type == "cuda":
                        t = t.cpu()
                    arr = np.asarray(t.numpy(), dtype=np.float64)
                out[key] = (float(arr.min()), float(arr.max())) if arr.size else "empty"
            except Exception as exc:  # meta tensors have no values
                out[key] = f"cannot read values: {exc}"
        return out


def run_variant(variant, *, on_iteration=None, on_node=None) -> Variant:
    """Run one variant and return its report entry (docs/report-format.md, `variants[i]`).

    A failure (an exception from the engine, out of memory, a strict stale read) ends the run:
    the entry has status error/oom and everything measured up to the failure.
    on_iteration(k, n): after iteration k of n; on_node(k, j, m): after forward node j of m in
    iteration k (for progress bars).
    """
    from engine.utils.collector import paused

    run = None
    try:
        run = _Run(variant, on_node)
        run.prepare()  # the device, allocator model, memory limit and seed
        with paused():  # the engine's graphs hold no cycles: see engine/utils/collector.py
            entry = _measure(run, on_iteration)
        return _serialisable_entry(entry, run.rec.records)
    except Exception as exc:  # a step around the program failed: the variant fails, not the run
        return _failed_entry(variant, exc, run)
    finally:  # also on KeyboardInterrupt: no limit or observer is left on the allocator
        if run is not None:
            run.finish()
            run.teardown()


def _failed_entry(variant, exc: BaseException, run) -> dict[str, Any]:
    """The entry of a variant whose preparation or report building failed: status error, the
    error, and the peak figures the allocator had, so the report still has every variant."""
    model = getattr(getattr(run, "alloc", None), "model", None)
    peak_alloc = getattr(model, "max_allocated_bytes", 0) if model is not None else 0
    peak_res = getattr(model, "max_reserved_bytes", 0) if model is not None else 0
    final = getattr(model, "allocated_bytes", 0) if model is not None else 0
    return {
        "name": variant.name,
        "params": _serialisable(variant.params),
        "status": "error",
        "error": _error(exc, getattr(run, "current_node", None) or "<run>"),
        "device": str(getattr(run, "device", None) or variant.spec.device),
        "allocator": variant.spec.allocator,
        "peak_allocated_bytes": peak_alloc,
        "peak_reserved_bytes": peak_res,
        "baseline_bytes": getattr(run, "baseline_bytes", 0),
        "final_allocated_bytes": final,
        "num_allocs": 0,
        "num_frees": 0,
        "num_ooms": 0,
        "iterations": variant.spec.iterations,
        "duration_s": 0.0,
        "program_duration_s": 0.0,
        "timeline": timeline([], 0),
        "phases": [],
        "peak": peak([]),
        "ops": [],
        "warnings": [],
        "expectations": [],
    }


def _serialisable(value: Any) -> Any:
    """`value` if it is plain JSON; else a copy with what JSON cannot hold written as text
    (NaN and infinities, say from observed values), so the report can always be saved."""
    import json

    try:
        json.dumps(value, allow_nan=False)
        return value
    except (TypeError, ValueError):
        pass

    def plain(v: Any) -> Any:
        if isinstance(v, dict):
            return {str(k): plain(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [plain(x) for x in v]
        if isinstance(v, float) and (v != v or v in (float("inf"), float("-inf"))):
            return str(v)
        if v is None or isinstance(v, (str, int, float, bool)):
            return v
        return str(v)

    return plain(value)


def _serialisable_entry(entry: dict[str, Any], records) -> dict[str, Any]:
    """_serialisable(entry) for an entry whose timeline is `records.columns(...)`, without
    encoding the timeline: its columns hold ints, finite floats, action names and the log's
    interned values (EventLog.columns), so checking those values, a few hundred, checks the
    columns, tens of thousands (encoding them took 12 of the 18 ms that checking a GPT-2 small
    step's entry took). An entry that does not pass goes through _serialisable whole."""
    import json

    rest = {k: v for k, v in entry.items() if k != "timeline"}
    interned = [records.places.values, records.strings.values, records.categories.values]
    try:
        json.dumps([rest, interned], allow_nan=False)
    except (TypeError, ValueError):
        return _serialisable(entry)
    return entry


def _measure(run: _Run, on_iteration) -> Variant:
    from engine.errors import OutOfMemoryError

    spec, variant = run.spec, run.variant
    status, error = "ok", None
    t0 = run.rec.t0_ns = _perf_ns()
    try:
        run.setup()
        for k in range(spec.iterations):
            run.iteration(k)
            if on_iteration is not None:
                on_iteration(k, spec.iterations)
    except (OutOfMemoryError, MemoryError) as exc:  # MemoryError: a kernel's own temporaries
        status, error = "oom", _error(exc, run.current_node)
    except Exception as exc:  # the engine's own error is the finding; report it, don't crash
        status, error = "error", _error(exc, run.current_node)
    t1 = _perf_ns()
    run.finish()
    model = run.alloc.model
    records = run.rec.records  # storages numbered 1, 2, ... in order of first appearance
    counts = records.counts()
    entry: Variant = {
        "name": variant.name,
        "params": variant.params,
        "status": status,
        "error": error,
        "device": run.device,
        "allocator": spec.allocator,
        "peak_allocated_bytes": model.max_allocated_bytes,
        "peak_reserved_bytes": model.max_reserved_bytes,
        "baseline_bytes": run.baseline_bytes,
        "final_allocated_bytes": model.allocated_bytes,
        "num_allocs": counts["alloc"],
        "num_frees": counts["free"],
        "num_ooms": counts["oom"],
        "iterations": spec.iterations,
        "duration_s": round((t1 - t0) / 1e9, 9),
        "program_duration_s": round(
            sum(
                p["end_ns"] - p["start_ns"]
                for p in run.rec.phases
                if p["name"] not in ("setup", "release")
            )
            / 1e9,
            9,
        ),
        "timeline": timeline(records, t0),
        "phases": [
            {
                "name": p["name"],
                "iteration": p["iteration"],
                "start_index": p["start_index"],
                "end_index": p["end_index"],
                "start_s": round((p["start_ns"] - t0) / 1e9, 9),
                "end_s": round((p["end_ns"] - t0) / 1e9, 9),
            }
            for p in run.rec.phases
        ],
        "peak": peak(records),
        "ops": run.rec.ops,
        "warnings": run.warnings,
        "expectations": [],
    }
    from engine.device import as_device

    if as_device(run.device).type == "cuda":
        # CuPy's own temporaries (seen by the engine's CuPy memory hook) beside the model's
        # figures, and the real pool's used/total bytes.
        entry["backend_external"] = dict(run.rec.external)
        from engine import memory as engine_memory

        stats = engine_memory.memory_stats(run.device)
        entry["cupy_pool"] = {
            k.split(".", 1)[1]: v for k, v in stats.items() if k.startswith("cupy_pool.")
        }
    exp = variant.expect
    try:
        observed = run.observe_values(list(exp.values)) if exp is not None and exp.values else None
        entry["expectations"] = evaluate(exp, entry, observed)
    except Exception as exc:  # what was measured stays; the variant fails with the reason
        entry["status"] = "error"
        entry["error"] = entry["error"] or _error(exc, "<expectations>")
    return entry


def _error(exc: BaseException, node: str | None) -> dict[str, Any]:
    return {"type": type(exc).__name__, "message": str(exc), "node": node}
