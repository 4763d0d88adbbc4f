"""The tracked allocator: events, context, observers, tags, reset and tracking(False)."""

from __future__ import annotations

import pytest

import engine
from engine import memory
from engine.allocator import (
    MemoryObserver,
    context,
    current_context,
    get_allocator,
    op_scope,
    reset,
    tracked,
)
from engine.allocator.tracked import tracking
from engine.errors import OutOfMemoryError


class Recorder(MemoryObserver):
    def __init__(self):
        self.events, self.tags, self.external = [], [], []

    def on_alloc(self, event):
        self.events.append(event)

    def on_free(self, event):
        self.events.append(event)

    def on_oom(self, event):
        self.events.append(event)

    def on_tag(self, storage_id, key, value):
        self.tags.append((storage_id, key, value))

    def on_external(self, event):
        self.external.append(event)


@pytest.fixture
def recorder():
    rec = Recorder()
    alloc = get_allocator("cpu")
    alloc.add_observer(rec)
    yield rec
    alloc.remove_observer(rec)


def test_alloc_and_free_events_carry_op_context_and_totals(recorder):
    x = engine.empty(10)
    with context(node="act", phase="forward"):
        y = x.relu()
    del y
    alloc, relu, free = recorder.events
    assert alloc.action == "alloc" and alloc.requested == 40 and alloc.bytes == 40
    assert alloc.allocated == 40 and alloc.context == {}
    assert relu.action == "alloc" and relu.context == {
        "node": "act",
        "phase": "forward",
        "op": "relu",
    }
    assert relu.allocated == 80 and relu.reserved == 80
    assert free.action == "free" and free.storage_id == relu.storage_id and free.allocated == 40
    assert [e.seq for e in recorder.events] == sorted(e.seq for e in recorder.events)
    assert relu.as_dict()["storage_id"] == relu.storage_id


def test_context_nests_and_restores():
    with context(a=1):
        with context(b=2, a=3):
            assert current_context() == {"a": 3, "b": 2}
        assert current_context() == {"a": 1}
    assert current_context() == {}


def test_op_scope_names_the_op(recorder):
    with op_scope("my_op"):
        engine.kernels.empty((2,), engine.float32, engine.device("cpu"))
    assert recorder.events[0].context["op"] == "my_op"


def test_inplace_clone_is_attributed_and_tagged(recorder):
    a = engine.rand(4, requires_grad=True)
    b = a * 2
    recorder.events.clear()
    b.sin_()
    (alloc,) = [e for e in recorder.events if e.action == "alloc"]
    assert alloc.context["inplace_clone"] == "sin_" and alloc.context["op"] == "clone"
    assert (alloc.storage_id, "inplace_clone", "sin_") in recorder.tags


def test_oom_event_then_error_and_nothing_changes(recorder):
    memory.set_memory_limit(100)
    with pytest.raises(OutOfMemoryError):
        engine.empty(1000)
    assert [e.action for e in recorder.events] == ["oom"]
    assert memory.memory_allocated() == 0


def test_record_locations_points_at_user_code(recorder):
    alloc = get_allocator("cpu")
    alloc.record_locations = True
    try:
        x = engine.empty(3)  # this line
    finally:
        alloc.record_locations = False
    assert recorder.events[0].location.endswith(
        "test_allocator_tracked.py:"
        + str(test_record_locations_points_at_user_code.__code__.co_firstlineno + 4)
    )
    del x


def test_reset_forgets_old_storages():
    x = engine.empty(10)
    reset("cpu")
    assert memory.memory_allocated() == 0
    del x  # its free belongs to the old epoch and is ignored
    assert memory.memory_allocated() == 0
    y = engine.empty(5)
    assert memory.memory_allocated() == 20
    del y


def test_tracking_off_charges_nothing():
    with tracking(False):
        x = engine.empty(1000)
        y = x + 1
    assert memory.memory_allocated() == 0
    del x, y
    assert memory.memory_allocated() == 0
    z = engine.empty(10)
    assert memory.memory_allocated() == 40
    del z


def test_observers_are_added_once_and_removed():
    alloc = get_allocator("cpu")
    rec = Recorder()
    alloc.add_observer(rec)
    alloc.add_observer(rec)
    assert alloc.observers.count(rec) == 1
    with alloc.observing(Recorder()) as other:
        engine.empty(1)
    assert len(other.events) == 2  # alloc and free of the temporary
    alloc.remove_observer(rec)
    assert rec not in alloc.observers


