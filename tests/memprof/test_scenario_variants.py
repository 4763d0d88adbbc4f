"""Variants (named, matrix, both) and `$param` substitution into any field."""

import textwrap

import pytest

from memprof.errors import InvalidInput
from memprof.scenario import load_scenario
from memprof.scenario.loader import load_yaml
from memprof.scenario.variants import expand_variants, substitute

BASE = """\
name: v
inputs:
  x: {shape: [$batch, 8], init: $init}
program:
  - {id: act, op: relu, in: x, inplace: $inplace}
"""


def load(tmp_path, text):
    path = tmp_path / "v.yaml"
    path.write_text(textwrap.dedent(text))
    return load_scenario(path)


def test_matrix_is_every_combination_named_by_its_values(tmp_path):
    sc = load(
        tmp_path, BASE + "matrix:\n  batch: [1, 4]\n  inplace: [true, false]\n  init: [rand]\n"
    )
    assert [v.name for v in sc.variants] == [
        "batch=1,inplace=true,init=rand",
        "batch=1,inplace=false,init=rand",
        "batch=4,inplace=true,init=rand",
        "batch=4,inplace=false,init=rand",
    ]
    assert [v.spec.inputs["x"].shape for v in sc.variants] == [[1, 8], [1, 8], [4, 8], [4, 8]]
    assert [v.spec.program[0].inplace for v in sc.variants] == [True, False, True, False]


def test_named_variants_cross_the_matrix(tmp_path):
    sc = load(
        tmp_path,
        BASE + "variants:\n  small: {batch: 2}\n  big: {batch: 64}\n"
        "matrix:\n  inplace: [true, false]\n  init: [zeros]\n",
    )
    assert [v.name for v in sc.variants] == [
        "small/inplace=true,init=zeros",
        "small/inplace=false,init=zeros",
        "big/inplace=true,init=zeros",
        "big/inplace=false,init=zeros",
    ]
    assert sc.variants[3].params == {"batch": 64, "inplace": False, "init": "zeros"}


def test_without_variants_there_is_one_default_variant(tmp_path):
    sc = load(tmp_path, "name: d\ninputs: {x: {shape: [2]}}\nprogram: [{id: a, op: relu, in: x}]\n")
    assert [(v.name, v.params) for v in sc.variants] == [("default", {})]


def test_a_parameter_can_replace_a_whole_mapping():
    doc = load_yaml(
        "program: [{id: a, op: sum, in: x, args: $sum_args}]\nvariants: {v: {}}\n", "f.yaml"
    )
    data, missing = substitute(doc, {"sum_args": {"dim": 1, "keepdim": True}})
    assert data["program"][0]["args"] == {"dim": 1, "keepdim": True}
    assert missing == []


def test_double_dollar_is_a_literal_and_variants_section_is_untouched():
    doc = load_yaml("description: $$inplace\nvariants: {a: {p: $q}}\n", "f.yaml")
    data, missing = substitute(doc, {"p": 1})
    assert data["description"] == "$inplace"
    assert data["variants"] == {"a": {"p": "$q"}}
    assert missing == []


def test_expectations_for_star_merge_with_the_variant_own(tmp_path):
    sc = load(
        tmp_path,
        BASE + "variants:\n  a: {batch: 1, inplace: true, init: rand}\n"
        "  b: {batch: 1, inplace: false, init: rand}\n"
        "expect:\n  '*': {baseline: 32, peak_allocated: 64}\n  a: {peak_allocated: 32}\n",
    )
    a, b = sc.variants
    assert (a.expect.baseline, a.expect.peak_allocated) == (("==", 32), ("==", 32))
    assert (b.expect.baseline, b.expect.peak_allocated) == (("==", 32), ("==", 64))


def test_unused_parameter_is_a_warning(tmp_path):
    sc = load(
        tmp_path,
        "name: u\ninputs: {x: {shape: [2]}}\nprogram: [{id: a, op: relu, in: x}]\n"
        "variants:\n  a: {unused: 1}\n",
    )
    assert [str(w).split(": ", 1)[1] for w in sc.warnings] == [
        "warning: parameter 'unused' is set by the variants but no value uses $unused"
    ]


def test_bad_matrix_is_reported_at_its_position(tmp_path):
    with pytest.raises(InvalidInput) as info:
        load(tmp_path, BASE + "matrix:\n  batch: 4\n")
    assert [p.split(":", 1)[1] for p in info.value.problems] == [
        "7:10: expected a non-empty list of values, found 4"
    ]


def test_expand_variants_rejects_a_parameter_in_both_sections():
    doc = load_yaml("variants: {a: {p: 1}}\nmatrix: {p: [1, 2]}\n", "f.yaml")
    _, problems = expand_variants(doc)
    assert [str(p) for p in problems] == [
        "f.yaml:2:10: expected each parameter in either variants or matrix, found 'p' in both"
    ]
