"""Scenario features of issue 10: every engine.nn layer as a module type, forward `args`, tuple
results bound with `out: [a, b]`, MODULE.PARAM references, scenario-level `checkpoint:` and
`autocast:`, and validate messages that say what exists."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import engine
from memprof.errors import InvalidInput
from memprof.runner import run_scenario
from memprof.scenario.catalog import MODULES, docs_with_tables
from memprof.scenario.validate import load_scenario

ROOT = Path(__file__).resolve().parents[2]
HEADER = "# yaml-language-server: $schema=../memprof/schemas/scenario.schema.json\n"


def write(tmp_path, text, name="s.yaml"):
    path = tmp_path / name
    path.write_text(HEADER + textwrap.dedent(text))
    return path


def problems(tmp_path, text) -> list[str]:
    path = write(tmp_path, text)
    with pytest.raises(InvalidInput) as err:
        load_scenario(path)
    return [line.split(": ", 1)[1] for line in str(err.value).splitlines()]


def variants(report):
    return {v["name"]: v for v in report["variants"]}


# --- the catalog is engine.nn ----------------------------------------------------------------


def test_every_engine_layer_is_a_module_type_with_pytorchs_arguments():
    import engine.nn as nn

    layers = {
        n
        for n in nn.__all__
        if isinstance(getattr(nn, n), type)
        and issubclass(getattr(nn, n), nn.Module)
        and getattr(nn, n).forward is not nn.Module.forward
    }
    assert layers == set(MODULES)
    for name in ("Embedding", "LayerNorm", "GELU", "MultiheadAttention", "GroupNorm", "RMSNorm"):
        assert name in MODULES
    mha = MODULES["MultiheadAttention"]
    assert mha.inputs == ("query", "key", "value")
    assert [a.name for a in mha.args][:4] == ["embed_dim", "num_heads", "dropout", "bias"]
    forward = {a.name: a for a in mha.forward_args}
    assert forward["need_weights"].default is True and not forward["need_weights"].tensor
    assert forward["attn_mask"].tensor and forward["key_padding_mask"].tensor
    assert MODULES["TransformerEncoder"].module_args == ("encoder_layer", "norm")


def test_docs_tables_are_generated_from_the_catalog():
    # regenerate with: python -m memprof.scenario.catalog
    text = (ROOT / "docs" / "scenarios.md").read_text()
    assert docs_with_tables(text) == text


# --- a GPT-style block written with PyTorch's module names ------------------------------------

GPT_BLOCK = """\
name: gpt-block
device: meta
allocator: exact
inputs:
  tokens: {shape: [2, 16], init: randint, high: 100, dtype: int64}
  targets: {shape: [32], init: randint, high: 100, dtype: int64}
  causal: {shape: [16, 16], init: ones, dtype: bool}
modules:
  wte: {type: Embedding, num_embeddings: 100, embedding_dim: 32}
  ln1: {type: LayerNorm, normalized_shape: 32}
  attn: {type: MultiheadAttention, embed_dim: 32, num_heads: 4, batch_first: true}
  ln2: {type: LayerNorm, normalized_shape: 32}
  fc: {type: Linear, in_features: 32, out_features: 128}
  act: {type: GELU, approximate: tanh}
  proj: {type: Linear, in_features: 128, out_features: 32}
  drop: {type: Dropout, p: 0.1, inplace: true}
  loss_fn: {type: CrossEntropyLoss}
program:
  - {id: mask, op: triu, in: causal, args: {diagonal: 1}}
  - {id: x, module: wte, in: tokens}
  - {id: h, module: ln1, in: x}
  - id: a
    module: attn
    in: [h, h, h]
    args: {need_weights: false, attn_mask: mask, is_causal: true}
    out: [att, _]
  - {id: r1, op: add, in: [att, x]}
  - {id: h2, module: ln2, in: r1}
  - {id: f, module: fc, in: h2}
  - {id: g, module: act, in: f}
  - {id: p, module: proj, in: g}
  - {id: d, module: drop, in: p}
  - {id: r2, op: add, in: [d, r1]}
  - {id: logits, op: linear, in: [r2, wte.weight]}
  - {id: flat, op: reshape, in: logits, args: {shape: [32, 100]}}
  - {id: loss, op: cross_entropy, in: [flat, targets]}
