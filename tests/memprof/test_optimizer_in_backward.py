"""`optimizer: {..., in_backward: true}`: PyTorch's optimizer step in backward (one optimizer per
parameter, stepped and zeroed in its post-accumulate-grad hook). The scenario's blocks, in
order, are those torch's CPU profiler shows for the same program written in torch, its peak is
torch's, and it is lower than the plain optimizer's by a gradient."""

from __future__ import annotations

import textwrap

import pytest

from memprof.runner import run_scenario
from tests.engine.test_memory_vs_torch import _sequence, torch_peak, torch_sequence

torch = pytest.importorskip("torch")

SCENARIO = """\
name: fused
device: cpu
inputs:
  x: {shape: [8, 256], init: randn}
  target: {shape: [8, 128], init: randn}
modules:
  fc1: {type: Linear, in_features: 256, out_features: 512}
  act: {type: ReLU}
  fc2: {type: Linear, in_features: 512, out_features: 128}
  loss_fn: {type: MSELoss}
program:
  - {id: h, module: fc1, in: x}
  - {id: a, module: act, in: h}
  - {id: y, module: fc2, in: a}
  - {id: loss, module: loss_fn, in: [y, target]}
phases:
  - forward
  - backward: loss
  - optimizer: $optimizer
iterations: 3
variants:
  adamw: {optimizer: {type: AdamW, lr: 0.001}}
  adamw_in_backward: {optimizer: {type: AdamW, lr: 0.001, in_backward: true}}
  sgd_in_backward: {optimizer: {type: SGD, lr: 0.01, momentum: 0.9, in_backward: true}}
  sgd_in_backward_no_zero: {optimizer: {type: SGD, lr: 0.01, in_backward: true, zero_grad: false}}
"""

OPTS = {
    "adamw": ("AdamW", {"lr": 0.001}, False, True),
    "adamw_in_backward": ("AdamW", {"lr": 0.001}, True, True),
    "sgd_in_backward": ("SGD", {"lr": 0.01, "momentum": 0.9}, True, True),
    "sgd_in_backward_no_zero": ("SGD", {"lr": 0.01}, True, False),
}


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    path = tmp_path_factory.mktemp("fused") / "fused.yaml"
    path.write_text(textwrap.dedent(SCENARIO))
    return {v["name"]: v for v in run_scenario(path)["variants"]}


def _torch_region(name):
    """The scenario's three iterations in torch (made outside the region: inputs, modules)."""
    kind, kwargs, in_backward, zero = OPTS[name]
    nn = torch.nn
    x, target = torch.randn(8, 256), torch.randn(8, 128)
    fc1, fc2 = nn.Linear(256, 512), nn.Linear(512, 128)
    params = [*fc1.parameters(), *fc2.parameters()]
    if in_backward:
        opts = {p: getattr(torch.optim, kind)([p], **kwargs) for p in params}

        def hook(p):
            opts[p].step()
            if zero:
                opts[p].zero_grad(set_to_none=True)

        for p in params:
            p.register_post_accumulate_grad_hook(hook)
    else:
        opt = getattr(torch.optim, kind)(params, **kwargs)

    def region():
        for _ in range(3):  # (a scenario's bound names live until the iteration ends)
            h = fc1(x)
            a = torch.relu(h)
            y = fc2(a)
            loss = nn.functional.mse_loss(y, target)
            loss.backward()
            if not in_backward:
                opt.step()
                opt.zero_grad(set_to_none=True)
            del h, a, y, loss

    return region


def _report_sequence(variant):
    t = variant["timeline"]
    events = [
        (b if a == "alloc" else -b, s)
        for a, b, s, p in zip(t["action"], t["requested"], t["storage"], t["phase"], strict=True)
        if p != "setup"
    ]
    return _sequence(events, 64)


@pytest.mark.parametrize("name", list(OPTS))
def test_blocks_in_order_as_torch(report, name):
    assert _report_sequence(report[name]) == torch_sequence(_torch_region(name))


def test_in_backward_lowers_the_peak_as_torch(report):
    plain, fused = report["adamw"], report["adamw_in_backward"]
    saved = plain["peak_allocated_bytes"] - fused["peak_allocated_bytes"]
    assert saved == torch_peak(_torch_region("adamw")) - torch_peak(
        _torch_region("adamw_in_backward")
    )
    assert saved > 0
    # the same optimizer state in the end, and no gradient left
    assert fused["final_allocated_bytes"] == plain["final_allocated_bytes"]


def test_the_hooks_steps_are_optimizer_work_inside_backward(report):
    v = report["adamw_in_backward"]
    t = v["timeline"]
    spans = [p for p in v["phases"] if p["name"] == "optimizer"]
    assert len(spans) == 3 and all(p["end_index"] == p["start_index"] for p in spans)
    rows = list(
        zip(
            t["action"],
            t["category"],
            t["tensor"],
            t["phase"],
            t["node"],
            t["op"],
            t["iteration"],
            strict=True,
        )
    )
    state = [r for r in rows if r[0] == "alloc" and r[1] == "optimizer_state" and r[6] == 0]
    # run by AccumulateGrad's hooks, attributed to the optimizer
    assert state and {(r[3], r[4]) for r in state} == {("optimizer", "AccumulateGrad")}
    named = {r[2] for r in state if r[2]}
    assert {"fc1.weight.exp_avg", "fc1.weight.exp_avg_sq", "fc2.bias.exp_avg"} <= named
    # the step's own temporaries (sqrt, div) are temporary, as in a plain optimizer phase
    temps = {r[5] for r in rows if r[0] == "alloc" and r[1] == "temporary" and r[3] == "optimizer"}
    plain = report["adamw"]["timeline"]
    plain_temps = {
        o
        for a, c, p, o in zip(
            plain["action"], plain["category"], plain["phase"], plain["op"], strict=True
        )
        if a == "alloc" and c == "temporary" and p == "optimizer"
    }
    assert temps == plain_temps and temps
