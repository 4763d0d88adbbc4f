"""Builds the Typer app. Each command lives in its own module; heavy imports stay inside them.

Domain errors (memprof.errors.MemprofError) become a message on stderr and an exit code here,
in one place, so no command prints a traceback for bad input.
"""

from __future__ import annotations

import functools
import importlib
import sys

import typer

app = typer.Typer(
    name="memprof",
    help="Where the memory of a tensor program goes, and what in-place operations save.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

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
]


def _register() -> None:
    for name, module, func in COMMANDS:
        mod = importlib.import_module(f"memprof.cli.{module}")
        app.command(name)(_reporting_errors(getattr(mod, func)))


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
