"""Synthetic reports that follow docs/report-format.md, with every number derived from one
simulated event stream (so the timeline's highest `allocated` is `peak_allocated_bytes`, the
live storages at the peak add up to it, and so on).

The simulated program is a small MLP training step: inputs and parameters, per layer a matmul
(with a scratch buffer) and a ReLU, a loss, a backward pass and an Adam-like optimizer step.
Variant "out_of_place" keeps each ReLU's input and output until backward; "inplace" overwrites
the input, which halves the activations kept per layer; its first ReLU pays a clone, and a `skip` node reads a tensor a ReLU overwrote (a stale read).

    report = make_report(layers=4)                 # a few hundred events
    report = make_report(layers=500, iterations=40, scratch=6)   # about a million
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

BLOCK = 512  # the allocator model's rounding
SEGMENT = 2 * 1024 * 1024  # reserved memory grows by whole segments and never shrinks


def _round(n: int) -> int:
    return -(-n // BLOCK) * BLOCK


@dataclass
class _Sim:
    """A caching allocator model that records one timeline row per event."""

    rows: dict[str, list] = field(
        default_factory=lambda: {
            k: []
            for k in (
                "seq",
                "time_s",
                "action",
                "bytes",
                "requested",
                "allocated",
                "reserved",
                "node",
                "op",
                "phase",
                "category",
                "tensor",
                "iteration",
                "storage",
            )
        }
    )
    live: dict[str, tuple[int, str, str, str, int]] = field(default_factory=dict)
    storages: int = 0
    allocated: int = 0
    reserved: int = 0
    clock: float = 0.0
    phase: str = "setup"
    iteration: int = 0
    node: str | None = None
    op: str | None = None
    ops: list[dict[str, Any]] = field(default_factory=list)
    phases: list[dict[str, Any]] = field(default_factory=list)

    def _event(
        self, action: str, tensor: str, size: int, requested: int, category: str, storage: int
    ) -> None:
        self.clock += 1e-5 * (1 + (len(self.rows["seq"]) % 7) / 7)
        if action == "alloc":
            self.allocated += size
            self.reserved = max(self.reserved, -(-self.allocated // SEGMENT) * SEGMENT)
        else:
            self.allocated -= size
        r = self.rows
        r["seq"].append(len(r["seq"]))
        r["time_s"].append(round(self.clock, 9))
        r["action"].append(action)
        r["bytes"].append(size)
        r["requested"].append(requested)
        r["allocated"].append(self.allocated)
        r["reserved"].append(self.reserved)
        r["node"].append(self.node)
        r["op"].append(self.op)
        r["phase"].append(self.phase)
        r["category"].append(category)
        r["tensor"].append(tensor)
        r["iteration"].append(self.iteration)
        r["storage"].append(storage)
        if self.ops and self.ops[-1]["_open"]:
            row = self.ops[-1]
            row["allocated_bytes" if action == "alloc" else "freed_bytes"] += size
            row["peak_bytes"] = max(row["peak_bytes"], self.allocated)

    def alloc(self, tensor: str, numel: int, category: str) -> None:
        requested = numel * 4
        size = _round(requested)
        self.storages += 1
        self.live[tensor] = (size, category, self.node, self.op, self.storages)
        self._event("alloc", tensor, size, requested, category, self.storages)

    def free(self, tensor: str) -> None:
        size, category, _, _, storage = self.live.pop(tensor)
        self._event("free", tensor, size, size, category, storage)

    def begin_phase(self, name: str) -> None:
        self.phase = name
        self.phases.append(
            {
                "name": name,
                "iteration": self.iteration,
                "start_index": len(self.rows["seq"]),
                "start_s": self.clock,
            }
        )

    def end_phase(self) -> None:
        span = self.phases[-1]
        span["end_index"] = len(self.rows["seq"])  # one past the last event
        span["end_s"] = self.clock

    def begin_op(
        self,
        node: str,
        op: str,
        *,
        inplace: bool = False,
        cost: str | None = None,
        clone_bytes: int = 0,
    ) -> None:
        self.node, self.op = node, op
        self.ops.append(
            {
                "node": node,
                "op": op,
                "phase": self.phase,
                "iteration": self.iteration,
                "allocated_bytes": 0,
                "freed_bytes": 0,
                "peak_bytes": self.allocated,
                "duration_s": 0.0,
                "inplace": inplace,
                "inplace_cost": cost,
                "clone_bytes": clone_bytes,
                "_open": True,
                "_t0": self.clock,
            }
        )

    def end_op(self) -> None:
        row = self.ops[-1]
        row["_open"] = False
        self.clock += 2e-6  # the node's own work after its last event
        start = row.pop("_t0")
        row["duration_s"] = round(self.clock - start, 9)
        row["start_s"] = round(start, 9)


def simulate_variant(
    name: str,
    *,
    inplace: bool,
    layers: int,
    iterations: int,
    batch: int,
    width: int,
    scratch: int,
) -> dict[str, Any]:
    """One variant of the synthetic MLP step, as a report variant dict."""
    sim = _Sim()
    act = batch * width
    sim.begin_phase("setup")
    sim.node, sim.op = "<inputs>", "rand"
    sim.alloc("x", act, "input")
    sim.node, sim.op = "<params>", "randn"
    for i in range(layers):
        sim.alloc(f"w{i}", width * width, "parameter")
    sim.end_phase()
    baseline_bytes = sim.allocated
    warnings: list[dict[str, Any]] = []

    for it in range(iterations):
        sim.iteration = it
        sim.begin_phase("forward")
        for i in range(layers):
            sim.begin_op(f"fc{i}", "matmul")
            for k in range(scratch):
                sim.alloc(f"fc{i}.scratch{k}", act // 2, "temporary")
            sim.alloc(f"z{i}", act, "activation")
            for k in range(scratch):
                sim.free(f"fc{i}.scratch{k}")
            sim.end_op()
            clone = inplace and i == 0  # the first ReLU's input is still needed: clone
            sim.begin_op(
                f"act{i}",
                "relu",
                inplace=inplace,
                cost=("clone" if clone else "free") if inplace else None,
                clone_bytes=_round(act * 4) if clone else 0,
            )
            if not inplace:  # a new output; the input stays saved for backward
                sim.alloc(f"a{i}", act, "saved_for_backward")
            elif clone:
                sim.alloc(f"a{i}", act, "saved_for_backward")
                sim.free(f"z{i}")
            # else z{i} is overwritten in place: no new storage
            sim.end_op()
            if clone and it == 0:
                warnings.append(
                    {
                        "kind": "inplace_clone",
                        "node": f"act{i}",
                        "other_node": None,
                        "tensor": f"z{i}",
                        "message": f"act{i} runs relu_ in place on z{i}, which "
                        f"autograd still needs, so it cloned z{i} first",
                    }
                )
        sim.begin_op("loss", "mean")
        sim.alloc("loss", 1, "activation")
        sim.end_op()
        if inplace and layers > 1 and it == 0:
            warnings.append(
                {
                    "kind": "stale_read",
                    "node": "skip",
                    "other_node": "act1",
                    "tensor": "z1",
                    "message": "node skip reads z1, which node act1 overwrote in place; "
                    "it sees act1's values",
                }
            )
        sim.end_phase()

        sim.begin_phase("backward")
        sim.begin_op("loss", "mean_backward")
        grad = f"grad_out.{it}"
        sim.alloc(grad, act, "gradient")
        sim.free("loss")
        sim.end_op()
        for i in reversed(range(layers)):
            sim.begin_op(f"fc{i}", "matmul_backward")
            sim.alloc(f"w{i}.grad", width * width, "gradient")
            sim.alloc(f"grad_in{i}.{it}", act, "gradient")
            sim.free(grad)
            grad = f"grad_in{i}.{it}"
            for saved in (f"z{i}", f"a{i}"):  # what forward kept for backward
                if saved in sim.live:
                    sim.free(saved)
            sim.end_op()
        sim.free(grad)
        sim.end_phase()

        sim.begin_phase("optimizer")
        sim.node, sim.op = "<optimizer>", "adam"
        for i in range(layers):
            sim.begin_op("<optimizer>", "adam_step")
            if it == 0:
                sim.alloc(f"w{i}.exp_avg", width * width, "optimizer_state")
                sim.alloc(f"w{i}.exp_avg_sq", width * width, "optimizer_state")
            sim.alloc(f"w{i}.update", width * width, "temporary")
            sim.free(f"w{i}.update")
            sim.free(f"w{i}.grad")
            sim.end_op()
        sim.end_phase()

    return _variant_dict(sim, name, inplace, baseline_bytes, warnings)


def _variant_dict(
    sim: _Sim, name: str, inplace: bool, baseline_bytes: int, warnings: list[dict[str, Any]]
) -> dict[str, Any]:
    for row in sim.ops:
        row.pop("_open", None)
    variant = {
        "name": name,
        "params": {"inplace": inplace},
        "status": "ok",
        "error": None,
        "device": "cpu",
        "allocator": "caching",
        "baseline_bytes": baseline_bytes,
        "num_ooms": 0,
        "iterations": sim.iteration + 1,
        "duration_s": round(sim.clock, 6),
        "program_duration_s": round(sim.clock - sim.phases[0]["end_s"], 6),
        "timeline": sim.rows,
        "phases": sim.phases,
        "ops": sim.ops,
        "warnings": warnings,
        "expectations": [],
    }
    variant.update(summarise_timeline(sim.rows))
    return variant


def summarise_timeline(rows: dict[str, list]) -> dict[str, Any]:
    """The variant fields that follow from its timeline: peaks, counts, what is live at the
    peak (replaying the events up to it)."""
    allocated = rows["allocated"]
    peak_value = max(allocated)
    peak_index = allocated.index(peak_value)
    live: dict[str, tuple[int, str, str, str]] = {}
    for i in range(peak_index + 1):
        tensor = rows["tensor"][i]
        if rows["action"][i] == "alloc":
            live[tensor] = (rows["bytes"][i], rows["category"][i], rows["node"][i], rows["op"][i])
        elif rows["action"][i] == "free":
            live.pop(tensor)
    live_rows = sorted(
        (
            {"tensor": t, "bytes": b, "category": c, "node": n, "op": o}
            for t, (b, c, n, o) in live.items()
        ),
        key=lambda r: (-r["bytes"], r["tensor"]),
    )
    by_category: dict[str, int] = {}
    for r in live_rows:
        by_category[r["category"]] = by_category.get(r["category"], 0) + r["bytes"]
    return {
        "peak_allocated_bytes": peak_value,
        "peak_reserved_bytes": max(rows["reserved"]),
        "final_allocated_bytes": allocated[-1],
        "num_allocs": rows["action"].count("alloc"),
        "num_frees": rows["action"].count("free"),
        "num_ooms": rows["action"].count("oom"),
        "peak": {
            "event_index": peak_index,
            "allocated_bytes": peak_value,
            "reserved_bytes": rows["reserved"][peak_index],
            "live": live_rows,
            "by_category": by_category,
        },
    }


def make_report(
    *,
    scenario: str = "mlp-train",
    run_id: str | None = None,
    created_at: str = "2026-11-21T05:15:00Z",
    layers: int = 4,
    iterations: int = 1,
    batch: int = 1024,
    width: int = 256,
    scratch: int = 1,
    variants: tuple[str, ...] = ("out_of_place", "inplace"),
) -> dict[str, Any]:
    """A complete report with the given variants ("out_of_place" is the baseline)."""
    stamp = created_at.replace("-", "").replace(":", "")
    digest = hashlib.sha256(f"{scenario}{layers}{iterations}{created_at}".encode()).hexdigest()
    run_id = run_id or f"{stamp}-{scenario}-{digest[:6]}"
    built = [
        simulate_variant(
            name,
            inplace=(name != "out_of_place"),
            layers=layers,
            iterations=iterations,
            batch=batch,
            width=width,
            scratch=scratch,
        )
        for name in variants
    ]
    baseline = variants[0]
    base_peak = built[0]["peak_allocated_bytes"]
    rows = []
    for v in built[1:]:
        peak = v["peak_allocated_bytes"]
        rows.append(
            {
                "variant": v["name"],
                "peak_allocated_bytes": peak,
                "delta_bytes": peak - base_peak,
                "ratio": peak / base_peak,
                "saving_pct": round(100 * (base_peak - peak) / base_peak, 3),
                "duration_s": v["duration_s"],
            }
        )
        v["expectations"] = [
            {
                "metric": "peak_allocated",
                "op": "<",
                "expected": base_peak,
                "actual": peak,
                "passed": peak < base_peak,
                "message": f"peak_allocated < {base_peak} (actual {peak})",
            }
        ]
    return {
        "schema_version": 1,
        "tool": {"name": "memprof", "version": "0.1.0"},
        "run_id": run_id,
        "created_at": created_at,
        "scenario": {
            "name": scenario,
            "description": f"{layers}-layer MLP training step, {iterations} iteration(s)",
            "path": f"scenarios/{scenario}.yaml",
            "sha256": digest,
        },
        "environment": {
            "device": "cpu",
            "backend": "numpy",
            "allocator": "caching",
            "python": "3.11.7",
            "numpy": "2.4.6",
            "cupy": None,
            "platform": "Linux",
            "git_commit": None,
        },
        "status": "ok",
        "baseline_variant": baseline,
        "variants": built,
        "comparison": {"baseline": baseline, "rows": rows},
    }


def make_failed_report(**kwargs: Any) -> dict[str, Any]:
    """A report whose "inplace" variant ran out of memory halfway (status failed)."""
    report = make_report(**kwargs)
    variant = report["variants"][1]
    cut = len(variant["timeline"]["seq"]) // 2
    timeline = {k: v[: cut + 1] for k, v in variant["timeline"].items()}
    refused = 64 * 1024  # the request that did not fit: an "oom" event changes no totals
    for key, value in (
        ("seq", cut + 1),
        ("time_s", timeline["time_s"][-1] + 1e-5),
        ("action", "oom"),
        ("bytes", refused),
        ("requested", refused),
        ("allocated", timeline["allocated"][-1]),
        ("reserved", timeline["reserved"][-1]),
        ("node", "fc2"),
        ("op", "matmul"),
        ("phase", timeline["phase"][-1]),
        ("category", "activation"),
        ("tensor", "z2"),
        ("iteration", 0),
        ("storage", -1),
    ):
        timeline[key].append(value)
    variant["timeline"] = timeline
    variant.update(summarise_timeline(timeline))
    variant["phases"] = [p for p in variant["phases"] if p["start_index"] <= cut]
    variant["phases"][-1]["end_index"] = min(variant["phases"][-1]["end_index"], cut + 2)
    variant["ops"] = variant["ops"][: len(variant["ops"]) // 2]
    variant["expectations"] = []
    variant["status"] = "oom"
    variant["error"] = {
        "type": "OutOfMemoryError",
        "message": "tried to allocate 64.00 KiB with 0 bytes free of a 1.00 MiB budget",
        "node": "fc2",
    }
    report["status"] = "failed"
    report["comparison"]["rows"][0]["peak_allocated_bytes"] = variant["peak_allocated_bytes"]
    return report
