"""bench/gpu_fidelity.py: the meta half against hand-computed caching figures, the cpu half
against torch's CPU profiler, the cuda half on a GPU (skipped cleanly without CuPy/torch.cuda),
and the suite importable with numpy alone.

The hand-computed figures apply PyTorch's CUDA caching allocator rules
(c10/cuda/CUDACachingAllocator.cpp) to each
program's requests: a request rounds up to 512 bytes; rounded sizes <= 1 MiB come from the small
pool in 2 MiB segments, larger ones from the large pool in 20 MiB segments when < 10 MiB, else in
a segment of the size rounded up to 2 MiB; a free block is split when the remainder is >= 512
(small) or > 1 MiB (large), otherwise the remainder stays in the block and counts as allocated;
best fit by (size, address); frees merge with free neighbours and stay reserved.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from engine.allocator import MemoryObserver
from tests.conftest import requires_cuda

REPO = Path(__file__).resolve().parents[2]
MiB = 1 << 20


def _load():
    name = "gpu_fidelity"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, REPO / "bench" / "gpu_fidelity.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


gf = _load()

# program -> (peak allocated, peak reserved, segment layout at the end, extra counters)
HAND = {
    # x: 1x64x512x512 float32 = 67108864 bytes, a multiple of 2 MiB: large pool, a segment of
    # exactly 64 MiB, nothing left to split. relu(x) makes a second one (the seed: 128 MiB).
    "relu-out": (2 * 64 * MiB, 2 * 64 * MiB, [("large", 64 * MiB)] * 2, {}),
    # relu_(x) writes into x: no allocation (the seed: 64 MiB).
    "relu-in": (64 * MiB, 64 * MiB, [("large", 64 * MiB)], {}),
    # randn(10000, 10000) asks 400,000,000 bytes (a multiple of 512): segment 2 MiB * 191 =
    # 400,556,032; the 556,032-byte remainder is <= 1 MiB, so it is not split and the block is
    # the whole segment (the seed's 382.0 MiB). relu adds a second such block and segment.
    "randn-relu": (2 * 400556032, 2 * 400556032, [("large", 400556032)] * 2, {}),
    "randn-relu_": (400556032, 400556032, [("large", 400556032)], {}),
    # MLP 512-1024-512, batch 64, one SGD(momentum) step after a warm-up step.
    # Large pool (2 MiB blocks): W1 1024x512, W2 512x1024, their grads and momentum buffers,
    # all in one 20 MiB segment (each split leaves > 1 MiB, or exactly 0, so no block keeps an
    # unsplit remainder). Small pool: everything else, all 512-multiples, in one 2 MiB segment.
    # Before the step: params 2*2 MiB + 4096 + 2048, grads and momentum the same, x and target
    # 131072 each: 3 * (4194304 + 6144) + 262144 = 12863488.
    # zero_grad(set_to_none=True) frees the grads: -4200448.
    # The step's own requests then peak at 4593668 bytes above that (torch's CPU profiler sees
    # the same, tests/engine/test_memory_vs_torch.py): the activations h (262144) and out
    # (131072), MSE's buffer, the new grads ... all 512-multiples, and the loss's 4-byte
    # gradient seed, held until backward returns (torch.autograd.backward's local list) and so
    # live at the peak: one 512-byte block. 12863488 - 4200448 + 4593664 + 512 = 13257216, what
    # torch.cuda measured on an H100 (docs/gpu-fidelity.md).
    # Large pool at most 12 MiB live: one 20 MiB segment; plus one 2 MiB small segment.
    "mlp-step": (13257216, 22 * MiB, [("large", 20 * MiB), ("small", 2 * MiB)], {}),
    # Adam's first step on the same MLP (grads made by one backward; x freed after it).
    # Large pool: W1, W2, gW2, gW1 (8 MiB), then the state exp_avg/exp_avg_sq of W1 and W2
    # (8 MiB) in the same 20 MiB segment, leaving 4 MiB free. The update makes one `denom` per
    # parameter: sqrt (2 MiB, splits the free 4 MiB) and the division (2 MiB, the last 2 MiB);
    # the sqrt is freed at once, the denom only when the loop rebinds it at the next parameter
    # (as in torch's single-tensor Adam). W1's denom is freed during b1's update, so at W2's
    # update the large pool again holds 8 + 8 + 2 + 2 = 20 MiB: the peak, with no new segment.
    # Small pool then: b1, b2 (4096 + 2048), their grads (the same), their state (twice that):
    # 24576, plus b1's denom (4096) still bound: 28672. Peak = 20 MiB + 28672 = 21000192.
    "adam-first": (20 * MiB + 28672, 22 * MiB, [("large", 20 * MiB), ("small", 2 * MiB)], {}),
    # The same with foreach=True (PyTorch's cuda default): the square roots of all four
    # exp_avg_sq at once and no denom. Large pool: 16 MiB as above + sqrt(W1) + sqrt(W2) = the
    # whole 20 MiB segment. Small pool: 24576 as above + sqrt(b1) + sqrt(b2) (4096 + 2048).
    "adam-foreach": (20 * MiB + 30720, 22 * MiB, [("large", 20 * MiB), ("small", 2 * MiB)], {}),
    # The fragmenting sequence (sizes in MiB; S = small segment, L = large):
    #  a1: rounded 1 MiB <= 1 MiB: small pool, S1 (2 MiB), split (remainder 1 MiB >= 512).
    #  b3: large, < 10 MiB: L1 = 20 MiB, split, 17 MiB free.   c9: best fit 17 -> 8 MiB free.
    #  d25: no free block fits; >= 10 MiB: L2 = 26 MiB; remainder 1 MiB is not > 1 MiB, so the
    #       block is the whole 26 MiB.  Allocated 1+3+9+26 = 39, reserved 2+20+26 = 48.
    #  free b3, d25.  e1: S1's free 1 MiB, exact.  f3: L1's free 3 MiB, exact.
    #  g9: best fit among 8 and 26 MiB: L2, split, 17 MiB free.  h25: L3 = 26 MiB, unsplit.
    #       Allocated 1+9+1+3+9+26 = 49, reserved 74.
    #  free a1 (S1 front), c9 (merges with L1's free 8 MiB: 17 MiB).  i1: S1 front, exact.
    #  j3: two 17 MiB blocks (L1, L2): either, 14 MiB left.  k9: the 14 MiB, 5 MiB left.
    #  l25: nothing fits: L4 = 26 MiB, unsplit.
    #  Allocated e1 i1 f3 j3 g9 k9 h26 l26 = 78 MiB (the peak), reserved 2+20+26+26+26 = 100.
    "fragment": (
        78 * MiB,
        100 * MiB,
        [("large", 20 * MiB)] + [("large", 26 * MiB)] * 3 + [("small", 2 * MiB)],
        {
            "allocation.all.allocated": 12,
            "segment.all.allocated": 5,
            "segment.small_pool.allocated": 1,
            "num_alloc_retries": 0,
            "num_ooms": 0,
        },
    ),
    # Under a 100 MiB cap: a 40 MiB block (a 40 MiB segment) is freed and stays cached; 70 MiB
    # does not fit in it and 40 + 70 > 100, so the allocator frees the cached segment and
    # retries (retry 1), which fits. Then 40 MiB more: 70 + 40 > 100 and nothing is cached: a
    # retry (2) and out of memory, "Tried to allocate 40.00 MiB" (the segment size).
    # Peaks: allocated 70 MiB, reserved 70 MiB (40, then 0, then 70).
    "oom": (
        70 * MiB,
        70 * MiB,
        [("large", 70 * MiB)],
        {"num_alloc_retries": 2, "num_ooms": 1, "segment.all.allocated": 2},
    ),
}


@pytest.mark.parametrize("name", sorted(HAND))
def test_meta_matches_hand_computed_caching_figures(name):
    allocated, reserved, layout, counters = HAND[name]
    figures = gf.measure_engine(gf._program(name), "meta")
    assert figures.peak_allocated == allocated
    assert figures.peak_reserved == reserved
    assert figures.segments == sorted(layout)
    for key, value in counters.items():
        assert figures.counters[key] == value, key


# torch.cuda's figures for the transformer on an H100 (torch 2.11.0+cu130, 2026-11-27), its
# warm-up's bookkeeping subtracted: what the engine's caching model on meta must give.
TRANSFORMER_H100 = (
    35683840,
    58720256,
    [("large", 20971520)] * 2 + [("small", 2097152)] * 8,
    {"segment.small_pool.allocated": 6, "allocated_bytes.small_pool.peak": 16815104,
     "requested_bytes.all.peak": 34637864, "allocation.all.allocated": 64},
)  # fmt: skip


def test_meta_transformer_as_torch_cuda_on_an_h100():
    """The transformer's small blocks share the free room of the small segment torch's warm-up
    leaves (a 1 MiB block between free pieces of 530432 and 518144 bytes), as on the GPU: the
    same reserved bytes and segments (one 2 MiB segment more without it)."""
    allocated, reserved, layout, counters = TRANSFORMER_H100
    figures = gf.measure_engine(gf._program("transformer"), "meta")
    assert (figures.peak_allocated, figures.peak_reserved) == (allocated, reserved)
    assert figures.segments == sorted(layout)
    for key, value in counters.items():
        assert figures.counters[key] == value, key


def test_oom_program_reports_the_segment_it_tried():
    figures = gf.measure_engine(gf._program("oom"), "meta")
    assert figures.notes == {"oom": "40.00 MiB"}


def test_every_program_has_a_hand_figure_or_a_reason():
    # cnn-step and transformer have no hand figure: their requests are the engine's own ops'
    # (checked against torch's CPU trace below where meaningful, and on a GPU by the suite).
    assert set(HAND) | {"cnn-step", "transformer"} == {p.name for p in gf.PROGRAMS}


def test_meta_half_prints_the_figures_and_says_the_cuda_columns_are_unmeasured():
    rows, unmeasured = gf.run(["relu-out", "fragment"], sides={"engine-meta"})
    assert [r.problems for r in rows] == [[], []]
    assert unmeasured["torch-cuda"] == unmeasured["engine-cuda"] == "not asked for (--sides)"
    text = gf.format_table(rows, {"torch-cuda": "no GPU", "engine-cuda": "no CuPy"})
    lines = text.splitlines()
    assert lines[2].split() == ["relu-out", "allocated", "-", "-", str(128 * MiB), "-", "-", "-"]
    assert "layout    meta: L20M L26M L26M L26M S2M" in text
    assert "unmeasured: torch-cuda (cuda columns): no GPU" in text
    assert "no differences beyond the named allowances" in text


def test_compare_flags_a_difference_and_honours_an_allowance():
    def figures(allocated, segments=(("large", 20 * MiB),)):
        return gf.Figures(allocated, 20 * MiB, list(segments), {}, {})

    row = gf.Row("p", {"engine-meta": figures(100), "torch-cuda": figures(612)}, {})
    assert gf.compare(row) == ["peak_allocated: engine-meta 100 vs torch-cuda 612 (diff -512)"]
    row = gf.Row("p", {"engine-meta": figures(100), "torch-cuda": figures(612)}, {}, 512, "x")
    assert gf.compare(row) == []

    # reserved: an allowance of scratch bytes covers the segment that scratch needs
    def reserved(n):
        return gf.Figures(0, n, [("large", 20 * MiB)], {}, {})

    row = gf.Row("p", {"engine-meta": reserved(40 * MiB), "torch-cuda": reserved(60 * MiB)}, {})
    row.allowance = 19432448  # the cnn-step's cuDNN workspace on an H100: a 20 MiB segment
    assert gf.compare(row) == []
    row.allowance = 8 * MiB  # under 10 MiB: still a 20 MiB segment
    assert gf.compare(row) == []
    row.allowance = MiB  # a small block's 2 MiB segment does not cover 20 MiB
    assert gf.compare(row) == [
        f"peak_reserved: engine-meta {40 * MiB} vs torch-cuda {60 * MiB} (diff {-20 * MiB:+d})"
    ]
    assert [gf.segment_size(n) for n in (0, 512, MiB, MiB + 1, 10 * MiB, 19432448)] == [
        0, 2 * MiB, 2 * MiB, 20 * MiB, 10 * MiB, 20 * MiB
    ]  # fmt: skip
    row = gf.Row("p", {"engine-meta": figures(0), "engine-cuda": figures(0, ())}, {})
    assert gf.compare(row) == ["segments: engine-cuda  vs engine-meta L20M"]
    row = gf.Row("p", {}, {"torch-cpu": 1000, "engine-meta": 1000 + gf.CPU_SCALAR_SLACK + 1})
    assert len(gf.compare(row)) == 1


# --- the caching rules on the programs' own request sequences -------------------------------


class ReferenceCachingAllocator:
    """PyTorch's caching rules written out plainly (lists and linear scans), independent of
    engine/allocator: to replay a program's requests and check the model's figures."""

    def __init__(self):
        self.segments = []  # {"pool", "size", "blocks": [[address, size, allocated], ...]}
        self.next_address = 0
        self.allocated = self.reserved = self.peak_allocated = self.peak_reserved = 0

    def reset_peaks(self):
        self.peak_allocated, self.peak_reserved = self.allocated, self.reserved

    def malloc(self, nbytes):
        size = max(512, -(-nbytes // 512) * 512)
        pool = "small" if size <= MiB else "large"
        fits = [
            (block[1], block[0], segment, block)
            for segment in self.segments
            if segment["pool"] == pool
            for block in segment["blocks"]
            if not block[2] and block[1] >= size
        ]
        if fits:
            _, _, segment, block = min(fits, key=lambda f: (f[0], f[1]))
        else:
            if pool == "small":
                seg_size = 2 * MiB
            elif size < 10 * MiB:
                seg_size = 20 * MiB
            else:
                seg_size = -(-size // (2 * MiB)) * 2 * MiB
            block = [self.next_address, seg_size, False]
            segment = {"pool": pool, "size": seg_size, "blocks": [block]}
            self.segments.append(segment)
            self.next_address += seg_size
            self.reserved += seg_size
            self.peak_reserved = max(self.peak_reserved, self.reserved)
        remainder = block[1] - size
        if remainder >= 512 if pool == "small" else remainder > MiB:
            i = segment["blocks"].index(block)
            segment["blocks"].insert(i + 1, [block[0] + size, remainder, False])
            block[1] = size
        block[2] = True
        self.allocated += block[1]
        self.peak_allocated = max(self.peak_allocated, self.allocated)
        return segment, block

    def free(self, handle):
        segment, block = handle
        block[2] = False
        self.allocated -= block[1]
        blocks = segment["blocks"]
        i = blocks.index(block)
        if i + 1 < len(blocks) and not blocks[i + 1][2]:
            block[1] += blocks.pop(i + 1)[1]
        if i > 0 and not blocks[i - 1][2]:
            blocks[i - 1][1] += blocks.pop(i)[1]

    def layout(self):
        return sorted((s["pool"], s["size"]) for s in self.segments)


class Requests(MemoryObserver):
    """The meta allocator's requests in order: ("alloc", id, bytes) / ("free", id), and ("run",)
    where the measured run starts."""

    def __init__(self):
        self.events = []

    def on_alloc(self, event):
        self.events.append(("alloc", event.storage_id, event.requested))

    def on_free(self, event):
        self.events.append(("free", event.storage_id))


def _replay(name):
    """The program's requests on meta (setup, then the run), replayed by the reference."""
    from engine.allocator import get_allocator

    program = gf._program(name)
    lib = gf._fresh_engine("meta")
    requests = Requests()
    with get_allocator("meta").observing(requests):
        own = gf._torch_small_segment(lib)  # as measure_engine: torch's warm-up leftovers
        requests.events.append(("own",))
        state = program.setup(lib)
        requests.events.append(("run",))
        kept = program.run(lib, state, {})
    ref = ReferenceCachingAllocator()
    live = {}
    for event in requests.events:
        if event[0] == "own":
            own_allocated, own_reserved = ref.allocated, ref.reserved
            own_segments = list(ref.segments)
        elif event[0] == "run":
            ref.reset_peaks()
        elif event[0] == "alloc" and event[2] > 0:
            live[event[1]] = ref.malloc(event[2])
        elif event[0] == "free" and event[1] in live:
            ref.free(live.pop(event[1]))
    del kept, state, own
    # figures without torch's bookkeeping, as measure_engine reports them
    ref.peak_allocated -= own_allocated
    ref.peak_reserved -= own_reserved
    ref.segments = [seg for seg in ref.segments if not any(seg is o for o in own_segments)]
    return ref


