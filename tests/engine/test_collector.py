"""engine.utils.collector.paused(): the cyclic collector is off inside and restored after,
and pausing it is safe because the engine's graphs leave no cyclic garbage (reference counting
frees everything, so memory figures are the same with or without the collector)."""

from __future__ import annotations

import gc

import pytest

import engine
from engine.utils.collector import paused


def test_paused_turns_the_collector_off_and_restores_it():
    assert gc.isenabled()
    with paused():
        assert not gc.isenabled()
        with paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()


def test_paused_restores_it_after_an_error_and_leaves_it_off_if_it_was():
    with pytest.raises(ValueError), paused():
        raise ValueError("boom")
    assert gc.isenabled()
    gc.disable()
    try:
        with paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


def _training_steps(device: str) -> None:
    model = engine.nn.Sequential(
        engine.nn.Linear(16, 32, device=device),
        engine.nn.GELU(),
        engine.nn.LayerNorm(32, device=device),
        engine.nn.Linear(32, 4, device=device),
    )
    opt = engine.optim.AdamW(model.parameters())
    for _ in range(2):
        x = engine.randn(8, 16, device=device)
        q = engine.nn.functional.scaled_dot_product_attention(
            x.view(2, 1, 4, 16), x.view(2, 1, 4, 16), x.view(2, 1, 4, 16)
        )
        loss = model(q.view(8, 16)).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad()


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_engine_graphs_leave_no_cyclic_garbage(device):
    gc.collect()
    with paused():
        before = engine.memory.memory_allocated(device)
        _training_steps(device)
        y = engine.randn(64, 64, device=device, requires_grad=True)
        for i in range(200):
            y = y * 1.01 if i % 2 else y + 1.0
        del y  # a graph dropped without backward
        after = engine.memory.memory_allocated(device)
        assert gc.collect() == 0  # nothing for the cyclic collector to find
    assert after == before  # and reference counting freed every byte
