"""The accounting-model base: PyTorch's allocator constants, blocks, statistics and the
interface every model implements (malloc/free, charge/uncharge, memory_stats, segments)."""

from __future__ import annotations

from engine.allocator.units import MiB, format_size
from engine.errors import OutOfMemoryError

# PyTorch's constants (names from CUDACachingAllocator.cpp).
MIN_BLOCK_SIZE = 512  # kMinBlockSize: sizes round up to a multiple of this
SMALL_SIZE = 1 * MiB  # kSmallSize: largest rounded size served by the small pool
SMALL_BUFFER = 2 * MiB  # kSmallBuffer: size of a small-pool segment
MIN_LARGE_ALLOC = 10 * MiB  # kMinLargeAlloc: large sizes below this get a LARGE_BUFFER segment
LARGE_BUFFER = 20 * MiB  # kLargeBuffer
ROUND_LARGE = 2 * MiB  # kRoundLarge: bigger segments are the size rounded up to this

# Fake device addresses, so snapshots look like a GPU's and blocks sort by address.
_BASE_ADDRESS = 0x7F0000000000

# The stats each model counts; memory_stats() derives the others from these.
_COUNTED = (
    "allocation",
    "allocated_bytes",
    "requested_bytes",
    "segment",
    "reserved_bytes",
    "inactive_split",
    "inactive_split_bytes",
)
# torch.cuda.memory_stats()'s per-pool stats, each with .{all,large_pool,small_pool}.{current,...}.
STAT_NAMES = (
    "active",
    "active_bytes",
    "allocated_bytes",
    "allocation",
    "inactive_split",
    "inactive_split_bytes",
    "requested_bytes",
    "reserved_bytes",
    "segment",
)
POOL_SCOPES = ("all", "large_pool", "small_pool")


def round_size(nbytes: int) -> int:
    """PyTorch's ``round_size``: at least 512 bytes, rounded up to a multiple of 512.

    >>> round_size(1), round_size(512), round_size(513)
    (512, 512, 1024)
    """
    if nbytes < MIN_BLOCK_SIZE:
        return MIN_BLOCK_SIZE
    return (nbytes + MIN_BLOCK_SIZE - 1) // MIN_BLOCK_SIZE * MIN_BLOCK_SIZE


def segment_size(size: int) -> int:
    """PyTorch's ``get_allocation_size``: the segment a rounded ``size`` gets when nothing cached fits.

    >>> segment_size(1024) == 2 * MiB, segment_size(5 * MiB) == 20 * MiB, segment_size(11 * MiB) == 12 * MiB
    (True, True, True)
    """
    if size <= SMALL_SIZE:
        return SMALL_BUFFER
    if size < MIN_LARGE_ALLOC:
        return LARGE_BUFFER
    return (size + ROUND_LARGE - 1) // ROUND_LARGE * ROUND_LARGE


class Block:
    """One allocation, returned by ``malloc`` and handed back to ``free``.

    ``size`` is what the allocation accounts for (the block: rounded size plus any unsplit
    remainder), ``requested`` the bytes asked for, ``pool`` "small" or "large", ``address`` a fake
    device address (0 for a zero-byte request, which allocates nothing). The fields never change,
    also after ``free``, and each ``malloc`` returns a new handle.
    """

    __slots__ = ("size", "requested", "pool", "address")

    def __init__(self, size: int, requested: int, pool: str, address: int):
        self.size = size
        self.requested = requested
        self.pool = pool
        self.address = address

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(size={self.size}, requested={self.requested}, "
            f"pool={self.pool!r}, address={self.address:#x})"
        )


