"""The dashboard against hostile requests and files (issue 14): bad bodies, other origins,
real devices, symlinks out of its folders, bombs in the scenarios folder, unreadable reports."""

from __future__ import annotations

import json
import time

import pytest
from fastapi.testclient import TestClient

from tests.memprof.report_factory import report as good_report
from tests.web.test_api import wait_for


def post(client, body: str, **headers):
    return client.post(
        "/api/runs", content=body, headers={"content-type": "application/json", **headers}
    )


@pytest.mark.parametrize(
    "body",
    [
        '{"scenario": NaN}',
        '{"scenario": "relu.yaml", "variants": [Infinity]}',
        '{"scenario": -Infinity}',
    ],
)
def test_nan_and_infinity_in_a_body_are_422_not_500(client, body):
    response = post(client, body)
    assert response.status_code == 422, response.text
    assert "detail" in response.json()


def test_an_unparsable_body_is_400_as_documented(client):
    response = post(client, '{"scenario":')
    assert response.status_code == 400
    assert response.json()["detail"].startswith("the request body is not valid JSON")
    documented = client.get("/openapi.json").json()["paths"]["/api/runs"]["post"]["responses"]
    assert "400" in documented


@pytest.mark.parametrize(("field", "value"), [("device", "gpu"), ("allocator", "bump")])
def test_invalid_device_or_allocator_is_422_at_submission(client, field, value):
    response = client.post("/api/runs", json={"scenario": "relu.yaml", field: value})
    assert response.status_code == 422
    assert client.get("/api/jobs").json() == []


def test_a_real_device_is_refused_unless_the_server_allows_it(client):
    response = client.post("/api/runs", json={"scenario": "relu.yaml", "device": "cpu"})
    assert response.status_code == 403
    assert "--real-devices" in response.json()["detail"]


def test_jobs_run_on_meta_by_default(client, scenarios_dir):
    (scenarios_dir / "tiny.yaml").write_text(
        "name: tiny\ndevice: cpu\ninputs:\n  x: {shape: [4, 4]}\n"
        "program:\n  - {id: r, op: relu, in: x}\n"
    )
    job = wait_for(client, client.post("/api/runs", json={"scenario": "tiny.yaml"}).json())
    assert job["status"] == "done", job
    run = client.get(f"/api/runs/{job['run_id']}", params={"timeline": False}).json()
    assert run["variants"][0]["device"] == "meta"
    assert "timeline" not in run["variants"][0]


def test_with_real_devices_a_job_runs_under_the_memory_limit(runs_dir, scenarios_dir):
    from web.app import create_app

    (scenarios_dir / "big.yaml").write_text(
        "name: big\ndevice: cpu\ninputs:\n  x: {shape: [1024, 1024]}\n"
        "program:\n  - {id: r, op: relu, in: x}\n"
    )
    app = create_app(
        runs_dir, scenarios_dir, warm_cache=False, real_devices=True, job_memory_limit=6 * 2**20
    )
    with TestClient(app) as client:
        job = wait_for(client, client.post("/api/runs", json={"scenario": "big.yaml"}).json())
        assert job["status"] == "done", job
        run = client.get(f"/api/runs/{job['run_id']}", params={"timeline": False}).json()
    [v] = run["variants"]
    assert v["device"] == "cpu" and v["status"] == "oom"  # 4 MiB input, 4 MiB result > 6 MiB
    assert v["peak_allocated_bytes"] == 4 * 2**20


def test_job_errors_do_not_show_absolute_server_paths(client, scenarios_dir):
    (scenarios_dir / "bad.yaml").write_text("name: bad\nprogram: 3\n")
    response = client.post("/api/runs", json={"scenario": "bad.yaml"})
    assert response.status_code == 422
    detail = response.json()["detail"]
    assert detail.startswith("bad.yaml:2:10: ")
    assert str(scenarios_dir.resolve()) not in detail


