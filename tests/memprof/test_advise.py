"""memprof advise (issue 12): verdicts from a recorded run, proven by re-running; the JSON and its
schema; --write; --budget; the CLI's errors. Scenarios with their verdicts written out live in
tests/memprof/advise_scenarios/."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
from typer.testing import CliRunner

from memprof.advise import advise
from memprof.cli.app import app
from memprof.runner import run_scenario
from memprof.schemas import ADVICE, generate, read_schema

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent / "advise_scenarios"
MIXED = HERE / "mixed_step.yaml"
STAGE = HERE / "resnet_stage.yaml"
MiB = 1 << 20


def _by_node(advice):
    return {c["node"]: c for c in advice["candidates"]}


@pytest.fixture(scope="module")
def mixed_train():
    return advise(MIXED, variant="train")


def test_mixed_training_step_verdicts(mixed_train):
    got = _by_node(mixed_train)
    want = {
        "xr": ("unsafe", "input", []),  # relu of the input x (conv c0 also saved it)
        "r": ("safe", "safe", []),  # relu after batch norm: BN keeps its input
        "ra": ("unsafe", "stale read", ["c2"]),  # conv c2 reads c1 afterwards
        "s": ("unsafe", "saved for backward", ["ra"]),  # add into the relu's result
        "sg": ("safe", "safe", []),  # sigmoid after an add
        "sn": ("unsafe", "saved for backward", ["sg"]),  # sigmoid keeps its result
        "m": ("safe", "safe", []),  # mul by w (requires grad): a clone
        "e": ("unsafe", "leaf", []),  # exp of a leaf that requires grad
        "loss": ("safe", "safe", []),
    }
    assert {n: (c["verdict"], c["kind"], c["involves"]) for n, c in got.items()} == want
    assert got["ra"]["reason"].startswith("stale read: node c2 reads c1")
    assert "node ra's ReluBackward0 keeps ra" in got["s"]["reason"]
    assert "node sg's SigmoidBackward0" in got["sn"]["reason"]
    assert "leaf that requires grad" in got["e"]["reason"]
    # the clone is sn's bytes (2x4x8x8 float32), measured in the re-run; the others clone nothing
    assert got["m"]["clone_bytes"] == 2 * 4 * 8 * 8 * 4
    assert all(c["clone_bytes"] == 0 for n, c in got.items() if n != "m")
    # every verdict was confirmed by its re-run: safe ones bitwise, unsafe ones failed or differed
    assert all(c["proven"] for c in got.values())
    assert mixed_train["switched"] == ["r", "sg", "m", "loss"]
    assert mixed_train["proof"] == "bitwise"


def test_mixed_step_combined_saving_is_the_measured_peak_of_the_switched_program(
    mixed_train, tmp_path
):
    out = tmp_path / "advised.yaml"
    from memprof.advise.write import write_advised

    write_advised(str(MIXED), "train", mixed_train["switched"], str(out))
    report = run_scenario(out)
    peaks = {v["name"]: v["peak_allocated_bytes"] for v in report["variants"]}
    assert peaks["train"] == mixed_train["peak_before"]
    assert peaks["advised"] == mixed_train["peak_after"] < mixed_train["peak_before"]


def test_without_backward_saved_verdicts_turn_safe_and_the_others_stay():
    got = _by_node(advise(MIXED, variant="forward_only"))
    assert {n: c["kind"] for n, c in got.items()} == {
        "xr": "input",
        "r": "safe",
        "ra": "stale read",
        "s": "safe",
        "sg": "safe",
        "sn": "safe",  # autograd still clones sg for sin_ (grad mode is on), measured
        "m": "safe",
        "e": "leaf",
        "loss": "safe",
    }
    assert got["sn"]["clone_bytes"] == 2048 and got["sn"]["proven"]


def test_relu_of_an_input_a_conv_saved_is_unsafe_for_what_the_conv_saved():
    got = _by_node(advise(MIXED, variant="train_once"))
    assert (got["xr"]["kind"], got["xr"]["involves"]) == ("saved for backward", ["c0"])
    assert "node c0's ConvolutionBackward0 keeps x (at version 0)" in got["xr"]["reason"]
    assert got["xr"]["proven"]  # in place, backward raises the version error


def test_relu_seed_out_of_place_advises_act_safe_saving_exactly_64_mib():
    # on meta: the same bytes as cpu (exact allocator), proven by versions and stale reads
    advice = advise(ROOT / "scenarios/relu.yaml", variant="out_of_place", device="meta")
    (act,) = advice["candidates"]
    assert (act["node"], act["verdict"], act["proven"]) == ("act", "safe", True)
    assert act["saving_bytes"] == 64 * MiB
    assert advice["peak_before"] - advice["peak_after"] == 64 * MiB
    assert advice["proof"] == "versions"


def test_multi_branch_out_of_place_advises_h_unsafe_because_y_reads_x1():
    advice = advise(ROOT / "scenarios/multi_branch.yaml", variant="out_of_place")
    (h,) = advice["candidates"]
    assert (h["node"], h["verdict"], h["kind"], h["involves"]) == (
        "h",
        "unsafe",
        "stale read",
        ["y"],
    )
    assert "node y reads x1" in h["reason"]
    assert h["proven"]  # the re-run in place changes y
    assert advice["switched"] == [] and advice["peak_after"] == advice["peak_before"]


@pytest.mark.parametrize(
    "path, off, on",
    [
        (STAGE, "inplace_off", "torchvision"),
        (ROOT / "scenarios/resnet_block.yaml", "out_of_place", "inplace"),
    ],
)
def test_resnet_advice_recovers_torchvisions_inplace_choices(path, off, on):
    """With inplace off, the advice switches exactly the nodes torchvision runs in place (every
    ReLU, `out += identity`), and the combined saving is the measured difference of the variants."""
    from memprof.scenario import load_scenario

    advice = advise(path, variant=off)
    loaded = load_scenario(path)
    specs = {v.name: v.spec for v in loaded.variants}
    from memprof.advise.analysis import candidate_op

    chosen = [n.id for n in specs[off].program if candidate_op(specs[off], n) is not None]
    torchvision = [n.id for n in specs[on].program if candidate_op(specs[on], n) is None]
    inplace_in_on = [n for n in chosen if n in torchvision]
    assert advice["switched"] == inplace_in_on == chosen
    assert all(c["verdict"] == "safe" and c["proven"] for c in advice["candidates"])
    peaks = {v["name"]: v["peak_allocated_bytes"] for v in run_scenario(path)["variants"]}
    assert advice["peak_before"] == peaks[off]
    assert advice["peak_after"] == peaks[on]
    assert advice["peak_before"] - advice["peak_after"] == peaks[off] - peaks[on] > 0


def test_advice_json_matches_the_shipped_schema(mixed_train):
    schema = read_schema(ADVICE)
    assert schema == generate()[ADVICE], "run `python -m memprof.schemas` to regenerate"
    jsonschema.validate(json.loads(json.dumps(mixed_train)), schema)
    # the keys, in its order
    assert list(mixed_train)[:5] == [
        "scenario",
        "variant",
        "peak_before",
        "peak_after",
        "candidates",
    ]
    assert list(mixed_train["candidates"][0])[:8] == [
        "node",
        "op",
        "verdict",
        "reason",
        "involves",
        "clone_bytes",
        "saving_bytes",
        "reserved_saving_bytes",
    ]


def test_a_wrong_safe_verdict_is_refuted_by_the_re_run(monkeypatch):
    """The proof does not trust the analysis: a candidate called safe whose in-place run changes
    a later value is reported unsafe with what the re-run saw."""
    import memprof.advise.analysis as analysis

    real = analysis.verdicts

    def all_safe(*args, **kwargs):
        out = real(*args, **kwargs)
        for v in out:
            v.verdict, v.kind, v.reason, v.involves = "safe", "safe", "", []
        return out

    monkeypatch.setattr(analysis, "verdicts", all_safe)
    (h,) = advise(ROOT / "scenarios/multi_branch.yaml", variant="out_of_place")["candidates"]
    assert (h["verdict"], h["kind"], h["proven"]) == ("unsafe", "refuted by the re-run", True)
    assert h["involves"] == ["y"]
    assert "node y reads x1, which node h overwrote in place" in h["reason"]


SHARED = """\
# a ReLU module called twice: once safely, once before a reader
name: shared-relu
inputs:
  x: {shape: [4, 8], init: randn}
