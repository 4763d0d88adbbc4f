"""Per-node differences between two variants (of one run or of two runs)."""

from __future__ import annotations

from typing import Any

from memprof.reports.charts import inplace_text


def node_deltas(a: dict[str, Any], b: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per (node, phase, iteration) that ran in either variant, in A's order then B's,
    with both sides' peak and allocated bytes and B minus A. A node that runs several times in
    one phase and iteration is matched occurrence by occurrence."""
    rows: dict[tuple, dict[str, Any]] = {}
    for side, variant in (("a", a), ("b", b)):
        seen: dict[tuple, int] = {}
        for op in variant.get("ops") or []:
            base = (op.get("node"), op.get("phase"), op.get("iteration"))
            seen[base] = seen.get(base, 0) + 1
            row = rows.setdefault(
                (*base, seen[base]),
                {
                    "node": op.get("node"),
                    "op": op.get("op"),
                    "phase": op.get("phase"),
                    "iteration": op.get("iteration"),
                    "a": None,
                    "b": None,
                },
            )
            row[side] = op
    result = []
    for row in rows.values():
        a_op, b_op = row.pop("a") or {}, row.pop("b") or {}
        for field in ("peak_bytes", "allocated_bytes"):
            va, vb = a_op.get(field), b_op.get(field)
            row[f"{field}_a"], row[f"{field}_b"] = va, vb
            row[f"{field}_delta"] = None if va is None or vb is None else vb - va
        row["inplace_a"] = inplace_text(a_op) if a_op else "-"
        row["inplace_b"] = inplace_text(b_op) if b_op else "-"
        result.append(row)
    return result
