"""Accounting models: PyTorch's caching allocator arithmetic, checked by hand, and the exact model.

Sizes below are worked out by hand from the rules of PyTorch's CUDACachingAllocator.cpp:
round_size = 512 * ceil(n / 512) (512 at least); rounded <= 1 MiB -> small pool, 2 MiB segments;
larger -> large pool, segment 20 MiB below 10 MiB else 2 MiB * ceil(size / 2 MiB); split when the
remainder is >= 512 (small) or > 1 MiB (large).
"""

from __future__ import annotations

import random
from itertools import pairwise

import pytest

from engine.allocator.models import (
    POOL_SCOPES,
    STAT_NAMES,
    Block,
    CachingModel,
    ExactModel,
    make_model,
    round_size,
    segment_size,
)
from engine.allocator.units import GiB, KiB, MiB, format_size
from engine.errors import OutOfMemoryError

# ---------------------------------------------------------------------------------------------
# units


@pytest.mark.parametrize(
    "nbytes, text",
    [
        (0, "0 bytes"),
        (100, "100 bytes"),
        (1024, "1024 bytes"),  # PyTorch prints bytes up to and including 1024
        (1536, "1.50 KiB"),
        (512 * KiB, "512.00 KiB"),
        (MiB, "1024.00 KiB"),  # ... and KiB up to and including 1 MiB
        (3 * MiB + 512 * KiB, "3.50 MiB"),
        (20 * MiB, "20.00 MiB"),
        (GiB, "1024.00 MiB"),
        (2 * GiB, "2.00 GiB"),
        (400_556_032, "382.00 MiB"),
    ],
)
def test_format_size_matches_pytorch(nbytes, text):
    # given a byte count, when it is formatted, then it reads as in PyTorch's OOM message
    assert format_size(nbytes) == text


@pytest.mark.parametrize(
    "nbytes, rounded",
    [(1, 512), (511, 512), (512, 512), (513, 1024), (1000, 1024), (400_000_000, 400_000_000)],
)
def test_round_size(nbytes, rounded):
    assert round_size(nbytes) == rounded


@pytest.mark.parametrize(
    "size, segment",
    [
        (512, 2 * MiB),
        (MiB, 2 * MiB),  # 1 MiB is still small
        (MiB + 512, 20 * MiB),  # large, under 10 MiB
        (10 * MiB - 512, 20 * MiB),
        (10 * MiB, 10 * MiB),  # >= 10 MiB: rounded up to 2 MiB
        (11 * MiB, 12 * MiB),
        (400_000_000, 400_556_032),  # 2 MiB * ceil(190.73) = 2,097,152 * 191
    ],
)
def test_segment_size(size, segment):
    assert segment_size(size) == segment


# ---------------------------------------------------------------------------------------------
# the caching model: a table of hand-checked sequences

