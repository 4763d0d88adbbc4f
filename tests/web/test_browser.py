"""The dashboard in a real browser: `memprof serve` in a subprocess, Debian's Chromium driven by
Playwright. Every page must draw the report's numbers, request nothing off the server and log
no console error. Screenshots go to test-artifacts/web/.

Skips only when no Chromium executable can be found (./scripts/test installs it).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
from pathlib import Path

import pytest

from memprof import history
from memprof.reports.html import render_html
from memprof.reports.store import save_report
from memprof.units import format_bytes
from tests.memprof.test_trace import check_trace
from tests.web.conftest import REPO
from tests.web.synthetic import make_report
from tests.web.test_cli import start_server

pytestmark = pytest.mark.browser

ARTIFACTS = REPO / "test-artifacts" / "web"
CHROMIUM_ARGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def find_chromium() -> str | None:
    candidates = (
        os.environ.get("MEMPROF_CHROMIUM"),
        shutil.which("chromium"),
        shutil.which("chromium-browser"),
        "/usr/bin/chromium",
    )
    return next((c for c in candidates if c and os.access(c, os.X_OK)), None)


@pytest.fixture(scope="module")
def browser():
    executable = find_chromium()
    if executable is None:
        pytest.skip("no Chromium found (Debian: apt-get install chromium; or set MEMPROF_CHROMIUM)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:  # never downloads a browser: it uses the system one
        chromium = p.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture
def long_report(runs_dir) -> dict:
    """About 10,000 events: reduced on the page, so zooming asks the server for detail."""
    report = make_report(
        scenario="long-mlp",
        layers=60,
        iterations=12,
        scratch=2,
        created_at="2026-11-18T08:00:00Z",
        variants=("out_of_place",),
    )
    save_report(report, runs_dir)
    return report


@pytest.fixture
def server(runs_dir, scenarios_dir, long_report):
    proc, url = start_server(
        "--runs", str(runs_dir), "--scenarios", str(scenarios_dir), "--port", "0"
    )
    yield url.rstrip("/")
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=20)


class Watched:
    """A page that records console errors, page errors, failed requests, and every request
    that is not to `origin` (those are also blocked)."""

    def __init__(self, browser, origin: str):
        self.origin = origin
        self.context = browser.new_context(
            viewport={"width": 1400, "height": 900}, service_workers="block"
        )
        self.page = self.context.new_page()
        self.errors: list[str] = []
        self.offsite: list[str] = []
        self.page.on("console", lambda m: m.type == "error" and self.errors.append(m.text))
        self.page.on("pageerror", lambda e: self.errors.append(f"page error: {e}"))
        self.page.on("requestfailed", self._failed)
        self.page.route("**/*", self._route)

    def _failed(self, request):
        # A subresource the page dropped because it navigated on (the run form's submit leaving
        # the page while its favicon still loads: net::ERR_ABORTED) is no failure a user sees;
        # any other failed request is.
        if request.failure == "net::ERR_ABORTED" and not request.is_navigation_request():
            return
        self.errors.append(f"failed: {request.url}")

    def _route(self, route):
        url = route.request.url
        if url.startswith(self.origin) or url.startswith("data:"):
            route.continue_()
        else:
            self.offsite.append(url)
            route.abort()

    def open(self, path: str, *, charts: bool = True):
        self.page.goto(self.origin + path)
        if charts:
            self.page.wait_for_function(
                "() => document.body.dataset.chartsReady === 'true'", timeout=20_000
            )
        return self.page

    def screenshot(self, name: str) -> Path:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        path = ARTIFACTS / name
        self.page.screenshot(path=str(path), full_page=True)
        return path

    def assert_clean(self) -> None:
        assert self.offsite == [], "requests off the server"
        assert self.errors == [], "console errors"
        self.context.close()


# What Plotly actually drew (calcdata), not what the server sent.
DRAWN = """
(id) => {
  const gd = document.getElementById(id);
  const traces = {};
  gd._fullData.forEach((t, i) => {
    const points = gd.calcdata[i].filter((p) => p.y !== undefined || p.s !== undefined);
    traces[t.name] = {
      type: t.type,
      y: points.map((p) => (t.type === 'bar' ? p.s : p.y)),
      x: points.map((p) => (t.type === 'bar' ? t.x[p.i] : p.x)),
      svgPoints: gd.querySelectorAll('.plot .trace').length,
    };
  });
  return {traces, meta: gd.layout.meta || null,
          drawn: gd.querySelectorAll('.scatterlayer .trace, .barlayer .trace').length};
}
"""


def test_runs_page_lists_every_run_sorts_and_filters(browser, server, runs_dir):
    w = Watched(browser, server)
    page = w.open("/", charts=False)
    rows = page.locator("#runs-table tbody tr")
    assert rows.count() == 4
    page.locator("th", has_text="highest peak").click()  # largest first
    peaks = page.eval_on_selector_all(
        "#runs-table tbody tr td:nth-child(5)", "cells => cells.map(c => +c.dataset.sort)"
    )
    assert peaks == sorted(peaks, reverse=True)
    w.screenshot("runs.png")
    page.select_option("#scenario-filter", "wide-mlp")
    assert page.locator("#runs-table tbody tr:not([hidden])").count() == 1
    assert page.locator("#run-count").inner_text() == "1"
    assert "scenario=wide-mlp" in page.url
    w.assert_clean()


def test_run_page_draws_the_reports_timeline_peak_and_live_memory(browser, server, base_report):
    w = Watched(browser, server)
    rid = base_report["run_id"]
    baseline, inplace = base_report["variants"]
    page = w.open(f"/runs/{rid}?variant=inplace")

    timeline = page.evaluate(DRAWN, "timeline-chart")["traces"]
    assert timeline["peak"]["y"] == [inplace["peak_allocated_bytes"]]
    assert timeline["peak"]["x"] == [inplace["peak"]["event_index"]]
    assert max(timeline["allocated"]["y"]) == inplace["peak_allocated_bytes"]
    assert max(timeline["reserved"]["y"]) == inplace["peak_reserved_bytes"]
    stacked = set(inplace["timeline"]["category"])
    assert stacked <= set(timeline)

    bars = page.evaluate(DRAWN, "peak-chart")["traces"]
    assert bars["peak allocated"]["y"] == [
        baseline["peak_allocated_bytes"],
        inplace["peak_allocated_bytes"],
    ]
    assert bars["peak allocated"]["x"] == ["out_of_place", "inplace"]
    saving = page.locator("#peak-chart .annotation-text").all_text_contents()
    assert any(t.startswith("saves ") and "%" in t for t in saving)

    by_category = page.evaluate(DRAWN, "v1-inplace-by-category")["traces"]
    assert sum(next(iter(by_category.values()))["y"]) == inplace["peak_allocated_bytes"]

    # hovering the peak names the event there: node, op, tensor, bytes
    page.evaluate(
        "([x]) => Plotly.Fx.hover('timeline-chart', {xval: x}, ['xy'])",
        [inplace["peak"]["event_index"]],
    )
    hover = page.locator("#timeline-chart .hoverlayer").text_content()
    i = inplace["peak"]["event_index"]
    for text in (
        inplace["timeline"]["node"][i],
        inplace["timeline"]["op"][i],
        inplace["timeline"]["tensor"][i],
        f"allocated {format_bytes(inplace['peak_allocated_bytes'])}",
    ):
        assert text in hover

    assert page.locator("li.warning-stale-read").count() == 1
    assert page.locator("li.warning-inplace-clone").count() == 1
    page.locator("#v1-inplace-ops th", has_text="peak").click()
    peaks = page.eval_on_selector_all(
        "#v1-inplace-ops tbody tr td:nth-child(7)", "cells => cells.map(c => +c.dataset.sort)"
    )
    assert peaks == sorted(peaks, reverse=True) and len(peaks) == len(inplace["ops"])
    w.screenshot("run.png")

    page = w.open(f"/runs/{rid}?variant=out_of_place&x=time")
    timeline = page.evaluate(DRAWN, "timeline-chart")["traces"]
    assert timeline["peak"]["y"] == [baseline["peak_allocated_bytes"]]
    assert timeline["peak"]["x"] == [
        baseline["timeline"]["time_s"][baseline["peak"]["event_index"]]
    ]
    w.screenshot("run-time-axis.png")
    w.assert_clean()


def test_run_page_charts_the_peak_over_past_runs_and_offers_the_trace(
    browser, server, runs_dir, base_report
):
    # Given three recorded runs of the run's scenario (it is the middle one)
    older = make_report(
        scenario="mlp-train", layers=3, iterations=2, created_at="2026-11-20T01:00:00Z"
    )
    newer = make_report(
        scenario="mlp-train", layers=5, iterations=2, created_at="2026-11-22T01:00:00Z"
    )
    runs = (older, base_report, newer)
    for r in runs:
        history.append(runs_dir, r, source="check")

    # when its page is opened
    w = Watched(browser, server)
    page = w.open(f"/runs/{base_report['run_id']}")

    # then the history chart draws one line per variant with a point per run, this run ringed
    drawn = page.evaluate(DRAWN, "history-chart")
    traces = drawn["traces"]
    assert drawn["meta"]["runs"] == 3
    for i, name in enumerate(("out_of_place", "inplace")):
        assert traces[name]["x"] == [0, 1, 2]
        assert traces[name]["y"] == [r["variants"][i]["peak_allocated_bytes"] for r in runs]
    assert traces["this run"]["x"] == [1, 1]
    assert traces["this run"]["y"] == [v["peak_allocated_bytes"] for v in base_report["variants"]]
    points = page.locator("#history-chart .scatterlayer .trace .points path.point")
    assert points.count() == 3 + 3 + 2
    w.screenshot("run-history.png")

    # and the trace link downloads the run as a Chrome trace
    with page.expect_download() as download:
        page.locator("#trace-link").click()
    assert download.value.suggested_filename == f"{base_report['run_id']}.trace.json"
    check_trace(json.loads(Path(download.value.path()).read_text()), base_report)
    w.assert_clean()


def test_zooming_a_reduced_timeline_fetches_the_window_from_the_server(
    browser, server, long_report
):
    w = Watched(browser, server)
    variant = long_report["variants"][0]
    allocated = variant["timeline"]["allocated"]
    page = w.open(f"/runs/{long_report['run_id']}")
    before = page.evaluate(DRAWN, "timeline-chart")
    assert before["meta"]["reduced"] is True
    assert len(before["traces"]["allocated"]["y"]) <= 2000
    assert before["traces"]["peak"]["y"] == [variant["peak_allocated_bytes"]]

    start, end = 3000, 4500
    with page.expect_response(lambda r: "/timeline/figure" in r.url and r.ok):
        page.evaluate(
            "([a, b]) => Plotly.relayout('timeline-chart', {'xaxis.range': [a, b]})", [start, end]
        )
    page.wait_for_function("() => document.getElementById('timeline-chart').layout.meta.start > 0")
    after = page.evaluate(DRAWN, "timeline-chart")
    assert (after["meta"]["start"], after["meta"]["end"]) == (start, end)
    assert after["traces"]["allocated"]["x"][0] == start
    drawn = after["traces"]["allocated"]
    assert drawn["y"][:-1] == allocated[start : end + 1]  # every event now
    assert drawn["x"][-1] == end + 1 and drawn["y"][-1] == allocated[end]  # the last step
    assert page.locator("#timeline-note").inner_text() == (
        f"Events {start:,} to {end:,} of {len(allocated):,}."
    )
    assert after["traces"]["peak"]["y"] == [max(allocated[start : end + 1])]
    w.screenshot("run-zoomed.png")
    w.assert_clean()


def test_compare_page_overlays_two_variants_with_node_deltas(browser, server, base_report):
    w = Watched(browser, server)
    rid = base_report["run_id"]
    page = w.open(f"/compare?a={rid}:out_of_place&b={rid}:inplace")
    traces = page.evaluate(DRAWN, "overlay-chart")["traces"]
    a, b = base_report["variants"]
    assert traces["out_of_place peak"]["y"] == [a["peak_allocated_bytes"]]
    assert traces["inplace peak"]["y"] == [b["peak_allocated_bytes"]]
    assert max(traces["inplace"]["y"]) == b["peak_allocated_bytes"]
    assert page.locator("#delta-table tbody tr").count() == len(a["ops"])
    assert "saves 4.00 MiB" in page.locator(".verdict").inner_text()
    w.screenshot("compare.png")
    w.assert_clean()


def test_a_scenario_run_from_the_browser_lands_on_its_run_page(browser, server, scenarios_dir):
    (scenarios_dir / "relu_real.yaml").write_text((REPO / "scenarios" / "relu.yaml").read_text())
    w = Watched(browser, server)
    page = w.open("/scenarios", charts=False)
    row = page.locator("#scenario-table tr", has_text="relu_real.yaml")
    # The run can finish and navigate away before a wait on the panel would see it, so the
    # page itself records (in sessionStorage, which survives the navigation) that the job
    # panel was shown, with the status it showed.
    page.evaluate(
        """() => {
          const panel = document.getElementById("job-panel");
          new MutationObserver(() => {
            if (!panel.hidden) {
              const status = document.getElementById("job-status").textContent;
              sessionStorage.setItem("jobPanelShown", status);
            }
          }).observe(panel, {attributes: true, subtree: true, childList: true});
        }"""
    )
    row.locator("button.run-button").click()
    page.wait_for_url("**/runs/*", timeout=120_000)
    assert page.evaluate("() => sessionStorage.getItem('jobPanelShown')") in {
        "queued",
        "running",
        "done",
    }
    page.wait_for_function("() => document.body.dataset.chartsReady === 'true'", timeout=20_000)
    bars = page.evaluate(DRAWN, "peak-chart")["traces"]["peak allocated"]
    assert dict(zip(bars["x"], bars["y"], strict=True)) == {
        "inplace": 64 * 1024**2,
        "out_of_place": 128 * 1024**2,
    }
    w.screenshot("scenario-run.png")
    w.assert_clean()


def test_the_offline_report_draws_with_no_network(browser, tmp_path, base_report):
    path = tmp_path / "report.html"
    path.write_text(render_html(base_report), encoding="utf-8")
    w = Watched(browser, path.as_uri())
    page = w.open("")
    for i, variant in enumerate(base_report["variants"]):
        timeline = page.evaluate(DRAWN, f"v{i}-{variant['name']}-timeline")["traces"]
        assert timeline["peak"]["y"] == [variant["peak_allocated_bytes"]]
    bars = page.evaluate(DRAWN, "peak-chart")["traces"]["peak allocated"]
    assert bars["y"] == [v["peak_allocated_bytes"] for v in base_report["variants"]]
    w.screenshot("offline-report.png")
    w.assert_clean()


# --- the house: aligned compare, backward nodes, warnings, unreadable runs, the picker --------

TWO_BRANCH = """\
name: aligned
inputs:
  x: {shape: [64, 64], init: rand}
