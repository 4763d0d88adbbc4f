"""Issue 10's last scenario ops, run from YAML: expand / expand_as are views (no memory),
where takes a scalar, the new_* factories and zeros_like family allocate exactly their result,
randint needs no input, and the random fills write their input in place for free."""

from __future__ import annotations

import yaml

from memprof.runner import run_scenario


def _run(tmp_path, program, inputs):
    doc = {"name": "ops", "device": "meta", "inputs": inputs, "program": program}
    path = tmp_path / "ops.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    [variant] = run_scenario(path)["variants"]
    assert variant["status"] == "ok", variant["error"]
    return {row["node"]: row for row in variant["ops"]}


def test_views_factories_and_fills_cost_what_torch_charges(tmp_path):
    rows = _run(
        tmp_path,
        [
            {"id": "wide", "op": "expand", "in": "b", "args": {"size": [64, 256]}},
            {"id": "as", "op": "expand_as", "in": ["b", "x"]},
            {"id": "w", "op": "where", "in": ["mask", "x"], "args": {"other_value": -1.0}},
            {"id": "z", "op": "zeros_like", "in": "x"},
            {"id": "f", "op": "full_like", "in": "x", "args": {"fill_value": 2.0}},
            {"id": "n", "op": "new_zeros", "in": "x", "args": {"size": [8, 8]}},
            {"id": "ids", "op": "randint", "args": {"high": 100, "size": [64]}},
            {"id": "fill", "op": "normal_", "in": "z"},
        ],
        {
            "x": {"shape": [64, 256]},
            "b": {"shape": [1, 256]},
            "mask": {"shape": [64, 256], "init": "randint", "high": 2, "dtype": "bool"},
        },
    )
    x_bytes = 64 * 256 * 4
    assert rows["wide"]["allocated_bytes"] == 0 and rows["as"]["allocated_bytes"] == 0
    assert rows["w"]["allocated_bytes"] == x_bytes
    assert rows["z"]["allocated_bytes"] == x_bytes and rows["f"]["allocated_bytes"] == x_bytes
    assert rows["n"]["allocated_bytes"] == 8 * 8 * 4
    assert rows["ids"]["allocated_bytes"] == 64 * 8  # int64
    assert rows["fill"]["inplace"] is True and rows["fill"]["allocated_bytes"] == 0


def test_every_engine_optimizer_is_a_scenario_optimizer(tmp_path):
    import engine.optim
    from memprof.scenario.catalog import OPTIMIZERS

    exported = {
        n
        for n in engine.optim.__all__
        if isinstance(getattr(engine.optim, n), type) and n != "Optimizer"
    }
    assert set(OPTIMIZERS) == exported >= {"SGD", "Adam", "AdamW", "RMSprop", "Adagrad"}
    params, x = (8 * 8 + 8) * 4, 4 * 8 * 4
    # per parameter tensor its state after the step (gradients freed): square_avg / sum /
    # two moments, the parameter's size; Adafactor's (8, 8) weight row_var (8, 1) and col_var
    # (1, 8), its (8,) bias a variance (8,); Rprop prev and step_size; ASGD ax and step, eta,
    # mu (4 bytes each, on the device). The other 4-byte steps (and NAdam's mu_product) live on
    # the cpu, as PyTorch's (not capturable), so the meta device does not hold them
    state_bytes = {
        "RMSprop": params,
        "Adagrad": params,
        "Adafactor": (8 + 8 + 8) * 4,
        "NAdam": 2 * params,
        "RAdam": 2 * params,
        "Adamax": 2 * params,
        "Adadelta": 2 * params,
        "Rprop": 2 * params,
        "ASGD": params + 2 * 3 * 4,
    }
    for opt, state in state_bytes.items():
        doc = {
            "name": "opt",
            "device": "meta",
            "inputs": {"x": {"shape": [4, 8]}},
            "modules": {"fc": {"type": "Linear", "in_features": 8, "out_features": 8}},
            "program": [
                {"id": "y", "module": "fc", "in": "x"},
                {"id": "loss", "op": "sum", "in": "y"},
            ],
            "phases": ["forward", {"backward": "loss"}, {"optimizer": {"type": opt}}],
        }
        path = tmp_path / f"{opt}.yaml"
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        [variant] = run_scenario(path)["variants"]
        assert variant["status"] == "ok", variant["error"]
        assert variant["final_allocated_bytes"] == x + params + state, opt
