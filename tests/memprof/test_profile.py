"""memprof.profile around engine code: the same figures as the equivalent YAML scenario, node
names from module paths and op call sites, phases from autograd and the optimizer, the report
saved like any run."""

from __future__ import annotations

from pathlib import Path

import pytest

import engine
import memprof
from memprof.reports.schema import Report
from memprof.reports.store import read_report
from memprof.runner import run_scenario

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).name


def _mlp_train(optimizer: str, runs_dir) -> memprof.profile.Profile:
    """scenarios/mlp_train.yaml written as Python: the same modules, inputs and 3 iterations."""
    with memprof.profile("mlp-train-py", device="cpu", runs_dir=runs_dir) as prof:
        x = engine.randn(8, 1024)
        target = engine.randn(8, 1024)
        fc1 = engine.nn.Linear(1024, 1024)
        act = engine.nn.ReLU(inplace=True)
        fc2 = engine.nn.Linear(1024, 1024)
        loss_fn = engine.nn.MSELoss()
        params = list(fc1.parameters()) + list(fc2.parameters())
        if optimizer == "sgd":
            opt = engine.optim.SGD(params, lr=0.01, momentum=0.9)
        else:
            opt = engine.optim.Adam(params, lr=0.001)

        def step():
            h = fc1(x)
            a = act(h)
            y = fc2(a)
            loss = loss_fn(y, target)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

        for _ in range(3):
            step()
    return prof


@pytest.fixture(scope="module")
def yaml_mlp():
    report = run_scenario(ROOT / "scenarios" / "mlp_train.yaml")
    return {v["name"]: v for v in report["variants"]}


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_profile_of_an_mlp_step_matches_the_yaml_scenario(optimizer, yaml_mlp, tmp_path):
    # given the YAML scenario's run and the same training written in Python
    expected = yaml_mlp[optimizer]
    # when it runs inside memprof.profile
    prof = _mlp_train(optimizer, tmp_path)
    # then the peak, what is live at it per category, the baseline and the end state agree
    assert prof.peak == expected["peak_allocated_bytes"]
    assert prof.by_category == expected["peak"]["by_category"]
    entry = prof.report["variants"][0]
    assert entry["baseline_bytes"] == expected["baseline_bytes"] == 8462336
    assert entry["final_allocated_bytes"] == expected["final_allocated_bytes"]
    assert entry["iterations"] == 3
    # by hand (scenarios/mlp_train.yaml): parameters and inputs
    assert prof.by_category["parameter"] == 8396800 and prof.by_category["input"] == 65536
    # nodes: module calls by name, backward and optimizer by phase
    rows = {(r["node"], r["phase"]) for r in entry["ops"]}
    assert {("fc1", "forward"), ("fc2", "forward"), ("loss_fn", "forward")} <= rows
    assert {("<backward>", "backward"), ("<optimizer>", "optimizer")} <= rows
    assert [r["op"] for r in entry["ops"] if r["node"] == "fc1"] == ["Linear"] * 3
    assert {p["name"] for p in entry["phases"]} == {
        "setup",
        "forward",
        "backward",
        "optimizer",
        "release",
    }
    named = {row["tensor"] for row in prof.live_at_peak()}
    assert {"fc1.weight", "fc2.weight", "fc1", "fc2"} <= named
    Report.model_validate(prof.report)


def test_profile_saves_a_report_that_the_commands_read(tmp_path):
    # given a profile with a runs directory
    with memprof.profile("relu-py", runs_dir=tmp_path) as prof:
        x = engine.rand(1, 64, 512, 512)
        y = engine.relu(x)
    # then the report is saved as a run, with its history row
    assert prof.recorded is not None and prof.recorded.ok
    saved = read_report(prof.recorded.path)  # packed columns read back as lists
    assert saved["run_id"] == prof.report["run_id"]
    assert saved["variants"][0]["peak_allocated_bytes"] == 128 * 2**20
    assert (tmp_path / "history.sqlite").exists()
    # the op outside any module is named by its op and call site
    nodes = [r["node"] for r in saved["variants"][0]["ops"]]
    assert nodes == [f"rand @ {_rel(__file__)}:{_line('x = engine.rand(1, 64')}", _relu_node()]
    assert [(r["category"], r["bytes"]) for r in prof.live_at_peak()] == [
        ("input", 64 * 2**20),
        ("activation", 64 * 2**20),
    ]
    del x, y


def _rel(path) -> str:
    import os

    rel = os.path.relpath(path)
    return path if rel.startswith("..") else rel


def _line(snippet: str) -> int:
    for i, line in enumerate(Path(__file__).read_text().splitlines(), 1):
        if snippet in line:
            return i
    raise AssertionError(snippet)


def _relu_node() -> str:
    return f"relu @ {_rel(__file__)}:{_line('y = engine.relu(x)')}"


