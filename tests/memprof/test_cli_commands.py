"""The CLI through Typer's CliRunner (and a real subprocess for --help): exit codes and output."""

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from memprof.cli.app import app

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()

RELU = """\
# yaml-language-server: $schema=../memprof/schemas/scenario.schema.json
name: relu-cli
description: relu in and out of place
inputs:
  x: {shape: [1, 4, 64, 64], init: rand}
program:
  - {id: act, op: relu, in: x, out: y, inplace: $inplace}
variants:
  inplace: {inplace: true}
  out_of_place: {inplace: false}
baseline: out_of_place
expect:
  inplace: {peak_allocated: 64 KiB}
  out_of_place: {peak_allocated: $peak}
"""


def write(tmp_path, text, name="relu.yaml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def good(tmp_path, peak="128 KiB"):
    return write(tmp_path, RELU.replace("$peak", peak))


def test_run_prints_the_table_and_saves_the_report(tmp_path):
    res = runner.invoke(app, ["run", str(good(tmp_path)), "--out-dir", str(tmp_path / "runs")])
    assert res.exit_code == 0, res.output
    for text in (
        "relu-cli",
        "inplace",
        "out_of_place",
        "64.00 KiB",
        "128.00 KiB",
        "saves 64.00 KiB (50.0%)",
        "baseline",
        "saving: peak allocated against out_of_place",
        "(cpu via numpy, exact allocator)",
        "freed in place  y  64.00 KiB (activation; live at out_of_place's peak)",
        "in place: act free",
    ):
        assert text in res.output
    [saved] = (tmp_path / "runs").glob("*.json")
    assert json.loads(saved.read_text())["scenario"]["name"] == "relu-cli"


def test_run_exits_1_when_an_expectation_fails(tmp_path):
    res = runner.invoke(
        app, ["run", str(good(tmp_path, peak="100 KiB")), "--out-dir", str(tmp_path / "r")]
    )
    assert res.exit_code == 1
    assert (
        "expectation failed (out_of_place): peak_allocated == 100.00 KiB (actual 128.00 KiB)"
        in res.output
    )


def test_run_exits_2_on_invalid_input_with_no_traceback(tmp_path):
    bad = write(tmp_path, RELU.replace("op: relu", "op: rleu").replace("$peak", "128 KiB"))
    res = runner.invoke(app, ["run", str(bad), "--out-dir", str(tmp_path / "r")])
    assert res.exit_code == 2
    # one line naming the place, the nearest ops (the catalog decides how many) and the typo
    [line] = res.output.strip().splitlines()
    assert line.startswith(f"{bad}:7:19: expected a known op (did you mean 'relu'")
    assert line.endswith("), found 'rleu'")
    assert "Traceback" not in res.output
    assert not (tmp_path / "r").exists()


def test_run_json_to_stdout_is_pure_json(tmp_path):
    res = runner.invoke(
        app,
        [
            "run",
            str(good(tmp_path)),
            "--json",
            "-",
            "--variant",
            "inplace",
            "--out-dir",
            str(tmp_path / "runs"),
        ],
    )
    assert res.exit_code == 0
    report = json.loads(res.stdout)
    assert [v["name"] for v in report["variants"]] == ["inplace"]


def test_run_json_file_and_quiet(tmp_path):
    out = tmp_path / "out.json"
    res = runner.invoke(
        app,
        [
            "run",
            str(good(tmp_path)),
            "--json",
            str(out),
            "--quiet",
            "--out-dir",
            str(tmp_path / "runs"),
        ],
    )
    assert res.exit_code == 0 and res.output == ""
    assert json.loads(out.read_text())["status"] == "ok"


def test_run_option_errors_exit_2(tmp_path):
    res = runner.invoke(app, ["run", str(good(tmp_path)), "--device", "gpu"])
    assert res.exit_code == 2
    assert "--device: expected one of cpu, cuda, meta, auto" in res.output
    res = runner.invoke(app, ["run", str(tmp_path / "missing.yaml")])
    assert res.exit_code == 2 and "no such scenario file" in res.output


def test_validate(tmp_path):
    res = runner.invoke(app, ["validate", str(good(tmp_path))])
    assert res.exit_code == 0 and "ok (relu-cli, 2 variants)" in res.output
    bad = write(
        tmp_path,
        RELU.replace("shape: [1, 4, 64, 64]", "shape: [1, 4, 64, -1]").replace("$peak", "128 KiB"),
        "bad.yaml",
    )
    res = runner.invoke(app, ["validate", str(bad)])
    assert res.exit_code == 2
    assert res.output.strip() == f"{bad}:5:25: expected a number >= 0, found -1"


def test_schema_prints_the_shipped_schema(tmp_path):
    res = runner.invoke(app, ["schema"])
    assert res.exit_code == 0
    shipped = json.loads((ROOT / "memprof/schemas/scenario.schema.json").read_text())
    assert json.loads(res.stdout) == shipped
    res = runner.invoke(app, ["schema", "--report", "-o", str(tmp_path / "r.json")])
    assert json.loads((tmp_path / "r.json").read_text())["title"] == "Report"


def test_list(tmp_path):
    good(tmp_path)
    (tmp_path / "sub").mkdir()
    write(tmp_path, "name: [unclosed\n", "sub/broken.yaml")
    res = runner.invoke(app, ["list", str(tmp_path)])
    assert res.exit_code == 0
    assert "relu-cli" in res.output and "relu in and out of place" in res.output
    assert "broken" in res.output and "cannot read: YAML syntax error" in res.output
    assert runner.invoke(app, ["list", str(tmp_path / "nope")]).exit_code == 2


def report_with(tmp_path, name, peaks):
    from tests.memprof.report_factory import write_report

    return write_report(tmp_path / name, peaks)


def test_compare_shows_delta_and_fails_past_the_limit(tmp_path):
    a = report_with(tmp_path, "a.json", {"inplace": 1000, "out_of_place": 2000, "gone": 5})
    b = report_with(tmp_path, "b.json", {"inplace": 1040, "out_of_place": 2200, "new": 7})
    res = runner.invoke(app, ["compare", str(a), str(b)])
    assert res.exit_code == 0
    assert (
        "+4.0%" in res.output
        and "+10.0%" in res.output
        and "only in the first report" in res.output
    )
    res = runner.invoke(app, ["compare", str(a), str(b), "--max-increase", "5%"])
    assert res.exit_code == 1
    assert (
        "out_of_place (+10.0%)" in res.output
        and "inplace (+4.0%)" not in res.output.split("error:")[-1]
    )


def test_compare_rejects_what_is_not_a_report(tmp_path):
    (tmp_path / "x.json").write_text("{not json")
    res = runner.invoke(app, ["compare", str(tmp_path / "x.json"), str(tmp_path / "x.json")])
    assert res.exit_code == 2
    assert res.output.strip() == (
        f"error: {tmp_path / 'x.json'}:1:2: cannot read the report: "
        "invalid JSON (Expecting property name enclosed in double quotes)"
    )
    a = report_with(tmp_path, "a.json", {"v": 1})
    res = runner.invoke(app, ["compare", str(a), str(a), "--max-increase", "lots"])
    assert res.exit_code == 2 and "expected a percentage" in res.output


def test_help_imports_no_engine_numpy_yaml_or_pydantic():
    code = (
        "import sys; from memprof.cli.app import app; "
        "print(sorted(m for m in ('engine', 'numpy', 'yaml', 'pydantic', 'fastapi') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True
    )
    assert out.stdout.strip() == "[]"


def test_module_entry_point_runs_a_scenario(tmp_path):
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "memprof",
            "run",
            str(good(tmp_path)),
            "--quiet",
            "--out-dir",
            str(tmp_path / "runs"),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr
    assert len(list((tmp_path / "runs").glob("*.json"))) == 1


@pytest.mark.parametrize("args", [["--help"], ["run", "--help"], ["compare", "--help"]])
def test_help_works(args):
    assert runner.invoke(app, args).exit_code == 0


# --- directories, shared options and outputs that cannot be written --------------------------


def test_run_and_validate_take_a_directory_of_scenarios(tmp_path):
    (tmp_path / "s").mkdir()
    good(tmp_path / "s")
    (tmp_path / "s" / ".hidden").mkdir()
    write(tmp_path / "s" / ".hidden", "name: [unclosed\n", "skipped.yaml")

    res = runner.invoke(app, ["validate", str(tmp_path / "s")])
    assert res.exit_code == 0, res.output
    assert res.output.strip() == f"{tmp_path / 's' / 'relu.yaml'}: ok (relu-cli, 2 variants)"

    res = runner.invoke(
        app, ["run", str(tmp_path / "s"), "--quiet", "--runs", str(tmp_path / "runs")]
    )
    assert res.exit_code == 0, res.output
    assert len(list((tmp_path / "runs").glob("*.json"))) == 1


def test_bad_overrides_are_named_once_each_however_many_scenarios(tmp_path):
    a, b = good(tmp_path), write(tmp_path, RELU.replace("relu-cli", "other"), "b.yaml")

    res = runner.invoke(app, ["run", str(a), str(b), "--device", "gpu", "--allocator", "buddy"])

    assert res.exit_code == 2
    assert res.output.splitlines() == [
        "--device: expected one of cpu, cuda, meta, auto (did you mean 'cpu'?), found 'gpu'",
        "--allocator: expected one of exact, caching, found 'buddy'",
    ]


def test_run_refuses_an_unwritable_json_path_before_running(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")

    res = runner.invoke(
        app,
        [
            "run",
            str(good(tmp_path)),
            "--json",
            str(blocker / "out.json"),
            "--runs",
            str(tmp_path / "runs"),
        ],
    )

    assert res.exit_code == 2
    assert (
        res.output.strip()
        == f"{blocker / 'out.json'}: cannot write: {blocker} is a file, not a directory"
    )
    assert not (tmp_path / "runs").exists()


def test_a_run_whose_history_cannot_be_written_still_shows_and_writes_what_it_measured(tmp_path):
    runs = tmp_path / "runs"
    (runs / "history.sqlite").mkdir(parents=True)  # sqlite cannot open a directory
    out = tmp_path / "out.json"

    res = runner.invoke(app, ["run", str(good(tmp_path)), "--json", str(out), "--runs", str(runs)])

    assert res.exit_code == 2
    assert "relu-cli" in res.stdout and "saves 64.00 KiB (50.0%)" in res.stdout
    assert json.loads(out.read_text())["scenario"]["name"] == "relu-cli"
    [saved] = runs.glob("*.json")
    assert f"{runs}: saved run {saved.stem}, but cannot add it to the history there: " in res.stderr
    assert "Traceback" not in res.output


@pytest.mark.parametrize(
    "command",
    [
        ["report", "{report}", "--html", "{blocker}/page.html"],
        ["report", "{report}", "--trace", "{blocker}/t.json"],
        ["schema", "-o", "{blocker}/schema.json"],
    ],
)
def test_an_output_that_cannot_be_written_is_exit_2_naming_it(tmp_path, command):
    report = report_with(tmp_path, "a.json", {"inplace": 1})
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    args = [a.format(report=report, blocker=blocker) for a in command]

    res = runner.invoke(app, args)

    assert res.exit_code == 2
    assert res.output.startswith(f"error: {args[-1]}: cannot write: ")
    assert "Traceback" not in res.output


def test_compare_finds_run_ids_in_the_runs_directory(tmp_path):
    runs = tmp_path / "runs"
    res = runner.invoke(app, ["run", str(good(tmp_path)), "-q", "--out-dir", str(runs)])
    assert res.exit_code == 0, res.output
    [saved] = runs.glob("*.json")

    res = runner.invoke(app, ["compare", saved.stem, str(saved), "--runs", str(runs)])

    assert res.exit_code == 0, res.output
    assert "128.00 KiB   128.00 KiB" in res.output
    res = runner.invoke(app, ["compare", "no-such-run", str(saved), "--runs", str(runs)])
    assert res.exit_code == 2
    assert res.output.strip() == (
        f"error: no-such-run: no such report file, and no run 'no-such-run' "
        f"in {runs}/ (pass a report's path, or its run id with --runs DIR)"
    )


def test_every_command_with_a_runs_directory_spells_it_the_same_way():
    import typer.main

    commands = typer.main.get_command(app).commands
    with_runs = {
        name
        for name, command in commands.items()
        if any("--runs" in p.opts or "--out-dir" in p.opts for p in command.params)
    }
    assert with_runs == {"run", "check", "report", "compare", "history", "serve"}
    for name in with_runs:
        [option] = [p for p in commands[name].params if "--runs" in p.opts]
        assert option.opts == ["--runs", "--out-dir"], name
        assert str(option.default) == "memprof-runs", name
