"""memprof runs every variant (and every memprof.profile block) with Python's cyclic garbage
collector paused (engine/utils/collector.py: the engine's graphs hold no cycles), and gives the
collector back as it found it, also when the block raises."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest

import engine
import memprof
from memprof.runner.execute import run_variant
from memprof.scenario import load_scenario

ROOT = Path(__file__).resolve().parents[2]


def test_a_variant_runs_with_the_collector_paused_and_restores_it():
    [variant] = load_scenario(
        ROOT / "scenarios" / "relu.yaml", variants=["inplace"], device="meta"
    ).variants
    seen = []
    entry = run_variant(variant, on_node=lambda *a: seen.append(gc.isenabled()))
    assert entry["status"] == "ok" and seen and not any(seen)
    assert gc.isenabled()


def test_a_profile_block_runs_with_the_collector_paused_and_restores_it():
    with memprof.profile("gc", device="meta", save=False) as prof:
        inside = gc.isenabled()
        engine.randn(8, 8).relu()
    assert not inside and gc.isenabled() and prof.peak == 2 * 8 * 8 * 4  # randn and relu
    with pytest.raises(ValueError), memprof.profile("gc", device="meta", save=False):
        raise ValueError("boom")
    assert gc.isenabled()
