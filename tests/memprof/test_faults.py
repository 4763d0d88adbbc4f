"""Faults (issue 14): the operating system refusing memory, a full disk, a read-only disk and a
writer killed mid-write. Each is made for real in a subprocess: RLIMIT_AS for memory, a small
tmpfs in a private mount namespace (`unshare`, Linux; skipped where it is not allowed) for the
disks, SIGKILL for the writer."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from memprof import history
from memprof.reports.store import MIN_ORPHAN_AGE_S, clean_orphans, save_report
from tests.memprof.report_factory import report as make_report

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "OPENBLAS_NUM_THREADS": "1"}


def python(code: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        capture_output=True,
        text=True,
        env=ENV,
        timeout=timeout,
    )


# --- the system refuses memory ----------------------------------------------------------------


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs /proc (Linux)")
def test_a_memory_error_from_the_system_is_an_oom_event_and_leaves_the_peak(tmp_path):
    """Under an address-space cap 500 MiB above what the process uses, an 800 MiB result is
    refused by the system: the variant is oom, one oom event, and the peak is the 200 MiB the
    program held (the refused bytes were counted into it before)."""
    (tmp_path / "s.yaml").write_text(
        "name: oom-system\ninputs:\n  x: {shape: [50, 1024, 1024], init: zeros}\n"
        "program:\n  - {id: y, op: cat, in: [x, x, x, x]}\n"
    )
    proc = python(
        """
        import json, resource, sys
        from memprof.runner import run_scenario
        import engine, numpy  # imported before measuring what the process maps
        vm = next(int(l.split()[1]) * 1024 for l in open("/proc/self/status")
                  if l.startswith("VmSize:"))
        cap = vm + 500 * 2**20
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
        report = run_scenario(sys.argv[1])
        print(json.dumps(report["variants"][0], default=str))
        """,
        str(tmp_path / "s.yaml"),
    )
    assert proc.returncode == 0, proc.stderr
    v = json.loads(proc.stdout)
    assert v["status"] == "oom" and "the system refused 838860800 bytes" in v["error"]["message"]
    assert v["num_ooms"] == 1 and "oom" in v["timeline"]["action"]
    assert v["peak_allocated_bytes"] == 50 * 2**20 * 4  # the input only
    assert max(v["timeline"]["allocated"]) == 50 * 2**20 * 4


# --- disks ------------------------------------------------------------------------------------


def _private_tmpfs_allowed() -> bool:
    if not shutil.which("unshare") or sys.platform != "linux":
        return False
    probe = subprocess.run(
        ["unshare", "-rm", "sh", "-c", "mount -t tmpfs -o size=64k tmpfs /mnt"],
        capture_output=True,
    )
    return probe.returncode == 0


needs_tmpfs = pytest.mark.skipif(
    not _private_tmpfs_allowed(), reason="needs unshare and tmpfs mounts (Linux namespaces)"
)


def in_small_disk(tmp_path: Path, size: str, script: str) -> subprocess.CompletedProcess:
    """Run `script` (shell) with $DISK a fresh tmpfs of `size`, in a private mount namespace."""
    disk = tmp_path / "disk"
    disk.mkdir()
    return subprocess.run(
        ["unshare", "-rm", "sh", "-c", f"mount -t tmpfs -o size={size} tmpfs {disk} && {script}"],
        capture_output=True,
        text=True,
        env={**ENV, "DISK": str(disk)},
        timeout=120,
    )


SCENARIO = (
    "name: relu-small\ninputs:\n  x: {shape: [64, 64], init: rand}\n"
    "program:\n  - {id: r, op: relu, in: x}\n"
)


@needs_tmpfs
def test_a_full_disk_while_saving_says_no_space_left_and_leaves_no_tmp(tmp_path):
    (tmp_path / "s.yaml").write_text(SCENARIO)
    # fill the disk: the report cannot be written
    proc = in_small_disk(
        tmp_path,
        "256k",
        f"mkdir $DISK/runs && (head -c 1000000 /dev/zero > $DISK/fill 2>/dev/null || true) && "
        f"{sys.executable} -m memprof run -q {tmp_path / 's.yaml'} --runs $DISK/runs; "
        "echo rc=$?; ls -a $DISK/runs",
    )
    out = proc.stdout + proc.stderr
    assert "rc=2" in out, out
    assert "no space left on device" in out.lower()
    assert "cannot save run" in out
    assert "Traceback" not in out and ".tmp" not in out


@needs_tmpfs
def test_a_full_disk_in_the_history_says_no_space_left(tmp_path):
    report = make_report({"a": 1, "b": 2})
    (tmp_path / "r.json").write_text(json.dumps(report))
    code = f"""
