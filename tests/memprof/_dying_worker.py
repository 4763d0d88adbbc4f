"""A worker task for tests/memprof/test_run_jobs.py: it kills its own process (as a crash in a
native library or the OOM killer would) for the variant named `die`, else runs the variant as
memprof's workers do. A module of its own so that spawned workers can import it."""

from __future__ import annotations

import os

from memprof.runner.parallel import _run_task


def die_on_die(path: str, name: str, device, allocator) -> dict:
    if name == "die":
        os._exit(3)
    return _run_task(path, name, device, allocator)
