"""Python scenario files: `memprof run/validate/check/list` on a file with @memprof.scenario."""

from __future__ import annotations

import json
import textwrap

from typer.testing import CliRunner

from memprof.cli.app import app
from memprof.scenario import load_scenario
from memprof.scenario.discover import read_summary, scenario_paths

runner = CliRunner()

RELU = '''\
import engine
import memprof


@memprof.scenario(
    variants={"inplace": {"inplace": True}, "out_of_place": {"inplace": False}},
    baseline="out_of_place",
    device="cpu",
    expect={
        "inplace": {"peak_allocated": "64 MiB", "peak_over_baseline": 0},
        "out_of_place": {"peak_allocated": "128 MiB", "peak_over_baseline": "64 MiB"},
    },
)
def relu_block(inplace):
    """ReLU on a 1x64x512x512 activation (seed 002), in place or not."""
    x = engine.rand(1, 64, 512, 512)
    if inplace:
        engine.relu_(x)
    else:
        y = engine.relu(x)
'''


def write(tmp_path, text, name="relu_py.py"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def test_python_scenario_reproduces_relu_yaml(tmp_path):
    # given relu.yaml's two variants written as a Python scenario
    path = write(tmp_path, RELU)
    runs = tmp_path / "runs"
    # when memprof runs the file
    res = runner.invoke(app, ["run", str(path), "--runs", str(runs), "--json", "-"])
    # then it passes its expectations: 64 MiB in place, 128 MiB out of place (seed 002)
    assert res.exit_code == 0, res.output
    report = json.loads(res.stdout)
    peaks = {v["name"]: v["peak_allocated_bytes"] for v in report["variants"]}
    assert peaks == {"inplace": 67108864, "out_of_place": 134217728}
    assert report["status"] == "ok" and report["baseline_variant"] == "out_of_place"
    assert report["scenario"]["name"] == "relu_block"
    assert report["scenario"]["path"] == str(path)
    assert all(e["passed"] for v in report["variants"] for e in v["expectations"])
    assert len(list(runs.glob("*.json"))) == 1 and (runs / "history.sqlite").exists()


def test_validate_list_and_check_take_python_files(tmp_path):
    path = write(tmp_path, RELU)
    write(tmp_path, "import os\nprint('not a scenario')\n", name="helper.py")
    res = runner.invoke(app, ["validate", str(path)])
    assert res.exit_code == 0 and "ok (relu_block, 2 variants)" in res.output
    # a directory: only .py files that use the decorator are scenarios
    assert scenario_paths(tmp_path) == [path]
    summary = read_summary(path)
    assert (summary.name, summary.variants) == ("relu_block", ("inplace", "out_of_place"))
    assert summary.description.startswith("ReLU on a 1x64x512x512")
    res = runner.invoke(app, ["list", str(tmp_path)])
    assert res.exit_code == 0 and "relu_block" in res.output
    res = runner.invoke(app, ["check", str(path), "--runs", str(tmp_path / "runs")])
    assert res.exit_code == 0, res.output


def test_an_exception_in_a_variant_fails_it_and_the_report_is_written(tmp_path):
    path = write(
        tmp_path,
        """\
        import engine
        import memprof


        @memprof.scenario(variants={"good": {"fail": False}, "bad": {"fail": True}})
        def maybe(fail):
            x = engine.rand(256)
            if fail:
                raise ValueError("no such layer")
            return x
        """,
    )
    runs = tmp_path / "runs"
    res = runner.invoke(app, ["run", str(path), "--runs", str(runs), "--json", "-"])
    assert res.exit_code == 1
    report = json.loads(res.stdout)
    status = {v["name"]: v["status"] for v in report["variants"]}
    assert status == {"good": "ok", "bad": "error"}
    bad = report["variants"][1]
    assert bad["error"]["type"] == "ValueError"
    assert bad["error"]["message"] == f"no such layer (at {path}:9)"
    assert bad["peak_allocated_bytes"] == 1024  # measured up to the failure
    assert len(list(runs.glob("*.json"))) == 1


def _problems(tmp_path, text):
    path = write(tmp_path, text, name="broken.py")
    res = runner.invoke(app, ["validate", str(path)])
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output
    return path, res.output


def test_errors_in_the_file_name_file_and_line(tmp_path):
    path, out = _problems(tmp_path, "import memprof\n\ndef f(:\n    pass\n")
    assert f"{path}:3" in out and "Python syntax error" in out
    path, out = _problems(tmp_path, "import memprof\nimport engine\n\nx = 1 / 0\n")
    assert f"{path}:4: loading the file raised ZeroDivisionError" in out
    path, out = _problems(
        tmp_path,
        """\
        import memprof


        @memprof.scenario(variants={"a": {"n": 1}}, baseline="b")
        def f(n):
            pass
        """,
    )
    assert f"{path}:4: baseline: expected a variant name (a), found 'b'" in out
    path, out = _problems(
        tmp_path,
        """\
        import memprof


        @memprof.scenario(variants={"a": {"m": 1}})
        def f(n):
            pass
        """,
    )
    assert f"{path}:4: variants['a']: f() cannot take" in out
    path, out = _problems(
        tmp_path,
        """\
        import memprof


        @memprof.scenario(variants={"a": {}}, expect={"a": {"peak_allocated": "lots"}})
        def f():
            pass
        """,
    )
    assert f"{path}:4: expect['a']: peak_allocated" in out
    path, out = _problems(tmp_path, "import memprof\n\ndef f():\n    pass\n")
    assert f"{path}:1: expected a function decorated @memprof.scenario" in out
    path, out = _problems(
        tmp_path,
        """\
        import memprof


        @memprof.scenario(variant={"a": {}})
        def f():
            pass
        """,
    )
    assert f"{path}:4: @memprof.scenario got an unknown argument 'variant'" in out


def test_variant_and_device_overrides(tmp_path):
    path = write(tmp_path, RELU)
    sc = load_scenario(path, variants=["inplace"], device="meta", allocator="caching")
    assert [v.name for v in sc.variants] == ["inplace"]
    report = sc.run()
    (entry,) = report["variants"]
    assert (entry["device"], entry["allocator"]) == ("meta", "caching")
    assert entry["peak_allocated_bytes"] == 67108864  # 64 MiB is a multiple of 2 MiB
