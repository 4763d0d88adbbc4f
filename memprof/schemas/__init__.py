"""Shipped JSON Schemas (package data): scenario.schema.json, report.schema.json and
advice.schema.json.

They are generated from the pydantic models (memprof/scenario/model.py, memprof/reports/schema.py)
by `python -m memprof.schemas`; a test fails when a shipped copy is out of date.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

SCENARIO = "scenario.schema.json"
REPORT = "report.schema.json"
ADVICE = "advice.schema.json"


def read_schema(name: str) -> dict:
    """A shipped schema by file name."""
    return json.loads(resources.files(__name__).joinpath(name).read_text(encoding="utf-8"))


def generate() -> dict[str, dict]:
    from memprof.advise.schema import advice_json_schema
    from memprof.reports.schema import report_json_schema
    from memprof.scenario.model import scenario_json_schema

    return {
        SCENARIO: scenario_json_schema(),
        REPORT: report_json_schema(),
        ADVICE: advice_json_schema(),
    }


def dump(schema: dict) -> str:
    return json.dumps(schema, indent=2, sort_keys=False) + "\n"


def write_all(directory: str | Path | None = None) -> list[Path]:
    """Regenerate the shipped files (atomically)."""
    from memprof.reports.store import atomic_write_text

    directory = Path(directory or Path(__file__).parent)
    return [
        atomic_write_text(directory / name, dump(schema)) for name, schema in generate().items()
    ]
