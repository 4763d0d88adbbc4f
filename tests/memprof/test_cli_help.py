"""Help text a newcomer reads, and what the CLI imports: plain placeholders (`PATH`, `N`), no
type tags (`<list[Path]>`, `<bool>`), paragraphs on one line; `memprof serve` is a command
module like the others and nothing imports `web` until it runs; `validate` does not warn about
a hazard the scenario's `expect` asks for."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap

import pytest
from typer.testing import CliRunner

from memprof.cli.app import COMMANDS, app

runner = CliRunner()
COMMAND_NAMES = [name for name, _, _ in COMMANDS]


@pytest.mark.parametrize("command", [None, *COMMAND_NAMES])
def test_help_has_plain_placeholders_and_no_type_tags(command):
    args = ["--help"] if command is None else [command, "--help"]  # None: `memprof --help`
    res = runner.invoke(app, args, env={"COLUMNS": "200"}, terminal_width=200)
    assert res.exit_code == 0, res.output
    assert not re.search(r"<(list\[|str>|bool>|path>|int|float>|Path>)", res.output), res.output
    for flag in ("--help", "--quiet", "--all", "--open", "--report"):
        for line in res.output.splitlines():
            if f" {flag} " in line:
                # a flag takes no value: its help follows straight after it
                assert re.search(re.escape(flag) + r"(\s+-\w)?\s{2,}[A-Z]", line), line


def test_run_help_names_its_values_plainly():
    res = runner.invoke(app, ["run", "--help"], env={"COLUMNS": "200"}, terminal_width=200)
    text = res.output
    assert re.search(r"--json\s+PATH", text)
    assert re.search(r"--variant\s+NAME", text)
    assert re.search(r"--top\s+N", text)
    assert "SCENARIOS" in text


def test_help_paragraphs_are_not_hard_wrapped():
    res = runner.invoke(app, ["check", "--help"], env={"COLUMNS": "250"}, terminal_width=250)
    joined = (
        "Every variant's expectations and budgets are checked, and its peak against the "
        "baseline of the same scenario and variant."
    )
    assert joined in res.output


def test_nothing_imports_web_or_the_engine_for_help():
    code = textwrap.dedent(
        """
        import sys
        from typer.testing import CliRunner
        from memprof.cli.app import app
        CliRunner().invoke(app, ["serve", "--help"])
        CliRunner().invoke(app, ["--help"])
        print(sorted(m for m in sys.modules if m == "web" or m.startswith(("web.", "engine"))))
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_help_leaves_rich_markdown_and_traceback_unloaded_until_used():
    """`memprof --help` renders without rich.markdown (markdown-it) and rich.traceback
    (pygments, rich.syntax): their stand-ins load the real modules the first time they are
    used, and what they build is the real thing."""
    code = textwrap.dedent(
        """
        import sys
        from typer.testing import CliRunner
        from memprof.cli.app import app
        result = CliRunner().invoke(app, ["--help"])
        assert result.exit_code == 0 and "run" in result.output
        heavy = ("markdown_it", "pygments", "rich.syntax", "rich.pretty")
        print(sorted(m for m in sys.modules if m.startswith(heavy)))
        from rich.traceback import Traceback
        from rich.markdown import Markdown
        try:
            1 / 0
        except ZeroDivisionError as exc:
            tb = Traceback.from_exception(type(exc), exc, exc.__traceback__)
        md = Markdown("# title")
        real = sys.modules["rich.traceback"], sys.modules["rich.markdown"]
        print(type(tb) is real[0].Traceback, type(md) is real[1].Markdown)
        print("pygments" in sys.modules, "markdown_it" in sys.modules)
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split("\n")[:3] == ["[]", "True True", "True True"], out.stdout


def test_serve_is_registered_as_a_command_module_like_the_others():
    assert ("serve", "serve", "serve") in COMMANDS


def test_validate_does_not_warn_about_a_stale_read_the_scenario_expects(tmp_path):
    text = textwrap.dedent(
        """\
        name: stale
        inputs:
          x: {shape: [16], init: rand}
        program:
          - {id: a, op: relu, in: x, out: h, inplace: true}
          - {id: b, op: mul, in: [x, h]}
        expect:
          default: {warnings: {stale_read: $n}}
        """
    )
    asked = tmp_path / "asked.yaml"
    asked.write_text(text.replace("$n", "1"))
    unasked = tmp_path / "unasked.yaml"
    unasked.write_text(text.replace("expect:\n  default: {warnings: {stale_read: $n}}\n", ""))

    res = runner.invoke(app, ["validate", str(asked)])
    assert res.exit_code == 0, res.output
    assert "warning" not in res.output

    res = runner.invoke(app, ["validate", str(unasked)])
    assert res.exit_code == 0, res.output
    assert "warning: node b reads x, which node a overwrote in place" in res.output
