"""Fixtures for the dashboard tests: a runs directory of synthetic reports and a scenarios
folder, an app over them, and a TestClient."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from memprof.reports.store import save_report
from tests.web.synthetic import make_failed_report, make_report

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def base_report() -> dict:
    """An MLP step with two variants, out_of_place (baseline) and inplace."""
    return make_report(
        scenario="mlp-train", layers=4, iterations=2, created_at="2026-11-21T05:15:00Z"
    )


@pytest.fixture(scope="session")
def other_report() -> dict:
    """A second scenario, so the runs page has something to filter."""
    return make_report(scenario="wide-mlp", layers=6, width=512, created_at="2026-11-20T09:00:00Z")


@pytest.fixture(scope="session")
def failed_report() -> dict:
    """A run whose inplace variant ran out of memory halfway."""
    return make_failed_report(scenario="oom-mlp", layers=3, created_at="2026-11-19T12:00:00Z")


@pytest.fixture
def report(base_report) -> dict:
    return copy.deepcopy(base_report)


@pytest.fixture
def runs_dir(tmp_path, base_report, other_report, failed_report) -> Path:
    runs = tmp_path / "memprof-runs"
    for r in (base_report, other_report, failed_report):
        save_report(r, runs)
    return runs


@pytest.fixture
def scenarios_dir(tmp_path) -> Path:
    folder = tmp_path / "scenarios"
    (folder / "nets").mkdir(parents=True)
    (folder / "relu.yaml").write_text(
        "name: relu-block\ndescription: one ReLU, in place or not\n"
        "variants:\n  out_of_place: {inplace: false}\n  inplace: {inplace: true}\n"
    )
    (folder / "nets" / "mlp.yml").write_text("name: mlp\ndescription: a small MLP\n")
    (folder / "broken.yaml").write_text("name: [unclosed\n")
    (folder / "notes.txt").write_text("not a scenario")
    (tmp_path / "secret.yaml").write_text("name: secret\ndescription: outside the folder\n")
    return folder


@pytest.fixture
def app(runs_dir, scenarios_dir):
    from web.app import create_app

    return create_app(runs_dir, scenarios_dir, warm_cache=False)


@pytest.fixture
def client(app):
    with TestClient(app) as c:
        yield c
