"""The fuzz sample in the test suite: a fixed seeded set of mutated scenarios and reports through
`memprof validate`, `run`, `report` and `compare` in subprocesses (tests/fuzz/runner.py). The
long run is `python -m tests.fuzz --n 10000` (docs/ci.md)."""

from __future__ import annotations

from tests.fuzz.runner import fuzz

SCENARIOS = 300
REPORTS = 6


def test_the_seeded_fuzz_sample_finds_no_traceback_hang_or_lost_report(tmp_path):
    tally = fuzz(
        SCENARIOS,
        seed=14,
        reports=REPORTS,
        jobs=2,
        batch=60,
        timeout=240,
        workdir=tmp_path,
    )
    counts = tally.counts()
    assert counts["files"] == SCENARIOS + REPORTS
    assert tally.reports > 0, "no mutated scenario got as far as a report"
    assert not tally.failures, "\n\n".join(str(f) for f in tally.failures[:5]) + f"\n{counts}"