# A step is ("malloc", name, nbytes), ("free", name) or ("empty_cache",).
CASES = [
    pytest.param(
        # round_size(400,000,000) = 400,000,000 (781,250 * 512); >= 10 MiB so the segment is
        # 2 MiB * 191 = 400,556,032; remainder 556,032 <= 1 MiB is not split: block = segment.
        [("malloc", "x", 400_000_000)],
        dict(allocated=400_556_032, reserved=400_556_032, segments=1, sizes={"x": 400_556_032}),
        id="seed-anchor-randn-10000x10000",
    ),
    pytest.param(
        # 1000 -> 1024 each; one 2 MiB small segment, each request splits the free tail
        # (remainders 2,096,128 then 2,095,104 then 2,094,080, all >= 512).
        [("malloc", "a", 1000), ("malloc", "b", 1000), ("malloc", "c", 1000)],
        dict(allocated=3072, reserved=2 * MiB, segments=1, sizes={"a": 1024, "b": 1024, "c": 1024}),
        id="small-pool-three-requests-share-a-segment",
    ),
    pytest.param(
        # 1 MiB is small: 2 MiB segment split into 1 MiB + 1 MiB; the second takes the tail whole.
        [("malloc", "a", MiB), ("malloc", "b", MiB)],
        dict(allocated=2 * MiB, reserved=2 * MiB, segments=1, sizes={"a": MiB, "b": MiB}),
        id="small-pool-1MiB-exactly",
    ),
    pytest.param(
        # 5 MiB is large and < 10 MiB: 20 MiB segment, remainder 15 MiB > 1 MiB is split off;
        # the second 5 MiB best-fits the 15 MiB tail and splits it (10 MiB stays free).
        [("malloc", "a", 5 * MiB), ("malloc", "b", 5 * MiB)],
        dict(allocated=10 * MiB, reserved=20 * MiB, segments=1, sizes={"a": 5 * MiB, "b": 5 * MiB}),
        id="large-1-to-10MiB-gets-20MiB-segment-then-splits",
    ),
    pytest.param(
        # 1 MiB + 1 -> 1,049,088 (large): 20 MiB segment, remainder 19,922,432 split off.
        [("malloc", "a", MiB + 1)],
        dict(allocated=1_049_088, reserved=20 * MiB, segments=1, sizes={"a": 1_049_088}),
        id="just-over-1MiB-is-large",
    ),
    pytest.param(
        # 19.5 MiB = 20,447,232 -> segment 2 MiB * ceil(9.75) = 20 MiB; remainder 512 KiB
        # <= 1 MiB stays in the block, which counts the whole segment as allocated.
        [("malloc", "a", 20_447_232)],
        dict(allocated=20 * MiB, reserved=20 * MiB, segments=1, sizes={"a": 20 * MiB}),
        id="large-remainder-under-1MiB-not-split",
    ),
    pytest.param(
        # 19 MiB -> 20 MiB segment; remainder exactly 1 MiB: not > 1 MiB, so not split.
        [("malloc", "a", 19 * MiB)],
        dict(allocated=20 * MiB, reserved=20 * MiB, segments=1, sizes={"a": 20 * MiB}),
        id="large-remainder-exactly-1MiB-not-split",
    ),
    pytest.param(
        # the freed 400,556,032 block is cached and best-fits the same request: no new segment.
        [("malloc", "x", 400_000_000), ("free", "x"), ("malloc", "y", 400_000_000)],
        dict(allocated=400_556_032, reserved=400_556_032, segments=1, sizes={"y": 400_556_032}),
        id="reuse-freed-cached-block",
    ),
    pytest.param(
        # 100 MiB best-fits the cached 400,556,032 block (max_split_size is unlimited by
        # default, so no oversize rule) and splits it: remainder 295,698,432 > 1 MiB.
        [("malloc", "x", 400_000_000), ("free", "x"), ("malloc", "y", 100 * MiB)],
        dict(allocated=100 * MiB, reserved=400_556_032, segments=1, sizes={"y": 100 * MiB}),
        id="smaller-large-request-splits-big-cached-block",
    ),
    pytest.param(
        # the cached 20 MiB block is in the large pool: a 1000-byte request needs a new 2 MiB
        # small segment. Reserved 20 MiB + 2 MiB.
        [("malloc", "a", 5 * MiB), ("free", "a"), ("malloc", "s", 1000)],
        dict(allocated=1024, reserved=22 * MiB, segments=2, sizes={"s": 1024}),
        id="small-request-never-takes-large-pool-block",
    ),
    pytest.param(
        # a, b, c = 5 MiB each from one 20 MiB segment (5 MiB tail free). Freeing a then b
        # merges them into one free 10 MiB block at the segment start; a 10 MiB request fits it
        # exactly (the 5 MiB tail is too small), so no new segment and no split.
        [
            ("malloc", "a", 5 * MiB),
            ("malloc", "b", 5 * MiB),
            ("malloc", "c", 5 * MiB),
            ("free", "a"),
            ("free", "b"),
            ("malloc", "d", 10 * MiB),
        ],
        dict(
            allocated=15 * MiB, reserved=20 * MiB, segments=1, sizes={"c": 5 * MiB, "d": 10 * MiB}
        ),
        id="free-merges-neighbours-and-bigger-request-fits",
    ),
    pytest.param(
        # freeing reserves nothing back: the 2 MiB segment stays cached.
        [("malloc", "a", 1000), ("free", "a")],
        dict(allocated=0, reserved=2 * MiB, segments=1, sizes={}),
        id="reserved-unchanged-after-free",
    ),
    pytest.param(
        # S1 (2 MiB, small) is fully free after free(a); L1 (20 MiB) still holds c.
        # empty_cache releases S1 only: reserved 22 MiB -> 20 MiB.
        [
            ("malloc", "a", 1000),
            ("malloc", "b", 5 * MiB),
            ("malloc", "c", 5 * MiB),
            ("free", "a"),
            ("free", "b"),
            ("empty_cache",),
        ],
        dict(allocated=5 * MiB, reserved=20 * MiB, segments=1, sizes={"c": 5 * MiB}),
        id="empty-cache-releases-only-fully-free-segments",
    ),
    pytest.param(
        # everything freed merges back into whole segments; empty_cache releases them all.
        [
            ("malloc", "a", 1000),
            ("malloc", "b", 5 * MiB),
            ("malloc", "c", 5 * MiB),
            ("free", "c"),
            ("free", "a"),
            ("free", "b"),
            ("empty_cache",),
        ],
        dict(allocated=0, reserved=0, segments=0, sizes={}),
        id="empty-cache-after-freeing-everything",
    ),
]


