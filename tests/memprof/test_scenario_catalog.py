"""Every op and module of the catalog runs on the engine through a scenario, and is documented."""

import re
import textwrap
from pathlib import Path

import pytest
import yaml

from memprof.runner import run_scenario
from memprof.scenario.catalog import MODULES, OPS

ROOT = Path(__file__).resolve().parents[2]

INPUTS = {
    "x": {"shape": [2, 4], "init": "rand"},
    "x2": {"shape": [2, 4], "init": "rand"},
    "m": {"shape": [4, 4]},
    "w": {"shape": [3, 4]},
    "b": {"shape": [3]},
    "img": {"shape": [1, 2, 6, 6]},
    "k": {"shape": [3, 2, 3, 3]},
    "labels": {"shape": [2], "init": "randint", "high": 4, "dtype": "int64"},
    "q": {"shape": [1, 2, 3, 4]},
    # indexing writes (issue 10)
    "idx": {"shape": [1, 4], "init": "randint", "high": 2, "dtype": "int64"},
    "src": {"shape": [1, 4], "init": "rand"},
    "rows": {"shape": [3, 4], "init": "rand"},
    "vidx": {"shape": [3], "init": "randint", "high": 2, "dtype": "int64"},
    "perm": {"shape": [2], "init": "arange", "dtype": "int64"},
    "flat": {"shape": [3], "init": "arange", "dtype": "int64"},
    "vals": {"shape": [3], "init": "rand"},
    "mask": {"shape": [2, 4], "init": "randint", "high": 2, "dtype": "bool"},
    "bin": {"shape": [2, 3, 5]},
    "bb1": {"shape": [2, 3, 4]},
    "bb2": {"shape": [2, 4, 5]},
    "seq": {"shape": [2, 3, 4]},
    "k1": {"shape": [2, 3, 3]},
    "gidx": {"shape": [2, 4], "init": "randint", "high": 4, "dtype": "int64"},
    "kt": {"shape": [2, 3, 2, 2]},
    "vol": {"shape": [1, 2, 3, 4, 4]},
    "k3": {"shape": [3, 2, 2, 2, 2]},
    "c4": {"shape": [4], "init": "rand"},
    "t2": {"shape": [2], "init": "rand"},
    "blocks": {"shape": [1, 8, 6]},  # Fold: 2 channels of 2x2 blocks, 2 x 3 of them
    "upv": {"shape": [1, 2, 2, 2]},  # MaxUnpool: pooled values and their indices
    "upi": {"shape": [1, 2, 2, 2], "init": "randint", "high": 16, "dtype": "int64"},
    "upv1": {"shape": [1, 2, 3]},
    "upi1": {"shape": [1, 2, 3], "init": "randint", "high": 6, "dtype": "int64"},
    "bw": {"shape": [3, 4, 4]},  # bilinear's weight
    "theta": {"shape": [1, 2, 3]},  # affine_grid's matrices, grid_sample's grid
    "sgrid": {"shape": [1, 3, 3, 2], "init": "rand"},
    "upv3": {"shape": [1, 2, 1, 2, 2]},  # MaxUnpool3d's values and indices
    "upi3": {"shape": [1, 2, 1, 2, 2], "init": "randint", "high": 32, "dtype": "int64"},
    "ctcx": {"shape": [6, 2, 4]},  # CTCLoss: log-probabilities, targets and lengths
    "ctct": {"shape": [2, 3], "init": "randint", "high": 4, "dtype": "int64"},
    "ctcil": {"shape": [2], "init": "randint", "high": 7, "dtype": "int64"},
    "ctctl": {"shape": [2], "init": "randint", "high": 4, "dtype": "int64"},
    "lcew": {"shape": [5, 4]},  # linear_cross_entropy: a 5-class head over x
}

