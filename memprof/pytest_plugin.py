"""pytest plugin (entry point `pytest11`): memory budgets for tests. See docs/ci.md.

A marker bounds what the engine allocates inside a test::

    @pytest.mark.memprof(max_peak="64 MiB")
    def test_relu_in_place_adds_nothing():
        x = engine.rand(1, 64, 512, 512)
        engine.relu_(x)

and fails it in the style of pytest-memray, with the allocations live at the peak::

    test_relu was limited to 64.00 MiB but peaked at 128.00 MiB
    allocations live at the peak:
          64.00 MiB  rand  1 allocation  tests/test_relu.py:11
          64.00 MiB  relu  1 allocation  tests/test_relu.py:12

Marker arguments: `max_peak` (also the first positional argument) bounds the peak of the bytes
allocated inside the test and still live; `max_reserved` bounds the growth of reserved bytes
(meaningful with the `caching` allocator model); `device` picks the allocator ("cpu" by default,
"cuda", "meta"). Sizes are written as in scenarios: "64 MiB", "1.5 GiB", 1000.
Only the test call is measured, not fixture setup. Each measured test records
`memprof_peak_bytes` in its user properties (they reach pytest's own --junitxml).

A `memprof.profile` block inside a test works as anywhere else, and the plugin collects it:
each block's peak goes into the test's user properties (`memprof_profile:NAME`), a marker's
`max_peak` / `max_reserved` also bound each block (a failure lists what was live at the block's
peak, by tensor and node), and the block's report is saved only when the run gives
`--memprof-runs DIR` (or the block names its own runs_dir)::

    @pytest.mark.memprof(max_peak="40 MiB")
    def test_training_step():
        with memprof.profile("mlp-step") as prof:
            loss = model(x).sum()
            loss.backward()
        assert prof.by_category["gradient"] == 8396800

The `memprof_scenario` fixture runs a scenario file and returns its report
(docs/report-format.md)::

    def test_relu_scenario(memprof_scenario):
        report = memprof_scenario("relu.yaml")
        assert report["status"] == "ok"

This module is imported by every pytest session of an environment with memprof installed, so it
imports the engine and the runner only when a test asks for them.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

MARKER = "memprof"
TOP_SITES = 5
_MARKER_KEYS = ("max_peak", "max_reserved", "device")
_NO_OP = "(no op)"  # creation functions such as engine.rand run outside any op


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.getgroup("memprof").addoption(
        "--memprof-runs",
        default=None,
        metavar="DIR",
        help="save the report of each memprof.profile block run by the tests in DIR "
        "(default: not saved)",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{MARKER}(max_peak=None, *, max_reserved=None, device='cpu'): fail the test when the "
        "engine allocations made inside it peak above max_peak (e.g. '64 MiB'); see memprof's "
        "docs/ci.md",
    )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):
    marker = item.get_closest_marker(MARKER)
    profiles: list = []
    listening = _listen_for_profiles(item, profiles)
    try:
        if marker is None:
            result = yield
        else:
            limits = _limits(item, marker)

            from memprof.check.measure import measure

            with measure(limits["device"]) as recorder:
                result = yield  # a test that fails on its own propagates from here, unchanged
    finally:
        if listening is not None:
            listening()
    for prof in profiles:
        item.user_properties.append((f"memprof_profile:{prof.name}", prof.peak))
    if marker is None:
        return result
    item.user_properties.append(("memprof_peak_bytes", recorder.peak_bytes))
    item.user_properties.append(("memprof_peak_reserved_bytes", recorder.peak_reserved_bytes))
    failures = _over_limits(item.name, limits, recorder)
    lines = _site_lines(recorder) if failures else []
    for prof in profiles:
        over = _profile_over_limits(prof, limits)
        if over:
            failures += over
            lines += _profile_lines(prof)
    if failures:
        pytest.fail("\n".join(failures + lines), pytrace=False)
    return result


@pytest.fixture
def memprof_scenario(request: pytest.FixtureRequest):
    """Run a scenario file with memprof's runner and return its report dict.

    `memprof_scenario(path, variants=None, device=None, allocator=None)`. A relative path is
    looked up next to the test file first, then under the rootdir. An invalid scenario fails
    the test with its `file:line:col` problems.
    """

    def run(path: str | os.PathLike, **options: Any) -> dict[str, Any]:
        from memprof.errors import InvalidInput
        from memprof.runner import run_scenario

        try:
            return run_scenario(_find(request, path), **options)
        except InvalidInput as exc:
            problem = str(exc)
        # outside the except block, so pytest shows no chained exception
        pytest.fail(f"invalid scenario {path}:\n{problem}", pytrace=False)

    return run


# --- internals --------------------------------------------------------------------------------


def _listen_for_profiles(item: pytest.Item, profiles: list):
    """Collect the memprof.profile blocks the test runs (only if it imported memprof.profile);
    returns the function that stops listening, or None."""
    import sys

    module = sys.modules.get("memprof.profile")
    if module is None:
        # not imported yet: the test may import it; importing it is cheap (no engine)
        import memprof.profile as module
    runs = item.config.getoption("--memprof-runs", default=None)
    saved_default = module._default_runs_dir
    module._default_runs_dir = runs if runs else False
    module._listeners.append(profiles.append)

    def stop():
        module._default_runs_dir = saved_default
        if profiles.append in module._listeners:
            module._listeners.remove(profiles.append)

    return stop


def _profile_over_limits(prof, limits: dict[str, Any]) -> list[str]:
    from memprof.check.explain import limit_message

    subject = f"memprof.profile {prof.name!r}"
    out = []
    if limits["max_peak"] is not None and prof.peak > limits["max_peak"]:
        out.append(limit_message(subject, limits["max_peak"], prof.peak))
    if limits["max_reserved"] is not None and prof.peak_reserved > limits["max_reserved"]:
        out.append(
            limit_message(subject, limits["max_reserved"], prof.peak_reserved, "peak_reserved")
        )
    return out


def _profile_lines(prof) -> list[str]:
    from memprof.units import format_bytes

    rows = prof.live_at_peak()
    lines = [f"live at the peak of {prof.name!r}:"]
    for row in rows[:TOP_SITES]:
        lines.append(
            f"  {format_bytes(row['bytes']):>11}  {row['category']:<16}  "
            f"{row['tensor'] or '<unnamed>'}  node {row['node']}"
        )
    if len(rows) > TOP_SITES:
        rest = sum(r["bytes"] for r in rows[TOP_SITES:])
        lines.append(f"  {format_bytes(rest):>11}  ... {len(rows) - TOP_SITES} more")
    return lines


def _limits(item: pytest.Item, marker: pytest.Mark) -> dict[str, Any]:
    from memprof.units import parse_size

    def bad(problem: str):
        pytest.fail(f"invalid @pytest.mark.{MARKER} on {item.name}: {problem}", pytrace=False)

    if len(marker.args) > 1:
        bad(f"expected at most one positional argument (max_peak), found {len(marker.args)}")
    kwargs = dict(marker.kwargs)
    if marker.args:
        if "max_peak" in kwargs:
            bad("max_peak given both positionally and by name")
        kwargs["max_peak"] = marker.args[0]
    unknown = sorted(set(kwargs) - set(_MARKER_KEYS))
    if unknown:
        bad(f"unexpected argument {unknown[0]!r}; expected {', '.join(_MARKER_KEYS)}")
    limits: dict[str, Any] = {"device": kwargs.get("device", "cpu")}
    try:
        from engine.device import as_device

        as_device(limits["device"])
        problem = None
    except (TypeError, ValueError) as exc:
        problem = f"device: {exc}"
    if problem:
        bad(problem)
    for key in ("max_peak", "max_reserved"):
        value = kwargs.get(key)
        if value is None:
            limits[key] = None
            continue
        try:
            limits[key] = parse_size(value)
            continue
        except ValueError as exc:
            problem = f"{key}: {exc}"
        bad(problem)  # outside the except block, so pytest shows no chained exception
    return limits


def _over_limits(subject: str, limits: dict[str, Any], recorder) -> list[str]:
    from memprof.check.explain import limit_message

    out = []
    if limits["max_peak"] is not None and recorder.peak_bytes > limits["max_peak"]:
        out.append(limit_message(subject, limits["max_peak"], recorder.peak_bytes))
    if limits["max_reserved"] is not None and recorder.peak_reserved_bytes > limits["max_reserved"]:
        out.append(
            limit_message(
                subject, limits["max_reserved"], recorder.peak_reserved_bytes, "peak_reserved"
            )
        )
    return out


def _site_lines(recorder) -> list[str]:
    from memprof.units import format_bytes

    sites = recorder.top_sites()
    if not sites:
        return []
    shown = sites[:TOP_SITES]
    op_w = max(len(s["op"] or _NO_OP) for s in shown)
    lines = ["allocations live at the peak:"]
    for s in shown:
        count = f"{s['count']} allocation{'s' if s['count'] != 1 else ''}"
        lines.append(
            f"  {format_bytes(s['bytes']):>11}  {s['op'] or _NO_OP:<{op_w}}  {count}"
            + (f"  {_short(s['location'])}" if s["location"] else "")
        )
    if len(sites) > TOP_SITES:
        rest = sum(s["bytes"] for s in sites[TOP_SITES:])
        lines.append(f"  {format_bytes(rest):>11}  ... {len(sites) - TOP_SITES} more sites")
    return lines


def _short(location: str) -> str:
    """`/abs/path/tests/test_x.py:12` -> `tests/test_x.py:12` when under the current directory."""
    path, _, line = location.rpartition(":")
    try:
        relative = os.path.relpath(path)
    except ValueError:  # another drive on Windows
        return location
    return location if relative.startswith("..") else f"{relative}:{line}"


def _find(request: pytest.FixtureRequest, path: str | os.PathLike) -> Path:
    p = Path(path)
    if p.is_absolute():
        return p
    for base in (Path(request.path).parent, Path(request.config.rootpath)):
        if (base / p).exists():
            return base / p
    return Path(request.config.rootpath) / p