def run_steps(model, steps):
    blocks = {}
    for step in steps:
        if step[0] == "malloc":
            blocks[step[1]] = model.malloc(step[2])
        elif step[0] == "free":
            model.free(blocks.pop(step[1]))
        else:
            model.empty_cache()
    return blocks


@pytest.mark.parametrize("steps, expected", CASES)
def test_caching_model_sequences(steps, expected):
    # given a caching model, when the steps run
    model = CachingModel("cuda")
    blocks = run_steps(model, steps)
    # then allocated/reserved/segments and the block sizes are the hand-computed ones
    assert model.allocated_bytes == expected["allocated"]
    assert model.reserved_bytes == expected["reserved"]
    assert len(model.segments()) == expected["segments"]
    assert {name: b.size for name, b in blocks.items()} == expected["sizes"]
    assert_consistent(model)


def test_reused_block_is_at_the_freed_address_and_no_segment_is_added():
    # given a freed 400 MB block
    model = CachingModel("cuda")
    first = model.malloc(400_000_000)
    address = first.address
    model.free(first)
    # when the same size is asked again
    second = model.malloc(400_000_000)
    # then it is the cached block: same address, one device allocation ever
    assert second.address == address
    assert model.memory_stats()["num_device_alloc"] == 1
    assert model.memory_stats()["segment.all.current"] == 1


def test_merged_block_starts_at_the_first_freed_neighbour():
    # given a, b, c of 5 MiB in one segment, with a and b freed (merged)
    model = CachingModel("cuda")
    a, b, _c = (model.malloc(5 * MiB) for _ in range(3))
    model.free(a)
    model.free(b)
    # when 10 MiB is asked, then it takes the merged block at a's address
    assert model.malloc(10 * MiB).address == a.address
    assert model.memory_stats()["num_device_alloc"] == 1


def test_small_blocks_are_laid_out_back_to_back_in_the_snapshot():
    # given three 1000-byte allocations with the middle one freed
    model = CachingModel("cuda:0")
    a, b, c = (model.malloc(1000) for _ in range(3))
    model.free(b)
    # when the snapshot is taken
    (segment,) = model.segments()
    # then one 2 MiB small segment holds a, a free 1024 hole, c and the free tail
    assert segment["segment_type"] == "small"
    assert segment["device"] == 0
    assert segment["address"] == a.address
    assert segment["total_size"] == 2 * MiB
    assert segment["allocated_size"] == segment["active_size"] == 2048
    assert segment["requested_size"] == 2000
    states = [(blk["address"] - a.address, blk["size"], blk["state"]) for blk in segment["blocks"]]
    assert states == [
        (0, 1024, "active_allocated"),
        (1024, 1024, "inactive"),
        (2048, 1024, "active_allocated"),
        (3072, 2 * MiB - 3072, "inactive"),  # 2,094,080
    ]
    assert c.address == a.address + 2048


def test_segments_get_increasing_addresses():
    model = CachingModel("cuda")
    model.malloc(5 * MiB)
    model.malloc(1000)
    model.malloc(100 * MiB)
    addresses = [s["address"] for s in model.segments()]
    assert addresses == sorted(addresses) and len(set(addresses)) == 3


# ---------------------------------------------------------------------------------------------
# limits and out-of-memory


def stats_without_oom_counters(model):
    stats = model.memory_stats()
    del stats["num_ooms"], stats["num_alloc_retries"]
    return stats


