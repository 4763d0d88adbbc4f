"""`memprof advise`: which ops of a scenario can run in place, proven by re-running, and what each
saves (docs/advise.md; the JSON is described in docs/report-format.md, "Advice").

>>> advice = advise("scenarios/relu.yaml", variant="out_of_place")
>>> [(c["node"], c["verdict"], c["saving_bytes"]) for c in advice["candidates"]]
[('act', 'safe', 67108864)]

1. one run of the variant records what each node read, what each autograd node saved (and at
   which version) and every value (memprof/advise/analysis.py; a Python scenario's module calls:
   memprof/advise/python.py); each candidate gets a verdict;
2. each candidate is re-run switched alone, then the safe ones together (memprof/advise/proof.py):
   a safe verdict stands only if the re-run reproduces every value bitwise; its measured change
   of peak allocated (and reserved) bytes is its saving;
3. with a budget, the safe candidates are added largest saving first, each set re-measured, until
   the peak is within the budget (or all of them are not enough); then each one the others make
   unnecessary is left out again (re-measured), so no candidate of the answer can be dropped.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

from memprof.errors import InvalidInput


def advise(
    path: str | os.PathLike,
    *,
    variant: str | None = None,
    device: str | None = None,
    budget: int | None = None,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """The advice for one variant of a YAML or Python scenario (default: its baseline), as the
    JSON of `memprof advise --json`. Raises InvalidInput for a bad scenario or one advice cannot
    run."""
    from memprof.scenario import load_scenario

    path = str(path)
    t0 = time.perf_counter()
    loaded = load_scenario(path, device=device)
    chosen = _pick_variant(loaded, variant)
    return advise_loaded(loaded, chosen, budget=budget, progress=progress, t0=t0)


def _pick_variant(loaded, name: str | None):
    names = [v.name for v in loaded.variants]
    if name is None:
        name = loaded.baseline or names[0]
    for v in loaded.variants:
        if v.name == name:
            return v
    from memprof.scenario.catalog import suggest

    raise InvalidInput(
        f"{loaded.path}: unknown variant {name!r}{suggest(name, names)}; "
        f"the scenario defines: {', '.join(names)}"
    )


class _ScenarioRuns:
    """How advice runs a YAML scenario's variant: recorded, and with candidates switched."""

    def __init__(self, variant):
        self.variant = variant

    def record(self):
        from memprof.advise.proof import run_once

        return run_once(self.variant)

    def switched(self, ids):
        from memprof.advise.proof import run_switched

        return run_switched(self.variant, ids)

    def verdicts(self, ref):
        from memprof.advise.analysis import verdicts

        return verdicts(self.variant.spec, ref.facts, ref.state, ref.inputs)

    def order(self, cid: str) -> tuple:
        return _order(self.variant, cid)

    def levers(self, ref, say) -> list[dict[str, Any]]:
        row = _optimizer_in_backward(self.variant, ref, say)
        return [row] if row is not None else []

    def together(self, ref, lever: dict[str, Any], ids: list[str], say) -> dict[str, Any] | None:
        """A safe lever re-run with the switched nodes in place as well (what `--write` writes
        into variant `advised`), compared as the lever alone is; None when no node is switched."""
        from memprof.advise.proof import difference, run_switched, with_optimizer_in_backward

        if not ids or lever["verdict"] != "safe":
            return None
        say(f"re-running with the optimizer stepped in backward and {len(ids)} nodes in place")
        res = run_switched(with_optimizer_in_backward(self.variant), ids)
        diff = difference(ref, res, gradients=False)
        if diff is not None:
            return {
                "verdict": "unsafe",
                "reason": f"refuted by the re-run: {diff[0]}",
                "peak_after": res.peak,
                "peak_reserved_after": res.peak_reserved,
            }
        return {
            "verdict": "safe",
            "reason": "every value after is the original run's",
            "peak_after": res.peak,
            "peak_reserved_after": res.peak_reserved,
        }


