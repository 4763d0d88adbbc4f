"""Byte sizes: parse "64 MiB" / "1.5 GiB" / "5%" and print them as PyTorch does; and durations."""

from __future__ import annotations

import re

_UNITS = {
    "": 1,
    "b": 1,
    "k": 1000,
    "kb": 1000,
    "m": 1000**2,
    "mb": 1000**2,
    "g": 1000**3,
    "gb": 1000**3,
    "t": 1000**4,
    "tb": 1000**4,
    "kib": 1024,
    "mib": 1024**2,
    "gib": 1024**3,
    "tib": 1024**4,
}
MAX_SIZE = 2**63 - 1  # bytes: what an int64 byte count holds
_SIZE_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*([a-zA-Z]*)\s*$")


def parse_size(value: int | float | str) -> int:
    """Parse a byte size: ``64 MiB`` -> 67108864, ``"1.5 GiB"``, ``1000``, ``"2 GB"`` (decimal).

    Raises ValueError with the accepted forms when the text is not a size.
    """
    if isinstance(value, bool):
        raise ValueError(f"expected a size such as 64 MiB, found {value!r}")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"expected a non-negative size, found {value}")
        if value > MAX_SIZE:
            raise ValueError(
                f"expected a size that fits in 64 bits (at most {MAX_SIZE}), found {value}"
            )
        return value
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise ValueError(f"expected a finite size, found {value}")
        if value > MAX_SIZE:
            raise ValueError(f"expected a size that fits in 64 bits (at most 8 EiB), found {value}")
        if value < 0 or value != int(value):
            raise ValueError(f"expected a whole number of bytes, found {value}")
        return int(value)
    m = _SIZE_RE.match(str(value))
    if not m or m.group(2).lower() not in _UNITS:
        raise ValueError(
            f"expected a size such as 64 MiB, 1.5 GiB, 512 KiB, 2 GB or a plain integer, found {value!r}"
        )
    number = float(m.group(1))
    result = number * _UNITS[m.group(2).lower()]
    if result > MAX_SIZE:
        raise ValueError(f"expected a size that fits in 64 bits (at most 8 EiB), found {value!r}")
    if result != int(result):
        raise ValueError(f"{value!r} is not a whole number of bytes")
    return int(result)


def parse_percent(value: str | float | int) -> float:
    """Parse ``"5%"`` or ``5`` -> 5.0 (percent)."""
    text = str(value).strip()
    if text.endswith("%"):
        text = text[:-1]
    try:
        pct = float(text)
    except ValueError:
        raise ValueError(f"expected a percentage such as 5%, found {value!r}") from None
    if pct < 0:
        raise ValueError(f"expected a non-negative percentage, found {value!r}")
    return pct


def format_bytes(n: int | float) -> str:
    """``67108864`` -> ``"64.00 MiB"`` (two decimals, binary units, as PyTorch's messages)."""
    sign = "-" if n < 0 else ""
    n = abs(n)
    for unit, scale in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if n >= scale:
            return f"{sign}{n / scale:.2f} {unit}"
    return f"{sign}{int(n)} bytes"


def format_seconds(s: float | None) -> str:
    """``0.0123`` -> ``"12.3 ms"``; ``"85 µs"`` below a millisecond, ``"1.25 s"`` from a second;
    ``"-"`` for None."""
    if s is None:
        return "-"
    if s < 1e-3:
        return f"{s * 1e6:.0f} µs"
    if s < 1:
        return f"{s * 1e3:.1f} ms"
    return f"{s:.2f} s"
