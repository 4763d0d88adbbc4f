"""Every shipped scenario, run with its exact expected numbers."""

from pathlib import Path

import pytest

from memprof.runner import run_scenario
from memprof.scenario.discover import scenario_paths

ROOT = Path(__file__).resolve().parents[2]
MiB, GiB = 2**20, 2**30

# scenario file -> variant -> (peak allocated, peak reserved, baseline, final allocated)
EXPECTED = {
    "relu.yaml": {
        "inplace": (67108864, 67108864, 67108864, 67108864),
        "out_of_place": (134217728, 134217728, 67108864, 67108864),
    },
    "relu_10000.yaml": {  # caching model: 400,000,000 bytes occupy a 382.0 MiB block
        "out_of_place": (764 * MiB, 764 * MiB, 382 * MiB, 382 * MiB),
        "inplace": (382 * MiB, 382 * MiB, 382 * MiB, 382 * MiB),
    },
    "scale_backward.yaml": {
        # a, x (12 floats each), loss; backward: seed (held to the end), dy, da, then a.grad
        "nonleaf": (200, 200, 48, 96),
        "leaf": (48, 48, 48, 48),
    },
    "multi_branch.yaml": {
        # (convolution workspace is scratch, reported apart since issue 9)
        "inplace": (592, 592, 400, 400),
        "out_of_place": (688, 688, 400, 400),  # + h, 96 bytes
    },
    "alexnet_stem.yaml": {
        "inplace": (8790024, 8790024, 2501632, 2594816),
        "out_of_place": (11887624, 11887624, 2501632, 2594816),  # + one 4x64x55x55 activation
    },
    "mlp_train.yaml": {
        "sgd": (25387012, 25387012, 8462336, 16859136),
        "adam": (42143760, 42143760, 8462336, 25255952),
        # stepped in backward: fc2's gradients freed by their hooks before fc1's step
        "adam_in_backward": (37969940, 37969940, 8462336, 25255952),
    },
    "optimizer_impls.yaml": {  # P = 33587200 bytes of parameters; baseline P + inputs
        # final: P + 2P of state + inputs + h0..h7 and the loss; fused: + 16 device step counters
        "single": (143101952, 148897792, 33652736, 100827136),  # + a bias's denom
        "foreach": (168296448, 169869312, 33652736, 100827136),  # + P of square roots
        "fused": (134750720, 148897792, 33652736, 100835328),
    },
    "resnet_block.yaml": {  # batch norm's backward on cpu: torch's second grad_input (131072)
        "inplace": (1077144, 1077144, 150032, 168720),
        "out_of_place": (1470360, 1470360, 150032, 168720),  # + r1, s, out: 3 x 131072
    },
    "activation_inplace.yaml": {  # x (16 MiB) + pre + the result, or a clone when in place pays
        **{
            f"act={a},inplace={ip}": (48 * MiB, 48 * MiB, 16 * MiB, 16 * MiB)
            for a in ("LeakyReLU", "ELU", "SELU", "SiLU", "Hardswish", "ReLU6")
            for ip in ("false", "true")
        },
        # keeps the result for backward: in place is free
        "act=LeakyReLU,inplace=true": (32 * MiB, 32 * MiB, 16 * MiB, 16 * MiB),
        "act=ELU,inplace=true": (32 * MiB, 32 * MiB, 16 * MiB, 16 * MiB),
        "act=SELU,inplace=true": (32 * MiB, 32 * MiB, 16 * MiB, 16 * MiB),
    },
    "giant_meta.yaml": {
        "batch=1,inplace=false": (20 * GiB, 20 * GiB, 4 * GiB, 4 * GiB),
        "batch=1,inplace=true": (4 * GiB, 4 * GiB, 4 * GiB, 4 * GiB),
        "batch=4,inplace=false": (80 * GiB, 80 * GiB, 16 * GiB, 16 * GiB),
        "batch=4,inplace=true": (16 * GiB, 16 * GiB, 16 * GiB, 16 * GiB),
    },
}


@pytest.fixture(scope="module")
def reports():
    cache = {}

    def get(name):
        if name not in cache:
            cache[name] = run_scenario(ROOT / "scenarios" / name)
        return cache[name]

    return get


def variants(report):
    return {v["name"]: v for v in report["variants"]}


# the model zoo (issue 10) pins its peaks in its files; tests/memprof/test_zoo.py runs it
ZOO = ("gpt2_small.yaml", "resnet50.yaml", "vit_b16.yaml", "unet_block.yaml")