def _optimizer_in_backward(variant, ref, say) -> dict[str, Any] | None:
    """The optimizer stepped in backward (PyTorch's pattern: a per-parameter step in each
    parameter's post-accumulate-grad hook, so each gradient is freed as soon as it is used),
    re-run and compared as an in-place candidate is; None when the variant has no optimizer
    phase to move, no backward, or steps in backward already."""
    from memprof.advise.proof import difference, run_once, with_optimizer_in_backward

    phases = variant.spec.phases
    optimizers = [p.optimizer for p in phases if getattr(p, "optimizer", None) is not None]
    if not any(hasattr(p, "backward") for p in phases) or all(o.in_backward for o in optimizers):
        return None
    backwards = sum(1 for p in phases if hasattr(p, "backward"))
    first_backward = next(i for i, p in enumerate(phases) if hasattr(p, "backward"))
    first_optimizer = next(i for i, p in enumerate(phases) if getattr(p, "optimizer", None))
    say("re-running with the optimizer stepped in backward")
    res = run_once(with_optimizer_in_backward(variant))
    diff = difference(ref, res, gradients=False)
    if diff is None and (backwards > 1 or first_optimizer < first_backward):
        # (on meta, with no values to compare, the re-run cannot see it)
        diff = (
            "an iteration's optimizer step reads the gradients of "
            + (f"{backwards} backward phases" if backwards > 1 else "the previous iteration")
            + "; stepped in backward, each backward steps with its own",
            [],
        )
    row = {
        "lever": "optimizer_in_backward",
        "setting": "optimizer: {in_backward: true}",
        "verdict": "safe",
        "reason": "each parameter's update reads its own gradient only: stepped as soon as the "
        "gradient is accumulated, every value after is the original run's",
        "saving_bytes": ref.peak - res.peak,
        "reserved_saving_bytes": ref.peak_reserved - res.peak_reserved,
        "peak_after": res.peak,
        "proven": True,
    }
    if diff is not None:
        row.update(verdict="unsafe", reason=f"refuted by the re-run: {diff[0]}")
        row.update(saving_bytes=0, reserved_saving_bytes=0)
    return row


def written_levers(advice: dict[str, Any]) -> tuple[str, ...]:
    """The levers `--write` puts into variant `advised`: each one proven safe alone and, where
    nodes are switched too, together with them."""
    return tuple(
        lv["lever"]
        for lv in advice.get("levers", [])
        if lv["verdict"] == "safe"
        and (lv.get("together") is None or lv["together"]["verdict"] == "safe")
    )


def advise_loaded(loaded, variant, *, budget=None, progress=None, t0=None) -> dict[str, Any]:
    from memprof.advise.analysis import REFUTED
    from memprof.advise.proof import difference

    if getattr(loaded, "definition", None) is not None:  # a Python scenario file
        from memprof.advise.python import PythonRuns

        runs_of = PythonRuns(loaded, variant)
    else:
        runs_of = _ScenarioRuns(variant)
    say = progress or (lambda _msg: None)
    t0 = time.perf_counter() if t0 is None else t0
    say(f"recording {variant.name}")
    ref = runs_of.record()
    if ref.entry["status"] != "ok":
        err = ref.entry.get("error") or {}
        raise InvalidInput(
            f"{loaded.path}: variant {variant.name} fails before any switch "
            f"({err.get('type')}: {err.get('message')}); advise needs a run that succeeds"
        )
    found = runs_of.verdicts(ref)
    runs = 1
    rows: list[dict[str, Any]] = []
    for v in found:
        say(f"re-running with {v.node} in place")
        res = runs_of.switched([v.node])
        runs += 1
        diff = difference(ref, res)
        row = {
            "node": v.node,
            "op": v.op,
            "verdict": v.verdict,
            "reason": v.reason,
            "involves": v.involves,
            "clone_bytes": v.clone_bytes,
            "saving_bytes": 0,
            "reserved_saving_bytes": 0,
            "proven": False,
            "kind": v.kind,
        }
        if v.verdict == "safe":
            if diff is None:
                row["proven"] = True
                row["clone_bytes"] = res.clone_bytes(v.node)
                row["saving_bytes"] = ref.peak - res.peak
                row["reserved_saving_bytes"] = ref.peak_reserved - res.peak_reserved
                row["reason"] = "nothing reads or keeps the operand afterwards"
                if row["clone_bytes"]:  # as measured in place, not as the out-of-place form saved
                    row["reason"] += "; in place, autograd keeps a clone of it for backward"
            else:
                text, nodes = diff
                row.update(verdict="unsafe", kind=REFUTED, involves=nodes, proven=True)
                row["reason"] = f"{REFUTED}: {text}"
        else:
            # the re-run shows the hazard (an error, a stale read, a value that differs), or the
            # verdict rests on the recorded facts alone
            row["proven"] = diff is not None
        rows.append(row)

    safe = sorted(
        (r for r in rows if r["verdict"] == "safe"),
        key=lambda r: (-r["saving_bytes"], runs_of.order(r["node"])),
    )
    combined, after, extra = _combine(ref, runs_of, [r["node"] for r in safe], say)
    runs += extra
    budget_info = None
    if budget is not None:
        budget_info, after, extra = _fit_budget(ref, runs_of, combined, after, budget, say)
        runs += extra
    switched = _in_order(runs_of, budget_info["nodes"] if budget_info else combined)
    levers = runs_of.levers(ref, say) if hasattr(runs_of, "levers") else []
    runs += len(levers)
    for lever in levers:
        lever["together"] = runs_of.together(ref, lever, switched, say)
        runs += lever["together"] is not None
    return {
        "scenario": loaded.name,
        "variant": variant.name,
        "peak_before": ref.peak,
        "peak_after": after.peak,
        "candidates": rows,
        "path": loaded.path,
        "device": ref.entry["device"],
        "proof": "versions" if ref.entry["device"] == "meta" else "bitwise",
        "peak_reserved_before": ref.peak_reserved,
        "peak_reserved_after": after.peak_reserved,
        "switched": switched,
        "budget": budget_info,
        "levers": levers,
        "runs": runs,
        "duration_s": round(time.perf_counter() - t0, 3),
    }


