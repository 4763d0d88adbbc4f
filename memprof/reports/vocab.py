"""The report's closed vocabularies: one list of storage categories and one of phases, shared by
the pydantic models (reports/schema.py), the TypedDicts (reports/types.py) and the builder
(reports/build.py), which imports them without building the models."""

from __future__ import annotations

from typing import Literal

Category = Literal[
    "input",
    "parameter",
    "activation",
    "gradient",
    "optimizer_state",
    "saved_for_backward",
    "temporary",
    "other",
]
Phase = Literal["setup", "forward", "backward", "optimizer", "release"]
