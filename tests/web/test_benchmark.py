"""A 1,000,000-event timeline through a real `memprof serve`: the server reduces it to
`max_points` samples keeping the first, the last and the exact peak, and the run page draws that
peak.

Behaviour only: how fast this is lives in bench/bench_dashboard.py, which prints the timings
against references measured in the same run. Slow: it builds a ~170 MB report first.
"""

from __future__ import annotations

import importlib.util

import httpx
import pytest

from memprof.reports.store import save_report
from tests.web.conftest import REPO
from tests.web.test_browser import find_chromium

pytestmark = [pytest.mark.slow]

MAX_POINTS = 2000


def load_bench():
    spec = importlib.util.spec_from_file_location(
        "bench_dashboard", REPO / "bench" / "bench_dashboard.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def bench():
    return load_bench()


@pytest.fixture(scope="module")
def million(bench, tmp_path_factory):
    report = bench.build_report(1_000_000)
    runs = tmp_path_factory.mktemp("runs")
    save_report(report, runs)
    assert len(report["variants"][0]["timeline"]["seq"]) >= 1_000_000
    server = bench.Server(runs)
    bench.wait_until_parsed(server, report["run_id"])
    yield bench, server, report
    server.close()


def test_a_million_event_timeline_is_served_reduced_with_first_last_and_exact_peak(million):
    # Given a served run of a million events
    _, server, report = million
    variant = report["variants"][0]
    events = len(variant["timeline"]["seq"])
    url = (
        f"{server.url}/api/runs/{report['run_id']}/variants/{variant['name']}/timeline"
        f"?max_points={MAX_POINTS}"
    )

    # when its timeline is asked for
    series = httpx.get(url, timeout=120).json()

    # then at most max_points samples come back, the first, the last and the exact peak among them
    assert series["total_events"] == events and series["reduced"] is True
    assert len(series["index"]) <= MAX_POINTS
    assert series["index"][0] == 0 and series["index"][-1] == events - 1
    peak_index = variant["peak"]["event_index"]
    assert peak_index in series["index"]
    assert max(series["allocated"]) == variant["peak_allocated_bytes"]
    assert series["allocated"][series["index"].index(peak_index)] == variant["peak_allocated_bytes"]
    assert series["peak"]["event_index"] == peak_index

    # and a window in the middle is reduced on its own, inside its bounds
    window = httpx.get(url + "&start=250000&end=750000", timeout=120).json()
    assert len(window["index"]) <= MAX_POINTS
    assert window["index"][0] == 250000 and window["index"][-1] == 750000


@pytest.mark.browser
def test_its_run_page_draws_the_exact_peak(million):
    if find_chromium() is None:
        pytest.skip("no Chromium found (Debian: apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    from tests.web.test_browser import CHROMIUM_ARGS

    _, server, report = million
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=find_chromium(), args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.goto(f"{server.url}/runs/{report['run_id']}")
        page.wait_for_function(
            "() => document.body.dataset.chartsReady === 'true'", timeout=120_000
        )
        drawn = page.evaluate(
            "() => { const gd = document.getElementById('timeline-chart');"
            " const t = gd._fullData.find(t => t.name === 'allocated');"
            " return {peak: gd.calcdata[gd._fullData.findIndex(t => t.name === 'peak')][0].y,"
            " points: t.x.length, meta: gd.layout.meta}; }"
        )
        browser.close()
    assert drawn["peak"] == report["variants"][0]["peak_allocated_bytes"]
    assert drawn["meta"]["reduced"] is True
    assert drawn["points"] <= MAX_POINTS + 1  # plus the step that closes the last event
