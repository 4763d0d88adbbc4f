"""One reporter interface: terminal, JSON, HTML, trace and snapshot render the same report and
write it atomically, each with its suffix and hint."""

from __future__ import annotations

import json
import pickle

import pytest

from memprof.errors import InvalidInput
from memprof.reports.reporters import REPORTERS, get_reporter
from memprof.reports.store import require_report
from memprof.runner import run_scenario
from tests.memprof.test_runner_engine import RELU, scenario


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    return run_scenario(scenario(tmp_path_factory.mktemp("r"), RELU))


def test_every_format_is_a_reporter():
    assert list(REPORTERS) == ["terminal", "json", "html", "trace", "snapshot"]
    assert {r.suffix for r in REPORTERS.values()} == {
        ".txt",
        ".json",
        ".html",
        ".trace.json",
        ".pickle",
    }


@pytest.mark.parametrize("name", list(REPORTERS))
def test_each_reporter_writes_the_same_report(tmp_path, report, name):
    reporter = get_reporter(name)
    path = tmp_path / f"out{reporter.suffix}"

    written = reporter.write(report, path)

    assert written.path == path and written.size == path.stat().st_size > 0
    assert written.describe().startswith(f"wrote {path} (")
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no temporary file left
    raw = path.read_bytes()
    if name == "terminal":
        text = raw.decode()
        assert "relu" in text and "saves 1.00 MiB (50.0%)" in text
    elif name == "json":
        assert require_report(json.loads(raw)) == json.loads(json.dumps(report))
    elif name == "html":
        assert raw.lstrip().lower().startswith(b"<!doctype html")
        assert b'"name":"relu"' in raw or b"relu" in raw
    elif name == "trace":
        events = json.loads(raw)
        events = events["traceEvents"] if isinstance(events, dict) else events
        assert any(e.get("name") == "act (relu)" and e.get("ph") == "X" for e in events)
    else:
        snap = pickle.loads(raw)
        assert len(snap["device_traces"]) == len(report["variants"])


def test_an_unknown_reporter_or_unwritable_path_is_invalid_input(tmp_path, report):
    with pytest.raises(InvalidInput, match="no reporter 'pdf'; expected one of terminal"):
        get_reporter("pdf")
    blocker = tmp_path / "file"
    blocker.write_text("")
    for name in ("json", "snapshot"):
        with pytest.raises(InvalidInput, match="cannot write"):
            get_reporter(name).write(report, blocker / "x")
