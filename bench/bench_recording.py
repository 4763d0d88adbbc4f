"""What recording costs per allocation event (python bench/bench_recording.py [--ops N]).

A chain of N elementwise ops on meta inside `memprof.profile` (2 events per op: the result's
allocation and, one op later, the free of the one before) is recorded; printed beside issue 15's
target of at most 64 bytes per event:

- in memory: the recorder's records, measured with tracemalloc (what the run keeps alive until
  the report is built, over the bare chain's own memory);
- in the JSON report: the bytes of the saved report over the number of events.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import tracemalloc
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TARGET_BYTES = 64


def measure(ops: int) -> dict:
    """Bytes per event of the recorder in memory and of the report JSON, for an `ops` chain."""
    import engine
    import memprof
    from memprof.reports.store import dumps_report

    def chain():
        y = engine.randn(64, 64)
        for i in range(ops):
            y = y * 1.0001 if i % 2 else y + 1.0
        return y

    with tempfile.TemporaryDirectory() as tmp:
        prof = memprof.profile("recording", device="meta", runs_dir=tmp, save=False)
        tracemalloc.start()
        with prof:
            before = tracemalloc.get_traced_memory()[0]
            y = chain()
            recorded = tracemalloc.get_traced_memory()[0] - before
            del y
        tracemalloc.stop()
        events = len(prof.rec.records)
        report = dumps_report(prof.report)
    return {
        "ops": ops,
        "events": events,
        "memory_bytes_per_event": recorded / max(events, 1),
        "json_bytes_per_event": len(report.encode()) / max(events, 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", type=int, default=100_000)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    m = measure(args.ops)
    print(f"{m['events']:,} events from a {m['ops']:,}-op chain on meta")
    for key, label in (("memory_bytes_per_event", "in memory"), ("json_bytes_per_event", "JSON")):
        mark = "met" if m[key] <= TARGET_BYTES else "NOT met"
        print(f"  {label:10} {m[key]:8.1f} bytes/event   target <= {TARGET_BYTES} {mark}")
    if args.json:
        args.json.write_text(json.dumps(m, indent=2))


if __name__ == "__main__":
    main()
