"""Shared fixtures: a fresh engine state per test, the PyTorch oracle, and device parameters."""

from __future__ import annotations

import sys

import pytest


def pytest_configure(config):
    # The engine computes inf/nan silently, as PyTorch does (engine/__init__.py drops numpy's
    # RuntimeWarnings raised in engine modules); pytest's own warning capture would re-show them.
    config.addinivalue_line("filterwarnings", r"ignore::RuntimeWarning:engine\..*")


def _reset_engine() -> None:
    engine = sys.modules.get("engine")
    if engine is None:
        return
    from engine.allocator import tracked
    from engine.autograd.grad_mode import STATE

    STATE.enabled = True
    engine.set_default_dtype(engine.float32)
    engine.manual_seed(0)
    for alloc in tracked.all_allocators():
        alloc.reset()
        if alloc.model_name != "exact":
            alloc.set_model("exact")
        alloc.set_limit(None)


@pytest.fixture(autouse=True)
def fresh_engine():
    """Every test starts with zeroed allocator counters, the exact model, no limit, grad on."""
    _reset_engine()
    yield
    _reset_engine()


@pytest.fixture
def torch():
    """PyTorch as a test oracle; the test skips when it is not installed."""
    return pytest.importorskip("torch")


def _cuda_available() -> bool:
    try:
        from engine.device import cuda_available
    except ImportError:
        return False
    return cuda_available()


requires_cuda = pytest.mark.skipif(not _cuda_available(), reason="needs CuPy and a GPU")

# Devices that hold data (values can be compared) and every device (memory accounting).
DATA_DEVICES = ["cpu", pytest.param("cuda", marks=[pytest.mark.cuda, requires_cuda])]
ALL_DEVICES = ["cpu", "meta", pytest.param("cuda", marks=[pytest.mark.cuda, requires_cuda])]


def node_chain(fn) -> list[str]:
    """The names of the nodes from `fn` along each node's first input, up to the leaf's
    AccumulateGrad (engine and torch alike)."""
    names = []
    while fn is not None and "AccumulateGrad" not in fn.name():
        names.append(fn.name())
        fn = fn.next_functions[0][0] if fn.next_functions else None
    return names


def assert_raises_as_torch(call, kind=Exception) -> None:
    """call(m) raises `kind` on torch; on the engine it raises the same type, in the same words."""
    import torch

    import engine

    with pytest.raises(kind) as theirs:
        call(torch)
    with pytest.raises(type(theirs.value)) as ours:
        call(engine)
    assert str(ours.value) == str(theirs.value)