modules:
  act: {type: ReLU}   # called by h1 and h2
program:
  - {id: a, op: mul, in: [x, x]}
  - {id: h1, module: act, in: a}
  - {id: b, op: mul, in: [h1, x]}
  - {id: h2, module: act, in: b}
  - {id: y, op: add, in: [b, h2]}
"""


def test_a_module_called_twice_switches_for_one_node_only(tmp_path):
    path = tmp_path / "shared.yaml"
    path.write_text(SHARED)
    advice = advise(path)
    got = _by_node(advice)
    assert got["h1"]["verdict"] == "safe" and got["h1"]["proven"]
    assert (got["h2"]["kind"], got["h2"]["involves"]) == ("stale read", ["y"])
    out = tmp_path / "out.yaml"
    from memprof.advise.write import advised_text

    text, notes = advised_text(str(path), "default", advice["switched"])
    assert notes == []
    out.write_text(text)
    assert "# called by h1 and h2" in text and "# a ReLU module called twice" in text
    assert "act_h1: {type: ReLU, inplace: $advise_h1}" in text
    report = run_scenario(out)
    peaks = {v["name"]: v["peak_allocated_bytes"] for v in report["variants"]}
    assert peaks == {"default": advice["peak_before"], "advised": advice["peak_after"]}


def test_write_keeps_comments_and_adds_the_advised_variant(tmp_path):
    out = tmp_path / "rb.yaml"
    result = CliRunner().invoke(
        app,
        [
            "advise",
            str(ROOT / "scenarios/resnet_block.yaml"),
            "--variant",
            "out_of_place",
            "--write",
            str(out),
            "--json",
            str(tmp_path / "a.json"),
        ],
    )
    assert result.exit_code == 0, result.output
    text = out.read_text()
    original = (ROOT / "scenarios/resnet_block.yaml").read_text()
    for line in original.splitlines():  # nothing of the original is lost
        assert line in text
    assert "  advised: {inplace: true}" in text  # all three nodes use $inplace: reused
    assert "Combined (r1, s, out in place)" in result.output
    data = json.loads((tmp_path / "a.json").read_text())
    assert data["switched"] == ["r1", "s", "out"]


def test_budget_met_and_not_met(tmp_path):
    runner = CliRunner()
    path = str(ROOT / "scenarios/relu.yaml")
    ok = runner.invoke(
        app, ["advise", path, "--device", "meta", "--budget", "100 MiB", "--json", "-"]
    )
    assert ok.exit_code == 0, ok.output
    data = json.loads(ok.stdout)
    assert data["budget"]["met"] and data["budget"]["nodes"] == ["act"]
    assert data["budget"]["peak"] == 64 * MiB
    bad = runner.invoke(app, ["advise", path, "--device", "meta", "--budget", "32 MiB"])
    assert bad.exit_code == 1
    assert "in-place alone cannot" in bad.output


def test_budget_picks_the_fewest_nodes():
    advice = advise(STAGE, variant="inplace_off", device="meta", budget=215832 - 16384)
    # the stem relu saves 16 KiB alone: it is enough, and picked first (largest saving)
    assert advice["budget"]["met"] and advice["budget"]["nodes"] == ["stem_relu"]
    assert advice["switched"] == ["stem_relu"]
    assert advice["peak_after"] <= 215832 - 16384


@pytest.mark.parametrize(
    "args, message",
    [
        (["scenarios/relu.yaml", "--budget", "lots"], "--budget: expected a size"),
        (["scenarios/relu.yaml", "--variant", "inplce"], "did you mean 'inplace'"),
        (["scenarios/relu.yaml", "--device", "tpu"], "--device: expected cpu"),
        (["no/such.yaml"], "no such scenario file"),
    ],
)
def test_bad_input_is_a_message_and_exit_2(args, message, monkeypatch):
    monkeypatch.chdir(ROOT)
    result = CliRunner().invoke(app, ["advise", *args])
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert "Traceback" not in result.output


PYTHON_SCENARIO = """\
import engine
import memprof


