"""/api/jobs: scenario runs started with POST /api/runs, their status and progress."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException

from web.deps import JobsDep
from web.models import JobInfo, Message

router = APIRouter(prefix="/api/jobs", tags=["jobs"])


@router.get("", response_model=list[JobInfo])
def list_jobs(jobs: JobsDep) -> list[dict]:
    """Jobs of this server, newest first (finished ones are kept for a while)."""
    return jobs.list()


@router.get("/{job_id}", response_model=JobInfo, responses={404: {"model": Message}})
def get_job(job_id: str, jobs: JobsDep) -> dict:
    """One job: queued, running (with progress), done (with run_id) or failed (with error)."""
    job = jobs.get(job_id)
    if job is None:
        raise HTTPException(404, f"no job {job_id!r}")
    return job
