"""The run page's "In-place advice" panel and /api/runs/{id}/advice (issue 12)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from memprof.reports.store import save_report
from memprof.runner import run_scenario

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def advice_client(tmp_path):
    from web.app import create_app

    scenarios = tmp_path / "scenarios"
    scenarios.mkdir()
    shutil.copy(REPO / "scenarios/multi_branch.yaml", scenarios / "multi_branch.yaml")
    shutil.copy(REPO / "scenarios/resnet_block.yaml", scenarios / "resnet_block.yaml")
    runs = tmp_path / "runs"
    ids = {}
    for name in ("multi_branch", "resnet_block"):
        report = run_scenario(scenarios / f"{name}.yaml", device="meta")
        save_report(report, runs)
        ids[name] = report["run_id"]
    with TestClient(create_app(runs, scenarios, warm_cache=False)) as client:
        yield client, ids, tmp_path


def test_advice_is_computed_on_request_and_kept(advice_client):
    client, ids, tmp_path = advice_client
    url = f"/api/runs/{ids['multi_branch']}/advice"
    assert client.get(url).status_code == 204  # nothing computed yet (no error in a browser)
    r = client.post(url, params={"variant": "out_of_place"})
    assert r.status_code == 200, r.text
    advice = r.json()
    (h,) = advice["candidates"]
    assert (h["node"], h["verdict"], h["involves"]) == ("h", "unsafe", ["y"])
    assert advice["device"] == "meta"  # the dashboard runs on meta unless --real-devices
    assert advice["path"] == "multi_branch.yaml"  # no server paths
    assert str(tmp_path) not in r.text
    again = client.get(url, params={"variant": "out_of_place"})
    assert again.status_code == 200 and again.json() == advice


def test_default_variant_is_the_baseline_and_savings_are_measured(advice_client):
    client, ids, _ = advice_client
    r = client.post(f"/api/runs/{ids['resnet_block']}/advice")
    assert r.status_code == 200, r.text
    advice = r.json()
    assert advice["variant"] == "out_of_place"
    assert advice["switched"] == ["r1", "s", "out"]
    assert advice["peak_before"] - advice["peak_after"] == 393216  # 3 x 2x16x32x32 float32


def test_errors_name_what_is_missing(advice_client):
    client, ids, _ = advice_client
    r = client.post(f"/api/runs/{ids['multi_branch']}/advice", params={"variant": "nope"})
    assert r.status_code == 404 and "has no variant 'nope'" in r.json()["detail"]
    assert client.post("/api/runs/no-such-run/advice").status_code == 404


def test_a_run_whose_scenario_is_not_in_the_folder_is_404(client, base_report):
    r = client.post(f"/api/runs/{base_report['run_id']}/advice")
    assert r.status_code == 404
    assert "no scenario 'mlp-train' in the scenarios folder" in r.json()["detail"]


def test_the_run_page_has_the_panel(advice_client):
    client, ids, _ = advice_client
    page = client.get(f"/runs/{ids['multi_branch']}?variant=out_of_place")
    assert page.status_code == 200
    html = page.text
    assert 'id="advice-panel"' in html and "In-place advice" in html
    assert f'data-advice-url="/api/runs/{ids["multi_branch"]}/advice?variant=out_of_place"' in html
    assert '<script src="/static/advice.js" defer></script>' in html
    js = client.get("/static/advice.js")
    assert js.status_code == 200 and "markNodes" in js.text
