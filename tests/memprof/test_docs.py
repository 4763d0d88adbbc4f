"""What a newcomer reads: the README starts with a venv and says what ./scripts/test installs;
user-facing docs name the in-place guides by what they are, not by internal labels; no file
points outside the repository; docs/architecture.md names real modules; the name rule message
matches the schema; the strict stale-read error type is documented."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from typer.testing import CliRunner

from memprof.cli.app import app

ROOT = Path(__file__).resolve().parents[2]
USER_FACING = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))] + sorted(
    (ROOT / "scenarios").glob("*.yaml")
)


def test_the_readme_starts_with_a_venv_then_the_two_commands():
    text = (ROOT / "README.md").read_text()
    block = text.split("```bash\n", 1)[1].split("```", 1)[0].splitlines()
    assert block[0].startswith("python3 -m venv .venv && . .venv/bin/activate")
    assert block[1].startswith("pip install -e . && memprof run scenarios/relu.yaml")
    assert block[2].startswith("./scripts/test")
    for thing in ("torch 2.13.0", "test oracle", "chromium", "ruff check"):
        assert thing in text, thing


def test_scripts_test_says_what_it_installs_as_it_goes():
    script = (ROOT / "scripts" / "test").read_text()
    assert re.search(r'echo "install: .*torch', script)
    assert re.search(r"echo \"install: .*chromium", script)


def test_user_facing_docs_do_not_use_internal_seed_labels():
    for path in USER_FACING:
        assert not re.search(r"\bseed \d{3}\b", path.read_text(), re.I), path


def test_no_tracked_file_points_outside_the_repository():
    files = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    outside = re.compile(r"/work/|\.\./shared/|\bshared/seeds\b|\bshared/reference\b")
    offenders = []
    for name in files:
        path = ROOT / name
        if path.suffix not in {".md", ".py", ".yaml", ".yml", ".toml", ".html", ".js", ".txt"}:
            continue
        if path.is_file() and outside.search(path.read_text(errors="replace")):
            offenders.append(name)
    offenders = [n for n in offenders if n != "tests/memprof/test_docs.py"]
    assert offenders == []


def test_architecture_names_modules_that_exist():
    text = (ROOT / "docs" / "architecture.md").read_text()
    named = set(re.findall(r"`((?:scenario|runner|reports|check|cli)/[a-z_]+\.py)`", text))
    assert len(named) >= 10
    for rel in named:
        assert (ROOT / "memprof" / rel).is_file(), rel
    for floor in ("engine/", "memprof/", "web/"):
        assert floor in text


def test_the_scenario_name_rule_message_matches_the_schema(tmp_path):
    path = tmp_path / "n.yaml"
    path.write_text(
        'name: "-bad name"\ninputs:\n  x: {shape: [2], init: rand}\n'
        "program:\n  - {id: a, op: relu, in: x}\n"
    )
    res = CliRunner().invoke(app, ["validate", str(path)])
    assert res.exit_code == 2
    assert (
        f"{path}:1:7: expected a name of letters, digits, _, - and . (not starting with - or .), "
        "found '-bad name'"
    ) in res.output
    # what the message says is allowed, the schema allows
    good = tmp_path / "g.yaml"
    good.write_text(path.read_text().replace('"-bad name"', "0relu-v1.2_x"))
    assert CliRunner().invoke(app, ["validate", str(good)]).exit_code == 0


def test_the_strict_stale_read_error_type_is_documented():
    text = (ROOT / "docs" / "scenarios.md").read_text()
    assert "StaleReadError" in text
    from memprof.runner.execute import StaleReadError

    assert StaleReadError.__name__ in text
