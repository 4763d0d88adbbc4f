"""memprof's own fuzzer: mutated scenario files and reports against the command line.

    python -m tests.fuzz --n 10000                 # 10,000 mutated scenarios, validate + run
    python -m tests.fuzz --n 2000 --reports 500    # and 500 mutated reports (report, compare)
    python -m tests.fuzz --n 300 --seed 7 --keep-failing fuzz-failures/

The generator (tests/fuzz/generate.py) mutates the shipped scenarios structurally and byte-wise;
the runner (tests/fuzz/runner.py) calls `memprof validate` and `memprof run` in subprocesses
under a timeout and an address-space cap, several files per subprocess, and fails on any
traceback, hang, signal, unexpected exit code, lost or corrupt report, or `.tmp` file left
behind. It prints the counts and exits 1 when anything failed. `--device` picks the device the
runs use (default meta, which runs every program without computing values; `--device ""` runs
each file as written, on cpu for most). A fixed seeded sample runs in the test suite
(tests/fuzz/test_fuzz_sample.py); docs/ci.md describes the long run.
"""
