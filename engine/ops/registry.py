"""The op table: one row per public name, from which every spelling of an op is built.

A row says where a callable is published:

- ``function``: as ``engine.<name>`` (torch.<name>);
- ``method``: as ``Tensor.<name>`` (the same callable, or another one, e.g. ``dim`` first);
- ``functional``: as ``engine.nn.functional.<name>``;
- ``scenario``: as an op a memprof scenario may call (its inputs and arguments, see `Scenario`).

``inplace`` names the row of the op's in-place form (``relu`` -> ``relu_``). Registering a name
twice raises: a new op can never silently replace an old one.

Adding an op (see docs/engine.md)::

    from engine.ops.registry import register

    register("softplus", softplus, method=True, functional=True, inplace="softplus_")
    register("softplus_", softplus_, method=True, function=False)

The namespaces are built when engine.ops is imported (``engine.ops.build``): ``engine``'s
globals, the Tensor class, engine.nn.functional and memprof's scenario catalog all read the rows
through `rows()`, `functions()`, `methods()` and `functional()`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

REQUIRED: Any = ...  # a scenario argument without a default

# Argument types of scenario specs (memprof turns them into JSON Schema)
IntOrPair = int | list[int]
Dims = int | list[int] | None
Reduction = Literal["mean", "sum", "none"]


@dataclass(frozen=True)
class Scenario:
    """How a memprof scenario calls the op: ``{op: NAME, in: [...], args: {...}, inplace: bool}``.

    inputs: names of the tensor inputs, in order; optional_inputs may follow them; a variadic op
    takes one or more tensors. args: ``(name, type, default, doc)`` with ``REQUIRED`` for no
    default (the type is a typing form: memprof builds its JSON Schema from it).
    call(tensors, args, inplace) runs the op; None means ``fn(*tensors, **args)`` with the row's
    function (its in-place row's when ``inplace``).
    """

    inputs: tuple[str, ...] = ("input",)
    args: tuple[tuple, ...] = ()
    optional_inputs: tuple[str, ...] = ()
    variadic: bool = False
    doc: str = ""
    call: Callable | None = None


@dataclass(frozen=True)
class Row:
    """One public name of the op table."""

    name: str
    fn: Callable
    function: bool = True
    method: Callable | None = None
    functional: Callable | None = None
    inplace: str | None = None
    scenario: Scenario | None = None

    def run(self, tensors: list, args: dict, inplace: bool = False):
        """Call the op as a scenario node does: its tensors, its arguments, maybe in place.

        The scenario's own `call` when it has one, else ``fn(*tensors, **args)`` with this row's
        function (its in-place row's when ``inplace``); list arguments are passed as tuples.
        """
        call = self.scenario.call if self.scenario is not None else None
        if call is not None:
            return call(tensors, args, inplace)
        fn = _ROWS[self.inplace].fn if inplace else self.fn
        return fn(*tensors, **{k: _tuple(v) for k, v in args.items()})


def _tuple(v):
    return tuple(v) if isinstance(v, list) else v


_ROWS: dict[str, Row] = {}


class DuplicateOpError(ValueError):
    """A name registered twice in the op table."""


def register(
    name: str,
    fn: Callable,
    *,
    function: bool = True,
    method: bool | Callable = False,
    functional: bool | Callable = False,
    inplace: str | None = None,
    scenario: Scenario | None = None,
) -> Callable:
    """Add the row ``name`` to the op table; returns ``fn``.

    method / functional: True publishes ``fn`` itself there, a callable publishes that callable
    (a method whose arguments differ from the function's), False nothing. Raises
    DuplicateOpError when ``name`` already has a row.
    """
    if name in _ROWS:
        prev = _ROWS[name]
        where = getattr(prev.fn, "__module__", "?")
        raise DuplicateOpError(
            f"op {name!r} is already registered (by {where}); pick another name, or change "
            "the existing row instead of registering a second one"
        )
    row = Row(
        name,
        fn,
        function=function,
        method=fn if method is True else (method or None),
        functional=fn if functional is True else (functional or None),
        inplace=inplace,
        scenario=scenario,
    )
    _ROWS[name] = row
    _built.clear()
    return fn


def op(name: str | None = None, **options) -> Callable:
    """Decorator form of `register`: ``@op("relu", method=True, inplace="relu_")``."""

    def deco(fn):
        fn.__name__ = name or fn.__name__
        return register(fn.__name__, fn, **options)

    return deco


def alias(name: str, target: str, **options) -> None:
    """Another name for a registered row (``clip`` for ``clamp``); published where it is."""
    row = _ROWS[target]
    if not options:
        options = dict(
            function=row.function,
            method=row.method or False,
            functional=row.functional or False,
        )
    register(name, row.fn, **options)


def rows() -> list[Row]:
    return list(_ROWS.values())


def get(name: str) -> Row:
    return _ROWS[name]


_built: dict[str, dict] = {}


def _view(kind: str) -> dict[str, Callable]:
    d = _built.get(kind)
    if d is None:
        if kind == "function":
            d = {r.name: r.fn for r in _ROWS.values() if r.function}
        else:
            d = {r.name: getattr(r, kind) for r in _ROWS.values() if getattr(r, kind) is not None}
        _built[kind] = d
    return d


def functions() -> dict[str, Callable]:
    """engine.<name>: every row published as a function."""
    return dict(_view("function"))


def methods() -> dict[str, Callable]:
    """Tensor.<name>: every row published as a method."""
    return dict(_view("method"))


def functional() -> dict[str, Callable]:
    """engine.nn.functional.<name>: every row published there."""
    return dict(_view("functional"))


def scenario_ops() -> list[Row]:
    """The rows a memprof scenario may call, in registration order."""
    return [r for r in _ROWS.values() if r.scenario is not None]


def bind_methods(tensor_cls) -> None:
    """Set every method row on the Tensor class (at import, and after late registrations)."""
    for name, fn in _view("method").items():
        setattr(tensor_cls, name, fn)
