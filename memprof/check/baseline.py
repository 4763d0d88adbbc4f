"""Baselines for `memprof check --baseline`: the peaks an earlier run measured.

A baseline is any of
- a combined check result (`memprof check --json PATH`, `"kind": "memprof-check"`),
- a single run report (docs/report-format.md, as saved under `memprof-runs/`),
- a directory of those (searched recursively; files starting with "." are skipped).

Entries are keyed by (scenario name, variant name). When several files hold the same key, the
newest (by `created_at`) wins, so a whole runs directory works as a baseline.
Anything unreadable raises InvalidInput with one `file: problem` line per bad file.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memprof.errors import InvalidInput
from memprof.reports.build import SCHEMA_VERSION as REPORT_SCHEMA_VERSION

CHECK_KIND = "memprof-check"
CHECK_SCHEMA_VERSION = 1


@dataclass(frozen=True)
class BaselineEntry:
    """One variant's measurement in a baseline."""

    scenario: str
    variant: str
    peak_allocated_bytes: int | None  # None when the variant did not finish
    peak_reserved_bytes: int | None
    source: str  # the file it came from
    status: str = "ok"  # ok | error | oom: only an ok variant's peak is compared with
    run_id: str | None = None
    created_at: str = ""
    device: str | None = None
    allocator: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "peak_allocated_bytes": self.peak_allocated_bytes,
            "peak_reserved_bytes": self.peak_reserved_bytes,
            "source": self.source,
            "status": self.status,
            "run_id": self.run_id,
            "created_at": self.created_at,
            "device": self.device,
            "allocator": self.allocator,
        }


@dataclass
class Baseline:
    """Peaks by (scenario, variant), read from one or more files."""

    path: str
    entries: dict[tuple[str, str], BaselineEntry] = field(default_factory=dict)
    files: list[str] = field(default_factory=list)

    def get(self, scenario: str, variant: str) -> BaselineEntry | None:
        return self.entries.get((scenario, variant))

    def __len__(self) -> int:
        return len(self.entries)

    def add(self, entry: BaselineEntry) -> None:
        key = (entry.scenario, entry.variant)
        old = self.entries.get(key)
        if old is None or entry.created_at >= old.created_at:
            self.entries[key] = entry


def load_baseline(path: str | os.PathLike) -> Baseline:
    """Read a baseline file or directory; raise InvalidInput naming each bad file and why."""
    root = Path(path)
    if not root.exists():
        raise InvalidInput(f"{root}: baseline not found (no such file or directory)")
    if root.is_dir():
        files = sorted(
            p
            for p in root.rglob("*.json")
            if p.is_file() and not any(part.startswith(".") for part in p.relative_to(root).parts)
        )
        if not files:
            raise InvalidInput(
                f"{root}: no baseline in this directory (expected run reports or "
                f"`memprof check --json` results, *.json)"
            )
    else:
        files = [root]
    baseline = Baseline(path=str(root))
    problems: list[str] = []
    for file in files:
        try:
            for entry in _entries(file):
                baseline.add(entry)
            baseline.files.append(str(file))
        except _Bad as bad:
            problems.append(bad.where(file))
    if problems:
        raise InvalidInput(f"{root}: invalid baseline", problems)
    return baseline


# --- reading one file -------------------------------------------------------------------------


class _Bad(Exception):
    """What is wrong with one baseline file; the caller prefixes the file name (and position)."""

    def __init__(self, message: str, position: tuple[int, int] | None = None):
        super().__init__(message)
        self.position = position

    def where(self, file: Path) -> str:
        if self.position is None:
            return f"{file}: {self}"
        return f"{file}:{self.position[0]}:{self.position[1]}: {self}"


def _entries(file: Path) -> Iterator[BaselineEntry]:
    try:
        text = file.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise _Bad("cannot read the baseline: not UTF-8 text") from None
    except OSError as exc:
        raise _Bad(f"cannot read the baseline: {exc.strerror or exc}") from None
    if not text.strip():
        raise _Bad("empty file; expected a memprof run report or check result (JSON)")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise _Bad(f"invalid JSON: {exc.msg}", (exc.lineno, exc.colno)) from None
    except (ValueError, RecursionError) as exc:  # a 5000-digit integer, nesting too deep
        raise _Bad(f"cannot read the baseline: {exc}") from None
    if not isinstance(data, dict):
        raise _Bad(
            f"expected a memprof run report or check result (a JSON object), found {_kind(data)}"
        )
    if data.get("kind") == CHECK_KIND:
        return _from_check(data, str(file))
    if "variants" in data and "scenario" in data:
        return _from_report(data, str(file))
    raise _Bad(
        "expected a memprof run report (with `scenario` and `variants`) or a "
        f'`memprof check --json` result (`"kind": "{CHECK_KIND}"`), found an object '
        f"with keys {', '.join(sorted(map(str, data))[:8]) or 'none'}"
    )


