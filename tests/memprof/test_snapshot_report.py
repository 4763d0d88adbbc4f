"""`memprof report RUN --snapshot`: a run as PyTorch's memory snapshot, read by torch's tools."""

from __future__ import annotations

import pickle
import pickletools
from pathlib import Path

import pytest
from typer.testing import CliRunner

from memprof.cli.app import app
from memprof.reports.record import record_run
from memprof.reports.snapshot import report_snapshot
from memprof.runner import run_scenario

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()

# The opcodes the memory_viz page's JavaScript unpickler handles (unpickle() in
# torch/utils/viz/MemoryViz.js); anything else makes it throw "UNKNOWN OPCODE".
VIEWER_OPCODES = {
    "PROTO", "APPEND", "APPENDS", "LIST", "TUPLE", "NEWFALSE", "NEWTRUE", "NONE", "BINGET",
    "BININT", "BININT1", "BININT2", "EMPTY_DICT", "EMPTY_LIST", "FRAME", "LONG1", "LONG_BINGET",
    "MARK", "MEMOIZE", "BINPUT", "LONG_BINPUT", "SETITEMS", "SETITEM", "DICT",
    "SHORT_BINUNICODE", "BINUNICODE", "STOP", "EMPTY_TUPLE", "TUPLE1", "TUPLE2", "TUPLE3",
    "BINFLOAT",
}  # fmt: skip


@pytest.fixture(scope="module")
def mlp_report():
    return run_scenario(ROOT / "scenarios" / "mlp_train.yaml")


def _running_totals(trace):
    """Allocated bytes after each event, as the viewer's timeline adds them up; and reserved."""
    allocated = reserved = peak = peak_reserved = 0
    for e in trace:
        if e["action"] == "alloc":
            allocated += e["size"]
        elif e["action"] == "free_completed":
            allocated -= e["size"]
        elif e["action"] == "segment_alloc":
            reserved += e["size"]
        elif e["action"] == "segment_free":
            reserved -= e["size"]
        peak, peak_reserved = max(peak, allocated), max(peak_reserved, reserved)
    return allocated, peak, peak_reserved


def test_mlp_snapshot_loads_in_torch_memory_viz_and_totals_match(mlp_report, tmp_path):
    torch = pytest.importorskip("torch")
    from torch.cuda import _memory_viz as viz

    # given the MLP run's snapshot, written by the CLI
    recorded = record_run(tmp_path, mlp_report, source="run")
    out = tmp_path / "mlp.pickle"
    res = runner.invoke(
        app, ["report", mlp_report["run_id"], "--runs", str(tmp_path), "--snapshot", str(out)]
    )
    assert res.exit_code == 0, res.output
    assert recorded.path.with_suffix(".html").exists() is False  # only what was asked for
    data = out.read_bytes()
    # then only opcodes the memory_viz page reads, protocol 2-4
    ops = {op.name for op, _, _ in pickletools.genops(data)}
    assert ops <= VIEWER_OPCODES, ops - VIEWER_OPCODES
    assert data[0] == 0x80 and 2 <= data[1] <= 4
    snap = pickle.loads(data)
    # PyTorch's own tool renders it: both plots, the segment summary (which checks that blocks
    # add up to each segment) and the trace listing
    assert "add_local_files" in viz.trace_plot(snap)
    assert "add_local_files" in viz.segment_plot(snap)
    stats = viz.segsum(snap)
    assert "cudaMalloc(" in viz.trace(snap)
    # and its totals are the report's, variant by variant (variant i is device i)
    variants = mlp_report["variants"]
    assert len(snap["device_traces"]) == len(variants) == 3
    for i, v in enumerate(variants):
        final, peak, peak_reserved = _running_totals(snap["device_traces"][i])
        assert final == v["final_allocated_bytes"]
        assert peak == v["peak_allocated_bytes"]
        assert peak_reserved == v["peak_reserved_bytes"]
        active = sum(
            b["size"]
            for s in snap["segments"]
            if s["device"] == i
            for b in s["blocks"]
            if b["state"] == "active_allocated"
        )
        assert active == v["final_allocated_bytes"]
    total = sum(v["final_allocated_bytes"] for v in variants)
    assert f"total_allocated: {viz.Bytes(total)}" in stats
    # categories colour the timeline; 'unknown' must be one of them for the page
    categories = {e.get("category") for t in snap["device_traces"] for e in t if "category" in e}
    assert {"parameter", "input", "gradient", "optimizer_state", "unknown"} <= categories
    alloc = next(e for e in snap["device_traces"][0] if e["action"] == "alloc")
    assert alloc["frames"] and {"filename", "line", "name"} <= set(alloc["frames"][0])
    del torch


def test_caching_model_run_gives_its_segments(tmp_path):
    # seed 004: randn(10000, 10000) on meta with the caching model, then relu_ in place
    report = run_scenario(ROOT / "scenarios" / "relu_10000.yaml")
    snap = report_snapshot(report)
    first = report["variants"][0]
    assert first["allocator"] == "caching"
    trace = snap["device_traces"][0]
    seg = next(e for e in trace if e["action"] == "segment_alloc" and e["size"] >= 400_000_000)
    assert seg["size"] == 400556032  # 191 x 2 MiB, the block unsplit
    alloc = next(e for e in trace if e["action"] == "alloc" and e["addr"] == seg["addr"])
    assert alloc["size"] == 400_000_000  # the trace carries the bytes requested, as PyTorch's
    _, _, peak_reserved = _running_totals(trace)
    assert peak_reserved == first["peak_reserved_bytes"]
    for s in snap["segments"]:
        address = s["address"]
        for b in s["blocks"]:
            assert b["address"] == address
            address += b["size"]
        assert address == s["address"] + s["total_size"]


def test_snapshot_of_a_missing_run_is_invalid_input(tmp_path):
    res = runner.invoke(
        app, ["report", "nope", "--runs", str(tmp_path), "--snapshot", str(tmp_path / "x")]
    )
    assert res.exit_code == 2
    assert "Traceback" not in res.output
