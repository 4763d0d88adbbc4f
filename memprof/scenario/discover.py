"""Find scenario files and read their names, descriptions and variants (without checking them).

Shared by `memprof list`, the commands that take directories (`run`, `validate`, `check`) and
the dashboard's scenarios folder (web/scenario_files.py).

>>> [(p.name, s.name, s.variants) for p, s in discover("scenarios")][:1]
[('alexnet_stem.yaml', 'alexnet-stem', ('inplace', 'out_of_place'))]
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from memprof.scenario.loader import ScenarioYAMLError, load_yaml

SUFFIXES = (".yaml", ".yml")
MAX_SCENARIO_BYTES = 1024 * 1024


@dataclass(frozen=True)
class ScenarioSummary:
    """What a listing shows of a scenario file. `error` says why the file could not be read."""

    name: str
    description: str = ""
    variants: tuple[str, ...] = ()
    error: str | None = None


def scenario_paths(directory: str | os.PathLike) -> list[Path]:
    """The scenario files (*.yaml, *.yml) under `directory`, recursively, sorted by path.

    Hidden files and folders (a name starting with ".") are skipped.
    """
    root = Path(directory)
    if not root.is_dir():
        return []
    from memprof.scenario.python_file import mentions_scenario

    return [
        path
        for path in sorted(root.rglob("*"))
        if (
            path.suffix.lower() in SUFFIXES
            or (path.suffix.lower() == ".py" and mentions_scenario(path))  # @memprof.scenario
        )
        and not any(part.startswith(".") for part in path.relative_to(root).parts)
        and path.is_file()
    ]


def read_summary(path: str | os.PathLike) -> ScenarioSummary:
    """Name (default: the file's stem), description and variant names of a scenario file.

    A file that cannot be read as one (too large, not UTF-8, bad YAML, not a mapping) gives a
    summary named by its stem with `error` set, so a listing still shows it.
    """
    path = Path(path)
    stem = path.stem
    if path.suffix.lower() == ".py":
        from memprof.scenario.python_file import read_summary as read_python_summary

        return read_python_summary(path)
    try:
        size = path.stat().st_size
        if size > MAX_SCENARIO_BYTES:
            return ScenarioSummary(stem, error=f"larger than {MAX_SCENARIO_BYTES} bytes")
        doc = load_yaml(path.read_text(encoding="utf-8"), str(path))
    except ScenarioYAMLError as exc:
        problem = exc.problem
        where = f" (line {problem.position.line})" if problem.position else ""
        return ScenarioSummary(stem, error=f"cannot read: {problem.message}{where}")
    except UnicodeDecodeError:
        return ScenarioSummary(stem, error="cannot read: not UTF-8 text")
    except OSError as exc:
        return ScenarioSummary(stem, error=f"cannot read: {exc.strerror or exc}")
    data = doc.data
    if not isinstance(data, dict):
        return ScenarioSummary(stem, error="not a scenario: expected a mapping of scenario fields")

    from memprof.scenario.variants import expand_variants

    defs, problems = expand_variants(doc)
    return ScenarioSummary(
        name=str(data.get("name") or stem),
        description=str(data.get("description") or "").strip(),
        variants=() if problems else tuple(d.name for d in defs),
    )


def discover(directory: str | os.PathLike = "scenarios") -> list[tuple[Path, ScenarioSummary]]:
    """`(path, summary)` of every scenario file under `directory`, sorted by path."""
    return [(path, read_summary(path)) for path in scenario_paths(directory)]


def scenario_files(paths: Sequence[str | os.PathLike]) -> tuple[list[Path], list[str]]:
    """Scenario files named directly or found in directories (*.yaml, *.yml), in order, once
    each; and one problem line per path that is missing or holds no scenario."""
    files: list[Path] = []
    problems = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            found = scenario_paths(path)
            if not found:
                problems.append(f"{path}: no scenario files (*.yaml, *.yml) in this directory")
            files += found
        elif path.is_file():
            files.append(path)
        else:
            problems.append(f"{path}: no such scenario file or directory")
    unique: dict[Path, Path] = {}
    for f in files:
        unique.setdefault(f.resolve(), f)
    return list(unique.values()), problems