def _order(variant, cid: str) -> tuple:
    """Program order of a candidate (a Sequential's layers after their node, in layer order)."""
    from memprof.advise.proof import parse_id

    nid, path = parse_id(cid)
    for i, node in enumerate(variant.spec.program):
        if node.id == nid:
            return (i, path)
    return (len(variant.spec.program), path)


def _in_order(runs_of, ids) -> list[str]:
    return sorted(ids, key=runs_of.order)


def _combine(ref, runs_of, ids: list[str], say):
    """All safe candidates together; if that set fails the proof, the largest prefix-greedy set
    that passes (largest saving first). Returns (nodes, run result, re-runs made)."""
    from memprof.advise.proof import difference

    if not ids:
        return [], ref, 0
    say(f"re-running with {len(ids)} candidates in place")
    res = runs_of.switched(ids)
    if difference(ref, res) is None:
        return list(ids), res, 1
    runs, kept, best = 1, [], ref
    for n in ids:
        trial = runs_of.switched(kept + [n])
        runs += 1
        if difference(ref, trial) is None:
            kept.append(n)
            best = trial
    return kept, best, runs


def _fit_budget(ref, runs_of, combined: list[str], all_res, budget: int, say):
    """The fewest safe candidates (largest saving first) whose re-run peak is within `budget`."""
    from memprof.advise.proof import difference
    from memprof.units import format_bytes

    info = {"bytes": budget, "met": False, "nodes": [], "peak": ref.peak, "message": ""}
    if ref.peak <= budget:
        info.update(met=True, message=f"the peak {format_bytes(ref.peak)} is already within it")
        return info, ref, 0
    if all_res.peak > budget:
        info.update(
            nodes=list(combined),
            peak=all_res.peak,
            message=(
                f"in-place alone cannot: with all {len(combined)} safe candidates in place the "
                f"peak is {format_bytes(all_res.peak)}, over {format_bytes(budget)}"
            ),
        )
        return info, all_res, 0
    runs, kept = 0, []
    for n in combined:
        trial_ids = kept + [n]
        say(f"re-running with {len(trial_ids)} candidates in place for the budget")
        res = runs_of.switched(trial_ids)
        runs += 1
        if difference(ref, res) is not None:
            continue
        kept = trial_ids
        if res.peak <= budget:
            kept, res, extra = _prune(ref, runs_of, kept, res, budget, say)
            runs += extra
            info.update(
                met=True,
                nodes=_in_order(runs_of, kept),
                peak=res.peak,
                message=(
                    f"{len(kept)} of {len(combined)} safe candidates bring the peak to "
                    f"{format_bytes(res.peak)}, within {format_bytes(budget)}"
                    + ("" if len(kept) == 1 else "; leaving out any one of them breaks it")
                ),
            )
            return info, res, runs
    info.update(nodes=list(combined), peak=all_res.peak, met=all_res.peak <= budget)
    info["message"] = f"all {len(combined)} safe candidates are needed"
    return info, all_res, runs


def _prune(ref, runs_of, kept: list[str], res, budget: int, say):
    """Drop from a set that meets the budget every candidate the others make unnecessary.

    The largest-saving-first prefix can keep an early candidate whose effect later ones cover
    (savings alone do not add up: the peak is a maximum over time). Try leaving out each one,
    smallest saving first; keep the set when it still meets the budget and passes the proof.
    The result is minimal: no single candidate can be left out. Returns (set, run, re-runs)."""
    from memprof.advise.proof import difference

    runs = 0
    for n in reversed(list(kept)):
        if len(kept) == 1:
            break
        trial = [k for k in kept if k != n]
        say(f"re-running without {n} for the budget")
        r = runs_of.switched(trial)
        runs += 1
        if r.peak <= budget and difference(ref, r) is None:
            kept, res = trial, r
    return kept, res, runs


__all__ = ["advise", "advise_loaded"]
