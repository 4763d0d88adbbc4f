"""CuPy memory hook: sees CuPy's own pool requests so reports can show its temporaries.

Storage allocations made by the engine happen inside `storage_allocation()`; every other pool
request seen by the hook while it is installed is CuPy's own (a temporary inside a kernel, a
reduction buffer ...) and is reported to observers with `on_external`.
"""

from __future__ import annotations

import contextlib
import threading

_local = threading.local()


@contextlib.contextmanager
def storage_allocation():
    _local.depth = getattr(_local, "depth", 0) + 1
    try:
        yield
    finally:
        _local.depth -= 1


def in_storage_allocation() -> bool:
    return getattr(_local, "depth", 0) > 0


def ensure_hook(allocator) -> None:
    """Install this thread's hook reporting to `allocator` (once per thread and allocator).

    CuPy's hooks are thread-local, so the first cuda storage made on a thread installs one;
    it stays installed for the life of the thread.
    """
    installed = getattr(_local, "hooks", None)
    if installed is None:
        installed = _local.hooks = {}
    if id(allocator) in installed:
        return
    hook = make_hook(allocator)
    hook.__enter__()
    installed[id(allocator)] = hook


def make_hook(allocator):
    """Build a cupy.cuda.MemoryHook subclass instance reporting to `allocator` (a TrackedAllocator)."""
    import cupy

    class EngineMemoryHook(cupy.cuda.MemoryHook):
        name = "memprof-engine"

        def __init__(self):
            super().__init__()
            self.name = f"memprof-engine-{allocator.device}"  # CuPy keys hooks by unique name
            self.external_bytes = 0
            self._external_ptrs: dict[int, int] = {}

        def malloc_postprocess(self, device_id, size, mem_size, mem_ptr, pmem_id):
            if in_storage_allocation():
                return
            self._external_ptrs[mem_ptr] = mem_size
            self.external_bytes += mem_size
            allocator.emit_external("alloc", mem_size)

        def free_postprocess(self, device_id, mem_size, mem_ptr, pmem_id):
            size = self._external_ptrs.pop(mem_ptr, None)
            if size is None:
                return
            self.external_bytes -= size
            allocator.emit_external("free", size)

    return EngineMemoryHook()


def pool_usage(device_index: int = 0) -> dict:
    """The real CuPy pool's used/total bytes, reported beside the model."""
    import cupy

    pool = cupy.get_default_memory_pool()
    with cupy.cuda.Device(device_index):
        return {
            "cupy_pool.used_bytes": int(pool.used_bytes()),
            "cupy_pool.total_bytes": int(pool.total_bytes()),
        }
