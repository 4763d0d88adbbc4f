"""`memprof run --jobs N`: variants of many scenarios in worker processes give the same reports
as a serial run (everything but what is measured in time and the run id), the same exit code,
and the same failures."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from typer.testing import CliRunner

from memprof.cli.app import app

ROOT = Path(__file__).resolve().parents[2]
# what legitimately differs between two runs of the same variants: time and identity
TIMED = {
    "run_id",
    "created_at",
    "duration_s",
    "program_duration_s",
    "time_s",
    "start_s",
    "end_s",
    "program_duration_ratio",
}

BROKEN = """\
name: broken-variant
device: meta
memory_limit: $limit
inputs:
  x: {shape: [64, 64]}
program:
  - {id: y, op: relu, in: x}
variants:
  fits: {limit: 1 MiB}
  does_not: {limit: 20 KiB}
"""


def _differences(a, b, path="") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        out = [f"{path}/{k}: missing" for k in set(a) ^ set(b)]
        for k in set(a) & set(b):
            if k not in TIMED:
                out += _differences(a[k], b[k], f"{path}/{k}")
        return out
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{path}: {len(a)} vs {len(b)} items"]
        return [
            d
            for i, (x, y) in enumerate(zip(a, b, strict=True))
            for d in _differences(x, y, f"{path}[{i}]")
        ]
    return [] if a == b else [f"{path}: {a!r} vs {b!r}"]


def _run(tmp_path, folder, jobs, name):
    out = tmp_path / f"{name}.json"
    result = CliRunner().invoke(
        app,
        ["run", str(folder), "--device", "meta", "--jobs", str(jobs), "-q"]
        + ["--runs", str(tmp_path / f"runs-{name}"), "--json", str(out)],
    )
    return result, json.loads(out.read_text())


def test_parallel_reports_are_the_serial_reports(tmp_path):
    folder = tmp_path / "scenarios"
    folder.mkdir()
    for f in ("relu.yaml", "multi_branch.yaml", "activation_inplace.yaml"):
        shutil.copy(ROOT / "scenarios" / f, folder / f)
    (folder / "broken.yaml").write_text(BROKEN)
    serial, a = _run(tmp_path, folder, 1, "serial")
    parallel, b = _run(tmp_path, folder, 2, "parallel")
    assert serial.exit_code == parallel.exit_code == 1  # the failing variant, in both
    assert [r["scenario"]["name"] for r in a] == [r["scenario"]["name"] for r in b]
    assert _differences(a, b) == []
    [broken] = [r for r in b if r["scenario"]["name"] == "broken-variant"]
    assert [v["status"] for v in broken["variants"]] == ["ok", "oom"]
    assert "does_not" in parallel.output


DIES = """\
name: dies
device: meta
inputs:
  x: {shape: [64, 64]}
program:
  - {id: y, op: relu, in: x, inplace: $inplace}
variants:
  a: {inplace: false}
  die: {inplace: false}
  b: {inplace: true}
"""


def test_a_worker_that_dies_fails_its_own_variant_only(tmp_path):
    from memprof.runner.parallel import run_many
    from memprof.scenario import load_scenarios
    from tests.memprof._dying_worker import die_on_die

    (tmp_path / "dies.yaml").write_text(DIES)
    shutil.copy(ROOT / "scenarios" / "relu.yaml", tmp_path / "relu.yaml")
    loaded, problems = load_scenarios([tmp_path], device="meta")
    assert problems == []
    done = []
    reports = run_many(
        loaded, 2, device="meta", task=die_on_die, on_done=lambda i, n: done.append(n)
    )
    by_name = {r["scenario"]["name"]: r for r in reports}
    dies = {v["name"]: v for v in by_name["dies"]["variants"]}
    assert dies["die"]["status"] == "error"
    assert dies["die"]["error"]["type"] == "WorkerDied"
    assert "died before the variant finished" in dies["die"]["error"]["message"]
    assert dies["a"]["status"] == dies["b"]["status"] == "ok"
    assert dies["a"]["peak_allocated_bytes"] == 2 * 64 * 64 * 4
    assert dies["b"]["peak_allocated_bytes"] == 64 * 64 * 4
    assert [v["status"] for v in by_name["relu-block"]["variants"]] == ["ok", "ok"]
    assert sorted(done) == sorted(["a", "die", "b", "inplace", "out_of_place"])


def test_workers_start_before_validation_and_run_the_variants(tmp_path, monkeypatch):
    # given two scenarios and --jobs 2, then one pool of workers is started before the files
    # are validated (they import meanwhile), and the variants run in it: no second pool
    import memprof.cli._runcmd as runcmd
    from memprof.runner import parallel

    pools, order = [], []
    real_pool, real_load = parallel._pool, runcmd.load_scenarios

    def pool(workers, threads):
        pools.append(workers)
        order.append("pool")
        return real_pool(workers, threads)

    def load(*args, **kwargs):
        order.append("validate")
        return real_load(*args, **kwargs)

    monkeypatch.setattr(parallel, "_pool", pool)
    monkeypatch.setattr(runcmd, "load_scenarios", load)
    folder = tmp_path / "scenarios"
    folder.mkdir()
    for f in ("relu.yaml", "multi_branch.yaml"):
        shutil.copy(ROOT / "scenarios" / f, folder / f)
    result, reports = _run(tmp_path, folder, 2, "warm")
    assert result.exit_code == 0, result.output
    assert order == ["pool", "validate"] and pools == [2]
    assert [v["status"] for r in reports for v in r["variants"]] == ["ok"] * 4


def test_invalid_input_stops_the_started_workers(tmp_path):
    # given --jobs 2 and a folder with a bad file, then the command exits 2 naming the file,
    # and none of the workers it started outlives it
    import multiprocessing

    folder = tmp_path / "scenarios"
    folder.mkdir()
    shutil.copy(ROOT / "scenarios" / "relu.yaml", folder / "relu.yaml")
    (folder / "bad.yaml").write_text("name: bad\nprogram: [1, 2\n")
    before = set(multiprocessing.active_children())  # (other tests' processes, if any)
    result = CliRunner().invoke(
        app, ["run", str(folder), "--jobs", "2", "-q", "--runs", str(tmp_path / "runs")]
    )
    assert result.exit_code == 2
    assert "bad.yaml:3:1: YAML syntax error" in result.output
    assert set(multiprocessing.active_children()) - before == set()


def test_workers_that_cannot_start_leave_the_environment_as_it_was(monkeypatch):
    # given a pool that cannot start (no processes left, say), then entering Workers raises
    # and the thread variables it set for the workers are back as they were
    import os

    import pytest

    from memprof.runner import parallel

    def refuse(workers, threads):
        raise OSError("cannot start a process")

    monkeypatch.setattr(parallel, "_pool", refuse)
    monkeypatch.setenv("OMP_NUM_THREADS", "7")
    monkeypatch.delenv("OPENBLAS_NUM_THREADS", raising=False)
    with pytest.raises(OSError, match="cannot start"):
        with parallel.Workers(2):
            pass
    assert os.environ["OMP_NUM_THREADS"] == "7"
    assert "OPENBLAS_NUM_THREADS" not in os.environ