@pytest.mark.parametrize("name", [p.name for p in gf.PROGRAMS if p.name != "oom"])
def test_caching_model_follows_the_rules_on_each_programs_requests(name):
    ref = _replay(name)
    figures = gf.measure_engine(gf._program(name), "meta")
    assert (figures.peak_allocated, figures.peak_reserved) == (
        ref.peak_allocated,
        ref.peak_reserved,
    )
    assert figures.segments == ref.layout()


def test_reference_allocator_reproduces_the_hand_figures():
    # the reference itself against two hand figures (the fragmenting sequence and the seed)
    ref = _replay("fragment")
    assert (ref.peak_allocated, ref.peak_reserved, ref.layout()) == (
        HAND["fragment"][0],
        HAND["fragment"][1],
        sorted(HAND["fragment"][2]),
    )
    ref = ReferenceCachingAllocator()
    ref.malloc(400_000_000)
    assert (ref.allocated, ref.layout()) == (400556032, [("large", 400556032)])


# --- the cpu half: the engine's requests on meta against torch's CPU profiler -----------------

CPU_PROGRAMS = [
    p.name for p in gf.PROGRAMS if p.cpu_skip is None and not p.big and p.name != "transformer"
]


@pytest.mark.torch
@pytest.mark.parametrize("name", CPU_PROGRAMS)
def test_cpu_half_matches_torch_requests(torch, name):
    program = gf._program(name)
    t, e = gf.cpu_trace_torch(program), gf.cpu_trace_engine(program)
    assert abs(t - e) <= gf.CPU_SCALAR_SLACK, (t, e)