# op -> (tensor inputs, args, expected result shape)
OP_CALLS = {
    **{
        n: (["x"], {}, [2, 4])
        for n in (
            "relu",
            "sigmoid",
            "tanh",
            "exp",
            "log",
            "sin",
            "cos",
            "abs",
            "neg",
            "sqrt",
            "clone",
            "detach",
            "contiguous",
        )
    },
    "scale": (["x"], {"scale": 2.0}, [2, 4]),
    # layers of issue 10
    "conv1d": (["bin", "k1"], {}, [2, 2, 3]),
    "conv_transpose2d": (["img", "kt"], {}, [1, 3, 7, 7]),
    "group_norm": (["img"], {"num_groups": 1}, [1, 2, 6, 6]),
    "rms_norm": (["x"], {"normalized_shape": [4]}, [2, 4]),
    # tuple results (bound with out: [a, b, ...]) and index_select
    "split": (["x"], {"split_size_or_sections": [1, 3], "dim": 1}, [[2, 1], [2, 3]]),
    "chunk": (["x"], {"chunks": 2, "dim": 1}, [[2, 2], [2, 2]]),
    "unbind": (["x"], {}, [[4], [4]]),
    "index_select": (["x", "perm"], {"dim": 1}, [2, 2]),
    # functional forms of layers
    "avg_pool2d": (["img"], {"kernel_size": 2}, [1, 2, 3, 3]),
    "gather": (["x", "gidx"], {"dim": 1}, [2, 4]),
    "embedding": (["labels", "m"], {}, [2, 4]),
    "dropout": (["x"], {"p": 0.5}, [2, 4]),
    "layer_norm": (["x"], {"normalized_shape": 4}, [2, 4]),
    "gelu": (["x"], {"approximate": "tanh"}, [2, 4]),
    **{n: (["x", "x2"], {}, [2, 4]) for n in ("add", "sub", "mul", "div")},
    "matmul": (["m", "m"], {}, [4, 4]),
    "linear": (["x", "w", "b"], {}, [2, 3]),
    "conv2d": (["img", "k", "b"], {"padding": 1}, [1, 3, 6, 6]),
    "max_pool2d": (["img"], {"kernel_size": 2}, [1, 2, 3, 3]),
    "adaptive_avg_pool2d": (["img"], {"output_size": 1}, [1, 2, 1, 1]),
    "sum": (["x"], {"dim": 1}, [2]),
    "mean": (["x"], {}, []),
    "softmax": (["x"], {"dim": 1}, [2, 4]),
    "log_softmax": (["x"], {"dim": 1}, [2, 4]),
    "reshape": (["x"], {"shape": [8]}, [8]),
    "view": (["x"], {"shape": [4, 2]}, [4, 2]),
    "transpose": (["x"], {"dim0": 0, "dim1": 1}, [4, 2]),
    "permute": (["x"], {"dims": [1, 0]}, [4, 2]),
    "flatten": (["img"], {"start_dim": 1}, [1, 72]),
    "mse_loss": (["x", "x2"], {}, []),
    "interpolate": (["img"], {"scale_factor": 2.0, "mode": "bilinear"}, [1, 2, 12, 12]),
    "dropout1d": (["seq"], {"p": 0.3}, [2, 3, 4]),
    "dropout2d": (["img"], {}, [1, 2, 6, 6]),
    "dropout3d": (["img"], {"p": 0.1}, [1, 2, 6, 6]),
    "max_pool1d": (["seq"], {"kernel_size": 2}, [2, 3, 2]),
    "avg_pool1d": (["seq"], {"kernel_size": 2, "stride": 1}, [2, 3, 3]),
    "adaptive_avg_pool1d": (["seq"], {"output_size": 3}, [2, 3, 3]),
    "hardshrink": (["x"], {"lambd": 0.3}, [2, 4]),
    "softshrink": (["x"], {}, [2, 4]),
    "pixel_shuffle": (["q"], {"upscale_factor": 1}, [1, 2, 3, 4]),
    "pixel_unshuffle": (["img"], {"downscale_factor": 2}, [1, 8, 3, 3]),
    "logsigmoid": (["x"], {}, [2, 4]),
    "glu": (["x"], {"dim": 1}, [2, 2]),
    "softsign": (["x"], {}, [2, 4]),
    "softmin": (["x"], {"dim": 1}, [2, 4]),
    "tanhshrink": (["x"], {}, [2, 4]),
    "l1_loss": (["x", "x2"], {}, []),
    "smooth_l1_loss": (["x", "x2"], {"beta": 0.5}, []),
    "huber_loss": (["x", "x2"], {"delta": 0.5, "reduction": "none"}, [2, 4]),
    "binary_cross_entropy": (["x", "x2"], {"reduction": "sum"}, []),
    "binary_cross_entropy_with_logits": (["x", "x2"], {}, []),
    "cross_entropy": (["x", "labels"], {}, []),
    "scaled_dot_product_attention": (["q", "q", "q"], {"is_causal": True}, [1, 2, 3, 4]),
    # activations, joining and shaping, indexing writes, contractions (issue 10)
    **{
        n: (["x"], {}, [2, 4])
        for n in (
            "silu",
            "mish",
            "leaky_relu",
            "elu",
            "celu",
            "selu",
            "hardtanh",
            "relu6",
            "hardswish",
            "hardsigmoid",
            "softplus",
            "tril",
            "triu",
        )
    },
    "threshold": (["x"], {"threshold": 0.5, "value": 0.0}, [2, 4]),
    "cat": (["x", "x2"], {"dim": 1}, [2, 8]),
    "stack": (["x", "x2"], {}, [2, 2, 4]),
    "repeat": (["x"], {"repeats": [2, 1]}, [4, 4]),
    "flip": (["x"], {"dims": [1]}, [2, 4]),
    "roll": (["x"], {"shifts": 1, "dims": 1}, [2, 4]),
    "var": (["x"], {"dim": 1}, [2]),
    "std": (["x"], {"dim": 1, "correction": 0}, [2]),
    "pad": (["img"], {"pad": [1, 1, 1, 1], "mode": "reflect"}, [1, 2, 8, 8]),
    "one_hot": (["labels"], {"num_classes": 4}, [2, 4]),
    "scatter": (["x", "idx"], {"dim": 0, "value": 1.0}, [2, 4]),
    "scatter_add": (["x", "idx", "src"], {"dim": 0}, [2, 4]),
    "scatter_reduce": (["x", "idx", "src"], {"dim": 0, "reduce": "amax"}, [2, 4]),
    "index_add": (["x", "vidx", "rows"], {"dim": 0}, [2, 4]),
    "index_copy": (["x", "perm", "x2"], {"dim": 0}, [2, 4]),
    "index_fill": (["x", "vidx"], {"dim": 0, "value": 0.0}, [2, 4]),
    "masked_scatter": (["x", "mask", "x2"], {}, [2, 4]),
    "put": (["x", "flat", "vals"], {}, [2, 4]),
    "take": (["x", "flat"], {}, [3]),
    "einsum": (["x", "w"], {"equation": "bi,oi->bo"}, [2, 3]),
    "baddbmm": (["bin", "bb1", "bb2"], {"alpha": 0.5}, [2, 3, 5]),
    # the rest of issue 10's list: views, where with a scalar, factories, random fills
    "expand": (["b"], {"size": [2, 3]}, [2, 3]),
    "expand_as": (["src", "x"], {}, [2, 4]),
    "where": (["mask", "x"], {"other_value": -1.0}, [2, 4]),
    "new_empty": (["x"], {"size": [3, 5]}, [3, 5]),
    "new_zeros": (["x"], {"size": [3, 5]}, [3, 5]),
    "new_ones": (["x"], {"size": [3]}, [3]),
    "new_full": (["x"], {"size": [2, 2], "fill_value": 7.0}, [2, 2]),
    "randint": ([], {"high": 10, "size": [4, 3]}, [4, 3]),
    "randint_like": (["x"], {"high": 5}, [2, 4]),
    "normal_": (["x"], {"mean": 1.0, "std": 0.5}, [2, 4]),
    "uniform_": (["x"], {"low": -1.0, "high": 1.0}, [2, 4]),
    "bernoulli_": (["x"], {"p": 0.3}, [2, 4]),
    "exponential_": (["x"], {"lambd": 2.0}, [2, 4]),
    **{n: (["x"], {}, [2, 4]) for n in ("zeros_like", "ones_like", "empty_like")},
    **{n: (["x"], {}, [2, 4]) for n in ("rand_like", "randn_like")},
    "full_like": (["x"], {"fill_value": 3.0}, [2, 4]),
    "conv3d": (["vol", "k3"], {}, [1, 3, 2, 3, 3]),
    "max_pool3d": (["img"], {"kernel_size": 2}, [1, 1, 3, 3]),
    "avg_pool3d": (["img"], {"kernel_size": 2}, [1, 1, 3, 3]),
    "adaptive_avg_pool3d": (["img"], {"output_size": 2}, [1, 2, 2, 2]),
    "adaptive_max_pool2d": (["img"], {"output_size": [3, 3]}, [1, 2, 3, 3]),
    "prelu": (["x", "c4"], {}, [2, 4]),
    "rrelu": (["x"], {"training": True}, [2, 4]),
    "channel_shuffle": (["img"], {"groups": 2}, [1, 2, 6, 6]),
    "lp_pool1d": (["seq"], {"norm_type": 2.0, "kernel_size": 2}, [2, 3, 2]),
    "lp_pool2d": (["img"], {"norm_type": 2.0, "kernel_size": 2}, [1, 2, 3, 3]),
    "soft_margin_loss": (["x", "x2"], {}, []),
    "hinge_embedding_loss": (["x", "x2"], {"reduction": "none"}, [2, 4]),
    "multilabel_soft_margin_loss": (["x", "x2"], {}, []),
    "multi_margin_loss": (["x", "labels"], {"p": 2}, []),
    "margin_ranking_loss": (["t2", "t2", "t2"], {"margin": 0.5}, []),
    "cosine_embedding_loss": (["x", "x2", "t2"], {"reduction": "none"}, [2]),
    "triplet_margin_loss": (["x", "x2", "x"], {}, []),
    "poisson_nll_loss": (["x", "x2"], {"full": True}, []),
    "gaussian_nll_loss": (["x", "x2", "x2"], {"reduction": "sum"}, []),
    # scans and reductions beside cumsum and sum
    "prod": (["x"], {"dim": 1}, [2]),
    "cumprod": (["x"], {"dim": 1}, [2, 4]),
    "cummax": (["x"], {"dim": 1}, [[2, 4], [2, 4]]),
    "cummin": (["x"], {"dim": 0}, [[2, 4], [2, 4]]),
    "logcumsumexp": (["x"], {"dim": 1}, [2, 4]),
    "nansum": (["x"], {"dim": 1}, [2]),
    "nanmean": (["x"], {}, []),
    "embedding_bag": (["gidx", "m"], {"mode": "max"}, [2, 4]),
    "bilinear": (["x", "x2", "bw", "b"], {}, [2, 3]),
    "affine_grid": (["theta"], {"size": [1, 2, 3, 4], "align_corners": False}, [1, 3, 4, 2]),
    "grid_sample": (["img", "sgrid"], {"padding_mode": "border"}, [1, 2, 3, 3]),
    "pdist": (["x"], {"p": 1.0}, [1]),
    "cdist": (["x", "x2"], {"compute_mode": "use_mm_for_euclid_dist"}, [2, 2]),
    "lp_pool3d": (["vol"], {"norm_type": 2.0, "kernel_size": 2}, [1, 2, 1, 2, 2]),
    "fractional_max_pool2d": (["img"], {"kernel_size": 2, "output_size": 3}, [1, 2, 3, 3]),
    "fractional_max_pool3d": (["vol"], {"kernel_size": 2, "output_ratio": 0.5}, [1, 2, 1, 2, 2]),
    "tensordot": (["x", "m"], {"dims": 1}, [2, 4]),
    "var_mean": (["x"], {"dim": 1}, [[2], [2]]),
    "std_mean": (["x"], {"dim": 1, "correction": 0}, [[2], [2]]),
    "linear_cross_entropy": (["x", "lcew", "labels"], {"reduction": "sum"}, []),
    "gumbel_softmax": (["x"], {"tau": 0.5, "hard": True}, [2, 4]),
}

