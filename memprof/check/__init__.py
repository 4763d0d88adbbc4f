"""`memprof check`: memory budgets and regressions as a CI gate.

- baseline.py: read earlier peaks (a check result, a run report, or a directory of them).
- evaluate.py: judge each variant of a report: expectations, budgets, regression, status.
- explain.py: the words: "relu/out_of_place was limited to 64.00 MiB but peaked at 128.00 MiB".
- result.py: the combined `--json` result (readable back as a baseline).
- junit.py: the `--junit` XML, one testcase per scenario variant.
- session.py: one whole check: find, validate, run, judge, save, record history.
"""

from memprof.check.baseline import Baseline, BaselineEntry, load_baseline
from memprof.check.evaluate import Check, VariantResult, evaluate_report
from memprof.check.explain import (
    limit_message,
    live_at_peak_lines,
    regression_message,
    result_lines,
)
from memprof.check.junit import junit_xml
from memprof.check.result import combined_result
from memprof.check.session import CheckOutcome, run_check

__all__ = [
    "Baseline",
    "BaselineEntry",
    "Check",
    "CheckOutcome",
    "VariantResult",
    "combined_result",
    "evaluate_report",
    "junit_xml",
    "limit_message",
    "live_at_peak_lines",
    "load_baseline",
    "regression_message",
    "result_lines",
    "run_check",
]
