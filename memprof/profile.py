"""`memprof.profile`: profile any engine code, as a context manager or a decorator.

>>> import engine, memprof
>>> with memprof.profile("relu", device="cpu") as prof:
...     x = engine.rand(1, 64, 512, 512)
...     y = engine.relu(x)
>>> prof.peak
134217728
>>> [row["category"] for row in prof.live_at_peak()]
['input', 'activation']

The block runs from a fresh allocator state (as each scenario variant does: what was allocated
before is forgotten by the counters) with the chosen accounting model, and records what a
scenario run records: every allocator event with its node, op, phase, iteration, category and
tensor name, per-op rows, phases, the peak and what was live at it. On exit the report (the
format of docs/report-format.md, one variant) is in `prof.report` and, unless `save=False`, saved
in the runs directory with its history row, so `memprof report`, `compare`, `check`, `history`
and the dashboard read it like any run.

Attribution, without any annotation in the user's code:
- phases: what `Tensor.backward()` runs is "backward", what an optimizer's `step()` and
  `zero_grad()` run is "optimizer" (the engine marks both while a profiler listens); before the
  first op or module call (creating inputs and modules) it is "setup"; else "forward". Each
  return from backward/optimizer to forward starts the next iteration.
- nodes: a module's forward call is named by its attribute path (`layers.3.mlp.fc1`; a
  top-level module by the variable that holds it, else its class name); an op outside any module
  by its name and the Python `file:line` of the call (`relu @ train.py:12`); backward and
  optimizer events by `<backward>` and `<optimizer>`.
- categories: parameters and buffers, gradients, optimizer state and saved-for-backward tensors
  as the engine tags them; what setup makes is an input, what forward makes an activation, what
  backward makes a gradient, what the optimizer makes its state; freed inside the node that
  made it: temporary. Parameters, their gradients and module outputs get tensor names.
"""

from __future__ import annotations

import functools
import gc
import hashlib
import os
import sys
import time
import types
from typing import Any

_perf_ns = time.perf_counter_ns
_HERE = os.path.dirname(os.path.abspath(__file__))
_ENGINE_DIR = None  # set on first use (the engine package's folder)
_INTERNAL = ("contextlib.py", "functools.py")

# Called with each standalone Profile when its block ends (the pytest plugin collects them).
_listeners: list = []
# Where profiles save when given no runs_dir and save is left as default: None (./memprof-runs);
# the pytest plugin sets False (tests do not litter the working directory) or its --memprof-runs.
_default_runs_dir: object = None


def _engine_dir() -> str:
    global _ENGINE_DIR
    if _ENGINE_DIR is None:
        import engine

        _ENGINE_DIR = os.path.dirname(os.path.abspath(engine.__file__))
    return _ENGINE_DIR


def _user_frame(depth: int = 2):
    """The innermost frame outside the engine and memprof's profiling code, and the name of the
    engine function it called (the API: randn, relu, __mul__, ...)."""
    engine_dir = _engine_dir()
    frame = sys._getframe(depth)
    called = None
    while frame is not None:
        filename = frame.f_code.co_filename
        if filename.startswith(engine_dir):
            called = frame.f_code.co_name
            if called == "__init__":  # making a module: name it by its class
                owner = frame.f_locals.get("self")
                called = type(owner).__name__ if owner is not None else called
        elif not (filename.startswith(_HERE) or filename.endswith(_INTERNAL)):
            return frame, called
        frame = frame.f_back
    return None, called


def _short(path: str) -> str:
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return path
    return path if rel.startswith("..") else rel


