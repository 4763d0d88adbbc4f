"""The pydantic model is the single source of the format; the shipped JSON Schemas follow it."""

import json
from pathlib import Path

import jsonschema
import pytest
import yaml

from memprof.scenario.model import parse_check
from memprof.schemas import REPORT, SCENARIO, generate, read_schema

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = sorted((ROOT / "scenarios").glob("*.yaml"))
VALIDATOR = jsonschema.Draft202012Validator(read_schema(SCENARIO))


@pytest.mark.parametrize("name", [SCENARIO, REPORT])
def test_shipped_schema_is_generated_from_the_models(name):
    # regenerate with: python -m memprof.schemas
    assert read_schema(name) == json.loads(json.dumps(generate()[name]))


def test_shipped_schemas_are_valid_json_schemas():
    for name in (SCENARIO, REPORT):
        jsonschema.Draft202012Validator.check_schema(read_schema(name))


def test_there_are_shipped_scenarios():
    assert len(SHIPPED) >= 8


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_shipped_scenarios_reference_the_schema_and_pass_it(path):
    text = path.read_text()
    assert text.startswith(
        "# yaml-language-server: $schema=../memprof/schemas/scenario.schema.json\n"
    )
    VALIDATOR.validate(yaml.safe_load(text))


def test_the_json_schema_rejects_what_the_loader_rejects():
    good = {
        "name": "a",
        "inputs": {"x": {"shape": [2]}},
        "program": [{"id": "y", "op": "relu", "in": "x"}],
    }
    VALIDATOR.validate(good)
    for bad in (
        {**good, "program": [{"id": "y", "op": "rleu", "in": "x"}]},
        {**good, "device": "gpu"},
        {**good, "inputs": {"x": {"shape": [2], "foo": 1}}},
        {**good, "modules": {"fc": {"type": "Linear", "in_features": 3}}},
    ):
        with pytest.raises(jsonschema.ValidationError):
            VALIDATOR.validate(bad)


def test_param_references_are_accepted_anywhere_a_value_goes():
    doc = {
        "name": "a",
        "inputs": {"x": {"shape": ["$batch", 8], "requires_grad": "$rg"}},
        "program": [{"id": "y", "op": "relu", "in": "x", "inplace": "$inplace"}],
        "variants": {"v": {"batch": 1, "rg": False, "inplace": True}},
    }
    VALIDATOR.validate(doc)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("64 MiB", ("==", 64 * 2**20)),
        ("<= 1.5 GiB", ("<=", 3 * 2**29)),
        (">=1000", (">=", 1000)),
        (67108864, ("==", 67108864)),
        ("== 0", ("==", 0)),
    ],
)
def test_size_checks(text, expected):
    assert parse_check(text) == expected


def test_size_check_error_says_what_is_accepted():
    with pytest.raises(ValueError, match="expected a size with an optional comparison"):
        parse_check("about 64 MiB")
