"""The JSON API through FastAPI's TestClient, over a runs directory of synthetic reports."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from memprof import history
from memprof.reports.store import save_report
from tests.web.synthetic import make_report

ROOT = Path(__file__).resolve().parents[2]


def run_id_of(report: dict) -> str:
    return report["run_id"]


# ---------------------------------------------------------------------------------------------
# /api/runs


def test_runs_are_listed_newest_first_with_peaks_status_and_warnings(
    client, base_report, other_report, failed_report
):
    # Given three saved runs, when the runs are listed
    runs = client.get("/api/runs").json()

    # then they come newest first, with per-variant peaks and warning counts
    assert [r["run_id"] for r in runs] == [
        base_report["run_id"],
        other_report["run_id"],
        failed_report["run_id"],
    ]
    first = runs[0]
    assert first["scenario"] == "mlp-train"
    assert first["created_at"] == base_report["created_at"]
    assert first["baseline_variant"] == "out_of_place"
    assert {v["name"]: v["peak_allocated_bytes"] for v in first["variants"]} == {
        v["name"]: v["peak_allocated_bytes"] for v in base_report["variants"]
    }
    assert first["warnings"] == sum(len(v["warnings"]) for v in base_report["variants"])
    assert runs[2]["status"] == "failed"
    assert [v["status"] for v in runs[2]["variants"]] == ["ok", "oom"]


def test_runs_can_be_filtered_by_scenario(client, other_report):
    runs = client.get("/api/runs", params={"scenario": "wide-mlp"}).json()
    assert [r["run_id"] for r in runs] == [other_report["run_id"]]
    assert client.get("/api/runs", params={"scenario": "nothing-like-it"}).json() == []


def test_a_run_is_served_as_written(client, runs_dir, base_report):
    response = client.get(f"/api/runs/{run_id_of(base_report)}")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/json")
    assert response.json() == json.loads((runs_dir / f"{base_report['run_id']}.json").read_text())


def test_a_run_without_timelines_drops_only_the_event_columns(client, base_report):
    report = client.get(f"/api/runs/{run_id_of(base_report)}", params={"timeline": False}).json()
    assert all("timeline" not in v for v in report["variants"])
    assert report["variants"][1]["peak"] == base_report["variants"][1]["peak"]
    assert report["comparison"] == base_report["comparison"]


@pytest.mark.parametrize(
    "run_id",
    ["no-such-run", "..", "..%2F..%2Fetc%2Fpasswd", "%2E%2E", ".hidden", "a..b"],
)
def test_unknown_or_malformed_run_ids_are_404_with_a_json_message(client, run_id):
    # (the client resolves a bare "..": that request never reaches a run route, still 404)
    for url in (f"/api/runs/{run_id}", f"/api/runs/{run_id}?timeline=false"):
        response = client.get(url)
        assert response.status_code == 404, url
        assert response.headers["content-type"] == "application/json"
        assert response.json()["detail"]


def test_a_file_that_is_not_a_report_is_listed_as_unreadable_and_answers_500(client, runs_dir):
    (runs_dir / "20270101T000000Z-broken-000000.json").write_text("{not json")
    runs = client.get("/api/runs").json()
    broken = next(r for r in runs if r["run_id"] == "20270101T000000Z-broken-000000")
    assert broken["status"] == "unreadable"
    assert "not valid JSON" in broken["error"]
    response = client.get("/api/runs/20270101T000000Z-broken-000000?timeline=false")
    assert response.status_code == 500
    assert "not valid JSON" in response.json()["detail"]
    page = client.get("/runs/20270101T000000Z-broken-000000", headers={"accept": "text/html"})
    assert page.status_code == 500 and "not valid JSON" in page.text
    assert "<h1>Unreadable report</h1>" in page.text and 'href="/"' in page.text
    index = client.get("/", headers={"accept": "text/html"})
    assert index.status_code == 200  # the other runs are still listed, the broken one marked
    assert "20270101T000000Z-broken-000000" in index.text and "not valid JSON" in index.text


def test_a_rewritten_report_is_read_again(client, runs_dir, report):
    rid = report["run_id"]
    assert client.get("/api/runs").json()[0]["scenario"] == "mlp-train"
    report["scenario"]["name"] = "renamed"
    time.sleep(0.01)  # a new mtime
    save_report(report, runs_dir)
    assert client.get("/api/runs").json()[0]["scenario"] == "renamed"
    assert client.get(f"/api/runs/{rid}?timeline=false").json()["scenario"]["name"] == "renamed"


# ---------------------------------------------------------------------------------------------
# /api/runs/{id}/variants/{name}/timeline


def timeline_url(report: dict, variant: str = "inplace") -> str:
    return f"/api/runs/{report['run_id']}/variants/{variant}/timeline"


def test_a_small_timeline_is_served_whole(client, base_report):
    variant = base_report["variants"][1]
    events = len(variant["timeline"]["seq"])
    series = client.get(timeline_url(base_report), params={"max_points": events}).json()
    assert series["reduced"] is False
    assert series["index"] == list(range(events))
    for column in ("allocated", "reserved", "time_s", "node", "op", "tensor", "category"):
        assert series[column] == variant["timeline"][column]
    assert series["peak"]["event_index"] == variant["peak"]["event_index"]
    assert series["peak"]["allocated_bytes"] == variant["peak_allocated_bytes"]


@pytest.mark.parametrize("max_points", [3, 4, 7, 20, 50])
def test_a_reduced_timeline_keeps_first_last_and_the_exact_peak(client, base_report, max_points):
    variant = base_report["variants"][0]
    allocated = variant["timeline"]["allocated"]
    series = client.get(
        timeline_url(base_report, "out_of_place"), params={"max_points": max_points}
    ).json()

    assert series["reduced"] is True
    assert len(series["index"]) <= max_points
    assert series["index"] == sorted(set(series["index"]))
    assert series["index"][0] == 0 and series["index"][-1] == len(allocated) - 1
    assert variant["peak"]["event_index"] in series["index"]
    assert max(series["allocated"]) == variant["peak_allocated_bytes"]
    assert series["allocated"] == [allocated[i] for i in series["index"]]


def test_category_stacks_add_up_to_allocated_bytes(client, base_report):
    series = client.get(timeline_url(base_report), params={"max_points": 25}).json()
    totals = [sum(col) for col in zip(*series["categories"].values(), strict=True)]
    assert totals == series["allocated"]
    assert "untracked" not in series["categories"]


def test_a_window_is_reduced_on_its_own_and_keeps_its_own_peak(client, base_report):
    allocated = base_report["variants"][1]["timeline"]["allocated"]
    start, end = 5, 40
    series = client.get(
        timeline_url(base_report), params={"start": start, "end": end, "max_points": 9}
    ).json()
    assert (series["start"], series["end"]) == (start, end)
    assert series["index"][0] == start and series["index"][-1] == end
    window_max = max(allocated[start : end + 1])
    assert series["window_peak"]["allocated_bytes"] == window_max
    assert series["window_peak"]["event_index"] == allocated.index(window_max, start)
    assert max(series["allocated"]) == window_max


@pytest.mark.parametrize(
    "params",
    [
        {"max_points": 2},
        {"max_points": 0},
        {"max_points": -5},
        {"max_points": 1_000_000},
        {"max_points": "many"},
        {"start": -1},
        {"end": -1},
        {"start": "x"},
        {"start": 30, "end": 10},
        {"start": 100_000},
        {"end": 100_000},
    ],
)
def test_bad_timeline_parameters_are_422(client, base_report, params):
    response = client.get(timeline_url(base_report), params=params)
    assert response.status_code == 422, response.text
    assert response.json()["detail"]


def test_unknown_run_or_variant_in_a_timeline_is_404(client, base_report):
    response = client.get(timeline_url(base_report, "no-such-variant"))
    assert response.status_code == 404
    assert "has no variant 'no-such-variant'" in response.json()["detail"]
    assert "inplace" in response.json()["detail"]
    response = client.get("/api/runs/no-such-run/variants/inplace/timeline")
    assert response.status_code == 404
    assert response.json()["detail"] == "no run 'no-such-run' in the runs directory"


def test_an_oom_event_counts_for_no_bytes(client, failed_report):
    variant = failed_report["variants"][1]
    assert variant["timeline"]["action"][-1] == "oom"
    series = client.get(timeline_url(failed_report)).json()
    totals = [sum(col) for col in zip(*series["categories"].values(), strict=True)]
    assert totals == series["allocated"]


def test_the_timeline_figure_marks_the_peak_the_report_names(client, base_report):
    variant = base_report["variants"][0]
    fig = client.get(
        timeline_url(base_report, "out_of_place") + "/figure",
        params={"max_points": 10, "x": "time"},
    ).json()
    traces = {t["name"]: t for t in fig["data"]}
    assert traces["peak"]["y"] == [variant["peak_allocated_bytes"]]
    assert traces["peak"]["x"] == [variant["timeline"]["time_s"][variant["peak"]["event_index"]]]
    assert max(traces["allocated"]["y"]) == variant["peak_allocated_bytes"]
    assert fig["layout"]["meta"]["x"] == "time"
    assert (
        client.get(timeline_url(base_report) + "/figure", params={"x": "bytes"}).status_code == 422
    )


# ---------------------------------------------------------------------------------------------
# /api/scenarios, POST /api/runs, /api/jobs


def test_scenarios_are_the_yaml_files_of_the_folder(client):
    scenarios = {s["id"]: s for s in client.get("/api/scenarios").json()}
    assert set(scenarios) == {"broken.yaml", "nets/mlp.yml", "relu.yaml"}
    assert scenarios["relu.yaml"]["name"] == "relu-block"
    assert scenarios["relu.yaml"]["description"] == "one ReLU, in place or not"
    assert scenarios["relu.yaml"]["variants"] == ["out_of_place", "inplace"]
    assert scenarios["nets/mlp.yml"]["error"] is None
    assert scenarios["broken.yaml"]["error"].startswith("cannot read")


def test_the_folder_lists_what_memprof_list_finds_with_every_variant_a_run_would_have(
    client, scenarios_dir
):
    # Given a shipped matrix scenario, and a file in a hidden folder
    from tests.web.conftest import REPO

    (scenarios_dir / "giant.yaml").write_text((REPO / "scenarios" / "giant_meta.yaml").read_text())
    (scenarios_dir / ".drafts").mkdir()
    (scenarios_dir / ".drafts" / "wip.yaml").write_text("name: wip\n")

    scenarios = {s["id"]: s for s in client.get("/api/scenarios").json()}

    # then the matrix is expanded as the runner expands it, and hidden files are not listed
    assert scenarios["giant.yaml"]["variants"] == [
        "batch=1,inplace=false",
        "batch=1,inplace=true",
        "batch=4,inplace=false",
        "batch=4,inplace=true",
    ]
    assert scenarios["nets/mlp.yml"]["variants"] == ["default"]
    assert not any(i.startswith(".drafts") for i in scenarios)


def test_a_scenario_is_found_by_id_or_name(client):
    assert client.get("/api/scenarios/nets/mlp.yml").json()["name"] == "mlp"
    assert client.get("/api/scenarios/relu-block").json()["id"] == "relu.yaml"


@pytest.mark.parametrize(
    "path",
    [
        "../secret.yaml",
        "..%2Fsecret.yaml",
        "%2E%2E/secret.yaml",
        "nets/../../secret.yaml",
        "nets/%2E%2E/relu.yaml",
        "%2Fetc%2Fpasswd",
        "secret",
        "notes.txt",
    ],
)
def test_scenario_lookups_cannot_leave_the_folder(client, path):
    response = client.get(f"/api/scenarios/{path}")
    assert response.status_code == 404
    assert response.json()["detail"]  # (a plain "../" is resolved by the client: "Not Found")


def test_symlinks_out_of_the_scenarios_folder_are_not_listed(client, scenarios_dir):
    (scenarios_dir / "escape.yaml").symlink_to(scenarios_dir.parent / "secret.yaml")
    (scenarios_dir / "inside.yaml").symlink_to(scenarios_dir / "relu.yaml")
    ids = {s["id"] for s in client.get("/api/scenarios").json()}
    assert "escape.yaml" not in ids and "inside.yaml" in ids
    assert client.post("/api/runs", json={"scenario": "escape.yaml"}).status_code == 404


@pytest.mark.parametrize(
    "scenario",
    [
        "../secret.yaml",
        "nets/../../secret.yaml",
        "nets/../relu.yaml",
        "/etc/passwd",
        "{tmp}/secret.yaml",
        "secret",
        "notes.txt",
        "relu",
    ],
)
def test_post_runs_only_runs_files_of_the_scenarios_folder(client, scenarios_dir, scenario):
    scenario = scenario.format(tmp=scenarios_dir.parent)
    response = client.post("/api/runs", json={"scenario": scenario})
    assert response.status_code == 404
    assert response.json()["detail"] == f"no scenario {scenario!r} in the scenarios folder"
    assert client.get("/api/jobs").json() == []


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"scenario": ""},
        {"scenario": 3},
        {"scenario": "relu.yaml", "surprise": True},
        {"scenario": "relu.yaml", "device": "cpu; rm -rf /"},
        {"scenario": "relu.yaml", "variants": "inplace"},
        {"scenario": "relu.yaml", "variants": [""]},
    ],
)
def test_post_runs_rejects_malformed_bodies_with_422(client, body):
    assert client.post("/api/runs", json=body).status_code == 422


def test_post_runs_wants_json(client):
    response = client.post(
        "/api/runs",
        content=b"scenario=relu.yaml",
        headers={"content-type": "application/x-www-form-urlencoded"},
    )
    assert response.status_code == 422


def test_an_unreadable_scenario_cannot_be_run(client):
    response = client.post("/api/runs", json={"scenario": "broken.yaml"})
    assert response.status_code == 422
    assert "cannot be read" in response.json()["detail"]


def test_request_bodies_over_64_kib_are_413(client):
    body = {"scenario": "relu.yaml", "variants": ["v" * 100] * 1000}
    response = client.post("/api/runs", json=body)
    assert response.status_code == 413
    assert response.json()["detail"] == "request body larger than 65536 bytes"


def test_streamed_request_bodies_over_64_kib_are_413(client):
    def chunks():  # no Content-Length: the limit counts what arrives
        yield b'{"scenario": "relu.yaml", "variants": ['
        for _ in range(2000):
            yield b'"' + b"v" * 60 + b'",'
        yield b'"v"]}'

    response = client.post(
        "/api/runs", content=chunks(), headers={"content-type": "application/json"}
    )
    assert response.status_code == 413


def test_unknown_job_is_404(client):
    response = client.get("/api/jobs/0123456789ab")
    assert response.status_code == 404
    assert response.json()["detail"] == "no job '0123456789ab'"


def wait_for(client, job: dict, timeout: float = 120) -> dict:
    """The job once it is no longer queued or running."""
    deadline = time.monotonic() + timeout
    while job["status"] in ("queued", "running") and time.monotonic() < deadline:
        time.sleep(0.02)
        job = client.get(f"/api/jobs/{job['id']}").json()
    return job


def test_post_runs_runs_the_scenario_in_the_background_and_saves_its_report(
    client, scenarios_dir, runs_dir
):
    # Given the project's relu scenario in the scenarios folder
    from tests.web.conftest import REPO

    (scenarios_dir / "relu_real.yaml").write_text((REPO / "scenarios" / "relu.yaml").read_text())

    # when it is posted
    response = client.post("/api/runs", json={"scenario": "relu_real.yaml"})
    assert response.status_code == 202
    job = response.json()
    assert response.headers["location"] == f"/api/jobs/{job['id']}"
    assert job["status"] in ("queued", "running")

    # then its progress can be read until it is done, and the run is saved
    job = wait_for(client, job)
    assert job["status"] == "done", job
    assert job["fraction"] == 1.0
    assert job["progress"]["stage"] == "done" and job["progress"]["total"] == 2
    run = client.get(f"/api/runs/{job['run_id']}").json()
    assert (runs_dir / f"{job['run_id']}.json").is_file()
    assert run["scenario"]["name"] == "relu-block"
    peaks = {v["name"]: v["peak_allocated_bytes"] for v in run["variants"]}
    assert peaks == {"inplace": 64 * 1024**2, "out_of_place": 128 * 1024**2}
    assert any(r["run_id"] == job["run_id"] for r in client.get("/api/runs").json())


def test_a_scenario_memprof_validate_rejects_is_refused_before_any_job(client, scenarios_dir):
    (scenarios_dir / "bad.yaml").write_text("name: bad\ndescription: no program\n")
    response = client.post("/api/runs", json={"scenario": "bad.yaml"})
    assert response.status_code == 422
    assert response.json()["detail"] == (
        "bad.yaml:1:1: expected field 'program' in the scenario, found no such field"
    )
    assert client.get("/api/jobs").json() == []


def test_an_unknown_variant_is_refused_with_a_suggestion(client, scenarios_dir):
    (scenarios_dir / "real.yaml").write_text((ROOT / "scenarios" / "relu.yaml").read_text())
    response = client.post("/api/runs", json={"scenario": "real.yaml", "variants": ["inplce"]})
    assert response.status_code == 422
    assert response.json()["detail"] == (
        "scenario 'real.yaml': unknown variant 'inplce' (did you mean 'inplace'?); the "
        "scenario defines: inplace, out_of_place"
    )
    assert client.get("/api/jobs").json() == []
    ok = client.post("/api/runs", json={"scenario": "real.yaml", "variants": ["inplace"]})
    assert ok.status_code == 202
    assert wait_for(client, ok.json())["status"] == "done"


# ---------------------------------------------------------------------------------------------
# /api/runs/{run_id}/history and /api/runs/{run_id}/trace


def later_run(report: dict, created_at: str, layers: int) -> dict:
    """Another run of the same scenario, with different peaks."""
    return make_report(
        scenario=report["scenario"]["name"], layers=layers, iterations=2, created_at=created_at
    )


def test_history_of_a_run_lists_past_runs_of_its_scenario_per_variant(
    client, runs_dir, base_report, other_report
):
    # Given three recorded runs of mlp-train and one of another scenario
    older = later_run(base_report, "2026-11-20T05:15:00Z", layers=3)
    newer = later_run(base_report, "2026-11-22T05:15:00Z", layers=5)
    for r in (older, base_report, newer, other_report):
        assert history.append(runs_dir, r, source="check") == 2

    # when the history of the middle run is asked for
    response = client.get(f"/api/runs/{base_report['run_id']}/history")

    # then it has the three runs of its scenario, oldest first, with this run's rows marked
    assert response.status_code == 200
    body = response.json()
    assert body["scenario"] == "mlp-train" and body["recorded"] is True
    assert body["runs"] == 3 and body["variants"] == ["out_of_place", "inplace"]
    assert [r["run_id"] for r in body["rows"]] == [
        r["run_id"] for r in (older, base_report, newer) for _ in range(2)
    ]
    assert [r["peak_allocated_bytes"] for r in body["rows"]] == [
        v["peak_allocated_bytes"] for r in (older, base_report, newer) for v in r["variants"]
    ]
    assert [r["current"] for r in body["rows"]] == [False, False, True, True, False, False]
    assert {r["source"] for r in body["rows"]} == {"check"}


def test_history_keeps_the_newest_runs_or_those_up_to_an_older_run(client, runs_dir, base_report):
    runs = [
        later_run(base_report, f"2026-11-{day:02d}T00:00:00Z", layers=2 + day % 3)
        for day in (10, 11, 12)
    ]
    for r in [base_report, *runs]:  # base_report (11-21) is the newest
        history.append(runs_dir, r)
    rid = base_report["run_id"]
    newest = client.get(f"/api/runs/{rid}/history", params={"limit": 2}).json()
    assert {r["run_id"] for r in newest["rows"]} == {runs[-1]["run_id"], rid}

    save_report(runs[0], runs_dir)  # an older run's page shows the runs up to it
    oldest = client.get(f"/api/runs/{runs[0]['run_id']}/history", params={"limit": 2}).json()
    assert {r["run_id"] for r in oldest["rows"]} == {runs[0]["run_id"]}
    assert oldest["recorded"] is True


def test_history_of_a_run_never_recorded_is_empty(client, base_report):
    body = client.get(f"/api/runs/{base_report['run_id']}/history").json()
    assert body == {
        "run_id": base_report["run_id"],
        "scenario": "mlp-train",
        "recorded": False,
        "runs": 0,
        "variants": [],
        "rows": [],
    }


@pytest.mark.parametrize("params", [{"limit": 0}, {"limit": 1001}, {"limit": "x"}])
def test_bad_history_parameters_are_422(client, base_report, params):
    response = client.get(f"/api/runs/{base_report['run_id']}/history", params=params)
    assert response.status_code == 422


def test_an_unreadable_history_is_500_in_the_api_and_a_note_on_the_run_page(
    client, runs_dir, base_report
):
    (runs_dir / "history.sqlite").write_bytes(b"not a database" * 100)
    response = client.get(f"/api/runs/{base_report['run_id']}/history")
    assert response.status_code == 500
    assert response.json()["detail"].startswith("history.sqlite cannot be read")
    page = client.get(f"/runs/{base_report['run_id']}")
    assert page.status_code == 200
    assert "The history cannot be shown: history.sqlite cannot be read" in page.text


def test_history_of_an_unknown_run_is_404(client):
    response = client.get("/api/runs/no-such-run/history")
    assert response.status_code == 404
    assert response.json()["detail"] == "no run 'no-such-run' in the runs directory"


def test_a_run_started_from_the_dashboard_is_recorded_in_the_history(
    client, scenarios_dir, runs_dir
):
    # Given the project's relu scenario in the scenarios folder
    from tests.web.conftest import REPO

    (scenarios_dir / "relu_real.yaml").write_text((REPO / "scenarios" / "relu.yaml").read_text())

    # when two runs of it are started and finish
    jobs = []
    for _ in range(2):
        job = wait_for(client, client.post("/api/runs", json={"scenario": "relu_real.yaml"}).json())
        assert job["status"] == "done", job
        jobs.append(job)

    # then both are in the history, recorded by the web, and the last one is current
    body = client.get(f"/api/runs/{jobs[-1]['run_id']}/history").json()
    assert [r["run_id"] for r in body["rows"]] == [j["run_id"] for j in jobs for _ in range(2)]
    assert {r["source"] for r in body["rows"]} == {"web"}
    assert body["recorded"] is True and body["runs"] == 2
    assert [r["current"] for r in body["rows"]] == [False, False, True, True]
    assert history.query(runs_dir, "relu-block")[-1]["run_id"] == jobs[-1]["run_id"]


def test_the_trace_of_a_run_is_a_chrome_trace_download(client, base_report):
    from tests.memprof.test_trace import check_trace

    response = client.get(f"/api/runs/{base_report['run_id']}/trace")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/json")
    assert response.headers["content-disposition"] == (
        f'attachment; filename="{base_report["run_id"]}.trace.json"'
    )
    check_trace(response.json(), base_report)


def test_the_trace_of_an_unknown_run_is_404(client):
    response = client.get("/api/runs/no-such-run/trace")
    assert response.status_code == 404
    assert response.json()["detail"] == "no run 'no-such-run' in the runs directory"


# ---------------------------------------------------------------------------------------------
# The app around the API


def test_openapi_describes_every_resource(client):
    paths = client.get("/openapi.json").json()["paths"]
    assert {
        "/api/runs",
        "/api/runs/{run_id}",
        "/api/runs/{run_id}/variants/{variant}/timeline",
        "/api/runs/{run_id}/history",
        "/api/runs/{run_id}/trace",
        "/api/scenarios",
        "/api/jobs/{job_id}",
    } <= set(paths)
    assert "post" in paths["/api/runs"]
    assert not any(p.startswith("/runs") for p in paths)  # pages stay out of the API


def test_no_page_of_the_app_loads_from_a_cdn(client):
    assert client.get("/docs").status_code == 404  # Swagger UI would load from a CDN
    response = client.get("/static/plotly.min.js")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/javascript")
    assert len(response.content) > 1_000_000
    csp = client.get("/").headers["content-security-policy"]
    assert "default-src 'self'" in csp and "script-src 'self'" in csp


def test_pages_render_and_unknown_ones_are_404(client, base_report, failed_report):
    rid = base_report["run_id"]
    for url in (
        "/",
        "/?scenario=wide-mlp",
        f"/runs/{rid}",
        f"/runs/{rid}?variant=inplace&x=time",
        f"/runs/{failed_report['run_id']}?variant=inplace",
        "/compare",
        f"/compare?a={rid}:out_of_place&b={failed_report['run_id']}:inplace",
        "/scenarios",
    ):
        response = client.get(url)
        assert response.status_code == 200, url
        assert response.headers["content-type"].startswith("text/html")
    html_404 = client.get("/runs/nope", headers={"accept": "text/html"})
    assert html_404.status_code == 404 and "no run &#39;nope&#39;" in html_404.text
    assert client.get(f"/runs/{rid}?variant=nope").status_code == 404
    assert client.get(f"/runs/{rid}?x=sideways").status_code == 422
    assert client.get("/compare?a=nope:x&b=nope:y").status_code == 404
    assert client.get(f"/compare?a={rid}&b={rid}").status_code == 422


def test_hosts_can_be_restricted_against_dns_rebinding(runs_dir, scenarios_dir):
    from fastapi.testclient import TestClient

    from web.app import create_app

    app = create_app(runs_dir, scenarios_dir, allowed_hosts=["127.0.0.1"], warm_cache=False)
    with TestClient(app, base_url="http://127.0.0.1") as local:
        assert local.get("/api/runs").status_code == 200
    with TestClient(app, base_url="http://evil.example") as remote:
        assert remote.get("/api/runs").status_code == 400
