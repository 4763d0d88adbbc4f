"""YAML loading that remembers where every value came from, so problems read `file:line:col`.

`load_yaml(text, path)` returns a `Document`: the plain Python data (dicts, lists, scalars) and a
table from each value's path (a tuple of keys and indexes) to its position in the file.

Hostile input is refused with a `file:line:col` problem before it can hurt: control characters,
nesting deeper than MAX_DEPTH, an alias inside the collection it names (`a: &a [*a]`), aliases
that expand past MAX_NODES values (a "billion laughs" bomb), tags other than the plain YAML ones
(`!x`, `!!binary`, `!!timestamp`, `!!python/...`), numbers of more digits than Python converts.
Dates are not special: `2001-01-01` is the text "2001-01-01" (as in YAML 1.2's core schema).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import yaml

Path = tuple  # a path into the data: ("program", 0, "op")

MAX_DEPTH = 64  # nested mappings and lists
MAX_NODES = 100_000  # values after expanding aliases (a scenario has a few hundred)
# What YAML calls printable (YAML 1.2, 5.1): tab, line breaks and the printable Unicode range.
_NOT_PRINTABLE = re.compile(
    "[^\x09\x0a\x0d\x20-\x7e\x85\xa0-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]"
)
_PLAIN_TAGS = {
    "tag:yaml.org,2002:" + t for t in ("str", "int", "float", "bool", "null", "seq", "map")
}
_TAG_NAMES = {"tag:yaml.org,2002:": "!!"}


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


_Loader.yaml_implicit_resolvers = {  # dates and timestamps stay text
    k: [(tag, regexp) for tag, regexp in v if tag != "tag:yaml.org,2002:timestamp"]
    for k, v in yaml.SafeLoader.yaml_implicit_resolvers.items()
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


def position_of(text: str, offset: int) -> Position:
    """The 1-based line and column of character `offset` in `text`."""
    line = text.count("\n", 0, offset) + 1
    return Position(line, offset - (text.rfind("\n", 0, offset) + 1) + 1)


# libyaml's parser (PyYAML's C extension, in its wheels) when there is one: about 8x faster
# (the shipped scenarios' 71 KB: 0.40 -> 0.05 s). It reads some text differently from the
# pure-Python parser, which stays the reference: it takes `1?` in a flow mapping as text and tabs
# as separators, counts a column differently after a byte order mark inside the text, and places
# an empty value in a flow mapping a column later. So it is used only for ASCII text without tabs
# or `?`, its result only when no value is empty, and anything it or our checks refuse is read
# again by the pure-Python loader, whose problems we word (the same Document or problem either
# way: tests/memprof/test_scenario_loader.py compares the two on thousands of mutated files).
_CLoader = None
if getattr(yaml, "__with_libyaml__", False):

    class _CLoader(yaml.CSafeLoader):
        """_Loader's rules over libyaml's parser."""

    _CLoader.yaml_implicit_resolvers = _Loader.yaml_implicit_resolvers


def load_yaml(text: str, file: str) -> Document:
    """Parse `text`; raise ScenarioYAMLError with a `file:line:col` problem on bad YAML.

    Duplicate keys in a mapping are an error (PyYAML would silently keep the last one).
    An empty file (or only comments) gives `data=None`, positioned at 1:1.
    """
    if _CLoader is not None and text.isascii() and "\t" not in text and "?" not in text:
        try:
            return _load_yaml(text, file, _CLoader)
        except (ScenarioYAMLError, _EmptyValue):
            pass  # the pure-Python loader finds (and words) the problem
    return _load_yaml(text, file, _Loader)


class _EmptyValue(Exception):
    """libyaml read an empty value (whose column it may place differently)."""


def _load_yaml(text: str, file: str, loader_class) -> Document:
    bad = _NOT_PRINTABLE.search(text)
    if bad:
        char = bad.group()
        name = _CHAR_NAMES.get(char, "a control character")
        raise ScenarioYAMLError(
            Problem(
                file,
                position_of(text, bad.start()),
                f"expected printable text, found {name} (U+{ord(char):04X}); "
                "remove it or write it as an escape inside double quotes",
            )
        )
    _check_events(text, file, loader_class)
    loader = loader_class(text)
    try:
        try:
            root = loader.get_single_node()
        except yaml.MarkedYAMLError as exc:
            raise ScenarioYAMLError(_syntax_problem(exc, file)) from None
        except yaml.YAMLError as exc:
            raise ScenarioYAMLError(Problem(file, None, f"YAML syntax error: {exc}")) from None
        doc = Document(data=None, file=file)
        if root is None:
            doc.values[()] = Position(1, 1)
            return doc
        doc.data = _convert(loader, root, (), doc)
        return doc
    finally:
        loader.dispose()


_CHAR_NAMES = {"\x00": "a NUL byte", "\x1b": "an escape character", "\ufeff": "a byte order mark"}


def _syntax_problem(exc: yaml.MarkedYAMLError, file: str) -> Problem:
    mark = exc.problem_mark or exc.context_mark
    what = exc.problem or "invalid YAML"
    if exc.context:
        what = f"{exc.context}, {what}"
    return Problem(file, _pos(mark) if mark else None, f"YAML syntax error: {what}")


def _check_events(text: str, file: str, loader_class=_Loader) -> None:
    """Refuse deep nesting, recursive aliases and alias bombs from the event stream, which PyYAML
    produces without recursion, before anything builds (or recurses into) a node graph."""
    loader = loader_class(text)
    depth = 0
    count = 0  # values so far, aliases counted at their expanded size
    sizes: dict[str, int] = {}  # anchor -> values it expands to
    open_anchors: list[tuple[str | None, int]] = []  # per open collection: (anchor, count at start)
    try:
        while True:
            try:
                event = loader.get_event()
            except yaml.MarkedYAMLError as exc:
                raise ScenarioYAMLError(_syntax_problem(exc, file)) from None
            except yaml.YAMLError as exc:
                raise ScenarioYAMLError(Problem(file, None, f"YAML syntax error: {exc}")) from None
            if event is None or isinstance(event, yaml.StreamEndEvent):
                return
            if isinstance(event, yaml.AliasEvent):
                if any(anchor == event.anchor for anchor, _ in open_anchors):
                    raise ScenarioYAMLError(
                        Problem(
                            file,
                            _pos(event.start_mark),
                            f"expected an alias to a finished value, found *{event.anchor} "
                            f"inside the value &{event.anchor} names (a recursive alias)",
                        )
                    )
                count += sizes.get(event.anchor, 1)
            elif isinstance(event, (yaml.SequenceStartEvent, yaml.MappingStartEvent)):
                depth += 1
                count += 1
                if depth > MAX_DEPTH:
                    raise ScenarioYAMLError(
                        Problem(
                            file,
                            _pos(event.start_mark),
                            f"expected at most {MAX_DEPTH} levels of nested lists and mappings, "
                            "found more",
                        )
                    )
                open_anchors.append((event.anchor, count))
            elif isinstance(event, (yaml.SequenceEndEvent, yaml.MappingEndEvent)):
                depth -= 1
                anchor, start = open_anchors.pop()
                if anchor is not None:
                    sizes[anchor] = count - start + 1
            elif isinstance(event, yaml.ScalarEvent):
                count += 1
                if event.anchor is not None:
                    sizes[event.anchor] = 1
            else:
                continue
            if count > MAX_NODES:
                raise ScenarioYAMLError(
                    Problem(
                        file,
                        _pos(event.start_mark),
                        f"expected at most {MAX_NODES} values once aliases are expanded, "
                        "found more (aliases of aliases multiply); write the values out or "
                        "use fewer aliases",
                    )
                )
    finally:
        loader.dispose()


def _tag_name(tag: str) -> str:
    for prefix, short in _TAG_NAMES.items():
        if tag.startswith(prefix):
            return short + tag[len(prefix) :]
    return tag


def _check_tag(node, doc: Document) -> None:
    if node.tag not in _PLAIN_TAGS:
        raise ScenarioYAMLError(
            Problem(
                doc.file,
                _pos(node.start_mark),
                f"expected a plain YAML value (text, number, true/false, null, list or mapping), "
                f"found one tagged {_tag_name(node.tag)}; remove the tag (quote the value to keep "
                "it as text)",
            )
        )


def _construct(loader: _Loader, node, doc: Document) -> Any:
    if node.value == "" and loader.__class__ is _CLoader:
        raise _EmptyValue
    _check_tag(node, doc)
    try:
        return loader.construct_object(node, deep=True)
    except yaml.constructor.ConstructorError as exc:
        raise ScenarioYAMLError(
            Problem(doc.file, _pos(node.start_mark), f"YAML error: {exc.problem}")
        ) from None
    except ValueError:  # an integer of more digits than int() converts
        raise ScenarioYAMLError(
            Problem(
                doc.file,
                _pos(node.start_mark),
                f"expected a number of at most 4300 digits, found one of {len(node.value)}"
                if len(str(node.value)) > 4300
                else f"expected a valid {_tag_name(node.tag)} value, found {node.value[:60]!r}",
            )
        ) from None


def _convert(loader: _Loader, node, path: Path, doc: Document) -> Any:
    if node.value == "" and loader.__class__ is _CLoader:
        raise _EmptyValue
    doc.values[path] = _pos(node.start_mark)
    _check_tag(node, doc)
    if isinstance(node, yaml.MappingNode):
        try:
            loader.flatten_mapping(node)  # resolves `<<: *anchor` merge keys
        except yaml.MarkedYAMLError as exc:
            raise ScenarioYAMLError(
                Problem(doc.file, _pos(exc.problem_mark), f"YAML syntax error: {exc.problem}")
            ) from None
        out: dict = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                raise ScenarioYAMLError(
                    Problem(
                        doc.file,
                        _pos(key_node.start_mark),
                        "expected a plain key (a name or number), found a "
                        + ("list" if isinstance(key_node, yaml.SequenceNode) else "mapping"),
                    )
                )
            key = _construct(loader, key_node, doc)
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
    return _construct(loader, node, doc)
