"""engine.memory's PyTorch formats: memory_stats keys and values, memory_summary's table,
_record_memory_history / _snapshot / _dump_snapshot, and snapshots rebuilt by replay."""

from __future__ import annotations

import os
import pickle
import re

import pytest

import engine
from engine.allocator import snapshot as snap
from engine.allocator.units import MiB

F32 = 4


@pytest.fixture
def meta_caching():
    """The meta allocator with the caching model and no history before or after the test."""
    engine.memory._record_memory_history(None, device="meta")
    engine.memory.set_allocator_model("caching", device="meta")
    yield
    engine.memory._record_memory_history(None, device="meta")


def _torch_stat_keys(torch) -> set[str] | None:
    """The flat keys torch.cuda.memory_stats() returns, read from torch's own DeviceStats struct
    (c10/core/CachingDeviceAllocator.h, shipped in the wheel): each StatArray gives
    {name}.{all,small_pool,large_pool}.{current,peak,allocated,freed}, each Stat
    {name}.{current,peak,allocated,freed}, each int64_t counter its name. The per-private-pool
    map is empty without private pools, so it adds no key."""
    header = os.path.join(
        os.path.dirname(torch.__file__), "include", "c10", "core", "CachingDeviceAllocator.h"
    )
    if not os.path.exists(header):
        return None
    text = open(header, encoding="utf-8").read()
    body = re.search(r"struct DeviceStats \{(.*?)\n\};", text, re.S).group(1)
    body = re.sub(r"//[^\n]*", "", body)
    fields = ("current", "peak", "allocated", "freed")
    keys = set()
    for kind, name in re.findall(r"\b(StatArray|Stat|int64_t)\s+(\w+)\s*(?:=\s*\d+\s*)?;", body):
        if kind == "StatArray":
            keys |= {f"{name}.{s}.{f}" for s in ("all", "small_pool", "large_pool") for f in fields}
        elif kind == "Stat":
            keys |= {f"{name}.{f}" for f in fields}
        else:
            keys.add(name)
    return keys


def test_memory_stats_keys_are_the_ones_torch_produces(torch, meta_caching):
    # given torch's DeviceStats struct, when the engine's memory_stats() is read on either model
    expected = _torch_stat_keys(torch)
    if expected is None:
        pytest.skip("this torch wheel ships no c10 headers")
    assert len(expected) == 9 * 3 * 4 + 2 * 4 + 7  # 9 stat arrays, 2 stats, 7 counters
    for model in ("caching", "exact"):
        engine.memory.set_allocator_model(model, device="meta")
        stats = engine.memory.memory_stats("meta")
        # then the keys are exactly torch's, sorted as torch sorts them, all ints
        assert set(stats) == expected
        assert list(stats) == sorted(stats)
        assert all(type(v) is int for v in stats.values())


