"""The report's TypedDicts (memprof/reports/types.py) match the shipped JSON Schema: every key,
which are required, and a real report has exactly the keys they declare."""

from __future__ import annotations

import textwrap
import typing

import pytest

from memprof.reports import types as t
from memprof.runner import run_scenario
from memprof.schemas import REPORT, read_schema

SCHEMA = read_schema(REPORT)


def schema_def(name):
    return SCHEMA if name is None else SCHEMA["$defs"][name]


@pytest.mark.parametrize("typed", list(t.SCHEMA_DEFS), ids=lambda c: c.__name__)
def test_each_typed_dict_has_the_schemas_keys_and_required_keys(typed):
    d = schema_def(t.SCHEMA_DEFS[typed])
    extra = t.BEYOND_SCHEMA.get(typed, frozenset())
    assert set(typed.__annotations__) - extra == set(d["properties"])
    assert set(typed.__required_keys__) == set(d.get("required", []))


def test_nested_types_point_at_the_schemas_definitions():
    hints = typing.get_type_hints(t.Report)
    assert hints["variants"] == list[t.Variant]
    assert typing.get_type_hints(t.Variant)["peak"] is t.Peak
    ref = SCHEMA["properties"]["variants"]["items"]["$ref"]
    assert ref.endswith("/Variant")


def test_a_real_report_has_the_declared_keys(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(
        textwrap.dedent(
            """\
            name: typed
            inputs:
              x: {shape: [4, 8], init: rand, requires_grad: true}
            program:
              - {id: m, op: mul, in: x, args: {other: 2.0}}
              - {id: a, op: sin, in: m, inplace: $inplace}
              - {id: loss, op: sum, in: a}
            phases: [forward, {backward: loss}]
            variants:
              inplace: {inplace: true}
              out_of_place: {inplace: false}
            """
        )
    )
    report = run_scenario(path)
    kinds = {w["kind"] for v in report["variants"] for w in v["warnings"]}
    assert kinds == {"inplace_clone"}  # sin_ keeps a clone for backward: a warning with bytes

    def check(value, typed):
        keys = set(typed.__annotations__)
        assert set(typed.__required_keys__) <= set(value) <= keys, typed.__name__
        hints = typing.get_type_hints(typed)
        for key, item in value.items():
            hint = hints[key]
            if typing.is_typeddict(hint):
                check(item, hint)
            elif typing.get_origin(hint) is list and typing.is_typeddict(typing.get_args(hint)[0]):
                for entry in item:
                    check(entry, typing.get_args(hint)[0])

    check(report, t.Report)
