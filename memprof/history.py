"""Run history: one row per scenario variant per run, in `<runs_dir>/history.sqlite`.

`memprof run` and `memprof check` append every report they produce; `memprof history` prints the
trend and the dashboard's run page charts the peak over past runs of the same scenario.

>>> append("memprof-runs", report, source="check")
2
>>> [row["peak_allocated_bytes"] for row in query("memprof-runs", "relu-block")]
[134217728, 67108864]

Several processes may append at once (parallel CI jobs sharing a runs directory): the database
runs in WAL mode with a busy timeout and each append is one `BEGIN IMMEDIATE` transaction, so
writers queue instead of failing and no row is lost. WAL needs a local file system (not NFS).
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import time
from collections.abc import Mapping
from contextlib import closing
from pathlib import Path
from typing import Any

DB_NAME = "history.sqlite"
SCHEMA_VERSION = 1
BUSY_TIMEOUT_S = 60.0

# The dicts `query` returns: these keys, in this order.
COLUMNS = (
    "run_id",
    "created_at",
    "scenario",
    "variant",
    "peak_allocated_bytes",
    "peak_reserved_bytes",
    "status",
    "passed",
    "duration_s",
    "git_commit",
    "device",
    "allocator",
    "source",
    "scenario_path",
)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS variant_runs (
    id                   INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id               TEXT NOT NULL,
    created_at           TEXT NOT NULL,
    scenario             TEXT NOT NULL,
    variant              TEXT NOT NULL,
    peak_allocated_bytes INTEGER,
    peak_reserved_bytes  INTEGER,
    status               TEXT NOT NULL,
    passed               INTEGER,
    duration_s           REAL,
    git_commit           TEXT,
    device               TEXT,
    allocator            TEXT,
    source               TEXT NOT NULL,
    scenario_path        TEXT,
    UNIQUE (run_id, variant)
);
CREATE INDEX IF NOT EXISTS variant_runs_by_scenario ON variant_runs (scenario, created_at, id);
"""


def db_path(runs_dir: str | os.PathLike) -> Path:
    """Where the history of a runs directory lives."""
    return Path(runs_dir) / DB_NAME


def append(
    runs_dir: str | os.PathLike,
    report: Mapping[str, Any],
    *,
    source: str = "run",
    passed: Mapping[str, bool] | None = None,
) -> int:
    """Record each variant of a report (docs/report-format.md); returns the rows added.

    source: what produced it ("run", "check", "web", ...). passed: variant name -> verdict, when
    the caller judged more than the report's own expectations (check adds budgets against a
    baseline); otherwise a variant passed when all its expectations did.
    Appending the same report twice adds nothing the second time (rows are keyed by run id and
    variant). The git commit is the report's, else `git rev-parse HEAD` of the current directory.
    """
    rows = _rows(report, source=source, passed=passed)
    if not rows:
        return 0
    Path(runs_dir).mkdir(parents=True, exist_ok=True)
    with closing(_connect(db_path(runs_dir))) as conn:
        _ensure_schema(conn)
        conn.execute("BEGIN IMMEDIATE")
        try:
            before = conn.total_changes
            conn.executemany(
                f"INSERT OR IGNORE INTO variant_runs ({', '.join(COLUMNS)}) "
                f"VALUES ({', '.join('?' * len(COLUMNS))})",
                [tuple(row[c] for c in COLUMNS) for row in rows],
            )
            added = conn.total_changes - before
            conn.execute("COMMIT")
        except BaseException as exc:
            _rollback(conn)
            if isinstance(exc, sqlite3.Error):
                raise _plain_error(exc) from None
            raise
    return added


def _rollback(conn: sqlite3.Connection) -> None:
    """Roll back what is open, never hiding the error that got us here: SQLite ends the
    transaction itself on a full disk, and a second error ("cannot rollback - no transaction is
    active") would replace the real one."""
    if conn.in_transaction:
        try:
            conn.execute("ROLLBACK")
        except sqlite3.Error:
            pass


def _plain_error(exc: sqlite3.Error) -> sqlite3.Error:
    """SQLite's error with the operating system's words where SQLite has its own."""
    text = str(exc)
    if "disk is full" in text or "disk I/O error" in text and _disk_full(exc):
        return type(exc)("no space left on device (SQLite: " + text + ")")
    if "readonly database" in text or "read-only" in text:
        return type(exc)("the history database is read-only (SQLite: " + text + ")")
    return exc


def _disk_full(exc: sqlite3.Error) -> bool:
    return getattr(exc, "sqlite_errorcode", None) == 13  # SQLITE_FULL


def query(
    runs_dir: str | os.PathLike,
    scenario: str | None = None,
    *,
    variant: str | None = None,
    limit: int | None = None,
) -> list[dict[str, Any]]:
    """Recorded variant runs, oldest first (newest last), optionally of one scenario / variant.

    Each row is a dict with the keys in COLUMNS: run_id, created_at, scenario, variant,
    peak_allocated_bytes, peak_reserved_bytes, status (ok | error | oom), passed (bool or None),
    duration_s, git_commit, device, allocator, source, scenario_path.
    limit: keep only the newest `limit` rows. A runs directory without history gives [] (and no
    file is created).
    """
    path = db_path(runs_dir)
    if not path.is_file():
        return []
    where, args = [], []
    if scenario is not None:
        where.append("scenario = ?")
        args.append(scenario)
    if variant is not None:
        where.append("variant = ?")
        args.append(variant)
    sql = f"SELECT {', '.join(COLUMNS)} FROM variant_runs"
    if where:
        sql += " WHERE " + " AND ".join(where)
    sql += " ORDER BY created_at DESC, id DESC"
    if limit is not None:
        sql += " LIMIT ?"
        args.append(max(0, int(limit)))
    try:
        fetched = _read(path, lambda conn: conn.execute(sql, args).fetchall())
    except sqlite3.OperationalError as exc:
        if "no such table" in str(exc):  # created by a writer that has not committed yet
            return []
        raise
    rows = [dict(zip(COLUMNS, r, strict=True)) for r in reversed(fetched)]
    for row in rows:
        if row["passed"] is not None:
            row["passed"] = bool(row["passed"])
    return rows


