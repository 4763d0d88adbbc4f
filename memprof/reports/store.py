"""The runs directory: one `<run_id>.json` report per run, written atomically; and reading a
report file back (`read_report`), shared by `memprof report`, `memprof compare` and the dashboard.

Layout::

    memprof-runs/
      20261121T051500Z-relu-block-1a2b3c.json
      history.sqlite          (see memprof/history.py)
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any

from memprof.errors import InvalidInput

DEFAULT_RUNS_DIR = Path("memprof-runs")
# The one rule for run ids (and so for report file names). A run id is made from the UTC time,
# the scenario name (whose characters the scenario format limits to these) and random hex; it has
# no path separator and does not start with a dot, so no run id names anything outside the runs
# directory ("a..b" is an ordinary name).
_RUN_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,200}$")


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    """Write `text` to `path` so that readers see the old file or the whole new one, never half.

    The text goes to a hidden `.NAME.*.tmp` file beside it, renamed over `path` when complete;
    on any failure the temporary file is removed. While it is written the writer holds a lock on
    it, so `clean_orphans` can tell a live temporary file from one a killed writer left.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    clean_orphans(path.parent)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=TMP_SUFFIX, dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            _lock(fh.fileno())
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
            os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; give it normal permissions
            os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    return path


TMP_SUFFIX = ".tmp"
MIN_ORPHAN_AGE_S = 1.0


def _lock(fd: int, *, wait: bool = True) -> bool:
    """An exclusive lock on an open file (released when the process ends, however it ends)."""
    try:
        import fcntl
    except ImportError:  # no fcntl (Windows): clean_orphans goes by age instead
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
    except OSError:
        return False
    return True


def clean_orphans(directory: str | os.PathLike, *, max_age_s: float = 3600.0) -> list[Path]:
    """Remove the temporary files of writers that died mid-write (killed, power loss): hidden
    `*.tmp` files in `directory` that no live writer holds locked (without file locks: older than
    `max_age_s`). Returns what was removed; never raises."""
    removed = []
    try:
        candidates = [
            p for p in Path(directory).iterdir() if p.name.startswith(".") and p.suffix == ".tmp"
        ]
    except OSError:
        return removed
    for p in candidates:
        try:
            if not _orphaned(p, max_age_s):
                continue
            p.unlink()
            removed.append(p)
        except OSError:
            continue
    return removed


def _orphaned(path: Path, max_age_s: float) -> bool:
    import time

    age = time.time() - path.lstat().st_mtime
    try:
        import fcntl  # noqa: F401
    except ImportError:
        return age > max_age_s
    if age < MIN_ORPHAN_AGE_S:  # a writer locks its file right after making it: give it time
        return False
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    try:
        return _lock(fd, wait=False)
    finally:
        os.close(fd)


def write_output(path: str | os.PathLike, text: str) -> Path:
    """atomic_write_text for a file the user named: a failure is InvalidInput naming the path."""
    try:
        return atomic_write_text(path, text)
    except OSError as exc:
        problem = output_problem(path) or f"{path}: cannot write: {exc.strerror or exc}"
        raise InvalidInput(problem) from None


def output_problem(path: str | os.PathLike, *, directory: bool = False) -> str | None:
    """Why `path` (a file to write, or with directory=True a folder to write into) cannot be
    written, or None. Creates nothing, so commands can check their outputs before running."""
    p = Path(path)
    if directory and p.exists() and not p.is_dir():
        return f"{p}: cannot write reports there: it is a file, not a directory"
    if not directory and p.is_dir():
        return f"{p}: cannot write: it is a directory; expected a file path"
    folder = p if directory else p.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        return f"{p}: cannot write: {folder} is a file, not a directory"
    if not os.access(folder, os.W_OK | os.X_OK):
        return f"{p}: cannot write: {folder} is not writable"
    return None


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def dumps_report(report: dict[str, Any] | list[dict[str, Any]], *, packed: bool = True) -> str:
    """Compact JSON, as reports are saved (NaN is refused: JSON has none). packed: each variant's
    timeline and op rows as packed columns (memprof/reports/packed.py, a few bytes per event);
    packed=False writes them as plain lists (what `read_report` gives back either way)."""
    if packed:
        report = (
            [pack_report(r) for r in report] if isinstance(report, list) else pack_report(report)
        )
    return json.dumps(report, separators=(",", ":"), allow_nan=False)


