"""Devices: "cpu" (numpy), "cuda"/"gpu" (CuPy, imported lazily) and "meta" (shapes only)."""

from __future__ import annotations

import functools

_TYPES = ("cpu", "cuda", "meta")


class device:  # noqa: N801 - PyTorch's spelling
    __slots__ = ("type", "index", "_allocator")

    def __init__(self, spec="cpu", index: int | None = None):
        self._allocator = None  # this device's TrackedAllocator, looked up on first allocation
        if isinstance(spec, device):
            self.type, self.index = spec.type, spec.index
            return
        if not isinstance(spec, str):
            raise TypeError(
                f"device must be a string such as 'cpu', 'cuda' or 'meta', got {spec!r}"
            )
        text = spec.strip().lower()
        if ":" in text:
            text, _, idx = text.partition(":")
            if not idx.isdigit():
                raise ValueError(
                    f"invalid device string {spec!r}: the index after ':' must be a number"
                )
            index = int(idx)
        if text == "gpu":
            text = "cuda"
        if text not in _TYPES:
            raise ValueError(
                f"unknown device {spec!r}: expected one of cpu, cuda (alias gpu), meta"
            )
        if text == "cuda" and index is None:
            index = 0
        self.type, self.index = text, index

    def __eq__(self, other) -> bool:
        if isinstance(other, str):
            other = device(other)
        return isinstance(other, device) and (self.type, self.index) == (other.type, other.index)

    def __hash__(self) -> int:
        return hash((self.type, self.index))

    def __reduce__(self):  # copies and pickles carry the name, not the cached allocator
        return (device, (str(self),))

    def __str__(self) -> str:
        return self.type if self.index is None else f"{self.type}:{self.index}"

    def __repr__(self) -> str:
        return (
            f"device(type='{self.type}'"
            + ("" if self.index is None else f", index={self.index}")
            + ")"
        )


CPU = device("cpu")
META = device("meta")


@functools.cache
def _parse_cached(spec: str) -> device:
    return device(spec)


# The device factory functions use when given none (torch.set_default_device); None: cpu.
_default: device | None = None


def set_default_device(spec) -> None:
    """Make factory functions (empty, rand, zeros, ..., and module parameters) create tensors on
    `spec` when no device is given, as torch.set_default_device; None goes back to cpu."""
    global _default
    _default = None if spec is None else as_device(spec)


def get_default_device() -> device:
    return CPU if _default is None else _default


def as_device(spec) -> device:
    if spec is None:
        return CPU if _default is None else _default
    if isinstance(spec, device):
        return spec
    if isinstance(spec, str):
        return _parse_cached(spec)
    return device(spec)


def cuda_available() -> bool:
    """True when CuPy imports and sees at least one GPU. Never raises."""
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False


# `engine.device` names the class (as torch.device does), so the check is reachable from it too:
# engine.device.cuda_available()
device.cuda_available = staticmethod(cuda_available)