def test_caching_oom_changes_nothing_but_the_oom_counters():
    # given a 30 MiB limit and a 5 MiB block (20 MiB segment, 15 MiB free tail)
    model = CachingModel("cpu", limit=30 * MiB)
    model.malloc(5 * MiB)
    before, segments = stats_without_oom_counters(model), model.segments()
    # when 16 MiB is asked: the tail is too small, a new 16 MiB segment would make 36 MiB
    with pytest.raises(OutOfMemoryError) as info:
        model.malloc(16 * MiB)
    # then only num_ooms and num_alloc_retries moved (PyTorch retries once before giving up)
    assert stats_without_oom_counters(model) == before
    assert model.segments() == segments
    assert model.memory_stats()["num_ooms"] == 1
    assert model.memory_stats()["num_alloc_retries"] == 1
    assert info.value.device == "cpu"
    assert info.value.requested == 16 * MiB
    assert str(info.value) == (
        "cpu out of memory. Tried to allocate 16.00 MiB. Device cpu has a total capacity of "
        "30.00 MiB (memory limit) of which 10.00 MiB is free. Of the allocated memory 5.00 MiB "
        "is allocated by the engine, and 15.00 MiB is reserved but unallocated."
    )


def test_caching_retry_releases_cached_segments_and_succeeds():
    # given a 30 MiB limit with a cached 2 MiB small and a cached 20 MiB large segment
    model = CachingModel("cpu", limit=30 * MiB)
    model.free(model.malloc(1000))
    model.free(model.malloc(5 * MiB))
    assert model.reserved_bytes == 22 * MiB
    # when 22 MiB is asked: the 20 MiB block is too small and 22 + 22 > 30 MiB
    block = model.malloc(22 * MiB)
    # then both cached segments were released, the retry counted, and no OOM
    assert block.size == 22 * MiB
    assert model.reserved_bytes == model.allocated_bytes == 22 * MiB
    stats = model.memory_stats()
    assert stats["num_alloc_retries"] == 1
    assert stats["num_ooms"] == 0
    assert stats["num_device_free"] == 2
    assert stats["num_sync_all_streams"] == 1
    assert len(model.segments()) == 1


def test_caching_retry_that_cannot_fit_keeps_the_cache():
    # given a 30 MiB limit, a live 5 MiB block (20 MiB segment) and a cached 2 MiB segment
    model = CachingModel("cpu", limit=30 * MiB)
    model.malloc(5 * MiB)
    model.free(model.malloc(1000))
    # when 16 MiB is asked: even without the cached 2 MiB, 20 + 16 > 30 MiB
    with pytest.raises(OutOfMemoryError):
        model.malloc(16 * MiB)
    # then nothing was released
    assert model.reserved_bytes == 22 * MiB
    assert len(model.segments()) == 2
    assert model.memory_stats()["num_alloc_retries"] == 1


def test_cuda_oom_message_names_the_segment_size_like_pytorch():
    # given a full 2 MiB limit on cuda:1 (one small segment holding two 1 MiB blocks)
    model = CachingModel("cuda:1", limit=2 * MiB)
    model.malloc(MiB)
    model.malloc(MiB)
    # when 1000 bytes are asked, then PyTorch's message reports the 2 MiB segment it tried
    with pytest.raises(OutOfMemoryError) as info:
        model.malloc(1000)
    assert str(info.value) == (
        "CUDA out of memory. Tried to allocate 2.00 MiB. GPU 1 has a total capacity of "
        "2.00 MiB of which 0 bytes is free. Of the allocated memory 2.00 MiB is allocated by "
        "memprof's engine, and 0 bytes is reserved by memprof's engine but unallocated."
    )
    assert info.value.requested == 1000


def test_exact_oom_message_and_counters():
    # given an exact model with 1 GiB limit and 988 MiB allocated
    model = ExactModel("cpu", limit=GiB)
    model.malloc(988 * MiB)
    before = stats_without_oom_counters(model)
    # when 2 GiB is asked
    with pytest.raises(OutOfMemoryError) as info:
        model.malloc(2 * GiB)
    # then the message has PyTorch's shape (whose format_size prints exactly 1 GiB as
    # "1024.00 MiB") and only num_ooms moved
    assert str(info.value) == (
        "cpu out of memory. Tried to allocate 2.00 GiB. Device cpu has a total capacity of "
        "1024.00 MiB (memory limit) of which 36.00 MiB is free. Of the allocated memory "
        "988.00 MiB is allocated by the engine, and 0 bytes is reserved but unallocated."
    )
    assert stats_without_oom_counters(model) == before
    assert model.memory_stats()["num_ooms"] == 1
    assert model.memory_stats()["num_alloc_retries"] == 0


