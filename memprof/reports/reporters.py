"""One reporter interface, as memray's reporters share one: every way of showing a report
(terminal, JSON, HTML, Chrome trace, PyTorch snapshot) is a `Reporter` that turns the report
into text or bytes, with a default file suffix and a hint for what to open it with.

>>> reporter = get_reporter("trace")
>>> written = reporter.write(report, "run.trace.json")
>>> written.describe()
'wrote run.trace.json (12.3 KiB); open it in https://ui.perfetto.dev'

Each reporter imports its renderer only when used, so listing them costs nothing.
"""

from __future__ import annotations

import importlib
import io
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from memprof.reports.types import Report


@dataclass(frozen=True)
class Written:
    path: Path
    size: int
    hint: str = ""

    def describe(self) -> str:
        from memprof.units import format_bytes

        return (
            f"wrote {self.path} ({format_bytes(self.size)}){'; ' + self.hint if self.hint else ''}"
        )


@dataclass(frozen=True)
class Reporter:
    """name: the format's name (`memprof report --NAME`); suffix: the default file suffix;
    render: 'module:function' taking the report and returning str (text) or bytes; hint: what
    to open the file with."""

    name: str
    suffix: str
    render_target: str
    hint: str = ""
    description: str = ""

    def render(self, report: Report) -> str | bytes:
        module, _, func = self.render_target.partition(":")
        function: Callable[[Report], str | bytes] = getattr(importlib.import_module(module), func)
        return function(report)

    def write(self, report: Report, path: str | os.PathLike) -> Written:
        """Render and write atomically; a path that cannot be written is InvalidInput naming it."""
        data = self.render(report)
        path = Path(path)
        if isinstance(data, str):
            from memprof.reports.store import write_output

            write_output(path, data)
            size = len(data.encode())
        else:
            write_bytes(path, data)
            size = len(data)
        return Written(path, size, self.hint)


def write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """Bytes written atomically (a temporary file beside, renamed over the path)."""
    import tempfile

    from memprof.errors import InvalidInput
    from memprof.reports.store import output_problem

    path = Path(path)
    problem = output_problem(path)
    if problem:
        raise InvalidInput(problem)
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except OSError as exc:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)
        raise InvalidInput(f"{path}: cannot write: {exc.strerror or exc}") from None
    return path


def render_terminal_text(report: Report, *, top: int | None = 5, width: int = 120) -> str:
    """The terminal summary (memprof.reports.terminal.render) as plain text."""
    from rich.console import Console

    from memprof.reports import terminal

    buf = io.StringIO()
    console = Console(file=buf, width=width, highlight=False, color_system=None)
    terminal.render(report, console, top=top)
    return buf.getvalue()


def render_json(report: Report) -> str:
    from memprof.reports.store import dumps_report

    return dumps_report(report)


REPORTERS: dict[str, Reporter] = {
    r.name: r
    for r in (
        Reporter(
            "terminal",
            ".txt",
            "memprof.reports.reporters:render_terminal_text",
            description="the table `memprof run` prints",
        ),
        Reporter(
            "json",
            ".json",
            "memprof.reports.reporters:render_json",
            description="the report itself (docs/report-format.md)",
        ),
        Reporter(
            "html",
            ".html",
            "memprof.reports.html:render_html",
            hint="it opens with no network",
            description="one offline page with the dashboard's charts",
        ),
        Reporter(
            "trace",
            ".trace.json",
            "memprof.reports.trace:render_trace",
            hint="open it in https://ui.perfetto.dev",
            description="Chrome Trace Event JSON: memory counters, phases, nodes",
        ),
        Reporter(
            "snapshot",
            ".pickle",
            "memprof.reports.snapshot:render_snapshot",
            hint="drop it on https://pytorch.org/memory_viz (variant i is device i)",
            description="a PyTorch memory snapshot (torch.cuda.memory._snapshot() format)",
        ),
    )
}


def get_reporter(name: str) -> Reporter:
    try:
        return REPORTERS[name]
    except KeyError:
        from memprof.errors import InvalidInput

        raise InvalidInput(
            f"no reporter {name!r}; expected one of {', '.join(REPORTERS)}"
        ) from None


__all__ = ["REPORTERS", "Reporter", "Written", "get_reporter", "render_terminal_text"]
