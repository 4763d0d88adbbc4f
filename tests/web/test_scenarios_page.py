"""The run-a-scenario page: every file checked as `memprof validate` checks it, invalid ones
marked with their problems and not runnable, a variant/device/allocator picker for the rest,
no fixed-height scroll box; a job's progress follows iterations and nodes."""

from __future__ import annotations

import re
import time

from tests.web.conftest import REPO

BAD = "name: bad\ninputs:\n  x: {shape: [2], init: rand}\nprogram:\n  - {id: a, op: nosuchop, in: x}\n"


def page(client):
    res = client.get("/scenarios", headers={"accept": "text/html"})
    assert res.status_code == 200
    return res.text


def row(html, scenario_id):
    match = re.search(
        r'<tr class="scenario-row[^"]*" data-scenario="' + re.escape(scenario_id) + r'".*?</tr>',
        html,
        re.S,
    )
    assert match, scenario_id
    return match.group(0)


def test_invalid_files_are_marked_with_their_problems_and_cannot_run(client, scenarios_dir):
    (scenarios_dir / "bad.yaml").write_text(BAD)
    (scenarios_dir / "relu_real.yaml").write_text((REPO / "scenarios/relu.yaml").read_text())
    html = page(client)
    bad = row(html, "bad.yaml")
    assert 'data-status="invalid"' in bad and ">invalid</span>" in bad
    assert "5:17: expected a known op" in bad
    assert re.search(r'class="run-button"[^>]*disabled', bad)
    broken = row(html, "broken.yaml")  # not even YAML
    assert 'data-status="invalid"' in broken and "disabled" in broken
    good = row(html, "relu_real.yaml")
    assert 'data-status="valid"' in good
    assert not re.search(r'class="run-button"[^>]*disabled', good)


def test_a_valid_file_offers_its_variants_devices_and_allocators(client, scenarios_dir):
    (scenarios_dir / "relu_real.yaml").write_text((REPO / "scenarios/relu.yaml").read_text())
    good = row(page(client), "relu_real.yaml")
    assert re.findall(r'name="variant" value="([^"]+)" checked', good) == [
        "inplace",
        "out_of_place",
    ]
    devices = re.search(r'<select name="device">(.*?)</select>', good, re.S).group(1)
    assert re.findall(r'<option value="([^"]*)"', devices) == ["", "meta", "cuda"]
    assert "cpu (file)" in devices  # the file's own choice is the default
    allocators = re.search(r'<select name="allocator">(.*?)</select>', good, re.S).group(1)
    assert re.findall(r'<option value="([^"]*)"', allocators) == ["", "caching"]


def test_no_fixed_height_scroll_box_hides_scenarios(client):
    html = page(client)
    assert re.search(
        r'<div class="table-wrap tall">\s*<table class="data sortable" id="scenario-table"', html
    )


def test_a_job_follows_iterations_and_nodes_and_honours_the_picker(client, scenarios_dir):
    text = (
        "name: slow\ninputs:\n  x: {shape: [64, 64], init: rand}\nprogram:\n"
        + "".join(
            f"  - {{id: n{i}, op: sin, in: {'x' if i == 0 else f'n{i - 1}'}}}\n" for i in range(8)
        )
        + "iterations: 40\nvariants:\n  a: {}\n  b: {}\n"
    )
    (scenarios_dir / "slow.yaml").write_text(text)
    res = client.post(
        "/api/runs", json={"scenario": "slow.yaml", "variants": ["b"], "device": "meta"}
    )
    assert res.status_code == 202, res.text
    job_id = res.json()["id"]
    fractions = []
    for _ in range(600):
        job = client.get(f"/api/jobs/{job_id}").json()
        fractions.append(job["fraction"])
        if job["status"] in ("done", "failed"):
            break
        time.sleep(0.005)
    assert job["status"] == "done", job
    assert fractions == sorted(fractions) and fractions[-1] == 1.0
    report = client.get(f"/api/runs/{job['run_id']}?timeline=false").json()
    assert [v["name"] for v in report["variants"]] == ["b"]
    assert report["variants"][0]["device"] == "meta"
    # progress events came per node: the last one seen names its iteration and node
    assert job["progress"]["stage"] == "done"


def test_the_progress_bar_moves_node_by_node_not_only_per_variant(tmp_path, scenarios_dir):
    from web.jobs import JobManager

    seen: list[tuple[float, str]] = []

    class Watching(JobManager):
        def _update(self, job, **fields):
            if "fraction" in fields:
                seen.append((fields["fraction"], fields.get("message", "")))
            super()._update(job, **fields)

    path = scenarios_dir / "steps.yaml"
    path.write_text(
        "name: steps\ninputs:\n  x: {shape: [8], init: rand}\nprogram:\n"
        "  - {id: a, op: sin, in: x}\n  - {id: b, op: cos, in: a}\n"
        "iterations: 3\nvariants:\n  one: {}\n  two: {}\n"
    )
    jobs = Watching(tmp_path / "runs")
    job = jobs.submit(path, "steps.yaml", "steps")
    for _ in range(2000):
        if jobs.get(job["id"])["status"] in ("done", "failed"):
            break
        time.sleep(0.005)
    assert jobs.get(job["id"])["status"] == "done"
    fractions = [f for f, _ in seen]
    # 2 variants x 3 iterations x 2 nodes: a sixth of a variant per node
    assert fractions[:8] == [0.0, 1 / 12, 2 / 12, 2 / 12, 3 / 12, 4 / 12, 4 / 12, 5 / 12]
    assert fractions == sorted(fractions) and fractions[-1] == 1.0
    assert any("iteration 2 of 3" in m for _, m in seen)
