"""Compare two reports variant by variant: peak allocated before and after, delta and percent."""

from __future__ import annotations

from typing import Any


def compare_reports(
    before: dict[str, Any], after: dict[str, Any], max_increase_pct: float | None = None
) -> list[dict[str, Any]]:
    """One row per variant name in either report, in the order they first appear."""
    a = {v["name"]: v for v in before["variants"]}
    b = {v["name"]: v for v in after["variants"]}
    names = list(a) + [n for n in b if n not in a]
    rows = []
    for name in names:
        pa = a[name]["peak_allocated_bytes"] if name in a else None
        pb = b[name]["peak_allocated_bytes"] if name in b else None
        row: dict[str, Any] = {
            "variant": name,
            "before": pa,
            "after": pb,
            "delta": None,
            "pct": None,
            "over_limit": False,
            "note": None,
        }
        if pa is None:
            row["note"] = "only in the second report"
        elif pb is None:
            row["note"] = "only in the first report"
        else:
            row["delta"] = pb - pa
            row["pct"] = (100.0 * (pb - pa) / pa) if pa else (0.0 if pb == 0 else float("inf"))
            if max_increase_pct is not None and row["pct"] > max_increase_pct:
                row["over_limit"] = True
        rows.append(row)
    return rows
