"""Each class of bad scenario input seen by fuzzing (issue 14): a `file:line:col` message and
exit 2, never a traceback or a hang; and what a run does after loading never loses the report."""

from __future__ import annotations

import json
import re
import time

import pytest
from typer.testing import CliRunner

from memprof.cli.app import app
from memprof.scenario.loader import MAX_DEPTH
from memprof.scenario.variants import MAX_VARIANTS

runner = CliRunner()

BASE = """\
name: relu-small
device: cpu
seed: 0
inputs:
  x: {shape: [2, 4], init: rand}
program:
  - {id: act, op: relu, in: x, out: y, inplace: $inplace}
variants:
  inplace: {inplace: true}
  out_of_place: {inplace: false}
baseline: out_of_place
expect:
  out_of_place: {peak_allocated: 64}
"""


def validate(tmp_path, content: str | bytes, name: str = "s.yaml"):
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    t0 = time.monotonic()
    res = runner.invoke(app, ["validate", str(path)])
    took = time.monotonic() - t0
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
    assert "Traceback" not in res.output
    return res, str(path), took


def refused_at(tmp_path, content, line: int, col: int, *words: str) -> str:
    res, path, took = validate(tmp_path, content)
    assert res.exit_code == 2, res.output
    assert f"{path}:{line}:{col}: " in res.output, res.output
    for word in words:
        assert word in res.output, res.output
    assert took < 10
    return res.output


# --- characters and encodings -----------------------------------------------------------------


def test_a_nul_byte_is_refused_at_its_line_and_column(tmp_path):
    refused_at(tmp_path, BASE.replace("name: relu-small", "name: relu\x00small"), 1, 11, "NUL")


def test_a_control_character_is_refused_at_its_line_and_column(tmp_path):
    refused_at(tmp_path, BASE.replace("seed: 0", "seed: \x07"), 3, 7, "U+0007")


def test_non_utf8_bytes_give_line_and_column_not_an_offset(tmp_path):
    raw = BASE.encode().replace(b"device: cpu", b"device: c\xffpu")
    out = refused_at(tmp_path, raw, 2, 10, "expected UTF-8 text", "0xff")
    assert "offset" not in out


def test_an_empty_file_is_refused_at_1_1(tmp_path):
    refused_at(tmp_path, "", 1, 1, "found an empty file")
    refused_at(tmp_path, "# only a comment\n", 1, 1, "found an empty file")


# --- structure --------------------------------------------------------------------------------


def test_nesting_past_the_bound_is_refused_without_recursing(tmp_path):
    depth = 100_000  # deep enough to overflow any recursive parser
    refused_at(
        tmp_path, "name: " + "[" * depth + "]" * depth + "\n", 1, 6 + MAX_DEPTH, "levels"
    )  # the top mapping is a level


def test_a_recursive_alias_is_refused(tmp_path):
    refused_at(tmp_path, "name: &a [*a]\n", 1, 11, "recursive alias")
    refused_at(tmp_path, "a: &m {b: *m}\n", 1, 11, "recursive alias")


def test_an_alias_bomb_is_refused_quickly(tmp_path):
    text = "l0: &a0 [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"l{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]\n" for i in range(1, 9)
    )
    res, path, took = validate(tmp_path, text)
    assert res.exit_code == 2 and "aliases are expanded" in res.output
    assert re.search(rf"{re.escape(path)}:\d+:\d+: ", res.output)
    assert took < 5


def test_an_unknown_tag_on_a_key_is_refused(tmp_path):
    refused_at(tmp_path, BASE.replace("name: relu-small", "!x name: relu-small"), 1, 1, "!x")


@pytest.mark.parametrize(
    ("value", "tag"),
    [("!!binary aGVsbG8=", "!!binary"), ("!!set {a, b}", "!!set"), ("!!timestamp 2001-01-01", "")],
)
def test_non_plain_yaml_types_as_variant_parameters_are_refused(tmp_path, value, tag):
    text = BASE.replace("{inplace: true}", f"{{inplace: true, q: {value}}}")
    refused_at(tmp_path, text, 9, 31, "plain YAML value", tag)


def test_plain_dates_and_timestamps_are_text(tmp_path):
    text = BASE.replace("{inplace: true}", "{inplace: true, day: 2001-01-01}").replace(
        "name: relu-small", "name: relu-small\ndescription: 2001-12-14t21:59:43.10-05:00"
    )
    res, _, _ = validate(tmp_path, text)
    assert res.exit_code == 0, res.output
    runs = tmp_path / "runs"
    res = runner.invoke(app, ["run", "-q", str(tmp_path / "s.yaml"), "--runs", str(runs)])
    [saved] = runs.glob("*.json")
    report = json.loads(saved.read_text())
    assert report["variants"][0]["params"]["day"] == "2001-01-01"


# --- sizes and numbers ------------------------------------------------------------------------


