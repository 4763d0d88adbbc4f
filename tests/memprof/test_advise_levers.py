"""`memprof advise` beyond in place: the optimizer stepped in backward, re-run and proven (values
bitwise, gradients aside) and measured alone; refused where it would change the training."""

from __future__ import annotations

import textwrap

import pytest
from typer.testing import CliRunner

from memprof.advise import advise
from memprof.advise.schema import Advice
from memprof.cli.app import app

ROOT = __import__("pathlib").Path(__file__).resolve().parents[2]

BASE = """\
name: levers
device: {device}
inputs:
  x: {{shape: [8, 64], init: randn}}
  target: {{shape: [8, 32], init: randn}}
modules:
  fc1: {{type: Linear, in_features: 64, out_features: 128}}
  act: {{type: ReLU, inplace: false}}
  fc2: {{type: Linear, in_features: 128, out_features: 32}}
  loss_fn: {{type: MSELoss}}
program:
  - {{id: h, module: fc1, in: x}}
  - {{id: a, module: act, in: h}}
  - {{id: y, module: fc2, in: a}}
  - {{id: loss, module: loss_fn, in: [y, target]}}
phases: {phases}
iterations: 2
"""

ONE_BACKWARD = "[forward, {backward: loss}, {optimizer: {type: AdamW, lr: 0.01}}]"
# two backwards through one graph: the first one's in-backward step writes the parameters the
# second needs (torch's version error)
RETAINED = (
    "[forward, {backward: loss, retain_graph: true}, {backward: loss}, "
    "{optimizer: {type: SGD, lr: 0.1}}]"
)
# gradient accumulation: two forwards and backwards, one step
ACCUMULATED = (
    "[forward, {backward: loss}, forward, {backward: loss}, "
    "{optimizer: {type: SGD, lr: 0.1, momentum: 0.9}}]"
)


def _write(tmp_path, phases, device="cpu"):
    path = tmp_path / "levers.yaml"
    path.write_text(textwrap.dedent(BASE.format(phases=phases, device=device)))
    return path


def test_mlp_train_adam_in_backward_is_safe_and_saves_what_the_variant_shows():
    advice = advise(ROOT / "scenarios" / "mlp_train.yaml", variant="adam")
    Advice.model_validate(advice)
    [lever] = advice["levers"]
    assert lever["lever"] == "optimizer_in_backward" and lever["verdict"] == "safe"
    # the scenario's own adam_in_backward variant: 37969940 bytes against adam's 42143760
    assert advice["peak_before"] == 42143760
    assert lever["peak_after"] == 37969940
    assert lever["saving_bytes"] == 42143760 - 37969940
    assert lever["proven"] is True
    assert advice["runs"] == 2  # the recording and the lever's re-run (no in-place candidate)


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_a_step_between_two_backwards_of_one_graph_fails_them(tmp_path, device):
    advice = advise(_write(tmp_path, RETAINED, device))
    [lever] = advice["levers"]
    assert lever["verdict"] == "unsafe" and lever["saving_bytes"] == 0
    assert lever["reason"].startswith("refuted by the re-run: RuntimeError at <backward>: ")
    assert "modified by an inplace operation" in lever["reason"]


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_accumulated_gradients_are_not_one_step_per_backward(tmp_path, device):
    advice = advise(_write(tmp_path, ACCUMULATED, device))
    [lever] = advice["levers"]
    assert lever["verdict"] == "unsafe" and lever["saving_bytes"] == 0
    assert lever["reason"].startswith("refuted by the re-run: ")
    if device == "cpu":  # the values show it
        assert "differs from the original run's" in lever["reason"]
    else:  # meta has no values: the phases do
        assert "the gradients of 2 backward phases" in lever["reason"]


def test_a_safe_lever_on_a_small_model(tmp_path):
    advice = advise(_write(tmp_path, ONE_BACKWARD))
    [lever] = advice["levers"]
    assert lever["verdict"] == "safe"
    # the in-place candidate (act) is advised as before, measured without the lever
    assert [c["node"] for c in advice["candidates"]] == ["a"]
    assert lever["peak_after"] == advice["peak_before"] - lever["saving_bytes"]


