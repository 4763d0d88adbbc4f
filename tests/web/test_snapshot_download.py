"""The run page's downloads: the memory snapshot for memory_viz (and the Perfetto trace)."""

from __future__ import annotations

import pickle


def _peak(trace) -> int:
    allocated = peak = 0
    for e in trace:
        if e["action"] == "alloc":
            allocated += e["size"]
        elif e["action"] == "free_completed":
            allocated -= e["size"]
        peak = max(peak, allocated)
    return peak


def test_the_snapshot_of_a_run_is_a_pickle_download(client, base_report):
    rid = base_report["run_id"]
    response = client.get(f"/api/runs/{rid}/snapshot")
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/octet-stream"
    assert response.headers["content-disposition"] == (
        f'attachment; filename="{rid}.snapshot.pickle"'
    )
    assert response.content[:2] in (b"\x80\x02", b"\x80\x03", b"\x80\x04")
    snap = pickle.loads(response.content)
    variants = base_report["variants"]
    assert len(snap["device_traces"]) == len(variants)
    for i, v in enumerate(variants):  # variant i is device i; the timeline peaks as the report
        assert _peak(snap["device_traces"][i]) == v["peak_allocated_bytes"]


def test_the_snapshot_of_an_unknown_run_is_404(client):
    response = client.get("/api/runs/no-such-run/snapshot")
    assert response.status_code == 404
    assert response.json()["detail"] == "no run 'no-such-run' in the runs directory"


def test_the_run_page_offers_both_downloads(client, base_report):
    rid = base_report["run_id"]
    page = client.get(f"/runs/{rid}").text
    assert f'href="/api/runs/{rid}/snapshot"' in page and 'id="snapshot-link"' in page
    assert f'href="/api/runs/{rid}/trace"' in page and 'id="trace-link"' in page
    assert "/api/runs/{run_id}/snapshot" in client.get("/openapi.json").json()["paths"]


def test_the_dashboard_runs_a_python_scenario(client, scenarios_dir):
    import time

    (scenarios_dir / "tiny.py").write_text(
        "import engine\nimport memprof\n\n\n"
        '@memprof.scenario(variants={"a": {"n": 256}, "b": {"n": 512}}, baseline="a")\n'
        "def tiny(n):\n"
        '    """a tensor of n floats"""\n'
        "    x = engine.rand(n)\n"
    )
    listed = {s["id"]: s for s in client.get("/api/scenarios").json()}
    assert listed["tiny.py"]["variants"] == ["a", "b"] and listed["tiny.py"]["name"] == "tiny"
    job = client.post("/api/runs", json={"scenario": "tiny.py"}).json()
    for _ in range(200):
        job = client.get(f"/api/jobs/{job['id']}").json()
        if job["status"] not in ("queued", "running"):
            break
        time.sleep(0.05)
    assert job["status"] == "done", job
    report = client.get(f"/api/runs/{job['run_id']}").json()
    assert [v["peak_allocated_bytes"] for v in report["variants"]] == [1024, 2048]
    assert client.get(f"/runs/{job['run_id']}").status_code == 200
