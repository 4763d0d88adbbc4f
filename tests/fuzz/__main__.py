"""`python -m tests.fuzz --n 10000`: the long fuzz run (see tests/fuzz/__init__.py)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from tests.fuzz.runner import fuzz


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.fuzz", description=__doc__)
    parser.add_argument("--n", type=int, default=1000, help="mutated scenario files")
    parser.add_argument("--reports", type=int, default=0, help="mutated report files")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=2, help="subprocesses at once")
    parser.add_argument("--batch", type=int, default=25, help="files per subprocess")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per subprocess")
    parser.add_argument("--as-gib", type=float, default=4.0, help="address-space cap, GiB")
    parser.add_argument(
        "--device", default="meta", help='device for `run` (default meta; "" = as written)'
    )
    parser.add_argument("--keep-failing", type=Path, help="copy failing inputs here")
    parser.add_argument("--json", type=Path, help="write the counts and failures here")
    args = parser.parse_args(argv)

    t0 = time.monotonic()
    last = [0.0]

    def progress(tally) -> None:
        if time.monotonic() - last[0] > 10:
            last[0] = time.monotonic()
            print(
                f"... {tally.files} files, {tally.invocations} invocations, "
                f"{len(tally.failures)} failures",
                file=sys.stderr,
                flush=True,
            )

    tally = fuzz(
        args.n,
        seed=args.seed,
        reports=args.reports,
        jobs=args.jobs,
        batch=args.batch,
        timeout=args.timeout,
        as_bytes=int(args.as_gib * 1024**3),
        device=args.device or None,
        keep_failing=args.keep_failing,
        progress=progress,
    )
    counts = tally.counts()
    counts["seconds"] = round(time.monotonic() - t0, 1)
    for failure in tally.failures[:20]:
        print(failure, "\n", file=sys.stderr)
    print(json.dumps(counts, indent=2))
    print("exit codes:", dict(sorted(tally.exit_codes.items())))
    if args.json:
        args.json.write_text(
            json.dumps({**counts, "failures": [str(f) for f in tally.failures]}, indent=2)
        )
    return 1 if tally.failures else 0


if __name__ == "__main__":
    sys.exit(main())