import json, os, sqlite3, sys
from memprof import history
runs = os.environ["DISK"]
report = json.load(open({str(tmp_path / "r.json")!r}))
try:  # leave nothing for the database
    with open(os.path.join(runs, "fill"), "wb") as fh:
        while True:
            fh.write(b"x" * 4096)
            fh.flush()
except OSError:
    pass
try:
    history.append(runs, report)
except (sqlite3.Error, OSError) as exc:
    print("ERR", exc)
"""
    (tmp_path / "h.py").write_text(code)
    proc = in_small_disk(tmp_path, "128k", f"{sys.executable} {tmp_path / 'h.py'}")
    out = proc.stdout + proc.stderr
    assert "ERR" in out, out
    assert "no space left on device" in out.lower() or "disk is full" in out
    assert "cannot rollback" not in out and "Traceback" not in out


@needs_tmpfs
def test_a_history_on_read_only_media_can_still_be_read(tmp_path):
    report = make_report({"a": 1, "b": 2})
    (tmp_path / "r.json").write_text(json.dumps(report))
    code = f"""
import json, os
from memprof import history
report = json.load(open({str(tmp_path / "r.json")!r}))
print([r["variant"] for r in history.query(os.environ["DISK"])])
print(history.scenarios(os.environ["DISK"]))
"""
    (tmp_path / "q.py").write_text(code)
    write = (
        f"{sys.executable} -c 'import json, os; from memprof import history; "
        f'history.append(os.environ["DISK"], json.load(open("{tmp_path / "r.json"}")))\''
    )
    proc = in_small_disk(
        tmp_path,
        "4m",
        f"{write} && mount -o remount,ro $DISK && {sys.executable} {tmp_path / 'q.py'}",
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "['a', 'b']" in out and "['relu-block']" in out


# --- a writer killed mid-write ----------------------------------------------------------------


def test_a_killed_writers_tmp_file_is_cleaned_on_the_next_save(tmp_path):
    runs = tmp_path / "runs"
    runs.mkdir()
    proc = python(
        """
        import os, signal, sys
        from memprof.reports import store
        from tests.memprof.report_factory import report
        os.fsync = lambda fd: os.kill(os.getpid(), signal.SIGKILL)  # die mid-write
        store.save_report(report({"a": 1}), sys.argv[1])
        """,
        str(runs),
    )
    assert proc.returncode == -signal.SIGKILL
    [orphan] = [p for p in runs.iterdir()]
    assert orphan.name.startswith(".") and orphan.name.endswith(".tmp")
    time.sleep(MIN_ORPHAN_AGE_S + 0.1)
    save_report(make_report({"a": 1}), runs)
    assert [p.name for p in runs.iterdir()] == ["20260101T000000Z-relu-block-abcdef.json"]


def test_a_live_writers_tmp_file_is_left_alone(tmp_path):
    runs = tmp_path / "runs"
    runs.mkdir()
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(
                """
                import os, sys, time
                from memprof.reports import store
                from tests.memprof.report_factory import report
                def slow(fd):
                    print("writing", flush=True)
                    time.sleep(30)
                os.fsync = slow
                store.save_report(report({"a": 1}), sys.argv[1])
                """
            ),
            str(runs),
        ],
        env=ENV,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout.readline().strip() == "writing"
        time.sleep(MIN_ORPHAN_AGE_S + 0.1)
        assert clean_orphans(runs) == []
        assert len(list(runs.iterdir())) == 1
    finally:
        child.kill()
        child.wait()
    time.sleep(MIN_ORPHAN_AGE_S + 0.1)
    assert len(clean_orphans(runs)) == 1  # its writer is gone now


def test_history_failure_never_makes_the_run_look_unsaved(tmp_path):
    """A history database that cannot be written (here: a directory in its place): the report
    is saved and the message says so; "cannot save" is only for the report itself."""
    from typer.testing import CliRunner

    from memprof.cli.app import app

    runs = tmp_path / "runs"
    (runs / history.DB_NAME).mkdir(parents=True)
    (tmp_path / "s.yaml").write_text(SCENARIO)
    res = CliRunner().invoke(app, ["run", "-q", str(tmp_path / "s.yaml"), "--runs", str(runs)])
    assert "Traceback" not in res.output
    [saved] = runs.glob("*.json")
    assert f"saved run {saved.stem}, but cannot add it to the history" in res.output
    assert "cannot save run" not in res.output