# module type -> (spec, tensor inputs)
MODULE_CALLS = {
    "Linear": ({"in_features": 4, "out_features": 3}, ["x"]),
    "Conv2d": ({"in_channels": 2, "out_channels": 3, "kernel_size": [3, 3], "padding": 1}, ["img"]),
    "BatchNorm2d": ({"num_features": 2}, ["img"]),
    "ReLU": ({"inplace": True}, ["x"]),
    "Sigmoid": ({}, ["x"]),
    "Tanh": ({}, ["x"]),
    "Softmax": ({"dim": 1}, ["x"]),
    "Dropout": ({"p": 0.5}, ["x"]),
    "MaxPool2d": ({"kernel_size": 2, "stride": 2}, ["img"]),
    "AdaptiveAvgPool2d": ({"output_size": [1, 1]}, ["img"]),
    "Flatten": ({}, ["img"]),
    "Identity": ({}, ["x"]),
    "MSELoss": ({"reduction": "sum"}, ["x", "x2"]),
    "Upsample": ({"scale_factor": 2.0}, ["img"]),
    "UpsamplingNearest2d": ({"size": [3, 5]}, ["img"]),
    "UpsamplingBilinear2d": ({"scale_factor": 2.0}, ["img"]),
    "ZeroPad1d": ({"padding": 1}, ["seq"]),
    "ZeroPad2d": ({"padding": 1}, ["img"]),
    "ZeroPad3d": ({"padding": 1}, ["img"]),
    "ReflectionPad1d": ({"padding": 1}, ["seq"]),
    "ReflectionPad2d": ({"padding": 1}, ["img"]),
    "ReflectionPad3d": ({"padding": 1}, ["img"]),
    "ReplicationPad1d": ({"padding": 1}, ["seq"]),
    "ReplicationPad2d": ({"padding": 1}, ["img"]),
    "ReplicationPad3d": ({"padding": 1}, ["img"]),
    "CircularPad1d": ({"padding": 1}, ["seq"]),
    "CircularPad2d": ({"padding": 1}, ["img"]),
    "CircularPad3d": ({"padding": 1}, ["img"]),
    "ConstantPad1d": ({"padding": 1, "value": 0.5}, ["seq"]),
    "ConstantPad2d": ({"padding": 1, "value": 0.5}, ["img"]),
    "ConstantPad3d": ({"padding": 1, "value": 0.5}, ["img"]),
    "PixelShuffle": ({"upscale_factor": 1}, ["img"]),
    "Unfold": ({"kernel_size": 2}, ["img"]),
    "Fold": ({"output_size": [3, 4], "kernel_size": 2}, ["blocks"]),
    "MaxUnpool2d": ({"kernel_size": 2}, ["upv", "upi"]),
    "MaxUnpool1d": ({"kernel_size": 2}, ["upv1", "upi1"]),
    "PixelUnshuffle": ({"downscale_factor": 2}, ["img"]),
    "InstanceNorm1d": ({"num_features": 3}, ["seq"]),
    "InstanceNorm2d": ({"num_features": 2, "affine": True}, ["img"]),
    "InstanceNorm3d": ({"num_features": 1, "track_running_stats": True}, ["img"]),
    "Dropout1d": ({"p": 0.2}, ["seq"]),
    "Dropout2d": ({}, ["img"]),
    "Dropout3d": ({"p": 0.1}, ["img"]),
    "MaxPool1d": ({"kernel_size": 2}, ["seq"]),
    "AvgPool1d": ({"kernel_size": 2}, ["seq"]),
    "AdaptiveAvgPool1d": ({"output_size": 2}, ["seq"]),
    "Hardshrink": ({}, ["x"]),
    "Softshrink": ({"lambd": 0.2}, ["x"]),
    "Unflatten": ({"dim": 1, "unflattened_size": [2, 2]}, ["x"]),
    "LogSigmoid": ({}, ["x"]),
    "GLU": ({"dim": 0}, ["x"]),
    "Softsign": ({}, ["x"]),
    "Softmin": ({"dim": 1}, ["x"]),
    "Tanhshrink": ({}, ["x"]),
    "CosineSimilarity": ({"dim": 1}, ["x", "x2"]),
    "PairwiseDistance": ({"p": 1.0}, ["x", "x2"]),
    "L1Loss": ({}, ["x", "x2"]),
    "SmoothL1Loss": ({"beta": 0.3}, ["x", "x2"]),
    "HuberLoss": ({"delta": 0.3}, ["x", "x2"]),
    "BCELoss": ({}, ["x", "x2"]),
    "BCEWithLogitsLoss": ({"reduction": "sum"}, ["x", "x2"]),
    "KLDivLoss": ({"reduction": "batchmean"}, ["x", "x2"]),
    "CrossEntropyLoss": ({}, ["x", "labels"]),
    "Sequential": (
        {"layers": [{"type": "Linear", "in_features": 4, "out_features": 4}, {"type": "ReLU"}]},
        ["x"],
    ),
    "PReLU": ({"num_parameters": 4}, ["x"]),
    "RReLU": ({"lower": 0.1, "upper": 0.2}, ["x"]),
    "Softmax2d": ({}, ["img"]),
    "ChannelShuffle": ({"groups": 2}, ["img"]),
    "LocalResponseNorm": ({"size": 2}, ["seq"]),
    "AlphaDropout": ({"p": 0.2}, ["x"]),
    "FeatureAlphaDropout": ({"p": 0.2}, ["img"]),
    "LPPool1d": ({"norm_type": 2.0, "kernel_size": 2}, ["seq"]),
    "LPPool2d": ({"norm_type": 1.5, "kernel_size": 2}, ["img"]),
    "MarginRankingLoss": ({"margin": 0.1}, ["t2", "t2", "t2"]),
    "HingeEmbeddingLoss": ({}, ["x", "x2"]),
    "CosineEmbeddingLoss": ({}, ["x", "x2", "t2"]),
    "SoftMarginLoss": ({}, ["x", "x2"]),
    "MultiLabelSoftMarginLoss": ({}, ["x", "x2"]),
    "MultiMarginLoss": ({"margin": 0.5}, ["x", "labels"]),
    "MultiLabelMarginLoss": ({}, ["x", "gidx"]),
    "TripletMarginLoss": ({"swap": True}, ["x", "x2", "x"]),
    "TripletMarginWithDistanceLoss": ({}, ["x", "x2", "x"]),
    "PoissonNLLLoss": ({"log_input": False}, ["x", "x2"]),
    "GaussianNLLLoss": ({"full": True}, ["x", "x2", "x2"]),
    # activations (issue 10)
    **{
        n: ({"inplace": True}, ["x"])
        for n in ("SiLU", "Mish", "Hardswish", "Hardsigmoid", "ReLU6", "SELU", "ELU", "CELU")
    },
    "Hardtanh": ({"min_val": -0.5, "max_val": 0.5, "inplace": True}, ["x"]),
    "Threshold": ({"threshold": 0.5, "value": 0.0, "inplace": True}, ["x"]),
    "LeakyReLU": ({"negative_slope": 0.2, "inplace": True}, ["x"]),
    "Softplus": ({"beta": 2.0}, ["x"]),
    # every other layer of engine.nn (issue 10); a tuple result binds a list (third item)
    "AvgPool2d": ({"kernel_size": 2}, ["img"]),
    "Conv1d": ({"in_channels": 3, "out_channels": 2, "kernel_size": 3}, ["bin"]),
    "ConvTranspose2d": ({"in_channels": 2, "out_channels": 3, "kernel_size": 2}, ["img"]),
    "GroupNorm": ({"num_groups": 1, "num_channels": 2}, ["img"]),
    "RMSNorm": ({"normalized_shape": 4}, ["x"]),
    "BatchNorm1d": ({"num_features": 4}, ["x"]),
    "Embedding": ({"num_embeddings": 4, "embedding_dim": 3}, ["labels"]),
    "GELU": ({"approximate": "tanh"}, ["x"]),
    "LayerNorm": ({"normalized_shape": 4}, ["x"]),
    "LogSoftmax": ({"dim": 1}, ["x"]),
    "NLLLoss": ({}, ["x", "labels"]),
    "MultiheadAttention": (
        {"embed_dim": 4, "num_heads": 2, "batch_first": True},
        ["seq", "seq", "seq"],
        {"out": ["y", "weights"]},
    ),
    "TransformerEncoderLayer": (
        {"d_model": 4, "nhead": 2, "dim_feedforward": 8, "batch_first": True},
        ["seq"],
    ),
    "TransformerDecoderLayer": (
        {"d_model": 4, "nhead": 2, "dim_feedforward": 8, "batch_first": True},
        ["seq", "seq"],
    ),
    "TransformerDecoder": (
        {
            "decoder_layer": {
                "type": "TransformerDecoderLayer",
                "d_model": 4,
                "nhead": 2,
                "dim_feedforward": 8,
                "batch_first": True,
            },
            "num_layers": 2,
        },
        ["seq", "seq"],
    ),
    "Transformer": (
        {
            "d_model": 4,
            "nhead": 2,
            "num_encoder_layers": 1,
            "num_decoder_layers": 1,
            "dim_feedforward": 8,
            "batch_first": True,
        },
        ["seq", "seq"],
    ),
    "TransformerEncoder": (
        {
            "encoder_layer": {
                "type": "TransformerEncoderLayer",
                "d_model": 4,
                "nhead": 2,
                "dim_feedforward": 8,
                "batch_first": True,
            },
            "num_layers": 2,
        },
        ["seq"],
    ),
    "Conv3d": ({"in_channels": 1, "out_channels": 2, "kernel_size": 2}, ["img"]),
    "ConvTranspose1d": ({"in_channels": 3, "out_channels": 2, "kernel_size": 2}, ["seq"]),
    "ConvTranspose3d": ({"in_channels": 1, "out_channels": 2, "kernel_size": 2}, ["img"]),
    "BatchNorm3d": ({"num_features": 2}, ["vol"]),
    "MaxPool3d": ({"kernel_size": 2}, ["img"]),
    "AvgPool3d": ({"kernel_size": 2}, ["img"]),
    "AdaptiveAvgPool3d": ({"output_size": 2}, ["img"]),
    "AdaptiveMaxPool1d": ({"output_size": 2}, ["seq"]),
    "AdaptiveMaxPool2d": ({"output_size": [3, 3]}, ["img"]),
    "AdaptiveMaxPool3d": ({"output_size": 2}, ["img"]),
    # recurrent layers: (output, h_n) binds a list; LSTM's (output, (h_n, c_n)) a nested one
    "RNN": ({"input_size": 4, "hidden_size": 3, "num_layers": 2}, ["seq"], {"out": ["y", "h"]}),
    "GRU": (
        {"input_size": 4, "hidden_size": 3, "bidirectional": True},
        ["seq"],
        {"out": ["y", "h"]},
    ),
    "LSTM": (
        {"input_size": 4, "hidden_size": 3, "batch_first": True},
        ["seq"],
        {"out": ["y", ["h", "c"]]},
    ),
    "RNNCell": ({"input_size": 4, "hidden_size": 3}, ["x"]),
    "GRUCell": ({"input_size": 4, "hidden_size": 3}, ["x"]),
    "LSTMCell": ({"input_size": 4, "hidden_size": 3}, ["x"], {"out": ["h", "c"]}),
    "EmbeddingBag": ({"num_embeddings": 4, "embedding_dim": 3, "mode": "sum"}, ["gidx"]),
    "LazyLinear": ({"out_features": 3}, ["x"]),
    "LazyConv1d": ({"out_channels": 2, "kernel_size": 3}, ["seq"]),
    "LazyConv2d": ({"out_channels": 3, "kernel_size": 3}, ["img"]),
    "LazyConv3d": ({"out_channels": 2, "kernel_size": 2}, ["vol"]),
    "LazyConvTranspose1d": ({"out_channels": 2, "kernel_size": 2}, ["seq"]),
    "LazyConvTranspose2d": ({"out_channels": 3, "kernel_size": 2}, ["img"]),
    "LazyConvTranspose3d": ({"out_channels": 2, "kernel_size": 2}, ["vol"]),
    "LazyBatchNorm1d": ({}, ["x"]),
    "LazyBatchNorm2d": ({}, ["img"]),
    "LazyBatchNorm3d": ({}, ["vol"]),
    "LazyInstanceNorm1d": ({}, ["seq"]),
    "LazyInstanceNorm2d": ({}, ["img"]),
    "LazyInstanceNorm3d": ({}, ["vol"]),
    "Bilinear": ({"in1_features": 4, "in2_features": 4, "out_features": 3}, ["x", "x2"]),
    "MaxUnpool3d": ({"kernel_size": 2}, ["upv3", "upi3"]),
    "LPPool3d": ({"norm_type": 2.0, "kernel_size": 2}, ["vol"]),
    "FractionalMaxPool2d": ({"kernel_size": 2, "output_size": 3}, ["img"]),
    "FractionalMaxPool3d": ({"kernel_size": 2, "output_ratio": 0.5}, ["vol"]),
    "CTCLoss": ({"zero_infinity": True}, ["ctcx", "ctct", "ctcil", "ctctl"]),
    "LinearCrossEntropyLoss": ({"in_features": 4, "num_classes": 5, "bias": True}, ["x", "labels"]),
}


