"""Backward as one row per backward node (ReluBackward0, AddmmBackward0, ...), named as torch
names them, in the per-node table and on the timeline; not one `<backward>` row."""

from __future__ import annotations

import textwrap

import pytest

from memprof.runner import run_scenario

SCENARIO = """\
name: bw
inputs:
  x: {shape: [8, 16], init: randn}
modules:
  fc: {type: Linear, in_features: 16, out_features: 32}
program:
  - {id: h, module: fc, in: x}
  - {id: a, op: relu, in: h}
  - {id: loss, op: sum, in: a}
phases:
  - forward
  - backward: loss
iterations: 2
"""


@pytest.fixture(scope="module")
def variant(tmp_path_factory):
    path = tmp_path_factory.mktemp("bw") / "bw.yaml"
    path.write_text(textwrap.dedent(SCENARIO))
    return run_scenario(path)["variants"][0]


def test_each_backward_node_has_its_own_row(variant):
    rows = [o for o in variant["ops"] if o["phase"] == "backward" and o["iteration"] == 0]
    nodes = [o["node"] for o in rows]
    # the seed made, the graph in order, the seed freed as backward returns (torch's lifetime)
    assert nodes == ["<backward>", "ReluBackward0", "AddmmBackward0", "<backward>"]
    assert rows[-1]["freed_bytes"] == 4 and rows[-1]["allocated_bytes"] == 0
    by = {o["node"]: o for o in rows[1:-1]}
    # relu's gradient: one [8, 32] float32 result (1 KiB)
    assert by["ReluBackward0"]["allocated_bytes"] == 8 * 32 * 4
    # addmm: grad of the weight [32, 16] and the bias [32] (2176 bytes) in this run
    assert by["AddmmBackward0"]["allocated_bytes"] == 32 * 16 * 4 + 32 * 4
    assert all(o["op"] == "backward" and o["duration_s"] >= 0 for o in rows)
    starts = [o["start_s"] for o in rows]
    assert starts == sorted(starts)


def test_backward_rows_add_up_to_the_whole_backward(variant):
    t = variant["timeline"]
    events = [
        (a, b)
        for a, b, p, k in zip(t["action"], t["bytes"], t["phase"], t["iteration"], strict=True)
        if p == "backward" and k == 1
    ]
    rows = [o for o in variant["ops"] if o["phase"] == "backward" and o["iteration"] == 1]
    assert sum(o["allocated_bytes"] for o in rows) == sum(b for a, b in events if a == "alloc")
    assert sum(o["freed_bytes"] for o in rows) == sum(b for a, b in events if a == "free")


def test_the_timeline_names_backward_events_by_their_node(variant):
    t = variant["timeline"]
    names = {n for n, p in zip(t["node"], t["phase"], strict=True) if p == "backward"}
    # the second iteration adds the new gradients to the parameters' .grad: AccumulateGrad
    assert names == {"<backward>", "ReluBackward0", "AddmmBackward0", "AccumulateGrad"}


def test_backward_node_names_are_torchs(variant):
    torch = pytest.importorskip("torch")
    x = torch.randn(8, 16)
    loss = torch.relu(torch.nn.Linear(16, 32)(x)).sum()
    seen, stack = set(), [loss.grad_fn]
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        stack += [f for f, _ in node.next_functions]
    torch_names = {type(n).__name__ for n in seen}
    ours = {o["node"] for o in variant["ops"] if o["phase"] == "backward"} - {"<backward>"}
    assert ours <= torch_names
