"""Find scenario files in a directory and read their names and descriptions (without checking)."""

from __future__ import annotations

import os
from pathlib import Path

from memprof.scenario.loader import ScenarioYAMLError, load_yaml

SUFFIXES = (".yaml", ".yml")


def discover(directory: str | os.PathLike = "scenarios") -> list[tuple[Path, str, str]]:
    """`(path, name, description)` of every scenario file under `directory`, sorted by path.

    A file that is not a readable scenario still appears, named by its stem, with a description
    saying what is wrong, so `memprof list` shows everything it found.
    """
    root = Path(directory)
    if not root.is_dir():
        return []
    found = []
    for path in sorted(p for p in root.rglob("*") if p.suffix in SUFFIXES and p.is_file()):
        found.append((path, *_name_and_description(path)))
    return found


def _name_and_description(path: Path) -> tuple[str, str]:
    try:
        text = path.read_text(encoding="utf-8")
        data = load_yaml(text, str(path)).data
    except ScenarioYAMLError as exc:
        return path.stem, f"(invalid YAML: {exc.problem})"
    except (OSError, UnicodeDecodeError) as exc:
        return path.stem, f"(unreadable: {exc})"
    if not isinstance(data, dict):
        return path.stem, "(not a scenario: expected a mapping)"
    name = data.get("name")
    description = data.get("description") or ""
    return (str(name) if name else path.stem), str(description).strip()
