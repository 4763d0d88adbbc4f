"""`memprof report` (offline HTML) and `memprof serve` (a real server in a subprocess)."""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import sys
import time

import httpx
import pytest
from typer.testing import CliRunner

from memprof.cli.app import app
from memprof.reports.store import save_report
from tests.web.conftest import REPO

runner = CliRunner()


def test_report_writes_one_self_contained_html_file(tmp_path, base_report):
    source = save_report(base_report, tmp_path)
    out = tmp_path / "out" / "page.html"

    result = runner.invoke(app, ["report", str(source), "--html", str(out)])

    assert result.exit_code == 0, result.output
    assert f"wrote {out}" in result.output
    page = out.read_text()
    assert "Plotly" in page and len(page) > 3_000_000  # plotly.js inlined
    # nothing to fetch: no external scripts, stylesheets, images or fonts
    assert not re.search(r"""<(script|link|img)[^>]+(src|href)=["']?(https?:)?//""", page)
    assert "@import" not in page
    for variant in base_report["variants"]:
        assert f'id="variant-v{base_report["variants"].index(variant)}-{variant["name"]}"' in page
    figures = re.findall(r'<script type="application/json" id="([^"]+)">', page)
    assert "peak-chart-data" in figures and "v1-inplace-timeline-data" in figures


def test_report_embeds_the_reports_numbers(tmp_path, base_report):
    source = save_report(base_report, tmp_path)
    runner.invoke(app, ["report", str(source)])
    page = source.with_suffix(".html").read_text()  # default: next to the JSON
    match = re.search(
        r'<script type="application/json" id="v0-out_of_place-timeline-data">(.*?)'
        r"</script>",
        page,
        re.S,
    )
    fig = json.loads(match.group(1))
    peak = next(t for t in fig["data"] if t["name"] == "peak")
    assert peak["y"] == [base_report["variants"][0]["peak_allocated_bytes"]]


def test_report_finds_a_run_id_in_the_runs_directory(tmp_path, base_report):
    save_report(base_report, tmp_path / "runs")
    out = tmp_path / "r.html"
    result = runner.invoke(
        app, ["report", base_report["run_id"], "--runs", str(tmp_path / "runs"), "--html", str(out)]
    )
    assert result.exit_code == 0, result.output
    assert out.is_file()


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "cannot read the report"),
        ('{"schema_version": 3, "variants": []}', "schema_version 3"),
        ("[1, 2]", "not a memprof report"),
    ],
)
def test_report_refuses_files_that_are_not_reports(tmp_path, content, message):
    path = tmp_path / "bad.json"
    path.write_text(content)
    result = runner.invoke(app, ["report", str(path)])
    assert result.exit_code == 2
    assert message in result.output
    assert "Traceback" not in result.output


def test_report_of_a_missing_file_says_so(tmp_path):
    result = runner.invoke(app, ["report", str(tmp_path / "nope.json"), "--runs", str(tmp_path)])
    assert result.exit_code == 2
    assert "no such report file" in result.output


def start_server(*args: str) -> tuple[subprocess.Popen, str]:
    """`memprof serve` in a subprocess; returns it and the URL it printed."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "memprof", "serve", *args],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    line = proc.stdout.readline()
    match = re.search(r"http://\S+/", line)
    if not match:
        proc.kill()
        raise AssertionError(f"no URL printed: {line!r} {proc.stderr.read()}")
    url = match.group(0)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            httpx.get(url + "api/runs", timeout=2)
            return proc, url
        except httpx.TransportError:
            time.sleep(0.1)
    proc.kill()
    raise AssertionError("the server did not answer")


def test_serve_binds_to_localhost_serves_the_runs_and_stops_on_ctrl_c(runs_dir, scenarios_dir):
    proc, url = start_server(
        "--runs", str(runs_dir), "--scenarios", str(scenarios_dir), "--port", "0"
    )
    try:
        assert url.startswith("http://127.0.0.1:")
        assert len(httpx.get(url + "api/runs").json()) == 3
        assert httpx.get(url + "api/scenarios").status_code == 200
        # the Host header must name this machine (no DNS rebinding)
        port = url.rsplit(":", 1)[1].strip("/")
        evil = httpx.get(url + "api/runs", headers={"host": f"evil.example:{port}"})
        assert evil.status_code == 400
    finally:
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    assert "stopped" in out
    assert "Traceback" not in err


def test_serve_refuses_a_port_in_use(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "memprof",
                "serve",
                "--runs",
                str(tmp_path),
                "--port",
                str(port),
            ],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert result.returncode == 2
    assert f"cannot listen on 127.0.0.1:{port}" in result.stderr
    assert "Traceback" not in result.stderr


def test_help_does_not_import_the_web_stack():
    code = (
        "import sys; from typer.testing import CliRunner; from memprof.cli.app import app; "
        "CliRunner().invoke(app, ['--help']); "
        "print(sorted(m for m in ('fastapi', 'plotly', 'uvicorn', 'web') "
        "if m in sys.modules))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert result.stdout.strip() == "[]", result.stderr
