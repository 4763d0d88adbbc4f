"""Request and response bodies of the JSON API (they make up /openapi.json)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from memprof.reports import schema

Name = Annotated[str, Field(min_length=1, max_length=200)]


class Message(BaseModel):
    detail: str


class VariantSummary(BaseModel):
    name: str
    status: str
    peak_allocated_bytes: int | None
    peak_reserved_bytes: int | None
    events: int
    warnings: int
    compared_with: str | None = Field(
        None, description="the variant its saving is against (memprof.reports.saving)"
    )
    saving_pct: float | None = Field(
        None, description="peak saved against compared_with, %; null when not comparable"
    )
    saving: str = Field("", description="the saving as every screen words it")


class RunSummary(BaseModel):
    run_id: str
    created_at: str | None
    scenario: str | None
    description: str | None
    status: str = Field(description="ok | failed | expectation_failed, or unreadable")
    baseline_variant: str | None
    variants: list[VariantSummary]
    warnings: int = Field(description="warnings of all variants together")
    best_saving_pct: float | None = Field(
        None, description="the largest saving of a variant against its reference, %"
    )
    error: str | None = Field(None, description="why the file could not be read")


class Sample(BaseModel):
    event_index: int
    time_s: float
    allocated_bytes: int
    reserved_bytes: int
    node: str | None
    op: str | None
    tensor: str | None


class TimelineSeries(BaseModel):
    """A reduced timeline: lists of one entry per kept event, plus where the peak is."""

    run_id: str
    variant: str
    total_events: int
    start: int = Field(description="first event index of the window")
    end: int = Field(description="last event index of the window (inclusive)")
    max_points: int
    reduced: bool = Field(description="whether events were dropped to fit max_points")
    peak: Sample = Field(description="the whole timeline's peak (first time it is reached)")
    window_peak: Sample = Field(description="the highest allocated sample inside the window")
    index: list[int]
    time_s: list[float]
    allocated: list[int]
    reserved: list[int]
    action: list[str | None]
    bytes: list[int]
    node: list[str | None]
    op: list[str | None]
    tensor: list[str | None]
    phase: list[str | None]
    category: list[str | None]
    categories: dict[str, list[int]] = Field(
        description="live bytes per category at each kept event (they stack to allocated)"
    )


class ScenarioInfo(BaseModel):
    id: str = Field(description="path relative to the scenarios folder; POST it to /api/runs")
    name: str
    description: str
    variants: list[str]
    error: str | None
    size_bytes: int


class RunRequest(BaseModel):
    """Run a scenario of the scenarios folder in the background."""

    model_config = ConfigDict(extra="forbid")
    scenario: Name = Field(description="its id (path relative to the scenarios folder) or name")
    variants: list[Name] | None = Field(None, max_length=64, description="default: all")
    device: Literal["cpu", "cuda", "meta", "auto"] | None = Field(
        None,
        description="default: meta, unless the server allows real devices (then the file's)",
    )
    allocator: Literal["exact", "caching"] | None = Field(None, description="default: the file's")


class JobInfo(BaseModel):
    id: str
    scenario: str
    scenario_name: str
    variants: list[str] | None
    device: str | None
    allocator: str | None
    status: Literal["queued", "running", "done", "failed"]
    fraction: float = Field(description="0 to 1")
    message: str
    progress: dict[str, Any] = Field(description="the runner's last progress event")
    run_id: str | None = Field(description="the saved run, once done")
    error: str | None
    created_at: str
    started_at: str | None
    finished_at: str | None


class HistoryRow(BaseModel):
    """One variant of one recorded run (memprof.history.query)."""

    run_id: str
    created_at: str
    scenario: str
    variant: str
    peak_allocated_bytes: int | None
    peak_reserved_bytes: int | None
    status: str = Field(description="ok | error | oom")
    passed: bool | None = Field(description="its expectations (and, from check, budgets) held")
    duration_s: float | None
    git_commit: str | None
    device: str | None
    allocator: str | None
    source: str = Field(description="what recorded it: run, check, web")
    scenario_path: str | None
    current: bool = Field(description="whether the row belongs to the run asked about")


class RunHistory(BaseModel):
    """Past runs of a run's scenario, oldest first."""

    run_id: str
    scenario: str | None
    recorded: bool = Field(description="whether the run itself is in the history")
    runs: int = Field(description="how many runs the rows come from")
    variants: list[str]
    rows: list[HistoryRow]


class _VariantMaybeTimeline(schema.Variant):
    timeline: schema.Timeline | None = Field(
        None, description="absent when the report was fetched with timeline=false"
    )


class RunReport(schema.Report):
    """A report (docs/report-format.md); with timeline=false its variants have no `timeline`."""

    variants: list[_VariantMaybeTimeline]
