"""Domain errors. The CLI turns them into messages and exit codes in one place (cli/app.py)."""

from __future__ import annotations


class MemprofError(Exception):
    """An error meant for the user: printed without a traceback, with an exit code."""

    exit_code = 2

    def __init__(self, message: str, *, exit_code: int | None = None):
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code


class InvalidInput(MemprofError):
    """Bad scenario file, bad option, missing file: exit 2. `problems` are `file:line:col: msg` lines."""

    exit_code = 2

    def __init__(self, message: str, problems: list[str] | None = None):
        super().__init__(message)
        self.problems = list(problems or [])

    def __str__(self) -> str:
        if self.problems:
            return "\n".join(self.problems)
        return super().__str__()


class CheckFailed(MemprofError):
    """An expectation, budget or regression failed: exit 1."""

    exit_code = 1
