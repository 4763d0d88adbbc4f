"""What a variant saves, and against which variant: one rule and one wording for every screen.

The rule: a variant is compared with the variant that differs from it only in its in-place
parameters, taken out of place (in a matrix of `batch` x `inplace`, `batch=1,inplace=true`
against `batch=1,inplace=false`, never against batch 4). A variant with no such counterpart
(named variants that differ in other ways, or a scenario without in-place parameters) is
compared with the declared `baseline:` (else the first variant). A variant that errored or ran
out of memory, or whose counterpart did, has no saving.

The wording: ``saves 64.00 MiB (50.0%)``, ``costs 1.00 KiB (0.1%)`` or ``same peak``
(`saving_text`), used by the terminal, the JSON comparison, the dashboard and the HTML report.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from memprof.units import format_bytes

INPLACE_KEY = "inplace"


def inplace_params(data: Any) -> set[str]:
    """Parameters a scenario substitutes into `inplace:` fields (of program nodes or modules):
    `inplace: $inplace` makes `inplace` one. `variants` and `matrix` are not searched."""
    found: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, Mapping):
            for key, value in node.items():
                if key == INPLACE_KEY and isinstance(value, str) and value.startswith("$"):
                    if not value.startswith("$$"):
                        found.add(value[1:])
                walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    if isinstance(data, Mapping):
        for key, value in data.items():
            if key not in ("variants", "matrix", "expect"):
                walk(value)
    return found


def _out_of_place(params: Mapping[str, Any], names: Iterable[str]) -> bool:
    return all(not params.get(n) for n in names)


def references(
    variants: Sequence[Mapping[str, Any]], inplace: Iterable[str], baseline: str | None
) -> dict[str, str | None]:
    """Variant name -> the name of the variant it is compared with (None: itself, no saving).

    variants: each with `name` and `params`. inplace: the in-place parameter names.
    """
    names = [v["name"] for v in variants]
    if baseline not in names:
        baseline = names[0] if names else None
    inplace = sorted(set(inplace))
    refs: dict[str, str | None] = {}
    for v in variants:
        params = v.get("params") or {}
        used = [n for n in inplace if n in params]
        ref: str | None = None
        if used:
            rest = {k: val for k, val in params.items() if k not in used}
            for other in variants:
                oparams = other.get("params") or {}
                if (
                    {k: val for k, val in oparams.items() if k not in used} == rest
                    and set(oparams) == set(params)
                    and _out_of_place(oparams, used)
                ):
                    ref = other["name"]
                    break
        if ref is None:
            ref = baseline
        refs[v["name"]] = None if ref == v["name"] else ref
    return refs


def saving_pct(peak: int, reference_peak: int) -> float | None:
    """The share of the reference's peak saved (negative: a cost), or None for a zero peak."""
    if not reference_peak:
        return None
    return round(100.0 * (reference_peak - peak) / reference_peak, 3) + 0.0


def saving_text(peak: int, reference_peak: int) -> str:
    """``saves 32.00 MiB (50.0%)``, ``costs 1.00 KiB (0.1%)`` or ``same peak``."""
    delta = reference_peak - peak
    if delta == 0:
        return "same peak"
    pct = 100 * abs(delta) / reference_peak if reference_peak else 0.0
    verb = "saves" if delta > 0 else "costs"
    return f"{verb} {format_bytes(abs(delta))} ({pct:.1f}%)"


def compared_with(row: Mapping[str, Any]) -> str | None:
    """The variant a comparison row is against (None: none, it is a reference itself). Reports
    written before `compared_with` compared every variant with the baseline."""
    if "compared_with" in row:
        return row["compared_with"]
    return None if row.get("is_baseline") else "the baseline"


def row_saving_text(row: Mapping[str, Any] | None) -> str:
    """The saving of one comparison row as every screen words it: the saving against the row's
    reference, `not comparable (...)` when it or its reference did not finish, "" for a
    variant compared with nothing."""
    if row is None:
        return ""
    ref = compared_with(row)
    if ref is None:
        return ""
    status = row.get("status") or "ok"
    if status != "ok":
        return f"not comparable ({status})"
    ref_status = row.get("reference_status") or "ok"
    if ref_status != "ok":
        return f"not comparable ({ref} {ref_status})"
    ref_peak = row.get("reference_peak_bytes")
    if ref_peak is None:  # older reports: the baseline's peak
        ref_peak = row["peak_allocated_bytes"] - row["delta_bytes"]
    return saving_text(row["peak_allocated_bytes"], ref_peak)


def best_saving_pct(comparison: Mapping[str, Any] | None) -> float | None:
    """The largest saving % of any comparable row (the runs page's "best saving")."""
    best = None
    for row in (comparison or {}).get("rows") or []:
        pct = row.get("saving_pct")
        if pct is None or compared_with(row) is None or (row.get("status") or "ok") != "ok":
            continue
        if best is None or pct > best:
            best = pct
    return best


__all__ = [
    "best_saving_pct",
    "compared_with",
    "inplace_params",
    "references",
    "row_saving_text",
    "saving_pct",
    "saving_text",
]
