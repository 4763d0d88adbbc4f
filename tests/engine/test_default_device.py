"""engine.set_default_device: factory functions and module parameters without a device."""

import engine


def test_default_device_is_used_by_factories_and_modules_and_goes_back_to_cpu():
    assert engine.get_default_device() == engine.device("cpu")
    engine.set_default_device("meta")
    try:
        t = engine.rand(3)
        assert t.device == engine.device("meta")
        assert engine.nn.Linear(4, 2).weight.device == engine.device("meta")
        assert engine.zeros(2, device="cpu").device == engine.device("cpu")  # explicit wins
        assert engine.memory.memory_allocated("meta") == 12  # t, charged to meta
    finally:
        engine.set_default_device(None)
    assert engine.get_default_device() == engine.device("cpu")
    assert engine.empty(2).device == engine.device("cpu")
