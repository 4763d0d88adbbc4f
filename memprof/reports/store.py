"""The runs directory: one `<run_id>.json` report per run, written atomically.

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

DEFAULT_RUNS_DIR = Path("memprof-runs")
_RUN_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,200}$")


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    """Write `text` to `path` so that readers see the old file or the whole new one, never half."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; give the file normal permissions
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    return path


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def dumps_report(report: dict[str, Any]) -> str:
    return json.dumps(report, separators=(",", ":"), allow_nan=False)


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
    """Run ids are file stems with no path separators (guards against traversal)."""
    return bool(_RUN_ID_RE.match(run_id)) and ".." not in run_id


def report_path(runs_dir: str | os.PathLike, run_id: str) -> Path | None:
    if not is_valid_run_id(run_id):
        return None
    path = Path(runs_dir) / f"{run_id}.json"
    return path if path.is_file() else None


def load_report(runs_dir: str | os.PathLike, run_id: str) -> dict[str, Any] | None:
    """The report with this id, or None when there is none."""
    path = report_path(runs_dir, run_id)
    if path is None:
        return None
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


def list_report_paths(runs_dir: str | os.PathLike) -> list[Path]:
    """Report files in the runs directory, newest first (run ids start with a UTC timestamp)."""
    d = Path(runs_dir)
    if not d.is_dir():
        return []
    return sorted((p for p in d.glob("*.json") if not p.name.startswith(".")), reverse=True)
