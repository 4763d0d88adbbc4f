"""Run one variant of a scenario on the engine, from a fresh allocator state, and build its part of
the report: timeline, peak, per-op rows, warnings, expectations.
"""

from __future__ import annotations

import gc
import time
from typing import Any

from memprof.reports.build import evaluate, op_row, peak, timeline
from memprof.scenario.build import (
    Bindings,
    build_module,
    call_node,
    make_input,
    make_optimizer,
    named_parameters,
    resolve_device,
    storage_key,
)
from memprof.scenario.model import ModuleCall
from memprof.units import format_bytes

_perf_ns = time.perf_counter_ns


class StaleReadError(RuntimeError):
    """strict: true and a node read a name whose storage was overwritten in place since."""


def backend_of(device: str) -> str:
    return {"cpu": "numpy", "cuda": "cupy", "meta": "meta"}.get(device.split(":")[0], device)


class _Run:
    """The state of one variant run (kept on an object so a failure can still be reported)."""

    def __init__(self, variant):
        import engine
        from engine.allocator import get_allocator
        from memprof.runner.recorder import Recorder

        self.engine = engine
        self.variant = variant
        self.spec = variant.spec
        self.device = resolve_device(self.spec.device)
        self.alloc = get_allocator(self.device)
        self.rec = Recorder()
        self.bindings = Bindings()
        self.modules: dict[str, Any] = {}
        self.inputs: dict[str, Any] = {}
        self.optimizers: dict[int, Any] = {}
        self.ops: list[dict] = []
        self.phases: list[dict] = []
        self.warnings: list[dict] = []
        self._warned: set = set()
        self.current_node: str | None = None
        self.baseline_bytes = 0
        self.t0_ns = 0  # when the variant started: op rows' start_s count from it

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
        first, start = len(self.rec.records), _perf_ns()
        try:
            self._make_inputs_and_modules()
        finally:
            self._phase("setup", None, first, start)
        self.baseline_bytes = self.alloc.model.allocated_bytes

    def _make_inputs_and_modules(self) -> None:
        from engine.allocator import context

        spec, engine = self.spec, self.engine
        with context(phase="setup", node="<inputs>", category="input", iteration=None):
            for name, ispec in spec.inputs.items():
                self.current_node = "<inputs>"
                self.rec.span += 1  # what making an input frees (randint's floats) is temporary
                with context(tensor=name, op=ispec.init):
                    t = make_input(engine, ispec, spec.dtype, self.device)
                self.inputs[name] = t
                self.bindings.bind(name, t)
        with context(phase="setup", node="<params>", category="parameter", iteration=None):
            for name, mspec in spec.modules.items():
                self.current_node = "<params>"
                with context(tensor=name, op=mspec.type):
                    self.modules[name] = build_module(engine, mspec, self.device, spec.dtype)
        for pname, t in named_parameters(self.modules):
            self.rec.name_storage(storage_key(t), pname)
        self.current_node = None

    def iteration(self, k: int) -> None:
        """One training step: the phases in order, then its names are released (a step is a
        function: what it bound dies when it returns; inputs, parameters, gradients and optimizer
        state live on)."""
        for i, phase in enumerate(self.spec.phases):
            first, start = len(self.rec.records), _perf_ns()
            name = (
                phase
                if phase == "forward"
                else ("backward" if hasattr(phase, "backward") else "optimizer")
            )
            try:
                if name == "forward":
                    self.forward(k)
                elif name == "backward":
                    self.backward(k, phase)
                else:
                    self.optimizer_step(k, i, phase.optimizer)
            finally:  # a failed phase still gets its span, up to the failure
                self._phase(name, k, first, start)
        self.release(k)

    def release(self, k: int) -> None:
        from engine.allocator import context

        first, start = len(self.rec.records), _perf_ns()
        self.rec.span += 1
        with context(phase="release", node="<release>", op="release", iteration=k):
            self.bindings.drop([n.out_name for n in self.spec.program])
        self._phase("release", k, first, start)

    def forward(self, k: int) -> None:
        from engine.allocator import context

        spec, rec, b = self.spec, self.rec, self.bindings
        for node in spec.program:
            self.current_node = node.id
            for name in node.inputs:
                stale = b.stale(node.id, name)
                if stale is not None:
                    self._stale(stale, k)
            tensors = [b.values[n] for n in node.inputs]
            before = b.versions(tensors)
            rec.span += 1
            first = len(rec.records)
            allocated_before = self.alloc.model.allocated_bytes
            out_name = node.out_name
            with context(phase="forward", node=node.id, category="activation", iteration=k):
                n0 = _perf_ns()
                out = call_node(node, tensors, self.modules)
                n1 = _perf_ns()
            wrote = b.note_writes(node.id, tensors, before)
            sid = storage_key(out)
            if rec.allocated_since(sid, first):  # the node's own result: an activation, by name
                rec.name_storage(sid, out_name, category="activation")
            b.bind(out_name, out)
            records = rec.records[first:]
            clone = sum(r.bytes for r in records if r.action == "alloc" and r.clone_of)
            is_module = isinstance(node, ModuleCall)
            self.ops.append(
                op_row(
                    node=node.id,
                    op=(spec.modules[node.module].type if is_module else node.op),
                    phase="forward",
                    iteration=k,
                    records=records,
                    allocated_before=allocated_before,
                    duration_s=(n1 - n0) / 1e9,
                    start_s=(n0 - self.t0_ns) / 1e9,
                    inplace=wrote or bool(getattr(node, "inplace", False)),
                    clone_bytes=clone,
                    module=node.module if is_module else None,
                )
            )
            if clone and (node.id, "clone") not in self._warned:
                self._warned.add((node.id, "clone"))
                ops = sorted({r.clone_of for r in records if r.clone_of})
                self.warnings.append(
                    {
                        "kind": "inplace_clone",
                        "node": node.id,
                        "other_node": None,
                        "tensor": node.inputs[0] if node.inputs else None,
                        "iteration": k,
                        "bytes": clone,
                        "message": (
                            f"node {node.id}'s in-place {', '.join(ops)} kept a {format_bytes(clone)} "
                            f"clone of its input for backward: it saves no memory"
                        ),
                    }
                )
        self.current_node = None

    def backward(self, k: int, phase) -> None:
        from engine.allocator import context

        rec = self.rec
        t0 = len(rec.records)
        before = self.alloc.model.allocated_bytes
        self.current_node = "<backward>"
        rec.span += 1
        rec.per_op = True
        loss = self.bindings.values[phase.backward]
        start = _perf_ns()
        try:
            with context(phase="backward", node="<backward>", category="gradient", iteration=k):
                loss.backward(retain_graph=phase.retain_graph or None)
        finally:
            rec.per_op = False
        end = _perf_ns()
        self._name_grads()
        self.ops.append(
            op_row(
                node="<backward>",
                op="backward",
                phase="backward",
                iteration=k,
                records=rec.records[t0:],
                allocated_before=before,
                duration_s=(end - start) / 1e9,
                start_s=(start - self.t0_ns) / 1e9,
                inplace=False,
            )
        )
        self.current_node = None

    def optimizer_step(self, k: int, index: int, ospec) -> None:
        from engine.allocator import context

        rec = self.rec
        t0 = len(rec.records)
        self.current_node = "<optimizer>"
        with context(
            phase="optimizer", node="<optimizer>", category="optimizer_state", iteration=k
        ):
            opt = self.optimizers.get(index)
            if opt is None:
                opt = self.optimizers[index] = make_optimizer(self.engine, ospec, self.modules)
            rec.span += 1
            before = self.alloc.model.allocated_bytes
            s0 = _perf_ns()
            with context(op="step"):
                opt.step()
            s1 = _perf_ns()
            self._name_optimizer_state(opt)
            self.ops.append(
                op_row(
                    node="<optimizer>",
                    op="step",
                    phase="optimizer",
                    iteration=k,
                    records=rec.records[t0:],
                    allocated_before=before,
                    duration_s=(s1 - s0) / 1e9,
                    start_s=(s0 - self.t0_ns) / 1e9,
                    inplace=False,
                )
            )
            if ospec.zero_grad:
                rec.span += 1
                z0 = len(rec.records)
                before = self.alloc.model.allocated_bytes
                s0 = _perf_ns()
                with context(op="zero_grad"):
                    opt.zero_grad(set_to_none=True)
                s1 = _perf_ns()
                self.ops.append(
                    op_row(
                        node="<optimizer>",
                        op="zero_grad",
                        phase="optimizer",
                        iteration=k,
                        records=rec.records[z0:],
                        allocated_before=before,
                        duration_s=(s1 - s0) / 1e9,
                        start_s=(s0 - self.t0_ns) / 1e9,
                        inplace=False,
                    )
                )
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

    def _phase(self, name: str, k: int | None, first: int, start_ns: int) -> None:
        end_ns = _perf_ns()
        self.phases.append(
            {
                "name": name,
                "iteration": k,
                "start_index": first,
                "end_index": len(self.rec.records),
                "start_ns": start_ns,
                "end_ns": end_ns,
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


def run_variant(variant, *, on_iteration=None) -> dict[str, Any]:
    """Run one variant and return its report entry (docs/report-format.md, `variants[i]`).

    A failure (an exception from the engine, out of memory, a strict stale read) ends the run:
    the entry has status error/oom and everything measured up to the failure.
    """
    run = _Run(variant)
    run.prepare()
    try:
        return _measure(run, on_iteration)
    finally:  # also on KeyboardInterrupt: no limit or observer is left on the allocator
        run.finish()
        run.teardown()


def _measure(run: _Run, on_iteration) -> dict[str, Any]:
    from engine.errors import OutOfMemoryError

    spec, variant = run.spec, run.variant
    status, error = "ok", None
    t0 = run.t0_ns = _perf_ns()
    try:
        run.setup()
        for k in range(spec.iterations):
            run.iteration(k)
            if on_iteration is not None:
                on_iteration(k, spec.iterations)
    except OutOfMemoryError as exc:
        status, error = "oom", _error(exc, run.current_node)
    except Exception as exc:  # the engine's own error is the finding; report it, don't crash
        status, error = "error", _error(exc, run.current_node)
    t1 = _perf_ns()
    run.finish()
    model = run.alloc.model
    records = run.rec.records
    entry: dict[str, Any] = {
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
        "num_allocs": sum(1 for r in records if r.action == "alloc"),
        "num_frees": sum(1 for r in records if r.action == "free"),
        "num_ooms": sum(1 for r in records if r.action == "oom"),
        "iterations": spec.iterations,
        "duration_s": round((t1 - t0) / 1e9, 9),
        "program_duration_s": round(
            sum(
                p["end_ns"] - p["start_ns"]
                for p in run.phases
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
            for p in run.phases
        ],
        "peak": peak(records),
        "ops": run.ops,
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
    observed = run.observe_values(list(exp.values)) if exp is not None and exp.values else None
    entry["expectations"] = evaluate(exp, entry, observed)
    return entry


def _error(exc: BaseException, node: str | None) -> dict[str, Any]:
    return {"type": type(exc).__name__, "message": str(exc), "node": node}
