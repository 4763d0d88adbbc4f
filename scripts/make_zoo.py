"""Write the model-zoo scenarios (scenarios/gpt2_small.yaml, resnet50.yaml, vit_b16.yaml,
unet_block.yaml) from the model definitions below, so that their layer-by-layer programs stay
readable here and the tests can build the same programs at a reduced size.

    python scripts/make_zoo.py          # rewrite the shipped files (expectations included)

Each function returns the scenario as a dict; `dump` writes it one module or node per line.
The expected peaks (`expect:`) are passed in from EXPECT below: they are pinned from a run and
checked by tests/memprof/test_zoo.py.
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
SCHEMA_LINE = "# yaml-language-server: $schema=../memprof/schemas/scenario.schema.json\n"


# --- GPT-2 ---------------------------------------------------------------------------------------


def gpt2(
    n_layer=12,
    d=768,
    n_head=12,
    seq=1024,
    vocab=50257,
    matrix=None,
    name="gpt2-small",
    device="meta",
    allocator="caching",
    dropout=0.1,
):
    """GPT-2 as Hugging Face's GPT2LMHeadModel lays it out (pre-norm blocks, learned positions,
    the head tied to the token embedding), written with PyTorch's module names: attention is
    nn.MultiheadAttention(batch_first) with a causal mask (c_attn/c_proj are its in_proj_weight
    [3d, d] and out_proj). Levers: $inplace (residual adds into the branch output, dropout in
    place), $ckpt (each block checkpointed), $precision (autocast bf16 or fp32)."""
    matrix = matrix or {
        "batch": [1, 4],
        "inplace": [False, True],
        "ckpt": [False, True],
        "precision": ["float32", "bfloat16"],
    }
    modules = {
        "wte": {"type": "Embedding", "num_embeddings": vocab, "embedding_dim": d},
        "wpe": {"type": "Embedding", "num_embeddings": seq, "embedding_dim": d},
        "drop": {"type": "Dropout", "p": dropout, "inplace": "$inplace"},
    }
    program = [
        {"id": "mask", "op": "triu", "in": "causal", "args": {"diagonal": 1}},
        {"id": "tok", "module": "wte", "in": "tokens"},
        {"id": "posemb", "module": "wpe", "in": "pos"},
        {"id": "emb", "op": "add", "in": ["tok", "posemb"], "inplace": "$inplace"},
        {"id": "x0", "module": "drop", "in": "emb"},
    ]
    regions = []
    x = "x0"
    for i in range(n_layer):
        h = f"h{i}"
        modules[f"{h}_ln_1"] = {"type": "LayerNorm", "normalized_shape": d}
        modules[f"{h}_attn"] = {
            "type": "MultiheadAttention",
            "embed_dim": d,
            "num_heads": n_head,
            "dropout": dropout,
            "batch_first": True,
        }
        modules[f"{h}_ln_2"] = {"type": "LayerNorm", "normalized_shape": d}
        modules[f"{h}_c_fc"] = {"type": "Linear", "in_features": d, "out_features": 4 * d}
        modules[f"{h}_gelu"] = {"type": "GELU", "approximate": "tanh"}
        modules[f"{h}_c_proj"] = {"type": "Linear", "in_features": 4 * d, "out_features": d}
        program += [
            {"id": f"{h}_a", "module": f"{h}_ln_1", "in": x},
            {
                "id": f"{h}_attn",
                "module": f"{h}_attn",
                "in": [f"{h}_a"] * 3,
                "args": {"need_weights": False, "attn_mask": "mask", "is_causal": True},
                "out": [f"{h}_y", "_"],
            },
            {"id": f"{h}_d1", "module": "drop", "in": f"{h}_y"},
            {"id": f"{h}_r1", "op": "add", "in": [f"{h}_d1", x], "inplace": "$inplace"},
            {"id": f"{h}_m", "module": f"{h}_ln_2", "in": f"{h}_r1"},
            {"id": f"{h}_fc", "module": f"{h}_c_fc", "in": f"{h}_m"},
            {"id": f"{h}_g", "module": f"{h}_gelu", "in": f"{h}_fc"},
            {"id": f"{h}_p", "module": f"{h}_c_proj", "in": f"{h}_g"},
            {"id": f"{h}_d2", "module": "drop", "in": f"{h}_p"},
            {"id": f"{h}_r2", "op": "add", "in": [f"{h}_d2", f"{h}_r1"], "inplace": "$inplace"},
        ]
        regions.append(f"{h}_a..{h}_r2")
        x = f"{h}_r2"
    modules["ln_f"] = {"type": "LayerNorm", "normalized_shape": d}
    program += [
        {"id": "hf", "module": "ln_f", "in": x},
        {"id": "logits", "op": "linear", "in": ["hf", "wte.weight"]},  # the tied head
        {"id": "flat", "op": "reshape", "in": "logits", "args": {"shape": [-1, vocab]}},
        {"id": "labels", "op": "reshape", "in": "targets", "args": {"shape": [-1]}},
        {"id": "loss", "op": "cross_entropy", "in": ["flat", "labels"]},
    ]
    return {
        "name": name,
        "description": (
            f"GPT-2 ({n_layer} layers, d {d}, {n_head} heads, seq {seq}, vocab {vocab}, head tied "
            "to wte) as Hugging Face lays it out, forward + backward + AdamW with the caching "
            "model. Levers: inplace (residual adds written into the branch output and dropout "
            "in place; a residual add into the stream itself would break LayerNorm's saved "
            "input, as in PyTorch), ckpt (each block under non-reentrant checkpointing), "
            "precision (autocast bf16: linear/attention in bf16, fp32 master weights)."
        ),
        "device": device,
        "allocator": allocator,
        "dtype": "float32",
        "seed": 0,
        "inputs": {
            "tokens": {
                "shape": ["$batch", seq],
                "init": "randint",
                "high": vocab,
                "dtype": "int64",
            },
            "targets": {
                "shape": ["$batch", seq],
                "init": "randint",
                "high": vocab,
                "dtype": "int64",
            },
            "pos": {"shape": [seq], "init": "arange", "dtype": "int64"},
            "causal": {"shape": [seq, seq], "init": "ones", "dtype": "bool"},
        },
        "modules": modules,
        "program": program,
        "phases": [
            "forward",
            {"backward": "loss"},
            {"optimizer": {"type": "AdamW", "lr": 6e-4, "weight_decay": 0.1}},
        ],
        "checkpoint": {"regions": regions, "enabled": "$ckpt"},
        "autocast": {"dtype": "$precision"},
        "matrix": matrix,
    }


# --- writing ---------------------------------------------------------------------------------


def _flow(value) -> str:
    text = yaml.safe_dump(value, default_flow_style=True, width=10**9, sort_keys=False).strip()
    return text.removesuffix("...").strip()  # a plain scalar's document end


def dump(doc: dict, expect: dict | None = None) -> str:
    """The scenario as YAML: top-level keys in block style, one module/node/phase per line."""
    out = [SCHEMA_LINE]
    for key, value in doc.items():
        if key in ("inputs", "modules", "matrix", "variants") and isinstance(value, dict):
            out.append(f"{key}:\n")
            for k, v in value.items():
                out.append(f"  {k}: {_flow(v)}\n")
        elif key in ("program", "phases"):
            out.append(f"{key}:\n")
            for item in value:
                out.append(f"  - {_flow(item)}\n")
        elif key == "description":
            lines = textwrap.wrap(value, width=94)
            out.append(f"{key}: >-\n" + "".join(f"  {line}\n" for line in lines))
        else:
            out.append(f"{key}: {_flow(value)}\n")
    if expect:
        out.append("expect:\n")
        for k, v in expect.items():
            out.append(f"  {_flow(k)}: {_flow(v)}\n")
    return "".join(out)


MODELS = {"gpt2_small.yaml": gpt2}


def main(argv: list[str]) -> None:
    from expect_zoo import EXPECT  # noqa: F401 - pinned peaks, next to this file

    for fname, make in MODELS.items():
        if argv and fname not in argv:
            continue
        path = ROOT / "scenarios" / fname
        path.write_text(dump(make(), EXPECT.get(fname)))
        print(path)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    main(sys.argv[1:])
