"""The pytest plugin, through real pytest runs (`pytester`): the memprof marker measures engine
allocations made inside a test and fails it pytest-memray style; `memprof_scenario` runs a
scenario file and returns its report."""

from __future__ import annotations

import xml.etree.ElementTree as ET

pytest_plugins = ["pytester"]

# Inner runs: no cache files, and none of the unrelated plugins that slow every run down.
QUIET = ("-p", "no:cacheprovider", "-p", "no:hypothesispytest", "-p", "no:benchmark")

# float32 [128, 128]: 64 KiB per tensor
HEADER = """
import pytest
import engine

def make():
    return engine.rand(128, 128)
"""


def _run(pytester, body, *args):
    pytester.makepyfile(test_budget=HEADER + body)
    return pytester.runpytest(*QUIET, *args)


def test_a_test_within_its_budget_passes(pytester):
    result = _run(
        pytester,
        """
@pytest.mark.memprof(max_peak="64 KiB")
def test_in_place():
    x = make()
    engine.relu_(x)
""",
    )

    result.assert_outcomes(passed=1)


def test_a_test_over_its_budget_fails_with_the_allocations_live_at_the_peak(pytester):
    result = _run(
        pytester,
        """
@pytest.mark.memprof(max_peak="64 KiB")
def test_out_of_place():
    x = make()
    y = engine.relu(x)
""",
    )

    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "test_out_of_place was limited to 64.00 KiB but peaked at 128.00 KiB",
            "allocations live at the peak:",
            "*64.00 KiB  (no op)  1 allocation  test_budget.py:5",
            "*64.00 KiB  relu     1 allocation  test_budget.py:10",
        ]
    )
    result.stdout.no_fnmatch_line("*Traceback*")


def test_the_size_may_be_given_positionally(pytester):
    result = _run(
        pytester,
        """
@pytest.mark.memprof("100 KiB")
def test_two_tensors():
    a, b = make(), make()
""",
    )

    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["test_two_tensors was limited to 100.00 KiB but peaked at 128.00 KiB"]
    )


def test_tensors_made_by_fixtures_are_not_charged_to_the_test(pytester):
    result = _run(
        pytester,
        """
@pytest.fixture
def big():
    return [make() for _ in range(8)]

@pytest.mark.memprof(max_peak="64 KiB")
def test_uses_fixture(big):
    y = engine.relu_(big[0])
""",
    )

    result.assert_outcomes(passed=1)


def test_the_peak_is_what_is_live_at_once_not_the_sum_of_allocations(pytester):
    result = _run(
        pytester,
        """
@pytest.mark.memprof(max_peak="128 KiB")
def test_loop():
    for _ in range(20):
        x = make()
        del x
""",
    )

    result.assert_outcomes(passed=1)


def test_a_test_that_fails_on_its_own_keeps_its_own_failure(pytester):
    result = _run(
        pytester,
        """
@pytest.mark.memprof(max_peak="1 KiB")
def test_assert():
    x = make()
    assert 1 == 2
""",
    )

    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*assert 1 == 2*"])
    result.stdout.no_fnmatch_line("*was limited to*")


def test_unmarked_tests_are_not_measured(pytester):
    result = _run(
        pytester,
        """
def test_plain(record_property):
    y = engine.relu(make())
""",
        "--junitxml=out.xml",
    )

    result.assert_outcomes(passed=1)
    root = ET.parse(pytester.path / "out.xml").getroot()
    assert root.find(".//property") is None


def test_the_measured_peak_is_a_user_property_in_pytests_junit(pytester):
    result = _run(
        pytester,
        """
@pytest.mark.memprof(max_peak="1 MiB")
def test_measured():
    y = engine.relu(make())
""",
        "--junitxml=out.xml",
    )

    result.assert_outcomes(passed=1)
    root = ET.parse(pytester.path / "out.xml").getroot()
    props = {p.get("name"): p.get("value") for p in root.iter("property")}
    assert props["memprof_peak_bytes"] == str(128 * 1024)


def test_a_reserved_budget_uses_the_caching_model(pytester):
    result = _run(
        pytester,
        """
@pytest.mark.memprof(max_reserved="1 MiB")
def test_reserved():
    engine.memory.set_allocator_model("caching")
    try:
        x = engine.rand(3, 1024, 1024)  # 12 MiB: the caching model reserves a 20 MiB segment
        del x
    finally:
        engine.memory.set_allocator_model("exact")
""",
    )

    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["test_reserved was limited to 1.00 MiB reserved but reserved *MiB"]
    )


