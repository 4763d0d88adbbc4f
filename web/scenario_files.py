"""The scenarios folder as the dashboard sees it: the only files it lists and may run.

A scenario is named by its path relative to the folder ("relu.yaml", "nets/mlp.yml") or by the
`name` inside it. Requests are matched against the files found here, never turned into paths,
so "../secrets.yaml" or an absolute path cannot name anything outside the folder, and symlinks
that lead out of it are skipped. Files are found and read as `memprof list` reads them
(memprof/scenario/discover.py: safe YAML, a size cap, hidden files skipped).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path

from memprof.scenario.discover import read_summary, scenario_paths


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
        found = []
        for path in scenario_paths(root):
            try:
                resolved = path.resolve()
                if resolved.is_relative_to(root):
                    found.append(self._read(path.relative_to(root).as_posix(), resolved))
            except (OSError, RuntimeError):  # deleted meanwhile, or a symlink loop: not listed
                continue
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
        summary = read_summary(path)
        scenario = ScenarioFile(
            id=rel,
            path=path,
            name=summary.name,
            description=summary.description,
            variants=summary.variants,
            error=summary.error,
            size=st.st_size,
        )
        with self._lock:
            self._cache[path] = (stamp, scenario)
        return scenario
