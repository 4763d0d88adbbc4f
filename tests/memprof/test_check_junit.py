"""memprof.check.junit: JUnit XML that a standard parser reads, one testcase per variant."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from memprof.check import evaluate_report, junit_xml
from tests.memprof.test_check_evaluate import (
    MiB,
    baseline_of,
    make_report,
    make_variant,
    size_expectation,
)


def _results():
    relu = make_report(
        "relu",
        [
            make_variant(
                "out_of_place",
                128 * MiB,
                duration_s=0.5,
                expectations=[size_expectation("peak_allocated", "<=", 64 * MiB, 128 * MiB)],
            ),
            make_variant(
                "inplace",
                64 * MiB,
                duration_s=0.25,
                expectations=[size_expectation("peak_allocated", "<=", 64 * MiB, 64 * MiB)],
            ),
        ],
        path="scenarios/relu.yaml",
    )
    err = {"type": "RuntimeError", "message": "shape mismatch \x1b[31m", "node": "mm"}
    mlp = make_report(
        "mlp",
        [make_variant("big", 8 * MiB, status="error", error=err), make_variant("small", 4 * MiB)],
    )
    base = baseline_of(make_report("mlp", [make_variant("small", 2 * MiB)]))
    return evaluate_report(relu) + evaluate_report(mlp, base, max_increase_pct=5.0)


def test_junit_parses_and_has_one_testcase_per_variant():
    root = ET.fromstring(junit_xml(_results()))

    assert root.tag == "testsuites"
    cases = [(c.get("classname"), c.get("name")) for c in root.iter("testcase")]
    assert cases == [
        ("relu", "out_of_place"),
        ("relu", "inplace"),
        ("mlp", "big"),
        ("mlp", "small"),
    ]
    assert [s.get("name") for s in root.iter("testsuite")] == ["relu", "mlp"]


def test_counts_add_up_on_suites_and_the_root():
    root = ET.fromstring(junit_xml(_results()))

    assert (root.get("tests"), root.get("failures"), root.get("errors")) == ("4", "2", "1")
    relu, mlp = root.iter("testsuite")
    assert (relu.get("tests"), relu.get("failures"), relu.get("errors")) == ("2", "1", "0")
    assert (mlp.get("tests"), mlp.get("failures"), mlp.get("errors")) == ("2", "1", "1")
    assert relu.get("time") == "0.750"
    assert relu.get("file") == "scenarios/relu.yaml"


def test_a_broken_budget_is_a_failure_carrying_the_explanation():
    root = ET.fromstring(junit_xml(_results()))
    case = root.find(".//testcase[@name='out_of_place']")

    failure = case.find("failure")
    assert failure.get("type") == "budget"
    assert (
        failure.get("message")
        == "relu/out_of_place was limited to 64.00 MiB but peaked at 128.00 MiB"
    )
    assert "live at the peak (128.00 MiB):" in failure.text
    assert "node act (relu)" in failure.text
    assert root.find(".//testcase[@name='inplace']/failure") is None


def test_a_regression_is_a_failure_and_an_unexpected_error_is_an_error():
    root = ET.fromstring(junit_xml(_results()))

    regression = root.find(".//testcase[@name='small']/failure")
    assert regression.get("type") == "regression"
    assert regression.get("message").startswith(
        "mlp/small peaked at 4.00 MiB, 100.0% above its baseline"
    )
    error = root.find(".//testcase[@name='big']/error")
    assert (
        error.get("message")
        == "mlp/big failed at node mm (error): RuntimeError: shape mismatch ?[31m"
    )


def test_no_variants_is_an_empty_but_valid_document():
    root = ET.fromstring(junit_xml([]))

    assert (root.tag, root.get("tests"), list(root)) == ("testsuites", "0", [])