phases:
  - forward
  - backward: loss
  - optimizer: {type: AdamW, lr: 0.001}
"""

# parameters by hand (float32): wte 100x32; ln1, ln2 2 x 32 each; attn in_proj 96x32 + 96 and
# out_proj 32x32 + 32; fc 128x32 + 128; proj 32x128 + 32
PARAMS = 4 * (3200 + 64 + 3072 + 96 + 1024 + 32 + 64 + 4096 + 128 + 4096 + 32)


def test_gpt_block_with_pytorch_module_names_validates_and_runs_on_meta(tmp_path):
    path = write(tmp_path, GPT_BLOCK)
    assert [v.name for v in load_scenario(path).variants] == ["default"]
    [v] = run_scenario(path)["variants"]
    assert v["status"] == "ok", v["error"]
    ops = {r["node"]: r for r in v["ops"] if r.get("node")}
    assert ops["a"]["op"] == "MultiheadAttention" and ops["d"]["inplace"] is True
    # exact sizes: inputs (tokens, targets 8 bytes each, the bool mask), parameters by hand
    inputs = 2 * 16 * 8 + 32 * 8 + 16 * 16
    assert v["peak"]["by_category"]["parameter"] == PARAMS
    assert v["baseline_bytes"] >= inputs + PARAMS


# --- forward args and tuple results -----------------------------------------------------------

MHA = """\
name: mha
device: cpu
inputs:
  x: {shape: [2, 8, 16]}
modules:
  attn: {type: MultiheadAttention, embed_dim: 16, num_heads: 2, batch_first: true}
program:
  - {id: a, module: attn, in: [x, x, x], ARGS OUT}
  - {id: s, op: sum, in: READ}
"""


def _mha(args, out, read="y"):
    return MHA.replace("ARGS", args).replace("OUT", out).replace("READ", read)


def test_need_weights_binds_the_averaged_attention_weights(tmp_path):
    path = write(tmp_path, _mha("args: {need_weights: true},", "out: [y, w]", "w"))
    [v] = run_scenario(path)["variants"]
    assert v["status"] == "ok", v["error"]
    # w: [2, 8, 8] averaged over heads, bound by name as the node's second result
    live = {e["tensor"]: e["bytes"] for e in v["peak"]["live"]}
    assert live["w"] == 2 * 8 * 8 * 4 and live["y"] == 2 * 8 * 16 * 4


def test_need_weights_false_binds_nothing_for_the_weights(tmp_path):
    found = problems(tmp_path, _mha("args: {need_weights: false},", "out: [y, w]", "w"))
    assert len(found) == 1
    assert found[0].endswith(
        "expected node 's' to read a tensor, found 'w' bound to no tensor (its node returned "
        "None in its place)"
    )


def test_a_tuple_result_needs_a_list_of_names(tmp_path):
    found = problems(tmp_path, _mha("", "out: y"))
    assert found == [
        "expected node 'a' to return a tensor, found a tuple of 2 values; bind them with a list: "
        "out: [y0, y1]"
    ]
    found = problems(tmp_path, _mha("", "out: [y, w, z]"))
    assert found == ["expected node 'a' to return 3 values for out: [y, w, z], found 2"]


LSTM = """\
name: lstm
device: cpu
inputs:
  x: {shape: [2, 5, 4]}
modules:
  rnn: {type: LSTM, input_size: 4, hidden_size: 3, batch_first: true}
program:
  - {id: r, module: rnn, in: [x], OUT}
  - {id: s, op: sum, in: READ}