class _Stats:
    """Counters for one scope (all pools, the small pool or the large pool).

    For each counted stat three slots: its current value, its peak (``_peak``) and the running sum
    of its increases (``_inc``, PyTorch's "allocated"); PyTorch's "freed" is ``_inc - current``.
    """

    __slots__ = tuple(f"{name}{suffix}" for name in _COUNTED for suffix in ("", "_peak", "_inc"))

    def __init__(self):
        for slot in self.__slots__:
            setattr(self, slot, 0)

    def add_block(self, size: int, requested: int, split_blocks: int, split_bytes: int) -> None:
        """A block of ``size`` became allocated; inactive split blocks changed by the deltas."""
        n = self.allocation + 1
        self.allocation = n
        self.allocation_inc += 1
        if n > self.allocation_peak:
            self.allocation_peak = n
        n = self.allocated_bytes + size
        self.allocated_bytes = n
        self.allocated_bytes_inc += size
        if n > self.allocated_bytes_peak:
            self.allocated_bytes_peak = n
        n = self.requested_bytes + requested
        self.requested_bytes = n
        self.requested_bytes_inc += requested
        if n > self.requested_bytes_peak:
            self.requested_bytes_peak = n
        if split_blocks or split_bytes:
            self.change_inactive_split(split_blocks, split_bytes)

    def remove_block(self, size: int, requested: int, split_blocks: int, split_bytes: int) -> None:
        """A block of ``size`` was freed; inactive split blocks changed by the deltas."""
        self.allocation -= 1
        self.allocated_bytes -= size
        self.requested_bytes -= requested
        if split_blocks or split_bytes:
            self.change_inactive_split(split_blocks, split_bytes)

    def add_segment(self, size: int) -> None:
        n = self.segment + 1
        self.segment = n
        self.segment_inc += 1
        if n > self.segment_peak:
            self.segment_peak = n
        n = self.reserved_bytes + size
        self.reserved_bytes = n
        self.reserved_bytes_inc += size
        if n > self.reserved_bytes_peak:
            self.reserved_bytes_peak = n

    def remove_segment(self, size: int) -> None:
        self.segment -= 1
        self.reserved_bytes -= size

    def change_inactive_split(self, blocks: int, nbytes: int) -> None:
        n = self.inactive_split + blocks
        self.inactive_split = n
        if blocks > 0:
            self.inactive_split_inc += blocks
            if n > self.inactive_split_peak:
                self.inactive_split_peak = n
        n = self.inactive_split_bytes + nbytes
        self.inactive_split_bytes = n
        if nbytes > 0:
            self.inactive_split_bytes_inc += nbytes
            if n > self.inactive_split_bytes_peak:
                self.inactive_split_bytes_peak = n

    def reset_peaks(self) -> None:
        for name in _COUNTED:
            setattr(self, name + "_peak", getattr(self, name))


def _pools_total(small: _Stats, large: _Stats, peaks: dict[str, int]) -> _Stats:
    """All pools as one _Stats, for models that count per pool only: the pools' counters and
    increases summed, and the all-pools peaks given by name (no sum of the pools' recovers
    one; those not given are 0)."""
    total = _Stats()
    for name in _COUNTED:
        for slot in (name, name + "_inc"):
            setattr(total, slot, getattr(small, slot) + getattr(large, slot))
    for name, value in peaks.items():
        setattr(total, name + "_peak", value)
    return total


def _device_index(device: str) -> int:
    _, _, index = device.partition(":")
    return int(index) if index.isdigit() else 0


