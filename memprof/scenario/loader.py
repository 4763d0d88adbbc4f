"""YAML loading that remembers where every value came from, so problems read `file:line:col`.

`load_yaml(text, path)` returns a `Document`: the plain Python data (dicts, lists, scalars) and a
table from each value's path (a tuple of keys and indexes) to its position in the file.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import yaml

Path = tuple  # a path into the data: ("program", 0, "op")


@dataclass(frozen=True)
class Position:
    """1-based line and column of a value in a file."""

    line: int
    column: int


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a scenario file, printed as `file:line:col: message`."""

    file: str
    position: Position | None
    message: str
    severity: str = "error"  # error | warning
    kind: str | None = None  # e.g. "stale_read", for warnings the runner reports on its own

    def __str__(self) -> str:
        where = (
            self.file
            if self.position is None
            else (f"{self.file}:{self.position.line}:{self.position.column}")
        )
        prefix = "warning: " if self.severity == "warning" else ""
        return f"{where}: {prefix}{self.message}"


@dataclass
class Document:
    """Parsed YAML data plus the position of every value (`values`) and mapping key (`keys`)."""

    data: Any
    file: str
    values: dict[Path, Position] = field(default_factory=dict)
    keys: dict[Path, Position] = field(default_factory=dict)

    def position(self, path: Path, *, key: bool = False) -> Position | None:
        """Where `path` is written; falls back to the nearest enclosing value that has a position.

        With key=True a mapping entry points at its key (for "unknown field" problems).
        """
        path = tuple(path)
        if key and path in self.keys:
            return self.keys[path]
        while True:
            if path in self.values:
                return self.values[path]
            if not path:
                return None
            path = path[:-1]

    def problem(
        self,
        path: Path,
        message: str,
        *,
        key: bool = False,
        severity: str = "error",
        kind: str | None = None,
    ) -> Problem:
        return Problem(self.file, self.position(path, key=key), message, severity, kind)


def dedupe(problems: list[Problem]) -> list[Problem]:
    """The problems in order, each printed line once."""
    seen, out = set(), []
    for p in problems:
        if str(p) not in seen:
            seen.add(str(p))
            out.append(p)
    return out


class ScenarioYAMLError(Exception):
    """The text is not YAML (or uses a YAML feature scenarios forbid); carries one Problem."""

    def __init__(self, problem: Problem):
        super().__init__(str(problem))
        self.problem = problem


class _Loader(yaml.SafeLoader):
    """SafeLoader that also reads `1e-3` as a float (YAML 1.2 does; PyYAML's 1.1 rules do not)."""


_Loader.yaml_implicit_resolvers = {
    k: list(v) for k, v in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(
        r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
        |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
        |\.[0-9_]+(?:[eE][-+][0-9]+)?
        |[-+]?\.(?:inf|Inf|INF)
        |\.(?:nan|NaN|NAN))$""",
        re.X,
    ),
    list("-+0123456789."),
)


def _pos(mark) -> Position:
    return Position(mark.line + 1, mark.column + 1)


def load_yaml(text: str, file: str) -> Document:
    """Parse `text`; raise ScenarioYAMLError with a `file:line:col` problem on bad YAML.

    Duplicate keys in a mapping are an error (PyYAML would silently keep the last one).
    """
    loader = _Loader(text)
    try:
        try:
            root = loader.get_single_node()
        except yaml.MarkedYAMLError as exc:
            mark = exc.problem_mark or exc.context_mark
            what = exc.problem or "invalid YAML"
            if exc.context:
                what = f"{exc.context}, {what}"
            raise ScenarioYAMLError(
                Problem(file, _pos(mark) if mark else None, f"YAML syntax error: {what}")
            ) from None
        except yaml.YAMLError as exc:
            raise ScenarioYAMLError(Problem(file, None, f"YAML syntax error: {exc}")) from None
        doc = Document(data=None, file=file)
        if root is None:
            return doc
        doc.data = _convert(loader, root, (), doc)
        return doc
    finally:
        loader.dispose()


def _convert(loader: _Loader, node, path: Path, doc: Document) -> Any:
    doc.values[path] = _pos(node.start_mark)
    if isinstance(node, yaml.MappingNode):
        try:
            loader.flatten_mapping(node)  # resolves `<<: *anchor` merge keys
        except yaml.MarkedYAMLError as exc:
            raise ScenarioYAMLError(
                Problem(doc.file, _pos(exc.problem_mark), f"YAML syntax error: {exc.problem}")
            ) from None
        out: dict = {}
        for key_node, value_node in node.value:
            key = loader.construct_object(key_node, deep=True)
            if not isinstance(key, (str, int, float, bool)) or key is None:
                raise ScenarioYAMLError(
                    Problem(
                        doc.file,
                        _pos(key_node.start_mark),
                        f"expected a plain key (a name or number), found {key!r}",
                    )
                )
            if key in out:
                first = doc.keys.get(path + (key,))
                where = f" (first at line {first.line})" if first else ""
                raise ScenarioYAMLError(
                    Problem(
                        doc.file,
                        _pos(key_node.start_mark),
                        f"expected each key once in a mapping, found {key!r} again{where}",
                    )
                )
            doc.keys[path + (key,)] = _pos(key_node.start_mark)
            out[key] = _convert(loader, value_node, path + (key,), doc)
        return out
    if isinstance(node, yaml.SequenceNode):
        return [_convert(loader, item, path + (i,), doc) for i, item in enumerate(node.value)]
    try:
        return loader.construct_object(node, deep=True)
    except yaml.constructor.ConstructorError as exc:
        raise ScenarioYAMLError(
            Problem(doc.file, _pos(node.start_mark), f"YAML error: {exc.problem}")
        ) from None