def scenarios(runs_dir: str | os.PathLike) -> list[str]:
    """Names of the scenarios with recorded runs, sorted."""
    path = db_path(runs_dir)
    if not path.is_file():
        return []
    sql = "SELECT DISTINCT scenario FROM variant_runs ORDER BY scenario"
    try:
        return [r[0] for r in _read(path, lambda conn: conn.execute(sql).fetchall())]
    except sqlite3.OperationalError as exc:
        if "no such table" in str(exc):
            return []
        raise


# --- internals --------------------------------------------------------------------------------


def _connect(path: Path) -> sqlite3.Connection:
    # isolation_level=None: we issue BEGIN/COMMIT ourselves, so the write lock is taken up front
    # (BEGIN IMMEDIATE) and a waiting writer sleeps in the busy handler instead of deadlocking.
    conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
    conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
    return conn


def _read(path: Path, fetch):
    """Run a read; on read-only media (where SQLite cannot make the WAL's shared-memory file)
    read the database as an immutable file instead."""
    try:
        with closing(_connect(path)) as conn:
            return fetch(conn)
    except sqlite3.OperationalError as exc:
        if "no such table" in str(exc) or os.access(path.parent, os.W_OK) and _writable_fs(path):
            raise
    uri = f"{path.resolve().as_uri()}?mode=ro&immutable=1"
    with closing(sqlite3.connect(uri, uri=True, timeout=BUSY_TIMEOUT_S)) as conn:
        return fetch(conn)


def _writable_fs(path: Path) -> bool:
    """Whether the file system holding `path` is mounted read-write."""
    try:
        return not os.statvfs(path.parent).f_flag & os.ST_RDONLY
    except (OSError, AttributeError):
        return True


def _ensure_schema(conn: sqlite3.Connection) -> None:
    """WAL mode and the table, once per database (user_version marks it done)."""
    # Switching to WAL needs a moment of exclusive access; while another process is creating the
    # file SQLite can answer "locked" without consulting the busy handler, so retry for a while.
    deadline = time.monotonic() + BUSY_TIMEOUT_S
    while True:
        try:
            if conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION:
                return
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("BEGIN IMMEDIATE")
            break
        except sqlite3.OperationalError as exc:
            transient = "locked" in str(exc) or "busy" in str(exc)
            if not transient or time.monotonic() > deadline:
                raise _plain_error(exc) from None
            time.sleep(0.01)
    try:
        # One statement at a time: executescript() would commit the transaction first.
        for statement in filter(str.strip, _SCHEMA.split(";")):
            conn.execute(statement)
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        conn.execute("COMMIT")
    except BaseException as exc:
        _rollback(conn)
        if isinstance(exc, sqlite3.Error):
            raise _plain_error(exc) from None
        raise


def _rows(
    report: Mapping[str, Any], *, source: str, passed: Mapping[str, bool] | None
) -> list[dict[str, Any]]:
    scenario = report.get("scenario") or {}
    env = report.get("environment") or {}
    commit = env.get("git_commit") or git_commit()
    rows = []
    for v in report.get("variants") or []:
        if not isinstance(v, Mapping) or not isinstance(v.get("name"), str):
            continue
        verdict = (passed or {}).get(v["name"])
        if verdict is None:
            verdict = all(e.get("passed") for e in v.get("expectations") or [])
        rows.append(
            {
                "run_id": report["run_id"],
                "created_at": report["created_at"],
                "scenario": scenario.get("name"),
                "variant": v["name"],
                "peak_allocated_bytes": _int64(v.get("peak_allocated_bytes")),
                "peak_reserved_bytes": _int64(v.get("peak_reserved_bytes")),
                "status": str(v.get("status", "ok")),
                "passed": int(bool(verdict)),
                "duration_s": _number(v.get("duration_s")),
                "git_commit": commit,
                "device": v.get("device") or env.get("device"),
                "allocator": v.get("allocator") or env.get("allocator"),
                "source": source,
                "scenario_path": scenario.get("path"),
            }
        )
    return rows


def _int64(value: Any) -> int | None:
    """An integer SQLite can store (a byte count past 64 bits, from a meta run, is left out)."""
    if isinstance(value, int) and not isinstance(value, bool) and -(2**63) <= value < 2**63:
        return value
    return None


def _number(value: Any) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value) if abs(float(value)) < float("inf") else None
    return None


def git_commit(cwd: str | os.PathLike | None = None) -> str | None:
    """`git rev-parse HEAD` in `cwd` (default: the current directory), or None outside a checkout
    or without git."""
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    commit = out.stdout.strip()
    return commit if out.returncode == 0 and commit else None
