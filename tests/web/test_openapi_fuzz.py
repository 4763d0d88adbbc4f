"""Schemathesis against the dashboard's own /openapi.json (issue 14): every operation, with
generated valid and invalid inputs (bounded examples), must answer what the document says:
no 500, a status code the operation documents, a body that matches its schema."""

from __future__ import annotations

import pytest

schemathesis = pytest.importorskip("schemathesis")
from hypothesis import HealthCheck, settings  # noqa: E402
from schemathesis.checks import not_a_server_error  # noqa: E402
from schemathesis.specs.openapi.checks import (  # noqa: E402
    content_type_conformance,
    negative_data_rejection,
    response_schema_conformance,
    status_code_conformance,
)

from memprof.reports.store import save_report  # noqa: E402
from tests.web.synthetic import make_failed_report, make_report  # noqa: E402

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    negative_data_rejection,
]


def _app():
    import tempfile
    from pathlib import Path

    from web.app import create_app

    root = Path(tempfile.mkdtemp(prefix="memprof-openapi-"))
    runs, scenarios = root / "runs", root / "scenarios"
    for r in (
        make_report(
            scenario="mlp-train", layers=2, iterations=1, created_at="2026-11-21T05:15:00Z"
        ),
        make_failed_report(scenario="oom-mlp", layers=2, created_at="2026-11-19T12:00:00Z"),
    ):
        save_report(r, runs)
    (runs / "20260101T000000Z-broken-000000.json").write_text('{"schema_version": 1}')
    scenarios.mkdir()
    (scenarios / "relu.yaml").write_text(
        "name: relu-small\ninputs:\n  x: {shape: [2, 2]}\nprogram:\n  - {id: r, op: relu, in: x}\n"
    )
    return create_app(runs, scenarios, warm_cache=False)


schema = schemathesis.openapi.from_asgi("/openapi.json", _app())


@schema.parametrize()
@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    derandomize=True,
)
def test_every_operation_answers_as_documented(case):
    case.call_and_validate(checks=CHECKS)