@pytest.mark.torch
def test_cpu_half_transformer_matches_torch_requests(torch):
    program = gf._program("transformer")
    t, e = gf.cpu_trace_torch(program), gf.cpu_trace_engine(program)
    assert abs(t - e) <= gf.CPU_SCALAR_SLACK, (t, e)


# --- the cuda half -----------------------------------------------------------------------------


def _torch_cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


# What still differs on a GPU (docs/gpu-fidelity.md), each a (program: figures) entry; none
# since the engine sides start from the small segment torch's warm-up leaves
# (gf.TORCH_SMALL_SEGMENT_AFTER_WARMUP), which closed the transformer's extra 2 MiB segment.
KNOWN_CUDA_GAPS: dict[str, tuple[str, ...]] = {}


@pytest.mark.cuda
@requires_cuda
@pytest.mark.skipif(not _torch_cuda(), reason="needs torch with CUDA")
def test_cuda_half_matches_torch_cuda():
    rows, unmeasured = gf.run(sides={"engine-meta", "engine-cuda", "torch-cuda"})
    assert set(unmeasured) <= {"cpu"}  # the cpu half, not asked for here
    problems = {
        r.program: [
            p for p in r.problems if p.split(":")[0] not in KNOWN_CUDA_GAPS.get(r.program, ())
        ]
        for r in rows
    }
    assert problems == {r.program: [] for r in rows}
    # a known gap that closed should leave the list
    for r in rows:
        found = {p.split(":")[0] for p in r.problems}
        assert set(KNOWN_CUDA_GAPS.get(r.program, ())) <= found, r.program


