"""The runner's allocator observer and its protocol.

Every allocator event is logged (memprof/runner/eventlog.py, a few typed arrays) attributed to
its node, op, phase, iteration, category and tensor name; a free inside the step that allocated the storage makes it `temporary`; tags
from autograd refine categories. The runner speaks to it in steps and phases only::

    rec = Recorder(allocator)
    with rec.phase("forward", k):
        with rec.step("h", "relu", "forward", k, category="activation") as step:
            out = engine.relu(x)
            step.inplace = False

A step is one span (what it allocates and frees in it is its own), timed, with its row in
`rec.ops` (docs/report-format.md, `ops`); a phase is a span of `rec.phases`.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from engine.allocator import AllocEvent, MemoryObserver, context
from memprof.reports.build import CATEGORIES, op_row
from memprof.runner.eventlog import ALLOC, FREE, NO_EVENT, OOM, EventLog, EventSlice

# Engine categories outside the report's list: module buffers (BatchNorm's running stats) are
# module state made with the parameters.
_ALIASES = {"buffer": "parameter"}
_KNOWN = {None, *CATEGORIES}  # the categories _category keeps as they are
_ACTION = {"alloc": ALLOC, "free": FREE, "oom": OOM}
_perf_ns = time.perf_counter_ns


def _category(value):
    if value is None or value in CATEGORIES:
        return value
    return _ALIASES.get(value, "other")


@dataclass(slots=True)
class Record:
    """One allocator event as the report builder reads it, as a plain object (the recorder keeps
    its events in an EventLog, whose `Event` views have these attributes; tests and tools may
    build reports from these). Category and tensor may be refined after the
    event (a free inside the same op makes its allocation `temporary`; autograd tags a storage
    `saved_for_backward`), which is why records are mutable and shared by alloc and free.
    """

    seq: int
    time_ns: int
    action: str  # alloc | free | oom
    bytes: int
    requested: int
    allocated: int
    reserved: int
    storage: int
    node: str | None = None
    op: str | None = None
    phase: str | None = None
    iteration: int | None = None
    owner: Record | None = None  # for a free: the alloc record of the same storage
    category: str | None = None
    tensor: str | None = None
    clone_of: str | None = None  # the in-place op this storage is a backward clone for
    run_of: int | None = None  # backward: which execution of a backward node made the event

    @property
    def storage_category(self) -> str:
        rec = self.owner or self
        return rec.category or "other"

    @property
    def storage_tensor(self) -> str | None:
        return (self.owner or self).tensor


class Step:
    """One step (a program node, the backward call, an optimizer step), made by Recorder.step and
    entered with `with`: entering begins its span, leaving ends it and (on a normal exit) adds its
    row. Inside, the caller may set `inplace`, `clone_bytes` and `module`; `records` are the
    events since the step began.

    A class rather than a generator-based manager: the runner enters one per program node, and a
    generator costs several times more to enter and leave."""

    __slots__ = (
        "_rec",
        "node",
        "op",
        "phase",
        "iteration",
        "first",
        "allocated_before",
        "start_ns",
        "end_ns",
        "inplace",
        "clone_bytes",
        "module",
        "clones_tagged",
        "_context",
        "_per_op",
        "_row",
        "_per_backward_node",
    )

    def __init__(self, rec: Recorder, node, op, phase, iteration, keys, per_op, row, per_node):
        self._rec = rec
        self.node, self.op, self.phase, self.iteration = node, op, phase, iteration
        self._context = context(**keys)
        self._per_op, self._row, self._per_backward_node = per_op, row, per_node
        self.first = self.clones_tagged = self.allocated_before = 0
        self.start_ns = self.end_ns = 0
        self.inplace = False
        self.clone_bytes = 0
        self.module: str | None = None

    def __enter__(self) -> Step:
        rec = self._rec
        rec.span += 1
        self.first = len(rec.records)
        self.clones_tagged = rec.records.clones_tagged
        self.allocated_before = rec._allocated_now()
        rec.per_op = self._per_op
        self._context.__enter__()
        self.start_ns = _perf_ns()
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        self.end_ns = _perf_ns()
        self._context.__exit__()
        rec = self._rec
        rec.per_op = False
        if exc_type is None and self._row:
            if self._per_backward_node:
                rec.ops.extend(rec._backward_rows(self))
            else:
                rec.ops.append(rec._row(self))
        return False

    @property
    def records(self) -> EventSlice:
        return self._rec.records[self.first :]

    def clones(self) -> tuple[int, list[str]]:
        """records.clones(): (bytes, sorted op names) of the in-place clones allocated in the
        step; (0, []) without reading the records when no clone was tagged since it began."""
        if self._rec.records.clones_tagged == self.clones_tagged:
            return 0, []
        return self.records.clones()


class Recorder(MemoryObserver):
    """Collects records, op rows and phase spans for one variant.

    allocator: the TrackedAllocator observed (its allocated bytes start each op row's peak);
    t0_ns: the variant's start on perf_counter_ns (op rows' `start_s` count from it).
    """

    def __init__(self, allocator=None, t0_ns: int | None = None):
        self.records = EventLog()
        self.ops: list[dict[str, Any]] = []
        self.phases: list[dict[str, Any]] = []
        self.allocator = allocator
        self.t0_ns = _perf_ns() if t0_ns is None else t0_ns
        self.span = 0  # the current step; events in one step share it
        self.per_op = False
        self._live: dict[int, tuple[int, tuple | None]] = {}  # storage id -> (row, span)
        self._op_span = 0
        self._last_op: object = None
        self._fixed_key: tuple | None = None  # inner_span's
        self._inner = 0
        # cuda only: bytes CuPy's pool handed out that are not engine storages
        self.external = {
            "num_allocs": 0,
            "num_frees": 0,
            "current_bytes": 0,
            "peak_bytes": 0,
            "by_op": {},
        }

    # --- the protocol ---------------------------------------------------------------------------
    def _allocated_now(self) -> int:
        return self.allocator.model.allocated_bytes if self.allocator is not None else 0

    def step(
        self,
        node: str,
        op: str | None,
        phase: str,
        iteration: int | None,
        *,
        category: str | None = None,
        context_op: str | None = None,
        tensor: str | None = None,
        per_op: bool = False,
        row: bool = True,
        per_backward_node: bool = False,
    ) -> Step:
        """One span, to enter with `with`: events inside are attributed to (node, phase,
        iteration, category), and to `context_op`/`tensor` when given (engine ops name
        themselves otherwise). per_op: each run of events of the same engine op is its own span
        (backward runs many ops in one call).
        On a normal exit the step's row is appended to `ops` (row=False: none, e.g. making an
        input); a step that raises leaves no row, its events stay in `records`.
        per_backward_node: one row per backward node run (ReluBackward0, ...) instead of one for
        the step: `loss.backward()` runs many nodes in one call."""
        keys: dict[str, Any] = {"phase": phase, "node": node, "iteration": iteration}
        if category is not None:
            keys["category"] = category
        if context_op is not None:
            keys["op"] = context_op
        if tensor is not None:
            keys["tensor"] = tensor
        return Step(self, node, op, phase, iteration, keys, per_op, row, per_backward_node)

    def _row(self, step: Step) -> dict[str, Any]:
        return op_row(
            node=step.node,
            op=step.op,
            phase=step.phase,
            iteration=step.iteration,
            records=step.records,
            allocated_before=step.allocated_before,
            duration_s=(step.end_ns - step.start_ns) / 1e9,
            start_s=(step.start_ns - self.t0_ns) / 1e9,
            inplace=step.inplace,
            clone_bytes=step.clone_bytes,
            module=step.module,
        )

    def _backward_rows(self, step: Step) -> list[dict[str, Any]]:
        """One row per run of a backward node, in the order they ran: what it allocated, freed
        and peaked at; its time runs from its first event to the next node's first event (the
        engine names the running node to observers, not its start and end). Events outside any
        node (the loss's seed gradient) stay with the step's own node (`<backward>`)."""
        records = step.records
        if not records:
            return [self._row(step)]
        log = self.records
        kinds = log.kinds()
        groups = records.runs()
        rows = []
        for n, (run, first, end) in enumerate(groups):
            kind, row = kinds[log.where[first]], log.row[first]
            change = log.bytes[row] if kind == ALLOC else -log.bytes[row] if kind == FREE else 0
            start_ns = log.time_ns[first] if n else step.start_ns
            stop_ns = log.time_ns[groups[n + 1][1]] if n + 1 < len(groups) else step.end_ns
            rows.append(
                op_row(
                    node=log.places.values[log.where[first]][1] if run else step.node,
                    op=step.op,
                    phase=step.phase,
                    iteration=step.iteration,
                    records=log[first:end],
                    allocated_before=log.allocated[first] - change,
                    duration_s=max(stop_ns - start_ns, 0) / 1e9,
                    start_s=(start_ns - self.t0_ns) / 1e9,
                    inplace=False,
                )
            )
        return rows

    @contextmanager
    def phase(self, name: str, iteration: int | None) -> Iterator[None]:
        """A span of `phases`; a phase that fails still gets its span, up to the failure."""
        first, start = len(self.records), _perf_ns()
        try:
            yield
        finally:
            self.phases.append(
                {
                    "name": name,
                    "iteration": iteration,
                    "start_index": first,
                    "end_index": len(self.records),
                    "start_ns": start,
                    "end_ns": _perf_ns(),
                }
            )

    # --- the observer ---------------------------------------------------------------------------
    @contextmanager
    def inner_span(self) -> Iterator[None]:
        """Events inside are one span of their own (what they allocate and free there is
        `temporary`), inside a per-op step: an optimizer step that a backward hook runs."""
        self._inner += 1
        saved, self._fixed_key = self._fixed_key, ("inner", self._inner)
        try:
            yield
        finally:
            self._fixed_key = saved

    def _span_key(self, op) -> tuple | None:
        if self._fixed_key is not None:
            return self._fixed_key
        if not self.per_op:
            return (self.span, 0)
        if op != self._last_op:
            self._op_span += 1
            self._last_op = op
        if op is None:  # an event outside any engine op: cannot tell which op it belongs to
            return None
        return (self.span, self._op_span)

    def on_event(
        self, action, seq, time_ns, requested, nbytes, storage_id, allocated, reserved, ctx, op
    ) -> None:
        """An allocator event, as fields (MemoryObserver.on_event), logged and attributed to
        its context: an allocation (or oom) makes its storage a row; a free goes to its
        allocation's row (a row of its own when the storage was allocated before recording),
        and makes it `temporary` when it is freed in the span that allocated it.

        The hot path of a recording (thousands of events per training step): it appends the
        event log's columns itself (one call per event: ~1.2 ms of the 53 ms GPT-2 meta step
        against calling EventLog methods per row and event), and _span_key's common cases are
        inline."""
        if op is None:
            op = ctx.get("op")
        fn = ctx.get("grad_fn")
        log = self.records
        phase = ctx.get("phase")
        iteration = ctx.get("iteration")
        # the span of an allocation or a free (_span_key, its common cases inline)
        if action == "oom":
            key = None
        elif self._fixed_key is not None:
            key = self._fixed_key
        elif not self.per_op:
            key = (self.span, 0)
        else:
            key = self._span_key(op)
        if fn is None:
            where = (_ACTION[action], ctx.get("node"), op, phase, iteration)
            run = 0
        else:
            where = (_ACTION[action], fn.name(), op, phase, iteration)
            runs = log._runs
            run = runs.get(id(fn))
            if run is None:
                run = runs[id(fn)] = len(runs) + 1
        places = log.places
        code = places.codes.get(where)
        if code is None:
            code = places.code(where)
        if action == "free":
            entry = self._live.pop(storage_id, None)
            if entry is not None:
                row, span = entry
                if key is not None and span == key and log.phase_of(log.first[row]) == phase:
                    log.set_category(row, "temporary")
            else:
                row = len(log.bytes)
                log.bytes.append(nbytes)
                log.requested.append(requested)
                log.first.append(NO_EVENT)
                log.category.append(0)  # None
                log.tensor.append(0)  # None
                log.clone_of.append(0)
        else:
            row = len(log.bytes)
            log.bytes.append(nbytes)
            log.requested.append(requested)
            log.first.append(len(log.seq))
            category = ctx.get("category")
            if category not in _KNOWN:
                category = _category(category)
            categories = log.categories
            c = categories.codes.get(category)
            log.category.append(categories.code(category) if c is None else c)
            tensor = ctx.get("tensor")
            if tensor is None:
                log.tensor.append(0)
            else:
                log.tensor.append(log.strings.code(tensor))
            log.clone_of.append(0)
            if action == "alloc":
                self._live[storage_id] = (row, key)
        log.seq.append(seq)
        log.time_ns.append(time_ns)
        log.allocated.append(allocated)
        log.reserved.append(reserved)
        log.row.append(row)
        log.where.append(code)
        log.run.append(run)

    def _event(self, ev: AllocEvent) -> None:
        self.on_event(
            ev.action,
            ev.seq,
            ev.time_ns,
            ev.requested,
            ev.bytes,
            ev.storage_id,
            ev.allocated,
            ev.reserved,
            ev.context,
            None,
        )

    on_alloc = on_free = on_oom = _event

    def on_external(self, ev: AllocEvent) -> None:
        """CuPy's own pool requests (temporaries inside its kernels), outside tensor storages."""
        ext = self.external
        if ev.action == "alloc":
            ext["num_allocs"] += 1
            ext["current_bytes"] += ev.bytes
            ext["peak_bytes"] = max(ext["peak_bytes"], ext["current_bytes"])
            op = ev.context.get("op") or "?"
            ext["by_op"][op] = ext["by_op"].get(op, 0) + ev.bytes
        else:
            ext["num_frees"] += 1
            ext["current_bytes"] -= ev.bytes

    def on_tag(self, storage_id: int, key: str, value) -> None:
        entry = self._live.get(storage_id)
        if entry is None:
            return
        log, row = self.records, entry[0]
        if key == "category":
            if value == "saved_for_backward" and log.row_tensor(row) is not None:
                return  # a named activation that autograd also keeps stays an activation
            log.set_category(row, _category(value))
        elif key == "saved_for_backward":
            if (
                value
                and log.row_tensor(row) is None
                and log.row_category(row) in (None, "activation", "gradient", "other")
            ):
                log.set_category(row, "saved_for_backward")
        elif key == "inplace_clone":
            log.set_clone_of(row, value)
            log.set_category(row, "saved_for_backward")

    # --- naming storages after the fact ---------------------------------------------------------
    def name_storage(self, storage_id: int, tensor: str, category: str | None = None) -> bool:
        """Give a live storage its scenario name (e.g. `fc1.weight`, `fc1.weight.grad`)."""
        entry = self._live.get(storage_id)
        if entry is None:
            return False
        self.records.set_tensor(entry[0], tensor)
        if category is not None:
            self.records.set_category(entry[0], category)
        return True

    def allocated_since(self, storage_id: int, index: int) -> bool:
        """Whether a live storage was allocated at or after records[index]."""
        entry = self._live.get(storage_id)
        return entry is not None and self.records.first[entry[0]] >= index

    def live_tensor_name(self, storage_id: int) -> str | None:
        entry = self._live.get(storage_id)
        return self.records.row_tensor(entry[0]) if entry else None
