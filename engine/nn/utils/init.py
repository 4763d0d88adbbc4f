"""torch.nn.utils.skip_init: build the module on the meta device (no storage, no init kernels)
and move it to an empty storage on the final device, as Module.to_empty does: one uninitialized
block per parameter and buffer, children first, then the module's own parameters, then its
buffers (torch's Module._apply order).
"""

from __future__ import annotations

import inspect

import engine
from engine.nn.modules.module import Module


def _to_empty(module: Module, device) -> Module:
    """Module.to_empty(device=...): every parameter's and buffer's data an empty_like on device."""
    for child in module.children():
        _to_empty(child, device)
    with engine.no_grad():
        for p in module._parameters.values():
            if p is not None:
                p.data = engine.empty_like(p.detach(), device=device)
        for name, b in list(module._buffers.items()):
            if b is not None:
                module._buffers[name] = engine.empty_like(b, device=device)
    return module


def skip_init(module_cls, *args, **kwargs):
    """module_cls(*args, **kwargs) with its parameters and buffers left uninitialized."""
    if not (isinstance(module_cls, type) and issubclass(module_cls, Module)):
        raise RuntimeError(f"Expected a Module; got {module_cls}")
    if "device" not in inspect.signature(module_cls).parameters:
        raise RuntimeError("Module must support a 'device' arg to skip initialization")

    final_device = kwargs.pop("device", "cpu")
    kwargs["device"] = "meta"
    return _to_empty(module_cls(*args, **kwargs), final_device)


__all__ = ["skip_init"]