@memprof.scenario(variants={"default": {}}, device="cpu")
def step():
    conv1 = engine.nn.Conv2d(2, 2, 3, padding=1)
    relu = engine.nn.ReLU()
    conv2 = engine.nn.Conv2d(2, 2, 3, padding=1)
    act = engine.nn.ReLU()
    x = engine.randn(1, 2, 3, 4)
    for _ in range(2):
        x1 = conv1(x)
        h = relu(x1)  # conv2 reads x1 next: stale read
        y = conv2(x1)
        z = act(y + h)  # the add keeps nothing: safe
        w = x1 * 2.0 if PLAIN else x1.detach()  # plain code reading x1 (no module call)
        (z + w).sum().backward()
"""


@pytest.mark.parametrize("plain", [False, True])
def test_python_scenarios_advise_module_calls(tmp_path, plain):
    path = tmp_path / "step.py"
    path.write_text(f"PLAIN = {plain}\n" + PYTHON_SCENARIO)
    advice = advise(path)
    got = {n: (c["kind"], c["involves"], c["proven"]) for n, c in _by_node(advice).items()}
    # each call is a node (the loop's second: @2); relu's stale read names the conv2 call
    assert got["relu"] == ("stale read", ["conv2"], True)
    assert got["relu@2"] == ("stale read", ["conv2@2"], True)
    assert got["act"][0] == got["act@2"][0] == "safe"
    assert advice["switched"] == ["act", "act@2"]
    assert advice["peak_after"] <= advice["peak_before"]


def test_python_plain_code_reads_are_caught_by_the_proof(tmp_path):
    """x1 * 2.0 after the ReLU is plain code: the verdict cannot see it, the re-run does."""
    path = tmp_path / "plain.py"
    path.write_text(
        "import engine\nimport memprof\n\n\n"
        '@memprof.scenario(variants={"default": {}}, device="cpu")\n'
        "def plain():\n"
        "    conv1 = engine.nn.Conv2d(2, 2, 3, padding=1)\n"
        "    relu = engine.nn.ReLU()\n"
        "    x1 = conv1(engine.randn(1, 2, 3, 4))\n"
        "    h = relu(x1)\n"
        "    (x1 * 2.0 + h).sum().backward()\n"
    )
    (relu,) = advise(path)["candidates"]
    assert (relu["verdict"], relu["kind"], relu["proven"]) == (
        "unsafe",
        "refuted by the re-run",
        True,
    )
    assert "conv1.weight.grad" in relu["reason"]
    result = CliRunner().invoke(app, ["advise", str(path), "--write", str(tmp_path / "o.yaml")])
    assert result.exit_code == 2 and "--write edits YAML scenarios" in result.output


def test_write_refuses_a_matrix_scenario(tmp_path):
    path = tmp_path / "m.yaml"
    path.write_text(
        "name: m\ninputs:\n  x: {shape: [4], init: randn}\n"
        "program:\n  - {id: h, op: relu, in: x, inplace: $ip}\nmatrix:\n  ip: [false]\n"
    )
    result = CliRunner().invoke(app, ["advise", str(path), "--write", str(tmp_path / "o.yaml")])
    assert result.exit_code == 2
    assert "matrix" in result.output


@pytest.mark.parametrize("iterations, kind", [(1, "safe"), (2, "input")])
def test_an_input_written_in_place_is_safe_only_when_no_later_iteration_reads_it(
    tmp_path, iterations, kind
):
    path = tmp_path / "s.yaml"
    path.write_text(
        "name: s\ninputs:\n  x: {shape: [4, 8], init: randn}\n"
        "program:\n  - {id: a, op: relu, in: x}\n  - {id: b, op: mul, in: [a, a]}\n"
        f"iterations: {iterations}\n"
    )
    got = _by_node(advise(path))
    assert got["a"]["kind"] == kind
    assert got["a"]["proven"]  # safe: equal values; input: the second iteration's a differs
    assert got["b"]["kind"] == "safe"  # mul_(a, a): nothing reads a afterwards


def test_the_layers_of_a_sequential_are_candidates_of_their_own(tmp_path):
    path = HERE / "sequential.yaml"
    advice = advise(path)
    got = {n: (c["kind"], c["involves"]) for n, c in _by_node(advice).items()}
    assert got == {
        "f[1]": ("safe", []),
        "f[3]": ("safe", []),
        "g[0]": ("stale read", ["s"]),
        "g[1]": ("saved for backward", ["g[0]"]),
        "s": ("saved for backward", ["g[1]"]),
    }
    assert all(c["proven"] for c in advice["candidates"])
    assert advice["switched"] == ["f[1]", "f[3]"]
    out = tmp_path / "out.yaml"
    from memprof.advise.write import write_advised

    write_advised(str(path), "default", advice["switched"], str(out))
    text = out.read_text()
    assert "- {type: ReLU, inplace: $advise_f_1}" in text
    assert "# conv-relu-conv-relu-pool" in text
    report = run_scenario(out)
    peaks = {v["name"]: v["peak_allocated_bytes"] for v in report["variants"]}
    assert peaks == {"default": advice["peak_before"], "advised": advice["peak_after"]}


def test_a_layer_of_a_sequential_called_twice_switches_for_one_node_only(tmp_path):
    """The same module (the same parameters) runs in place at one call only; --write cannot say
    that in YAML for a module with parameters, and says so instead of writing a copy."""
    path = tmp_path / "s.yaml"
    path.write_text(
        "name: s\ninputs:\n  x: {shape: [4, 8], init: randn}\n"
        "modules:\n  blk: {type: Sequential, layers: [{type: Linear, in_features: 8, "
        "out_features: 8}, {type: ReLU}]}\n"
        "program:\n  - {id: a, module: blk, in: x}\n  - {id: b, module: blk, in: a}\n"
        "  - {id: y, op: add, in: [a, b]}\n"
    )
    advice = advise(path)
    # a[1] overwrites blk's Linear output inside a; b[1] likewise inside b: nothing else reads them
    assert {n: c["kind"] for n, c in _by_node(advice).items()} == {
        "a[1]": "safe",
        "b[1]": "safe",
        "y": "safe",
    }
    assert all(c["proven"] for c in advice["candidates"])
    from memprof.advise.write import advised_text

    text, notes = advised_text(str(path), "default", ["a[1]"])
    assert notes and "module blk is also called by b and has parameters" in notes[0]
    assert "blk_a" not in text


@pytest.mark.parametrize("act, clone", [("LeakyReLU", 0), ("SiLU", 16 * MiB)])
def test_clone_bytes_are_measured_in_place(act, clone):
    """Out of place LeakyReLU keeps its input, in place its result (free); SiLU keeps its input
    either way, so in place it clones it: the figure and the reason come from the re-run."""
    advice = advise(
        ROOT / "scenarios/activation_inplace.yaml",
        variant=f"act={act},inplace=false",
        device="meta",
    )
    a = _by_node(advice)["a"]
    assert (a["verdict"], a["clone_bytes"]) == ("safe", clone)
    assert ("clone" in a["reason"]) == bool(clone)
    assert a["saving_bytes"] == 16 * MiB - clone


def test_shape_and_dtype_verdicts(tmp_path):
    path = tmp_path / "shapes.yaml"
    path.write_text(
        "name: shapes\ninputs:\n  b: {shape: [4, 1], init: randn}\n"
        "  x: {shape: [4, 8], init: randn}\n"
        "  i: {shape: [4, 8], init: randint, high: 5, dtype: int64}\n"
        "program:\n"
        "  - {id: b2, op: mul, in: b, args: {other: 2.0}}\n"
        "  - {id: s, op: add, in: [b2, x]}\n"  # broadcast: [4, 1] cannot hold [4, 8]
        "  - {id: p, op: mul, in: [i, x]}\n"  # promotion: int64 cannot hold float32
    )
    got = _by_node(advise(path))
    assert got["b2"]["kind"] == "safe"
    assert got["s"]["kind"] == got["p"]["kind"] == "shape or dtype"
    assert "[4, 8] float32, the operand b2 [4, 1] float32" in got["s"]["reason"]
    assert "the operand i [4, 8] int64" in got["p"]["reason"]
    assert got["s"]["proven"] and got["p"]["proven"]  # in place, the engine refuses both


def test_an_operand_that_overlaps_itself_is_unsafe(tmp_path):
    path = tmp_path / "overlap.py"
    path.write_text(
        "import engine\nimport memprof\n\n\n"
        '@memprof.scenario(variants={"default": {}}, device="cpu")\n'
        "def overlap():\n"
        "    act = engine.nn.ReLU()\n"
        "    act(engine.randn(4, 1).expand(4, 8))\n"
    )
    (act,) = advise(path)["candidates"]
    assert (act["kind"], act["verdict"]) == ("shape or dtype", "unsafe")
    assert "overlaps itself (an expanded view)" in act["reason"]
    assert act["proven"]  # the engine refuses an in-place write into an expanded view


class _PeakModel:
    """Re-runs of a program whose peak is the largest of three moments; each candidate lowers
    some of them (savings alone do not add up): y helps at both of the first two moments, x
    only at the first, z only at the second. Every re-run reproduces the values."""

    BASE = (100, 100, 60)
    CUT = {"y": (30, 30, 0), "x": (50, 0, 0), "z": (0, 50, 0)}

    def __init__(self):
        self.calls = []

    def switched(self, ids):
        from memprof.advise.proof import RunResult

        self.calls.append(list(ids))
        moments = [b - sum(self.CUT[i][k] for i in ids) for k, b in enumerate(self.BASE)]
        entry = {"status": "ok", "warnings": [], "peak_allocated_bytes": max(moments)}
        return RunResult(entry=entry, values={})

    def order(self, cid):
        return ("x", "y", "z").index(cid)


def test_budget_leaves_out_a_candidate_the_others_cover():
    from memprof.advise import _fit_budget

    runs = _PeakModel()
    ref = runs.switched([])
    combined = ["y", "x", "z"]  # largest saving alone first: y saves 30, x and z save nothing
    all_res = runs.switched(combined)
    # prefix: y (70) -> y+x (70) -> y+x+z (60 <= 65); then y is not needed: x+z peak at 60
    info, res, n = _fit_budget(ref, runs, combined, all_res, 65, lambda _m: None)
    assert info["met"] and info["nodes"] == ["x", "z"] and res.peak == 60
    assert "leaving out any one of them breaks it" in info["message"]
    # three re-runs for the prefix, three for leaving out z, x, then y
    assert runs.calls[2:] == [
        ["y"],
        ["y", "x"],
        ["y", "x", "z"],
        ["y", "x"],
        ["y", "z"],
        ["x", "z"],
    ]
    assert n == 6
    # a budget only all three meet keeps all three
    info, res, _ = _fit_budget(ref, runs, combined, all_res, 55, lambda _m: None)
    assert not info["met"] and "in-place alone cannot" in info["message"]
