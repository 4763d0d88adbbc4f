"""Timeline reduction (memprof/reports/reduce.py) against brute force on random timelines."""

from __future__ import annotations

import numpy as np
import pytest

from memprof.reports.reduce import (
    TimelineArrays,
    _bucket_extremes,
    reduce_timeline,
    select_indices,
)

CATEGORIES = ["input", "parameter", "activation", "gradient", "temporary"]


def random_timeline(n: int, seed: int) -> dict[str, list]:
    """Allocs and frees of random sizes and categories, with consistent running totals."""
    rng = np.random.default_rng(seed)
    live: list[tuple[int, str]] = []
    rows: dict[str, list] = {
        k: []
        for k in (
            "action",
            "bytes",
            "allocated",
            "reserved",
            "category",
            "time_s",
            "node",
            "op",
            "tensor",
        )
    }
    allocated = reserved = 0
    for i in range(n):
        if live and rng.random() < 0.45:
            size, category = live.pop(int(rng.integers(len(live))))
            action, allocated = "free", allocated - size
        else:
            size = int(rng.integers(1, 64)) * 512
            category = CATEGORIES[int(rng.integers(len(CATEGORIES)))]
            live.append((size, category))
            action, allocated = "alloc", allocated + size
        reserved = max(reserved, allocated)
        for key, value in (
            ("action", action),
            ("bytes", size),
            ("allocated", allocated),
            ("reserved", reserved),
            ("category", category),
            ("time_s", i * 1e-3),
            ("node", f"n{i % 7}"),
            ("op", "op"),
            ("tensor", f"t{i}"),
        ):
            rows[key].append(value)
    return rows


@pytest.mark.parametrize("n", [1, 2, 10, 1000, 20_000])
@pytest.mark.parametrize("max_points", [3, 4, 10, 101, 2000])
def test_reduction_keeps_first_last_peak_and_fits(n, max_points):
    timeline = random_timeline(n, seed=n + max_points)
    arrays = TimelineArrays.from_columns(timeline)
    series = reduce_timeline(arrays, max_points=max_points)
    index = series["index"]
    allocated = timeline["allocated"]

    assert len(index) <= max_points
    assert index == sorted(set(index))
    assert index[0] == 0 and index[-1] == n - 1
    peak = int(np.argmax(allocated))
    assert peak in index
    assert series["peak"]["event_index"] == peak
    assert max(series["allocated"]) == max(allocated)
    assert series["reduced"] == (n > max_points)


@pytest.mark.parametrize("buckets", [1, 7, 100, 999])
def test_each_bucket_gives_its_lowest_and_highest_sample(buckets):
    timeline = random_timeline(10_000, seed=buckets)
    allocated = np.array(timeline["allocated"])
    reserved = np.array(timeline["reserved"])
    picked = set(_bucket_extremes((allocated, reserved), buckets).tolist())
    width = -(-len(allocated) // buckets)
    for lo in range(0, len(allocated), width):
        part = slice(lo, lo + width)
        for column in (allocated, reserved):
            assert lo + int(np.argmax(column[part])) in picked
            assert lo + int(np.argmin(column[part])) in picked


def test_a_reduced_series_is_an_envelope_of_the_events():
    timeline = random_timeline(20_000, seed=3)
    arrays = TimelineArrays.from_columns(timeline)
    series = reduce_timeline(arrays, max_points=500)
    allocated = timeline["allocated"]
    assert min(series["allocated"]) == min(allocated)
    assert max(series["allocated"]) == max(allocated)
    assert len(series["index"]) > 250  # the budget is used, not wasted on a few buckets


def test_category_stacks_match_a_replay():
    timeline = random_timeline(5_000, seed=7)
    arrays = TimelineArrays.from_columns(timeline)
    series = reduce_timeline(arrays, start=1000, end=4000, max_points=200)
    running = dict.fromkeys(CATEGORIES, 0)
    expected = {c: [] for c in CATEGORIES}
    kept = set(series["index"])
    for i in range(4001):
        size = timeline["bytes"][i]
        running[timeline["category"][i]] += size if timeline["action"][i] == "alloc" else -size
        if i in kept:
            for c in CATEGORIES:
                expected[c].append(running[c])
    assert {c: series["categories"][c] for c in CATEGORIES} == expected


def test_allocations_from_before_the_recording_are_untracked():
    timeline = {
        "action": ["alloc", "free"],
        "bytes": [100, 100],
        "allocated": [1100, 1000],
        "reserved": [2048, 2048],
        "category": ["activation", "activation"],
    }
    series = reduce_timeline(TimelineArrays.from_columns(timeline))
    assert series["categories"] == {"activation": [100, 0], "untracked": [1000, 1000]}


def test_columns_of_different_lengths_are_refused():
    with pytest.raises(ValueError, match="'bytes' has 1 entries, 'allocated' has 2"):
        TimelineArrays.from_columns({"allocated": [1, 2], "bytes": [1]})


@pytest.mark.parametrize("window", [(-1, 5), (5, 4), (0, 10)])
def test_windows_outside_the_timeline_are_refused(window):
    arrays = TimelineArrays.from_columns(random_timeline(10, seed=0))
    with pytest.raises(ValueError):
        select_indices(arrays, *window, 100)


def test_fewer_than_three_points_are_refused():
    arrays = TimelineArrays.from_columns(random_timeline(10, seed=0))
    with pytest.raises(ValueError, match="at least 3"):
        reduce_timeline(arrays, max_points=2)