@pytest.mark.parametrize(
    "phases",
    [
        "[forward, {backward: loss}]",  # no optimizer
        "[forward, {optimizer: {type: SGD, lr: 0.1}}]",  # no backward
        "[forward, {backward: loss}, {optimizer: {type: SGD, lr: 0.1, in_backward: true}}]",
    ],
    ids=["no-optimizer", "no-backward", "already-in-backward"],
)
def test_no_lever_where_there_is_nothing_to_move(tmp_path, phases):
    assert advise(_write(tmp_path, phases))["levers"] == []


def test_the_terminal_names_the_lever_and_its_saving():
    res = CliRunner().invoke(
        app, ["advise", str(ROOT / "scenarios" / "mlp_train.yaml"), "--variant", "adam"]
    )
    assert res.exit_code == 0, res.output
    text = " ".join(res.output.split())
    assert "Optimizer stepped in backward (optimizer: {in_backward: true}): safe, saves" in text
    assert "(peak allocated 36.21 MiB)" in text


def test_with_switched_nodes_the_lever_is_re_run_together_and_written(tmp_path):
    path = _write(tmp_path, ONE_BACKWARD)
    out = tmp_path / "advised.yaml"
    res = CliRunner().invoke(
        app, ["advise", str(path), "--write", str(out), "--json", str(tmp_path / "a.json")]
    )
    assert res.exit_code == 0, res.output
    advice = __import__("json").loads((tmp_path / "a.json").read_text())
    Advice.model_validate(advice)
    [lever] = advice["levers"]
    assert advice["switched"] == ["a"]
    together = lever["together"]
    assert together["verdict"] == "safe"
    # both savings at once: below either alone
    assert together["peak_after"] < min(lever["peak_after"], advice["peak_after"])
    assert advice["runs"] == 5  # recording, a alone, the combined set, the lever, both
    text = " ".join(res.output.split())
    assert "With the switched nodes in place too: safe, peak allocated" in text
    assert "(variant advised: a, optimizer in backward)" in text
    # the literal optimizer mapping takes a parameter, false in the original variant
    written = out.read_text()
    assert "{type: AdamW, lr: 0.01, in_backward: $advise_in_backward}" in written
    from memprof.scenario import load_scenario

    loaded = load_scenario(out, check_shapes=False)
    specs = {v.name: v.spec for v in loaded.variants}
    assert specs["default"].phases[2].optimizer.in_backward is False
    assert specs["advised"].phases[2].optimizer.in_backward is True
    # and the advised variant measures what the together re-run measured
    run = CliRunner().invoke(
        app, ["run", str(out), "--variant", "advised", "--out-dir", str(tmp_path / "r"), "-q"]
    )
    assert run.exit_code == 0, run.output
    [report] = (tmp_path / "r").glob("*.json")
    [entry] = __import__("json").loads(report.read_text())["variants"]
    assert entry["peak_allocated_bytes"] == together["peak_after"]


def test_write_sets_in_backward_in_the_variants_own_optimizer_mapping(tmp_path):
    out = tmp_path / "advised.yaml"
    scenario = ROOT / "scenarios" / "mlp_train.yaml"
    res = CliRunner().invoke(
        app, ["advise", str(scenario), "--variant", "adam", "--write", str(out)]
    )
    assert res.exit_code == 0, res.output
    assert "(variant advised: optimizer in backward)" in " ".join(res.output.split())
    before, after = scenario.read_text().splitlines(), out.read_text().splitlines()
    added = [line for line in after if line not in before]
    # advise --write adds one line, the variant `$optimizer` with in_backward set
    assert added == ["  advised: {optimizer: {type: Adam, lr: 0.001, in_backward: true}}"]
    run = CliRunner().invoke(
        app, ["run", str(out), "--variant", "advised", "--out-dir", str(tmp_path / "r"), "-q"]
    )
    assert run.exit_code == 0, run.output
    [report] = (tmp_path / "r").glob("*.json")
    [entry] = __import__("json").loads(report.read_text())["variants"]
    assert entry["peak_allocated_bytes"] == 37969940  # the lever's re-run, and adam_in_backward


def test_an_unsafe_lever_is_not_written(tmp_path):
    out = tmp_path / "advised.yaml"
    res = CliRunner().invoke(app, ["advise", str(_write(tmp_path, RETAINED)), "--write", str(out)])
    assert res.exit_code == 0, res.output
    assert "in_backward" not in out.read_text()
    assert "(variant advised: a)" in " ".join(res.output.split())