"""


def test_a_nested_list_binds_an_lstms_nested_tuple(tmp_path):
    path = write(tmp_path, LSTM.replace("OUT", "out: [y, [h, c]]").replace("READ", "c"))
    [v] = run_scenario(path)["variants"]
    assert v["status"] == "ok", v["error"]
    tl = v["timeline"]
    rows = zip(tl["tensor"], tl["bytes"], tl["action"], strict=True)
    made = {t: b for t, b, a in rows if a == "alloc"}
    # y [2, 5, 3]; h_n and c_n [1, 2, 3]; float32: each bound and named by the nested list
    assert made["y"] == 2 * 5 * 3 * 4 and made["h"] == made["c"] == 2 * 3 * 4


@pytest.mark.parametrize(
    "out, message",
    [
        (
            "out: [y, hc]",
            "expected node 'r' to return tensors, found a tuple of 2 values for 'hc'; bind them "
            "with a nested list: out: [y, [y0, y1]]",
        ),
        ("out: [y, [h, c, d]]", "expected node 'r' to return 3 values for out: [h, c, d], found 2"),
        (
            "out: y",
            "expected node 'r' to return a tensor, found a tuple of 2 values; bind them "
            "with a list: out: [y0, [y1, y2]]",
        ),
    ],
)
def test_a_nested_tuple_result_names_the_binding_it_needs(tmp_path, out, message):
    assert problems(tmp_path, LSTM.replace("OUT", out).replace("READ", "y")) == [message]


def test_split_binds_its_pieces(tmp_path):
    path = write(
        tmp_path,
        """\
        name: split
        device: meta
        inputs:
          qkv: {shape: [2, 8, 48]}
        program:
          - {id: parts, op: split, in: qkv, args: {split_size_or_sections: 16, dim: 2}, out: [q, k, v]}
          - {id: s, op: add, in: [q, v]}
        """,
    )
    [v] = run_scenario(path)["variants"]
    assert v["status"] == "ok", v["error"]
    assert v["ops"][0]["allocated_bytes"] == 0  # views of qkv


def test_module_args_are_checked_against_forward(tmp_path):
    found = problems(tmp_path, _mha("args: {need_weight: false},", "out: [y, w]"))
    assert found == [
        "expected a keyword argument of MultiheadAttention.forward (key_padding_mask, "
        "need_weights, attn_mask, average_attn_weights, is_causal) (did you mean "
        "'need_weights'?), found 'need_weight'"
    ]
    found = problems(tmp_path, _mha("args: {need_weights: 3},", "out: [y, w]"))
    assert found == ["expected bool for MultiheadAttention.forward's need_weights, found 3"]
    found = problems(tmp_path, _mha("args: {attn_mask: maks},", "out: [y, w]"))
    assert found == [
        "expected the name of a tensor defined before this node for attn_mask, found 'maks'"
    ]


def test_a_parameter_reference_names_what_the_module_has(tmp_path):
    text = GPT_BLOCK.replace("wte.weight]", "wte.weigth]")
    found = problems(tmp_path, text)
    assert len(found) == 1
    assert (
        "expected a parameter of module wte (weight) (did you mean 'weight'?), found 'weigth'"
        in (found[0])
    )


# --- checkpoint: ------------------------------------------------------------------------------

MLP = """\
name: mlp
device: cpu
inputs:
  x: {shape: [64, 256], requires_grad: true}
modules:
  fc1: {type: Linear, in_features: 256, out_features: 256}
  act: {type: Tanh}
  fc2: {type: Linear, in_features: 256, out_features: 256}
program:
  - {id: h1, module: fc1, in: x}
  - {id: a1, module: act, in: h1}
  - {id: h2, module: fc2, in: a1}
  - {id: a2, module: act, in: h2}
  - {id: loss, op: sum, in: a2}
phases: [forward, {backward: loss}]
CKPT
matrix:
  ckpt: [false, true]
"""


def _engine_mlp_peak(checkpointed: bool) -> int:
    """The same program in Python on the engine: the reference bytes."""
    from engine.allocator import get_allocator
    from engine.utils.checkpoint import checkpoint

    engine.manual_seed(0)
    get_allocator("cpu").reset()
    x = engine.randn(64, 256, requires_grad=True)
    fc1, fc2, act = engine.nn.Linear(256, 256), engine.nn.Linear(256, 256), engine.nn.Tanh()

    def block(x):
        h1 = fc1(x)
        a1 = act(h1)
        h2 = fc2(a1)
        return act(h2)

    engine.memory.reset_peak_memory_stats("cpu")
    if checkpointed:
        a2 = checkpoint(block, x, use_reentrant=False)
    else:  # a scenario keeps every name it binds until the step ends
        h1 = fc1(x)
        a1 = act(h1)
        h2 = fc2(a1)
        a2 = act(h2)
    a2.sum().backward()
    return engine.memory.max_memory_allocated("cpu")


def test_checkpointed_node_range_has_pythons_bytes(tmp_path):
    path = write(tmp_path, MLP.replace("CKPT", "checkpoint: {regions: [h1..a2], enabled: $ckpt}"))
    got = {n: v["peak_allocated_bytes"] for n, v in variants(run_scenario(path)).items()}
    assert got["ckpt=true"] < got["ckpt=false"]
    assert got == {"ckpt=false": _engine_mlp_peak(False), "ckpt=true": _engine_mlp_peak(True)}


_FREED_AFTER_REGION = """\
import sys
from memprof.runner import run_scenario
[v] = [v for v in run_scenario(sys.argv[1])["variants"] if v["name"] == "ckpt=true"]
t = v["timeline"]
print(" ".join(str(t["tensor"][i]) for i in range(len(t["seq"]))
               if t["action"][i] == "free" and t["tensor"][i] in ("h1", "a1", "h2")))
