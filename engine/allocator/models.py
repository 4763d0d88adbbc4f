"""Accounting models: how many bytes an allocation accounts for, and the counters PyTorch keeps.

- ``ExactModel`` ("exact"): a request accounts exactly its bytes and nothing is cached, so
  reserved == allocated. One segment per allocation.
- ``CachingModel`` ("caching"): PyTorch's CUDA caching allocator with its default settings and a
  single stream (c10/cuda/CUDACachingAllocator.cpp): sizes round up to 512 bytes, a small pool
  (<= 1 MiB, 2 MiB segments) and a large pool, best fit by (size, address), split and merge,
  freed blocks stay cached (reserved) until ``empty_cache()``.

Both keep PyTorch's statistics (``memory_stats()`` has torch.cuda.memory_stats()'s flat keys) and
raise ``OutOfMemoryError`` with PyTorch's message when an allocation would pass ``limit``; an
out-of-memory leaves every counter as it was except ``num_ooms`` and ``num_alloc_retries``.

>>> model = make_model("caching", "cuda")
>>> block = model.malloc(400_000_000)          # torch.randn(10000, 10000) on a GPU
>>> model.allocated_bytes, model.reserved_bytes
(400556032, 400556032)
>>> model.free(block)
>>> model.allocated_bytes, model.reserved_bytes  # the segment stays cached
(0, 400556032)
"""

from __future__ import annotations

from bisect import bisect_left, insort

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


def _device_index(device: str) -> int:
    _, _, index = device.partition(":")
    return int(index) if index.isdigit() else 0


class AccountingModel:
    """Decides what an allocation accounts for and keeps PyTorch's allocated/reserved statistics.

    ``limit`` (bytes, or None for no limit) plays the device's total capacity: an allocation
    that would take reserved memory past it raises ``OutOfMemoryError``.
    """

    name: str = ""
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