def test_exact_limit_is_inclusive():
    # given a 1000-byte limit, then exactly 1000 bytes fit and one more byte does not
    model = ExactModel("meta", limit=1000)
    model.malloc(600)
    model.malloc(400)
    with pytest.raises(
        OutOfMemoryError, match=r"^meta out of memory\. Tried to allocate 1 bytes\."
    ):
        model.malloc(1)


def test_set_limit_none_lifts_the_limit_and_bad_limits_are_refused():
    model = make_model("caching", "cuda", limit=MiB)
    with pytest.raises(OutOfMemoryError):
        model.malloc(1000)  # needs a 2 MiB segment
    model.set_limit(None)
    assert model.malloc(1000).size == 1024
    with pytest.raises(ValueError, match="-1"):
        model.set_limit(-1)


# ---------------------------------------------------------------------------------------------
# peaks and memory_stats


def test_reset_peak_stats_sets_every_peak_to_current():
    # given a 400 MB peak, then a free and a small allocation
    model = CachingModel("cuda")
    model.free(model.malloc(400_000_000))
    model.malloc(1000)
    assert model.max_allocated_bytes == 400_556_032
    # when the peaks are reset
    model.reset_peak_stats()
    # then every peak equals its current value
    assert model.max_allocated_bytes == model.allocated_bytes == 1024
    assert model.max_reserved_bytes == model.reserved_bytes == 400_556_032 + 2 * MiB
    stats = model.memory_stats()
    for key, value in stats.items():
        if key.endswith(".peak"):
            assert value == stats[key[: -len("peak")] + "current"], key


def test_memory_stats_has_torch_keys():
    # given either model, then memory_stats has every key torch.cuda.memory_stats() has
    expected = {
        f"{stat}.{scope}.{field}"
        for stat in STAT_NAMES
        for scope in POOL_SCOPES
        for field in ("current", "peak", "allocated", "freed")
    } | {"num_alloc_retries", "num_ooms"}
    assert len(expected) == 9 * 3 * 4 + 2
    for name in ("exact", "caching"):
        stats = make_model(name, "cuda").memory_stats()
        assert expected <= set(stats)
        assert list(stats) == sorted(stats)  # torch returns them sorted
        assert all(isinstance(v, int) for v in stats.values())


def test_caching_memory_stats_values():
    # given: a = 1000 bytes (small segment split: 1024 + 2,096,128 free tail),
    #        b = 5 MiB (20 MiB segment split: 5 MiB + 15 MiB free tail), then free(a), which
    #        merges a back with its tail into one whole free 2 MiB block (no longer split)
    model = CachingModel("cuda")
    a = model.malloc(1000)
    model.malloc(5 * MiB)
    model.free(a)
    # when the stats are read
    s = model.memory_stats()
    # then
    expected = {
        "allocated_bytes.all.current": 5 * MiB,
        "allocated_bytes.all.peak": 1024 + 5 * MiB,  # 5,243,904
        "allocated_bytes.all.allocated": 1024 + 5 * MiB,
        "allocated_bytes.all.freed": 1024,
        "allocated_bytes.small_pool.current": 0,
        "allocated_bytes.small_pool.peak": 1024,
        "allocated_bytes.large_pool.current": 5 * MiB,
        "requested_bytes.all.current": 5 * MiB,
        "requested_bytes.all.peak": 1000 + 5 * MiB,
        "requested_bytes.all.freed": 1000,
        "active_bytes.all.current": 5 * MiB,
        "active_bytes.all.peak": 1024 + 5 * MiB,
        "allocation.all.current": 1,
        "allocation.all.peak": 2,
        "allocation.all.allocated": 2,
        "allocation.all.freed": 1,
        "active.all.current": 1,
        "reserved_bytes.all.current": 22 * MiB,  # 2 MiB + 20 MiB
        "reserved_bytes.small_pool.current": 2 * MiB,
        "reserved_bytes.large_pool.current": 20 * MiB,
        "reserved_bytes.all.freed": 0,
        "segment.all.current": 2,
        "segment.small_pool.current": 1,
        "inactive_split.small_pool.current": 0,
        "inactive_split.small_pool.peak": 1,
        "inactive_split.small_pool.freed": 1,
        "inactive_split_bytes.small_pool.allocated": 2 * MiB - 1024,  # 2,096,128
        "inactive_split_bytes.small_pool.freed": 2 * MiB - 1024,
        "inactive_split.large_pool.current": 1,
        "inactive_split_bytes.large_pool.current": 15 * MiB,
        "inactive_split.all.current": 1,
        "inactive_split.all.peak": 2,
        "inactive_split_bytes.all.peak": 2 * MiB - 1024 + 15 * MiB,  # 17,824,768
        "num_alloc_retries": 0,
        "num_ooms": 0,
        "num_device_alloc": 2,
    }
    assert {key: s[key] for key in expected} == expected


