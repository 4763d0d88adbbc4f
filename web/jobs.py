"""Scenario runs started from the dashboard, one at a time on a background thread.

A job goes queued -> running -> done (its report saved in the runs directory, `run_id` set) or
failed (`error` set). While it runs, the runner's progress callback updates `progress` and
`fraction`; finished jobs stay readable until `keep` newer ones push them out.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import queue
import threading
import uuid
from collections import OrderedDict
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from memprof.errors import MemprofError
from memprof.reports.record import record_run

log = logging.getLogger("memprof.web.jobs")


class QueueFull(Exception):
    """Too many jobs are already waiting."""


@dataclass
class Job:
    id: str
    scenario: str  # path relative to the scenarios folder
    scenario_name: str
    variants: list[str] | None = None
    device: str | None = None
    allocator: str | None = None
    status: str = "queued"  # queued | running | done | failed
    fraction: float = 0.0
    message: str = "waiting for the runner"
    progress: dict[str, Any] = field(default_factory=dict)
    run_id: str | None = None
    error: str | None = None
    created_at: str = field(default_factory=lambda: _now())
    started_at: str | None = None
    finished_at: str | None = None
    path: Path | None = field(default=None, repr=False)

    def public(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("path")
        return data


class JobManager:
    """Queue scenario runs and run them in order on one daemon thread (Ctrl-C never waits)."""

    def __init__(
        self,
        runs_dir: str | Path,
        *,
        keep: int = 100,
        max_queued: int = 16,
        real_devices: bool = False,
        memory_limit: int | None = None,
        scenarios_dir: str | Path | None = None,
    ):
        """real_devices: whether jobs may run on cpu / cuda (else every job runs on meta, which
        measures without computing). memory_limit: bytes a job on a real device may allocate
        (default: MEMORY_FRACTION of the machine's memory); a scenario's own lower limit wins."""
        self.runs_dir = Path(runs_dir)
        self.real_devices = real_devices
        self.memory_limit = memory_limit if memory_limit is not None else default_memory_limit()
        self._hide = [  # absolute paths job messages must not show, and what shows instead
            (str(Path(d).resolve()), label)
            for d, label in ((scenarios_dir, "<scenarios>"), (runs_dir, "<runs>"))
            if d is not None
        ]
        self._keep = keep
        self._max_queued = max_queued
        self._jobs: OrderedDict[str, Job] = OrderedDict()
        self._lock = threading.Lock()
        self._queue: queue.Queue[Job] = queue.Queue()
        self._worker: threading.Thread | None = None

    def submit(
        self,
        path: Path,
        scenario_id: str,
        scenario_name: str,
        *,
        variants: list[str] | None = None,
        device: str | None = None,
        allocator: str | None = None,
    ) -> dict[str, Any]:
        """Queue a run of the scenario file at `path`; returns the job's public fields."""
        with self._lock:
            waiting = sum(1 for j in self._jobs.values() if j.status == "queued")
            if waiting >= self._max_queued:
                raise QueueFull(f"{waiting} runs are already waiting; try again later")
            job = Job(
                id=uuid.uuid4().hex[:12],
                scenario=scenario_id,
                scenario_name=scenario_name,
                variants=variants,
                device=device,
                allocator=allocator,
                path=path,
            )
            self._jobs[job.id] = job
            self._forget_old()
            if self._worker is None or not self._worker.is_alive():
                self._worker = threading.Thread(target=self._work, name="memprof-jobs", daemon=True)
                self._worker.start()
            snapshot = job.public()
        self._queue.put(job)
        return snapshot

    def get(self, job_id: str) -> dict[str, Any] | None:
        with self._lock:
            job = self._jobs.get(job_id)
            return job.public() if job else None

    def list(self) -> list[dict[str, Any]]:
        """All remembered jobs, newest first."""
        with self._lock:
            return [j.public() for j in reversed(self._jobs.values())]

    def _forget_old(self) -> None:
        finished = [j.id for j in self._jobs.values() if j.status in ("done", "failed")]
        for job_id in finished[: max(0, len(self._jobs) - self._keep)]:
            del self._jobs[job_id]

    def _work(self) -> None:
        while True:
            job = self._queue.get()
            try:
                self._run(job)
            finally:
                self._queue.task_done()

    def _run(self, job: Job) -> None:
        self._update(job, status="running", started_at=_now(), message="starting")
        try:
            from memprof.runner import run_loaded
            from memprof.scenario import load_scenario

            device = job.device or (None if self.real_devices else "meta")
            loaded = load_scenario(
                job.path, variants=job.variants, device=device, allocator=job.allocator
            )
            self._confine(loaded)
            report = run_loaded(loaded, progress=lambda event: self._on_progress(job, event))
            recorded = record_run(self.runs_dir, report, source="web")
        except MemprofError as exc:
            self._fail(job, self._public(str(exc), job))
        except Exception as exc:  # the job reports it; the server keeps serving
            log.exception("scenario run %s failed", job.scenario)
            self._fail(job, self._public(f"{type(exc).__name__}: {exc}", job))
        else:
            if recorded.path is None:  # no report to show on a run page
                log.error("%s", recorded.problem)
                self._fail(job, self._public(recorded.problem or "cannot save the report", job))
                return
            if not recorded.ok:
                log.error("%s", recorded.problem)
            self._update(
                job,
                status="done",
                fraction=1.0,
                run_id=report["run_id"],
                message=f"finished: run {report['run_id']} ({report.get('status', 'ok')})"
                + ("" if recorded.ok else f"; {self._public(recorded.problem, job)}"),
                finished_at=_now(),
            )

    def _confine(self, loaded) -> None:
        """Refuse a real device unless allowed; put every variant on a real device under the
        job memory limit (the scenario's own limit when lower)."""
        from memprof.errors import InvalidInput

        for v in getattr(loaded, "variants", None) or []:
            spec = getattr(v, "spec", None)
            if spec is None or spec.device == "meta":
                continue
            if not self.real_devices:
                raise InvalidInput(
                    f"variant {v.name} runs on {spec.device}: this dashboard runs scenarios on "
                    "the meta device only (start it with `memprof serve --real-devices`)"
                )
            if self.memory_limit is not None:
                limit = min(spec.memory_limit or self.memory_limit, self.memory_limit)
                if hasattr(spec, "model_copy"):  # a YAML scenario's pydantic spec
                    v.spec = spec.model_copy(update={"memory_limit": limit})
                else:  # a Python scenario's dataclass spec
                    v.spec = dataclasses.replace(spec, memory_limit=limit)

    def _public(self, message: str, job: Job) -> str:
        """A job message without the server's absolute paths."""
        if job.path is not None:
            message = message.replace(str(job.path), job.scenario)
        for absolute, label in self._hide:
            message = message.replace(absolute + "/", "").replace(absolute, label)
        return message

    def _on_progress(self, job: Job, event: dict[str, Any]) -> None:
        from memprof.runner import progress_fraction

        total = max(int(event.get("total") or 1), 1)
        index = int(event.get("index") or 0)
        stage = event.get("stage")
        name = event.get("variant", "?")
        where = ""
        if stage in ("node", "iteration"):
            n = int(event.get("iterations") or 1)
            where = f", iteration {min(int(event.get('iteration') or 0) + 1, n)} of {n}"
        self._update(
            job,
            progress=dict(event),
            fraction=progress_fraction(event),
            message=f"variant {name} ({index + 1} of {total}) "
            f"{'done' if stage == 'done' else 'running'}{where}",
        )

    def _fail(self, job: Job, error: str) -> None:
        self._update(job, status="failed", error=error, message="failed", finished_at=_now())

    def _update(self, job: Job, **fields: Any) -> None:
        with self._lock:
            for key, value in fields.items():
                setattr(job, key, value)


MEMORY_FRACTION = 0.5


def default_memory_limit() -> int | None:
    """MEMORY_FRACTION of the machine's physical memory, or None where it cannot be read."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None
    return int(total * MEMORY_FRACTION) if total > 0 else None


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
