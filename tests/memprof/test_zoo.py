"""The model zoo (issue 10): scenarios/gpt2_small.yaml, resnet50.yaml, vit_b16.yaml and
unet_block.yaml run and meet their pinned expectations; the GPT program at a reduced size
matches PyTorch's CPU profiler, lever by lever (in place, checkpointing, autocast)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import yaml

import engine
from engine.allocator.tracked import get_allocator
from memprof.runner import run_scenario
from memprof.scenario.build import (
    Bindings,
    ProgramHooks,
    build_module,
    forward_options,
    make_input,
    make_optimizer,
    run_forward,
)
from memprof.scenario.validate import load_scenario
from tests.engine.test_autograd_memory_parity import SLACK, Region, torch_region

ROOT = Path(__file__).resolve().parents[2]


def _make_zoo():
    spec = importlib.util.spec_from_file_location("make_zoo", ROOT / "scripts" / "make_zoo.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("make_zoo", mod)
    spec.loader.exec_module(mod)
    return mod


ZOO = _make_zoo()
SMALL = dict(n_layer=2, d=64, n_head=4, seq=32, vocab=100)


def _write(tmp_path, doc, name="s.yaml"):
    path = tmp_path / name
    path.write_text(ZOO.dump(doc))
    return path


# --- the GPT program at a reduced size against PyTorch's CPU profiler ---------------------------


def _engine_step(variant):
    """One training step of the scenario's program through memprof's interpreter, on cpu, after
    a warm-up step (gradients and AdamW state exist, as in the other fidelity tests)."""
    spec = variant.spec
    engine.manual_seed(0)
    inputs = {n: make_input(engine, s, spec.dtype, "cpu") for n, s in spec.inputs.items()}
    modules = {n: build_module(engine, s, "cpu", spec.dtype) for n, s in spec.modules.items()}
    opt = make_optimizer(engine, spec.phases[2].optimizer, modules)
    levers = forward_options(spec, "cpu")

    def step():
        b = Bindings()
        for n, t in inputs.items():
            b.bind(n, t)
        run_forward(spec.program, b, modules, ProgramHooks(), levers)
        b.values["loss"].backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    step()
    return step, inputs, modules


def _torch_step(torch, inputs, modules, inplace, ckpt, precision, n_layer):
    """The same program written in PyTorch with the same module names and weight layouts
    (weights copied from the engine's modules; only their bytes matter here)."""
    import numpy as np
    from torch.utils.checkpoint import checkpoint

    nn, F = torch.nn, torch.nn.functional

    def tensor(t):
        return torch.from_numpy(np.array(t.detach().numpy()))

    def make(name, spec_module):
        m = spec_module
        kind = type(m).__name__
        if kind == "Embedding":
            t = nn.Embedding(m.num_embeddings, m.embedding_dim)
        elif kind == "LayerNorm":
            t = nn.LayerNorm(m.normalized_shape)
        elif kind == "Linear":
            t = nn.Linear(m.in_features, m.out_features)
        elif kind == "MultiheadAttention":
            t = nn.MultiheadAttention(m.embed_dim, m.num_heads, dropout=m.dropout, batch_first=True)
        elif kind == "GELU":
            t = nn.GELU(approximate="tanh")
        elif kind == "Dropout":
            t = nn.Dropout(m.p, inplace=m.inplace)
        else:  # pragma: no cover - the GPT program uses the types above
            raise AssertionError(kind)
        with torch.no_grad():
            for pname, p in t.named_parameters():
                p.copy_(tensor(dict(m.named_parameters())[pname]))
        return t

    mods = {n: make(n, m) for n, m in modules.items()}
    model = nn.ModuleDict(mods)
    ins = {n: tensor(t) for n, t in inputs.items()}
    ins["causal"] = ins["causal"].bool()
    opt = torch.optim.AdamW(model.parameters(), lr=6e-4, weight_decay=0.1)

    def add(a, b):
        return a.add_(b) if inplace else a + b

    # A scenario program is a flat script: every name it binds lives until the step ends (a
    # checkpointed block's own names die when it returns). `held` keeps them the same way.
    held = []

    def block(i, x, mask, keep):
        h = f"h{i}"
        a = keep(mods[f"{h}_ln_1"](x))
        y, _ = mods[f"{h}_attn"](a, a, a, need_weights=False, attn_mask=mask, is_causal=True)
        r1 = keep(add(keep(mods["drop"](keep(y))), x))
        m = keep(mods[f"{h}_ln_2"](r1))
        g = keep(mods[f"{h}_gelu"](keep(mods[f"{h}_c_fc"](m))))
        p = keep(mods[f"{h}_c_proj"](g))
        return keep(add(keep(mods["drop"](p)), r1))

    def forward(keep):
        mask = keep(ins["causal"].triu(1))
        emb = keep(add(keep(mods["wte"](ins["tokens"])), keep(mods["wpe"](ins["pos"]))))
        x = keep(mods["drop"](emb))
        for i in range(n_layer):
            if ckpt:
                x = keep(checkpoint(block, i, x, mask, lambda t: t, use_reentrant=False))
            else:
                x = block(i, x, mask, keep)
        logits = keep(F.linear(keep(mods["ln_f"](x)), mods["wte"].weight))
        vocab = logits.shape[-1]
        flat, labels = keep(logits.reshape(-1, vocab)), keep(ins["targets"].reshape(-1))
        return keep(F.cross_entropy(flat, labels))

    def keep(t):
        held.append(t)
        return t

    def step():  # attention as each picks it by default: torch's CPU flash kernel here
        run()

    def run():
        if precision == "bfloat16":
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = forward(keep)
        else:
            loss = forward(keep)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        del loss
        held.clear()

    step()
    return step


# float32 only: under CPU autocast torch's bf16 kernels (mkldnn matmul) allocate scratch its CUDA
# kernels do not (a lone Linear(64, 256) step: +116 KiB), so bf16 is checked by hand instead
# (tests/memprof/test_scenario_modules.py).
LEVERS = [
    (False, False, "float32"),
    (False, True, "float32"),
    (True, False, "float32"),
    (True, True, "float32"),
]


@pytest.fixture(scope="module")
def small_gpt(tmp_path_factory):
    doc = ZOO.gpt2(
        **SMALL,
        device="cpu",
        allocator="exact",
        dropout=0.0,
        matrix={
            "batch": [2],
            "inplace": [False, True],
            "ckpt": [False, True],
            "precision": ["float32"],
        },
    )
    path = _write(tmp_path_factory.mktemp("gpt"), doc, "gpt_small.yaml")
    return {v.name: v for v in load_scenario(path).variants}


class _WithAttentionTiles(Region):
    """The region's charged bytes plus the CPU flash kernel's per-thread tiles, which the engine
    reports as scratch (device-specific workspace) and torch's profiler sees as allocations."""

    OPS = ("scaled_dot_product_attention", "ScaledDotProductFlashAttentionBackward0")

    def on_scratch(self, event):
        if event.context.get("op") in self.OPS:
            self.total += event.bytes if event.action == "alloc" else -event.bytes
            self.peak = max(self.peak, self.total)


@pytest.mark.torch
@pytest.mark.parametrize("inplace,ckpt,precision", LEVERS)
def test_small_gpt_step_matches_pytorch_profiler(torch, small_gpt, inplace, ckpt, precision):
    name = f"batch=2,inplace={str(inplace).lower()},ckpt={str(ckpt).lower()},precision={precision}"
    step, inputs, modules = _engine_step(small_gpt[name])
    torch.set_num_threads(engine.get_num_threads())  # (the kernel's tiles are per thread)
    region = _WithAttentionTiles()
    with get_allocator("cpu").observing(region):
        step()
    got = (region.peak, region.total)
    torch.manual_seed(0)
    want = torch_region(_torch_step(torch, inputs, modules, inplace, ckpt, precision, 2))
    assert abs(got[0] - want[0]) <= SLACK, f"peak: engine {got[0]}, torch {want[0]}"
    assert abs(got[1] - want[1]) <= SLACK, f"live at end: engine {got[1]}, torch {want[1]}"


# --- the shipped zoo -----------------------------------------------------------------------------

# the variants each test runs: every one where the scenario runs in about a second or two, else a
# reduced matrix (the lever extremes); `memprof run scenarios/X.yaml` runs them all
RUN = {
    "resnet50.yaml": None,
    "unet_block.yaml": None,
    "vit_b16.yaml": [
        "batch=8,inplace=false,ckpt=false,precision=float32",
        "batch=8,inplace=true,ckpt=true,precision=bfloat16",
    ],
    "gpt2_small.yaml": [
        "batch=1,inplace=false,ckpt=false,precision=float32",
        "batch=4,inplace=true,ckpt=true,precision=bfloat16",
    ],
}


def _shipped(fname):
    return yaml.safe_load((ROOT / "scenarios" / fname).read_text())


@pytest.mark.parametrize("fname", sorted(RUN))
def test_shipped_zoo_file_is_the_generated_program(fname):
    # regenerate with: python scripts/make_zoo.py (expectations pinned from a run)
    shipped = _shipped(fname)
    expect = shipped.pop("expect")
    assert shipped == yaml.safe_load(ZOO.dump(ZOO.MODELS[fname]()))
    loaded = load_scenario(ROOT / "scenarios" / fname, check_shapes=False)
    variants = [v.name for v in loaded.variants]
    assert sorted(expect) == sorted(variants)  # every variant's peak is pinned
    assert all({"peak_allocated", "peak_reserved"} <= set(e) for e in expect.values())


@pytest.mark.parametrize("fname", sorted(RUN))
def test_zoo_scenario_runs_and_meets_its_expectations(fname):
    report = run_scenario(ROOT / "scenarios" / fname, variants=RUN[fname])
    assert report["status"] == "ok"
    for v in report["variants"]:
        assert v["status"] == "ok", v["error"]
        failed = [e["message"] for e in v["expectations"] if not e["passed"]]
        assert failed == [], v["name"]
        assert {e["metric"] for e in v["expectations"]} >= {"peak_allocated", "peak_reserved"}


def test_zoo_levers_pay_off_in_the_pinned_peaks():
    """What each lever buys, read from the pinned peaks: ReLU(inplace=True) saves memory in
    ResNet-50; checkpointing and bf16 autocast lower GPT-2 small's peak; in place lowers it too."""
    gpt = {k: v["peak_allocated"] for k, v in _shipped("gpt2_small.yaml")["expect"].items()}
    plain = gpt["batch=4,inplace=false,ckpt=false,precision=float32"]
    assert gpt["batch=4,inplace=false,ckpt=true,precision=float32"] < plain
    assert gpt["batch=4,inplace=false,ckpt=false,precision=bfloat16"] < plain
    assert gpt["batch=4,inplace=true,ckpt=false,precision=float32"] < plain
    assert gpt["batch=4,inplace=true,ckpt=true,precision=bfloat16"] < min(
        gpt["batch=4,inplace=false,ckpt=true,precision=bfloat16"], plain
    )
    assert gpt["batch=1,inplace=false,ckpt=false,precision=float32"] < plain
    resnet = {k: v["peak_allocated"] for k, v in _shipped("resnet50.yaml")["expect"].items()}
    assert resnet["batch=32,inplace=true"] < resnet["batch=32,inplace=false"]