def test_stats_of_all_pools_are_the_sum_of_both_pools():
    model = CachingModel("cuda")
    blocks = [model.malloc(n) for n in (1000, 5 * MiB, 3000, 30 * MiB, 600 * KiB)]
    for b in blocks[::2]:
        model.free(b)
    s = model.memory_stats()
    for stat in STAT_NAMES:
        for field in ("current", "allocated", "freed"):
            both = s[f"{stat}.small_pool.{field}"] + s[f"{stat}.large_pool.{field}"]
            assert s[f"{stat}.all.{field}"] == both, (stat, field)


# ---------------------------------------------------------------------------------------------
# the exact model


def test_exact_model_accounts_exact_bytes():
    # given an exact model, when 1000 bytes and 2 MiB are allocated
    model = make_model("exact", "cpu")
    small, large = model.malloc(1000), model.malloc(2 * MiB)
    # then each accounts exactly its bytes, and reserved == allocated
    assert (small.size, small.requested, small.pool) == (1000, 1000, "small")
    assert (large.size, large.pool) == (2 * MiB, "large")
    assert model.allocated_bytes == model.reserved_bytes == model.requested_bytes == 1000 + 2 * MiB
    assert [s["total_size"] for s in model.segments()] == [1000, 2 * MiB]
    # when one is freed, then its segment goes with it
    model.free(large)
    assert model.allocated_bytes == model.reserved_bytes == 1000
    assert model.max_allocated_bytes == model.max_reserved_bytes == 1000 + 2 * MiB
    assert len(model.segments()) == 1
    s = model.memory_stats()
    assert s["segment.all.current"] == s["allocation.all.current"] == 1
    assert s["allocation.all.allocated"] == 2 and s["allocation.all.freed"] == 1
    assert s["allocation.large_pool.freed"] == 1
    assert s["reserved_bytes.all.peak"] == 1000 + 2 * MiB
    assert s["inactive_split.all.peak"] == 0
    assert s["num_device_alloc"] == 2 and s["num_device_free"] == 1


@pytest.mark.parametrize("nbytes, pool", [(1, "small"), (MiB, "small"), (MiB + 1, "large")])
def test_exact_model_pool_boundary(nbytes, pool):
    assert ExactModel().malloc(nbytes).pool == pool


def _workload(seed: int, steps: int = 300) -> list[tuple[str, int]]:
    """A seeded mix of ("alloc", bytes) and ("free", index into the live list) steps."""
    rng = random.Random(seed)
    steps_out, live = [], 0
    for _ in range(steps):
        if rng.random() < 0.55 or not live:
            n = rng.choice([0, rng.randint(1, 4 * KiB), rng.randint(1, 2 * MiB), 3 * MiB])
            steps_out.append(("alloc", n))
            live += 1
        else:
            steps_out.append(("free", rng.randrange(live)))
            live -= 1
    return steps_out


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_exact_charge_is_malloc_without_the_block(seed):
    # given two exact models, one driven by malloc/free and one by charge/uncharge (the storage
    # layer's path, whose handle is the block's address)
    by_block, by_handle = ExactModel("cpu"), ExactModel("cpu")
    blocks, handles = [], []
    # when both see the same workload
    for action, arg in _workload(seed):
        if action == "alloc":
            blocks.append(by_block.malloc(arg))
            handles.append(by_handle.charge(arg))
            assert handles[-1] == blocks[-1].address
            assert by_handle.handle_sizes(handles[-1]) == (arg, arg)
        else:
            by_block.free(blocks.pop(arg))
            by_handle.uncharge(handles.pop(arg))
        # then their statistics and snapshots agree at every step
        assert by_handle.memory_stats() == by_block.memory_stats()
        assert by_handle.segments() == by_block.segments()
        assert_consistent(by_handle)