def _from_report(data: Mapping[str, Any], source: str) -> Iterator[BaselineEntry]:
    from memprof.reports.load import READABLE_VERSIONS

    version = data.get("schema_version")
    if version not in READABLE_VERSIONS or type(version) is not int:
        raise _Bad(
            f"expected a report with schema_version {', '.join(map(str, READABLE_VERSIONS))}, found "
            f"{version!r}"
            + (
                " (written by a newer memprof?)"
                if isinstance(version, int) and version > REPORT_SCHEMA_VERSION
                else ""
            )
        )
    scenario = data.get("scenario")
    if not isinstance(scenario, dict) or not isinstance(scenario.get("name"), str):
        raise _Bad(f"expected `scenario.name` (a string), found {_kind(scenario)}")
    variants = data.get("variants")
    if not isinstance(variants, list):
        raise _Bad(f"expected `variants` to be a list, found {_kind(variants)}")
    env = data.get("environment") if isinstance(data.get("environment"), dict) else {}
    created = data.get("created_at") if isinstance(data.get("created_at"), str) else ""
    entries = []
    for i, v in enumerate(variants):
        _require_variant(v, f"variants[{i}]", ("name", "status", "peak_allocated_bytes"))
        entries.append(
            BaselineEntry(
                scenario=scenario["name"],
                variant=v["name"],
                peak_allocated_bytes=v["peak_allocated_bytes"],
                peak_reserved_bytes=_int_or_none(v.get("peak_reserved_bytes")),
                source=source,
                status=v["status"],
                run_id=data.get("run_id"),
                created_at=created,
                device=v.get("device") or env.get("device"),
                allocator=v.get("allocator") or env.get("allocator"),
            )
        )
    return iter(entries)


def _from_check(data: Mapping[str, Any], source: str) -> Iterator[BaselineEntry]:
    version = data.get("schema_version")
    if version != CHECK_SCHEMA_VERSION:
        raise _Bad(
            f"expected a check result with schema_version {CHECK_SCHEMA_VERSION}, found {version!r}"
        )
    results = data.get("results")
    if not isinstance(results, list):
        raise _Bad(f"expected `results` to be a list, found {_kind(results)}")
    created = data.get("created_at") if isinstance(data.get("created_at"), str) else ""
    entries = []
    for i, r in enumerate(results):
        _require_variant(
            r, f"results[{i}]", ("scenario", "variant", "status", "peak_allocated_bytes")
        )
        entries.append(
            BaselineEntry(
                scenario=r["scenario"],
                variant=r["variant"],
                peak_allocated_bytes=r["peak_allocated_bytes"],
                peak_reserved_bytes=_int_or_none(r.get("peak_reserved_bytes")),
                source=source,
                status=r["status"],
                run_id=r.get("run_id"),
                created_at=created,
                device=r.get("device"),
                allocator=r.get("allocator"),
            )
        )
    return iter(entries)


def _require_variant(item: Any, where: str, keys: tuple[str, ...]) -> None:
    if not isinstance(item, dict):
        raise _Bad(f"expected {where} to be an object, found {_kind(item)}")
    for key in keys:
        value = item.get(key)
        if key == "peak_allocated_bytes":
            ok = isinstance(value, int) and not isinstance(value, bool) and value >= 0
            # an errored variant may have no peak; only a measured one must
            if value is None and item.get("status") not in (None, "ok"):
                ok = True
            if not ok:
                raise _Bad(f"expected {where}.{key} to be a number of bytes, found {_kind(value)}")
        elif not isinstance(value, str):
            raise _Bad(f"expected {where}.{key} to be a string, found {_kind(value)}")


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _kind(value: Any) -> str:
    if value is None:
        return "nothing (null or missing)"
    if isinstance(value, bool):
        return f"a boolean ({str(value).lower()})"
    if isinstance(value, (int, float)):
        return f"a number ({value!r})"
    if isinstance(value, str):
        return f"a string ({value[:40]!r})"
    if isinstance(value, list):
        return f"a list of {len(value)} item(s)"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__
