"""The runner's allocator observer and its protocol.

Every allocator event becomes a `Record` attributed to its node, op, phase, iteration, category
and tensor name; a free inside the step that allocated the storage makes it `temporary`; tags
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

from engine.allocator import AllocEvent, MemoryObserver
from memprof.reports.build import CATEGORIES, op_row

# Engine categories outside the report's list: module buffers (BatchNorm's running stats) are
# module state made with the parameters.
_ALIASES = {"buffer": "parameter"}
_perf_ns = time.perf_counter_ns


def _node(ctx: dict) -> str | None:
    """The event's node: in backward, the backward node running (ReluBackward0, ...)."""
    fn = ctx.get("grad_fn")
    if fn is not None:
        return fn.name()
    return ctx.get("node")


def _category(value):
    if value is None or value in CATEGORIES:
        return value
    return _ALIASES.get(value, "other")


@dataclass(slots=True)
class Record:
    """One allocator event as the report needs it. Category and tensor may be refined after the
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
    """One step in progress (a program node, the backward call, an optimizer step): the caller
    may set `inplace`, `clone_bytes` and `module` before the block ends; `records` are the
    events since the step began."""

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
    )

    def __init__(self, rec: Recorder, node, op, phase, iteration, first, allocated_before):
        self._rec = rec
        self.node, self.op, self.phase, self.iteration = node, op, phase, iteration
        self.first = first
        self.allocated_before = allocated_before
        self.start_ns = self.end_ns = 0
        self.inplace = False
        self.clone_bytes = 0
        self.module: str | None = None

    @property
    def records(self) -> list[Record]:
        return self._rec.records[self.first :]


class Recorder(MemoryObserver):
    """Collects records, op rows and phase spans for one variant.

    allocator: the TrackedAllocator observed (its allocated bytes start each op row's peak);
    t0_ns: the variant's start on perf_counter_ns (op rows' `start_s` count from it).
    """

    def __init__(self, allocator=None, t0_ns: int | None = None):
        self.records: list[Record] = []
        self.ops: list[dict[str, Any]] = []
        self.phases: list[dict[str, Any]] = []
        self.allocator = allocator
        self.t0_ns = _perf_ns() if t0_ns is None else t0_ns
        self.span = 0  # the current step; events in one step share it
        self.per_op = False
        self._live: dict[int, tuple[Record, tuple]] = {}
        self._op_span = 0
        self._last_op: object = None
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

    @contextmanager
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
    ) -> Iterator[Step]:
        """One span: events inside are attributed to (node, phase, iteration, category), and to
        `context_op`/`tensor` when given (engine ops name themselves otherwise). per_op: each run
        of events of the same engine op is its own span (backward runs many ops in one call).
        On a normal exit the step's row is appended to `ops` (row=False: none, e.g. making an
        input); a step that raises leaves no row, its events stay in `records`.
        per_backward_node: one row per backward node run (ReluBackward0, ...) instead of one for
        the step: `loss.backward()` runs many nodes in one call."""
        from engine.allocator import context

        self.span += 1
        step = Step(self, node, op, phase, iteration, len(self.records), self._allocated_now())
        keys: dict[str, Any] = {"phase": phase, "node": node, "iteration": iteration}
        if category is not None:
            keys["category"] = category
        if context_op is not None:
            keys["op"] = context_op
        if tensor is not None:
            keys["tensor"] = tensor
        self.per_op = per_op
        try:
            with context(**keys):
                step.start_ns = _perf_ns()
                try:
                    yield step
                finally:
                    step.end_ns = _perf_ns()
        finally:
            self.per_op = False
        if row and per_backward_node:
            self.ops.extend(self._backward_rows(step))
        elif row:
            self.ops.append(self._row(step))

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
        groups: list[tuple[int | None, int, int]] = []  # (run, first index, end index)
        for i, r in enumerate(records):
            if groups and groups[-1][0] == r.run_of:
                groups[-1] = (r.run_of, groups[-1][1], i + 1)
            else:
                groups.append((r.run_of, i, i + 1))
        rows = []
        for n, (run, first, end) in enumerate(groups):
            part = records[first:end]
            head = part[0]
            before = head.allocated - (
                head.bytes
                if head.action == "alloc"
                else -head.bytes
                if head.action == "free"
                else 0
            )
            start_ns = head.time_ns if n else step.start_ns
            stop_ns = records[groups[n + 1][1]].time_ns if n + 1 < len(groups) else step.end_ns
            rows.append(
                op_row(
                    node=head.node if run is not None else step.node,
                    op=step.op,
                    phase=step.phase,
                    iteration=step.iteration,
                    records=part,
                    allocated_before=before,
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
    def _span_key(self, op) -> tuple | None:
        if not self.per_op:
            return (self.span, 0)
        if op != self._last_op:
            self._op_span += 1
            self._last_op = op
        if op is None:  # an event outside any engine op: cannot tell which op it belongs to
            return None
        return (self.span, self._op_span)

    def _record(self, ev: AllocEvent, action: str, owner: Record | None = None) -> Record:
        """The event as a Record, appended: attributed to its context; a free's category and
        tensor are its allocation's (`owner`)."""
        ctx = ev.context
        rec = Record(
            ev.seq,
            ev.time_ns,
            action,
            ev.bytes,
            ev.requested,
            ev.allocated,
            ev.reserved,
            ev.storage_id,
            _node(ctx),
            ctx.get("op"),
            ctx.get("phase"),
            ctx.get("iteration"),
            owner,
            None if action == "free" else _category(ctx.get("category")),
            None if action == "free" else ctx.get("tensor"),
        )
        fn = ctx.get("grad_fn")
        if fn is not None:
            rec.run_of = id(fn)
        self.records.append(rec)
        return rec

    def on_alloc(self, ev: AllocEvent) -> None:
        rec = self._record(ev, "alloc")
        self._live[ev.storage_id] = (rec, self._span_key(rec.op))

    def on_free(self, ev: AllocEvent) -> None:
        ctx = ev.context
        entry = self._live.pop(ev.storage_id, None)
        owner = None
        key = self._span_key(ctx.get("op"))
        if entry is not None:
            owner, span = entry
            if key is not None and span == key and owner.phase == ctx.get("phase"):
                owner.category = "temporary"
        self._record(ev, "free", owner)

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

    def on_oom(self, ev: AllocEvent) -> None:
        self._record(ev, "oom")

    def on_tag(self, storage_id: int, key: str, value) -> None:
        entry = self._live.get(storage_id)
        if entry is None:
            return
        rec = entry[0]
        if key == "category":
            if value == "saved_for_backward" and rec.tensor is not None:
                return  # a named activation that autograd also keeps stays an activation
            rec.category = _category(value)
        elif key == "saved_for_backward":
            if (
                value
                and rec.tensor is None
                and rec.category in (None, "activation", "gradient", "other")
            ):
                rec.category = "saved_for_backward"
        elif key == "inplace_clone":
            rec.clone_of = value
            rec.category = "saved_for_backward"

    # --- naming storages after the fact ---------------------------------------------------------
    def name_storage(self, storage_id: int, tensor: str, category: str | None = None) -> bool:
        """Give a live storage its scenario name (e.g. `fc1.weight`, `fc1.weight.grad`)."""
        entry = self._live.get(storage_id)
        if entry is None:
            return False
        entry[0].tensor = tensor
        if category is not None:
            entry[0].category = category
        return True

    def allocated_since(self, storage_id: int, index: int) -> bool:
        """Whether a live storage was allocated at or after records[index]."""
        entry = self._live.get(storage_id)
        if entry is None:
            return False
        records = self.records
        for i in range(len(records) - 1, index - 1, -1):
            if records[i] is entry[0]:
                return True
        return False

    def live_tensor_name(self, storage_id: int) -> str | None:
        entry = self._live.get(storage_id)
        return entry[0].tensor if entry else None
