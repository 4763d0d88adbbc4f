"""The advice format (`memprof advise --json`, docs/report-format.md "Advice") as pydantic models:
the source of memprof/schemas/advice.schema.json (`python -m memprof.schemas` regenerates it)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Candidate(_Model):
    node: str = Field(description="the program node's id")
    op: str = Field(description="the op (relu, add, ...) or the module's type (ReLU, Dropout, ...)")
    verdict: Literal["safe", "unsafe"]
    reason: str = Field(
        description="starts with its kind (stale read:, saved for backward:, leaf:, input:, "
        "shape or dtype:, refuted by the re-run:) and names the nodes involved"
    )
    involves: list[str] = Field(description="ids of the nodes the reason names")
    clone_bytes: int = Field(
        ge=0, description="bytes autograd clones for backward when the node runs in place"
    )
    saving_bytes: int = Field(
        description="peak allocated of the original run minus the re-run with this node alone in "
        "place (0 unless safe and proven; negative when it costs)"
    )
    reserved_saving_bytes: int = Field(description="the same for peak reserved")
    proven: bool = Field(
        description="a re-run confirmed the verdict: safe, every value bitwise equal; unsafe, "
        "the re-run failed or differed"
    )
    kind: Literal[
        "safe",
        "stale read",
        "saved for backward",
        "leaf",
        "input",
        "shape or dtype",
        "refuted by the re-run",
    ]


class Budget(_Model):
    bytes: int = Field(ge=0)
    met: bool
    nodes: list[str] = Field(description="the fewest safe nodes switched for the budget")
    peak: int = Field(ge=0, description="peak allocated with those nodes in place")
    message: str


class Together(_Model):
    """A safe lever re-run with the `switched` nodes in place as well: what `--write` writes."""

    verdict: Literal["safe", "unsafe"]
    reason: str = Field(description="for unsafe, starts with 'refuted by the re-run:'")
    peak_after: int = Field(ge=0, description="peak allocated of that re-run")
    peak_reserved_after: int = Field(ge=0, description="peak reserved of that re-run")


class Lever(_Model):
    """A change of the program other than in place, re-run and proven as a candidate is."""

    lever: Literal["optimizer_in_backward"] = Field(
        description="optimizer_in_backward: every optimizer phase stepped in backward, one "
        "optimizer per parameter in its post-accumulate-grad hook"
    )
    setting: str = Field(description="what to write in the scenario for it")
    verdict: Literal["safe", "unsafe"]
    reason: str = Field(description="why; for unsafe, starts with 'refuted by the re-run:'")
    saving_bytes: int = Field(
        description="peak allocated of the original run minus the re-run with the lever alone "
        "(0 when unsafe; negative when it costs)"
    )
    reserved_saving_bytes: int = Field(description="the same for peak reserved")
    peak_after: int = Field(ge=0, description="peak allocated of the re-run")
    proven: bool = Field(
        description="always true: the re-run (values bitwise, gradients aside: the lever frees "
        "them) decided the verdict"
    )
    together: Together | None = Field(
        description="the lever with the `switched` nodes in place too, re-run and compared the "
        "same way; null when unsafe or when no node is switched. `--write` puts the lever into "
        "variant `advised` when it is safe and this is null or safe"
    )


class Advice(_Model):
    """`memprof advise --json FILE`."""

    scenario: str
    variant: str
    peak_before: int = Field(ge=0, description="peak allocated bytes of the variant as written")
    peak_after: int = Field(
        ge=0, description="peak allocated bytes with the `switched` nodes in place (re-measured)"
    )
    candidates: list[Candidate]
    path: str
    device: str
    proof: Literal["bitwise", "versions"] = Field(
        description="bitwise: values compared; versions: on meta, version counters and stale "
        "reads only"
    )
    peak_reserved_before: int = Field(ge=0)
    peak_reserved_after: int = Field(ge=0)
    switched: list[str] = Field(description="the nodes in place for peak_after, in program order")
    budget: Budget | None
    levers: list[Lever] = Field(
        default_factory=list,
        description="other changes re-run and proven (YAML scenarios with an optimizer phase "
        "and a backward: the optimizer stepped in backward); each measured alone",
    )
    runs: int = Field(ge=1, description="runs made: the recording and every re-run")
    duration_s: float = Field(ge=0)


def advice_json_schema() -> dict:
    schema = Advice.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = "https://memprof.dev/schemas/advice.schema.json"
    return schema