@pytest.mark.parametrize(
    "headers",
    [
        {"origin": "http://evil.example"},
        {"origin": "null"},
        {"sec-fetch-site": "cross-site"},
        {"sec-fetch-site": "same-site"},
        {"origin": "http://testserver:8080"},
    ],
)
def test_state_changing_requests_from_another_origin_are_refused(client, headers):
    response = client.post("/api/runs", json={"scenario": "relu.yaml"}, headers=headers)
    assert response.status_code == 403
    assert response.json()["detail"].startswith("cross-site request refused")
    assert client.get("/api/jobs").json() == []


@pytest.mark.parametrize(
    "headers",
    [{}, {"origin": "http://testserver"}, {"sec-fetch-site": "same-origin"}],
)
def test_same_origin_requests_pass(client, headers):
    response = client.post("/api/runs", json={"scenario": "nope.yaml"}, headers=headers)
    assert response.status_code == 404  # reached the route


def test_reads_from_another_origin_are_not_state_changing(client):
    assert client.get("/api/runs", headers={"origin": "http://evil.example"}).status_code == 200


def test_a_symlink_out_of_the_runs_folder_is_never_served(client, runs_dir, tmp_path):
    outside = tmp_path / "outside.json"
    outside.write_text(json.dumps(good_report({"a": 1}, run_id="20990101T000000Z-secret-aaaaaa")))
    (runs_dir / "20990101T000000Z-secret-aaaaaa.json").symlink_to(outside)
    assert client.get("/api/runs/20990101T000000Z-secret-aaaaaa").status_code == 404
    ids = [r["run_id"] for r in client.get("/api/runs").json()]
    assert "20990101T000000Z-secret-aaaaaa" not in ids


def test_a_symlink_out_of_the_scenarios_folder_is_never_listed(client, scenarios_dir, tmp_path):
    (scenarios_dir / "escape.yaml").symlink_to(tmp_path / "secret.yaml")
    ids = [s["id"] for s in client.get("/api/scenarios").json()]
    assert "escape.yaml" not in ids
    assert client.get("/api/scenarios/escape.yaml").status_code == 404


def test_a_bomb_in_the_scenarios_folder_does_not_hang_the_listing(client, scenarios_dir):
    (scenarios_dir / "bomb.yaml").write_text(
        "l0: &a0 [x, x, x, x, x, x, x, x, x]\n"
        + "".join(f"l{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]\n" for i in range(1, 9))
    )
    axes = "".join(f"  p{i}: [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]\n" for i in range(9))
    (scenarios_dir / "matrix.yaml").write_text("name: m\nmatrix:\n" + axes)
    (scenarios_dir / "deep.yaml").write_text("name: " + "[" * 50000 + "]" * 50000 + "\n")
    t0 = time.monotonic()
    listed = {s["id"]: s for s in client.get("/api/scenarios").json()}
    assert time.monotonic() - t0 < 10
    assert "aliases are expanded" in listed["bomb.yaml"]["error"]
    assert "levels" in listed["deep.yaml"]["error"]
    assert listed["matrix.yaml"]["variants"] == []


@pytest.mark.parametrize(
    "content",
    [
        '{"schema_version": 1, "variants": "x"}',
        "[" * 100000 + "]" * 100000,
        json.dumps({**good_report({"a": 1}), "tool": None}),
        json.dumps(
            {
                **good_report({"a": 1}),
                "variants": [{**good_report({"a": 1})["variants"][0], "peak_allocated_bytes": "x"}],
            }
        ),
    ],
)
def test_one_unreadable_report_never_breaks_the_index(client, runs_dir, base_report, content):
    (runs_dir / "20300101T000000Z-bad-000000.json").write_text(content)
    runs = client.get("/api/runs")
    assert runs.status_code == 200
    by_id = {r["run_id"]: r for r in runs.json()}
    assert by_id["20300101T000000Z-bad-000000"]["status"] == "unreadable"
    assert by_id[base_report["run_id"]]["status"] != "unreadable"
    rid = base_report["run_id"]
    for page in ("/", "/compare", f"/compare?a={rid}:out_of_place&b={rid}:inplace"):
        assert client.get(page, headers={"accept": "text/html"}).status_code == 200
    one = client.get("/api/runs/20300101T000000Z-bad-000000", params={"timeline": False})
    assert one.status_code == 500  # the file is named, the server keeps serving
    assert "20300101T000000Z-bad-000000" in one.json()["detail"]
