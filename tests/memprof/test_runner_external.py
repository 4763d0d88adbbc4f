"""CuPy's own temporaries (reported by the engine's memory hook) are summed per variant."""

from __future__ import annotations

from engine.allocator.events import AllocEvent
from memprof.runner.recorder import Recorder


def _ext(action, nbytes, op):
    return AllocEvent(0, 0, action, "cuda:0", nbytes, nbytes, 0, 0, 0, {"op": op, "external": True})


def test_external_events_give_count_peak_and_bytes_per_op_without_touching_the_timeline():
    rec = Recorder()
    rec.on_external(_ext("alloc", 1024, "softmax"))
    rec.on_external(_ext("alloc", 512, "sum"))
    rec.on_external(_ext("free", 1024, "softmax"))
    rec.on_external(_ext("alloc", 2048, "softmax"))

    assert rec.external == {
        "num_allocs": 3,
        "num_frees": 1,
        "current_bytes": 2560,
        "peak_bytes": 2560,
        "by_op": {"softmax": 3072, "sum": 512},
    }
    assert rec.records == []  # storages only; CuPy's buffers are reported beside them
