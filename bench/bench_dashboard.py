"""Benchmark the dashboard on a 1,000,000-event timeline (python bench/bench_dashboard.py).

Prints one table; each figure comes with a reference measured in the same run, and their ratio:

- reducing the timeline to `max_points` samples in process (min/max per bucket, the category
  stacks, the JSON-ready lists) against numpy's argmax over the same array (one pass);
- `GET /api/runs/{id}/variants/{name}/timeline?max_points=2000` from a real `memprof serve`
  against the same request for a run of a few hundred events on the same server (the target is
  1 s; reduction should keep the ratio small), checking that the exact peak is kept;
- the run page in headless Chromium until its charts are drawn, against the small run's page in
  the same browser (target 3 s);
- parsing the report once (3 MB packed; the server does it at startup, in the background) against
  `json.loads` of the same bytes.

The speed targets live here, not in the tests (tests assert behaviour): the last line says
whether the figures are within them, and the exit status is 1 when they are not.

Options: --events N (default 1,000,000), --repeat N, --json PATH (write the figures),
--no-browser.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from memprof.reports.reduce import TimelineArrays, reduce_timeline  # noqa: E402
from memprof.reports.store import save_report  # noqa: E402

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
MAX_POINTS = 2000


def build_report(events: int) -> dict:
    """A synthetic MLP training report (tests/web/synthetic.py) with about `events` events."""
    from tests.web.synthetic import make_report

    per_iteration = 11_022  # events of one iteration with these layer settings
    iterations = max(1, -(-events // per_iteration))
    return make_report(
        scenario="mlp-1m",
        layers=500,
        iterations=iterations,
        scratch=6,
        variants=("out_of_place",),
        created_at="2026-11-21T06:00:00Z",
    )


def best(times: list[float]) -> float:
    return min(times)


def measure_reduction(variant: dict, repeat: int) -> dict:
    arrays = TimelineArrays.from_columns(variant["timeline"])
    allocated = arrays.allocated
    reduce_times, argmax_times = [], []
    for _ in range(repeat):
        t0 = time.perf_counter()
        series = reduce_timeline(arrays, max_points=MAX_POINTS)
        reduce_times.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        np.argmax(allocated)
        argmax_times.append(time.perf_counter() - t0)
    assert max(series["allocated"]) == variant["peak_allocated_bytes"]
    assert variant["peak"]["event_index"] in series["index"]
    return {
        "reduce_s": best(reduce_times),
        "argmax_s": best(argmax_times),
        "points": len(series["index"]),
        "events": arrays.n,
    }


def measure_parse(path: Path, repeat: int = 1) -> dict:
    """A cold load of the report into a fresh RunCache (read, unpack, check, arrays), `repeat`
    times interleaved with json.loads of the same bytes."""
    from web.cache import RunCache

    data = path.read_bytes()
    loads, parses = [], []
    for _ in range(repeat):
        t0 = time.perf_counter()
        json.loads(data)
        loads.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        RunCache(path.parent).get(path.stem)
        parses.append(time.perf_counter() - t0)
    return {
        "loads_s": best(loads),
        "parse_s": best(parses),
        "parse_median_s": statistics.median(parses),
        "mb": len(data) / 1e6,
    }


class Server:
    """`memprof serve` on a free port in a subprocess."""

    def __init__(self, runs: Path):
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "memprof",
                "serve",
                "--runs",
                str(runs),
                "--port",
                "0",
                "--scenarios",
                str(runs / "no-scenarios"),
            ],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        line = self.proc.stdout.readline()
        self.url = line.split()[2].rstrip("/")

    def close(self) -> None:
        self.proc.send_signal(signal.SIGINT)
        self.proc.communicate(timeout=30)


def wait_until_parsed(server: Server, run_id: str) -> float:
    """Seconds until the server (warming up in the background) has the run's summary."""
    import httpx

    t0 = time.perf_counter()
    while True:
        try:
            runs = httpx.get(server.url + "/api/runs", timeout=120).json()
            if any(r["run_id"] == run_id for r in runs):
                return time.perf_counter() - t0
        except httpx.TransportError:
            time.sleep(0.05)


def build_small_report() -> dict:
    """The reference run: the same synthetic program with a few hundred events (not reduced)."""
    from tests.web.synthetic import make_report

    return make_report(
        scenario="mlp-small",
        layers=4,
        iterations=1,
        variants=("out_of_place",),
        created_at="2026-11-21T05:00:00Z",
    )


def timeline_url(server: Server, report: dict) -> str:
    variant = report["variants"][0]
    return (
        f"{server.url}/api/runs/{report['run_id']}/variants/{variant['name']}/timeline"
        f"?max_points={MAX_POINTS}"
    )


def measure_http(server: Server, report: dict, repeat: int) -> dict:
    """Best and median seconds of the reduced timeline request; checks the exact peak is kept."""
    import httpx

    variant = report["variants"][0]
    url = timeline_url(server, report)
    times = []
    with httpx.Client(timeout=60) as client:
        for _ in range(repeat):
            t0 = time.perf_counter()
            response = client.get(url)
            times.append(time.perf_counter() - t0)
            series = response.json()
            assert len(series["index"]) <= MAX_POINTS
            assert max(series["allocated"]) == variant["peak_allocated_bytes"]
            assert variant["peak"]["event_index"] in series["index"]
    return {
        "http_s": best(times),
        "http_median_s": statistics.median(times),
        "bytes": len(response.content),
    }