class ExactModel(AccountingModel):
    """A request accounts exactly its bytes; reserved == allocated; one segment per allocation.

    A zero-byte request allocates nothing (like PyTorch's empty tensors): its block has size 0
    and no counter moves.

    Every tensor allocation comes through ``charge``/``uncharge``, so they do as little as keeps
    the statistics exact: the handle is the block's fake address (an int, no Block object), and
    only the pools are counted there. The all-pools totals are the pools' sums, worked out when
    read; only their peaks, which no sum can recover, are kept as they happen.
    """

    name = "exact"
    _STAT_SOURCE = {
        "active": "allocation",
        "active_bytes": "allocated_bytes",
        "requested_bytes": "allocated_bytes",
        "segment": "allocation",
        "reserved_bytes": "allocated_bytes",
        "inactive_split": None,
        "inactive_split_bytes": None,
    }

    def __init__(self, device: str = "cpu", limit: int | None = None):
        super().__init__(device, limit)
        self._live: dict[int, int] = {}  # address -> bytes, of every allocated block
        self._next_address = _BASE_ADDRESS

    def _init_stats(self) -> None:
        self._small = _Stats()
        self._large = _Stats()
        self._peak_bytes = 0  # all pools' allocated_bytes peak
        self._peak_count = 0  # all pools' allocation peak

    @property
    def _all(self) -> _Stats:
        """All pools, as one _Stats: the sums of the pools' counters, and the peaks kept."""
        total = _Stats()
        for name in _COUNTED:
            for slot in (name, name + "_inc"):
                setattr(total, slot, getattr(self._small, slot) + getattr(self._large, slot))
        total.allocated_bytes_peak = self._peak_bytes
        total.allocation_peak = self._peak_count
        return total

    def malloc(self, nbytes: int) -> Block:
        address = self.charge(nbytes)
        return Block(nbytes, nbytes, "large" if nbytes > SMALL_SIZE else "small", address)

    def free(self, block: Block) -> None:
        if block.size == 0:
            return
        if self._live.get(block.address) != block.size:
            raise ValueError(f"{block!r} is not allocated by this model (freed twice?)")
        self.uncharge(block.address)

    def charge(self, nbytes: int) -> int:
        if nbytes > SMALL_SIZE:
            stats, other = self._large, self._small
        elif nbytes > 0:
            stats, other = self._small, self._large
        elif nbytes == 0:
            return 0  # the address of a zero-byte block: never a live one
        else:
            raise ValueError(f"cannot allocate a negative number of bytes ({nbytes})")
        allocated = stats.allocated_bytes + nbytes
        total = allocated + other.allocated_bytes
        limit = self.limit
        if limit is not None and total > limit:
            self.num_ooms += 1
            raise self._out_of_memory(nbytes, nbytes)
        stats.allocated_bytes = allocated
        stats.allocated_bytes_inc += nbytes
        if allocated > stats.allocated_bytes_peak:
            stats.allocated_bytes_peak = allocated
        if total > self._peak_bytes:
            self._peak_bytes = total
        count = stats.allocation + 1
        stats.allocation = count
        stats.allocation_inc += 1
        if count > stats.allocation_peak:
            stats.allocation_peak = count
        count += other.allocation
        if count > self._peak_count:
            self._peak_count = count
        address = self._next_address
        self._next_address = address + (nbytes + 511) // 512 * 512  # keep addresses 512-aligned
        self._live[address] = nbytes
        return address

    def uncharge(self, address: int) -> None:
        nbytes = self._live.pop(address, None)
        if nbytes is None:
            if address == 0:
                return
            raise ValueError(
                f"the block at {address:#x} is not allocated by this model (freed twice?)"
            )
        stats = self._large if nbytes > SMALL_SIZE else self._small
        stats.allocated_bytes -= nbytes
        stats.allocation -= 1

    def handle_sizes(self, address: int) -> tuple[int, int]:
        nbytes = self._live.get(address, 0)
        return nbytes, nbytes

    @property
    def allocated_bytes(self) -> int:
        return self._small.allocated_bytes + self._large.allocated_bytes

    reserved_bytes = requested_bytes = allocated_bytes

    @property
    def max_allocated_bytes(self) -> int:
        return self._peak_bytes

    max_reserved_bytes = max_allocated_bytes

    def reset_peak_stats(self) -> None:
        self._small.reset_peaks()
        self._large.reset_peaks()
        self._peak_bytes = self.allocated_bytes
        self._peak_count = self._small.allocation + self._large.allocation

    def memory_stats(self) -> dict[str, int]:
        stats = super().memory_stats()
        # Every allocation is its own device allocation.
        stats["num_device_alloc"] = stats["segment.all.allocated"]
        stats["num_device_free"] = stats["segment.all.freed"]
        return stats

    def segments(self) -> list[dict]:
        return [
            self._segment_dict(
                address,
                nbytes,
                "large" if nbytes > SMALL_SIZE else "small",
                [_block_dict(address, nbytes, nbytes, True)],
            )
            for address, nbytes in sorted(self._live.items())
        ]


class _CachedBlock(Block):
    """A block inside a caching-model segment: allocated or cached free, linked to its neighbours."""

    __slots__ = ("segment", "prev", "next", "allocated")

    def __init__(self, size, requested, pool, address, segment, prev, nxt, allocated):
        self.size = size
        self.requested = requested
        self.pool = pool
        self.address = address
        self.segment = segment
        self.prev = prev
        self.next = nxt
        self.allocated = allocated


class _Segment:
    """One device allocation (cudaMalloc): its blocks are linked from ``head`` in address order."""

    __slots__ = ("address", "size", "pool", "head")

    def __init__(self, address: int, size: int, pool: str):
        self.address = address
        self.size = size
        self.pool = pool
        self.head: _CachedBlock | None = None