class _ProfileObserver:
    """Sits between the allocator and a memprof Recorder: names each event's node, phase,
    iteration and default category, then hands the event on. (An engine MemoryObserver by its
    methods; this module imports nothing from the engine until a profile starts.)"""

    def __init__(self, prof: Profile):
        self.prof = prof
        self.rec = prof.rec
        self.setup = True
        self.iteration = 0
        self.last_phase = "setup"
        self.last_node = None
        self.modules: list[tuple[str, Any, int]] = []  # (path, module, first record) per call

    # --- attribution ----------------------------------------------------------------------------
    def _attribute(self, ev):
        ctx = ev.context
        phase = ctx.get("phase")
        op = ctx.get("op")
        frame = called = None
        if phase not in ("backward", "optimizer") and not self.modules:
            frame, called = _user_frame(3)
        after_step = self.last_phase in ("backward", "optimizer", "release")
        if phase in ("backward", "optimizer"):
            pass
        elif ev.action == "free" and after_step and not self.modules:
            phase = "release"  # what the step's names held, let go after the optimizer
        else:
            if self.setup and (
                self.modules
                or (op is not None and ctx.get("category") != "parameter")
                or (ev.action == "free" and called in (None, "__del__"))  # a name let go
            ):
                self.setup = False
            phase = "setup" if self.setup else "forward"
            if after_step:
                self.iteration += 1
        if self.last_phase == "backward" and phase != "backward":
            self.prof._name_grads()
        self.last_phase = phase
        if phase == "backward":
            node, default = "<backward>", "gradient"
        elif phase == "optimizer":
            node, default = "<optimizer>", "optimizer_state"
        elif phase == "release":
            node, default = "<release>", None
        elif self.modules:
            node, default = self.modules[-1][0], "activation"
        else:
            name = op or called or "?"
            if name == "__del__":  # a storage's last reference went away in the user's code
                name = "free"
            if frame is not None:
                node = f"{name} @ {_short(frame.f_code.co_filename)}:{frame.f_lineno}"
            else:
                node = name
            default = "input" if phase == "setup" else "activation"
        rec = self.rec
        rec.per_op = phase == "backward"
        if node != self.last_node:
            rec.span += 1
            self.last_node = node
        keys = {"node": node, "phase": phase, "iteration": self.iteration}
        if ev.action != "free" and ctx.get("category") is None and default is not None:
            keys["category"] = default
        return type(ev)(
            ev.seq,
            ev.time_ns,
            ev.action,
            ev.device,
            ev.requested,
            ev.bytes,
            ev.storage_id,
            ev.allocated,
            ev.reserved,
            {**ctx, **keys},
            ev.location,
        )

    def on_alloc(self, ev) -> None:
        self.rec.on_alloc(self._attribute(ev))

    def on_free(self, ev) -> None:
        self.rec.on_free(self._attribute(ev))

    def on_oom(self, ev) -> None:
        self.rec.on_oom(self._attribute(ev))

    def on_tag(self, storage_id: int, key: str, value) -> None:
        self.rec.on_tag(storage_id, key, value)

    def on_external(self, ev) -> None:
        self.rec.on_external(ev)

    # events come as AllocEvents (on_alloc, ...) to be attributed, not as the recorder's fields
    # (MemoryObserver.on_event): not forwarded below
    on_event = None

    def __getattr__(self, name: str):
        """Observer callbacks this class does not know (newer engine events) go to the
        recorder when it has them, else do nothing, as MemoryObserver's defaults."""
        if name.startswith("on_"):
            handler = getattr(self.rec, name, None)
            return handler if handler is not None else (lambda *args, **kwargs: None)
        raise AttributeError(name)

    # --- module hooks ---------------------------------------------------------------------------
    def pre_forward(self, module, args):
        path = self.prof._module_path(module)
        self.modules.append((path, module, len(self.rec.records)))
        self.rec.span += 1
        self.last_node = None
        if self.setup:
            self.setup = False
        return None

    def post_forward(self, module, args, output):
        if not self.modules or self.modules[-1][1] is not module:
            return None
        path, _, first = self.modules.pop()
        from engine import Tensor
        from memprof.scenario.build import storage_key

        if isinstance(output, Tensor):
            sid = storage_key(output)
            if self.rec.allocated_since(sid, first):
                self.rec.name_storage(sid, path, category="activation")
        self.rec.span += 1
        self.last_node = None
        return None