@pytest.mark.cuda
@requires_cuda
def test_engine_cuda_matches_engine_meta():
    rows, _ = gf.run([n for n in HAND if "randn" not in n], sides={"engine-meta", "engine-cuda"})
    assert {r.program: r.problems for r in rows} == {r.program: [] for r in rows}


# --- travelling as source: numpy alone --------------------------------------------------------

_BLOCK_TORCH = """
import importlib.abc, sys
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in ('torch', 'cupy'):
            raise ImportError('blocked: ' + name)
sys.meta_path.insert(0, Block())
"""


def test_suite_runs_with_numpy_alone():
    code = _BLOCK_TORCH + (
        "import runpy; sys.argv = ['gpu-fidelity', '--programs', 'relu-in,fragment'];"
        "runpy.run_path('bench/gpu_fidelity.py', run_name='__main__')"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert "unmeasured: torch-cuda (cuda columns): torch is not installed" in proc.stdout
    assert "unmeasured: cpu (cpu half): torch is not installed" in proc.stdout
    assert "no differences beyond the named allowances" in proc.stdout


def test_wrapper_script_and_bad_arguments():
    script = REPO / "scripts" / "gpu-fidelity"
    assert os.access(script, os.X_OK)
    env = {**os.environ, "PYTHON": sys.executable}
    ok = subprocess.run(
        [str(script), "--sides", "meta", "--programs", "relu-out"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert ok.returncode == 0, ok.stderr
    assert "134217728" in ok.stdout
    bad = subprocess.run(
        [str(script), "--programs", "relu-sideways"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert bad.returncode == 2
    assert "unknown program relu-sideways" in bad.stderr
    assert "Traceback" not in bad.stderr


def test_bench_cuda_says_why_without_a_gpu(capsys):
    spec = importlib.util.spec_from_file_location("bench_cuda", REPO / "bench" / "bench_cuda.py")
    bench_cuda = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench_cuda)
    why = bench_cuda.device_missing("cuda")
    if why is None:
        pytest.skip("a GPU is present: bench_cuda runs for real")
    assert bench_cuda.main(["--device", "cuda"]) == 2
    assert capsys.readouterr().err.strip() == f"bench_cuda: cuda unmeasured: {why}"
    assert bench_cuda.main(["--reps", "0"]) == 2


def test_gpu_checks_script_runs_every_part_and_says_what_it_could_not(tmp_path):
    # scripts/gpu-checks is what a session lent a GPU runs first; without one it must still
    # run every part, write every file, and exit 1 (bench_cuda: no GPU) rather than stop early
    script = REPO / "scripts" / "gpu-checks"
    assert os.access(script, os.X_OK)
    env = {**os.environ, "PYTHON": sys.executable}
    proc = subprocess.run(
        [str(script), str(tmp_path)], capture_output=True, text=True, env=env, timeout=300
    )
    names = {p.name for p in tmp_path.iterdir()}
    assert {"fidelity.log", "fidelity.json", "cuda-tests.log", "bench_cuda.log"} <= names
    for part in ("gpu fidelity", "cuda tests", "bench_cuda", "done, status"):
        assert f"=== {part}" in proc.stdout
    if _torch_cuda():
        return  # on a GPU machine the parts' own results decide
    assert proc.returncode == 1
    assert "no differences beyond the named allowances" in (tmp_path / "fidelity.log").read_text()
    assert "cuda unmeasured" in (tmp_path / "bench_cuda.log").read_text()


def test_gpu_record_names_its_files_by_gpu_and_says_why_without_one():
    spec = importlib.util.spec_from_file_location("gpu_record", REPO / "bench" / "gpu_record.py")
    gpu_record = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gpu_record)
    names = (
        "NVIDIA H100 80GB HBM3",
        "NVIDIA A100-SXM4-80GB",
        "NVIDIA H200",
        "Tesla V100-PCIE-16GB",
    )
    assert [gpu_record._slug(n) for n in names] == ["h100", "a100", "h200", "v100"]
    if _torch_cuda():
        pytest.skip("a GPU is present: gpu_record records for real")
    proc = subprocess.run(
        [sys.executable, str(REPO / "bench" / "gpu_record.py")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert proc.stderr.startswith("gpu_record: nothing recorded: ")
    assert "Traceback" not in proc.stderr
