"""Per-node differences between two variants (of one run or of two runs)."""

from __future__ import annotations

from typing import Any

import numpy as np

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


# --- aligning two timelines by node and phase ------------------------------------------------

StepKey = tuple  # (phase, node, occurrence of that (phase, node) run)


def steps_of(arrays) -> list[tuple[StepKey, int, int]]:
    """The timeline cut into steps: maximal runs of consecutive events of one (phase, node),
    each keyed with its occurrence, as (key, first event, last event)."""
    n = arrays.n
    if n == 0:
        return []
    node_codes, phase_codes = arrays.node.codes, arrays.phase.codes
    change = np.flatnonzero(
        (node_codes[1:] != node_codes[:-1]) | (phase_codes[1:] != phase_codes[:-1])
    )
    firsts = np.concatenate(([0], change + 1))
    lasts = np.concatenate((change, [n - 1]))
    seen: dict[tuple, int] = {}
    steps = []
    for first, last in zip(firsts.tolist(), lasts.tolist(), strict=True):
        base = (arrays.phase.names[phase_codes[first]], arrays.node.names[node_codes[first]])
        seen[base] = seen.get(base, 0) + 1
        steps.append(((*base, seen[base]), first, last))
    return steps


def union_order(sequences: list[list[StepKey]]) -> list[StepKey]:
    """Every key of every sequence once, each sequence's keys in its own order: the steps both
    ran line up, a step only one ran sits where that one ran it."""
    order: list[StepKey] = []
    for seq in sequences:
        if not order:
            order = list(dict.fromkeys(seq))
            continue
        where = {k: i for i, k in enumerate(order)}
        merged: list[StepKey] = []
        pending: list[StepKey] = []  # this side's own steps, placed before its next shared one
        p = 0
        for key in seq:
            pos = where.get(key)
            if pos is None:
                pending.append(key)
            elif pos >= p:
                merged.extend(order[p:pos])
                merged.extend(pending)
                merged.append(order[pos])
                pending = []
                p = pos + 1
        merged.extend(order[p:])
        merged.extend(pending)
        order = list(dict.fromkeys(merged))
    return order


def align_by_step(sides: list[tuple[Any, dict[str, Any]]]) -> dict[str, Any]:
    """x positions that line two (or more) timelines up by step (phase, node, occurrence)
    instead of event index: step i spans [i, i + 1) on every side, its events spread evenly
    inside it, so variants with different event counts match node for node.

    sides: (TimelineArrays, reduced series). Returns {"xs": [x per kept sample, per side],
    "ends": [x where each side's last step ends], "peaks": [peak x per side],
    "tickvals", "ticktext"} for charts.overlay_figure(x="step").
    """
    all_steps = [steps_of(arrays) for arrays, _ in sides]
    order = union_order([[k for k, _, _ in steps] for steps in all_steps])
    pos = {k: i for i, k in enumerate(order)}
    xs, ends, peaks = [], [], []
    for (arrays, series), steps in zip(sides, all_steps, strict=True):
        event_x = np.zeros(arrays.n, dtype=np.float64)
        end = 0.0
        for key, first, last in steps:
            count = last - first + 1
            event_x[first : last + 1] = pos[key] + np.arange(count) / count
            end = max(end, pos[key] + 1.0)
        index = np.asarray(series["index"], dtype=np.int64) if series else np.zeros(0, np.int64)
        xs.append(np.round(event_x[index], 6).tolist())
        ends.append(end)
        peak = series["peak"]["event_index"] if series else None
        peaks.append(float(event_x[peak]) if peak is not None and peak >= 0 else 0.0)
    return {
        "xs": xs,
        "ends": ends,
        "peaks": peaks,
        "tickvals": [i + 0.5 for i in range(len(order))],
        "ticktext": [
            f"{node}" if phase != "backward" else f"{node} (bw)" for phase, node, _ in order
        ],
        "steps": order,
    }
