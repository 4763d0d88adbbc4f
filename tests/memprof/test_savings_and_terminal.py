"""Numbers that must not mislead, and the terminal output: savings against the variant that
differs only in place, none for failed variants, one wording, `check` PASS lines with the peak
and budget, one tensor per line at the peak, --top/--all, a rule between scenarios."""

from __future__ import annotations

import json
import textwrap

import pytest
from typer.testing import CliRunner

from memprof.cli.app import app
from memprof.reports.saving import (
    best_saving_pct,
    inplace_params,
    references,
    row_saving_text,
    saving_text,
)
from memprof.runner import run_scenario

runner = CliRunner()
KiB = 1024

MATRIX = """\
name: matrix
device: meta
inputs:
  x: {shape: [$batch, 1024], init: rand}
program:
  - {id: h1, op: relu, in: x, inplace: $inplace}
  - {id: h2, op: sigmoid, in: h1, inplace: $inplace}
matrix:
  batch: [1, 4]
  inplace: [false, true]
baseline: batch=4,inplace=false
"""


def write(tmp_path, text, name="s.yaml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


@pytest.fixture(scope="module")
def matrix_report(tmp_path_factory):
    return run_scenario(write(tmp_path_factory.mktemp("m"), MATRIX))


def rows(report):
    return {r["variant"]: r for r in report["comparison"]["rows"]}


def test_a_matrix_variant_is_compared_with_its_out_of_place_twin_not_another_batch(
    matrix_report,
):
    r = rows(matrix_report)
    assert r["batch=1,inplace=true"]["compared_with"] == "batch=1,inplace=false"
    assert r["batch=4,inplace=true"]["compared_with"] == "batch=4,inplace=false"
    # out of place: each is a reference itself, never batch=1 against batch=4
    assert r["batch=1,inplace=false"]["compared_with"] is None
    assert r["batch=4,inplace=false"]["compared_with"] is None
    # batch 1: x 4 KiB, h1 and h2 4 KiB each out of place; in place only x
    assert r["batch=1,inplace=false"]["peak_allocated_bytes"] == 12 * KiB
    assert r["batch=1,inplace=true"]["peak_allocated_bytes"] == 4 * KiB
    assert r["batch=1,inplace=true"]["saving_pct"] == pytest.approx(100 * 8 / 12, abs=1e-3)
    assert r["batch=4,inplace=true"]["saving_pct"] == pytest.approx(100 * 32 / 48, abs=1e-3)
    assert row_saving_text(r["batch=1,inplace=true"]) == "saves 8.00 KiB (66.7%)"
    assert row_saving_text(r["batch=1,inplace=false"]) == ""
    # the runs page's best saving follows the same rule (not batch=1 against batch=4: 91.7%)
    assert best_saving_pct(matrix_report["comparison"]) == pytest.approx(66.667, abs=1e-3)


def test_named_variants_without_an_in_place_twin_are_compared_with_the_baseline():
    variants = [
        {"name": "sgd", "params": {"optimizer": "sgd"}},
        {"name": "adam", "params": {"optimizer": "adam"}},
    ]
    assert references(variants, inplace=set(), baseline="sgd") == {"sgd": None, "adam": "sgd"}
    named = [
        {"name": "inplace", "params": {"inplace": True}},
        {"name": "out_of_place", "params": {"inplace": False}},
    ]
    assert references(named, {"inplace"}, "inplace") == {
        "inplace": "out_of_place",
        "out_of_place": None,
    }


def test_in_place_parameters_are_those_substituted_into_inplace_fields():
    data = {
        "program": [{"id": "a", "op": "relu", "inplace": "$ip"}, {"id": "b", "inplace": True}],
        "modules": {"act": {"type": "ReLU", "inplace": "$act_ip"}},
        "inputs": {"x": {"shape": ["$batch", 3]}},
        "matrix": {"inplace": [True, False]},
    }
    assert inplace_params(data) == {"ip", "act_ip"}


def test_a_failed_variant_or_reference_has_no_saving(tmp_path):
    text = MATRIX.replace("device: meta\n", "device: cpu\nmemory_limit: 10 KiB\n").replace(
        "batch: [1, 4]", "batch: [1, 2]"
    )
    report = run_scenario(write(tmp_path, text.replace("batch=4", "batch=2")))
    r = rows(report)
    # batch 2 out of place needs 24 KiB: out of memory; its in-place twin (8 KiB) finishes
    assert r["batch=2,inplace=false"]["status"] == "oom"
    assert r["batch=2,inplace=true"]["status"] == "ok"
    for name in ("batch=2,inplace=false", "batch=2,inplace=true"):
        assert r[name]["saving_pct"] is None and r[name]["ratio"] is None
    assert row_saving_text(r["batch=2,inplace=true"]) == (
        "not comparable (batch=2,inplace=false oom)"
    )
    # batch 1 out of place peaks at 12 KiB too: over the limit as well
    assert row_saving_text(r["batch=1,inplace=true"]).startswith("not comparable")
    assert best_saving_pct(report["comparison"]) is None


@pytest.mark.parametrize(
    ("peak", "reference", "text"),
    [
        (64, 128, "saves 64 bytes (50.0%)"),
        (129, 128, "costs 1 bytes (0.8%)"),
        (128, 128, "same peak"),
    ],
)
def test_one_wording_for_savings_and_costs(peak, reference, text):
    assert saving_text(peak, reference) == text


def test_the_cli_says_costs_as_the_dashboard_does(tmp_path):
    # no in-place parameter: `big` is compared with the declared baseline, and costs more
    path = write(
        tmp_path,
        """\
        name: costs
        inputs:
          x: {shape: [$n], init: rand}
        program:
          - {id: a, op: relu, in: x}
        variants:
          small: {n: 256}
          big: {n: 1024}
        baseline: small
        """,
    )
    res = runner.invoke(app, ["run", str(path), "--runs", str(tmp_path / "runs"), "--json", "-"])
    assert res.exit_code == 0, res.output
    big = rows(json.loads(res.stdout))["big"]
    assert big["compared_with"] == "small"
    text = row_saving_text(big)
    assert text == "costs 6.00 KiB (300.0%)"
    res = runner.invoke(app, ["run", str(path), "--runs", str(tmp_path / "runs")])
    assert text in res.output  # the same words as the dashboard's
    assert "-6.00 KiB" not in res.output


RELU = """\
name: {name}
device: {device}
inputs:
  x: {{shape: [1024], init: rand}}
  w: {{shape: [256], init: rand}}
  v: {{shape: [128], init: rand}}
program:
  - {{id: act, op: relu, in: x, out: y, inplace: $inplace}}
variants:
  inplace: {{inplace: true}}
  out_of_place: {{inplace: false}}
baseline: out_of_place
"""


def test_live_at_the_peak_is_one_tensor_per_line_activations_first_with_top_and_all(tmp_path):
    path = write(tmp_path, RELU.format(name="live", device="cpu"))
    runs = str(tmp_path / "runs")

    res = runner.invoke(app, ["run", str(path), "--runs", runs, "--top", "2"])
    assert res.exit_code == 0, res.output
    out = res.output.splitlines()
    start = out.index("out_of_place: peak 9.50 KiB") + 2
    assert [line.split()[:3] for line in out[start : start + 3]] == [
        ["y", "4.00", "KiB"],  # the activation first, though x is as large
        ["x", "4.00", "KiB"],
        ["+2", "more", "(1.50"],
    ]
    assert "--all lists them" in out[start + 2]

    res = runner.invoke(app, ["run", str(path), "--runs", runs, "--all"])
    out = res.output.splitlines()
    start = out.index("out_of_place: peak 9.50 KiB") + 2
    assert [line.split()[0] for line in out[start : start + 4]] == ["y", "x", "w", "v"]
    assert "more" not in " ".join(out[start : start + 5])


def test_several_scenarios_are_ruled_apart_and_meta_is_named_once(tmp_path):
    a = write(tmp_path, RELU.format(name="first", device="meta"), "a.yaml")
    b = write(tmp_path, RELU.format(name="second", device="cpu"), "b.yaml")

    res = runner.invoke(app, ["run", str(a), str(b), "--runs", str(tmp_path / "runs")])

    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    first = next(i for i, ln in enumerate(lines) if ln.startswith("first "))
    second = next(i for i, ln in enumerate(lines) if ln.startswith("second "))
    assert "(meta, exact allocator)" in lines[first] and "meta, meta" not in res.output
    assert "(cpu via numpy, exact allocator)" in lines[second]
    assert any(set(ln.strip()) == {"─"} for ln in lines[first:second])  # a rule between


def test_each_warning_names_its_variant(tmp_path):
    path = write(
        tmp_path,
        """\
        name: stale
        inputs:
          x: {shape: [16], init: rand}
        program:
          - {id: a, op: relu, in: x, out: h, inplace: $inplace}
          - {id: b, op: mul, in: [x, h]}
        variants:
          inplace: {inplace: true}
          out_of_place: {inplace: false}
        """,
    )
    res = runner.invoke(app, ["run", str(path), "--runs", str(tmp_path / "runs")])
    warnings = [ln for ln in res.output.splitlines() if ln.startswith("warning")]
    assert warnings and all(ln.startswith("warning (inplace): ") for ln in warnings)


def test_check_pass_lines_show_the_peak_and_the_budget_it_met(tmp_path):
    path = write(
        tmp_path,
        RELU.format(name="budget", device="cpu")
        + "expect:\n  inplace: {peak_allocated: <= 8 KiB}\n  out_of_place: {final_allocated: 5632}\n",
    )
    res = runner.invoke(app, ["check", str(path), "--runs", str(tmp_path / "runs")])
    assert res.exit_code == 0, res.output
    lines = {ln.split()[1]: ln for ln in res.output.splitlines() if ln.startswith("PASS")}
    assert lines["budget/inplace"].split()[2:] == [
        "peak",
        "5.50",
        "KiB",
        "peak_allocated",
        "<=",
        "8.00",
        "KiB",
    ]
    # a variant whose only check is not on the peak: its peak, and that no budget bounds it
    assert lines["budget/out_of_place"].split()[2:] == [
        "peak",
        "9.50",
        "KiB",
        "no",
        "budget",
        "on",
        "the",
        "peak",
    ]


def test_json_comparison_carries_the_reference(tmp_path):
    path = write(tmp_path, RELU.format(name="j", device="cpu"))
    res = runner.invoke(app, ["run", str(path), "--runs", str(tmp_path / "r"), "--json", "-"])
    [row] = [r for r in json.loads(res.stdout)["comparison"]["rows"] if r["variant"] == "inplace"]
    assert (row["compared_with"], row["reference_peak_bytes"]) == ("out_of_place", 9728 // 1)
