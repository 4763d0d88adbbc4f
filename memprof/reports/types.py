"""The report (docs/report-format.md) as static types: TypedDicts a type checker reads, for the
code that builds, saves, judges and shows reports, instead of `dict[str, Any]`.

They mirror memprof/schemas/report.schema.json (generated from reports/schema.py): a key the
schema requires is required here, a key it leaves optional is `NotRequired`, and
tests/memprof/test_report_types.py checks every TypedDict against the schema, so the two cannot
drift. `SCHEMA_DEFS` names, for each TypedDict, its definition in the schema; readers that
validate reports read back (memprof/reports/store.py) can use it to name a bad field.
"""

from typing import Any, Literal, NotRequired, TypedDict

from memprof.reports.vocab import Category, Phase  # one list of categories and phases

Status = Literal["ok", "error", "oom"]


class Tool(TypedDict):
    name: Literal["memprof"]
    version: str


class ScenarioRef(TypedDict):
    name: str
    description: NotRequired[str]
    path: str
    sha256: str
    warnings: NotRequired[list[str]]


class Environment(TypedDict):
    device: str
    backend: str
    allocator: str
    python: str
    numpy: str | None
    cupy: str | None
    platform: str
    git_commit: str | None


class Error(TypedDict):
    type: str
    message: str
    node: str | None


class Timeline(TypedDict):
    """Columnar: one entry per allocator event in every column."""

    seq: list[int]
    time_s: list[float]
    action: list[Literal["alloc", "free", "oom"]]
    bytes: list[int]
    requested: list[int]
    allocated: list[int]
    reserved: list[int]
    node: list[str | None]
    op: list[str | None]
    phase: list[Phase | None]
    category: list[Category]
    tensor: list[str | None]
    iteration: list[int | None]
    storage: list[int]


class PhaseSpan(TypedDict):
    name: Phase
    iteration: int | None
    start_index: int
    end_index: int
    start_s: float
    end_s: float


class LiveTensor(TypedDict):
    tensor: str | None
    bytes: int
    category: Category
    node: str | None
    op: str | None
    phase: NotRequired[Phase | None]
    iteration: NotRequired[int | None]


class Peak(TypedDict):
    event_index: int | None
    allocated_bytes: int
    reserved_bytes: int
    live: list[LiveTensor]
    by_category: dict[str, int]


class OpRow(TypedDict):
    node: str
    op: str | None
    phase: Phase
    iteration: int
    allocated_bytes: int
    freed_bytes: int
    peak_bytes: int
    duration_s: float
    inplace: bool
    inplace_cost: Literal["free", "clone"] | None
    clone_bytes: int
    module: NotRequired[str | None]
    start_s: NotRequired[float | None]


class WarningEntry(TypedDict):
    kind: Literal["stale_read", "inplace_clone", "other"]
    node: str | None
    other_node: str | None
    tensor: str | None
    iteration: NotRequired[int | None]
    message: str
    bytes: NotRequired[int]  # inplace_clone: the clone's bytes (beyond the schema)


class ExpectationRow(TypedDict):
    metric: str
    op: str
    expected: Any
    actual: Any
    passed: bool
    message: str


class Variant(TypedDict):
    name: str
    params: dict[str, Any]
    status: Status
    error: Error | None
    device: str
    allocator: str
    peak_allocated_bytes: int
    peak_reserved_bytes: int
    baseline_bytes: int
    final_allocated_bytes: int
    num_allocs: int
    num_frees: int
    num_ooms: NotRequired[int]
    iterations: NotRequired[int]
    duration_s: float
    program_duration_s: NotRequired[float]
    timeline: Timeline
    phases: list[PhaseSpan]
    peak: Peak
    ops: list[OpRow]
    warnings: list[WarningEntry]
    expectations: list[ExpectationRow]
    # cuda only, beyond the schema: CuPy's own temporaries and the real pool
    backend_external: NotRequired[dict[str, Any]]
    cupy_pool: NotRequired[dict[str, Any]]


class ComparisonRow(TypedDict):
    variant: str
    status: NotRequired[Status | None]
    is_baseline: NotRequired[bool]
    compared_with: NotRequired[str | None]
    reference_status: NotRequired[Status | None]
    reference_peak_bytes: NotRequired[int | None]
    peak_allocated_bytes: int
    delta_bytes: int
    ratio: float | None
    saving_pct: float | None
    peak_reserved_bytes: NotRequired[int | None]
    reserved_delta_bytes: NotRequired[int | None]
    duration_s: float
    program_duration_s: NotRequired[float | None]
    program_duration_ratio: NotRequired[float | None]


class Comparison(TypedDict):
    baseline: str | None
    rows: list[ComparisonRow]


class Report(TypedDict):
    """One run of one scenario: every variant, and the comparison."""

    schema_version: Literal[2]
    tool: Tool
    run_id: str
    created_at: str
    scenario: ScenarioRef
    environment: Environment
    status: Literal["ok", "failed", "expectation_failed"]
    baseline_variant: str | None
    variants: list[Variant]
    comparison: Comparison


# Each TypedDict and its definition in report.schema.json (None: the schema's top level).
SCHEMA_DEFS: dict[type, str | None] = {
    Report: None,
    Tool: "Tool",
    ScenarioRef: "ScenarioRef",
    Environment: "Environment",
    Error: "Error",
    Timeline: "Timeline",
    PhaseSpan: "PhaseSpan",
    LiveTensor: "LiveTensor",
    Peak: "Peak",
    OpRow: "OpRow",
    WarningEntry: "Warning_",
    ExpectationRow: "ExpectationRow",
    Variant: "Variant",
    ComparisonRow: "ComparisonRow",
    Comparison: "Comparison",
}

# Keys a TypedDict has beyond the schema (the schema allows extra fields).
BEYOND_SCHEMA: dict[type, frozenset[str]] = {
    Variant: frozenset({"backend_external", "cupy_pool"}),
    WarningEntry: frozenset({"bytes"}),
}

__all__ = [
    "BEYOND_SCHEMA",
    "SCHEMA_DEFS",
    "Comparison",
    "ComparisonRow",
    "Environment",
    "Error",
    "ExpectationRow",
    "LiveTensor",
    "OpRow",
    "Peak",
    "PhaseSpan",
    "Report",
    "ScenarioRef",
    "Timeline",
    "Tool",
    "Variant",
    "WarningEntry",
]