class Profile:
    """One profiled block. Use as `with memprof.profile(...) as prof:` or `@memprof.profile(...)`.

    name: the report's scenario name. device: cpu, cuda, meta or auto. allocator: exact or
    caching. runs_dir: where the report is saved (default ./memprof-runs; inside a pytest test
    none, unless the test run gives --memprof-runs DIR); save=False keeps it in memory only. seed: engine.manual_seed before the block (None: leave the generator alone).
    Inside the block, factory functions given no device (engine.rand, module parameters, ...)
    make tensors on the profile's device (engine.set_default_device), as a scenario's do.
    memory_limit: bytes the device may hold (an allocation past it raises OutOfMemoryError,
    which is recorded and re-raised). variant: the variant's name in the report.
    """

    def __init__(
        self,
        name: str = "profile",
        *,
        device: str = "cpu",
        allocator: str = "exact",
        runs_dir: str | os.PathLike | None = None,
        save: bool | None = None,
        seed: int | None = 0,
        memory_limit: int | None = None,
        variant: str = "profile",
        params: dict[str, Any] | None = None,
        description: str = "",
        path: str | None = None,
        expect=None,
        standalone: bool = True,
    ):
        from memprof.scenario.validate import ALLOCATORS, DEVICES

        if device not in DEVICES and not str(device).startswith("cuda:"):
            raise ValueError(f"device must be one of {', '.join(DEVICES)}, got {device!r}")
        if allocator not in ALLOCATORS:
            raise ValueError(f"allocator must be one of {', '.join(ALLOCATORS)}, got {allocator!r}")
        self.name = name
        self.device_name = device
        self.allocator = allocator
        self.runs_dir = runs_dir
        self.save = save
        self.seed = seed
        self.memory_limit = memory_limit
        self.variant = variant
        self.params = dict(params or {})
        self.description = description
        self.path = path
        self.expect = expect
        self.standalone = standalone
        self.report: dict[str, Any] | None = None
        self.entry: dict[str, Any] | None = None
        self.recorded = None  # memprof.reports.record.RecordedRun once saved
        self._active = False

    # --- decorator ------------------------------------------------------------------------------
    def __call__(self, fn):
        """`@memprof.profile(...)`: each call of `fn` runs in a new profile; the wrapper's
        `profile` attribute is the last one."""

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            prof = self._copy(path=self.path or _source_file(fn))
            wrapper.profile = prof
            with prof:
                return fn(*args, **kwargs)

        wrapper.profile = None
        return wrapper

    def _copy(self, **changes) -> Profile:
        options = {
            "device": self.device_name,
            "allocator": self.allocator,
            "runs_dir": self.runs_dir,
            "save": self.save,
            "seed": self.seed,
            "memory_limit": self.memory_limit,
            "variant": self.variant,
            "params": self.params,
            "description": self.description,
            "path": self.path,
            "expect": self.expect,
            "standalone": self.standalone,
        }
        options.update(changes)
        return Profile(self.name, **options)

    # --- the block ------------------------------------------------------------------------------
    def __enter__(self) -> Profile:
        if self._active:
            raise RuntimeError("this memprof.profile is already running; make a new one")
        import engine
        from engine.allocator import get_allocator
        from engine.nn.modules.module import (
            register_module_forward_hook,
            register_module_forward_pre_hook,
        )
        from memprof.runner.recorder import Recorder
        from memprof.scenario.build import resolve_device

        if self.path is None:
            frame, _ = _user_frame(2)
            self.path = frame.f_code.co_filename if frame is not None else "<profile>"
        self.device = str(resolve_device(self.device_name))
        self.alloc = alloc = get_allocator(self.device)
        if alloc.model.allocated_bytes:  # something outlived an earlier run (a reference cycle?)
            gc.collect()
        alloc.reset()
        if alloc.model_name != self.allocator:
            alloc.set_model(self.allocator)
        alloc.set_limit(self.memory_limit)
        if self.seed is not None:
            engine.manual_seed(self.seed)
        # factory functions without a device (and module parameters) make tensors on ours
        self._default_device = engine.get_default_device()
        engine.set_default_device(self.device)
        self._names: dict[int, str] = {}
        self._param_names: dict[int, tuple[str, Any]] = {}
        self._keep: list = []  # the modules named, so their ids stay theirs
        self.t0_ns = _perf_ns()
        self.rec = Recorder(alloc, self.t0_ns)
        self.observer = _ProfileObserver(self)
        alloc.add_observer(self.observer)
        from engine.optim.optimizer import register_optimizer_step_post_hook

        self._hooks = [
            register_module_forward_pre_hook(self.observer.pre_forward),
            register_module_forward_hook(self.observer.post_forward),
            register_optimizer_step_post_hook(self._name_optimizer_state),
        ]
        from engine.utils.collector import paused

        self._gc = paused()  # the engine's graphs hold no cycles: engine/utils/collector.py
        self._gc.__enter__()
        self._active = True
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        t1 = _perf_ns()
        import engine

        self._gc.__exit__(None, None, None)

        for hook in self._hooks:
            hook.remove()
        self.alloc.remove_observer(self.observer)
        engine.set_default_device(self._default_device)
        self._active = False
        status, error = "ok", None
        if exc is not None:
            from engine.errors import OutOfMemoryError

            node = self.observer.modules[-1][0] if self.observer.modules else None
            node = node or self.observer.last_node
            status = "oom" if isinstance(exc, OutOfMemoryError) else "error"
            error = {"type": type(exc).__name__, "message": str(exc), "node": node}
        self._name_grads()
        self.entry = self._entry(status, error, t1)
        self.alloc.set_limit(None)
        if self.standalone:  # a Python scenario's variant is assembled with the others
            self.report = self._assemble([self.entry])
            save = self.save
            if save is None:
                save = self.runs_dir is not None or _default_runs_dir is not False
            if save:
                self._record()
            for listener in tuple(_listeners):
                listener(self)
        return False  # an exception in the block goes on to the caller

    # --- results --------------------------------------------------------------------------------
    @property
    def peak(self) -> int:
        """Peak allocated bytes in the block (the accounting model's)."""
        return self._require()["peak_allocated_bytes"]

    @property
    def peak_reserved(self) -> int:
        return self._require()["peak_reserved_bytes"]

    @property
    def by_category(self) -> dict[str, int]:
        """Bytes live at the peak, per category."""
        return dict(self._require()["peak"]["by_category"])

    def live_at_peak(self) -> list[dict[str, Any]]:
        """The storages live at the peak, biggest first: tensor, bytes, category, node, op,
        phase, iteration."""
        return list(self._require()["peak"]["live"])

    def _require(self) -> dict[str, Any]:
        if self.entry is None:
            raise RuntimeError("the profile has not finished yet; read it after the block")
        return self.entry

    # --- internals ------------------------------------------------------------------------------
    def _module_path(self, module) -> str:
        path = self._names.get(id(module))
        if path is not None:
            return path
        root = _variable_name(module) or type(module).__name__
        self._names[id(module)] = root
        self._keep.append(module)
        from memprof.scenario.build import storage_key

        for sub_name, sub in module.named_modules():
            if sub is not module and id(sub) not in self._names:
                self._names[id(sub)] = sub_name
                self._keep.append(sub)
        # a container's parameters are named by their path in it (layers.0.weight), a single
        # module's by its name (fc1.weight)
        container = any(sub is not module for _, sub in module.named_modules())
        for pname, p in module.named_parameters():
            name = pname if container else f"{root}.{pname}"
            self._param_names.setdefault(id(p), (name, p))
            self.rec.name_storage(storage_key(p), name)
        return root

    def _name_grads(self) -> None:
        from memprof.scenario.build import storage_key

        for name, p in self._param_names.values():
            g = getattr(p, "grad", None)
            if g is not None:
                sid = storage_key(g)
                if self.rec.live_tensor_name(sid) is None:
                    self.rec.name_storage(sid, f"{name}.grad")

    def _name_optimizer_state(self, optimizer, args, kwargs) -> None:
        """After each step: the optimizer's state tensors get their parameter's name and their
        key (fc1.weight.momentum_buffer, fc1.weight.exp_avg, ...), as in a scenario run."""
        from engine import Tensor
        from memprof.scenario.build import storage_key

        for param, slots in getattr(optimizer, "state", {}).items():
            known = self._param_names.get(id(param))
            if known is None or not isinstance(slots, dict):
                continue
            for key, value in slots.items():
                if isinstance(value, Tensor):
                    sid = storage_key(value)
                    if self.rec.live_tensor_name(sid) is None:
                        self.rec.name_storage(sid, f"{known[0]}.{key}")

    def _entry(self, status: str, error, t1: int) -> dict[str, Any]:
        from memprof.reports.build import evaluate, op_row, peak, timeline

        model = self.alloc.model
        records = self.rec.records
        counts = records.counts()
        t0 = self.t0_ns
        ops, phases = [], []
        # one op row per run of events of the same node, phase and iteration
        start = 0
        for i in range(1, len(records) + 1):
            if i < len(records) and _same_step(records[i], records[start]):
                continue
            group = records[start:i]
            first = group[0]
            before = first.allocated
            if first.action == "alloc":
                before -= first.bytes
            elif first.action == "free":
                before += first.bytes
            path = first.node or "?"
            is_module = not path.startswith("<") and " @ " not in path
            module = self._module_by_path(path) if is_module else None
            ops.append(
                op_row(
                    node=path,
                    op=type(module).__name__ if module is not None else _op_name(first),
                    phase=first.phase or "forward",
                    iteration=first.iteration if first.iteration is not None else 0,
                    records=group,
                    allocated_before=before,
                    duration_s=(group[-1].time_ns - first.time_ns) / 1e9,
                    start_s=(first.time_ns - t0) / 1e9,
                    inplace=False,
                    module=path if module is not None else None,
                )
            )
            start = i
        start = 0
        for i in range(1, len(records) + 1):
            if i < len(records) and (records[i].phase, records[i].iteration) == (
                records[start].phase,
                records[start].iteration,
            ):
                continue
            phase = records[start].phase or "forward"
            phases.append(
                {
                    "name": phase,
                    "iteration": None if phase == "setup" else records[start].iteration,
                    "start_index": start,
                    "end_index": i,
                    "start_s": round((records[start].time_ns - t0) / 1e9, 9),
                    "end_s": round((records[i - 1].time_ns - t0) / 1e9, 9),
                }
            )
            start = i
        setup_end = next((i for i, r in enumerate(records) if r.phase != "setup"), len(records))
        baseline = records[setup_end - 1].allocated if setup_end else 0
        iterations = max((r.iteration or 0 for r in records), default=0) + 1
        program = sum(
            p["end_s"] - p["start_s"] for p in phases if p["name"] not in ("setup", "release")
        )
        entry: dict[str, Any] = {
            "name": self.variant,
            "params": self.params,
            "status": status,
            "error": error,
            "device": self.device,
            "allocator": self.allocator,
            "peak_allocated_bytes": model.max_allocated_bytes,
            "peak_reserved_bytes": model.max_reserved_bytes,
            "baseline_bytes": baseline,
            "final_allocated_bytes": model.allocated_bytes,
            "num_allocs": counts["alloc"],
            "num_frees": counts["free"],
            "num_ooms": counts["oom"],
            "iterations": iterations,
            "duration_s": round((t1 - t0) / 1e9, 9),
            "program_duration_s": round(program, 9),
            "timeline": timeline(records, t0),
            "phases": phases,
            "peak": peak(records),
            "ops": ops,
            "warnings": [],
            "expectations": [],
        }
        entry["expectations"] = evaluate(self.expect, entry)
        return entry

    def _module_by_path(self, path: str):
        for module in self._keep:
            if self._names.get(id(module)) == path:
                return module
        return None

    def _assemble(self, entries: list[dict[str, Any]], baseline: str | None = None) -> dict:
        from memprof.reports.build import ScenarioInfo, assemble, environment
        from memprof.runner.execute import backend_of

        first = entries[0] if entries else {"device": self.device, "allocator": self.allocator}
        env = environment(first["device"], backend_of(first["device"]), first["allocator"])
        info = ScenarioInfo(
            name=self.name,
            description=self.description,
            path=self.path or "<profile>",
            sha256=_sha256(self.path),
        )
        return assemble(info, env, entries, baseline)

    def _record(self) -> None:
        from memprof.reports.record import record_run
        from memprof.reports.store import DEFAULT_RUNS_DIR

        runs_dir = self.runs_dir
        if runs_dir is None:
            runs_dir = _default_runs_dir if _default_runs_dir else DEFAULT_RUNS_DIR
        self.recorded = record_run(runs_dir, self.report, source="profile")
        if self.recorded.problem:
            print(f"memprof.profile: {self.recorded.problem}", file=sys.stderr)