def pack_report(report: dict[str, Any]) -> dict[str, Any]:
    """A shallow copy of the report whose variants' timeline and ops are packed tables when
    they have PACK_MIN entries or more (fewer read better as plain lists, and packing them
    saves nothing); the report itself is not changed; what is packed already stays as it is."""
    from memprof.reports.packed import PACK_MIN, is_packed, pack_columns, pack_rows

    variants = report.get("variants") if isinstance(report, dict) else None
    if not isinstance(variants, list):
        return report
    out = []
    for v in variants:
        if isinstance(v, dict):
            v = dict(v)
            tl, ops = v.get("timeline"), v.get("ops")
            if isinstance(tl, dict) and not is_packed(tl) and len(tl.get("seq", ())) >= PACK_MIN:
                v["timeline"] = pack_columns(tl)
            if isinstance(ops, list) and len(ops) >= PACK_MIN:
                v["ops"] = pack_rows(ops)
        out.append(v)
    return {**report, "variants": out}


def write_report(report: dict[str, Any], path: str | os.PathLike) -> Path:
    """Write one report atomically to an explicit path."""
    return atomic_write_text(path, dumps_report(report))


def save_report(report: dict[str, Any], runs_dir: str | os.PathLike = DEFAULT_RUNS_DIR) -> Path:
    """Save a report as `<runs_dir>/<run_id>.json` (atomic) and return the path."""
    run_id = report["run_id"]
    if not is_valid_run_id(run_id):
        raise ValueError(f"bad run id {run_id!r}")
    return write_report(report, Path(runs_dir) / f"{run_id}.json")


def is_valid_run_id(run_id: str) -> bool:
    """Run ids are file stems with no path separators and no leading dot (no traversal)."""
    return isinstance(run_id, str) and bool(_RUN_ID_RE.fullmatch(run_id))


def report_path(runs_dir: str | os.PathLike, run_id: str) -> Path | None:
    """The report file of `run_id` in the runs directory, or None. A symlink there that leads
    outside the directory is not followed (the dashboard serves these files)."""
    if not is_valid_run_id(run_id):
        return None
    path = Path(runs_dir) / f"{run_id}.json"
    return path if path.is_file() and _inside(path, runs_dir) else None


def _inside(path: Path, directory: str | os.PathLike) -> bool:
    try:
        return path.resolve().is_relative_to(Path(directory).resolve())
    except (OSError, RuntimeError):  # a symlink loop
        return False


def find_report(ref: str | os.PathLike, runs_dir: str | os.PathLike = DEFAULT_RUNS_DIR) -> Path:
    """A report file named directly, or the run with that id in `runs_dir`; else InvalidInput."""
    path = Path(ref)
    if path.is_file():
        return path
    if path.is_dir():
        raise InvalidInput(f"{path}: is a directory; expected a report .json file or a run id")
    found = report_path(runs_dir, str(ref))
    if found is None and (path.suffix == ".json" or len(path.parts) > 1):
        raise InvalidInput(f"{ref}: no such report file")
    if found is None:
        raise InvalidInput(
            f"{ref}: no such report file, and no run {str(ref)!r} in {runs_dir}/ "
            f"(pass a report's path, or its run id with --runs DIR)"
        )
    return found


def read_report(path: str | os.PathLike) -> dict[str, Any]:
    """Read a report JSON file (docs/report-format.md); InvalidInput naming the file and what is
    wrong when it is missing, not JSON or not a report."""
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except FileNotFoundError:
        raise InvalidInput(f"{path}: no such report file") from None
    except IsADirectoryError:
        raise InvalidInput(f"{path}: is a directory; expected a report .json file") from None
    except json.JSONDecodeError as exc:
        raise InvalidInput(
            f"{path}:{exc.lineno}:{exc.colno}: cannot read the report: invalid JSON ({exc.msg})"
        ) from None
    except UnicodeDecodeError:
        raise InvalidInput(f"{path}: cannot read the report: not UTF-8 text") from None
    except ValueError as exc:  # e.g. an integer of more digits than Python converts
        raise InvalidInput(f"{path}: cannot read the report: {exc}") from None
    except RecursionError:
        raise InvalidInput(
            f"{path}: cannot read the report: values nested too deep to be a report"
        ) from None
    except OSError as exc:
        raise InvalidInput(f"{path}: cannot read the report: {exc.strerror or exc}") from None
    return require_report(data, str(path))


def require_report(report: Any, source: str = "report", *, arrays: bool = False) -> dict[str, Any]:
    """The report as readers use it (packed columns unpacked; arrays=True: timelines as
    memprof.reports.reduce.TimelineArrays) if it is one (docs/report-format.md), else
    InvalidInput (memprof.reports.load.UnreadableReport) naming the first bad field."""
    from memprof.reports.load import check_report

    return check_report(report, source, arrays=arrays)


def list_report_paths(runs_dir: str | os.PathLike) -> list[Path]:
    """Report files in the runs directory, newest first (run ids start with a UTC timestamp)."""
    d = Path(runs_dir)
    if not d.is_dir():
        return []
    return sorted(
        (p for p in d.glob("*.json") if not p.name.startswith(".") and _inside(p, d)),
        reverse=True,
    )
