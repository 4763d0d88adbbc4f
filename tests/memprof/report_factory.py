"""Small reports that satisfy the report format (memprof/reports/schema.py), for tests that need
a report file without running a scenario."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

_COLUMNS = (
    "seq time_s action bytes requested allocated reserved node op phase category tensor "
    "iteration storage"
).split()


def variant(name: str, peak: int, *, status: str = "ok") -> dict[str, Any]:
    """A variant with one allocation of `peak` bytes and its free."""
    tl = {c: [] for c in _COLUMNS}
    for i, (action, allocated) in enumerate((("alloc", peak), ("free", 0))):
        row = {
            "seq": i,
            "time_s": i * 1e-3,
            "action": action,
            "bytes": peak,
            "requested": peak,
            "allocated": allocated,
            "reserved": allocated,
            "node": "act",
            "op": "relu",
            "phase": "forward",
            "category": "activation",
            "tensor": "y",
            "iteration": 0,
            "storage": 1,
        }
        for c in _COLUMNS:
            tl[c].append(row[c])
    return {
        "name": name,
        "params": {},
        "status": status,
        "error": None,
        "device": "cpu",
        "allocator": "exact",
        "peak_allocated_bytes": peak,
        "peak_reserved_bytes": peak,
        "baseline_bytes": 0,
        "final_allocated_bytes": 0,
        "num_allocs": 1,
        "num_frees": 1,
        "num_ooms": 0,
        "iterations": 1,
        "duration_s": 0.002,
        "program_duration_s": 0.001,
        "timeline": tl,
        "phases": [
            {
                "name": "forward",
                "iteration": 0,
                "start_index": 0,
                "end_index": 2,
                "start_s": 0.0,
                "end_s": 0.002,
            }
        ],
        "peak": {
            "event_index": 0,
            "allocated_bytes": peak,
            "reserved_bytes": peak,
            "live": [
                {
                    "tensor": "y",
                    "bytes": peak,
                    "category": "activation",
                    "node": "act",
                    "op": "relu",
                }
            ],
            "by_category": {"activation": peak},
        },
        "ops": [],
        "warnings": [],
        "expectations": [],
    }


def report(peaks: dict[str, int], *, name: str = "relu-block", run_id: str | None = None):
    """A report with one variant per (name, peak) in `peaks`."""
    variants = [variant(n, p) for n, p in peaks.items()]
    return {
        "schema_version": 1,
        "tool": {"name": "memprof", "version": "0.1.0"},
        "run_id": run_id or f"20260101T000000Z-{name}-abcdef",
        "created_at": "2026-01-01T00:00:00Z",
        "scenario": {
            "name": name,
            "description": "",
            "path": "scenarios/relu.yaml",
            "sha256": "0" * 64,
            "warnings": [],
        },
        "environment": {
            "device": "cpu",
            "backend": "numpy",
            "allocator": "exact",
            "python": "3.11",
            "numpy": "2.0",
            "cupy": None,
            "platform": "linux",
            "git_commit": None,
        },
        "status": "ok",
        "baseline_variant": None,
        "variants": variants,
        "comparison": {
            "baseline": None,
            "rows": [
                {
                    "variant": v["name"],
                    "peak_allocated_bytes": v["peak_allocated_bytes"],
                    "delta_bytes": 0,
                    "ratio": None,
                    "saving_pct": None,
                    "duration_s": v["duration_s"],
                }
                for v in variants
            ],
        },
    }


def write_report(path: Path, peaks: dict[str, int], **kwargs) -> Path:
    path.write_text(json.dumps(report(peaks, **kwargs)))
    return path