def test_the_tables_cover_the_catalog():
    assert sorted(OP_CALLS) == sorted(OPS)
    assert sorted(MODULE_CALLS) == sorted(MODULES)


def run_one(tmp_path, node, modules=None, inputs=None):
    doc = {
        "name": "one",
        "inputs": {k: INPUTS[k] for k in inputs},
        "program": [node],
        "modules": modules or {},
    }
    path = tmp_path / "one.yaml"
    path.write_text(yaml.safe_dump(doc))
    return run_scenario(path)["variants"][0]


@pytest.mark.parametrize("op", sorted(OPS))
def test_op_runs_and_makes_its_result(tmp_path, op):
    ins, args, shape = OP_CALLS[op]
    node = {"id": "r", "op": op, "in": ins, **({"args": args} if args else {})}
    if shape and isinstance(shape[0], list):  # a tuple result binds a list of names
        node["out"] = [f"o{i}" for i in range(len(shape))]
    v = run_one(tmp_path, node, inputs=sorted(set(ins)))
    assert v["status"] == "ok", v["error"]
    [row] = v["ops"]
    # the random fills (normal_, uniform_, bernoulli_) are in-place ops of their own
    assert row["op"] == op and row["inplace"] is op.endswith("_")


@pytest.mark.parametrize("op", sorted(n for n, o in OPS.items() if o.inplace))
def test_in_place_form_writes_its_input(tmp_path, op):
    ins, args, _ = OP_CALLS[op]
    v = run_one(
        tmp_path,
        {"id": "r", "op": op, "in": ins, "inplace": True, **({"args": args} if args else {})},
        inputs=ins,
    )
    assert v["status"] == "ok", v["error"]
    [row] = v["ops"]
    assert (row["inplace"], row["inplace_cost"], row["allocated_bytes"]) == (True, "free", 0)