def test_observed_counts_the_allocators_someone_listens_to():
    # given no observers, when observers come and go on two allocators, then `observed` counts
    # the allocators that have at least one (the dispatcher names ops only while it is not 0)
    start = tracked.observed
    cpu, meta = get_allocator("cpu"), get_allocator("meta")
    first, second = Recorder(), Recorder()
    cpu.add_observer(first)
    cpu.add_observer(second)
    cpu.add_observer(first)
    assert tracked.observed == start + 1
    with meta.observing(Recorder()):
        assert tracked.observed == start + 2
    cpu.remove_observer(first)
    assert tracked.observed == start + 1
    cpu.remove_observer(second)
    cpu.remove_observer(second)
    assert tracked.observed == start


@pytest.mark.parametrize(
    "op, name",
    [
        (lambda a, b: a + b, "add"),
        (lambda a, b: a * 2, "mul"),
        (lambda a, b: engine.sub(a, b, alpha=2), "sub"),
        (lambda a, b: a.relu(), "relu"),
        (lambda a, b: a.exp(), "exp"),
        (lambda a, b: a.sum(), "sum"),
        (lambda a, b: a.clamp(0.1, 0.9), "clamp"),
    ],
)
def test_every_dispatch_path_names_its_op_while_observed(recorder, op, name):
    # given two tensors made before observing (their events are not looked at)
    a, b = engine.rand(4), engine.rand(4)
    recorder.events.clear()
    # when the op runs while an observer listens
    y = op(a, b)
    # then its allocation carries the op's name
    assert recorder.events[0].action == "alloc"
    assert recorder.events[0].context.get("op") == name
    del y


def test_get_allocator_spellings():
    assert get_allocator("cpu") is get_allocator(engine.device("cpu"))
    assert get_allocator("cuda") is get_allocator("cuda:0") is get_allocator("gpu")
    assert get_allocator("meta").device == "meta"


def test_saved_for_backward_and_gradient_tags(recorder):
    a = engine.rand(3, requires_grad=True)
    y = a.exp()
    (y * 2).sum().backward()
    keys = {(k, v) for _, k, v in recorder.tags}
    assert ("saved_for_backward", True) in keys and ("category", "gradient") in keys
    grad_tag = [sid for sid, k, v in recorder.tags if (k, v) == ("category", "gradient")]
    assert grad_tag == [a.grad._storage.id]


class Fields(MemoryObserver):
    """An observer with on_event: takes the events as fields (MemoryObserver.on_event)."""

    def __init__(self):
        self.events = []

    def on_event(self, action, seq, time_ns, requested, nbytes, sid, allocated, reserved, ctx, op):
        merged = ctx if op is None else {**ctx, "op": op}
        self.events.append((action, seq, requested, nbytes, sid, allocated, reserved, merged))


def _program():
    x = engine.empty(10)
    with context(node="act", phase="forward", op="outer"):
        y = x.relu()
        z = y + 1
    del y, z
    memory.set_memory_limit(200)
    try:
        with pytest.raises(OutOfMemoryError):
            engine.empty(100)
    finally:
        memory.set_memory_limit(None)
    return x


def _as_fields(events):
    return [
        (e.action, e.seq, e.requested, e.bytes, e.storage_id, e.allocated, e.reserved, e.context)
        for e in events
    ]


def test_an_only_observer_with_on_event_gets_the_events_as_fields():
    alloc = get_allocator("cpu")
    reset("cpu")
    rec = Recorder()
    with alloc.observing(rec):
        _program()
    reset("cpu")
    fields = Fields()
    with alloc.observing(fields):
        _program()
    assert [e[0] for e in fields.events] == ["alloc"] * 3 + ["free"] * 2 + ["oom", "free"]
    # the same events, storage ids aside (they count on); the op ran over the context's "op"
    norm = [(*e[:4], *e[5:]) for e in fields.events]
    assert norm == [(*e[:4], *e[5:]) for e in _as_fields(rec.events)]
    assert fields.events[1][7] == {"node": "act", "phase": "forward", "op": "relu"}
    assert fields.events[0][7] == {}


def test_on_event_is_not_used_beside_another_observer_or_with_locations():
    alloc = get_allocator("cpu")
    fields, rec = Fields(), Recorder()
    with alloc.observing(fields), alloc.observing(rec):
        x = engine.empty(10)
        del x
    assert fields.events == [] and [e.action for e in rec.events] == ["alloc", "free"]
    alloc.record_locations = True
    try:
        with alloc.observing(fields):
            x = engine.empty(10)
            del x
    finally:
        alloc.record_locations = False
    assert fields.events == []


def test_enter_node_names_the_running_backward_node_and_leave_node_restores_all():
    class Node:
        def name(self):
            return "MulBackward0"

    node = Node()
    with context(phase="backward"), op_scope("outer"):
        saved = tracked.enter_node(node)
        assert current_context() == {"phase": "backward", "grad_fn": node}
        assert tracked._op == "MulBackward0"
        tracked.leave_node(saved)
        assert current_context() == {"phase": "backward"} and tracked._op == "outer"
    assert current_context() == {} and tracked._op is None
