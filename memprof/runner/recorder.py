"""The runner's allocator observer: every event becomes a `Record` attributed to its node, op,
phase, iteration, category and tensor name; a free inside the op that allocated the storage makes
it `temporary`; tags from autograd refine categories.
"""

from __future__ import annotations

from engine.allocator import AllocEvent, MemoryObserver
from memprof.reports.build import CATEGORIES, Record

# Engine categories outside the report's list: module buffers (BatchNorm's running stats) are
# module state made with the parameters.
_ALIASES = {"buffer": "parameter"}


def _category(value):
    if value is None or value in CATEGORIES:
        return value
    return _ALIASES.get(value, "other")


class Recorder(MemoryObserver):
    """Collects records for one variant. The runner sets `span` to a new value for each node (or
    optimizer step); with `per_op` on (backward), each run of events with the same engine op is
    its own span, since one backward call runs many ops."""

    def __init__(self):
        self.records: list[Record] = []
        self.span = 0
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

    def _span_key(self, op) -> tuple | None:
        if not self.per_op:
            return (self.span, 0)
        if op != self._last_op:
            self._op_span += 1
            self._last_op = op
        if op is None:  # an event outside any engine op: cannot tell which op it belongs to
            return None
        return (self.span, self._op_span)

    def on_alloc(self, ev: AllocEvent) -> None:
        ctx = ev.context
        op = ctx.get("op")
        rec = Record(
            ev.seq,
            ev.time_ns,
            "alloc",
            ev.bytes,
            ev.requested,
            ev.allocated,
            ev.reserved,
            ev.storage_id,
            ctx.get("node"),
            op,
            ctx.get("phase"),
            ctx.get("iteration"),
            None,
            _category(ctx.get("category")),
            ctx.get("tensor"),
        )
        self.records.append(rec)
        self._live[ev.storage_id] = (rec, self._span_key(op))

    def on_free(self, ev: AllocEvent) -> None:
        ctx = ev.context
        op = ctx.get("op")
        entry = self._live.pop(ev.storage_id, None)
        owner = None
        key = self._span_key(op)
        if entry is not None:
            owner, span = entry
            if key is not None and span == key and owner.phase == ctx.get("phase"):
                owner.category = "temporary"
        self.records.append(
            Record(
                ev.seq,
                ev.time_ns,
                "free",
                ev.bytes,
                ev.requested,
                ev.allocated,
                ev.reserved,
                ev.storage_id,
                ctx.get("node"),
                op,
                ctx.get("phase"),
                ctx.get("iteration"),
                owner,
            )
        )

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
        ctx = ev.context
        self.records.append(
            Record(
                ev.seq,
                ev.time_ns,
                "oom",
                ev.bytes,
                ev.requested,
                ev.allocated,
                ev.reserved,
                ev.storage_id,
                ctx.get("node"),
                ctx.get("op"),
                ctx.get("phase"),
                ctx.get("iteration"),
                None,
                _category(ctx.get("category")),
                ctx.get("tensor"),
            )
        )

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
