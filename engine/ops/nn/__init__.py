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
  Columns are built one sample at a time in a buffer reused across the batch: the convolution's
  workspace, device-specific, so reported apart as scratch (kernels.Scratch), not charged.
Other scratch that is not charged is bounded by kernels.SCRATCH_ELEMS elements (see kernels.py).
"""

from __future__ import annotations

from engine.ops.nn.activation import gelu, glu, logsigmoid, softmin, softsign, tanhshrink
from engine.ops.nn.alpha_dropout import alpha_dropout, feature_alpha_dropout
from engine.ops.nn.channel_shuffle import channel_shuffle
from engine.ops.nn.conv import conv2d
from engine.ops.nn.dropout import (
    dropout,
    dropout1d,
    dropout2d,
    dropout3d,
    dropout_,
    feature_dropout,
)
from engine.ops.nn.fold import fold
from engine.ops.nn.indexing import embedding, gather, index_select
from engine.ops.nn.linear import linear
from engine.ops.nn.loss import cross_entropy, mse_loss, nll_loss
from engine.ops.nn.lp_pool import local_response_norm, lp_pool1d, lp_pool2d
from engine.ops.nn.margin_loss import (
    cosine_embedding_loss,
    gaussian_nll_loss,
    hinge_embedding_loss,
    margin_ranking_loss,
    multi_margin_loss,
    multilabel_margin_loss,
    multilabel_soft_margin_loss,
    poisson_nll_loss,
    soft_margin_loss,
    triplet_margin_loss,
    triplet_margin_with_distance_loss,
)
from engine.ops.nn.norm import batch_norm, instance_norm, layer_norm
from engine.ops.nn.pixel import pixel_shuffle, pixel_unshuffle
from engine.ops.nn.pointwise_loss import (
    binary_cross_entropy,
    binary_cross_entropy_with_logits,
    huber_loss,
    kl_div,
    l1_loss,
    smooth_l1_loss,
)
from engine.ops.nn.pool import (
    adaptive_avg_pool1d,
    adaptive_avg_pool2d,
    avg_pool1d,
    avg_pool2d,
    max_pool1d,
    max_pool2d,
)
from engine.ops.nn.prelu import prelu, rrelu
from engine.ops.nn.similarity import cosine_similarity, normalize, pairwise_distance
from engine.ops.nn.ternary import addcdiv, addcdiv_, addcmul, addcmul_, lerp, lerp_
from engine.ops.nn.unpool import max_unpool1d, max_unpool2d
from engine.ops.nn.upsample import interpolate
from engine.ops.registry import REQUIRED, IntOrPair, Reduction, Scenario, register

# The rows of the op table (engine/ops/registry.py): torch.* functions, Tensor methods and
# engine.nn.functional's forms.
register(
    "linear",
    linear,
    function=False,
    functional=True,
    scenario=Scenario(
        inputs=("input", "weight"), optional_inputs=("bias",), doc="input @ weight.T + bias"
    ),
)
register(
    "conv2d",
    conv2d,
    functional=True,
    scenario=Scenario(
        inputs=("input", "weight"),
        optional_inputs=("bias",),
        args=(
            ("stride", IntOrPair, 1, ""),
            ("padding", IntOrPair, 0, ""),
            ("dilation", IntOrPair, 1, ""),
            ("groups", int, 1, ""),
        ),
        doc="2-D convolution (NCHW)",
    ),
)
register(
    "max_pool2d",
    max_pool2d,
    functional=True,
    scenario=Scenario(
        args=(
            ("kernel_size", IntOrPair, REQUIRED, ""),
            ("stride", IntOrPair | None, None, ""),
            ("padding", IntOrPair, 0, ""),
        ),
        doc="2-D max pooling",
    ),
)
register(
    "avg_pool2d",
    avg_pool2d,
    functional=True,
    scenario=Scenario(
        args=(
            ("kernel_size", IntOrPair, REQUIRED, ""),
            ("stride", IntOrPair | None, None, ""),
            ("padding", IntOrPair, 0, ""),
        ),
        doc="2-D average pooling",
    ),
)
register(
    "adaptive_avg_pool2d",
    adaptive_avg_pool2d,
    functional=True,
    scenario=Scenario(
        args=(("output_size", IntOrPair, REQUIRED, ""),), doc="2-D adaptive average pooling"
    ),
)
register(
    "mse_loss",
    mse_loss,
    function=False,
    functional=True,
    scenario=Scenario(
        inputs=("input", "target"),
        args=(("reduction", Reduction, "mean", ""),),
        doc="mean squared error",
    ),
)
register("nll_loss", nll_loss, function=False, functional=True)
for _name, _fn, _doc, _extra in (
    ("l1_loss", l1_loss, "mean absolute error", ()),
    (
        "smooth_l1_loss",
        smooth_l1_loss,
        "smooth L1 (quadratic below beta)",
        (("beta", float, 1.0, ""),),
    ),
    ("huber_loss", huber_loss, "Huber loss (quadratic below delta)", (("delta", float, 1.0, ""),)),
    ("binary_cross_entropy", binary_cross_entropy, "binary cross entropy of probabilities", ()),
    (
        "binary_cross_entropy_with_logits",
        binary_cross_entropy_with_logits,
        "binary cross entropy of logits",
        (),
    ),
):
    register(
        _name,
        _fn,
        function=False,
        functional=True,
        scenario=Scenario(
            inputs=("input", "target"),
            args=(("reduction", Reduction, "mean", ""), *_extra),
            doc=_doc,
        ),
    )
register("kl_div", kl_div, function=False, functional=True)
register(
    "interpolate",
    interpolate,
    function=False,
    functional=True,
    scenario=Scenario(
        args=(
            ("size", IntOrPair | None, None, "the output's spatial size"),
            ("scale_factor", float | list[float] | None, None, "or its scale"),
            ("mode", str, "nearest", "nearest, nearest-exact, linear (3-D), bilinear (4-D)"),
            ("align_corners", bool | None, None, ""),
        ),
        doc="F.interpolate: up/down-sampling (on cpu torch's kernel works channels last)",
    ),
)
register("fold", fold, function=False, functional=True)
register("max_unpool1d", max_unpool1d, function=False, functional=True)
register("max_unpool2d", max_unpool2d, function=False, functional=True)
register(
    "pixel_shuffle",
    pixel_shuffle,
    functional=True,
    scenario=Scenario(
        args=(("upscale_factor", int, REQUIRED, ""),),
        doc="[.., C r^2, H, W] -> [.., C, H r, W r], a copy",
    ),
)
register(
    "pixel_unshuffle",
    pixel_unshuffle,
    functional=True,
    scenario=Scenario(
        args=(("downscale_factor", int, REQUIRED, ""),),
        doc="[.., C, H r, W r] -> [.., C r^2, H, W], a copy",
    ),
)
register(
    "max_pool1d",
    max_pool1d,
    functional=True,
    scenario=Scenario(
        args=(
            ("kernel_size", int, REQUIRED, ""),
            ("stride", int | None, None, ""),
            ("padding", int, 0, ""),
        ),
        doc="1-D max pooling (torch's unsqueeze, 2-D kernel, squeeze)",
    ),
)
register(
    "avg_pool1d",
    avg_pool1d,
    functional=True,
    scenario=Scenario(
        args=(
            ("kernel_size", int, REQUIRED, ""),
            ("stride", int | None, None, ""),
            ("padding", int, 0, ""),
        ),
        doc="1-D average pooling (torch's unsqueeze, 2-D kernel, squeeze)",
    ),
)
register(
    "adaptive_avg_pool1d",
    adaptive_avg_pool1d,
    functional=True,
    scenario=Scenario(
        args=(("output_size", int, REQUIRED, ""),), doc="1-D adaptive average pooling"
    ),
)
register("feature_dropout", feature_dropout, functional=False)
for _name, _fn in (("dropout1d", dropout1d), ("dropout2d", dropout2d), ("dropout3d", dropout3d)):
    register(
        _name,
        _fn,
        function=False,
        functional=True,
        scenario=Scenario(
            args=(("p", float, 0.5, ""),),
            doc=f"F.{_name}: whole channels zeroed (a small noise tensor kept for backward)",
        ),
    )
register("instance_norm", instance_norm, functional=True)
register("normalize", normalize, function=False, functional=True)
register("cosine_similarity", cosine_similarity, functional=True)
register("pairwise_distance", pairwise_distance, functional=True)
register(
    "logsigmoid",
    logsigmoid,
    function=False,
    functional=True,
    scenario=Scenario(doc="log(sigmoid(x)); on cpu torch keeps an input-sized buffer for backward"),
)
register(
    "glu",
    glu,
    function=False,
    functional=True,
    scenario=Scenario(args=(("dim", int, -1, ""),), doc="a * sigmoid(b), x's halves along dim"),
)
register(
    "softsign", softsign, function=False, functional=True, scenario=Scenario(doc="x / (1 + |x|)")
)
register(
    "softmin",
    softmin,
    function=False,
    functional=True,
    scenario=Scenario(args=(("dim", int, REQUIRED, ""),), doc="softmax(-x)"),
)
register(
    "tanhshrink", tanhshrink, function=False, functional=True, scenario=Scenario(doc="x - tanh(x)")
)
register(
    "cross_entropy",
    cross_entropy,
    function=False,
    functional=True,
    scenario=Scenario(
        inputs=("input", "target"),
        args=(("reduction", Reduction, "mean", ""),),
        doc="cross entropy of logits and class indices",
    ),
)
register(
    "gather",
    gather,
    method=lambda self, dim, index: gather(self, dim, index),
    functional=False,
    scenario=Scenario(
        inputs=("input", "index"),
        args=(("dim", int, REQUIRED, ""),),
        doc="input's values at `index` (int64) along dim",
        call=lambda ts, args, inplace: gather(ts[0], args["dim"], ts[1]),
    ),
)
register(
    "index_select",
    index_select,
    method=lambda self, dim, index: index_select(self, dim, index),
    scenario=Scenario(
        inputs=("input", "index"),
        args=(("dim", int, REQUIRED, ""),),
        doc="the entries of `index` (int64) along dim, copied",
        call=lambda ts, args, inplace: index_select(ts[0], args["dim"], ts[1]),
    ),
)
register(
    "embedding",
    embedding,
    function=False,
    functional=True,
    scenario=Scenario(
        inputs=("input", "weight"),
        args=(("padding_idx", int | None, None, ""),),
        doc="F.embedding: rows of weight at the indices of input (int64)",
    ),
)
register(
    "dropout",
    lambda input, p, train: dropout(input, p, train),
    functional=dropout,
    scenario=Scenario(
        args=(("p", float, 0.5, ""),),
        doc="F.dropout in training (a mask kept for backward)",
        call=lambda ts, args, inplace: dropout(ts[0], args.get("p", 0.5), True),
    ),
)
register("batch_norm", batch_norm, function=False, functional=True)
register(
    "layer_norm",
    layer_norm,
    function=False,
    functional=True,
    scenario=Scenario(
        optional_inputs=("weight", "bias"),
        args=(("normalized_shape", IntOrPair, REQUIRED, ""), ("eps", float, 1e-5, "")),
        doc="F.layer_norm over the trailing normalized_shape dims",
        call=lambda ts, args, inplace: layer_norm(
            ts[0],
            [args["normalized_shape"]]
            if isinstance(args["normalized_shape"], int)
            else args["normalized_shape"],
            *ts[1:],
            eps=args.get("eps", 1e-5),
        ),
    ),
)
register(
    "gelu",
    gelu,
    function=False,
    functional=True,
    scenario=Scenario(
        args=(("approximate", str, "none", ""),), doc="F.gelu ('tanh' for the tanh form)"
    ),
)
register("addcmul", addcmul, method=True, inplace="addcmul_")
register("addcmul_", addcmul_, function=False, method=True)
register("addcdiv", addcdiv, method=True, inplace="addcdiv_")
register("addcdiv_", addcdiv_, function=False, method=True)
register("lerp", lerp, method=True, inplace="lerp_")
register("lerp_", lerp_, function=False, method=True)

register(
    "prelu",
    prelu,
    method=True,
    functional=True,
    scenario=Scenario(
        inputs=("input", "weight"),
        doc="max(0, x) + weight * min(0, x), weight of 1 or C slopes",
    ),
)
register(
    "rrelu",
    rrelu,
    functional=True,
    scenario=Scenario(
        args=(
            ("lower", float, 1.0 / 8, ""),
            ("upper", float, 1.0 / 3, ""),
            ("training", bool, False, "random slopes (the engine's RNG)"),
        ),
        doc="randomized leaky ReLU (an input-sized noise buffer kept for backward)",
    ),
)

register("alpha_dropout", alpha_dropout, functional=True)
register("feature_alpha_dropout", feature_alpha_dropout, functional=True)

register(
    "channel_shuffle",
    channel_shuffle,
    functional=True,
    scenario=Scenario(
        args=(("groups", int, REQUIRED, ""),),
        doc="[N, C, *] with the channels of `groups` groups interleaved, a copy",
    ),
)

register(
    "lp_pool1d",
    lp_pool1d,
    function=False,
    functional=True,
    scenario=Scenario(
        args=(
            ("norm_type", float, REQUIRED, ""),
            ("kernel_size", int, REQUIRED, ""),
            ("stride", int | None, None, ""),
        ),
        doc="1-D power-average pooling (torch's composite over avg_pool1d)",
    ),
)
register(
    "lp_pool2d",
    lp_pool2d,
    function=False,
    functional=True,
    scenario=Scenario(
        args=(
            ("norm_type", float, REQUIRED, ""),
            ("kernel_size", IntOrPair, REQUIRED, ""),
            ("stride", IntOrPair | None, None, ""),
        ),
        doc="2-D power-average pooling (torch's composite over avg_pool2d)",
    ),
)
register("local_response_norm", local_response_norm, function=False, functional=True)

for _name, _fn, _doc in (
    ("soft_margin_loss", soft_margin_loss, "log(1 + exp(-target * input))"),
    ("hinge_embedding_loss", hinge_embedding_loss, "x for target 1, max(0, 1 - x) for -1"),
    ("multilabel_soft_margin_loss", multilabel_soft_margin_loss, "per-class logistic loss"),
):
    register(
        _name,
        _fn,
        function=_name in ("hinge_embedding_loss",),
        functional=True,
        scenario=Scenario(
            inputs=("input", "target"), args=(("reduction", Reduction, "mean", ""),), doc=_doc
        ),
    )
register(
    "multi_margin_loss",
    multi_margin_loss,
    function=False,
    functional=True,
    scenario=Scenario(
        inputs=("input", "target"),
        args=(
            ("p", int, 1, "1 or 2"),
            ("margin", float, 1.0, ""),
            ("reduction", Reduction, "mean", ""),
        ),
        doc="multi-class hinge loss of scores [N, C] and class indices (int64)",
    ),
)
register("multilabel_margin_loss", multilabel_margin_loss, function=False, functional=True)
for _name, _fn, _doc in (
    ("margin_ranking_loss", margin_ranking_loss, "max(0, -target (x1 - x2) + margin)"),
    ("cosine_embedding_loss", cosine_embedding_loss, "1 - cos for target 1, max(0, cos) for -1"),
):
    register(
        _name,
        _fn,
        functional=True,
        scenario=Scenario(
            inputs=("input1", "input2", "target"),
            args=(("margin", float, 0.0, ""), ("reduction", Reduction, "mean", "")),
            doc=_doc,
        ),
    )
register(
    "triplet_margin_loss",
    triplet_margin_loss,
    functional=True,
    scenario=Scenario(
        inputs=("anchor", "positive", "negative"),
        args=(
            ("margin", float, 1.0, ""),
            ("p", float, 2.0, ""),
            ("reduction", Reduction, "mean", ""),
        ),
        doc="max(0, margin + d(a, p) - d(a, n)), d pairwise_distance",
    ),
)
register(
    "triplet_margin_with_distance_loss",
    triplet_margin_with_distance_loss,
    function=False,
    functional=True,
)
register(
    "poisson_nll_loss",
    poisson_nll_loss,
    functional=True,
    scenario=Scenario(
        inputs=("input", "target"),
        args=(
            ("log_input", bool, True, ""),
            ("full", bool, False, ""),
            ("reduction", Reduction, "mean", ""),
        ),
        doc="Poisson negative log likelihood",
    ),
)
register(
    "gaussian_nll_loss",
    gaussian_nll_loss,
    function=False,
    functional=True,
    scenario=Scenario(
        inputs=("input", "target", "var"),
        args=(("full", bool, False, ""), ("reduction", Reduction, "mean", "")),
        doc="Gaussian negative log likelihood (var clamped to eps)",
    ),
)


__all__ = [
    "linear",
    "conv2d",
    "max_pool2d",
    "avg_pool2d",
    "adaptive_avg_pool2d",
    "mse_loss",
    "cross_entropy",
    "nll_loss",
    "l1_loss",
    "smooth_l1_loss",
    "huber_loss",
    "binary_cross_entropy",
    "binary_cross_entropy_with_logits",
    "kl_div",
    "gather",
    "index_select",
    "embedding",
    "dropout",
    "dropout_",
    "batch_norm",
    "layer_norm",
    "gelu",
    "logsigmoid",
    "glu",
    "interpolate",
    "instance_norm",
    "dropout1d",
    "dropout2d",
    "dropout3d",
    "max_pool1d",
    "avg_pool1d",
    "adaptive_avg_pool1d",
    "pixel_shuffle",
    "pixel_unshuffle",
    "normalize",
    "cosine_similarity",
    "pairwise_distance",
    "softsign",
    "softmin",
    "tanhshrink",
    "addcmul",
    "addcmul_",
    "addcdiv",
    "addcdiv_",
    "lerp",
    "lerp_",
    "prelu",
    "rrelu",
    "alpha_dropout",
    "feature_alpha_dropout",
    "channel_shuffle",
    "lp_pool1d",
    "lp_pool2d",
    "local_response_norm",
]

# 3-D convolution and pooling, transposed 1-D/3-D convolution, adaptive max pooling
from engine.ops.nn.conv3d import conv3d, conv_transpose1d, conv_transpose3d  # noqa: E402
from engine.ops.nn.pool3d import (  # noqa: E402
    adaptive_avg_pool3d,
    adaptive_max_pool1d,
    adaptive_max_pool2d,
    adaptive_max_pool3d,
    avg_pool3d,
    max_pool3d,
)

register(
    "conv3d",
    conv3d,
    functional=True,
    scenario=Scenario(
        inputs=("input", "weight"),
        optional_inputs=("bias",),
        args=(
            ("stride", int, 1, ""),
            ("padding", int | str, 0, "an int, 'same' or 'valid'"),
            ("dilation", int, 1, ""),
            ("groups", int, 1, ""),
        ),
        doc="3-D convolution (NCDHW); on cpu in float64 torch's column buffers are charged",
    ),
)
register("conv_transpose1d", conv_transpose1d, functional=True)
register("conv_transpose3d", conv_transpose3d, functional=True)
register(
    "max_pool3d",
    max_pool3d,
    functional=True,
    scenario=Scenario(
        args=(
            ("kernel_size", int, REQUIRED, ""),
            ("stride", int | None, None, ""),
            ("padding", int, 0, ""),
        ),
        doc="3-D max pooling (int64 indices kept for backward)",
    ),
)
register(
    "avg_pool3d",
    avg_pool3d,
    function=False,
    functional=True,
    scenario=Scenario(
        args=(
            ("kernel_size", int, REQUIRED, ""),
            ("stride", int | None, None, ""),
            ("padding", int, 0, ""),
        ),
        doc="3-D average pooling",
    ),
)
register(
    "adaptive_avg_pool3d",
    adaptive_avg_pool3d,
    function=False,
    functional=True,
    scenario=Scenario(
        args=(("output_size", int, REQUIRED, ""),),
        doc="3-D adaptive average pooling (1: torch's mean over D, H, W)",
    ),
)
register("adaptive_max_pool1d", adaptive_max_pool1d, functional=True)
register(
    "adaptive_max_pool2d",
    adaptive_max_pool2d,
    function=False,
    functional=True,
    scenario=Scenario(
        args=(("output_size", IntOrPair, REQUIRED, ""),),
        doc="2-D adaptive max pooling (int64 indices kept for backward)",
    ),
)
register("adaptive_max_pool3d", adaptive_max_pool3d, function=False, functional=True)
__all__ += [  # noqa: PLE0604
    "conv3d",
    "conv_transpose1d",
    "conv_transpose3d",
    "max_pool3d",
    "avg_pool3d",
    "adaptive_avg_pool3d",
    "adaptive_max_pool1d",
    "adaptive_max_pool2d",
    "adaptive_max_pool3d",
    "soft_margin_loss",
    "multi_margin_loss",
    "multilabel_margin_loss",
    "margin_ranking_loss",
    "hinge_embedding_loss",
    "cosine_embedding_loss",
    "triplet_margin_loss",
    "poisson_nll_loss",
    "multilabel_soft_margin_loss",
    "triplet_margin_with_distance_loss",
    "gaussian_nll_loss",
]

# embedding_bag
from engine.ops.nn.embedding_bag import embedding_bag  # noqa: E402

register(
    "embedding_bag",
    embedding_bag,
    function=False,
    functional=True,
    scenario=Scenario(
        inputs=("input", "weight"),
        optional_inputs=("offsets",),
        args=(
            ("mode", str, "mean", "sum, mean or max"),
            ("include_last_offset", bool, False, ""),
            ("padding_idx", int | None, None, ""),
        ),
        doc="F.embedding_bag: sums, means or maxima of bags of rows (offset2bag, bag_size and "
        "max_indices kept for backward)",
    ),
)
__all__ += ["embedding_bag"]  # noqa: PLE0604

# bilinear (torch's composite over _trilinear)
from engine.ops.nn.bilinear import bilinear  # noqa: E402

register(
    "bilinear",
    bilinear,
    functional=True,
    scenario=Scenario(
        inputs=("input1", "input2", "weight"),
        optional_inputs=("bias",),
        doc="x1^T W x2 + b: torch's _trilinear, one zero-filled output and two small products "
        "per output feature, forward and backward",
    ),
)
__all__ += ["bilinear"]  # noqa: PLE0604

# affine_grid, grid_sample
from engine.ops.nn.grid_sample import affine_grid, grid_sample  # noqa: E402

register(
    "affine_grid",
    affine_grid,
    function=False,
    functional=True,
    scenario=Scenario(
        inputs=("theta",),
        args=(
            ("size", list[int], REQUIRED, "the output's [N, C, H, W] or [N, C, D, H, W]"),
            ("align_corners", bool | None, None, ""),
        ),
        doc="F.affine_grid: the sampling grid of affine matrices (the base grid made and freed "
        "forward and backward)",
    ),
)
register(
    "grid_sample",
    grid_sample,
    function=False,
    functional=True,
    scenario=Scenario(
        inputs=("input", "grid"),
        args=(
            ("mode", str, "bilinear", "bilinear, nearest or bicubic (4-D)"),
            ("padding_mode", str, "zeros", "zeros, border or reflection"),
            ("align_corners", bool | None, None, ""),
        ),
        doc="F.grid_sample: input sampled at a grid (backward: grad_input only when needed, "
        "grad_grid always)",
    ),
)
__all__ += ["affine_grid", "grid_sample"]  # noqa: PLE0604

# torch.nn.functional's other names: max / adaptive max pooling `*_with_indices`, and the
# deprecated upsample, upsample_nearest, upsample_bilinear (interpolate)
from engine.ops.nn import aliases as _aliases  # noqa: E402

for _name in (
    "max_pool1d_with_indices",
    "max_pool2d_with_indices",
    "max_pool3d_with_indices",
    "adaptive_max_pool1d_with_indices",
    "adaptive_max_pool2d_with_indices",
    "adaptive_max_pool3d_with_indices",
    "upsample",
    "upsample_nearest",
    "upsample_bilinear",
):
    register(_name, getattr(_aliases, _name), function=False, functional=True)

# pdist
from engine.ops.nn.pdist import pdist  # noqa: E402

register(
    "pdist",
    pdist,
    functional=True,
    scenario=Scenario(
        args=(("p", float, 2.0, ""),),
        doc="the p-norm distances between the rows of a 2-D input (a non-contiguous input is "
        "copied first)",
    ),
)
__all__ += ["pdist"]  # noqa: PLE0604

# cdist
from engine.ops.nn.pdist import cdist  # noqa: E402

register(
    "cdist",
    cdist,
    functional=False,
    scenario=Scenario(
        inputs=("x1", "x2"),
        args=(
            ("p", float, 2.0, ""),
            (
                "compute_mode",
                str,
                "use_mm_for_euclid_dist_if_necessary",
                "p = 2 over more than 25 rows goes through one matrix product",
            ),
        ),
        doc="the p-norm distances between the rows of x1 and of x2",
    ),
)

# max_unpool3d, lp_pool3d
from engine.ops.nn.lp_pool import lp_pool3d  # noqa: E402
from engine.ops.nn.unpool3d import max_unpool3d  # noqa: E402

register("max_unpool3d", max_unpool3d, function=False, functional=True)
register(
    "lp_pool3d",
    lp_pool3d,
    function=False,
    functional=True,
    scenario=Scenario(
        args=(
            ("norm_type", float, REQUIRED, ""),
            ("kernel_size", int, REQUIRED, ""),
            ("stride", int | None, None, ""),
        ),
        doc="3-D power-average pooling (torch's composite over avg_pool3d)",
    ),
)
__all__ += ["max_unpool3d", "lp_pool3d"]  # noqa: PLE0604

# rrelu_ (rrelu_with_noise_: RreluWithNoiseBackward1)
from engine.ops.nn.prelu import rrelu_  # noqa: E402

register("rrelu_", rrelu_, functional=True)
__all__ += ["rrelu_"]  # noqa: PLE0604

# fractional max pooling
from engine.ops.nn.fractional import (  # noqa: E402
    fractional_max_pool2d,
    fractional_max_pool2d_with_indices,
    fractional_max_pool3d,
    fractional_max_pool3d_with_indices,
)

register(
    "fractional_max_pool2d",
    fractional_max_pool2d,
    function=False,
    functional=True,
    scenario=Scenario(
        args=(
            ("kernel_size", IntOrPair, REQUIRED, ""),
            ("output_size", IntOrPair | None, None, "the output's size"),
            ("output_ratio", float | None, None, "or its ratio to the input's"),
        ),
        doc="2-D max pooling over pseudo-random windows (the samples drawn each call)",
    ),
)
register(
    "fractional_max_pool3d",
    fractional_max_pool3d,
    function=False,
    functional=True,
    scenario=Scenario(
        args=(
            ("kernel_size", int, REQUIRED, ""),
            ("output_size", int | None, None, "the output's size"),
            ("output_ratio", float | None, None, "or its ratio to the input's"),
        ),
        doc="3-D max pooling over pseudo-random windows (the samples drawn each call)",
    ),
)
register(
    "fractional_max_pool2d_with_indices",
    fractional_max_pool2d_with_indices,
    function=False,
    functional=True,
)
register(
    "fractional_max_pool3d_with_indices",
    fractional_max_pool3d_with_indices,
    function=False,
    functional=True,
)
__all__ += [  # noqa: PLE0604
    "fractional_max_pool2d",
    "fractional_max_pool3d",
    "fractional_max_pool2d_with_indices",
    "fractional_max_pool3d_with_indices",
]

# ctc_loss
from engine.ops.nn.ctc import ctc_loss  # noqa: E402

register("ctc_loss", ctc_loss, function=False, functional=True)
__all__ += ["ctc_loss"]  # noqa: PLE0604

# linear_cross_entropy (torch 2.13; the reference path), gumbel_softmax
from engine.ops.nn.gumbel import gumbel_softmax  # noqa: E402
from engine.ops.nn.linear_ce import linear_cross_entropy  # noqa: E402

register(
    "linear_cross_entropy",
    linear_cross_entropy,
    function=False,
    functional=True,
    scenario=Scenario(
        inputs=("input", "linear_weight", "target"),
        args=(("reduction", Reduction, "mean", ""),),
        doc="cross_entropy(linear(input, linear_weight), target): torch's reference path (the "
        "whole logits made); the chunked path (options) is not supported",
    ),
)
register(
    "gumbel_softmax",
    gumbel_softmax,
    function=False,
    functional=True,
    scenario=Scenario(
        args=(("tau", float, 1.0, ""), ("hard", bool, False, ""), ("dim", int, -1, "")),
        doc="softmax((logits + Gumbel noise) / tau); hard: one-hot, straight-through gradient",
    ),
)
__all__ += ["linear_cross_entropy", "gumbel_softmax"]  # noqa: PLE0604
