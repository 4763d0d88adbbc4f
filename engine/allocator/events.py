"""What the tracked allocator tells its observers."""

from __future__ import annotations


class AllocEvent:
    """One allocator event.

    seq: per-allocator sequence number; time_ns: time.perf_counter_ns(); action: "alloc",
    "free" or "oom"; device: "cpu" | "cuda:0" | "meta"; requested: bytes the storage asked for;
    bytes: bytes the accounting model charged (block size); storage_id: unique per storage;
    allocated / reserved: the model's totals after the event; context: the keys set with
    `engine.allocator.context(...)` plus "op" set by the engine; location: "file:line" of the
    user code that caused it, when the allocator's `record_locations` is on.
    """

    __slots__ = (
        "seq",
        "time_ns",
        "action",
        "device",
        "requested",
        "bytes",
        "storage_id",
        "allocated",
        "reserved",
        "context",
        "location",
    )

    def __init__(
        self,
        seq,
        time_ns,
        action,
        device,
        requested,
        nbytes,
        storage_id,
        allocated,
        reserved,
        context,
        location=None,
    ):
        self.seq = seq
        self.time_ns = time_ns
        self.action = action
        self.device = device
        self.requested = requested
        self.bytes = nbytes
        self.storage_id = storage_id
        self.allocated = allocated
        self.reserved = reserved
        self.context = context
        self.location = location

    def as_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__slots__}

    def __repr__(self) -> str:
        return (
            f"AllocEvent(seq={self.seq}, action={self.action!r}, bytes={self.bytes}, "
            f"storage_id={self.storage_id}, allocated={self.allocated}, context={self.context})"
        )


class MemoryObserver:
    """Subscribe to a TrackedAllocator with `add_observer`. Every callback is a no-op here.

    - on_alloc(event): after a storage's bytes were charged; event.allocated includes them.
    - on_free(event): after a storage was released (its last reference died, or the engine
      freed it explicitly); event.allocated no longer includes it.
    - on_oom(event): an allocation was refused because of the memory limit; nothing changed,
      and OutOfMemoryError is raised right after this call.
    - on_tag(storage_id, key, value): the engine marks a live storage, e.g.
      ("category", "saved_for_backward") when autograd saves it for backward,
      ("category", "gradient") when AccumulateGrad makes it a `.grad`,
      ("inplace_clone", "sin_") for the copy an in-place op keeps for backward.
    - on_external(event): CuPy allocated or freed memory that is not a tensor storage
      (its own temporaries), seen through a CuPy memory hook on cuda.
    - on_scratch(event): a kernel took (action "alloc") or gave back ("free") workspace that
      PyTorch's kernel does not allocate or that is device-specific (softmax's per-row max and
      sum, a convolution's columns). It is not charged to allocated/reserved, so those stay
      comparable with PyTorch's; `engine.memory.memory_scratch()` totals it apart.
    """

    def on_alloc(self, event: AllocEvent) -> None:
        pass

    # An observer may define `on_event(action, seq, time_ns, requested, nbytes, storage_id,
    # allocated, reserved, context, op)`: while it is an allocator's only observer (and
    # `record_locations` is off), alloc, free and oom events go to it instead of on_alloc,
    # on_free and on_oom, as the fields of the AllocEvent they would have made. `context` is
    # the attribution context as it is (do not change it); `op` the engine op running, or None
    # (AllocEvent.context holds it as "op", over the context's own "op").

    def on_free(self, event: AllocEvent) -> None:
        pass

    def on_oom(self, event: AllocEvent) -> None:
        pass

    def on_tag(self, storage_id: int, key: str, value) -> None:
        pass

    def on_external(self, event: AllocEvent) -> None:
        pass

    def on_scratch(self, event: AllocEvent) -> None:
        pass
