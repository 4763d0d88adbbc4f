"""Builds the Typer app. Each command lives in its own module; heavy imports stay inside them.

Domain errors (memprof.errors.MemprofError) become a message on stderr and an exit code here,
in one place, so no command prints a traceback for bad input.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import sys

import typer
from typer.core import TyperCommand, TyperGroup


def _defer(module: str, *classes: str) -> None:
    """Put a stand-in for `module` in sys.modules that imports the real one the first time
    anything in it is used: constructing one of `classes` (or reading a class attribute, such as
    Traceback.from_exception) builds the real class's object, any other attribute is read from
    the real module. typer.rich_utils imports, for `memprof --help`, rich.markdown (with
    markdown-it: 40 ms) for Markdown help that memprof does not use, and rich.traceback (with
    pygments' lexers, rich.syntax and rich.pretty: 50-70 ms) for pretty exceptions that
    memprof turns off."""
    if module in sys.modules:
        return
    import types

    def real():
        if getattr(sys.modules.get(module), "_memprof_stand_in", False):
            del sys.modules[module]
        return importlib.import_module(module)

    class _Lazy(type):
        def __getattr__(cls, name):  # a class attribute: the real class's
            return getattr(getattr(real(), cls.__name__), name)

    stand_in = types.ModuleType(module)
    stand_in._memprof_stand_in = True
    for name in classes:

        def __new__(cls, *args, **kwargs):  # noqa: N807 - the stand-in's constructor
            return getattr(real(), cls.__name__)(*args, **kwargs)

        setattr(stand_in, name, _Lazy(name, (), {"__new__": __new__}))

    def attribute(name):
        if name.startswith("__"):  # the import system's questions (__path__, ...): a module's
            raise AttributeError(name)
        return getattr(real(), name)

    stand_in.__getattr__ = attribute
    sys.modules[module] = stand_in


_defer("rich.markdown", "Markdown")
_defer("rich.traceback", "Traceback")

# (command name, module under memprof.cli, function name). Modules are thin and import
# the engine / web stack lazily, so `memprof --help` stays fast.
COMMANDS = [
    ("run", "run", "run"),
    ("validate", "validate", "validate"),
    ("schema", "schema", "schema"),
    ("list", "list_cmd", "list_scenarios"),
    ("compare", "compare", "compare"),
    ("report", "report", "report"),
    ("serve", "serve", "serve"),
    ("check", "check", "check"),
    ("history", "history", "history"),
    ("advise", "advise", "advise"),
]


class _PlainHelp:
    """Help with plain placeholders: `PATH`, `N`, `DEVICE` instead of `<list[Path]>`, `<int>`,
    `<str>`, and nothing after a flag (`--quiet`, not `--quiet <bool>`). A parameter's own
    `metavar` wins."""

    def get_params(self, ctx):
        params = super().get_params(ctx)
        for param in params:
            if getattr(param, "param_type_name", "") == "argument":
                # the name column already shows it: no `<list[Path]>` type beside it
                param.display_type_rich = _no_type
                if param.metavar is None:
                    param.metavar = (param.name or "value").upper()
            elif param.metavar is None:
                param.metavar = _placeholder(param)
        return params


class _PlainHelpCommand(_PlainHelp, TyperCommand):
    """A command's help, plainly (_PlainHelp)."""


class _PlainHelpGroup(_PlainHelp, TyperGroup):
    """`memprof --help`, plainly (_PlainHelp): `--help`, not `--help <bool>`."""


app = typer.Typer(
    name="memprof",
    help="Where the memory of a tensor program goes, and what in-place operations save.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    cls=_PlainHelpGroup,
)


def _no_type(ctx=None) -> None:
    return None


def _placeholder(param) -> str:
    if getattr(param, "is_flag", False) or getattr(param, "count", False):
        return ""
    desc = getattr(param, "type_descriptor", None)
    annotation = getattr(desc, "annotation", None)
    if desc is not None and desc.is_list:
        (annotation,) = getattr(annotation, "__args__", (str,))
    if desc is not None and desc.is_path:
        word = "PATH"
    elif annotation is int:
        word = "N"
    elif annotation is float:
        word = "NUMBER"
    else:
        word = (param.name or "value").upper()
    return f"{word}..." if desc is not None and desc.is_list else word


def unwrap(text: str | None) -> str | None:
    """A docstring as help: its paragraphs, each on one line (the terminal wraps them)."""
    if not text:
        return text
    paragraphs = inspect.cleandoc(text).split("\n\n")
    return "\n\n".join(" ".join(p.split()) for p in paragraphs)


def _register() -> None:
    for name, module, func in COMMANDS:
        mod = importlib.import_module(f"memprof.cli.{module}")
        function = getattr(mod, func)
        app.command(name, cls=_PlainHelpCommand, help=unwrap(function.__doc__))(
            _reporting_errors(function)
        )


def _reporting_errors(func):
    """Turn memprof's domain errors into a message on stderr and their exit code."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        from memprof.errors import MemprofError

        try:
            return func(*args, **kwargs)
        except MemprofError as exc:
            typer.echo(
                f"error: {exc}" if not getattr(exc, "problems", None) else str(exc), err=True
            )
            raise typer.Exit(exc.exit_code) from None

    return wrapper


_register()


def main() -> None:
    """Console entry point (`memprof` and `python -m memprof`)."""
    try:
        app()
    except KeyboardInterrupt:
        sys.exit(130)
