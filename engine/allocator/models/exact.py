"""The exact model: a request accounts exactly its bytes, nothing is cached."""

from __future__ import annotations

from engine.allocator.models.base import (
    _BASE_ADDRESS,
    SMALL_SIZE,
    AccountingModel,
    Block,
    _block_dict,
    _pools_total,
    _Stats,
)


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
        peaks = {"allocated_bytes": self._peak_bytes, "allocation": self._peak_count}
        return _pools_total(self._small, self._large, peaks)

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
            if self.trace is not None:
                self.trace("oom", 0, nbytes, nbytes)
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
        self._next_address = address + ((nbytes + 511) & -512)  # keep addresses 512-aligned
        self._live[address] = nbytes
        if self.trace is not None:  # every allocation is its own segment
            self.trace("segment_alloc", address, nbytes, nbytes)
            self.trace("alloc", address, nbytes, nbytes)
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
        if self.trace is not None:
            self.trace("free_requested", address, nbytes, nbytes)
            self.trace("free_completed", address, nbytes, nbytes)
            self.trace("segment_free", address, nbytes, nbytes)

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
