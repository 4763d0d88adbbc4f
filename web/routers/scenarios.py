"""/api/scenarios: the scenario files the dashboard can run."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException

from web.deps import ScenariosDep
from web.models import Message, ScenarioInfo
from web.scenario_files import ScenarioFile

router = APIRouter(prefix="/api/scenarios", tags=["scenarios"])


def _info(s: ScenarioFile) -> dict:
    return {
        "id": s.id,
        "name": s.name,
        "description": s.description,
        "variants": list(s.variants),
        "error": s.error,
        "size_bytes": s.size,
    }


@router.get("", response_model=list[ScenarioInfo])
def list_scenarios(scenarios: ScenariosDep) -> list[dict]:
    """Every .yaml / .yml file under the scenarios folder, with its name and description."""
    return [_info(s) for s in scenarios.list()]


@router.get("/{scenario_id:path}", response_model=ScenarioInfo, responses={404: {"model": Message}})
def get_scenario(scenario_id: str, scenarios: ScenariosDep) -> dict:
    """One scenario, by its id (path relative to the folder) or its name."""
    scenario = scenarios.find(scenario_id)
    if scenario is None:
        raise HTTPException(404, f"no scenario {scenario_id!r} in the scenarios folder")
    return _info(scenario)
