"""JUnit XML for `memprof check --junit PATH`: one testcase per scenario variant.

CI systems (GitHub test reporters, GitLab, Jenkins) show each variant as a test:

    <testsuites name="memprof check" tests="2" failures="1" errors="0" time="0.69">
      <testsuite name="relu-block" tests="2" failures="1" errors="0" skipped="0" ...>
        <testcase classname="relu-block" name="out_of_place" time="0.48" file="scenarios/relu.yaml">
          <failure type="budget" message="relu-block/out_of_place was limited to 64.00 MiB but
            peaked at 128.00 MiB">...the explanation and the tensors live at the peak...</failure>
        </testcase>

A broken budget, expectation or regression is a <failure>; a variant that errored without
expecting to is an <error>.
"""

from __future__ import annotations

import datetime as _dt
import re
import xml.etree.ElementTree as ET
from collections.abc import Sequence

from memprof.check.evaluate import VariantResult
from memprof.check.explain import result_lines

# Characters XML 1.0 cannot carry (error messages may contain them).
_ILLEGAL_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def junit_xml(results: Sequence[VariantResult], *, created: _dt.datetime | None = None) -> str:
    """The JUnit document for these verdicts, grouped into one testsuite per scenario."""
    created = created or _dt.datetime.now(_dt.timezone.utc)
    stamp = created.strftime("%Y-%m-%dT%H:%M:%S")
    root = ET.Element("testsuites", name="memprof check")
    suites: dict[str, ET.Element] = {}
    for r in results:
        suite = suites.get(r.scenario)
        if suite is None:
            suite = suites[r.scenario] = ET.SubElement(
                root, "testsuite", name=_text(r.scenario), timestamp=stamp
            )
            if r.path:
                suite.set("file", _text(r.path))
        case = ET.SubElement(
            suite,
            "testcase",
            classname=_text(r.scenario),
            name=_text(r.variant),
            time=_seconds(r.duration_s),
        )
        if r.path:
            case.set("file", _text(r.path))
        failures = r.failures
        if failures:
            first = failures[0]
            tag = "error" if first.kind == "status" else "failure"
            el = ET.SubElement(
                case, tag, type=first.kind, message=_text(first.explanation or first.message)
            )
            el.text = _text("\n".join(r.explanation()))
        out = ET.SubElement(case, "system-out")
        out.text = _text("\n".join(result_lines(r)))
    for name, suite in suites.items():
        mine = [r for r in results if r.scenario == name]
        _count(suite, mine)
    _count(root, list(results))
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


def _count(el: ET.Element, results: list[VariantResult]) -> None:
    errors = sum(1 for r in results if r.failures and r.failures[0].kind == "status")
    failures = sum(1 for r in results if r.failures) - errors
    el.set("tests", str(len(results)))
    el.set("failures", str(failures))
    el.set("errors", str(errors))
    if el.tag == "testsuite":
        el.set("skipped", "0")
    el.set("time", _seconds(sum(r.duration_s or 0.0 for r in results)))


def _seconds(value: float | None) -> str:
    return f"{(value or 0.0):.3f}"


def _text(value: object) -> str:
    return _ILLEGAL_XML.sub("?", str(value))
