"""Whether each scenario file of the folder is valid, as `memprof validate` decides it, for the
run-a-scenario page: invalid files are marked with their problems and cannot be run; a valid
one offers its variants, devices and allocators to pick from.

Checking dry-runs the programs on the meta device, which runs share: it waits a moment for a
run in progress and otherwise says the file is not checked yet (its run still validates it).
Results are kept per file until the file changes.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path

DEVICES = ("cpu", "meta", "cuda")
ALLOCATORS = ("exact", "caching")


@dataclass(frozen=True)
class ScenarioCheck:
    status: str  # valid | invalid | unchecked
    problems: tuple[str, ...] = ()
    variants: tuple[str, ...] = ()
    device: str | None = None  # the file's own choices, the picker's defaults
    allocator: str | None = None

    @property
    def runnable(self) -> bool:
        return self.status != "invalid"


@dataclass
class ScenarioChecks:
    wait_s: float = 2.0
    _cache: dict[Path, tuple[tuple[int, int], ScenarioCheck]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def check(self, path: Path) -> ScenarioCheck:
        try:
            st = path.stat()
        except OSError as exc:
            return ScenarioCheck("invalid", (f"{path.name}: cannot read: {exc.strerror}",))
        stamp = (st.st_mtime_ns, st.st_size)
        with self._lock:
            cached = self._cache.get(path)
        if cached and cached[0] == stamp:
            return cached[1]
        result = _check(path, self.wait_s)
        if result.status != "unchecked":
            with self._lock:
                self._cache[path] = (stamp, result)
        return result


def _check(path: Path, wait_s: float) -> ScenarioCheck:
    from memprof.errors import InvalidInput
    from memprof.runner import _RUN_LOCK
    from memprof.scenario import load_scenario

    if not _RUN_LOCK.acquire(timeout=wait_s):
        return ScenarioCheck("unchecked", ("not checked yet: a run is in progress",))
    try:
        loaded = load_scenario(path)
    except InvalidInput as exc:
        problems = exc.problems or [str(exc)]
        return ScenarioCheck("invalid", tuple(_short(p, path) for p in problems))
    except Exception as exc:  # a checker bug must not take the page down
        return ScenarioCheck("invalid", (f"cannot check: {type(exc).__name__}: {exc}",))
    finally:
        _RUN_LOCK.release()
    first = loaded.variants[0].spec if loaded.variants else None
    return ScenarioCheck(
        "valid",
        (),
        tuple(v.name for v in loaded.variants),
        getattr(first, "device", None),
        getattr(first, "allocator", None),
    )


def _short(problem: str, path: Path) -> str:
    """A problem without the absolute path in front (the page shows the file already)."""
    text = str(problem)
    prefix = str(path)
    return text[len(prefix) :].lstrip(":") if text.startswith(prefix) else text