def _op_name(record) -> str | None:
    if record.op is not None or record.node is None:
        return record.op
    return record.node.split(" @ ", 1)[0] if " @ " in record.node else None


def _same_step(a, b) -> bool:
    return a.node == b.node and a.phase == b.phase and a.iteration == b.iteration


def _variable_name(obj) -> str | None:
    """The name a caller's frame binds to `obj` (a local, then a global), if any."""
    frame, _ = _user_frame(3)
    while frame is not None:
        for scope in (frame.f_locals, frame.f_globals):
            for key, value in scope.items():
                if value is obj and not key.startswith("_"):
                    return key
        frame = frame.f_back
        if frame is not None and frame.f_code.co_filename.startswith(_engine_dir()):
            break
    return None


def _source_file(fn) -> str:
    code = getattr(fn, "__code__", None)
    return code.co_filename if code is not None else "<profile>"


def _sha256(path: str | None) -> str:
    try:
        with open(path, "rb") as fh:
            return hashlib.sha256(fh.read()).hexdigest()
    except (OSError, TypeError):
        return hashlib.sha256(str(path).encode()).hexdigest()


def profile(name: str = "profile", **options) -> Profile:
    """`memprof.profile(name, device=..., allocator=..., runs_dir=..., save=...)`: a Profile."""
    return Profile(name, **options)


class _CallableModule(types.ModuleType):
    """`memprof.profile(...)` calls `profile(...)`; the module's other names stay reachable."""

    def __call__(self, *args, **kwargs) -> Profile:
        return profile(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