"""


def test_a_checkpointed_region_releases_its_names_in_program_order(tmp_path):
    """The names a region binds and nothing reads later are released in the order the program
    binds them, in every process: the report does not change with Python's string hashing
    (PYTHONHASHSEED; worker processes of `--jobs` each have their own)."""
    path = write(tmp_path, MLP.replace("CKPT", "checkpoint: {regions: [h1..a2], enabled: $ckpt}"))
    seen = set()
    for seed in ("0", "1", "2", "3"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        out = subprocess.run(
            [sys.executable, "-c", _FREED_AFTER_REGION, str(path)],
            env=env,
            capture_output=True,
            text=True,
            check=True,
            cwd=ROOT,
        )
        seen.add(out.stdout.strip())
    assert seen == {"h1 a1 h2"}


def test_checkpointed_module_runs_each_call_under_checkpoint(tmp_path):
    path = write(tmp_path, MLP.replace("CKPT", "checkpoint: {regions: [fc2], enabled: $ckpt}"))
    got = {n: v for n, v in variants(run_scenario(path)).items()}
    assert all(v["status"] == "ok" for v in got.values())
    # fc2 keeps its input a1 for backward either way; checkpointed, its saved input is a handle
    # and the recomputation in backward makes the output again: the peak does not drop
    assert got["ckpt=true"]["peak_allocated_bytes"] >= got["ckpt=false"]["peak_allocated_bytes"]


def test_checkpoint_shorthand_list_and_its_errors(tmp_path):
    path = write(
        tmp_path,
        MLP.replace("CKPT", "checkpoint: [h1..a2]").replace("ckpt: [false, true]", "n: [1]"),
    )
    [v] = run_scenario(path)["variants"]
    assert v["status"] == "ok"
    found = problems(tmp_path, MLP.replace("CKPT", "checkpoint: [h2..h1]"))
    assert found == ["expected 'h2' to come before 'h1' in the program"]
    found = problems(tmp_path, MLP.replace("CKPT", "checkpoint: [h1..a2, h2..loss]"))
    assert found == ["expected checkpoint regions apart, found 'h2..loss' overlapping h1..a2"]
    found = problems(tmp_path, MLP.replace("CKPT", "checkpoint: [fc3]"))
    assert found == [
        "expected a module name (fc1, act, fc2) or a node range FIRST..LAST (did you mean "
        "'fc2'?), found 'fc3'"
    ]


# --- autocast: --------------------------------------------------------------------------------

LINEAR = """\
name: amp
device: meta
inputs:
  x: {shape: [64, 1024]}
modules:
  fc: {type: Linear, in_features: 1024, out_features: 1024}
program:
  - {id: y, module: fc, in: x}
autocast: {dtype: $precision}
matrix:
  precision: [float32, bfloat16]
"""


def test_autocast_bytes_by_hand(tmp_path):
    got = variants(run_scenario(write(tmp_path, LINEAR)))
    x, w, b = 64 * 1024 * 4, 1024 * 1024 * 4, 1024 * 4
    base = x + w + b
    assert got["precision=float32"]["baseline_bytes"] == base
    assert got["precision=float32"]["peak_allocated_bytes"] == base + 64 * 1024 * 4
    # bf16: x, the weight and the bias cast once (the cast cache), the output in bf16; the fp32
    # master weights stay
    half = x // 2 + w // 2 + b // 2 + 64 * 1024 * 2
    assert got["precision=bfloat16"]["peak_allocated_bytes"] == base + half
    assert got["precision=bfloat16"]["baseline_bytes"] == base


def test_autocast_dtype_is_checked(tmp_path):
    found = problems(
        tmp_path,
        LINEAR.replace("matrix:\n  precision: [float32, bfloat16]\n", "").replace(
            "$precision", "int8"
        ),
    )
    assert len(found) == 1 and "expected 'float16', 'bfloat16' or 'float32'" in found[0]


# --- validate says what exists ------------------------------------------------------------------

ONE_OP = """\
name: ops
inputs:
  x: {shape: [4, 4]}