def find_chromium() -> str | None:
    return (
        os.environ.get("MEMPROF_CHROMIUM")
        or shutil.which("chromium")
        or ("/usr/bin/chromium" if os.access("/usr/bin/chromium", os.X_OK) else None)
    )


def measure_pages(server: Server, reports: list[dict], repeat: int) -> list[dict] | None:
    """Seconds until each report's run page has drawn its charts, in one headless Chromium
    (a fresh context per load: nothing cached, plotly.js included). Checks the drawn peak."""
    executable = find_chromium()
    if executable is None:
        return None
    from playwright.sync_api import sync_playwright

    results = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        for report in reports:
            variant = report["variants"][0]
            times = []
            for _ in range(repeat):
                context = browser.new_context(viewport={"width": 1400, "height": 900})
                page = context.new_page()
                t0 = time.perf_counter()
                page.goto(f"{server.url}/runs/{report['run_id']}")
                page.wait_for_function(
                    "() => document.body.dataset.chartsReady === 'true'", timeout=60_000
                )
                times.append(time.perf_counter() - t0)
                assert drawn_peak(page) == variant["peak_allocated_bytes"]
                context.close()
            results.append({"page_s": best(times), "page_median_s": statistics.median(times)})
        browser.close()
    return results


def drawn_peak(page) -> int:
    """The y of the peak marker that Plotly drew on the run page's timeline."""
    return page.evaluate(
        "() => { const gd = document.getElementById('timeline-chart');"
        " const i = gd._fullData.findIndex(t => t.name === 'peak');"
        " return gd.calcdata[i][0].y; }"
    )


def print_table(rows: list[tuple[str, float, str, float | None, str]]) -> None:
    """figure, measured, reference, reference seconds, note: one line each, with the ratio."""
    width = max(len(r[0]) for r in rows)
    ref_width = max(len(r[2]) for r in rows)
    print(
        f"{'figure':<{width}}  {'measured':>9}  {'reference':<{ref_width}}  {'ref':>9}  {'ratio':>7}"
    )
    for name, seconds, ref_name, ref_s, note in rows:
        ref = f"{ref_s:8.4f}s" if ref_s is not None else ""
        ratio = f"{seconds / ref_s:7.1f}" if ref_s else ""
        line = f"{name:<{width}}  {seconds:8.4f}s  {ref_name:<{ref_width}}  {ref:>9}  {ratio:>7}"
        print(f"{line}  {note}".rstrip())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--no-browser", action="store_true")
    args = parser.parse_args()

    t0 = time.perf_counter()
    report = build_report(args.events)
    variant = report["variants"][0]
    build_s = time.perf_counter() - t0
    small = build_small_report()
    with tempfile.TemporaryDirectory() as tmp:
        runs = Path(tmp) / "runs"
        path = save_report(report, runs)
        save_report(small, runs)
        reduction = measure_reduction(variant, args.repeat)
        parse = measure_parse(path, args.repeat)
        server = Server(runs)
        try:
            warm_s = wait_until_parsed(server, report["run_id"])
            http = measure_http(server, report, args.repeat)
            http_small = measure_http(server, small, args.repeat)
            pages = None if args.no_browser else measure_pages(server, [report, small], 3)
        finally:
            server.close()

    events = reduction["events"]
    small_events = len(small["variants"][0]["timeline"]["seq"])
    rows = [
        (
            f"reduce {events:,} events to {reduction['points']:,} points (in process)",
            reduction["reduce_s"],
            "numpy argmax, same array",
            reduction["argmax_s"],
            "",
        ),
        (
            f"GET .../timeline?max_points={MAX_POINTS} (HTTP, warm)",
            http["http_s"],
            f"same request, {small_events:,}-event run",
            http_small["http_s"],
            f"target 1 s; median {http['http_median_s']:.3f} s; "
            f"{http['bytes'] / 1024:.0f} KiB; exact peak kept",
        ),
    ]
    if pages:
        page, page_small = pages
        rows.append(
            (
                "run page until its charts are drawn (Chromium)",
                page["page_s"],
                f"run page of the {small_events:,}-event run",
                page_small["page_s"],
                f"target 3 s; median {page['page_median_s']:.3f} s",
            )
        )
    else:
        page = None
    rows += [
        (
            f"load the {parse['mb']:.1f} MB report cold (read, unpack, check)",
            parse["parse_s"],
            "json.loads of the same bytes",
            parse["loads_s"],
            f"target 1 s; median {parse['parse_median_s']:.3f} s",
        ),
        ("server start until the run is listed (background warm-up)", warm_s, "", None, ""),
        ("build the synthetic report (not the dashboard)", build_s, "", None, ""),
    ]
    print_table(rows)
    ok = http["http_s"] < 1.0 and (page is None or page["page_s"] < 3.0) and parse["parse_s"] < 1.0
    print(
        "within the targets (1 s per timeline request and per cold load, 3 s per page)"
        if ok
        else "OVER TARGET"
    )
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "events": events,
                    "reduction": reduction,
                    "http": http,
                    "http_reference": http_small,
                    "page": page,
                    "page_reference": pages[1] if pages else None,
                    "parse": parse,
                    "warm_s": warm_s,
                },
                indent=2,
            )
        )
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
