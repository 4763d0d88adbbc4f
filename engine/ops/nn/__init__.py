"""Neural-network primitives, forward and backward side by side, one file per family.

linear, conv2d, max/avg/adaptive-avg pooling, mse_loss, nll_loss, gather, index_select,
embedding, dropout, batch_norm, layer_norm, gelu, and the arithmetic optimizers run in place
(addcmul, addcdiv, lerp). Composite ops (cross_entropy = nll_loss(log_softmax)) live in
engine.nn.functional and need no backward of their own.

What each op allocates and keeps follows PyTorch's CPU kernels, so the allocator's timeline is
the one torch's profiler shows for the same program:
- linear is one primitive like addmm: one output buffer (matmul into it, bias added in place);
  backward makes grad_input = g @ W, grad_weight = g.T @ x (already in the weight's [out, in]
  layout, so AccumulateGrad can take it over) and grad_bias = g.sum(0), each only when needed.
- mse_loss keeps PyTorch's quirk: the mean is written into a full-size result buffer that is
  then viewed as 0-d, so the loss scalar holds input-sized memory until it dies.
- dropout keeps its scaled mask (`noise`); in place it costs no clone of the input.
- conv2d keeps only input and weight (like torch) and rebuilds its im2col columns in backward.
  Columns are built one sample at a time in a charged buffer (a temporary of one sample's
  columns, reused across the batch), so a convolution's workspace is visible and bounded.
Scratch that is not charged is bounded by kernels.SCRATCH_ELEMS elements (see kernels.py).
"""

from __future__ import annotations

from engine.ops.nn.activation import gelu
from engine.ops.nn.conv import conv2d
from engine.ops.nn.dropout import dropout, dropout_
from engine.ops.nn.indexing import embedding, gather, index_select
from engine.ops.nn.linear import linear
from engine.ops.nn.loss import mse_loss, nll_loss
from engine.ops.nn.norm import batch_norm, layer_norm
from engine.ops.nn.pool import adaptive_avg_pool2d, avg_pool2d, max_pool2d
from engine.ops.nn.ternary import addcdiv, addcdiv_, addcmul, addcmul_, lerp, lerp_

# torch.* functions and Tensor methods (bound by engine.ops at import)
FUNCTIONS = dict(
    conv2d=conv2d,
    max_pool2d=max_pool2d,
    avg_pool2d=avg_pool2d,
    adaptive_avg_pool2d=adaptive_avg_pool2d,
    gather=gather,
    index_select=index_select,
    addcmul=addcmul,
    addcdiv=addcdiv,
    lerp=lerp,
    dropout=lambda input, p, train: dropout(input, p, train),
)
METHODS = dict(
    gather=lambda self, dim, index: gather(self, dim, index),
    index_select=lambda self, dim, index: index_select(self, dim, index),
    addcmul=addcmul,
    addcmul_=addcmul_,
    addcdiv=addcdiv,
    addcdiv_=addcdiv_,
    lerp=lerp,
    lerp_=lerp_,
)


def register(namespace: dict, tensor_cls) -> None:
    """Add the torch.* functions to the op table and the methods to Tensor."""
    for name, fn in FUNCTIONS.items():
        namespace.setdefault(name, fn)
    for name, fn in METHODS.items():
        if not hasattr(tensor_cls, name):
            setattr(tensor_cls, name, fn)


__all__ = [
    "linear",
    "conv2d",
    "max_pool2d",
    "avg_pool2d",
    "adaptive_avg_pool2d",
    "mse_loss",
    "nll_loss",
    "gather",
    "index_select",
    "embedding",
    "dropout",
    "dropout_",
    "batch_norm",
    "layer_norm",
    "gelu",
    "addcmul",
    "addcmul_",
    "addcdiv",
    "addcdiv_",
    "lerp",
    "lerp_",
]
