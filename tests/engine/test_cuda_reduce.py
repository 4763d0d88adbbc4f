"""torch's CUDA reduction scratch (engine/backends/cuda_reduce.py) against what torch.cuda did.

tests/engine/data/cuda_reduce_h100.json holds the allocations torch 2.11 made on an H100 for
200 reductions (float32 and bfloat16; over the outer, the inner and every dimension; from 64 to
16384 rows, 64 to 3072 columns), recorded with the profiler. The model needs no GPU to be
checked against them; on a GPU the engine's own events are checked too.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import engine
from engine.allocator import MemoryObserver, get_allocator
from engine.backends.cuda_reduce import GPU, global_scratch
from tests.conftest import requires_cuda

DATA = json.loads((Path(__file__).parent / "data" / "cuda_reduce_h100.json").read_text())
H100 = GPU(DATA["multiprocessors"], DATA["max_threads_per_multiprocessor"])
DIMS = {"sum0": (0,), "mean0": (0,), "sum1": (1,), "all": (0, 1)}


def _blocks(n: int) -> int:
    return -(-n // 512) * 512  # the caching allocator's rounding of small requests


@pytest.mark.parametrize("dtype,shape,how,allocs", DATA["rows"], ids=lambda v: str(v))
def test_model_equals_torch_on_an_h100(dtype, shape, how, allocs):
    itemsize = 2 if dtype == "bfloat16" else 4
    n, c = shape
    buf, sem = global_scratch(shape, (c, 1), DIMS[how], itemsize, 4, H100)
    assert allocs[1:] == ([_blocks(buf), _blocks(sem)] if buf else [])


def test_the_recorded_cases_include_both_answers():
    # the grid is only a check if it holds reductions with and without staging, of every kind
    staged = {(r[2], len(r[3]) > 1) for r in DATA["rows"]}
    assert staged >= {("sum0", True), ("sum0", False), ("all", True), ("all", False)}


def test_layout_and_alignment_decide_as_torch_does():
    # a transposed (1024, 256) input reduces along its fastest dimension: no staging; the same
    # input 4-byte misaligned cannot vectorise along the output: no staging either
    assert global_scratch((1024, 256), (256, 1), (0,), 4, 4, H100) == (2097152, 8)
    assert global_scratch((1024, 256), (1, 1024), (0,), 4, 4, H100) == (0, 0)
    assert global_scratch((1024, 256), (256, 1), (0,), 4, 4, H100, data_ptr=4) == (0, 0)
    # a 3-d gradient over its two leading dims coalesces to the same (1024, 256) reduction
    assert global_scratch((8, 128, 256), (32768, 256, 1), (0, 1), 4, 4, H100) == (2097152, 8)
    # fewer multiprocessors: fewer blocks per output, a smaller buffer
    small = GPU(multiprocessors=8, max_threads_per_multiprocessor=2048)
    assert global_scratch((16384, 3072), (3072, 1), (0,), 4, 4, small)[0] < 138412032
    assert global_scratch((0, 5), (5, 1), (0,), 4, 4, H100) == (0, 0)


class _Events(MemoryObserver):
    def __init__(self):
        self.sizes = []

    def on_alloc(self, event):
        self.sizes.append(event.bytes)

    def on_free(self, event):
        self.sizes.append(-event.bytes)


@pytest.mark.cuda
@requires_cuda
def test_engine_sum_on_cuda_charges_the_staging_as_torch():
    engine.memory.set_allocator_model("caching", "cuda")
    x = engine.from_numpy(np.ones((1024, 256), np.float32)).to("cuda")
    seen = _Events()
    with get_allocator("cuda").observing(seen):
        y = x.sum(0)
    assert seen.sizes == [1024, 2097152, 512, -512, -2097152]  # torch's, in torch's order
    assert float(y[0]) == 1024.0
    del x, y  # (the fixture puts the exact model back, which needs nothing allocated)


@pytest.mark.cuda
@requires_cuda
def test_linear_bias_gradient_on_cuda_peaks_as_torch(torch):
    if not torch.cuda.is_available():
        pytest.skip("needs torch with CUDA")

    def peak(lib, device):
        # backward: grad of x (4 MiB), of the weight, of the bias and its (4096, 256) sum's
        # 8 MiB staging buffer and semaphores: the peak
        lin = lib.nn.Linear(256, 256, device=device)
        x = lib.ones(4096, 256, device=device, requires_grad=True)
        g = lib.ones(4096, 256, device=device)
        out = lin(x)
        if lib is torch:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated()
            out.backward(g)
            torch.cuda.synchronize()
            return torch.cuda.max_memory_allocated() - base
        engine.memory.reset_peak_memory_stats(device)
        base = engine.memory.memory_allocated(device)
        out.backward(g)
        return engine.memory.max_memory_allocated(device) - base

    engine.memory.set_allocator_model("caching", "cuda")
    peak(torch, "cuda")  # warm-up: cuBLAS's workspace stays torch's own
    assert peak(engine, "cuda") == peak(torch, "cuda")


# --- the softmax backward's temporary (torch's softmax_backward_cuda_out: tmp = grad * output)


def _softmax_backward_sizes(model: str) -> list[int]:
    engine.memory.set_allocator_model(model, "meta")
    x = engine.empty(8, 4, 128, 128, device="meta", requires_grad=True)
    y = engine.softmax(x, -1)
    g = engine.empty(8, 4, 128, 128, device="meta")
    seen = _Events()
    with get_allocator("meta").observing(seen):
        y.backward(g)
    del x, y, g
    return seen.sizes


def test_softmax_backward_on_a_gpu_makes_torchs_product_temporary():
    scores = 8 * 4 * 128 * 128 * 4
    # meta under the caching model stands for a GPU: grad_input, then grad * output, freed
    assert _softmax_backward_sizes("caching")[:3] == [scores, scores, -scores]
    # under the exact model (a CPU's kernels) no temporary: grad_input is all it allocates
    assert [s for s in _softmax_backward_sizes("exact") if s > 0] == [scores]


def test_conv_bias_gradient_stages_as_torchs_fallback_sum():
    # convolution_backward computes the bias gradient itself on a GPU (cuDNN does not):
    # grad_output.sum((0, 2, 3)), a reduction that stages here (N*H*W = 401408 per channel)
    engine.memory.set_allocator_model("caching", "meta")
    conv = engine.nn.Conv2d(3, 8, 3, padding=1, device="meta")
    x = engine.empty(32, 3, 112, 112, device="meta")  # (held: its release is not the point)
    y = conv(x)
    buf, sem = global_scratch(
        (32, 8, 112, 112), (8 * 112 * 112, 112 * 112, 112, 1), (0, 2, 3), 4, 4
    )
    assert (buf, sem) == (1568, 32)  # block-x reduction: one float per output and block
    g = engine.empty(32, 8, 112, 112, device="meta")
    seen = _Events()
    with get_allocator("meta").observing(seen):
        y.backward(g)
    # the weight's gradient, the bias's, then the staging buffer and semaphores, freed at once
    assert seen.sizes == [1024, 512, _blocks(buf), _blocks(sem), -_blocks(sem), -_blocks(buf)]
