"""The run page's "In-place advice" panel in a real browser (Chromium through Playwright): the
button runs the advice, the table shows each candidate's verdict and the per-node table tags the
candidates; no console error, nothing requested off the server."""

from __future__ import annotations

import shutil
import signal

import pytest

from memprof.reports.store import save_report
from memprof.runner import run_scenario
from tests.web.conftest import REPO
from tests.web.test_browser import ARTIFACTS, Watched, browser  # noqa: F401 - fixture
from tests.web.test_cli import start_server

pytestmark = pytest.mark.browser


@pytest.fixture
def advice_server(tmp_path):
    scenarios = tmp_path / "scenarios"
    scenarios.mkdir()
    runs = tmp_path / "runs"
    ids = {}
    for name in ("multi_branch", "resnet_block", "mlp_train"):
        shutil.copy(REPO / "scenarios" / f"{name}.yaml", scenarios / f"{name}.yaml")
        report = run_scenario(scenarios / f"{name}.yaml", device="meta")
        save_report(report, runs)
        ids[name] = report["run_id"]
    # mlp_train with its ReLU out of place: an in-place candidate beside the optimizer lever
    text = (REPO / "scenarios" / "mlp_train.yaml").read_text().split("\nexpect:")[0]
    text = text.replace("name: mlp-train", "name: mlp-train-oop")
    text = text.replace("act: {type: ReLU, inplace: true}", "act: {type: ReLU, inplace: false}")
    (scenarios / "mlp_train_oop.yaml").write_text(text + "\n")
    report = run_scenario(scenarios / "mlp_train_oop.yaml", device="meta")
    save_report(report, runs)
    ids["mlp_train_oop"] = report["run_id"]
    proc, url = start_server("--runs", str(runs), "--scenarios", str(scenarios), "--port", "0")
    yield url.rstrip("/"), ids
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=20)


def _advise(w: Watched, run_id: str, variant: str):
    page = w.open(f"/runs/{run_id}?variant={variant}")
    assert page.locator("#advice-table").is_hidden()  # nothing computed yet
    page.locator("#advice-run").click()
    page.wait_for_function(
        "() => document.getElementById('advice-status').textContent === 'Done.'", timeout=30_000
    )
    rows = page.locator("#advice-table tbody tr")
    cells = [rows.nth(i).locator("td").all_inner_texts() for i in range(rows.count())]
    tags = page.evaluate(
        """() => Array.from(document.querySelectorAll("table[id$='-ops'] .advice-tag"))
               .map(t => [t.parentElement.dataset.sort || t.parentElement.firstChild.textContent.trim(),
                          t.textContent])"""
    )
    return page, cells, [tuple(t) for t in tags]


def test_the_panel_advises_and_tags_the_per_node_table(browser, advice_server):  # noqa: F811
    url, ids = advice_server
    w = Watched(browser, url)
    page, cells, tags = _advise(w, ids["multi_branch"], "out_of_place")
    assert len(cells) == 1
    node, op, verdict, reason, clone, saving, proven = cells[0]
    assert (node, op, verdict, proven) == ("h", "ReLU", "unsafe", "yes")
    assert reason.startswith("stale read: node y reads x1")
    assert ("h", "in place: unsafe") in tags
    assert "No candidate is safe" in page.locator("#advice-summary").inner_text()
    page.locator("#advice-panel").screenshot(path=str(ARTIFACTS / "advice-multi-branch.png"))
    w.assert_clean()

    w = Watched(browser, url)
    page, cells, tags = _advise(w, ids["resnet_block"], "out_of_place")
    assert [(c[0], c[2], c[5]) for c in cells] == [
        ("r1", "safe", "saves 128.00 KiB"),
        ("s", "safe", "saves 128.00 KiB"),
        ("out", "safe", "saves 128.00 KiB"),
    ]
    assert {n for n, t in tags if t == "in place: safe"} == {"r1", "s", "out"}
    summary = page.locator("#advice-summary").inner_text()
    assert "Combined (r1, s, out in place)" in summary and "saves 384.00 KiB" in summary
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    w.screenshot("advice-resnet-block.png")
    # a reload shows the advice computed before, without a click
    page.reload()
    page.wait_for_selector("#advice-table tbody tr")
    assert page.locator("#advice-status").inner_text() == "Computed earlier on this server."
    w.assert_clean()


def test_the_panel_shows_the_optimizer_lever(browser, advice_server):  # noqa: F811
    url, ids = advice_server
    w = Watched(browser, url)
    page, cells, _tags = _advise(w, ids["mlp_train"], "adam")
    assert cells == []  # no in-place candidate in this MLP (its ReLU is in place already)
    levers = page.locator("#advice-levers li")
    assert levers.count() == 1
    text = levers.nth(0).inner_text()
    assert text.startswith("Optimizer stepped in backward (optimizer: {in_backward: true}): safe")
    assert "saves 3.98 MiB alone (peak allocated 36.21 MiB)" in text
    w.assert_clean()


def test_the_lever_with_switched_nodes_shows_both_together(browser, advice_server):  # noqa: F811
    url, ids = advice_server
    w = Watched(browser, url)
    page, cells, _tags = _advise(w, ids["mlp_train_oop"], "adam")
    assert [(c[0], c[2]) for c in cells] == [("a", "safe")]
    text = page.locator("#advice-levers li").nth(0).inner_text()
    assert text.startswith("Optimizer stepped in backward (optimizer: {in_backward: true}): safe")
    assert "With the switched nodes in place too: safe, peak allocated" in text
    w.assert_clean()
