"""One TrackedAllocator per device: every storage allocation and free goes through it.

The accounting model (models.py) decides the bytes charged; the allocator stamps events with
the caller's context and hands them to observers. It knows nothing of reports or charts.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import sys
import time

from engine.allocator.events import AllocEvent, MemoryObserver
from engine.allocator.models import make_model

_storage_ids = itertools.count(1)
_perf_ns = time.perf_counter_ns

# The attribution context: a dict merged by `context(...)`; `_op` is the engine op running now.
_context: dict = {}
_op: str | None = None

# How many allocators have observers. `_op` is read only for events, and there are none while
# this is 0, so the dispatcher names the running op only when it is not (as PyTorch runs its
# RecordFunction callbacks only while a profiler is registered).
observed = 0

_ENGINE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Whether new storages are charged to their allocator at all. Off only to measure the engine
# without accounting (bench/bench_engine.py); storages made while off are never charged or freed.
TRACKING = True


def set_tracking(enabled: bool) -> bool:
    """Turn accounting of new storages on or off; returns the previous setting."""
    global TRACKING
    prev = TRACKING
    TRACKING = bool(enabled)
    return prev


@contextlib.contextmanager
def tracking(enabled: bool):
    """`with tracking(False): ...` runs the block without charging any allocator."""
    prev = set_tracking(enabled)
    try:
        yield
    finally:
        set_tracking(prev)


class context:  # noqa: N801 - used as a function, like contextlib's managers
    """Attribute every allocator event inside the block to these keys (inner keys win).

    >>> with context(node="act", phase="forward", tensor="y"):
    ...     y = x.relu()

    A class rather than a generator: the runner and the backward walk enter one per node, and
    a generator-based manager costs several times more to enter and leave.
    """

    __slots__ = ("keys", "saved")

    def __init__(self, **keys):
        self.keys = keys

    def __enter__(self):
        global _context
        self.saved = _context
        _context = {**_context, **self.keys}

    def __exit__(self, *exc) -> bool:
        global _context
        _context = self.saved
        return False


def current_context() -> dict:
    return _context


@contextlib.contextmanager
def op_scope(name: str):
    """Used by the engine's dispatcher: events inside carry context["op"] = name."""
    global _op
    saved = _op
    _op = name
    try:
        yield
    finally:
        _op = saved


def set_op(name: str | None) -> str | None:
    """Fast form of op_scope for the hot path; returns the previous value to restore."""
    global _op
    saved = _op
    _op = name
    return saved


def enter_node(node) -> tuple:
    """`context(grad_fn=node)` and `set_op(node.name())` at once, for the backward walk (one
    call per node run while observers listen); returns what `leave_node` restores."""
    global _context, _op
    saved = (_context, _op)
    _op = node.name()
    _context = {**_context, "grad_fn": node}
    return saved


def leave_node(saved: tuple) -> None:
    global _context, _op
    _context, _op = saved


def _user_location() -> str | None:
    frame = sys._getframe(2)
    while frame is not None:
        filename = frame.f_code.co_filename
        if not filename.startswith(_ENGINE_DIR):
            return f"{filename}:{frame.f_lineno}"
        frame = frame.f_back
    return None