program:
  - NODE
"""


def test_unknown_op_lists_the_nearest_names(tmp_path):
    found = problems(tmp_path, ONE_OP.replace("NODE", "{id: y, op: matmull, in: [x, x]}"))
    assert found == ["expected a known op (did you mean 'matmul' or 'mul'?), found 'matmull'"]
    found = problems(tmp_path, ONE_OP.replace("NODE", "{id: y, op: attention, in: x}"))
    assert found == [
        "expected a known op (did you mean 'scaled_dot_product_attention' or 'flatten'?), "
        "found 'attention'"
    ]


def test_inplace_on_an_op_without_an_inplace_form(tmp_path):
    found = problems(
        tmp_path, ONE_OP.replace("NODE", "{id: y, op: matmul, in: [x, x], inplace: true}")
    )
    assert len(found) == 1 and found[0].startswith("matmul has no in-place form")


def test_unknown_module_type_suggests_engine_layers(tmp_path):
    text = ONE_OP.replace("NODE", "{id: y, module: m, in: x}") + (
        "modules:\n  m: {type: LayerNrom, normalized_shape: 4}\n"
    )
    found = problems(tmp_path, text)
    assert found == [
        "expected a module type such as Linear, Conv2d or ReLU (did you mean 'LayerNorm'?), "
        "found 'LayerNrom'"
    ]


# --- an options dataclass argument (LinearCrossEntropyLoss's options) -------------------------

LCE = """\
name: lce
modules:
  loss: {type: LinearCrossEntropyLoss, in_features: 32, num_classes: 1000, OPTIONS}
inputs:
  x: {shape: [64, 32], requires_grad: true}
  t: {shape: [64], init: randint, high: 1000, dtype: int64}
program:
  - {id: l, module: loss, in: [x, t]}
phases: [forward, {backward: l}]
"""


def test_an_options_dataclass_is_written_as_a_mapping_and_reaches_the_engine(tmp_path):
    text = LCE.replace("OPTIONS", "options: {batch_chunk_size: $chunk}") + (
        "variants:\n  whole: {chunk: 64}\n  chunked: {chunk: 8}\n"
    )
    report = run_scenario(write(tmp_path, text), device="cpu")
    by_name = variants(report)
    assert {v["status"] for v in by_name.values()} == {"ok"}
    got = {n: by_name[n]["peak_allocated_bytes"] for n in ("whole", "chunked")}
    assert got["chunked"] < got["whole"]  # the option reached engine.nn.LinearCrossEntropyLoss
    assert got == {"whole": _engine_lce_peak(64), "chunked": _engine_lce_peak(8)}


def _engine_lce_peak(chunk: int) -> int:
    """The same program in Python on the engine: the reference bytes."""
    from engine.allocator import get_allocator

    engine.manual_seed(0)
    get_allocator("cpu").reset()
    options = engine.nn.LinearCrossEntropyOptions(batch_chunk_size=chunk)
    loss_fn = engine.nn.LinearCrossEntropyLoss(32, 1000, options=options)
    x = engine.randn(64, 32, requires_grad=True)
    t = engine.randint(0, 1000, (64,))
    engine.memory.reset_peak_memory_stats("cpu")
    loss = loss_fn(x, t)
    loss.backward()
    return engine.memory.max_memory_allocated("cpu")


def test_an_options_dataclass_refuses_unknown_keys_and_bad_values(tmp_path):
    found = problems(tmp_path, LCE.replace("OPTIONS", "options: {batch_chunk_size: 8, bogus: 1}"))
    assert found == ["unexpected field 'bogus'"]
    found = problems(tmp_path, LCE.replace("OPTIONS", "options: {acc_policy: fast}"))
    assert found == ["invalid acc_policy: 'fast' (in module 'loss')"]
    found = problems(tmp_path, LCE.replace("OPTIONS", "options: {acc_dtype: int8}"))
    assert found == ["expected 'float16', 'bfloat16', 'float32' or 'float64', found 'int8'"]
