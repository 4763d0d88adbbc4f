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
    PReLU,
    ReLU,
    ReLU6,
    RReLU,
    Sigmoid,
    SiLU,
    Softmax,
    Softmax2d,
    Softmin,
    Softplus,
    Softshrink,
    Softsign,
    Tanh,
    Tanhshrink,
    Threshold,
)
from engine.nn.modules.channelshuffle import ChannelShuffle
from engine.nn.modules.container import ModuleDict, ModuleList, ParameterList, Sequential
from engine.nn.modules.conv import Conv1d, Conv2d, ConvTranspose2d
from engine.nn.modules.distance import CosineSimilarity, PairwiseDistance
from engine.nn.modules.dropout import (
    AlphaDropout,
    Dropout,
    Dropout1d,
    Dropout2d,
    Dropout3d,
    FeatureAlphaDropout,
)
from engine.nn.modules.flatten import Flatten, Unflatten
from engine.nn.modules.fold import Fold, Unfold
from engine.nn.modules.linear import Identity, Linear
from engine.nn.modules.loss import (
    BCELoss,
    BCEWithLogitsLoss,
    CosineEmbeddingLoss,
    CrossEntropyLoss,
    GaussianNLLLoss,
    HingeEmbeddingLoss,
    HuberLoss,
    KLDivLoss,
    L1Loss,
    MarginRankingLoss,
    MSELoss,
    MultiLabelMarginLoss,
    MultiLabelSoftMarginLoss,
    MultiMarginLoss,
    NLLLoss,
    PoissonNLLLoss,
    SmoothL1Loss,
    SoftMarginLoss,
    TripletMarginLoss,
    TripletMarginWithDistanceLoss,
)
from engine.nn.modules.lp_pool import LPPool1d, LPPool2d
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
    InstanceNorm1d,
    InstanceNorm2d,
    InstanceNorm3d,
    LayerNorm,
    LocalResponseNorm,
    RMSNorm,
)
from engine.nn.modules.padding import *  # noqa: F403 - ZeroPad1d ... CircularPad3d
from engine.nn.modules.padding import __all__ as _padding
from engine.nn.modules.pixel import PixelShuffle, PixelUnshuffle
from engine.nn.modules.pooling import (
    AdaptiveAvgPool1d,
    AdaptiveAvgPool2d,
    AvgPool1d,
    AvgPool2d,
    MaxPool1d,
    MaxPool2d,
)
from engine.nn.modules.rnn import GRU, LSTM, RNN, GRUCell, LSTMCell, RNNCell
from engine.nn.modules.sparse import Embedding
from engine.nn.modules.transformer import (
    MultiheadAttention,
    Transformer,
    TransformerDecoder,
    TransformerDecoderLayer,
    TransformerEncoder,
    TransformerEncoderLayer,
)
from engine.nn.modules.unpool import MaxUnpool1d, MaxUnpool2d
from engine.nn.modules.upsampling import Upsample, UpsamplingBilinear2d, UpsamplingNearest2d