def test_every_shipped_scenario_is_covered():
    shipped = sorted(p.name for p in scenario_paths(ROOT / "scenarios") if p.name not in ZOO)
    assert shipped == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_numbers_and_expectations(reports, name):
    report = reports(name)
    got = {
        n: (
            v["peak_allocated_bytes"],
            v["peak_reserved_bytes"],
            v["baseline_bytes"],
            v["final_allocated_bytes"],
        )
        for n, v in variants(report).items()
    }
    assert got == EXPECTED[name]
    failed = [
        e["message"] for v in report["variants"] for e in v["expectations"] if not e["passed"]
    ]
    assert failed == []
    assert report["status"] == "ok"
    assert all(v["expectations"] for v in report["variants"])  # every variant checks something


def test_relu_seed_002(reports):
    comp = {r["variant"]: r for r in reports("relu.yaml")["comparison"]["rows"]}
    assert (comp["inplace"]["delta_bytes"], comp["inplace"]["saving_pct"]) == (-67108864, 50.0)


def test_relu_10000_seed_004(reports):
    v = variants(reports("relu_10000.yaml"))
    out = v["out_of_place"]
    [result] = [e for e in out["peak"]["live"] if e["tensor"] == "output"]
    assert result["bytes"] == 400556032 == int(382.0 * MiB)  # the tensor asks for 400,000,000
    assert out["peak_allocated_bytes"] - out["baseline_bytes"] == 382 * MiB
    assert v["inplace"]["peak_allocated_bytes"] - v["inplace"]["baseline_bytes"] == 0
    assert out["device"] == "meta" and out["allocator"] == "caching"


def test_scale_backward_seed_000(reports):
    v = variants(reports("scale_backward.yaml"))
    grad = [e for e in v["nonleaf"]["expectations"] if e["metric"] == "values:a.grad"]
    assert grad == [
        {
            "metric": "values:a.grad",
            "op": "==",
            "expected": 4.0,
            "actual": 4.0,
            "passed": True,
            "message": "every element of a.grad == 4 (actual 4)",
        }
    ]
    leaf = v["leaf"]
    assert leaf["status"] == "error"
    assert leaf["error"] == {
        "type": "RuntimeError",
        "node": "x",
        "message": "a leaf Variable that requires grad is being used in an in-place operation.",
    }


def test_multi_branch_seed_003(reports):
    v = variants(reports("multi_branch.yaml"))
    assert v["inplace"]["warnings"] == [
        {
            "kind": "stale_read",
            "node": "y",
            "other_node": "h",
            "tensor": "x1",
            "iteration": 0,
            "message": "node y reads x1, which node h overwrote in place; it sees h's values",
        }
    ]
    assert v["out_of_place"]["warnings"] == []


def test_alexnet_stem_in_place_saves_one_activation(reports):
    v = variants(reports("alexnet_stem.yaml"))
    saved = v["out_of_place"]["peak_allocated_bytes"] - v["inplace"]["peak_allocated_bytes"]
    assert saved == 4 * 64 * 55 * 55 * 4
    relu = [r for r in v["inplace"]["ops"] if r["node"] == "r"]
    assert [(r["inplace"], r["inplace_cost"], r["allocated_bytes"]) for r in relu] == [
        (True, "free", 0)
    ]
    assert [p["name"] for p in v["inplace"]["phases"]] == [
        "setup",
        "forward",
        "backward",
        "release",
    ]


def test_mlp_train_parameters_gradients_and_optimizer_state(reports):
    v = variants(reports("mlp_train.yaml"))
    P = 2 * (1024 * 1024 + 1024) * 4
    assert v["sgd"]["peak"]["by_category"]["optimizer_state"] == P  # momentum buffers
    assert v["adam"]["peak"]["by_category"]["optimizer_state"] == 2 * P + 4 * 4  # moments + steps
    assert v["adam"]["peak"]["by_category"]["gradient"] == P
    names = {e["tensor"] for e in v["adam"]["peak"]["live"]}
    assert {"fc1.weight.grad", "fc1.weight.exp_avg", "fc1.weight.exp_avg_sq"} <= names
    assert [r["op"] for r in v["sgd"]["ops"] if r["node"] == "<optimizer>"] == [
        "step",
        "zero_grad",
    ] * 3
    assert {p["iteration"] for p in v["sgd"]["phases"] if p["name"] == "optimizer"} == {0, 1, 2}


def test_resnet_block_in_place_saves_three_activations(reports):
    v = variants(reports("resnet_block.yaml"))
    assert (
        v["out_of_place"]["peak_allocated_bytes"] - v["inplace"]["peak_allocated_bytes"]
        == 3 * 131072
    )
    costs = {r["node"]: r["inplace_cost"] for r in v["inplace"]["ops"] if r["inplace"]}
    assert costs == {"r1": "free", "s": "free", "out": "free"}


def test_giant_meta_accounts_80_gib_without_allocating_it():
    report = run_scenario(ROOT / "scenarios" / "giant_meta.yaml")
    assert max(v["peak_allocated_bytes"] for v in report["variants"]) == 80 * GiB
