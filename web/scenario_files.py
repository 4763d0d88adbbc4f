"""The scenarios folder as the dashboard sees it: the only files it lists and may run.

A scenario is named by its path relative to the folder ("relu.yaml", "nets/mlp.yml") or by the
`name` inside it. Requests are matched against the files found here, never turned into paths,
so "../secrets.yaml" or an absolute path cannot name anything outside the folder, and symlinks
that lead out of it are skipped. Files are read with `yaml.safe_load` and a size cap.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SUFFIXES = (".yaml", ".yml")
MAX_SCENARIO_BYTES = 1024 * 1024


@dataclass(frozen=True)
class ScenarioFile:
    id: str  # path relative to the scenarios folder, with "/" separators
    path: Path  # resolved, inside the folder
    name: str
    description: str = ""
    variants: tuple[str, ...] = ()
    error: str | None = None  # why the file could not be read, if it could not
    size: int = 0


@dataclass
class ScenarioFolder:
    root: Path
    _cache: dict[Path, tuple[tuple[int, int], ScenarioFile]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def list(self) -> list[ScenarioFile]:
        """Every scenario file under the folder, sorted by its relative path."""
        root = self.root.resolve()
        if not root.is_dir():
            return []
        found = []
        for path in sorted(root.rglob("*")):
            rel = path.relative_to(root)
            if path.suffix.lower() not in SUFFIXES or any(p.startswith(".") for p in rel.parts):
                continue
            resolved = path.resolve()
            if not resolved.is_file() or not resolved.is_relative_to(root):
                continue
            found.append(self._read(rel.as_posix(), resolved))
        return found

    def find(self, key: str) -> ScenarioFile | None:
        """The scenario whose relative path or name is `key`, if exactly one matches."""
        scenarios = self.list()
        by_id = [s for s in scenarios if s.id == key]
        if by_id:
            return by_id[0]
        by_name = [s for s in scenarios if s.name == key and s.error is None]
        return by_name[0] if len(by_name) == 1 else None

    def _read(self, rel: str, path: Path) -> ScenarioFile:
        st = path.stat()
        stamp = (st.st_mtime_ns, st.st_size)
        with self._lock:
            cached = self._cache.get(path)
        if cached and cached[0] == stamp:
            return cached[1]
        scenario = _parse(rel, path, st.st_size)
        with self._lock:
            self._cache[path] = (stamp, scenario)
        return scenario


def _parse(rel: str, path: Path, size: int) -> ScenarioFile:
    import yaml

    stem = Path(rel).stem
    if size > MAX_SCENARIO_BYTES:
        return ScenarioFile(
            rel, path, stem, error=f"larger than {MAX_SCENARIO_BYTES} bytes", size=size
        )
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        first_line = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return ScenarioFile(rel, path, stem, error=f"cannot read: {first_line}", size=size)
    if not isinstance(data, dict):
        return ScenarioFile(rel, path, stem, error="not a mapping of scenario fields", size=size)
    return ScenarioFile(
        id=rel,
        path=path,
        name=str(data.get("name") or stem),
        description=str(data.get("description") or "").strip(),
        variants=_variant_names(data.get("variants")),
        size=size,
    )


def _variant_names(variants: Any) -> tuple[str, ...]:
    if isinstance(variants, dict):
        return tuple(str(k) for k in variants)
    if isinstance(variants, list):
        return tuple(str(v.get("name")) for v in variants if isinstance(v, dict) and v.get("name"))
    return ()
