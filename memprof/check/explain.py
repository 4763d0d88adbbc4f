"""The words of a verdict: failure explanations in pytest-memray's style and the live-at-peak table.

Shared by `memprof check` (terminal and JUnit) and the pytest plugin, so a budget reads the
same wherever it fails:

>>> limit_message("relu-block/out_of_place", 64 * 2**20, 128 * 2**20)
'relu-block/out_of_place was limited to 64.00 MiB but peaked at 128.00 MiB'
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from memprof.units import format_bytes

# How each size metric reads in "<subject> was limited to X but <verb> Y".
_LIMIT_WORDING = {
    "peak_allocated": ("", "peaked at"),
    "peak_reserved": (" reserved", "reserved"),
    "final_allocated": (" at the end", "still held"),
    "baseline": (" of inputs and parameters", "started with"),
    "peak_over_baseline": (" above its inputs and parameters", "added"),
}

TOP_LIVE = 5


def limit_message(
    subject: str, limit: int, actual: int | None, metric: str = "peak_allocated", op: str = "<="
) -> str:
    """`<subject> was limited to <limit> but peaked at <actual>` (wording follows the metric)."""
    scope, verb = _LIMIT_WORDING.get(metric, (f" of {metric}", "measured"))
    bound = "less than " if op == "<" else ""
    if actual is None:
        return (
            f"{subject} was limited to {bound}{format_bytes(limit)}{scope} but it was not measured"
        )
    return f"{subject} was limited to {bound}{format_bytes(limit)}{scope} but {verb} {format_bytes(actual)}"


def exact_message(subject: str, expected: int, actual: int | None, metric: str) -> str:
    """A `==` size expectation that did not hold."""
    shown = "nothing (not measured)" if actual is None else format_bytes(actual)
    return f"{subject} was expected to measure {metric} == {format_bytes(expected)} but measured {shown}"


def regression_message(subject: str, baseline: int, actual: int, max_increase_pct: float) -> str:
    """`<subject> peaked at 128.00 MiB, 100.0% above its baseline of 64.00 MiB (allowed: +5%)`."""
    if baseline:
        how_much = f"{100.0 * (actual - baseline) / baseline:.1f}% above"
    else:
        how_much = f"{format_bytes(actual - baseline)} above"
    return (
        f"{subject} peaked at {format_bytes(actual)}, {how_much} its baseline of "
        f"{format_bytes(baseline)} (allowed: +{max_increase_pct:g}%)"
    )


def live_at_peak_lines(
    live: Iterable[Mapping[str, Any]], *, top: int = TOP_LIVE, total: int | None = None
) -> list[str]:
    """The largest tensors live at the peak, one line each: size, tensor, category, node (op).

    `live` is a report's `variants[].peak.live` (largest first) or anything with those keys.
    """
    rows = sorted(live, key=lambda r: -(r.get("bytes") or 0))
    if not rows:
        return []
    head = "live at the peak" + (f" ({format_bytes(total)})" if total is not None else "") + ":"
    shown = rows[:top]
    name_w = max(len(str(r.get("tensor") or "?")) for r in shown)
    cat_w = max(len(str(r.get("category") or "")) for r in shown)
    lines = [head]
    for r in shown:
        node = r.get("node")
        op = r.get("op")
        where = f"node {node}" if node else "no node"
        if op:
            where += f" ({op})"
        lines.append(
            f"  {format_bytes(r.get('bytes') or 0):>11}  {str(r.get('tensor') or '?'):<{name_w}}"
            f"  {str(r.get('category') or ''):<{cat_w}}  {where}"
        )
    if len(rows) > top:
        rest = sum(r.get("bytes") or 0 for r in rows[top:])
        lines.append(f"  {format_bytes(rest):>11}  ... {len(rows) - top} more")
    return lines


def result_lines(result, *, name_width: int = 32) -> list[str]:
    """A VariantResult as the terminal shows it: `PASS|FAIL  scenario/variant  peak SIZE` and
    then, on a pass, the budget the peak met (`peak_allocated <= 64.00 MiB`, the regression
    bound against the baseline, or `no budget on the peak`); on a failure, the first failed
    check (`metric expected, actual ...`) with the explanation indented below; then any notes.

    name_width: the column for `scenario/variant` (the CLI sizes it to the longest name).
    """
    verdict = "PASS" if result.passed else "FAIL"
    peak = result.peak_allocated_bytes
    peak_text = format_bytes(peak) if peak is not None else "not measured"
    if result.passed:
        met = result.peak_budget()
        if met is None:
            cell = "no budget on the peak"
        else:
            what = "vs baseline " if met.kind == "regression" else ""
            cell = f"{met.metric} {what}{met.expected_text}"
    else:
        head = result.failures[0]
        metric = head.metric + (" vs baseline" if head.kind == "regression" else "")
        cell = f"{metric} {_clip(head.expected_text)}, actual {_clip(head.actual_text)}"
    line = f"{verdict}  {result.name:<{name_width}}  peak {peak_text:>11}  {cell}"
    if len(result.checks) > 1:
        failed = len(result.failures)
        line += (
            f"  ({failed} of {len(result.checks)} checks failed)"
            if failed
            else f"  ({len(result.checks)} checks)"
        )
    lines = [line.rstrip()]
    lines += [f"      {text}" for text in result.explanation()]
    lines += [f"      note: {note}" for note in result.notes]
    return lines


def _clip(text: str, width: int = 40) -> str:
    """One table cell: long texts (error messages) are cut; the explanation has them whole."""
    text = " ".join(str(text).split())
    return text if len(text) <= width else text[: width - 3] + "..."
