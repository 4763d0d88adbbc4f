"""The caching model: PyTorch's CUDA caching allocator (default settings, one stream)."""

from __future__ import annotations

from bisect import bisect_left, insort

from engine.allocator.models.base import (
    _BASE_ADDRESS,
    _COUNTED,
    MIN_BLOCK_SIZE,
    SMALL_SIZE,
    AccountingModel,
    Block,
    _block_dict,
    _pools_total,
    _Stats,
    round_size,
    segment_size,
)


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

    def _init_stats(self) -> None:
        """The pools' counters; the all-pools figures are their sums, worked out when read,
        except the peaks, which no sum can recover: those are kept as they happen (`_peak`,
        one slot per counted stat), after each increase of a pool's counter."""
        self._small = _Stats()
        self._large = _Stats()
        self._peak = dict.fromkeys(_COUNTED, 0)

    @property
    def _all(self) -> _Stats:
        """All pools, as one _Stats: the pools' sums, and the peaks kept."""
        return _pools_total(self._small, self._large, self._peak)

    @property
    def allocated_bytes(self) -> int:
        return self._small.allocated_bytes + self._large.allocated_bytes

    @property
    def reserved_bytes(self) -> int:
        return self._small.reserved_bytes + self._large.reserved_bytes

    @property
    def requested_bytes(self) -> int:
        return self._small.requested_bytes + self._large.requested_bytes

    @property
    def max_allocated_bytes(self) -> int:
        return self._peak["allocated_bytes"]

    @property
    def max_reserved_bytes(self) -> int:
        return self._peak["reserved_bytes"]

    def reset_peak_stats(self) -> None:
        self._small.reset_peaks()
        self._large.reset_peaks()
        small, large = self._small, self._large
        for name in _COUNTED:
            self._peak[name] = getattr(small, name) + getattr(large, name)

    def _peaks_after(self, name: str) -> None:
        """The all-pools peak of counter `name`, after a pool's counter grew."""
        n = getattr(self._small, name) + getattr(self._large, name)
        if n > self._peak[name]:
            self._peak[name] = n

    def malloc(self, nbytes: int) -> Block:
        if nbytes <= 0:
            if nbytes == 0:
                return _CachedBlock(0, 0, "small", 0, None, None, None, False)
            raise ValueError(f"cannot allocate a negative number of bytes ({nbytes})")
        size = round_size(nbytes)
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
        stats.add_block(block.size, nbytes, split_blocks, split_bytes)
        # the all-pools peaks (_init_stats); the three that every allocation moves inline
        small, large, peak = self._small, self._large, self._peak
        n = small.allocation + large.allocation
        if n > peak["allocation"]:
            peak["allocation"] = n
        n = small.allocated_bytes + large.allocated_bytes
        if n > peak["allocated_bytes"]:
            peak["allocated_bytes"] = n
        n = small.requested_bytes + large.requested_bytes
        if n > peak["requested_bytes"]:
            peak["requested_bytes"] = n
        if split_blocks > 0:
            self._peaks_after("inactive_split")
        if split_bytes > 0:
            self._peaks_after("inactive_split_bytes")
        if self.trace is not None:
            self.trace("alloc", block.address, block.size, nbytes)
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
        stats.remove_block(block.size, block.requested, split_blocks, split_bytes)
        if split_blocks > 0:  # (only these can grow when a block is freed)
            self._peaks_after("inactive_split")
        if split_bytes > 0:
            self._peaks_after("inactive_split_bytes")
        if self.trace is not None:
            self.trace("free_requested", block.address, block.size, block.requested)
            self.trace("free_completed", block.address, block.size, block.requested)

    # the storage layer's calls (AccountingModel.charge/uncharge) reach malloc/free directly:
    # a block is this model's handle
    charge = malloc
    uncharge = free

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
        if limit is not None and self.reserved_bytes + alloc_size > limit:
            # PyTorch: cudaMalloc failed, so release every cached fully free segment and retry.
            self.num_alloc_retries += 1
            if self.reserved_bytes - self._cached_segment_bytes() + alloc_size > limit:
                self.num_ooms += 1
                if self.trace is not None:
                    self.trace("oom", 0, alloc_size, nbytes)
                raise self._out_of_memory(alloc_size, nbytes)
            self.empty_cache()
        address = self._next_address
        self._next_address = address + alloc_size
        segment = _Segment(address, alloc_size, pool)
        segment.head = _CachedBlock(alloc_size, 0, pool, address, segment, None, None, False)
        self._segments[address] = segment
        (self._small if pool == "small" else self._large).add_segment(alloc_size)
        self._peaks_after("segment")
        self._peaks_after("reserved_bytes")
        self.num_device_alloc += 1
        if self.trace is not None:
            self.trace("segment_alloc", address, alloc_size, alloc_size)
        return segment.head

    def _release(self, segment: _Segment, stats: _Stats) -> None:
        del self._segments[segment.address]
        stats.remove_segment(segment.size)
        self.num_device_free += 1
        if self.trace is not None:
            self.trace("segment_free", segment.address, segment.size, segment.size)

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
