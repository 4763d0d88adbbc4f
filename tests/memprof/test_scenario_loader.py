"""YAML loading with positions: every value knows its file:line:col."""

import pytest

from memprof.scenario.loader import Position, ScenarioYAMLError, load_yaml

TEXT = """\
name: relu-block
inputs:
  x: {shape: [1, 64], init: rand}
program:
  - {id: act, op: relu, in: x}
  - id: second
    op: sigmoid
lr: 1e-3
"""


def test_values_and_keys_have_one_based_positions():
    doc = load_yaml(TEXT, "s.yaml")
    assert doc.data["inputs"]["x"]["shape"] == [1, 64]
    assert doc.position(("name",)) == Position(1, 7)
    assert doc.position(("inputs", "x", "shape", 1)) == Position(3, 18)
    assert doc.position(("program", 0, "op")) == Position(5, 19)
    assert doc.position(("program", 1, "op")) == Position(7, 9)
    assert doc.position(("program", 1, "op"), key=True) == Position(7, 5)


def test_position_falls_back_to_the_nearest_enclosing_value():
    doc = load_yaml(TEXT, "s.yaml")
    # a path below a scalar (as a substituted $param can produce) points at the scalar
    assert doc.position(("program", 0, "args", "dim")) == doc.position(("program", 0))


def test_exponent_floats_read_as_numbers_as_in_yaml_1_2():
    assert load_yaml(TEXT, "s.yaml").data["lr"] == pytest.approx(1e-3)


def test_problem_lines_read_file_line_col():
    doc = load_yaml(TEXT, "s.yaml")
    assert (
        str(doc.problem(("program", 1, "op"), "expected x, found y"))
        == "s.yaml:7:9: expected x, found y"
    )


def test_syntax_error_points_at_the_line_and_column():
    with pytest.raises(ScenarioYAMLError) as info:
        load_yaml("name: a\nprogram: [1, 2\n", "bad.yaml")
    line = str(info.value.problem)
    assert line.startswith("bad.yaml:3:1: YAML syntax error: ")
    assert "expected ',' or ']'" in line


def test_duplicate_keys_are_an_error_not_silently_overwritten():
    with pytest.raises(ScenarioYAMLError) as info:
        load_yaml("inputs:\n  x: {shape: [1]}\n  x: {shape: [2]}\n", "dup.yaml")
    assert str(info.value.problem) == (
        "dup.yaml:3:3: expected each key once in a mapping, found 'x' again (first at line 2)"
    )


def test_merge_keys_and_anchors_are_resolved():
    doc = load_yaml("base: &b {init: rand}\nx: {<<: *b, shape: [2]}\n", "m.yaml")
    assert doc.data["x"] == {"init": "rand", "shape": [2]}


def test_empty_file_is_no_data():
    assert load_yaml("", "e.yaml").data is None