@pytest.mark.parametrize("mtype", sorted(MODULES))
def test_module_builds_and_runs(tmp_path, mtype):
    spec, ins, *extra = MODULE_CALLS[mtype]
    node = {"id": "r", "module": "m0", "in": ins, **(extra[0] if extra else {})}
    v = run_one(tmp_path, node, {"m0": {"type": mtype, **spec}}, sorted(set(ins)))
    assert v["status"] == "ok", v["error"]
    assert v["ops"][0]["module"] == "m0" and v["ops"][0]["op"] == mtype


def test_docs_list_every_op_and_module():
    text = (ROOT / "docs" / "scenarios.md").read_text()
    documented = set(re.findall(r"^\| `([A-Za-z_0-9]+)` \|", text, re.M))
    assert set(OPS) | set(MODULES) <= documented


def test_randint_inputs_are_class_labels(tmp_path):
    path = tmp_path / "r.yaml"
    path.write_text(
        textwrap.dedent("""\
        name: labels
        inputs:
          t: {shape: [1000], init: randint, high: 4, dtype: int64}
        program:
          - {id: s, op: sum, in: t}
        expect:
          '*': {baseline: 8000}
        """)
    )
    v = run_scenario(path)["variants"][0]
    assert v["status"] == "ok" and v["expectations"][0]["passed"]


@pytest.mark.parametrize("op", sorted(OPS))
def test_op_arguments_reach_the_engine(op):
    import engine
    from memprof.scenario.build import make_input
    from memprof.scenario.model import InputSpec

    ins, args, shape = OP_CALLS[op]
    tensors = [
        make_input(engine, InputSpec.model_validate(INPUTS[n]), "float32", "cpu") for n in ins
    ]
    out = OPS[op].call(tensors, args, False)
    if shape and isinstance(shape[0], list):
        assert [list(o.shape) for o in out] == shape
    else:
        assert list(out.shape) == shape


def test_the_op_catalog_is_the_engine_op_table():
    from engine.ops import registry

    assert list(OPS) == [row.name for row in registry.scenario_ops()]
    for row in registry.scenario_ops():
        assert OPS[row.name].inplace == (row.inplace is not None)