class AccountingModel:
    """Decides what an allocation accounts for and keeps PyTorch's allocated/reserved statistics.

    ``limit`` (bytes, or None for no limit) plays the device's total capacity: an allocation
    that would take reserved memory past it raises ``OutOfMemoryError``.
    """

    name: str = ""
    # The memory history (engine.allocator.snapshot): when set, called as
    # trace(action, address, size, requested) for alloc, free_requested, free_completed,
    # segment_alloc, segment_free and oom, in the order the allocator takes them.
    trace = None
    # memory_stats() key -> the counted stat it reads (None: always 0), where they differ.
    _STAT_SOURCE: dict[str, str | None] = {}

    def __init__(self, device: str = "cpu", limit: int | None = None):
        self.device = str(device)
        self.limit: int | None = None
        self.set_limit(limit)
        self._init_stats()
        self.num_alloc_retries = 0
        self.num_ooms = 0
        self.num_device_alloc = 0
        self.num_device_free = 0
        self.num_sync_all_streams = 0

    def _init_stats(self) -> None:
        """The counters: all pools (``_all``), the small pool and the large pool."""
        self._all = _Stats()
        self._small = _Stats()
        self._large = _Stats()

    def malloc(self, nbytes: int) -> Block:
        """Allocate ``nbytes``; raises ``OutOfMemoryError`` (changing nothing but the OOM counters)."""
        raise NotImplementedError

    def free(self, block: Block) -> None:
        """Give back a block returned by ``malloc``."""
        raise NotImplementedError

    # The storage layer's form of malloc/free. Every tensor allocation takes this path, so a
    # model may hand out something cheaper than a Block as the handle (ExactModel: the address).
    # Only handle_sizes() reads a handle; it is otherwise opaque.
    def charge(self, nbytes: int):
        """Allocate ``nbytes`` like ``malloc``; returns a handle for ``uncharge``."""
        return self.malloc(nbytes)

    def uncharge(self, handle) -> None:
        """Give back what ``charge`` returned."""
        self.free(handle)

    def handle_sizes(self, handle) -> tuple[int, int]:
        """(requested, size) of a handle from ``charge`` that is not given back yet."""
        return handle.requested, handle.size

    def empty_cache(self) -> None:
        """Release every cached, fully free segment (torch.cuda.empty_cache())."""

    def segments(self) -> list[dict]:
        """The segments, as in torch.cuda.memory_snapshot()["segments"], sorted by address."""
        raise NotImplementedError

    def set_limit(self, nbytes: int | None) -> None:
        """Set the memory limit in bytes (None: unlimited). Allocations already made stay."""
        if nbytes is not None and (not isinstance(nbytes, int) or nbytes < 0):
            raise ValueError(f"limit must be a number of bytes >= 0 or None, got {nbytes!r}")
        self.limit = nbytes

    @property
    def allocated_bytes(self) -> int:
        return self._all.allocated_bytes

    @property
    def reserved_bytes(self) -> int:
        return self._all.reserved_bytes

    @property
    def requested_bytes(self) -> int:
        return self._all.requested_bytes

    @property
    def max_allocated_bytes(self) -> int:
        return self._all.allocated_bytes_peak

    @property
    def max_reserved_bytes(self) -> int:
        return self._all.reserved_bytes_peak

    def reset_peak_stats(self) -> None:
        """Set every peak back to its current value (torch.cuda.reset_peak_memory_stats())."""
        for stats in (self._all, self._small, self._large):
            stats.reset_peaks()

    def memory_stats(self) -> dict[str, int]:
        """torch.cuda.memory_stats()'s flat dict, keys sorted as torch sorts them.

        Besides ``{stat}.{all,large_pool,small_pool}.{current,peak,allocated,freed}`` for each of
        ``STAT_NAMES`` and ``num_alloc_retries``/``num_ooms`` it carries torch's other keys:
        ``num_device_alloc``/``num_device_free`` (segments reserved/released),
        ``num_sync_all_streams`` (cache releases), ``max_split_size`` (-1: unlimited), and
        ``num_oom_rejections`` and the ``oversize_*`` stats, always 0 with default settings.
        """
        out: dict[str, int] = {}
        scopes = (("all", self._all), ("large_pool", self._large), ("small_pool", self._small))
        for stat in STAT_NAMES:
            source = self._STAT_SOURCE.get(stat, stat)
            for scope, stats in scopes:
                prefix = f"{stat}.{scope}."
                if source is None:
                    current = peak = increased = 0
                else:
                    current = getattr(stats, source)
                    peak = getattr(stats, source + "_peak")
                    increased = getattr(stats, source + "_inc")
                out[prefix + "allocated"] = increased
                out[prefix + "current"] = current
                out[prefix + "freed"] = increased - current
                out[prefix + "peak"] = peak
        for stat in ("oversize_allocations", "oversize_segments"):
            for field in ("allocated", "current", "freed", "peak"):
                out[f"{stat}.{field}"] = 0
        out["max_split_size"] = -1
        out["num_alloc_retries"] = self.num_alloc_retries
        out["num_device_alloc"] = self.num_device_alloc
        out["num_device_free"] = self.num_device_free
        out["num_oom_rejections"] = 0
        out["num_ooms"] = self.num_ooms
        out["num_sync_all_streams"] = self.num_sync_all_streams
        return dict(sorted(out.items()))

    def _out_of_memory(self, tried: int, requested: int) -> OutOfMemoryError:
        """The error for an allocation of ``tried`` bytes (for ``requested`` asked) past the limit.

        PyTorch's wording; "total capacity" is the limit and "free" what is left under it.
        """
        limit = self.limit if self.limit is not None else 0
        allocated = self.allocated_bytes
        reserved = self.reserved_bytes
        free = max(limit - reserved, 0)
        if self.device.startswith("cuda"):
            message = (
                f"CUDA out of memory. Tried to allocate {format_size(tried)}. "
                f"GPU {_device_index(self.device)} has a total capacity of {format_size(limit)} "
                f"of which {format_size(free)} is free. "
                f"Of the allocated memory {format_size(allocated)} is allocated by memprof's "
                f"engine, and {format_size(reserved - allocated)} is reserved by memprof's "
                "engine but unallocated."
            )
        else:
            message = (
                f"{self.device} out of memory. Tried to allocate {format_size(tried)}. "
                f"Device {self.device} has a total capacity of {format_size(limit)} "
                f"(memory limit) of which {format_size(free)} is free. "
                f"Of the allocated memory {format_size(allocated)} is allocated by the engine, "
                f"and {format_size(reserved - allocated)} is reserved but unallocated."
            )
        return OutOfMemoryError(message, device=self.device, requested=requested)

    def _segment_dict(self, address: int, size: int, pool: str, blocks: list[dict]) -> dict:
        allocated = sum(b["size"] for b in blocks if b["state"] == "active_allocated")
        requested = sum(b["requested_size"] for b in blocks if b["state"] == "active_allocated")
        return {
            "device": _device_index(self.device),
            "address": address,
            "total_size": size,
            "allocated_size": allocated,
            "active_size": allocated,
            "requested_size": requested,
            "stream": 0,
            "segment_type": pool,
            "blocks": blocks,
        }

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(device={self.device!r}, limit={self.limit}, "
            f"allocated={self.allocated_bytes}, reserved={self.reserved_bytes})"
        )


def _block_dict(address: int, size: int, requested: int, allocated: bool) -> dict:
    return {
        "address": address,
        "size": size,
        "requested_size": requested if allocated else 0,
        "state": "active_allocated" if allocated else "inactive",
        "frames": [],
    }