def test_memory_stats_values_on_a_hand_computed_caching_sequence(meta_caching):
    # given: a = 250 floats (1000 bytes -> a 1024-byte block split off a new 2 MiB small
    # segment), b = 5 MiB (large pool, < 10 MiB -> a 20 MiB segment split 5 + 15 MiB),
    # c = 300 floats (1200 -> 1536 bytes, split off the small segment's free tail), then del a
    a = engine.empty(250, device="meta")
    b = engine.empty(5 * MiB // F32, device="meta")
    c = engine.empty(300, device="meta")
    del a
    # when
    s = engine.memory.memory_stats("meta")
    # then, by hand: allocated 1024 + 5 MiB + 1536 at the peak, 5 MiB + 1536 now
    expected = {
        "allocated_bytes.all.current": 5 * MiB + 1536,
        "allocated_bytes.all.peak": 5 * MiB + 1024 + 1536,
        "allocated_bytes.all.allocated": 5 * MiB + 1024 + 1536,
        "allocated_bytes.all.freed": 1024,
        "allocated_bytes.small_pool.current": 1536,
        "allocated_bytes.small_pool.peak": 2560,
        "allocated_bytes.large_pool.current": 5 * MiB,
        "requested_bytes.all.current": 5 * MiB + 1200,
        "requested_bytes.all.peak": 5 * MiB + 1000 + 1200,
        "requested_bytes.small_pool.freed": 1000,
        "active_bytes.all.current": 5 * MiB + 1536,
        "reserved_bytes.all.current": 22 * MiB,
        "reserved_bytes.small_pool.current": 2 * MiB,
        "reserved_bytes.large_pool.current": 20 * MiB,
        "segment.all.current": 2,
        "segment.all.allocated": 2,
        "allocation.all.current": 2,
        "allocation.all.peak": 3,
        "allocation.all.allocated": 3,
        "allocation.all.freed": 1,
        "active.small_pool.current": 1,
        # small segment now: [free 1024][c 1536][free tail] -> two inactive split blocks
        "inactive_split.small_pool.current": 2,
        "inactive_split_bytes.small_pool.current": 2 * MiB - 1536,
        "inactive_split.large_pool.current": 1,
        "inactive_split_bytes.large_pool.current": 15 * MiB,
        "num_alloc_retries": 0,
        "num_ooms": 0,
        "num_device_alloc": 2,
        "num_device_free": 0,
    }
    assert {k: s[k] for k in expected} == expected
    assert engine.memory.max_memory_allocated("meta") == s["allocated_bytes.all.peak"]
    del b, c


def test_memory_summary_is_torchs_table_for_the_same_stats(torch, meta_caching, monkeypatch):
    # given some allocations on the caching model
    keep = [engine.empty(n, device="meta") for n in (100, 3 * MiB, 700_000)]
    del keep[1]
    ours = engine.memory.memory_summary("meta")
    # when torch's own memory_summary formats the same memory_stats()
    import torch.cuda.memory as tcm

    stats = engine.memory.memory_stats("meta")
    monkeypatch.setattr(tcm, "memory_stats", lambda device=None: stats)
    monkeypatch.setattr(tcm, "_get_device_index", lambda device, optional=False: 0)
    theirs = tcm.memory_summary()
    # then every line but the title is the same
    ours_lines, their_lines = ours.splitlines(), theirs.splitlines()
    assert len(ours_lines) == len(their_lines)
    assert "memory summary, device ID 0" in ours_lines[1]
    assert ours_lines[:1] + ours_lines[2:] == their_lines[:1] + their_lines[2:]
    short = engine.memory.memory_summary("meta", abbreviated=True)
    assert "from large pool" not in short and "Allocated memory" in short


def _check_structure(snapshot: dict) -> None:
    for seg in snapshot["segments"]:
        address = seg["address"]
        for block in seg["blocks"]:  # blocks in address order cover the segment
            assert block["address"] == address
            address += block["size"]
        assert address == seg["address"] + seg["total_size"]
        assert seg["allocated_size"] == sum(
            b["size"] for b in seg["blocks"] if b["state"] == "active_allocated"
        )
        assert {"device", "stream", "segment_type", "frames", "is_expandable"} <= set(seg)
    for trace in snapshot["device_traces"]:
        for e in trace:
            assert e["action"] in snap.ACTIONS + ("snapshot",)
            assert {"addr", "size", "stream", "frames"} <= set(e)
    data = snap.dumps(snapshot)
    assert data[0] == 0x80 and 2 <= data[1] <= 4  # a protocol the viewer reads
    assert pickle.loads(data) == snapshot


def test_record_memory_history_traces_the_caching_allocator(meta_caching, tmp_path):
    # given history on, then allocations, a free, and a block reused from the cache
    engine.memory._record_memory_history(device="meta")
    a = engine.empty(250, device="meta")  # line A
    b = engine.empty(5 * MiB // F32, device="meta")
    del a
    c = engine.empty(100, device="meta")  # reuses a's cached block: no new segment
    # when the snapshot is taken
    s = engine.memory._snapshot("meta")
    trace = s["device_traces"][0]
    # then the trace is PyTorch's sequence of actions, with the requested sizes
    assert [(e["action"], e["size"]) for e in trace] == [
        ("segment_alloc", 2 * MiB),
        ("alloc", 1000),
        ("segment_alloc", 20 * MiB),
        ("alloc", 5 * MiB),
        ("free_requested", 1000),
        ("free_completed", 1000),
        ("alloc", 400),
    ]
    assert trace[1]["addr"] == trace[0]["addr"] == trace[6]["addr"]
    here = os.path.abspath(__file__)
    assert trace[1]["frames"][0]["filename"] == here
    assert (
        trace[1]["frames"][0]["name"] == "test_record_memory_history_traces_the_caching_allocator"
    )
    assert {e["category"] for e in trace if e["action"] == "alloc"} == {"unknown"}
    # the segments: small [c 512][free tail], large [b 5 MiB][free 15 MiB]
    _check_structure(s)
    assert [
        (seg["segment_type"], [(bl["size"], bl["state"]) for bl in seg["blocks"]])
        for seg in s["segments"]
    ] == [
        ("small", [(512, "active_allocated"), (2 * MiB - 512, "inactive")]),
        ("large", [(5 * MiB, "active_allocated"), (15 * MiB, "inactive")]),
    ]
    live = s["segments"][0]["blocks"][0]
    assert live["requested_size"] == 400 and live["frames"][0]["filename"] == here
    # and _dump_snapshot writes the same pickle
    path = tmp_path / "snap.pickle"
    engine.memory._dump_snapshot(str(path), device="meta")
    assert pickle.loads(path.read_bytes())["segments"] == s["segments"]
    del b, c


def test_history_off_and_state_only(meta_caching):
    engine.memory._record_memory_history("state", device="meta")
    a = engine.empty(10, device="meta")
    s = engine.memory._snapshot("meta")
    assert s["device_traces"][0] == []
    assert s["segments"][0]["blocks"][0]["frames"]  # live blocks keep their frames
    engine.memory._record_memory_history(None, device="meta")
    b = engine.empty(10, device="meta")
    s = engine.memory._snapshot("meta")
    assert s["device_traces"][0] == [] and all(
        not bl["frames"] for seg in s["segments"] for bl in seg["blocks"]
    )
    with pytest.raises(ValueError, match="enabled must be"):
        engine.memory._record_memory_history("everything", device="meta")
    del a, b


def test_exact_model_history_is_one_segment_per_allocation():
    engine.memory._record_memory_history(device="meta")
    try:
        a = engine.empty(250, device="meta")
        del a
        trace = engine.memory._snapshot("meta")["device_traces"][0]
    finally:
        engine.memory._record_memory_history(None, device="meta")
    assert [(e["action"], e["size"]) for e in trace] == [
        ("segment_alloc", 1000),
        ("alloc", 1000),
        ("free_requested", 1000),
        ("free_completed", 1000),
        ("segment_free", 1000),
    ]


def test_oom_entry_carries_device_free(meta_caching):
    engine.memory._record_memory_history(device="meta")
    engine.memory.set_memory_limit(30 * MiB, device="meta")
    a = engine.empty(5 * MiB // F32, device="meta")  # 20 MiB segment
    with pytest.raises(engine.OutOfMemoryError):
        engine.empty(16 * MiB // F32, device="meta")  # needs a 16 MiB segment: 36 > 30
    engine.memory.set_memory_limit(None, device="meta")
    oom = engine.memory._snapshot("meta")["device_traces"][0][-1]
    assert oom["action"] == "oom" and oom["device_free"] == 10 * MiB
    del a


def test_replay_rebuilds_the_live_history(meta_caching):
    # given a live history of a sequence with splits, merges and reuse
    engine.memory._record_memory_history(device="meta")
    sizes = [1000, 5 * MiB, 3000, 30 * MiB, 600_000, 1000]
    tensors = {i: engine.empty(n // F32, device="meta") for i, n in enumerate(sizes)}
    events = [{"action": "alloc", "requested": n, "storage": i} for i, n in enumerate(sizes)]
    for i in (0, 3, 4):
        del tensors[i]
        events.append({"action": "free", "requested": sizes[i], "storage": i})
    tensors[9] = engine.empty(2 * MiB // F32, device="meta")
    events.append({"action": "alloc", "requested": 2 * MiB, "storage": 9})
    live = engine.memory._snapshot("meta")
    # when the same requests are replayed on a fresh caching model
    rebuilt = snap.replay(events, "caching")
    # then addresses, segments, blocks and the trace's actions are the live ones
    strip = lambda segs: [  # noqa: E731
        (
            s["address"],
            s["total_size"],
            [(b["address"], b["size"], b["state"]) for b in s["blocks"]],
        )
        for s in segs
    ]
    assert strip(rebuilt["segments"]) == strip(live["segments"])
    key = lambda t: [(e["action"], e["addr"], e["size"]) for e in t if e["action"] != "snapshot"]  # noqa: E731
    assert key(rebuilt["device_traces"][0]) == key(live["device_traces"][0])
    _check_structure(rebuilt)
    del tensors


def test_integers_wider_than_8_bytes_are_refused():
    with pytest.raises(ValueError, match="8 bytes"):
        snap.dumps({"segments": [], "device_traces": [[{"addr": 2**64}]]})


def test_torch_memory_viz_reads_a_live_snapshot(torch, meta_caching, tmp_path):
    # given a snapshot of an MLP-ish sequence dumped by the engine
    engine.memory._record_memory_history(device="meta")
    w = engine.empty(1024, 1024, device="meta")
    x = engine.empty(8, 1024, device="meta")
    y = x @ w
    del x
    path = tmp_path / "snap.pickle"
    engine.memory._dump_snapshot(str(path), device="meta")
    # when PyTorch's own tool (torch.cuda._memory_viz) reads the file
    from torch.cuda import _memory_viz as viz

    data = pickle.loads(path.read_bytes())
    stats = viz.segsum(data)  # asserts that blocks add up to each segment
    listing = viz.trace(data)
    for html in (viz.trace_plot(data), viz.segment_plot(data)):
        assert "add_local_files" in html
    # then its totals are the engine's
    reserved = engine.memory.memory_reserved("meta")
    requested = engine.memory.memory_stats("meta")["requested_bytes.all.current"]
    assert f"total_reserved: {_viz_bytes(reserved)}" in stats
    assert f"total_allocated: {_viz_bytes(requested)}" in stats
    assert listing.count("cudaMalloc(") == engine.memory.memory_stats("meta")["segment.all.current"]
    del w, y


def _viz_bytes(num: float) -> str:
    """torch.cuda._memory_viz's size format."""
    for unit in ["", "Ki", "Mi", "Gi", "Ti"]:
        if abs(num) < 1024.0:
            return f"{num:3.1f}{unit}B"
        num /= 1024.0
    return f"{num:.1f}PiB"