__all__ = [
    "GaussianNLLLoss",
    "PoissonNLLLoss",
    "TripletMarginWithDistanceLoss",
    "TripletMarginLoss",
    "MultiLabelMarginLoss",
    "MultiMarginLoss",
    "MultiLabelSoftMarginLoss",
    "SoftMarginLoss",
    "CosineEmbeddingLoss",
    "HingeEmbeddingLoss",
    "MarginRankingLoss",
    "LPPool2d",
    "LPPool1d",
    "ChannelShuffle",
    "LocalResponseNorm",
    "FeatureAlphaDropout",
    "AlphaDropout",
    "Softmax2d",
    "RReLU",
    "PReLU",
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
    "InstanceNorm1d",
    "InstanceNorm2d",
    "InstanceNorm3d",
    "Dropout1d",
    "Dropout2d",
    "Dropout3d",
    "Transformer",
    "TransformerDecoder",
    "TransformerDecoderLayer",
    "MaxPool1d",
    "AvgPool1d",
    "AdaptiveAvgPool1d",
    "Unflatten",
    "PixelShuffle",
    "PixelUnshuffle",
    "Fold",
    "Unfold",
    "MaxUnpool1d",
    "MaxUnpool2d",
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
__all__ += ["RNN", "LSTM", "GRU", "RNNCell", "LSTMCell", "GRUCell"]

# 3-D convolution, pooling and batch norm; transposed 1-D/3-D convolution; adaptive max pooling
from engine.nn.modules.conv import Conv3d, ConvTranspose1d, ConvTranspose3d  # noqa: E402
from engine.nn.modules.normalization import BatchNorm3d  # noqa: E402
from engine.nn.modules.pooling import (  # noqa: E402
    AdaptiveAvgPool3d,
    AdaptiveMaxPool1d,
    AdaptiveMaxPool2d,
    AdaptiveMaxPool3d,
    AvgPool3d,
    MaxPool3d,
)

__all__ += [
    "Conv3d",
    "ConvTranspose1d",
    "ConvTranspose3d",
    "BatchNorm3d",
    "MaxPool3d",
    "AvgPool3d",
    "AdaptiveAvgPool3d",
    "AdaptiveMaxPool1d",
    "AdaptiveMaxPool2d",
    "AdaptiveMaxPool3d",
]

# EmbeddingBag
from engine.nn.modules.sparse import EmbeddingBag  # noqa: E402

__all__ += ["EmbeddingBag"]

# Bilinear
from engine.nn.modules.bilinear import Bilinear  # noqa: E402

__all__ += ["Bilinear"]

# Lazy modules (their shapes from the first call) and the uninitialized tensors they hold
from engine.nn.modules.lazy import (  # noqa: E402
    LazyBatchNorm1d,
    LazyBatchNorm2d,
    LazyBatchNorm3d,
    LazyConv1d,
    LazyConv2d,
    LazyConv3d,
    LazyConvTranspose1d,
    LazyConvTranspose2d,
    LazyConvTranspose3d,
    LazyInstanceNorm1d,
    LazyInstanceNorm2d,
    LazyInstanceNorm3d,
    LazyLinear,
    UninitializedBuffer,
    UninitializedParameter,
)

__all__ += [
    "LazyLinear",
    "LazyConv1d",
    "LazyConv2d",
    "LazyConv3d",
    "LazyConvTranspose1d",
    "LazyConvTranspose2d",
    "LazyConvTranspose3d",
    "LazyBatchNorm1d",
    "LazyBatchNorm2d",
    "LazyBatchNorm3d",
    "LazyInstanceNorm1d",
    "LazyInstanceNorm2d",
    "LazyInstanceNorm3d",
    "UninitializedParameter",
    "UninitializedBuffer",
]

# MaxUnpool3d, LPPool3d
from engine.nn.modules.lp_pool import LPPool3d  # noqa: E402
from engine.nn.modules.unpool import MaxUnpool3d  # noqa: E402

__all__ += ["MaxUnpool3d", "LPPool3d"]

# ParameterDict
from engine.nn.modules.container import ParameterDict  # noqa: E402

__all__ += ["ParameterDict"]

# FractionalMaxPool2d, FractionalMaxPool3d
from engine.nn.modules.fractional import FractionalMaxPool2d, FractionalMaxPool3d  # noqa: E402

__all__ += ["FractionalMaxPool2d", "FractionalMaxPool3d"]

# CTCLoss
from engine.nn.modules.ctc import CTCLoss  # noqa: E402

__all__ += ["CTCLoss"]

# LinearCrossEntropyLoss, LinearCrossEntropyOptions
from engine.nn.modules.linear_ce import LinearCrossEntropyLoss  # noqa: E402
from engine.ops.nn.linear_ce import LinearCrossEntropyOptions  # noqa: E402

__all__ += ["LinearCrossEntropyLoss", "LinearCrossEntropyOptions"]
