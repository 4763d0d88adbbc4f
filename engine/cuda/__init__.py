"""torch.cuda's names for the engine: device queries through CuPy (imported lazily) and the
memory functions of engine/memory.py with the cuda device as their default.

>>> engine.cuda.reset_peak_memory_stats()
>>> loss = model(x).sum(); loss.backward()
>>> engine.cuda.max_memory_allocated()

Without a usable GPU these behave as PyTorch's do before CUDA is initialised: is_available()
is False, device_count() 0, manual_seed/empty_cache do nothing, memory_allocated() and the other
figures are 0 and memory_stats() is {}; what needs a device (current_device, synchronize,
get_device_name, get_device_properties, ...) raises. The memory functions also take device="meta"
(an engine extension: meta plans a GPU run), which reads the meta device's figures.
"""

from __future__ import annotations

import sys
import warnings
from dataclasses import dataclass

from engine import memory as _memory
from engine.device import as_device, cuda_available
from engine.device import device as _device_cls
from engine.errors import OutOfMemoryError

from . import memory  # noqa: F401 - engine.cuda.memory, as torch.cuda.memory

__all__ = [
    "OutOfMemoryError",
    "current_device",
    "device_count",
    "empty_cache",
    "get_device_capability",
    "get_device_name",
    "get_device_properties",
    "is_available",
    "is_initialized",
    "manual_seed",
    "manual_seed_all",
    "max_memory_allocated",
    "max_memory_reserved",
    "mem_get_info",
    "memory",
    "memory_allocated",
    "memory_reserved",
    "memory_snapshot",
    "memory_stats",
    "memory_summary",
    "reset_max_memory_allocated",
    "reset_peak_memory_stats",
    "set_device",
    "synchronize",
]


def is_available() -> bool:
    """True when CuPy imports and sees a GPU (engine.device.cuda_available). Never raises."""
    return cuda_available()


def is_initialized() -> bool:
    """True once CuPy has been imported and a GPU is there (torch: once CUDA is initialised)."""
    return "cupy" in sys.modules and cuda_available()


def device_count() -> int:
    """The number of GPUs CuPy sees; 0 without CuPy or a GPU (as torch's, never raises)."""
    try:
        import cupy

        return int(cupy.cuda.runtime.getDeviceCount())
    except Exception:
        return 0


def _cupy():
    """CuPy with a GPU there, or torch's _lazy_init errors: no CuPy is the engine's "not compiled
    with CUDA" (AssertionError, torch's words), CuPy without a GPU torch's RuntimeError."""
    try:
        import cupy
    except ImportError:
        raise AssertionError("Torch not compiled with CUDA enabled") from None
    if device_count() == 0:
        raise RuntimeError("No CUDA GPUs are available")
    return cupy


def _index(device, optional: bool = True) -> int:
    """torch.cuda._utils._get_device_index: None the current device, an int itself, a string
    or device its index (a cuda device; cuda without an index the current one)."""
    if device is None:
        return current_device()
    if isinstance(device, int) and not isinstance(device, bool):
        return device
    dev = as_device(device)
    if dev.type != "cuda":
        raise ValueError(f"Expected a cuda device, but got: {dev}")
    return current_device() if dev.index is None else dev.index


def current_device() -> int:
    return int(_cupy().cuda.runtime.getDevice())


def set_device(device) -> None:
    """Make `device` (an int, "cuda:N" or a device) CuPy's current device. A negative index does
    nothing, as torch's."""
    cupy = _cupy()
    index = _index(device)
    if index >= 0:
        cupy.cuda.runtime.setDevice(index)


def synchronize(device=None) -> None:
    """Wait for every kernel queued on the device (CuPy's device synchronize)."""
    cupy = _cupy()
    with cupy.cuda.Device(_index(device)):
        cupy.cuda.runtime.deviceSynchronize()


@dataclass(frozen=True)
class _CudaDeviceProperties:
    """torch.cuda.get_device_properties()'s fields that CuPy's cudaDeviceProp gives."""

    name: str
    major: int
    minor: int
    total_memory: int
    multi_processor_count: int
    L2_cache_size: int  # noqa: N815 - PyTorch's spelling

    def __repr__(self) -> str:
        return (
            f"_CudaDeviceProperties(name='{self.name}', major={self.major}, minor={self.minor}, "
            f"total_memory={self.total_memory // (1024 * 1024)}MB, "
            f"multi_processor_count={self.multi_processor_count}, "
            f"L2_cache_size={self.L2_cache_size // (1024 * 1024)}MB)"
        )


