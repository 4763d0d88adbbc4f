"""The tracked allocator: every storage's allocation and free goes through here.

- models.py: accounting models (`exact`, and `caching` = PyTorch's CUDA caching allocator).
- events.py: the event record and the observer base class.
- tracked.py: one TrackedAllocator per device; context for attributing events.
"""

from engine.allocator.events import AllocEvent, MemoryObserver
from engine.allocator.tracked import (
    TrackedAllocator,
    all_allocators,
    context,
    current_context,
    get_allocator,
    op_scope,
    reset,
)

__all__ = [
    "AllocEvent",
    "MemoryObserver",
    "TrackedAllocator",
    "all_allocators",
    "context",
    "current_context",
    "get_allocator",
    "op_scope",
    "reset",
]
