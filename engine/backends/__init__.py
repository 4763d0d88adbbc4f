"""Array backends. Op code is written once against `xp` (numpy, cupy, or engine.backends.meta).

`get_xp(device_type)` picks the module; CuPy is imported only when a cuda tensor is made.
"""

from __future__ import annotations

import numpy as np

from engine.backends import meta as _meta


def get_xp(device_type: str):
    if device_type == "cpu":
        return np
    if device_type == "meta":
        return _meta
    if device_type == "cuda":
        return cupy_module()
    raise ValueError(f"unknown device type {device_type!r}")


_cupy = None


def cupy_module():
    """Import CuPy on first use; a clear error when it or a GPU is missing."""
    global _cupy
    if _cupy is None:
        try:
            import cupy
        except ImportError as exc:
            raise RuntimeError(
                "device 'cuda' needs CuPy: install memprof with the cuda12 or cuda13 extra "
                "(pip install 'memprof[cuda12]')"
            ) from exc
        try:
            count = cupy.cuda.runtime.getDeviceCount()
        except Exception as exc:  # CUDARuntimeError when no driver/GPU
            raise RuntimeError(f"device 'cuda' is not available: {exc}") from exc
        if count == 0:
            raise RuntimeError("device 'cuda' is not available: no GPU found")
        _cupy = cupy
    return _cupy
