"""The recorder's protocol: steps take the span, timing and op row; phases their span."""

from __future__ import annotations

import pytest

import engine
from engine.allocator import get_allocator
from memprof.runner.recorder import Recorder

KiB = 1024


@pytest.fixture
def rec():
    alloc = get_allocator("cpu")
    alloc.reset()
    r = Recorder(alloc)
    alloc.add_observer(r)
    try:
        yield r
    finally:
        alloc.remove_observer(r)
        alloc.reset()


def test_a_step_is_one_span_with_its_timed_row(rec):
    x = engine.ones(256)  # 1 KiB before any step
    with rec.phase("forward", 0):
        with rec.step("h", "exp", "forward", 0, category="activation") as step:
            tmp = engine.exp(x)  # allocated and freed inside the step: a temporary
            del tmp
            y = engine.exp(x)
            step.inplace = False
    [row] = rec.ops
    assert row["node"] == "h" and row["op"] == "exp" and row["phase"] == "forward"
    assert (row["allocated_bytes"], row["freed_bytes"]) == (2 * KiB, KiB)
    assert row["peak_bytes"] == 2 * KiB  # x and one exp at a time
    assert row["duration_s"] > 0 and row["start_s"] >= 0
    allocs = [r for r in rec.records if r.action == "alloc" and r.node == "h"]
    assert [r.category for r in allocs] == ["temporary", "activation"]
    assert {(r.phase, r.iteration) for r in allocs} == {("forward", 0)}
    [phase] = rec.phases
    assert (phase["name"], phase["iteration"]) == ("forward", 0)
    assert (phase["start_index"], phase["end_index"]) == (1, 4)  # x was made before the phase
    del y


def test_a_free_in_a_later_step_is_not_a_temporary(rec):
    with rec.step("a", "exp", "forward", 0, category="activation"):
        y = engine.ones(256)
    with rec.step("b", "release", "forward", 0):
        del y
    assert [r.category for r in rec.records if r.action == "alloc"] == ["activation"]
    assert [r.node for r in rec.records] == ["a", "b"]


def test_a_step_that_raises_leaves_its_events_but_no_row(rec):
    with pytest.raises(RuntimeError), rec.phase("forward", 3):
        with rec.step("boom", "exp", "forward", 3):
            keep = engine.ones(256)
            raise RuntimeError("engine error")
    assert rec.ops == []
    assert [(r.action, r.node) for r in rec.records] == [("alloc", "boom")]
    assert rec.phases[0]["end_index"] == 1  # the failed phase still has its span
    del keep


def test_row_false_records_events_without_a_row(rec):
    with rec.step("<inputs>", "rand", "setup", None, category="input", tensor="x", row=False):
        x = engine.rand(256)
    assert rec.ops == []
    [r] = rec.records
    assert (r.category, r.tensor, r.node, r.phase, r.iteration) == (
        "input",
        "x",
        "<inputs>",
        "setup",
        None,
    )
    del x


def test_an_entry_is_checked_for_json_through_its_timelines_interned_values(rec):
    """run_variant's check that an entry is plain JSON reads the timeline's names from the
    log's interned tables, not from the columns: a clean entry comes back as it is, and a name
    JSON cannot hold (here a NaN iteration and a non-string tensor name) is written as text,
    as _serialisable writes it, in the columns as everywhere else."""
    import json

    from memprof.reports.build import timeline
    from memprof.runner.execute import _serialisable, _serialisable_entry

    x = engine.ones(256)
    with rec.step("h", "exp", "forward", 0, category="activation"):
        y = engine.exp(x)
    entry = {"name": "v", "timeline": timeline(rec.records, rec.t0_ns), "ops": rec.ops}
    assert _serialisable_entry(entry, rec.records) is entry
    json.dumps(entry, allow_nan=False)

    with rec.step(
        "h2", "exp", "forward", float("nan"), category="activation", tensor=frozenset("a")
    ):
        z = engine.exp(y)
    entry = {"name": "v", "timeline": timeline(rec.records, rec.t0_ns)}
    with pytest.raises((TypeError, ValueError)):
        json.dumps(entry["timeline"], allow_nan=False)  # what the check must not let through
    fixed = _serialisable_entry(entry, rec.records)
    assert fixed == _serialisable(entry)
    assert fixed["timeline"]["iteration"][-1] == "nan"
    assert fixed["timeline"]["tensor"][-1] == "frozenset({'a'})"
    json.dumps(fixed, allow_nan=False)
    del z


def test_an_oom_inside_a_per_op_step_does_not_split_the_span_of_the_op_around_it():
    # given a per-op step (backward's): an allocation of op "a", an oom of op "b", then the free
    # of the allocation, again under op "a"
    r = Recorder(None)
    ctx = {"phase": "backward", "node": "<backward>", "iteration": 0}
    with r.step("<backward>", "backward", "backward", 0, per_op=True, row=False):
        r.on_event("alloc", 0, 0, 512, 512, 7, 512, 512, ctx, "a")
        r.on_event("oom", 1, 0, 1 << 40, 1 << 40, 8, 512, 512, ctx, "b")
        r.on_event("free", 2, 0, 512, 512, 7, 0, 512, ctx, "a")
    # then the allocation is a temporary of op "a" (an oom is no span of its own), and the oom
    # keeps the step's category
    alloc, oom, free = r.records
    assert (alloc.action, oom.action, free.action) == ("alloc", "oom", "free")
    assert alloc.category == "temporary" and free.owner == alloc
    assert oom.category is None and oom.op == "b"