class CachingModel(AccountingModel):
    """PyTorch's CUDA caching allocator: default settings, one stream.

    - a request rounds up to a multiple of 512 bytes (512 at least); rounded sizes <= 1 MiB come
      from the small pool, larger ones from the large pool; the pools never lend to each other;
    - a request takes the best-fitting cached free block of its pool, smallest (size, address);
    - if none fits, a new segment is reserved: 2 MiB for the small pool, 20 MiB for sizes under
      10 MiB, else the size rounded up to 2 MiB;
    - the block is split when the remainder is >= 512 bytes (small pool) or > 1 MiB (large pool);
      an unsplit remainder stays in the block and counts as allocated;
    - a freed block goes back to its pool, merged with free neighbours; reserved does not change;
    - when a new segment would pass ``limit``, every cached fully free segment is released and
      the allocation retried (``num_alloc_retries``); if it still cannot fit, OutOfMemoryError.

    PyTorch's ``max_split_size`` is unlimited by default, so its oversize rules never apply:
    any cached block of the pool that is big enough may be split, however big it is.

    Difference from PyTorch: on an out-of-memory PyTorch has already released the cached segments
    when it raises; here nothing but ``num_alloc_retries`` and ``num_ooms`` changes, so the
    message's "reserved but unallocated" still includes them.

    A zero-byte request allocates nothing (PyTorch returns a null pointer for it).
    """

    name = "caching"
    _STAT_SOURCE = {"active": "allocation", "active_bytes": "allocated_bytes"}

    def __init__(self, device: str = "cpu", limit: int | None = None):
        super().__init__(device, limit)
        # Cached free blocks per pool as (size, address, block), sorted: best fit is a bisect.
        self._free_small: list[tuple[int, int, _CachedBlock]] = []
        self._free_large: list[tuple[int, int, _CachedBlock]] = []
        self._segments: dict[int, _Segment] = {}
        self._next_address = _BASE_ADDRESS

    def malloc(self, nbytes: int) -> Block:
        if nbytes <= 0:
            if nbytes == 0:
                return _CachedBlock(0, 0, "small", 0, None, None, None, False)
            raise ValueError(f"cannot allocate a negative number of bytes ({nbytes})")
        size = 512 if nbytes < 512 else (nbytes + 511) // 512 * 512  # round_size(), inlined
        if size <= SMALL_SIZE:
            pool, free_list, stats = "small", self._free_small, self._small
        else:
            pool, free_list, stats = "large", self._free_large, self._large
        i = bisect_left(free_list, (size,))
        if i < len(free_list):
            block = free_list.pop(i)[2]
        else:
            block = self._new_segment(size, pool, nbytes)
        was_split = block.prev is not None or block.next is not None
        remaining = block.size - size
        if (remaining >= MIN_BLOCK_SIZE) if pool == "small" else (remaining > SMALL_SIZE):
            # The front becomes the allocation; the old block keeps the free remainder.
            front = _CachedBlock(
                size, 0, pool, block.address, block.segment, block.prev, block, False
            )
            if block.prev is None:
                block.segment.head = front
            else:
                block.prev.next = front
            block.prev = front
            block.address += size
            block.size = remaining
            insort(free_list, (remaining, block.address, block))
            block = front
            if was_split:  # an inactive split block shrank by `size`
                split_blocks, split_bytes = 0, -size
            else:  # a new inactive split block: the remainder
                split_blocks, split_bytes = 1, remaining
        elif was_split:  # an inactive split block became active whole
            split_blocks, split_bytes = -1, -block.size
        else:
            split_blocks = split_bytes = 0
        block.allocated = True
        block.requested = nbytes
        self._all.add_block(block.size, nbytes, split_blocks, split_bytes)
        stats.add_block(block.size, nbytes, split_blocks, split_bytes)
        return block

    def free(self, block: Block) -> None:
        if type(block) is not _CachedBlock or not block.allocated:
            if block.size == 0:
                return
            raise ValueError(f"{block!r} is not allocated by this model (freed twice?)")
        if block.pool == "small":
            free_list, stats = self._free_small, self._small
        else:
            free_list, stats = self._free_large, self._large
        # The caller's handle leaves the segment unchanged: its bytes join a free neighbour,
        # or a new free block takes its place. Inactive split stats change as in PyTorch's
        # free_block: minus each free neighbour merged, plus the result if still split.
        block.allocated = False
        prev, nxt = block.prev, block.next
        block.prev = block.next = None
        split_blocks = split_bytes = 0
        merged = None
        if prev is not None and not prev.allocated:  # [prev block] -> [prev]
            self._remove_free(free_list, prev)
            split_blocks -= 1
            split_bytes -= prev.size
            prev.size += block.size
            prev.next = nxt
            if nxt is not None:
                nxt.prev = prev
            merged = prev
        if nxt is not None and not nxt.allocated:
            self._remove_free(free_list, nxt)
            split_blocks -= 1
            split_bytes -= nxt.size
            if merged is None:  # [block next] -> [next], grown to the left
                nxt.address = block.address
                nxt.size += block.size
                nxt.prev = prev
                if prev is None:
                    block.segment.head = nxt
                else:
                    prev.next = nxt
                merged = nxt
            else:  # [prev next] -> [prev]
                merged.size += nxt.size
                merged.next = nxt.next
                if nxt.next is not None:
                    nxt.next.prev = merged
        if merged is None:
            merged = _CachedBlock(
                block.size, 0, block.pool, block.address, block.segment, prev, nxt, False
            )
            if prev is None:
                block.segment.head = merged
            else:
                prev.next = merged
            if nxt is not None:
                nxt.prev = merged
        insort(free_list, (merged.size, merged.address, merged))
        if merged.prev is not None or merged.next is not None:
            split_blocks += 1
            split_bytes += merged.size
        self._all.remove_block(block.size, block.requested, split_blocks, split_bytes)
        stats.remove_block(block.size, block.requested, split_blocks, split_bytes)

    def empty_cache(self) -> None:
        self.num_sync_all_streams += 1  # PyTorch syncs every stream before releasing
        for free_list, stats in ((self._free_large, self._large), (self._free_small, self._small)):
            kept = []
            for entry in free_list:
                block = entry[2]
                if block.prev is None and block.next is None:
                    self._release(block.segment, stats)
                else:
                    kept.append(entry)
            free_list[:] = kept

    def segments(self) -> list[dict]:
        out = []
        for address in sorted(self._segments):
            segment = self._segments[address]
            blocks = []
            block = segment.head
            while block is not None:
                blocks.append(
                    _block_dict(block.address, block.size, block.requested, block.allocated)
                )
                block = block.next
            out.append(self._segment_dict(address, segment.size, segment.pool, blocks))
        return out

    def _new_segment(self, size: int, pool: str, nbytes: int) -> _CachedBlock:
        """Reserve a segment for a rounded ``size`` and return its single free block."""
        alloc_size = segment_size(size)
        limit = self.limit
        if limit is not None and self._all.reserved_bytes + alloc_size > limit:
            # PyTorch: cudaMalloc failed, so release every cached fully free segment and retry.
            self.num_alloc_retries += 1
            if self._all.reserved_bytes - self._cached_segment_bytes() + alloc_size > limit:
                self.num_ooms += 1
                raise self._out_of_memory(alloc_size, nbytes)
            self.empty_cache()
        address = self._next_address
        self._next_address = address + alloc_size
        segment = _Segment(address, alloc_size, pool)
        segment.head = _CachedBlock(alloc_size, 0, pool, address, segment, None, None, False)
        self._segments[address] = segment
        self._all.add_segment(alloc_size)
        (self._small if pool == "small" else self._large).add_segment(alloc_size)
        self.num_device_alloc += 1
        return segment.head

    def _release(self, segment: _Segment, stats: _Stats) -> None:
        del self._segments[segment.address]
        self._all.remove_segment(segment.size)
        stats.remove_segment(segment.size)
        self.num_device_free += 1

    def _cached_segment_bytes(self) -> int:
        """Bytes that empty_cache() would release: the fully free segments."""
        return sum(
            size
            for size, _, block in self._free_small + self._free_large
            if block.prev is None and block.next is None
        )

    @staticmethod
    def _remove_free(free_list: list, block: _CachedBlock) -> None:
        i = bisect_left(free_list, (block.size, block.address))
        assert free_list[i][2] is block, "free list out of order"
        del free_list[i]


MODELS: dict[str, type[AccountingModel]] = {"caching": CachingModel, "exact": ExactModel}


def make_model(name: str, device: str, limit: int | None = None) -> AccountingModel:
    """The accounting model called ``name`` ("exact" or "caching") for ``device``.

    >>> make_model("exact", "cpu", limit=1024).limit
    1024
    """
    try:
        cls = MODELS[name]
    except (KeyError, TypeError):
        choices = ", ".join(repr(n) for n in sorted(MODELS))
        raise ValueError(f"unknown accounting model {name!r}; choose one of {choices}") from None
    return cls(device, limit)
