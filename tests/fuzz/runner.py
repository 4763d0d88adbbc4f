"""Run `memprof` on mutated files in subprocesses and judge every invocation.

Each subprocess runs under a wall-clock timeout and an address-space cap (RLIMIT_AS), with one
BLAS thread. An invocation fails the fuzz run when it

- prints a Python traceback,
- runs past the timeout (a hang) or dies by a signal,
- exits with a code the command does not document (validate: 0, 2; run: 0, 1, 2;
  report/compare: 0, 1, 2),
- loses a report (`run` exited 0 or 1 but a scenario has no report in the runs directory, or
  the `--json` copy is missing) or writes a corrupt one (not JSON, or not a report every reader
  can use: memprof.reports.load.check_report), or leaves a `.tmp` file behind.

Files are checked in batches (several files per `memprof validate` / `memprof run`) to keep
interpreter start-ups few; a batch that fails is re-run file by file to name the culprit.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TRACEBACK = "Traceback (most recent call last)"
ALLOWED = {"validate": {0, 2}, "run": {0, 1, 2}, "report": {0, 2}, "compare": {0, 1, 2}}


@dataclass
class Failure:
    kind: str  # traceback | hang | signal | exit_code | lost_report | corrupt_report | tmp_left
    command: list[str]
    files: list[str]
    detail: str

    def __str__(self) -> str:
        names = ", ".join(Path(f).name for f in self.files)
        return f"{self.kind}: memprof {' '.join(self.command)} [{names}]\n{self.detail}"


@dataclass
class Tally:
    files: int = 0
    invocations: int = 0
    reports: int = 0
    exit_codes: Counter = field(default_factory=Counter)
    failures: list[Failure] = field(default_factory=list)

    def add(self, other: Tally) -> None:
        self.files += other.files
        self.invocations += other.invocations
        self.reports += other.reports
        self.exit_codes.update(other.exit_codes)
        self.failures += other.failures

    def counts(self) -> dict[str, int]:
        kinds = Counter(f.kind for f in self.failures)
        return {
            "files": self.files,
            "invocations": self.invocations,
            "reports_checked": self.reports,
            "tracebacks": kinds["traceback"],
            "hangs": kinds["hang"],
            "signals": kinds["signal"],
            "unexpected_exit_codes": kinds["exit_code"],
            "lost_reports": kinds["lost_report"],
            "corrupt_reports": kinds["corrupt_report"],
            "tmp_files_left": kinds["tmp_left"],
        }


def _limit(as_bytes: int):
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (as_bytes, as_bytes))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))

    return apply


ENV = {
    **os.environ,
    "OPENBLAS_NUM_THREADS": "1",
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "NO_COLOR": "1",
    "COLUMNS": "200",
    "PYTHONFAULTHANDLER": "1",
}


@dataclass
class Invocation:
    command: list[str]
    rc: int | None  # None: timed out
    output: str
    seconds: float


class Memprof:
    """Runs `python -m memprof ...` with the limits; counts invocations."""

    def __init__(self, *, timeout: float, as_bytes: int, cwd: Path):
        self.timeout = timeout
        self.as_bytes = as_bytes
        self.cwd = cwd

    def __call__(self, args: list[str], tally: Tally) -> Invocation:
        tally.invocations += 1
        t0 = time.monotonic()
        try:
            proc = subprocess.run(
                [sys.executable, "-m", "memprof", *args],
                cwd=self.cwd,
                env={**ENV, "PYTHONPATH": str(ROOT)},
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=self.timeout,
                preexec_fn=_limit(self.as_bytes),
            )
        except subprocess.TimeoutExpired as exc:
            out = (exc.stdout or b"") + (exc.stderr or b"")
            return Invocation(args, None, out.decode("utf-8", "replace"), self.timeout)
        out = proc.stdout.decode("utf-8", "replace") + proc.stderr.decode("utf-8", "replace")
        tally.exit_codes[f"{args[0]}:{proc.returncode}"] += 1
        return Invocation(args, proc.returncode, out, time.monotonic() - t0)


def judge(inv: Invocation, files: list[str]) -> Failure | None:
    """The failure an invocation shows on its own (traceback, hang, signal, exit code)."""
    tail = inv.output[-3000:]
    if inv.rc is None:
        return Failure("hang", inv.command, files, f"no exit after {inv.seconds:.0f} s\n{tail}")
    if TRACEBACK in inv.output:
        start = inv.output.index(TRACEBACK)
        return Failure("traceback", inv.command, files, inv.output[start : start + 4000])
    if inv.rc < 0:
        return Failure("signal", inv.command, files, f"killed by signal {-inv.rc}\n{tail}")
    if inv.rc not in ALLOWED[inv.command[0]]:
        return Failure("exit_code", inv.command, files, f"exit code {inv.rc}\n{tail}")
    if inv.rc == 2 and "error" not in inv.output and ":" not in inv.output:
        return Failure("exit_code", inv.command, files, f"exit 2 without a message\n{tail}")
    return None


# --- scenarios --------------------------------------------------------------------------------


def check_scenarios(
    files: list[Path],
    memprof: Memprof,
    *,
    device: str | None,
) -> Tally:
    """Validate a batch, then run the files that validated; re-run file by file on failure."""
    tally = Tally(files=len(files))
    names = [str(f) for f in files]
    inv = memprof(["validate", *names], tally)
    failure = judge(inv, names)
    if failure is not None and len(files) > 1:
        for f in files:  # name the culprit
            one = memprof(["validate", str(f)], tally)
            fail = judge(one, [str(f)])
            if fail is not None:
                tally.failures.append(fail)
    elif failure is not None:
        tally.failures.append(failure)
    valid = [f for f in files if f"{f}: ok (" in inv.output]
    if valid:
        _run_batch(valid, memprof, tally, device=device)
    return tally


def _run_batch(files: list[Path], memprof: Memprof, tally: Tally, *, device: str | None) -> None:
    runs = Path(tempfile.mkdtemp(prefix="runs-", dir=memprof.cwd))
    out = runs.parent / f"{runs.name}.out.json"
    args = ["run", "-q", "--runs", str(runs), "--json", str(out)]
    if device:
        args += ["--device", device]
    names = [str(f) for f in files]
    inv = memprof([*args, *names], tally)
    problems = []
    failure = judge(inv, names)
    if failure is not None:
        problems.append(failure)
    elif inv.rc in (0, 1):
        problems += _check_reports(runs, out, files, inv)
    if problems and len(files) > 1:  # name the culprit(s)
        shutil.rmtree(runs, ignore_errors=True)
        out.unlink(missing_ok=True)
        for f in files:
            _run_batch([f], memprof, tally, device=device)
        return
    elif inv.rc == 2 and len(files) > 1:  # a file refused (e.g. `values` on meta): run the rest
        shutil.rmtree(runs, ignore_errors=True)
        out.unlink(missing_ok=True)
        refused = [f for f in files if f"{f}:" in inv.output]
        rest = [f for f in files if f not in refused]
        if refused and rest:
            _run_batch(rest, memprof, tally, device=device)
        else:
            for f in files:
                _run_batch([f], memprof, tally, device=device)
        return
    tally.failures += problems
    if inv.rc in (0, 1):
        tally.reports += len(list(runs.glob("*.json")))
    shutil.rmtree(runs, ignore_errors=True)
    out.unlink(missing_ok=True)


def _check_reports(runs: Path, out: Path, files: list[Path], inv: Invocation) -> list[Failure]:
    from memprof.errors import InvalidInput
    from memprof.reports.load import check_report

    names = [str(f) for f in files]
    problems = []
    left = [p.name for p in runs.iterdir() if p.suffix == ".tmp" or p.name.endswith(".tmp")]
    if left:
        problems.append(Failure("tmp_left", inv.command, names, ", ".join(left)))
    saved = {}
    for path in runs.glob("*.json"):
        try:
            report = check_report(json.loads(path.read_text(encoding="utf-8")), path.name)
        except (ValueError, InvalidInput) as exc:
            problems.append(Failure("corrupt_report", inv.command, names, str(exc)))
            continue
        saved[report["scenario"]["path"]] = report
    for f in files:
        if str(f) not in saved:
            problems.append(
                Failure(
                    "lost_report",
                    inv.command,
                    [str(f)],
                    f"exit {inv.rc} but no report for {f.name} in the runs directory\n"
                    + inv.output[-2000:],
                )
            )
    try:
        json_copy = json.loads(out.read_text(encoding="utf-8"))
        copies = json_copy if isinstance(json_copy, list) else [json_copy]
        for report in copies:
            check_report(report, "--json output")
        if len(copies) != len(files):
            raise ValueError(f"{len(copies)} reports in --json for {len(files)} scenarios")
    except (OSError, ValueError, InvalidInput) as exc:
        problems.append(Failure("lost_report", inv.command, names, f"--json: {exc}"))
    return problems


# --- reports ----------------------------------------------------------------------------------


def check_reports(files: list[Path], memprof: Memprof, base: Path) -> Tally:
    """`memprof report` and `memprof compare` on each mutated report (against a good one)."""
    tally = Tally(files=len(files))
    for f in files:
        html = f.with_suffix(".html")
        trace = f.with_suffix(".trace.json")
        for args in (
            ["report", str(f), "--html", str(html), "--trace", str(trace)],
            ["compare", str(base), str(f)],
        ):
            inv = memprof(args, tally)
            failure = judge(inv, [str(f)])
            if failure is not None:
                tally.failures.append(failure)
        html.unlink(missing_ok=True)
        trace.unlink(missing_ok=True)
    return tally


# --- the whole run ----------------------------------------------------------------------------


def batches(items: list, size: int) -> Iterable[list]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


def fuzz(
    n: int,
    *,
    seed: int = 0,
    reports: int = 0,
    jobs: int = 2,
    batch: int = 25,
    timeout: float = 120.0,
    as_bytes: int = 4 * 1024**3,
    device: str | None = "meta",
    workdir: Path | None = None,
    keep_failing: Path | None = None,
    progress=None,
) -> Tally:
    """Generate `n` mutated scenarios (and `reports` mutated reports), check them all."""
    from tests.fuzz.generate import report_case, scenario_case

    own = workdir is None
    work = Path(tempfile.mkdtemp(prefix="memprof-fuzz-")) if own else Path(workdir)
    work.mkdir(parents=True, exist_ok=True)
    memprof = Memprof(timeout=timeout, as_bytes=as_bytes, cwd=work)
    total = Tally()
    try:
        files = []
        cases = work / "scenarios"
        cases.mkdir(exist_ok=True)
        for i in range(n):
            name, raw = scenario_case(seed, i)
            path = cases / name
            path.write_bytes(raw)
            files.append(path)
        jobs_list = [("scenarios", b) for b in batches(files, batch)]
        if reports:
            base = _base_report(memprof, work, total)
            rfiles = []
            rdir = work / "reports"
            rdir.mkdir(exist_ok=True)
            for i in range(reports):
                name, raw = report_case(seed, i, json.loads(base.read_text()))
                path = rdir / name
                path.write_bytes(raw)
                rfiles.append(path)
            jobs_list += [("reports", b) for b in batches(rfiles, max(1, batch // 5))]

        def work_on(job):
            kind, items = job
            if kind == "scenarios":
                return check_scenarios(items, memprof, device=device)
            return check_reports(items, memprof, base)

        with ThreadPoolExecutor(max_workers=jobs) as pool:
            for tally in pool.map(work_on, jobs_list):
                total.add(tally)
                if progress is not None:
                    progress(total)
        if keep_failing is not None and total.failures:
            keep_failing.mkdir(parents=True, exist_ok=True)
            for f in total.failures:
                for name in f.files:
                    if Path(name).is_file():
                        shutil.copy(name, keep_failing / Path(name).name)
    finally:
        if own:
            shutil.rmtree(work, ignore_errors=True)
    return total


def _base_report(memprof: Memprof, work: Path, tally: Tally) -> Path:
    """A real report to mutate: relu on meta, with all its fields."""
    out = work / "base-report.json"
    inv = memprof(
        [
            "run",
            "-q",
            str(ROOT / "scenarios" / "relu.yaml"),
            "--device",
            "meta",
            "--runs",
            str(work / "base-runs"),
            "--json",
            str(out),
        ],
        tally,
    )
    if inv.rc not in (0, 1) or not out.is_file():
        raise RuntimeError(f"could not make the base report:\n{inv.output[-2000:]}")
    return out
