"""The runner on the engine: attribution, temporaries, stale reads, in-place costs, failures."""

import json
import textwrap

import jsonschema

from memprof.runner import progress_fraction, run_loaded, run_scenario
from memprof.scenario import load_scenario
from memprof.schemas import REPORT, read_schema

MiB = 2**20


def scenario(tmp_path, text, name="s.yaml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


RELU = """\
name: relu
inputs:
  x: {shape: [1, 64, 64, 64], init: rand}
program:
  - {id: act, op: relu, in: x, out: y, inplace: $inplace}
variants:
  inplace: {inplace: true}
  out_of_place: {inplace: false}
baseline: out_of_place
"""


def by_name(report):
    return {v["name"]: v for v in report["variants"]}


def rows(variant):
    t = variant["timeline"]
    return [dict(zip(t, values, strict=True)) for values in zip(*t.values(), strict=True)]


def test_relu_peaks_and_attribution(tmp_path):
    report = run_scenario(scenario(tmp_path, RELU))
    v = by_name(report)
    assert v["inplace"]["peak_allocated_bytes"] == MiB
    assert v["out_of_place"]["peak_allocated_bytes"] == 2 * MiB
    assert v["out_of_place"]["baseline_bytes"] == MiB
    inp, out, release = rows(v["out_of_place"])
    assert (inp["node"], inp["phase"], inp["category"], inp["tensor"]) == (
        "<inputs>",
        "setup",
        "input",
        "x",
    )
    assert (
        out["node"],
        out["op"],
        out["phase"],
        out["category"],
        out["tensor"],
        out["iteration"],
    ) == ("act", "relu", "forward", "activation", "y", 0)
    # the step's names die at its end; inputs live on
    assert (release["action"], release["phase"], release["tensor"], release["category"]) == (
        "free",
        "release",
        "y",
        "activation",
    )
    assert v["out_of_place"]["final_allocated_bytes"] == MiB
    assert [r["inplace_cost"] for r in v["inplace"]["ops"]] == ["free"]
    assert [r["inplace_cost"] for r in v["out_of_place"]["ops"]] == [None]
    comp = {r["variant"]: r for r in report["comparison"]["rows"]}
    assert (comp["inplace"]["delta_bytes"], comp["inplace"]["saving_pct"]) == (-MiB, 50.0)


def test_timeline_totals_are_consistent_with_the_allocator(tmp_path):
    v = by_name(run_scenario(scenario(tmp_path, RELU)))["out_of_place"]
    running = 0
    for r in rows(v):
        running += r["bytes"] if r["action"] == "alloc" else -r["bytes"]
        assert r["allocated"] == running
    assert max(r["allocated"] for r in rows(v)) == v["peak_allocated_bytes"]
    assert v["peak"]["by_category"] == {"input": MiB, "activation": MiB}


def test_each_variant_starts_from_a_fresh_allocator(tmp_path):
    path = scenario(tmp_path, RELU)
    first = by_name(run_scenario(path))
    again = by_name(run_scenario(path, variants=["out_of_place", "inplace"]))
    for name in ("inplace", "out_of_place"):
        assert again[name]["peak_allocated_bytes"] == first[name]["peak_allocated_bytes"]
        assert rows(again[name])[0]["allocated"] == MiB
        assert rows(again[name])[0]["seq"] == 0


def test_allocations_freed_within_a_node_are_temporaries(tmp_path):
    v = by_name(
        run_scenario(
            scenario(
                tmp_path,
                """\
        name: t
        inputs:
          x: {shape: [256, 256]}
          y: {shape: [256, 256]}
        modules:
          loss: {type: MSELoss}
        program:
          - {id: s, module: loss, in: [x, y]}
        """,
            )
        )
    )["default"]
    cats = {(r["action"], r["category"], r["tensor"]) for r in rows(v) if r["node"] == "s"}
    assert ("alloc", "activation", "s") in cats
    assert ("alloc", "temporary", None) in cats and ("free", "temporary", None) in cats
    [row] = v["ops"]
    temps = sum(r["bytes"] for r in rows(v) if r["action"] == "free" and r["node"] == "s")
    assert row["allocated_bytes"] == 256 * 256 * 4 + temps and row["freed_bytes"] == temps


STALE = """\
name: stale
inputs:
  x: {shape: [1, 2, 3, 4], init: rand}
program:
  - {id: x1, op: mul, in: x, args: {other: 2.0}}
  - {id: h, op: relu, in: x1, inplace: true}
  - {id: y, op: sigmoid, in: x1}
"""


def test_stale_read_after_an_in_place_write_is_a_warning_naming_both_nodes(tmp_path):
    v = by_name(run_scenario(scenario(tmp_path, STALE)))["default"]
    assert v["status"] == "ok"
    assert v["warnings"] == [
        {
            "kind": "stale_read",
            "node": "y",
            "other_node": "h",
            "tensor": "x1",
            "iteration": 0,
            "message": "node y reads x1, which node h overwrote in place; it sees h's values",
        }
    ]


def test_strict_turns_a_stale_read_at_run_time_into_an_error(tmp_path):
    loaded = load_scenario(scenario(tmp_path, "strict: true\n" + STALE), check_shapes=False)
    v = run_loaded(loaded)["variants"][0]
    assert v["status"] == "error"
    assert v["error"] == {
        "type": "StaleReadError",
        "node": "y",
        "message": "node y reads x1, which node h overwrote in place; it sees h's values (strict: true)",
    }
    assert [r["node"] for r in v["ops"]] == ["x1", "h"]  # measured up to the failure


def test_in_place_on_an_input_is_stale_in_the_next_iteration(tmp_path):
    v = by_name(
        run_scenario(
            scenario(
                tmp_path,
                """\
        name: it
        inputs:
          x: {shape: [8]}
        program:
          - {id: act, op: relu, in: x, inplace: true}
        iterations: 2
        """,
            )
        )
    )["default"]
    assert [(w["node"], w["other_node"], w["tensor"], w["iteration"]) for w in v["warnings"]] == [
        ("act", "act", "x", 1)
    ]


def test_in_place_that_needs_its_input_pays_a_clone(tmp_path):
    v = by_name(
        run_scenario(
            scenario(
                tmp_path,
                """\
        name: sin
        inputs:
          a: {shape: [1024], requires_grad: true}
        program:
          - {id: x, op: mul, in: a, args: {other: 2.0}}
          - {id: h, op: sin, in: x, inplace: true}
          - {id: r, op: relu, in: h, inplace: true}
          - {id: loss, op: sum, in: r}
        phases: [forward, {backward: loss}]
        """,
            )
        )
    )["default"]
    ops = {r["node"]: r for r in v["ops"]}
    assert (ops["h"]["inplace_cost"], ops["h"]["clone_bytes"]) == ("clone", 4096)
    assert (ops["r"]["inplace_cost"], ops["r"]["clone_bytes"]) == ("free", 0)
    clone = [r for r in rows(v) if r["node"] == "h" and r["action"] == "alloc"]
    assert [(r["bytes"], r["category"]) for r in clone] == [(4096, "saved_for_backward")]
    assert [w["kind"] for w in v["warnings"]] == ["inplace_clone"]
    assert "4.00 KiB clone" in v["warnings"][0]["message"]
    grads = [r for r in rows(v) if r["tensor"] == "a.grad"]
    assert grads and grads[0]["category"] == "gradient" and grads[0]["phase"] == "backward"


def test_out_of_memory_reports_what_it_measured_up_to_the_failure(tmp_path):
    path = scenario(
        tmp_path, RELU + "memory_limit: 1.5 MiB\nexpect:\n  out_of_place: {status: oom}\n"
    )
    report = run_scenario(path)
    v = by_name(report)
    assert v["inplace"]["status"] == "ok"
    oom = v["out_of_place"]
    assert oom["status"] == "oom"
    assert oom["error"]["type"] == "OutOfMemoryError" and oom["error"]["node"] == "act"
    assert oom["peak_allocated_bytes"] == MiB
    assert [r["action"] for r in rows(oom)] == ["alloc", "oom"]
    assert rows(oom)[1]["requested"] == MiB
    assert [p["name"] for p in oom["phases"]] == ["setup", "forward"]
    assert report["status"] == "ok"  # the OOM was expected


def test_unexpected_error_fails_the_report(tmp_path):
    report = run_scenario(scenario(tmp_path, RELU + "memory_limit: 1.5 MiB\n"))
    assert report["status"] == "failed"


def test_progress_events_follow_variants_iterations_and_nodes(tmp_path):
    events = []
    report = run_scenario(scenario(tmp_path, RELU), progress=events.append)
    stages = [(e["variant"], e["stage"], e["iteration"], e["node"]) for e in events]
    assert stages == [
        ("inplace", "start", 0, 0),
        ("inplace", "node", 0, 1),
        ("inplace", "iteration", 1, 0),
        ("inplace", "done", 1, 0),
        ("out_of_place", "start", 0, 0),
        ("out_of_place", "node", 0, 1),
        ("out_of_place", "iteration", 1, 0),
        ("out_of_place", "done", 1, 0),
    ]
    fractions = [progress_fraction(e) for e in events]
    assert fractions == [0.0, 0.5, 0.5, 0.5, 0.5, 1.0, 1.0, 1.0]
    assert fractions == sorted(fractions)
    assert not (tmp_path / "runs").exists()  # the runner saves nothing (record_run does)
    assert report["status"] == "ok"


def test_progress_moves_within_an_iteration_node_by_node():
    event = {"stage": "node", "index": 1, "total": 2, "iterations": 4, "nodes": 5}
    assert progress_fraction({**event, "iteration": 0, "node": 0}) == 0.5
    assert progress_fraction({**event, "iteration": 2, "node": 1}) == 0.5 + 0.5 * (2.2 / 4)
    assert progress_fraction({**event, "stage": "done"}) == 1.0


def test_reports_match_the_shipped_schema(tmp_path):
    report = run_scenario(scenario(tmp_path, STALE))
    jsonschema.Draft202012Validator(read_schema(REPORT)).validate(json.loads(json.dumps(report)))
    assert report["scenario"]["path"] == str(tmp_path / "s.yaml")
    assert report["environment"]["backend"] == "numpy"


def test_device_and_allocator_overrides(tmp_path):
    report = run_scenario(scenario(tmp_path, RELU), device="meta", allocator="caching")
    v = by_name(report)["out_of_place"]
    assert (v["device"], v["allocator"]) == ("meta", "caching")
    assert report["environment"]["backend"] == "meta"
    assert v["peak_reserved_bytes"] >= v["peak_allocated_bytes"] == 2 * MiB