class TrackedAllocator:
    """Accounts one device's storages with a model and reports events to observers."""

    def __init__(self, device: str, model: str = "exact", limit: int | None = None):
        self.device = device
        self.model = make_model(model, device, limit)
        self.observers: list[MemoryObserver] = []
        self._sink = None  # _direct_sink()
        self.record_locations = False
        self.epoch = 0
        self._seq = 0
        self.scratch_bytes = 0  # kernel workspace, kept apart from the model's totals
        self.max_scratch_bytes = 0

    # --- configuration ------------------------------------------------------------------------
    @property
    def model_name(self) -> str:
        return self.model.name

    def set_model(self, name: str) -> None:
        """Switch the accounting model; only allowed while nothing is allocated."""
        if self.model.allocated_bytes:
            raise RuntimeError(
                f"cannot switch the {self.device} allocator model to {name!r} while "
                f"{self.model.allocated_bytes} bytes are allocated; free the tensors first"
            )
        self.model = make_model(name, self.device, self.model.limit)
        self.epoch += 1

    def set_limit(self, nbytes: int | None) -> None:
        self.model.set_limit(nbytes)

    def reset(self) -> None:
        """Fresh counters and peaks. Storages from before are forgotten (their frees are ignored)."""
        self.model = make_model(self.model.name, self.device, self.model.limit)
        self.epoch += 1
        self._seq = 0
        self.scratch_bytes = self.max_scratch_bytes = 0

    def add_observer(self, observer: MemoryObserver) -> None:
        global observed
        if observer not in self.observers:
            if not self.observers:
                observed += 1
            self.observers.append(observer)
        self._sink = self._direct_sink()

    def remove_observer(self, observer: MemoryObserver) -> None:
        global observed
        if observer in self.observers:
            self.observers.remove(observer)
            if not self.observers:
                observed -= 1
        self._sink = self._direct_sink()

    def _direct_sink(self):
        """The `on_event` of the only observer, when it has one: alloc, free and oom events
        then reach it as fields, without an AllocEvent or a merged context dict per event (a
        recorder sees thousands of events per training step). See MemoryObserver.on_event."""
        if len(self.observers) != 1:
            return None
        return getattr(self.observers[0], "on_event", None)

    @contextlib.contextmanager
    def observing(self, observer: MemoryObserver):
        self.add_observer(observer)
        try:
            yield observer
        finally:
            self.remove_observer(observer)

    # --- the hot path -------------------------------------------------------------------------
    def allocate(self, nbytes: int):
        """Charge `nbytes`; returns (handle, storage_id, epoch). Raises OutOfMemoryError.

        The handle is the model's (`AccountingModel.charge`); give it back with `release`.
        """
        storage_id = next(_storage_ids)
        model = self.model
        try:
            handle = model.charge(nbytes)
        except Exception:
            if self.observers:
                self._emit("oom", nbytes, nbytes, storage_id)
            raise
        if self.observers:
            self._emit("alloc", nbytes, model.handle_sizes(handle)[1], storage_id)
        return handle, storage_id, self.epoch

    def refused(self, nbytes: int) -> None:
        """The backend (the operating system, for cpu) refused `nbytes` before anything was
        charged: observers get an "oom" event; counters and peaks stay as they were."""
        if self.observers:
            self._emit("oom", nbytes, nbytes, next(_storage_ids))

    def release(self, handle, storage_id: int, epoch: int) -> None:
        if epoch != self.epoch:
            return
        model = self.model
        if self.observers:
            requested, nbytes = model.handle_sizes(handle)
            model.uncharge(handle)
            self._emit("free", requested, nbytes, storage_id)
        else:
            model.uncharge(handle)

    def tag(self, storage_id: int, key: str, value) -> None:
        for obs in self.observers:
            obs.on_tag(storage_id, key, value)

    def _emit(self, action: str, requested: int, nbytes: int, storage_id: int) -> None:
        sink = self._sink
        if sink is not None and not self.record_locations:
            model = self.model
            seq = self._seq
            self._seq = seq + 1
            sink(
                action,
                seq,
                _perf_ns(),
                requested,
                nbytes,
                storage_id,
                model.allocated_bytes,
                model.reserved_bytes,
                _context,
                _op,
            )
            return
        ctx = _context
        if _op is not None:
            ctx = {**ctx, "op": _op}
        model = self.model
        ev = AllocEvent(
            self._seq,
            _perf_ns(),
            action,
            self.device,
            requested,
            nbytes,
            storage_id,
            model.allocated_bytes,
            model.reserved_bytes,
            ctx,
            _user_location() if self.record_locations else None,
        )
        self._seq += 1
        for obs in tuple(self.observers):
            if action == "alloc":
                obs.on_alloc(ev)
            elif action == "free":
                obs.on_free(ev)
            else:
                obs.on_oom(ev)

    def scratch(self, action: str, nbytes: int) -> None:
        """A kernel takes ("alloc") or gives back ("free") `nbytes` of workspace: counted in
        scratch_bytes, never in the model's allocated/reserved; observers get on_scratch."""
        if action == "alloc":
            self.scratch_bytes += nbytes
            self.max_scratch_bytes = max(self.max_scratch_bytes, self.scratch_bytes)
        else:
            self.scratch_bytes -= nbytes
        if not self.observers:
            return
        ev = AllocEvent(
            self._seq,
            _perf_ns(),
            action,
            self.device,
            nbytes,
            nbytes,
            0,
            self.model.allocated_bytes,
            self.model.reserved_bytes,
            {**_context, "op": _op, "category": "scratch"},
        )
        self._seq += 1
        for obs in tuple(self.observers):
            obs.on_scratch(ev)

    def emit_external(self, action: str, nbytes: int) -> None:
        """Report memory the backend allocated outside tensor storages (CuPy temporaries)."""
        if not self.observers:
            return
        ev = AllocEvent(
            self._seq,
            _perf_ns(),
            action,
            self.device,
            nbytes,
            nbytes,
            0,
            self.model.allocated_bytes,
            self.model.reserved_bytes,
            {**_context, "op": _op, "external": True},
        )
        self._seq += 1
        for obs in tuple(self.observers):
            obs.on_external(ev)


_allocators: dict[str, TrackedAllocator] = {}


def get_allocator(device="cpu") -> TrackedAllocator:
    """The allocator of a device ("cpu", "cuda", "cuda:0", "meta" or an engine.device)."""
    from engine.device import as_device

    key = str(as_device(device))
    alloc = _allocators.get(key)
    if alloc is None:
        alloc = _allocators[key] = TrackedAllocator(key)
    return alloc


def all_allocators() -> list[TrackedAllocator]:
    return list(_allocators.values())


def reset(device=None) -> None:
    """Fresh state for one device's allocator, or every allocator when device is None."""
    targets = [get_allocator(device)] if device is not None else all_allocators()
    for alloc in targets:
        alloc.reset()
