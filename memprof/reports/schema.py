"""The report format (docs/report-format.md) as pydantic models: the source of
memprof/schemas/report.schema.json. Reports are built as plain dicts (reports/build.py) and a
test validates them against this schema; `Report.model_validate(json)` reads one back typed.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from memprof.reports.vocab import Category, Phase


class _Model(BaseModel):
    model_config = ConfigDict(extra="allow")  # readers ignore fields they do not know


class Tool(_Model):
    name: Literal["memprof"]
    version: str


class ScenarioRef(_Model):
    name: str
    description: str = ""
    path: str
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    warnings: list[str] = Field(
        default_factory=list, description="`file:line:col: warning: ...` lines"
    )


class Environment(_Model):
    device: str
    backend: str = Field(description="numpy | cupy | meta")
    allocator: str = Field(description="exact | caching")
    python: str
    numpy: str | None
    cupy: str | None
    platform: str
    git_commit: str | None


class Error(_Model):
    type: str
    message: str
    node: str | None = Field(
        description="the node (or <inputs>, <params>, <backward>, <optimizer>) that failed"
    )


class Timeline(_Model):
    """Columnar: one entry per allocator event in every column, all the same length."""

    seq: list[int]
    time_s: list[float] = Field(description="seconds since the variant started")
    action: list[Literal["alloc", "free", "oom"]]
    bytes: list[int] = Field(description="bytes the allocator model charged (block size)")
    requested: list[int] = Field(description="bytes the tensor asked for")
    allocated: list[int] = Field(description="allocated bytes after the event")
    reserved: list[int] = Field(description="reserved bytes after the event")
    node: list[str | None] = Field(
        description="where the event happened: a node id, <inputs>, "
        "<params>, <backward>, <optimizer>, <release>"
    )
    op: list[str | None]
    phase: list[Phase | None]
    category: list[Category] = Field(description="what the storage is (for a free: what was freed)")
    tensor: list[str | None] = Field(
        description="scenario name of the storage, e.g. x, fc1.weight.grad"
    )
    iteration: list[int | None]
    storage: list[int] = Field(description="storage id: links a free to its alloc")


class PackedColumn(_Model):
    """One packed column (memprof/reports/packed.py): exactly one of `int` (64-bit integers,
    delta-coded, zlib, base64), `ns` (seconds as integer nanoseconds, packed as `int`),
    `labels` + `codes` (distinct values, and each entry's index into them packed as `int`), or
    `values` (a plain JSON list)."""

    int: str | None = None
    ns: str | None = None
    labels: list[Any] | None = None
    codes: str | None = None
    values: list[Any] | None = None


class PackedTable(_Model):
    """Equal-length columns, packed (docs/report-format.md, "Packed columns")."""

    packed: int = Field(ge=0, description="entries per column")
    columns: dict[str, PackedColumn]
    absent: dict[str, list[int]] | None = Field(
        None, description="rows only: for a key some rows lack, the indexes of those rows"
    )


class PhaseSpan(_Model):
    name: Phase
    iteration: int | None
    start_index: int = Field(description="first timeline index of the phase")
    end_index: int = Field(description="one past its last timeline index")
    start_s: float
    end_s: float


class LiveTensor(_Model):
    tensor: str | None
    bytes: int
    category: Category
    node: str | None
    op: str | None
    phase: Phase | None = None
    iteration: int | None = None


class Peak(_Model):
    event_index: int | None = Field(description="timeline index where allocated first peaked")
    allocated_bytes: int
    reserved_bytes: int
    live: list[LiveTensor] = Field(description="storages live at the peak, largest first")
    by_category: dict[str, int]


class OpRow(_Model):
    node: str
    op: str | None
    phase: Phase
    iteration: int
    allocated_bytes: int
    freed_bytes: int
    peak_bytes: int = Field(description="highest allocated total while the node ran")
    duration_s: float
    inplace: bool
    inplace_cost: Literal["free", "clone"] | None
    clone_bytes: int
    module: str | None = None
    start_s: float | None = Field(
        None,
        description="when the node started, in seconds since the "
        "variant started (as timeline.time_s)",
    )


class Warning_(_Model):
    kind: Literal["stale_read", "inplace_clone", "other"]
    node: str | None
    other_node: str | None
    tensor: str | None
    iteration: int | None = None
    message: str


class ExpectationRow(_Model):
    metric: str = Field(
        description="peak_allocated, peak_reserved, final_allocated, baseline, "
        "peak_over_baseline, status, error, values:NAME, warnings:KIND, "
        "inplace:NODE"
    )
    op: str
    expected: Any
    actual: Any
    passed: bool
    message: str


class Variant(_Model):
    name: str
    params: dict[str, Any]
    status: Literal["ok", "error", "oom"]
    error: Error | None
    device: str
    allocator: str
    peak_allocated_bytes: int
    peak_reserved_bytes: int
    baseline_bytes: int = Field(description="inputs and parameters live before the program starts")
    final_allocated_bytes: int
    num_allocs: int
    num_frees: int
    num_ooms: int = 0
    iterations: int = 1
    duration_s: float = Field(description="setup and all iterations")
    program_duration_s: float = Field(0.0, description="the iterations only (no setup)")
    timeline: Timeline | PackedTable = Field(
        description="columnar; saved packed (schema_version 2), read back as lists"
    )
    phases: list[PhaseSpan]
    peak: Peak
    ops: list[OpRow] | PackedTable = Field(description="saved packed, read back as a list")
    warnings: list[Warning_]
    expectations: list[ExpectationRow]


class ComparisonRow(_Model):
    variant: str
    status: Literal["ok", "error", "oom"] | None = None
    is_baseline: bool = False
    compared_with: str | None = Field(
        None,
        description="the variant this one is compared with: the one differing only in the "
        "in-place parameters, else the baseline; null for a variant compared with none",
    )
    reference_status: Literal["ok", "error", "oom"] | None = None
    reference_peak_bytes: int | None = None
    peak_allocated_bytes: int
    delta_bytes: int
    ratio: float | None
    saving_pct: float | None
    peak_reserved_bytes: int | None = None
    reserved_delta_bytes: int | None = None
    duration_s: float
    program_duration_s: float | None = None
    program_duration_ratio: float | None = None


class Comparison(_Model):
    baseline: str | None
    rows: list[ComparisonRow]


class Report(_Model):
    """One run of one scenario: every variant, and the comparison against the baseline variant."""

    schema_version: Literal[1, 2] = Field(
        description="2: timeline and ops may be packed tables; 1: plain lists only"
    )
    tool: Tool
    run_id: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,200}$")
    created_at: str
    scenario: ScenarioRef
    environment: Environment
    status: Literal["ok", "failed", "expectation_failed"]
    baseline_variant: str | None
    variants: list[Variant]
    comparison: Comparison


def report_json_schema() -> dict:
    schema = Report.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = "https://memprof.dev/schemas/report.schema.json"
    return schema