def test_exact_uncharge_twice_is_refused_and_zero_bytes_is_a_no_op():
    model = ExactModel("cpu")
    handle = model.charge(4096)
    model.uncharge(handle)
    with pytest.raises(ValueError, match="not allocated"):
        model.uncharge(handle)
    before = model.memory_stats()
    model.uncharge(model.charge(0))
    assert model.memory_stats() == before


def test_exact_all_pools_peak_is_the_highest_total_not_the_sum_of_pool_peaks():
    # given a 2 MiB block (large pool) freed before three 1000-byte blocks (small pool)
    model = ExactModel("cpu")
    model.free(model.malloc(2 * MiB))
    small = [model.malloc(1000) for _ in range(3)]
    s = model.memory_stats()
    # then each pool's peak is its own, and the all-pools peaks are the highest totals
    assert s["allocated_bytes.large_pool.peak"] == 2 * MiB
    assert s["allocated_bytes.small_pool.peak"] == 3000
    assert s["allocated_bytes.all.peak"] == model.max_allocated_bytes == 2 * MiB
    assert s["allocation.all.peak"] == s["allocation.small_pool.peak"] == 3
    assert s["allocation.large_pool.peak"] == 1
    # and the all-pools counters are the sums of the pools'
    for stat in STAT_NAMES:
        for field in ("current", "allocated", "freed"):
            both = s[f"{stat}.small_pool.{field}"] + s[f"{stat}.large_pool.{field}"]
            assert s[f"{stat}.all.{field}"] == both, (stat, field)
    for block in small:
        model.free(block)


def test_exact_reset_peak_stats_brings_every_peak_to_its_current_value():
    model = ExactModel("cpu")
    big, small = model.malloc(2 * MiB), model.malloc(1000)
    model.free(big)
    model.reset_peak_stats()
    assert model.max_allocated_bytes == model.max_reserved_bytes == 1000
    s = model.memory_stats()
    for key, value in s.items():
        if key.endswith(".peak"):
            assert value == s[key[: -len("peak")] + "current"], key
    model.free(small)


@pytest.mark.parametrize("name", ["exact", "caching"])
def test_zero_byte_request_allocates_nothing(name):
    # given a model, when 0 bytes are asked, then the block is empty and no counter moves
    model = make_model(name, "cuda", limit=0)
    before = model.memory_stats()
    block = model.malloc(0)
    assert isinstance(block, Block) and block.size == 0 and block.requested == 0
    model.free(block)
    assert model.memory_stats() == before


@pytest.mark.parametrize("name", ["exact", "caching"])
@pytest.mark.parametrize("nbytes", [1000, 5 * MiB, 400_000_000])
def test_a_freed_handle_keeps_its_fields_and_is_never_handed_out_again(name, nbytes):
    # given neighbours on both sides, so a caching free merges (the allocator reads
    # block.size and block.requested after free to report the event)
    model = make_model(name, "cuda")
    before, block, after = model.malloc(nbytes), model.malloc(nbytes), model.malloc(nbytes)
    model.free(before)
    fields = (block.size, block.requested, block.pool, block.address)
    # when the middle block is freed (merging with the free one before it)
    model.free(block)
    # then its fields are unchanged, and a new allocation gets a new handle
    assert (block.size, block.requested, block.pool, block.address) == fields
    again = model.malloc(nbytes)
    assert again is not block and again is not before
    model.free(after)
    assert (block.size, block.requested) == fields[:2]
    assert_consistent(model)


@pytest.mark.parametrize("name", ["exact", "caching"])
def test_double_free_is_refused(name):
    model = make_model(name, "cpu")
    block = model.malloc(4096)
    model.free(block)
    with pytest.raises(ValueError, match="not allocated"):
        model.free(block)