def test_a_matrix_explosion_is_refused_before_expanding(tmp_path):
    axes = "".join(f"  p{i}: [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]\n" for i in range(9))
    text = BASE.replace("variants:", "matrix:\n" + axes + "variants:")
    res, _, took = validate(tmp_path, text)
    assert res.exit_code == 2
    assert f"expected at most {MAX_VARIANTS} variants, found 2000000000" in res.output
    assert took < 5


def test_iterations_are_bounded(tmp_path):
    refused_at(tmp_path, BASE + "iterations: 1000000000\n", 14, 13, "<= 10000")


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_an_input_whose_bytes_overflow_int64_is_refused_at_validate(tmp_path, device):
    text = BASE.replace("[2, 4]", "[4000000000000, 4000000000000]").replace("cpu", device)
    refused_at(tmp_path, text, 5, 14, "fits in 64 bits")


@pytest.mark.parametrize(
    ("line", "words"),
    [
        ("memory_limit: .inf", ["finite size"]),
        ("memory_limit: 100000000000000000000", ["fits in 64 bits"]),
        ("memory_limit: 99999999999 TiB", ["fits in 64 bits"]),
    ],
)
def test_sizes_out_of_range_are_refused(tmp_path, line, words):
    refused_at(tmp_path, BASE + line + "\n", 14, 15, *words)


def test_a_5000_digit_integer_is_refused(tmp_path):
    refused_at(tmp_path, BASE.replace("seed: 0", "seed: " + "9" * 5000), 3, 7, "4300 digits")


@pytest.mark.parametrize(
    ("seed", "word"), [("-1", ">= 0"), (str(2**64), "<= 18446744073709551615")]
)
def test_seeds_numpy_refuses_are_refused(tmp_path, seed, word):
    refused_at(tmp_path, BASE.replace("seed: 0", f"seed: {seed}"), 3, 7, word)


@pytest.mark.parametrize("value", [".nan", ".inf", "-.inf"])
def test_nan_and_inf_as_variant_parameters_are_refused(tmp_path, value):
    refused_at(
        tmp_path, BASE.replace("{inplace: true}", f"{{inplace: true, q: {value}}}"), 9, 31, "finite"
    )


def test_nan_in_an_expected_value_is_refused(tmp_path):
    text = BASE.replace("{peak_allocated: 64}", "{peak_allocated: .nan}")
    refused_at(tmp_path, text, 13, 34, "finite size")
    text = BASE.replace("{peak_allocated: 64}", "{values: {y: .nan}}")
    refused_at(tmp_path, text, 13, 30, "finite")


# --- names ------------------------------------------------------------------------------------


def test_a_name_the_schema_accepts_makes_a_valid_run_id(tmp_path):
    """`name: a..b` passes the schema, so the run id made from it must be one too."""
    path = tmp_path / "s.yaml"
    path.write_text(BASE.replace("name: relu-small", "name: a..b"))
    runs = tmp_path / "runs"
    res = runner.invoke(app, ["run", "-q", str(path), "--runs", str(runs)])
    assert res.exit_code in (0, 1), res.output
    [saved] = runs.glob("*.json")
    assert "-a..b-" in saved.name and "cannot save" not in res.output
    res = runner.invoke(app, ["report", saved.stem, "--runs", str(runs)])
    assert res.exit_code == 0, res.output


# --- after loading ----------------------------------------------------------------------------


def test_observed_nan_values_do_not_lose_the_report(tmp_path):
    """An input filled with NaN and a `values` expectation on it: the NaN is written as text in
    the report (JSON has no NaN), the run saved."""
    text = """\
name: nan-values
inputs:
  x: {shape: [3], init: full, value: .nan}
program:
  - {id: r, op: relu, in: x}
expect:
  "*": {values: {x: 0.0}}
"""
    path = tmp_path / "n.yaml"
    path.write_text(text)
    runs = tmp_path / "runs"
    res = runner.invoke(app, ["run", "-q", str(path), "--runs", str(runs)])
    assert "Traceback" not in res.output
    assert res.exit_code == 1, res.output
    [saved] = runs.glob("*.json")
    [row] = json.loads(saved.read_text())["variants"][0]["expectations"]
    assert row["passed"] is False and row["actual"] == ["nan", "nan"]  # (min, max)


def test_a_huge_conv_stride_validates_quickly(tmp_path):
    """Found by the fuzzer: a Conv2d stride of 2**63 - 1 made the meta dry run loop once per
    stride step (torch takes it at once: one output position)."""
    text = """\
name: conv-stride
inputs:
  x: {shape: [1, 2, 5, 7]}
modules:
  conv: {type: Conv2d, in_channels: 2, out_channels: 3, kernel_size: 3, stride: 9223372036854775807, padding: 1}
program:
  - {id: y, module: conv, in: x}
"""
    res, _, took = validate(tmp_path, text)
    assert res.exit_code == 0, res.output
    assert took < 10