def get_device_properties(device=None) -> _CudaDeviceProperties:
    cupy = _cupy()
    index = _index(device)
    if index < 0 or index >= device_count():
        raise AssertionError("Invalid device id")
    props = cupy.cuda.runtime.getDeviceProperties(index)
    name = props["name"]
    return _CudaDeviceProperties(
        name=name.decode() if isinstance(name, bytes) else str(name),
        major=int(props["major"]),
        minor=int(props["minor"]),
        total_memory=int(props["totalGlobalMem"]),
        multi_processor_count=int(props["multiProcessorCount"]),
        L2_cache_size=int(props.get("l2CacheSize", 0)),
    )


def get_device_name(device=None) -> str:
    return get_device_properties(device).name


def get_device_capability(device=None) -> tuple[int, int]:
    props = get_device_properties(device)
    return props.major, props.minor


def mem_get_info(device=None) -> tuple[int, int]:
    """(free, total) bytes of the GPU as the driver reports them (cudaMemGetInfo)."""
    cupy = _cupy()
    with cupy.cuda.Device(_index(device)):
        free, total = cupy.cuda.runtime.memGetInfo()
    return int(free), int(total)


def manual_seed(seed) -> None:
    """Seed CuPy's generator of the current device; without a GPU nothing (torch queues it)."""
    seed = int(seed)
    if is_available():
        import cupy

        cupy.random.seed(seed)


def manual_seed_all(seed) -> None:
    """Seed CuPy's generator on every GPU; without a GPU nothing."""
    seed = int(seed)
    if is_available():
        import cupy

        for index in range(device_count()):
            with cupy.cuda.Device(index):
                cupy.random.seed(seed)


# --- memory: engine/memory.py with the cuda device as default ---------------------------------


def _mem_device(device) -> _device_cls | None:
    """The engine device the figures come from, or None where torch would find CUDA not
    initialised (a cuda device and no usable GPU: the engine cannot have allocated there)."""
    if device is not None and not isinstance(device, int):
        dev = as_device(device)
        if dev.type == "meta":
            return dev
        if dev.type != "cuda":
            raise ValueError(f"Expected a cuda device, but got: {dev}")
    if not is_available():
        return None
    return _device_cls("cuda", _index(device))


def memory_allocated(device=None) -> int:
    dev = _mem_device(device)
    return 0 if dev is None else _memory.memory_allocated(dev)


def max_memory_allocated(device=None) -> int:
    dev = _mem_device(device)
    return 0 if dev is None else _memory.max_memory_allocated(dev)


def memory_reserved(device=None) -> int:
    dev = _mem_device(device)
    return 0 if dev is None else _memory.memory_reserved(dev)


def max_memory_reserved(device=None) -> int:
    dev = _mem_device(device)
    return 0 if dev is None else _memory.max_memory_reserved(dev)


def memory_stats(device=None) -> dict:
    """PyTorch's flat keys; {} without a GPU, as torch's before CUDA is initialised."""
    dev = _mem_device(device)
    return {} if dev is None else _memory.memory_stats(dev)


def memory_summary(device=None, abbreviated: bool = False) -> str:
    dev = _mem_device(device)
    if dev is None:  # torch's memory_summary reads memory_stats(), {} there
        raise KeyError("allocated_bytes.all.current")
    return _memory.memory_summary(dev, abbreviated=abbreviated)


def memory_snapshot(device=None) -> list[dict]:
    dev = _mem_device(device)
    return [] if dev is None else _memory.memory_snapshot(dev)


def reset_peak_memory_stats(device=None) -> None:
    dev = _mem_device(device)
    if dev is not None:
        _memory.reset_peak_memory_stats(dev)


def reset_max_memory_allocated(device=None) -> None:
    """Deprecated in torch for reset_peak_memory_stats, which it calls (with torch's warning)."""
    warnings.warn(
        "torch.cuda.reset_max_memory_allocated now calls torch.cuda.reset_peak_memory_stats, "
        "which resets /all/ peak memory stats.",
        FutureWarning,
        stacklevel=2,
    )
    reset_peak_memory_stats(device)


def empty_cache() -> None:
    """Release the cached blocks of the current GPU (the caching model's and CuPy's pool);
    without a GPU nothing."""
    dev = _mem_device(None)
    if dev is not None:
        _memory.empty_cache(dev)
