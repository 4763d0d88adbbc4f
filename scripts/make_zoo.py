"""Write the model-zoo scenarios (scenarios/gpt2_small.yaml, resnet50.yaml, vit_b16.yaml,
unet_block.yaml) from the model definitions below, so that their layer-by-layer programs stay
readable here and the tests can build the same programs at a reduced size.

    python scripts/make_zoo.py          # rewrite the shipped files (expectations included)

Each function returns the scenario as a dict; `dump` writes it one module or node per line.
The expected peaks (`expect:`) are pinned from a run of the program (`pinned`); the tests check
that the shipped files are these programs and that they still measure these peaks.
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


# --- ResNet-50 ----------------------------------------------------------------------------------


def resnet50(matrix=None, layers=(3, 4, 6, 3), width=64, image=224, classes=1000, name="resnet50"):
    """torchvision's resnet50: a 7x7 stem, Bottleneck blocks (1x1, 3x3 with the stride, 1x1 x4,
    a downsample conv+bn on the first block of each stage), `out += identity` in place and one
    ReLU module per block called three times. ReLU(inplace=True) is torchvision's default:
    $inplace turns it off to show what that costs. Forward + backward + SGD (momentum 0.9)."""
    matrix = matrix or {"batch": [1, 32], "inplace": [True, False]}
    modules = {
        "conv1": _conv(3, width, 7, 2, 3),
        "bn1": {"type": "BatchNorm2d", "num_features": width},
        "relu": {"type": "ReLU", "inplace": "$inplace"},
        "maxpool": {"type": "MaxPool2d", "kernel_size": 3, "stride": 2, "padding": 1},
    }
    program = [
        {"id": "stem_conv", "module": "conv1", "in": "images"},
        {"id": "stem_bn", "module": "bn1", "in": "stem_conv"},
        {"id": "stem_relu", "module": "relu", "in": "stem_bn"},
        {"id": "stem_pool", "module": "maxpool", "in": "stem_relu"},
    ]
    x, inplanes = "stem_pool", width
    for li, blocks in enumerate(layers, start=1):
        planes = width * 2 ** (li - 1)
        for bi in range(blocks):
            b = f"layer{li}_{bi}"
            stride = 2 if bi == 0 and li > 1 else 1
            modules[f"{b}_conv1"] = _conv(inplanes, planes, 1)
            modules[f"{b}_bn1"] = {"type": "BatchNorm2d", "num_features": planes}
            modules[f"{b}_conv2"] = _conv(planes, planes, 3, stride, 1)
            modules[f"{b}_bn2"] = {"type": "BatchNorm2d", "num_features": planes}
            modules[f"{b}_conv3"] = _conv(planes, planes * 4, 1)
            modules[f"{b}_bn3"] = {"type": "BatchNorm2d", "num_features": planes * 4}
            modules[f"{b}_relu"] = {"type": "ReLU", "inplace": "$inplace"}
            program += [
                {"id": f"{b}_c1", "module": f"{b}_conv1", "in": x},
                {"id": f"{b}_b1", "module": f"{b}_bn1", "in": f"{b}_c1"},
                {"id": f"{b}_r1", "module": f"{b}_relu", "in": f"{b}_b1"},
                {"id": f"{b}_c2", "module": f"{b}_conv2", "in": f"{b}_r1"},
                {"id": f"{b}_b2", "module": f"{b}_bn2", "in": f"{b}_c2"},
                {"id": f"{b}_r2", "module": f"{b}_relu", "in": f"{b}_b2"},
                {"id": f"{b}_c3", "module": f"{b}_conv3", "in": f"{b}_r2"},
                {"id": f"{b}_b3", "module": f"{b}_bn3", "in": f"{b}_c3"},
            ]
            identity = x
            if bi == 0:
                modules[f"{b}_downsample_0"] = _conv(inplanes, planes * 4, 1, stride)
                modules[f"{b}_downsample_1"] = {"type": "BatchNorm2d", "num_features": planes * 4}
                program += [
                    {"id": f"{b}_ds_c", "module": f"{b}_downsample_0", "in": x},
                    {"id": f"{b}_ds", "module": f"{b}_downsample_1", "in": f"{b}_ds_c"},
                ]
                identity = f"{b}_ds"
            program += [  # out += identity (in place, as torchvision writes it); relu(out)
                {"id": f"{b}_add", "op": "add", "in": [f"{b}_b3", identity], "inplace": True},
                {"id": f"{b}_out", "module": f"{b}_relu", "in": f"{b}_add"},
            ]
            x, inplanes = f"{b}_out", planes * 4
    modules["avgpool"] = {"type": "AdaptiveAvgPool2d", "output_size": [1, 1]}
    modules["flatten"] = {"type": "Flatten", "start_dim": 1}
    modules["fc"] = {"type": "Linear", "in_features": inplanes, "out_features": classes}
    modules["criterion"] = {"type": "CrossEntropyLoss"}
    program += [
        {"id": "pooled", "module": "avgpool", "in": x},
        {"id": "features", "module": "flatten", "in": "pooled"},
        {"id": "logits", "module": "fc", "in": "features"},
        {"id": "loss", "module": "criterion", "in": ["logits", "labels"]},
    ]
    return {
        "name": name,
        "description": (
            "torchvision's ResNet-50 (Bottleneck blocks [3, 4, 6, 3], out += identity in place), "
            f"{image}x{image} images, forward + backward + SGD with momentum, on meta with the "
            "caching model. ReLU(inplace=True) is torchvision's default; inplace: false shows "
            "what turning it off costs (each ReLU then keeps a result of its own)."
        ),
        "device": "meta",
        "allocator": "caching",
        "dtype": "float32",
        "seed": 0,
        "inputs": {
            "images": {"shape": ["$batch", 3, image, image]},
            "labels": {"shape": ["$batch"], "init": "randint", "high": classes, "dtype": "int64"},
        },
        "modules": modules,
        "program": program,
        "phases": [
            "forward",
            {"backward": "loss"},
            {"optimizer": {"type": "SGD", "lr": 0.1, "momentum": 0.9, "weight_decay": 1e-4}},
        ],
        "matrix": matrix,
    }


def _conv(cin, cout, k, stride=1, padding=0):
    spec = {"type": "Conv2d", "in_channels": cin, "out_channels": cout, "kernel_size": k}
    if stride != 1:
        spec["stride"] = stride
    if padding:
        spec["padding"] = padding
    spec["bias"] = False
    return spec


# --- ViT-B/16 ------------------------------------------------------------------------------------


def vit_b16(
    matrix=None, n_layer=12, d=768, n_head=12, mlp=3072, image=224, patch=16, classes=1000,
    name="vit-b16",
):  # fmt: skip
    """torchvision's vit_b_16: a 16x16 patch convolution, the class token and the learned
    position embedding (parameters, held here as Embedding rows), 12 pre-norm encoder blocks
    (LayerNorm eps 1e-6, MultiheadAttention(batch_first), MLP 3072 with GELU), the final
    LayerNorm, the class token's features into the head. Levers: $inplace (residual adds into
    the branch output), $ckpt (each block checkpointed), $precision (autocast bf16)."""
    matrix = matrix or {
        "batch": [8],
        "inplace": [False, True],
        "ckpt": [False, True],
        "precision": ["float32", "bfloat16"],
    }
    tokens = (image // patch) ** 2 + 1
    modules = {
        "conv_proj": {
            "type": "Conv2d",
            "in_channels": 3,
            "out_channels": d,
            "kernel_size": patch,
            "stride": patch,
        },
        "class_token": {"type": "Embedding", "num_embeddings": 1, "embedding_dim": d},
        "pos_embedding": {"type": "Embedding", "num_embeddings": tokens, "embedding_dim": d},
    }
    program = [
        {"id": "patches", "module": "conv_proj", "in": "images"},
        {"id": "flat", "op": "reshape", "in": "patches", "args": {"shape": ["$batch", d, -1]}},
        {"id": "seq", "op": "permute", "in": "flat", "args": {"dims": [0, 2, 1]}},
        {"id": "cls", "module": "class_token", "in": "zero"},
        {"id": "cls3", "op": "reshape", "in": "cls", "args": {"shape": [1, 1, d]}},
        {"id": "cls_b", "op": "expand", "in": "cls3", "args": {"size": ["$batch", -1, -1]}},
        {"id": "joined", "op": "cat", "in": ["cls_b", "seq"], "args": {"dim": 1}},
        {"id": "pos", "module": "pos_embedding", "in": "positions"},
        {"id": "x0", "op": "add", "in": ["joined", "pos"], "inplace": "$inplace"},
    ]
    regions, x = [], "x0"
    for i in range(n_layer):
        e = f"layer{i}"
        modules[f"{e}_ln_1"] = {"type": "LayerNorm", "normalized_shape": d, "eps": 1e-6}
        modules[f"{e}_self_attention"] = {
            "type": "MultiheadAttention",
            "embed_dim": d,
            "num_heads": n_head,
            "batch_first": True,
        }
        modules[f"{e}_ln_2"] = {"type": "LayerNorm", "normalized_shape": d, "eps": 1e-6}
        modules[f"{e}_mlp_0"] = {"type": "Linear", "in_features": d, "out_features": mlp}
        modules[f"{e}_mlp_1"] = {"type": "GELU"}
        modules[f"{e}_mlp_3"] = {"type": "Linear", "in_features": mlp, "out_features": d}
        program += [
            {"id": f"{e}_a", "module": f"{e}_ln_1", "in": x},
            {
                "id": f"{e}_attn",
                "module": f"{e}_self_attention",
                "in": [f"{e}_a"] * 3,
                "args": {"need_weights": False},
                "out": [f"{e}_y", "_"],
            },
            {"id": f"{e}_r1", "op": "add", "in": [f"{e}_y", x], "inplace": "$inplace"},
            {"id": f"{e}_m", "module": f"{e}_ln_2", "in": f"{e}_r1"},
            {"id": f"{e}_fc", "module": f"{e}_mlp_0", "in": f"{e}_m"},
            {"id": f"{e}_g", "module": f"{e}_mlp_1", "in": f"{e}_fc"},
            {"id": f"{e}_p", "module": f"{e}_mlp_3", "in": f"{e}_g"},
            {"id": f"{e}_r2", "op": "add", "in": [f"{e}_p", f"{e}_r1"], "inplace": "$inplace"},
        ]
        regions.append(f"{e}_a..{e}_r2")
        x = f"{e}_r2"
    modules["ln"] = {"type": "LayerNorm", "normalized_shape": d, "eps": 1e-6}
    modules["heads"] = {"type": "Linear", "in_features": d, "out_features": classes}
    program += [
        {"id": "encoded", "module": "ln", "in": x},
        {"id": "cls_out", "op": "index_select", "in": ["encoded", "zero"], "args": {"dim": 1}},
        {"id": "features", "op": "reshape", "in": "cls_out", "args": {"shape": [-1, d]}},
        {"id": "logits", "module": "heads", "in": "features"},
        {"id": "loss", "op": "cross_entropy", "in": ["logits", "labels"]},
    ]
    return {
        "name": name,
        "description": (
            f"torchvision's ViT-B/16 ({n_layer} encoder blocks, d {d}, {n_head} heads, MLP "
            f"{mlp}) on {image}x{image} images, forward + backward + AdamW on meta with the "
            "caching model. The class token is broadcast with expand, as torchvision does (a "
            "view: no memory). Levers: inplace (residual adds into the branch output), ckpt "
            "(each block checkpointed), precision (autocast bf16)."
        ),
        "device": "meta",
        "allocator": "caching",
        "dtype": "float32",
        "seed": 0,
        "inputs": {
            "images": {"shape": ["$batch", 3, image, image]},
            "labels": {"shape": ["$batch"], "init": "randint", "high": classes, "dtype": "int64"},
            "zero": {"shape": [1], "init": "zeros", "dtype": "int64"},
            "positions": {"shape": [tokens], "init": "arange", "dtype": "int64"},
        },
        "modules": modules,
        "program": program,
        "phases": [
            "forward",
            {"backward": "loss"},
            {"optimizer": {"type": "AdamW", "lr": 3e-3, "weight_decay": 0.3}},
        ],
        "checkpoint": {"regions": regions, "enabled": "$ckpt"},
        "autocast": {"dtype": "$precision"},
        "matrix": matrix,
    }


# --- a diffusion U-Net block ---------------------------------------------------------------------


def unet_block(matrix=None, ch=128, skip_ch=128, size=32, emb=512, groups=32, heads=4,
               name="unet-block"):  # fmt: skip
    """One decoder level of a diffusion U-Net (as in Stable Diffusion's UNet2DModel): the skip
    connection joined with cat, a ResBlock (GroupNorm, SiLU, Conv2d, the timestep embedding
    added per channel, a 1x1 shortcut conv), a self-attention block over the pixels (GroupNorm,
    MultiheadAttention, the residual). SiLU(inplace=True) pays a clone of its input for
    backward, as in PyTorch: $inplace shows it saves nothing. $ckpt checkpoints the ResBlock,
    $precision runs it under autocast bf16."""
    matrix = matrix or {
        "batch": [8],
        "inplace": [False, True],
        "ckpt": [False, True],
        "precision": ["float32", "bfloat16"],
    }
    cin = ch + skip_ch
    modules = {
        "norm1": {"type": "GroupNorm", "num_groups": groups, "num_channels": cin},
        "act": {"type": "SiLU", "inplace": "$inplace"},
        "conv1": {"type": "Conv2d", "in_channels": cin, "out_channels": ch, "kernel_size": 3,
                  "padding": 1},
        "time_act": {"type": "SiLU"},
        "time_emb_proj": {"type": "Linear", "in_features": emb, "out_features": ch},
        "norm2": {"type": "GroupNorm", "num_groups": groups, "num_channels": ch},
        "dropout": {"type": "Dropout", "p": 0.1, "inplace": "$inplace"},
        "conv2": {"type": "Conv2d", "in_channels": ch, "out_channels": ch, "kernel_size": 3,
                  "padding": 1},
        "conv_shortcut": {"type": "Conv2d", "in_channels": cin, "out_channels": ch,
                          "kernel_size": 1},
        "attn_norm": {"type": "GroupNorm", "num_groups": groups, "num_channels": ch},
        "attn": {"type": "MultiheadAttention", "embed_dim": ch, "num_heads": heads,
                 "batch_first": True},
        "criterion": {"type": "MSELoss"},
    }  # fmt: skip
    pixels = size * size
    program = [
        {"id": "joined", "op": "cat", "in": ["h", "skip"], "args": {"dim": 1}},
        {"id": "n1", "module": "norm1", "in": "joined"},
        {"id": "a1", "module": "act", "in": "n1"},
        {"id": "c1", "module": "conv1", "in": "a1"},
        {"id": "t_act", "module": "time_act", "in": "temb"},
        {"id": "t_proj", "module": "time_emb_proj", "in": "t_act"},
        {"id": "t_map", "op": "reshape", "in": "t_proj", "args": {"shape": ["$batch", ch, 1, 1]}},
        {"id": "with_t", "op": "add", "in": ["c1", "t_map"], "inplace": "$inplace"},
        {"id": "n2", "module": "norm2", "in": "with_t"},
        {"id": "a2", "module": "act", "in": "n2"},
        {"id": "d2", "module": "dropout", "in": "a2"},
        {"id": "c2", "module": "conv2", "in": "d2"},
        {"id": "short", "module": "conv_shortcut", "in": "joined"},
        {"id": "res", "op": "add", "in": ["c2", "short"], "inplace": "$inplace"},
        {"id": "an", "module": "attn_norm", "in": "res"},
        {"id": "seq", "op": "reshape", "in": "an", "args": {"shape": ["$batch", ch, pixels]}},
        {"id": "tokens", "op": "permute", "in": "seq", "args": {"dims": [0, 2, 1]}},
        {
            "id": "attend",
            "module": "attn",
            "in": ["tokens", "tokens", "tokens"],
            "args": {"need_weights": False},
            "out": ["att", "_"],
        },
        {"id": "back", "op": "permute", "in": "att", "args": {"dims": [0, 2, 1]}},
        {"id": "img", "op": "reshape", "in": "back", "args": {"shape": ["$batch", ch, size, size]}},
        {"id": "out", "op": "add", "in": ["img", "res"], "inplace": "$inplace"},
        {"id": "loss", "module": "criterion", "in": ["out", "target"]},
    ]
    return {
        "name": name,
        "description": (
            f"A diffusion U-Net decoder block on {size}x{size} feature maps: cat with the skip "
            f"connection ({ch}+{skip_ch} channels), a ResBlock (GroupNorm({groups}), SiLU, "
            "Conv2d 3x3, the timestep embedding, a 1x1 shortcut), pixel self-attention "
            "(GroupNorm, MultiheadAttention) with its residual; forward + backward + AdamW on "
            "meta with the caching model. SiLU(inplace=True) pays a clone of its input for "
            "backward (PyTorch keeps the input), so inplace saves only what the adds and "
            "dropout write over; ckpt checkpoints the ResBlock; precision: autocast bf16."
        ),
        "device": "meta",
        "allocator": "caching",
        "dtype": "float32",
        "seed": 0,
        "inputs": {
            "h": {"shape": ["$batch", ch, size, size]},
            "skip": {"shape": ["$batch", skip_ch, size, size]},
            "temb": {"shape": ["$batch", emb]},
            "target": {"shape": ["$batch", ch, size, size]},
        },
        "modules": modules,
        "program": program,
        "phases": [
            "forward",
            {"backward": "loss"},
            {"optimizer": {"type": "AdamW", "lr": 1e-4}},
        ],
        "checkpoint": {"regions": ["n1..res"], "enabled": "$ckpt"},
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


MODELS = {
    "gpt2_small.yaml": gpt2,
    "resnet50.yaml": resnet50,
    "vit_b16.yaml": vit_b16,
    "unet_block.yaml": unet_block,
}


def pinned(doc: dict) -> dict:
    """Each variant's measured peak allocated and reserved bytes, as an `expect:` section."""
    import tempfile

    from memprof.runner import run_scenario

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "zoo.yaml"
        path.write_text(dump(doc))
        report = run_scenario(path)
    return {
        v["name"]: {
            "status": "ok",
            "peak_allocated": v["peak_allocated_bytes"],
            "peak_reserved": v["peak_reserved_bytes"],
        }
        for v in report["variants"]
    }


def main(argv: list[str]) -> None:
    """Rewrite the shipped zoo files, their expectations pinned from a run."""
    for fname, make in MODELS.items():
        if argv and fname not in argv:
            continue
        doc = make()
        path = ROOT / "scenarios" / fname
        path.write_text(dump(doc, pinned(doc)))
        print(path)


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main(sys.argv[1:])