program:
  - {id: a, op: relu, in: x, inplace: $inplace}
  - {id: b, op: sigmoid, in: a, inplace: $inplace}
  - {id: c, op: mul, in: [a, b]}
  - {id: d, op: tanh, in: c, inplace: $inplace}
variants:
  inplace: {inplace: true}
  out_of_place: {inplace: false}
baseline: out_of_place
"""

BACKWARD = """\
name: backward-nodes
inputs:
  x: {shape: [32, 64], init: randn}
modules:
  fc1: {type: Linear, in_features: 64, out_features: 128}
  fc2: {type: Linear, in_features: 128, out_features: 16}
program:
  - {id: h, module: fc1, in: x}
  - {id: a, op: relu, in: h}
  - {id: y, module: fc2, in: a}
  - {id: loss, op: sum, in: y}
phases:
  - forward
  - backward: loss
"""


def _run_into(runs_dir, tmp_path, text, name):
    from memprof.runner import run_scenario

    path = tmp_path / name
    path.write_text(text)
    report = run_scenario(path)
    save_report(report, runs_dir)
    return report


def test_compare_aligns_variants_with_different_event_counts_by_node(
    browser, server, runs_dir, tmp_path
):
    report = _run_into(runs_dir, tmp_path, TWO_BRANCH, "aligned.yaml")
    inplace, out = report["variants"]
    assert inplace["num_allocs"] + inplace["num_frees"] != out["num_allocs"] + out["num_frees"]
    w = Watched(browser, server)
    rid = report["run_id"]
    page = w.open(f"/compare?a={rid}:out_of_place&b={rid}:inplace")
    fig = page.evaluate("() => document.getElementById('overlay-chart').layout")
    assert fig["xaxis"]["tickmode"] == "array"
    ticks = dict(zip(fig["xaxis"]["ticktext"], fig["xaxis"]["tickvals"], strict=True))
    traces = page.evaluate(DRAWN, "overlay-chart")["traces"]
    a_line, b_line = traces["out_of_place"], traces["inplace"]
    assert a_line["x"][-1] == b_line["x"][-1]  # both end where the program ends
    # node c's first event is drawn at c's step on both sides, whatever came before it
    for variant, line in ((out, a_line), (inplace, b_line)):
        t = variant["timeline"]
        first_c = t["node"].index("c")
        assert line["y"][first_c] == t["allocated"][first_c]
        assert line["x"][first_c] == ticks["c"] - 0.5
    assert "saves" in page.locator(".verdict").inner_text()
    w.screenshot("compare-aligned.png")
    w.assert_clean()


def test_run_page_has_one_row_per_backward_node(browser, server, runs_dir, tmp_path):
    report = _run_into(runs_dir, tmp_path, BACKWARD, "backward.yaml")
    [variant] = report["variants"]
    w = Watched(browser, server)
    page = w.open(f"/runs/{report['run_id']}")
    table = page.locator("[id$='-ops']").first
    table.scroll_into_view_if_needed()
    nodes = page.eval_on_selector_all(
        "[id$='-ops'] tbody tr td:first-child", "cells => cells.map(c => c.textContent.trim())"
    )
    expected = [o["node"] for o in variant["ops"]]
    assert nodes == expected
    assert {"ReluBackward0", "AddmmBackward0"} <= set(nodes) and "<backward>" in nodes
    assert nodes.count("AddmmBackward0") == 2  # one per Linear, not one backward row
    # the timeline's hover names the backward node of each backward event
    timeline = page.evaluate(
        "() => document.getElementById('timeline-chart').data.find(t => t.name === 'allocated')"
        ".customdata.map(c => c[4])"
    )
    assert "ReluBackward0" in timeline and "AddmmBackward0" in timeline
    table.screenshot(path=str(ARTIFACTS / "run-backward-nodes.png"))
    w.screenshot("run-backward-page.png")
    w.assert_clean()


def test_a_stale_read_is_marked_on_the_run_pages_timeline(browser, server, runs_dir):
    from memprof.runner import run_scenario

    report = run_scenario(REPO / "scenarios" / "multi_branch.yaml")
    save_report(report, runs_dir)
    w = Watched(browser, server)
    page = w.open(f"/runs/{report['run_id']}?variant=inplace")
    marks = page.evaluate(DRAWN, "timeline-chart")["traces"]["warnings"]
    t = next(v for v in report["variants"] if v["name"] == "inplace")["timeline"]
    assert marks["x"] == [t["node"].index("y")]
    w.assert_clean()


def test_an_unreadable_run_page_says_so_and_the_index_works(browser, server, runs_dir):
    (runs_dir / "20270101T000000Z-broken-000000.json").write_text("{not json")
    w = Watched(browser, server)
    page = w.page
    response = page.goto(server + "/runs/20270101T000000Z-broken-000000")
    assert response.status == 500
    assert page.locator("h1").inner_text() == "Unreadable report"
    assert "not valid JSON" in page.locator(".error-detail").inner_text()
    w.errors.clear()  # the 500 itself is logged by the browser
    page.locator("a", has_text="Back to the runs").click()
    page.wait_for_selector("#runs-table")
    assert page.locator("#runs-table tbody tr", has_text="20270101T000000Z-broken").count() == 1
    w.assert_clean()


def test_the_picker_runs_only_the_variants_ticked(browser, server, scenarios_dir):
    (scenarios_dir / "relu_real.yaml").write_text((REPO / "scenarios" / "relu.yaml").read_text())
    (scenarios_dir / "bad.yaml").write_text("name: bad\ninputs: {}\nprogram: []\n")
    w = Watched(browser, server)
    page = w.open("/scenarios", charts=False)
    bad = page.locator("#scenario-table tr", has_text="bad.yaml")
    assert bad.locator("button.run-button").is_disabled()
    assert "invalid" in bad.inner_text()
    row = page.locator("#scenario-table tr", has_text="relu_real.yaml")
    row.locator("input[value=out_of_place]").uncheck()
    row.locator("select[name=device]").select_option("meta")
    w.screenshot("scenarios-picker.png")
    row.locator("button.run-button").click()
    page.wait_for_url("**/runs/*", timeout=120_000)
    page.wait_for_function("() => document.body.dataset.chartsReady === 'true'", timeout=20_000)
    bars = page.evaluate(DRAWN, "peak-chart")["traces"]["peak allocated"]
    assert dict(zip(bars["x"], bars["y"], strict=True)) == {"inplace": 64 * 1024**2}
    w.assert_clean()
