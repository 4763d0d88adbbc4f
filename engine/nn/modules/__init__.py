"""Layers, following torch.nn.modules."""

from engine.nn.modules.activation import (
    CELU,
    ELU,
    GELU,
    GLU,
    SELU,
    Hardshrink,
    Hardsigmoid,
    Hardswish,
    Hardtanh,
    LeakyReLU,
    LogSigmoid,
    LogSoftmax,
    Mish,
    ReLU,
    ReLU6,
    Sigmoid,
    SiLU,
    Softmax,
    Softmin,
    Softplus,
    Softshrink,
    Softsign,
    Tanh,
    Tanhshrink,
    Threshold,
)
from engine.nn.modules.container import ModuleDict, ModuleList, ParameterList, Sequential
from engine.nn.modules.conv import Conv1d, Conv2d, ConvTranspose2d
from engine.nn.modules.distance import CosineSimilarity, PairwiseDistance
from engine.nn.modules.dropout import Dropout
from engine.nn.modules.flatten import Flatten, Unflatten
from engine.nn.modules.linear import Identity, Linear
from engine.nn.modules.loss import (
    BCELoss,
    BCEWithLogitsLoss,
    CrossEntropyLoss,
    HuberLoss,
    KLDivLoss,
    L1Loss,
    MSELoss,
    NLLLoss,
    SmoothL1Loss,
)
from engine.nn.modules.module import (
    Module,
    RemovableHandle,
    register_module_forward_hook,
    register_module_forward_pre_hook,
)
from engine.nn.modules.normalization import (
    BatchNorm1d,
    BatchNorm2d,
    GroupNorm,
    LayerNorm,
    RMSNorm,
)
from engine.nn.modules.padding import *  # noqa: F403 - ZeroPad1d ... CircularPad3d
from engine.nn.modules.padding import __all__ as _padding
from engine.nn.modules.pixel import PixelShuffle, PixelUnshuffle
from engine.nn.modules.pooling import AdaptiveAvgPool2d, AvgPool2d, MaxPool2d
from engine.nn.modules.sparse import Embedding
from engine.nn.modules.transformer import (
    MultiheadAttention,
    TransformerEncoder,
    TransformerEncoderLayer,
)
from engine.nn.modules.upsampling import Upsample, UpsamplingBilinear2d, UpsamplingNearest2d

__all__ = [
    "ConvTranspose2d",
    "RMSNorm",
    "ParameterList",
    "ModuleDict",
    "GroupNorm",
    "Conv1d",
    "CELU",
    "ELU",
    "Hardsigmoid",
    "Hardswish",
    "Hardtanh",
    "LeakyReLU",
    "Mish",
    "ReLU6",
    "SELU",
    "SiLU",
    "Softplus",
    "Threshold",
    "AdaptiveAvgPool2d",
    "AvgPool2d",
    "BatchNorm1d",
    "BatchNorm2d",
    "Conv2d",
    "CrossEntropyLoss",
    "Dropout",
    "Embedding",
    "Flatten",
    "GELU",
    "Identity",
    "LayerNorm",
    "Linear",
    "LogSoftmax",
    "MSELoss",
    "Unflatten",
    "PixelShuffle",
    "PixelUnshuffle",
    "Hardshrink",
    "Softshrink",
    "Upsample",
    "UpsamplingNearest2d",
    "UpsamplingBilinear2d",
    "CosineSimilarity",
    "PairwiseDistance",
    "GLU",
    "LogSigmoid",
    "Softmin",
    "Softsign",
    "Tanhshrink",
    "L1Loss",
    "SmoothL1Loss",
    "HuberLoss",
    "BCELoss",
    "BCEWithLogitsLoss",
    "KLDivLoss",
    "MaxPool2d",
    "Module",
    "MultiheadAttention",
    "ModuleList",
    "NLLLoss",
    "ReLU",
    "RemovableHandle",
    "Sequential",
    "Sigmoid",
    "Softmax",
    "Tanh",
    "TransformerEncoder",
    "TransformerEncoderLayer",
    "register_module_forward_hook",
    "register_module_forward_pre_hook",
]
__all__ += _padding