def test_bad_marker_arguments_fail_the_test_with_the_problem(pytester):
    result = _run(
        pytester,
        """
@pytest.mark.memprof(max_peak="lots")
def test_bad_size():
    pass

@pytest.mark.memprof(max_peek="1 MiB")
def test_bad_name():
    pass

@pytest.mark.memprof(max_peak="1 MiB", device="tpu")
def test_bad_device():
    pass
""",
    )

    result.assert_outcomes(failed=3)
    result.stdout.fnmatch_lines(
        [
            "invalid @pytest.mark.memprof on test_bad_size: max_peak: expected a size such as 64 MiB*found 'lots'",
            "invalid @pytest.mark.memprof on test_bad_name: unexpected argument 'max_peek'; expected "
            "max_peak, max_reserved, device",
            "invalid @pytest.mark.memprof on test_bad_device: device: unknown device 'tpu'*",
        ]
    )
    result.stdout.no_fnmatch_line("*During handling*")


def test_the_marker_is_registered(pytester):
    result = _run(
        pytester,
        """
@pytest.mark.memprof(max_peak="1 MiB")
def test_strict():
    pass
""",
        "--strict-markers",
    )

    result.assert_outcomes(passed=1)
    markers = pytester.runpytest("--markers")
    markers.stdout.fnmatch_lines(["@pytest.mark.memprof(max_peak=None, *"])


RELU = """\
name: relu-block
inputs:
  x: {shape: [128, 128]}
program:
  - {id: act, op: relu, in: x, inplace: $inplace}
variants:
  out_of_place: {inplace: false}
  inplace: {inplace: true}
"""


def test_the_scenario_fixture_runs_a_file_next_to_the_test(pytester):
    (pytester.path / "relu.yaml").write_text(RELU)
    pytester.makepyfile(
        test_scenario="""
def test_relu(memprof_scenario):
    report = memprof_scenario("relu.yaml")
    peaks = {v["name"]: v["peak_allocated_bytes"] for v in report["variants"]}
    assert report["scenario"]["name"] == "relu-block"
    assert peaks == {"out_of_place": 128 * 1024, "inplace": 64 * 1024}

def test_one_variant(memprof_scenario):
    report = memprof_scenario("relu.yaml", variants=["inplace"])
    assert [v["name"] for v in report["variants"]] == ["inplace"]
"""
    )

    result = pytester.runpytest(*QUIET)

    result.assert_outcomes(passed=2)


def test_an_invalid_scenario_fails_the_test_with_its_problems(pytester):
    (pytester.path / "bad.yaml").write_text("name: bad\nprogram:\n  - {id: a, op: no_such_op}\n")
    pytester.makepyfile(
        test_scenario="""
def test_bad(memprof_scenario):
    memprof_scenario("bad.yaml")
"""
    )

    result = pytester.runpytest(*QUIET)

    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["invalid scenario bad.yaml:", "*bad.yaml:3:*no_such_op*"])
    result.stdout.no_fnmatch_line("*Traceback*")
    result.stdout.no_fnmatch_line("*During handling*")


def test_the_plugin_loads_from_its_entry_point_in_a_fresh_process(pytester):
    pytester.makepyfile(
        test_budget=HEADER
        + """
@pytest.mark.memprof(max_peak="64 KiB")
def test_out_of_place():
    y = engine.relu(make())
"""
    )

    result = pytester.runpytest_subprocess(*QUIET)

    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["test_out_of_place was limited to 64.00 KiB but peaked at 128.00 KiB"]
    )


PROFILE_HEADER = """
import pytest
import engine
import memprof
"""


def test_profile_blocks_inside_tests_are_collected(pytester):
    pytester.makepyfile(
        test_prof=PROFILE_HEADER
        + """
@pytest.mark.memprof(max_peak="64 KiB")
def test_over():
    with memprof.profile("over") as prof:
        fc = engine.nn.Linear(128, 128)
        x = engine.rand(64, 128)
        y = fc(x)

def test_unmarked():
    with memprof.profile("plain") as prof:
        x = engine.rand(1024)
    assert prof.peak == 4096
"""
    )
    result = pytester.runpytest(*QUIET, "--junitxml=out.xml")
    result.assert_outcomes(failed=1, passed=1)
    # the marked test fails for its own measure and for the block, with the block's live set
    result.stdout.fnmatch_lines(
        [
            "memprof.profile 'over' was limited to 64.00 KiB but peaked at 128.50 KiB",
            "live at the peak of 'over':",
            "*64.00 KiB  parameter*fc.weight  node Linear @ test_prof.py:8",
        ]
    )
    props = {
        (p.get("name"), p.get("value"))
        for p in ET.parse(pytester.path / "out.xml").iter("property")
    }
    assert ("memprof_profile:plain", "4096") in props
    # no --memprof-runs: nothing saved in the working directory
    assert not (pytester.path / "memprof-runs").exists()


def test_memprof_runs_option_saves_the_profiles(pytester):
    pytester.makepyfile(
        test_prof=PROFILE_HEADER
        + """
def test_saved():
    with memprof.profile("saved") as prof:
        x = engine.rand(1024)
    assert prof.recorded.ok
"""
    )
    result = pytester.runpytest(*QUIET, "--memprof-runs", "runs")
    result.assert_outcomes(passed=1)
    assert len(list((pytester.path / "runs").glob("*.json"))) == 1
