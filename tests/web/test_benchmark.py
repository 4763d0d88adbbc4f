"""The acceptance benchmark: a 1,000,000-event timeline is served reduced to max_points in
under 1 s with its exact peak kept, and its run page is drawn in the browser in under 3 s.

Runs bench/bench_dashboard.py's measurements against a real `memprof serve`. Slow: it builds a
~170 MB report first.
"""

from __future__ import annotations

import importlib.util

import pytest

from memprof.reports.store import save_report
from tests.web.conftest import REPO
from tests.web.test_browser import find_chromium

pytestmark = [pytest.mark.slow]


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


def test_a_million_event_timeline_is_served_reduced_in_under_a_second(million):
    bench, server, report = million
    figures = bench.measure_http(server, report, repeat=3)  # asserts the exact peak is kept
    assert figures["http_s"] < 1.0, figures


@pytest.mark.browser
def test_its_run_page_is_drawn_in_under_three_seconds(million):
    if find_chromium() is None:
        pytest.skip("no Chromium found (Debian: apt-get install chromium)")
    bench, server, report = million
    figures = bench.measure_page(server, report, repeat=3)  # asserts the plotted peak
    assert figures["page_s"] < 3.0, figures