def test_profile_in_place_relu_peaks_at_the_input():
    with memprof.profile("relu-inplace", save=False) as prof:
        x = engine.rand(1, 64, 512, 512)
        engine.relu_(x)
    assert prof.peak == 64 * 2**20
    assert prof.report["variants"][0]["baseline_bytes"] == 64 * 2**20
    del x


class Block(engine.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = engine.nn.Linear(16, 32)
        self.act = engine.nn.ReLU()
        self.fc2 = engine.nn.Linear(32, 16)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


class Net(engine.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = engine.nn.Sequential(Block(), Block())

    def forward(self, x):
        return self.layers(x).sum()


def test_nested_modules_are_named_by_attribute_path():
    with memprof.profile("net", save=False) as prof:
        model = Net()
        x = engine.randn(4, 16)
        loss = model(x)
        loss.backward()
    ops = prof.report["variants"][0]["ops"]
    nodes = [r["node"] for r in ops if r["phase"] == "forward" and r["allocated_bytes"]]
    assert nodes[:3] == ["layers.0.fc1", "layers.0.act", "layers.0.fc2"]
    # what dies inside a module's forward (fc1's output, once act has run) is freed there
    assert any(r["node"] == "layers.0" and r["freed_bytes"] for r in ops)
    assert "layers.1.fc2" in nodes and "model" in nodes  # the root by its variable: sum()
    names = {r["tensor"] for r in prof.live_at_peak()}
    assert "layers.0.fc1.weight" in names
    del model, x, loss


def test_an_exception_in_the_block_is_recorded_and_raised(tmp_path):
    with pytest.raises(RuntimeError, match="boom"):
        with memprof.profile("fails", runs_dir=tmp_path) as prof:
            x = engine.rand(1024)
            raise RuntimeError("boom")
    entry = prof.report["variants"][0]
    assert entry["status"] == "error" and entry["error"]["message"] == "boom"
    assert prof.recorded.path.exists()
    assert prof.peak == 4096
    del x


def test_out_of_memory_is_status_oom():
    with pytest.raises(engine.OutOfMemoryError):
        with memprof.profile("oom", save=False, memory_limit=1000) as prof:
            engine.empty(1000, dtype=engine.float32)
    assert prof.report["variants"][0]["status"] == "oom"
    assert prof.report["variants"][0]["num_ooms"] == 1


def test_decorator_profiles_each_call():
    @memprof.profile("decorated", save=False, allocator="caching", device="meta")
    def run(n):
        t = engine.empty(n, device="meta")
        return t.shape

    assert run(10000 * 10000) == (10000 * 10000,)
    # the seed's figure: randn(10000, 10000) on meta with the caching model
    assert run.profile.peak == 400556032
    assert run.profile.peak_reserved == 400556032


def test_results_are_refused_before_the_block_ends_and_bad_options_are_named():
    prof = memprof.profile("early", save=False)
    with pytest.raises(RuntimeError, match="not finished"):
        prof.peak  # noqa: B018
    with pytest.raises(ValueError, match="allocator must be one of"):
        memprof.profile("bad", allocator="pool")
    with pytest.raises(ValueError, match="device must be one of"):
        memprof.profile("bad", device="tpu")


def test_the_profile_device_is_the_default_inside_the_block_only():
    with memprof.profile("meta", device="meta", allocator="caching", save=False) as prof:
        t = engine.randn(10000, 10000)  # no device given: the profile's
        assert t.device == engine.device("meta")
    assert engine.get_default_device() == engine.device("cpu")
    assert prof.peak == 400556032  # seed 004 on meta with the caching model
    del t


def test_autograd_grad_and_backward_functions_are_the_backward_phase():
    with memprof.profile("grad", save=False) as prof:
        w = engine.randn(64, 64, requires_grad=True)
        x = engine.randn(8, 64)
        (g,) = engine.autograd.grad((x @ w).sum(), [w])
        engine.autograd.backward([(x @ w).sum()])
    phases = {r["phase"] for r in prof.report["variants"][0]["ops"] if r["node"] == "<backward>"}
    assert phases == {"backward"}
    assert sum(1 for p in prof.report["variants"][0]["phases"] if p["name"] == "backward") == 2
    del g


def test_optimizer_state_is_named_after_its_parameter():
    with memprof.profile("adam-names", save=False) as prof:
        fc = engine.nn.Linear(32, 32)
        opt = engine.optim.Adam(fc.parameters(), lr=0.001)
        fc(engine.randn(4, 32)).sum().backward()
        opt.step()
    names = {r["tensor"] for r in prof.report["variants"][0]["peak"]["live"]}
    assert {"fc.weight.exp_avg", "fc.weight.exp_avg_sq", "fc.bias.exp_avg"} <= names
    del fc, opt