@pytest.mark.parametrize("name", ["exact", "caching"])
def test_negative_request_is_refused(name):
    with pytest.raises(ValueError, match="negative"):
        make_model(name, "cpu").malloc(-1)


def test_make_model_names_the_bad_value_and_the_choices():
    assert make_model("exact", "cpu").name == "exact"
    assert make_model("caching", "cuda", limit=GiB).limit == GiB
    with pytest.raises(ValueError, match=r"'pytorch'.*'caching', 'exact'"):
        make_model("pytorch", "cpu")


# ---------------------------------------------------------------------------------------------
# invariants under a random workload


def assert_consistent(model):
    """Counters agree with the blocks: what a snapshot shows is what the stats say."""
    segments = model.segments()
    assert model.reserved_bytes == sum(s["total_size"] for s in segments)
    assert model.allocated_bytes == sum(s["allocated_size"] for s in segments)
    assert model.requested_bytes == sum(s["requested_size"] for s in segments)
    for s in segments:
        blocks = s["blocks"]
        assert sum(b["size"] for b in blocks) == s["total_size"]
        assert blocks[0]["address"] == s["address"]
        for left, right in pairwise(blocks):
            assert left["address"] + left["size"] == right["address"]
            # merged on free: never two free neighbours
            assert "active_allocated" in (left["state"], right["state"])
    if isinstance(model, CachingModel):
        inactive_split = [
            b
            for s in segments
            if len(s["blocks"]) > 1
            for b in s["blocks"]
            if b["state"] == "inactive"
        ]
        stats = model.memory_stats()
        assert stats["inactive_split.all.current"] == len(inactive_split)
        assert stats["inactive_split_bytes.all.current"] == sum(b["size"] for b in inactive_split)
        assert stats["segment.all.current"] == len(segments)
        # the cached free lists (best fit searches them) hold exactly the inactive blocks
        for pool, free_list in (("small", model._free_small), ("large", model._free_large)):
            cached = [
                (b["size"], b["address"])
                for s in segments
                if s["segment_type"] == pool
                for b in s["blocks"]
                if b["state"] == "inactive"
            ]
            assert [(size, address) for size, address, _ in free_list] == sorted(cached)


@pytest.mark.parametrize("name", ["exact", "caching"])
def test_random_workload_keeps_counters_consistent(name):
    # given a model and a seeded random mix of small and large allocations, frees and cache
    # empties, then after every step the counters agree with the snapshot
    rng = random.Random(4)
    model = make_model(name, "cuda")
    live = []
    peak = 0
    # every stat's peak, in every scope, is the highest current seen since the last reset
    # (the all-pools peaks are kept apart from the pools' sums: they must not be those sums)
    currents = [k for k in model.memory_stats() if k.endswith(".current")]
    highest: dict = {}
    for step in range(400):
        roll = rng.random()
        if roll < 0.55 or not live:
            n = rng.choice(
                [rng.randint(1, 4 * KiB), rng.randint(1, 2 * MiB), rng.randint(1, 40 * MiB)]
            )
            live.append(model.malloc(n))
        elif roll < 0.97:
            model.free(live.pop(rng.randrange(len(live))))
        else:
            model.empty_cache()
        if step == 200:
            model.reset_peak_stats()
            highest.clear()
            peak = model.allocated_bytes
        peak = max(peak, model.allocated_bytes)
        stats = model.memory_stats()
        for key in currents:
            highest[key] = max(highest.get(key, 0), stats[key])
        assert_consistent(model)
    assert model.max_allocated_bytes == peak
    stats = model.memory_stats()
    for key in currents:
        assert stats[key[: -len("current")] + "peak"] == highest[key], key
    for block in live:
        model.free(block)
    model.empty_cache()
    assert model.allocated_bytes == model.reserved_bytes == model.requested_bytes == 0
    assert model.segments() == []


def test_the_caching_model_rounds_with_round_size(monkeypatch):
    """round_size is the code malloc runs (no inlined twin that the tests above would miss)."""
    from engine.allocator.models import caching

    calls = []

    def spy(nbytes):
        calls.append(nbytes)
        return round_size(nbytes)

    monkeypatch.setattr(caching, "round_size", spy)
    model = CachingModel("cuda")
    block = model.malloc(1000)
    assert calls == [1000] and block.size == 1024
