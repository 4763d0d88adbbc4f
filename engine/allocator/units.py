"""Byte units and PyTorch's size formatting (as in its out-of-memory messages)."""

from __future__ import annotations

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB


def format_size(nbytes: int) -> str:
    """Format a byte count the way PyTorch's CUDA caching allocator does.

    Mirrors ``format_size`` in c10/cuda/CUDACachingAllocator.cpp, boundaries included:
    up to 1024 bytes prints the count, then two decimals in KiB up to 1 MiB, in MiB up
    to 1 GiB, else in GiB.

    >>> format_size(100), format_size(1024), format_size(1536)
    ('100 bytes', '1024 bytes', '1.50 KiB')
    >>> format_size(20 * MiB), format_size(2 * GiB)
    ('20.00 MiB', '2.00 GiB')
    """
    if nbytes <= KiB:
        return f"{nbytes} bytes"
    if nbytes <= MiB:
        return f"{nbytes / KiB:.2f} KiB"
    if nbytes <= GiB:
        return f"{nbytes / MiB:.2f} MiB"
    return f"{nbytes / GiB:.2f} GiB"
