"""The leak walk: every op of the table, run forward and backward, keeps nothing afterwards.

For each row of the op table (engine/ops/registry.py) the op is called on small float64 leaves
that require grad (in-place rows on a non-leaf copy), `sum()` of its floating outputs is
backpropagated, and then:
- no node of its graph may still hold a tensor, an array or an unreleased SavedTensor (what an op
  keeps goes through Function.save / the declared retain_inputs, released when the node runs);
- once the outputs and the leaves' .grad are dropped, memory_allocated() is back where it was
  before the call (PyTorch frees saved tensors, masks and indices with the graph).

A row is called with the first argument pattern that works (`PATTERNS`), or its entry in
`CALLS`; rows that cannot take part say why in `NOT_WALKED`. A new row that fits none fails
`test_every_row_is_walked` until it gets an entry.
"""

from __future__ import annotations

import gc

import numpy as np
import pytest

import engine
from engine.autograd.function import Function, SavedTensor
from engine.memory import memory_allocated
from engine.ops import registry
from engine.tensor import Tensor

SHAPE = (3, 4)


def _leaf(*shape, lo=0.5, hi=1.5):
    rng = np.random.default_rng(sum(shape) + len(shape))
    a = rng.uniform(lo, hi, size=shape or SHAPE)
    return engine.tensor(a, dtype=engine.float64, requires_grad=True)


def _idx(*values):
    return engine.tensor(list(values), dtype=engine.int64)


# Generic patterns, tried in order: (leaf shapes, extra arguments after the tensors)
PATTERNS = [
    ((SHAPE,), ()),
    ((SHAPE, SHAPE), ()),
    ((SHAPE,), (1,)),
    ((SHAPE,), (0.5,)),
    ((SHAPE, SHAPE, SHAPE), ()),
    (((4, 4), (4, 4)), ()),
]

# Rows no pattern fits: a call on leaves (made by the lambda's first argument, `L`).
CALLS = {
    "clamp": lambda L: engine.clamp(L(), L() * 0.0 + 0.8, L() * 0.0 + 1.2),
    "clamp_": lambda L: engine.clamp_(L() * 1.0, 0.8, 1.2),
    "clip": lambda L: engine.clip(L(), L() * 0.0 + 0.8, 1.2),
    "clip_": lambda L: engine.clip_(L() * 1.0, 0.8, 1.2),
    "where": lambda L: engine.where(L() > 1.0, L(), L()),
    "movedim": lambda L: engine.movedim(L() * 1.0, 0, 1),
    "moveaxis": lambda L: engine.moveaxis(L() * 1.0, 0, 1),
    "masked_fill": lambda L: engine.masked_fill(L(), L() > 1.0, 0.0),
    "masked_fill_": lambda L: engine.masked_fill_(L() * 1.0, L() > 1.0, 0.0),
    "max": lambda L: engine.max(L(), 1).values,
    "min": lambda L: engine.min(L(), 1).values,
    "amax": lambda L: engine.amax(L(), 1),
    "amin": lambda L: engine.amin(L(), 1),
    "reshape": lambda L: engine.reshape(L(), 4, 3),
    "view": lambda L: L().view(4, 3),
    "permute": lambda L: engine.permute(L(), 1, 0),
    "transpose": lambda L: engine.transpose(L(), 0, 1),
    "swapaxes": lambda L: engine.swapaxes(L(), 0, 1),
    "transpose_": lambda L: (L() * 1.0).transpose_(0, 1),
    "t_": lambda L: (L() * 1.0).t_(),
    "swapdims": lambda L: engine.swapdims(L(), 0, 1),
    "narrow": lambda L: engine.narrow(L(), 1, 1, 2),
    "unflatten": lambda L: engine.unflatten(L(), 1, (2, -1)),
    "unfold": lambda L: L().unfold(1, 2, 1),
    "dot": lambda L: engine.dot(L(3), L(3)),
    "mv": lambda L: engine.mv(L(2, 3), L(3)),
    "select": lambda L: engine.select(L(), 1, 2),
    "addmm": lambda L: engine.addmm(L(3), L(2, 4), L(4, 3)),
    "swapaxes_": lambda L: (L() * 1.0).swapaxes_(0, 1),
    "swapdims_": lambda L: (L() * 1.0).swapdims_(1, 0),
    "squeeze_": lambda L: (L(2, 1, 3) * 1.0).squeeze_(1),
    "unsqueeze_": lambda L: (L() * 1.0).unsqueeze_(0),
    "expand": lambda L: L(1, 4).expand(3, 4),
    "broadcast_to": lambda L: engine.broadcast_to(L(1, 4), (3, 4)),
    "split": lambda L: engine.split(L(), 2),
    "chunk": lambda L: engine.chunk(L(), 2),
    "unbind": lambda L: engine.unbind(L()),
    "copy_": lambda L: (L() * 1.0).copy_(L()),
    "fill_": lambda L: (L() * 1.0)[0].fill_(2.0),
    "zero_": lambda L: (L() * 1.0)[:, 1].zero_(),
    "__getitem__": lambda L: L()[_idx(0, 2)],
    "__setitem__": lambda L: _setitem(L),
    "view_as": lambda L: L().view_as(L(4, 3)),
    "reshape_as": lambda L: L().reshape_as(L(4, 3)),
    "expand_as": lambda L: L(1, 4).expand_as(L()),
    "index_select": lambda L: engine.index_select(L(), 0, _idx(0, 2)),
    "gather": lambda L: engine.gather(L(), 1, _idx(0, 1, 3).reshape(1, 3).expand(3, 3)),
    "take": lambda L: engine.take(L(), _idx(0, 5)),
    "embedding": lambda L: engine.nn.functional.embedding(_idx(0, 2), L()),
    "conv2d": lambda L: engine.conv2d(L(1, 2, 5, 5), L(3, 2, 3, 3), L(3)),
    "conv1d": lambda L: engine.nn.functional.conv1d(L(1, 2, 5), L(3, 2, 3), L(3)),
    "conv_transpose2d": lambda L: engine.nn.functional.conv_transpose2d(
        L(1, 2, 3, 3), L(2, 3, 2, 2), L(3)
    ),
    "rms_norm": lambda L: engine.nn.functional.rms_norm(L(), (4,), L(4)),
    "max_pool2d": lambda L: engine.max_pool2d(L(1, 2, 4, 4), 2),
    "avg_pool2d": lambda L: engine.avg_pool2d(L(1, 2, 4, 4), 2),
    "adaptive_avg_pool2d": lambda L: engine.adaptive_avg_pool2d(L(1, 2, 4, 4), 1),
    "linear": lambda L: engine.nn.functional.linear(L(), L(2, 4), L(2)),
    "mse_loss": lambda L: engine.nn.functional.mse_loss(L(), L()),
    "interpolate": lambda L: engine.nn.functional.interpolate(L(1, 2, 3, 4), scale_factor=2),
    "dropout1d": lambda L: engine.nn.functional.dropout1d(L(2, 3, 4), 0.5),
    "instance_norm": lambda L: engine.nn.functional.instance_norm(L(2, 3, 4), weight=L(3)),
    "dropout2d": lambda L: engine.nn.functional.dropout2d(L(2, 3, 4, 2), 0.5),
    "dropout3d": lambda L: engine.nn.functional.dropout3d(L(1, 2, 3, 4, 2), 0.5),
    "max_pool1d": lambda L: engine.max_pool1d(L(2, 3, 6), 2),
    "conv3d": lambda L: engine.conv3d(L(1, 2, 3, 4, 4), L(3, 2, 2, 2, 2), L(3)),
    "conv_transpose1d": lambda L: engine.conv_transpose1d(L(1, 2, 4), L(2, 3, 2), L(3)),
    "conv_transpose3d": lambda L: engine.conv_transpose3d(L(1, 2, 2, 3, 3), L(2, 3, 2, 2, 2), L(3)),
    "max_pool3d": lambda L: engine.max_pool3d(L(1, 2, 4, 4, 4), 2),
    "avg_pool3d": lambda L: engine.nn.functional.avg_pool3d(L(1, 2, 4, 4, 4), 2),
    "adaptive_avg_pool3d": lambda L: engine.nn.functional.adaptive_avg_pool3d(L(1, 2, 4, 4, 4), 2),
    "adaptive_max_pool1d": lambda L: engine.adaptive_max_pool1d(L(2, 3, 6), 4),
    "adaptive_max_pool2d": lambda L: engine.nn.functional.adaptive_max_pool2d(L(1, 2, 4, 4), 3),
    "adaptive_max_pool3d": lambda L: engine.nn.functional.adaptive_max_pool3d(L(1, 2, 4, 4, 4), 3),
    "max_pool1d_with_indices": lambda L: engine.nn.functional.max_pool1d_with_indices(
        L(2, 3, 6), 2
    )[0],
    "max_pool2d_with_indices": lambda L: engine.nn.functional.max_pool2d_with_indices(
        L(1, 2, 4, 4), 2
    )[0],
    "max_pool3d_with_indices": lambda L: engine.nn.functional.max_pool3d_with_indices(
        L(1, 2, 4, 4, 4), 2
    )[0],
    "adaptive_max_pool1d_with_indices": (
        lambda L: engine.nn.functional.adaptive_max_pool1d_with_indices(L(2, 3, 6), 4)[0]
    ),
    "adaptive_max_pool2d_with_indices": (
        lambda L: engine.nn.functional.adaptive_max_pool2d_with_indices(L(1, 2, 4, 4), 3)[0]
    ),
    "adaptive_max_pool3d_with_indices": (
        lambda L: engine.nn.functional.adaptive_max_pool3d_with_indices(L(1, 2, 4, 4, 4), 3)[0]
    ),
    "upsample": lambda L: engine.nn.functional.upsample(L(1, 2, 3, 4), scale_factor=2),
    "upsample_nearest": lambda L: engine.nn.functional.upsample_nearest(L(1, 2, 3, 4), size=5),
    "upsample_bilinear": lambda L: engine.nn.functional.upsample_bilinear(
        L(1, 2, 3, 4), scale_factor=2
    ),
    "avg_pool1d": lambda L: engine.avg_pool1d(L(2, 3, 6), 2),
    "adaptive_avg_pool1d": lambda L: engine.adaptive_avg_pool1d(L(2, 3, 6), 4),
    "pixel_shuffle": lambda L: engine.pixel_shuffle(L(1, 4, 2, 3), 2),
    "fold": lambda L: engine.nn.functional.fold(L(1, 4, 6), (3, 4), 2),
    "max_unpool2d": lambda L: engine.nn.functional.max_unpool2d(
        L(1, 1, 2, 2), engine.tensor([[[[0, 3], [9, 14]]]]), 2
    ),
    "max_unpool1d": lambda L: engine.nn.functional.max_unpool1d(
        L(1, 1, 2), engine.tensor([[[1, 2]]]), 2
    ),
    "pixel_unshuffle": lambda L: engine.pixel_unshuffle(L(1, 1, 4, 2), 2),
    "meshgrid": lambda L: engine.meshgrid(L(4), L(3), indexing="xy"),
    "broadcast_tensors": lambda L: engine.broadcast_tensors(L(3, 1), L(4)),
    "glu": lambda L: engine.nn.functional.glu(L(4, 4)),
    "softmin": lambda L: engine.nn.functional.softmin(L(), 1),
    "kl_div": lambda L: engine.nn.functional.kl_div(L(), L(), reduction="batchmean"),
    "binary_cross_entropy": lambda L: engine.nn.functional.binary_cross_entropy(
        L() * 0.5, L() * 0.5, L().detach()
    ),
    "binary_cross_entropy_with_logits": lambda L: (
        engine.nn.functional.binary_cross_entropy_with_logits(
            L(), L() * 0.5, L().detach(), pos_weight=L().detach()
        )
    ),
    "nll_loss": lambda L: engine.nn.functional.nll_loss(L().log_softmax(1), _idx(0, 1, 3)),
    "cross_entropy": lambda L: engine.nn.functional.cross_entropy(L(), _idx(0, 1, 3)),
    "dropout": lambda L: engine.dropout(L(), 0.5, True),
    "batch_norm": lambda L: engine.nn.functional.batch_norm(
        L(2, 3, 2, 2), None, None, L(3), L(3), training=True
    ),
    "layer_norm": lambda L: engine.nn.functional.layer_norm(L(), (4,), L(4), L(4)),
    "lerp": lambda L: engine.lerp(L(), L(), L()),
    "lerp_": lambda L: (L() * 1.0).lerp_(L(), 0.3),
    "scaled_dot_product_attention": lambda L: engine.nn.functional.scaled_dot_product_attention(
        L(1, 2, 3, 4), L(1, 2, 3, 4), L(1, 2, 3, 4)
    ),
    "einsum": lambda L: engine.einsum("ij,kj->ik", L(), L()),
    "baddbmm": lambda L: engine.baddbmm(L(2, 3, 3), L(2, 3, 4), L(2, 4, 3)),
    "bmm": lambda L: engine.bmm(L(2, 3, 4), L(2, 4, 3)),
    "baddbmm_": lambda L: (L(2, 3, 3) * 1.0).baddbmm_(L(2, 3, 4), L(2, 4, 3)),
    "scatter": lambda L: engine.scatter(L(), 1, _idx(0, 1).reshape(1, 2), L(1, 2)),
    "scatter_": lambda L: (L() * 1.0).scatter_(1, _idx(0, 1).reshape(1, 2), L(1, 2)),
    "scatter_add": lambda L: engine.scatter_add(L(), 1, _idx(0, 1).reshape(1, 2), L(1, 2)),
    "scatter_add_": lambda L: (L() * 1.0).scatter_add_(1, _idx(0, 1).reshape(1, 2), L(1, 2)),
    "scatter_reduce": lambda L: engine.scatter_reduce(
        L(), 1, _idx(0, 1).reshape(1, 2), L(1, 2), "sum"
    ),
    "scatter_reduce_": lambda L: (L() * 1.0).scatter_reduce_(
        1, _idx(0, 1).reshape(1, 2), L(1, 2), "sum"
    ),
    "index_add": lambda L: engine.index_add(L(), 0, _idx(0, 2), L(2, 4)),
    "index_add_": lambda L: (L() * 1.0).index_add_(0, _idx(0, 2), L(2, 4)),
    "index_copy": lambda L: engine.index_copy(L(), 0, _idx(0, 2), L(2, 4)),
    "index_copy_": lambda L: (L() * 1.0).index_copy_(0, _idx(0, 2), L(2, 4)),
    "index_fill": lambda L: engine.index_fill(L(), 0, _idx(0, 2), 1.0),
    "index_fill_": lambda L: (L() * 1.0).index_fill_(0, _idx(0, 2), 1.0),
    "masked_scatter": lambda L: engine.masked_scatter(L(), L() > 1.0, L()),
    "masked_scatter_": lambda L: (L() * 1.0).masked_scatter_(L() > 1.0, L()),
    "put": lambda L: engine.put(L(), _idx(0, 5), L(2)),
    "put_": lambda L: (L() * 1.0).put_(_idx(0, 5), L(2)),
    "cat": lambda L: engine.cat([L(), L()]),
    "concat": lambda L: engine.concat([L(), L()]),
    "concatenate": lambda L: engine.concatenate([L(), L()]),
    "stack": lambda L: engine.stack([L(), L()]),
    "hstack": lambda L: engine.hstack([L(), L()]),
    "vstack": lambda L: engine.vstack([L(), L()]),
    "row_stack": lambda L: engine.row_stack([L(), L()]),
    "dstack": lambda L: engine.dstack([L(), L()]),
    "column_stack": lambda L: engine.column_stack([L(), L()]),
    "bucketize": lambda L: engine.bucketize(L(), engine.tensor([0.5, 1.5])),
    "repeat": lambda L: L().repeat(2, 1),
    "flip": lambda L: engine.flip(L(), (0,)),
    "roll": lambda L: engine.roll(L(), 1, 0),
    "pad": lambda L: engine.nn.functional.pad(L(), (1, 1)),
    "var": lambda L: engine.var(L(), 1),
    "std": lambda L: engine.std(L(), 1),
    "threshold": lambda L: engine.threshold(L(), 1.0, 0.0),
    "threshold_": lambda L: engine.threshold_(L() * 1.0, 1.0, 0.0),
    "pow": lambda L: engine.pow(L(), 3),
    "pow_": lambda L: engine.pow_(L() * 1.0, 3),
    "__pow__": lambda L: L() ** 3,
    "__ipow__": lambda L: _ipow(L),
    "prelu": lambda L: engine.prelu(L(), L(4)),
    "rrelu": lambda L: engine.rrelu(L(), training=True),
    "rrelu_": lambda L: engine.rrelu_(L() * 1.0, training=True),
    "channel_shuffle": lambda L: engine.channel_shuffle(L(1, 4, 2), 2),
    "alpha_dropout": lambda L: engine.alpha_dropout(L(), 0.5, True),
    "feature_alpha_dropout": lambda L: engine.feature_alpha_dropout(L(), 0.5, True),
    "lp_pool1d": lambda L: engine.nn.functional.lp_pool1d(L(2, 3, 6), 2, 2),
    "lp_pool2d": lambda L: engine.nn.functional.lp_pool2d(L(1, 2, 4, 4), 2, 2),
    "local_response_norm": lambda L: engine.nn.functional.local_response_norm(L(2, 3, 4), 2),
    "soft_margin_loss": lambda L: engine.nn.functional.soft_margin_loss(L(), L() * 0 - 1),
    "multi_margin_loss": lambda L: engine.nn.functional.multi_margin_loss(
        L(), _idx(0, 1, 3), p=2, weight=L(4).detach()
    ),
    "multilabel_margin_loss": lambda L: engine.nn.functional.multilabel_margin_loss(
        L(), _idx(0, 2, -1, 0, 1, 3, -1, 0, 3, 3, 1, -1).reshape(3, 4)
    ),
    "margin_ranking_loss": lambda L: engine.margin_ranking_loss(L(3), L(3), L(3) * 0 + 1),
    "hinge_embedding_loss": lambda L: engine.hinge_embedding_loss(L(), (L() > 1.0) * 2.0 - 1),
    "cosine_embedding_loss": lambda L: engine.cosine_embedding_loss(L(), L(), _idx(1, -1, 1)),
    "triplet_margin_loss": lambda L: engine.triplet_margin_loss(L(), L(), L(), swap=True),
    "triplet_margin_with_distance_loss": lambda L: (
        engine.nn.functional.triplet_margin_with_distance_loss(L(), L(), L())
    ),
    "poisson_nll_loss": lambda L: engine.poisson_nll_loss(L(), L() * 3, False, True),
    "multilabel_soft_margin_loss": lambda L: engine.nn.functional.multilabel_soft_margin_loss(
        L(), (L() > 1.0) * 1.0
    ),
    "gaussian_nll_loss": lambda L: engine.nn.functional.gaussian_nll_loss(L(), L(), L()),
    "__ifloordiv__": lambda L: _ifloordiv(L),
    "__imod__": lambda L: _imod(L),
    "masked_select": lambda L: engine.masked_select(L(), L() > 1.0),
    "take_along_dim": lambda L: engine.take_along_dim(L(), _idx(0, 2, 1).reshape(3, 1), 1),
    "dsplit": lambda L: engine.dsplit(L(2, 3, 4), 2),
    "split_with_sizes": lambda L: engine.split_with_sizes(L(), [1, 2]),
    "embedding_bag": lambda L: engine.nn.functional.embedding_bag(
        _idx(0, 2, 1, 2), L(), _idx(0, 1), mode="mean", per_sample_weights=None
    ),
    "bilinear": lambda L: engine.bilinear(L(2, 3), L(2, 4), L(5, 3, 4), L(5)),
    "affine_grid": lambda L: engine.nn.functional.affine_grid(
        L(2, 2, 3), (2, 1, 3, 4), align_corners=False
    ),
    "grid_sample": lambda L: engine.nn.functional.grid_sample(
        L(1, 2, 3, 4), L(1, 2, 2, 2) - 1.0, align_corners=False
    ),
    "pdist": lambda L: engine.pdist(L(4, 3)),
    "cdist": lambda L: engine.cdist(L(2, 3, 4), L(1, 2, 4), 1.5),
    "index_put": lambda L: engine.index_put(L(), (_idx(0, 2, 0),), L(3, 4), accumulate=True),
    "index_put_": lambda L: (L() * 1.0).index_put_((_idx(1, 2),), L(2, 4)),
    "select_scatter": lambda L: engine.select_scatter(L(), L(4), 0, 1),
    "slice_scatter": lambda L: engine.slice_scatter(L(), L(3, 2), 1, 0, 4, 2),
    "diagonal_scatter": lambda L: engine.diagonal_scatter(L(), L(3)),
    "as_strided_scatter": lambda L: engine.as_strided_scatter(L(), L(2, 2), (2, 2), (1, 4)),
    "as_strided": lambda L: engine.as_strided(L(), (3, 3), (1, 1)),
    "addmv": lambda L: engine.addmv(L(3), L(3, 4), L(4), beta=0.5, alpha=2),
    "addmv_": lambda L: (L(3) * 1.0).addmv_(L(3, 4), L(4)),
    "addr": lambda L: engine.addr(L(), L(3), L(4), beta=0.5, alpha=2),
    "addr_": lambda L: (L() * 1.0).addr_(L(3), L(4)),
    "addbmm": lambda L: engine.addbmm(L(), L(2, 3, 5), L(2, 5, 4), beta=0.5, alpha=2),
    "addbmm_": lambda L: (L() * 1.0).addbmm_(L(2, 3, 5), L(2, 5, 4)),
    "addmm_": lambda L: (L() * 1.0).addmm_(L(3, 5), L(5, 4), alpha=2),
    "vdot": lambda L: engine.vdot(L(4), L(4)),
    "max_unpool3d": lambda L: engine.nn.functional.max_unpool3d(
        L(1, 1, 1, 2, 2), engine.tensor([[[[[0, 3], [9, 14]]]]]), 2
    ),
    "lp_pool3d": lambda L: engine.nn.functional.lp_pool3d(L(1, 2, 4, 4, 4), 2, 2),
    "renorm": lambda L: engine.renorm(L(3, 4), 2, 0, 0.5),
    "renorm_": lambda L: (L(3, 4) * 1.0).renorm_(2, 1, 0.5),
    "aminmax": lambda L: engine.aminmax(L(3, 4), dim=1),
    "dist": lambda L: engine.dist(L(3, 4), L(3, 4), 3),
    "erfinv": lambda L: engine.erfinv(L(3, 4) * 0.1),
    "erfinv_": lambda L: (L(3, 4) * 0.1).erfinv_(),
    "ldexp": lambda L: engine.ldexp(L(3, 4), engine.tensor([1, 2, -1, 0])),
    "ldexp_": lambda L: (L(3, 4) * 1.0).ldexp_(engine.tensor([1, 2, -1, 0])),
    "frexp": lambda L: engine.frexp(L(3, 4)),
    "gcd": lambda L: engine.gcd(engine.tensor([4, 6]), engine.tensor([6, 9])),
    "gcd_": lambda L: engine.tensor([4, 6]).gcd_(engine.tensor([6, 9])),
    "lcm": lambda L: engine.lcm(engine.tensor([4, 6]), engine.tensor([6, 9])),
    "lcm_": lambda L: engine.tensor([4, 6]).lcm_(engine.tensor([6, 9])),
    "logical_not_": lambda L: (L(3, 4) * 1.0).detach().logical_not_(),
    "fractional_max_pool2d": lambda L: engine.nn.functional.fractional_max_pool2d(
        L(1, 2, 5, 5), 2, output_size=3
    ),
    "fractional_max_pool3d": lambda L: engine.nn.functional.fractional_max_pool3d(
        L(1, 2, 5, 5, 5), 2, output_size=3
    ),
    "fractional_max_pool2d_with_indices": lambda L: (
        engine.nn.functional.fractional_max_pool2d_with_indices(L(1, 2, 5, 5), 2, 3)[0]
    ),
    "fractional_max_pool3d_with_indices": lambda L: (
        engine.nn.functional.fractional_max_pool3d_with_indices(L(1, 2, 5, 5, 5), 2, 3)[0]
    ),
    "ctc_loss": lambda L: engine.nn.functional.ctc_loss(
        L(6, 2, 4).log_softmax(2), engine.tensor([[1, 2], [3, 1]]), [6, 5], [2, 1]
    ),
    "narrow_copy": lambda L: engine.narrow_copy(L(3, 4), 1, 1, 2),
    "unsafe_chunk": lambda L: engine.unsafe_chunk(L(4, 3) * 1.0, 2),
    "unsafe_split": lambda L: engine.unsafe_split(L(5, 3), 2, 0),
    "unsafe_split_with_sizes": lambda L: engine.unsafe_split_with_sizes(L(3, 4), [1, 3], 1),
    "new_tensor": lambda L: L(3).new_tensor([1.0, 2.0], requires_grad=True),
    "new_empty_strided": lambda L: L(3).new_empty_strided((2, 3), (1, 2)),
    "tensordot": lambda L: engine.tensordot(L(3, 4), L(4, 2).t(), dims=([1], [1])),
    "var_mean": lambda L: engine.var_mean(L(3, 4), 1),
    "std_mean": lambda L: engine.std_mean(L(3, 4), 1),
    "linear_cross_entropy": lambda L: engine.nn.functional.linear_cross_entropy(
        L(2, 4), L(5, 4), _idx(0, 4), linear_bias=L(5)
    ),
    "gumbel_softmax": lambda L: engine.nn.functional.gumbel_softmax(L(), hard=True),
}


def _setitem(L):
    y = L() * 1.0
    y[y < 1.0] = 0.0
    return y


def _ifloordiv(L):
    y = L() * 1.0
    y //= 2.0
    return y


def _imod(L):
    y = L() * 1.0
    y %= 2.0
    return y


def _ipow(L):
    y = L() * 1.0
    y **= 2
    return y


NOT_WALKED = {
    # no graph: casts and device moves of a tensor that does not change dtype or device are
    # the tensor itself; the others are copies walked by `clone`
    **dict.fromkeys(("to", "float", "double", "half", "bfloat16", "int", "long", "bool"), "cast"),
    **dict.fromkeys(("cpu", "cuda", "type_as"), "cast or device move"),
    "detach": "out of the graph",
    "detach_": "out of the graph",
    "argmax": "integer result",
    **dict.fromkeys(
        ("new_empty", "new_zeros", "new_ones", "new_full", "randint", "randint_like", "randperm"),
        "a new tensor, no graph",
    ),
    **dict.fromkeys(("normal_", "uniform_", "bernoulli_", "bernoulli"), "random fill"),
    "exponential_": "random fill",
    "one_hot": "integer input",
    "t": "walked through transpose; t() of a 2-D tensor",
    "__setitem__": None,  # walked (CALLS)
    **dict.fromkeys(
        ("asinh_", "acosh_", "atanh_", "arcsinh_", "arccosh_", "arctanh_"),
        "no derivative in place: backward raises (torch's not_implemented); forward walked",
    ),
    **dict.fromkeys(
        ("heaviside", "heaviside_", "floor_divide", "floor_divide_", "unique"),
        "no derivative: backward raises, as torch's",
    ),
    **dict.fromkeys(
        (
            "bitwise_not",
            "bitwise_not_",
            *(f"bitwise_{n}{s}" for n in ("and", "or", "xor") for s in ("", "_")),
            *(f"bitwise_{n}_shift{s}" for n in ("left", "right") for s in ("", "_")),
            *(f"__{p}{n}__" for n in ("and", "or", "xor", "lshift", "rshift") for p in "ri"),
            "__and__",
            "__or__",
            "__xor__",
            "__lshift__",
            "__rshift__",
            "__invert__",
        ),
        "integer and bool tensors only: no gradient",
    ),
    "is_nonzero": "a Python bool of a one-element tensor",
    "equal": "a Python bool",
    "bincount": "integer input: counts, no gradient",
    "unique_consecutive": "no derivative: backward raises, as torch's",
    **dict.fromkeys(("byte",), "cast"),
}
NOT_WALKED = {k: v for k, v in NOT_WALKED.items() if v is not None}


def _held(obj, path="node", seen=None) -> list[str]:
    """What a node still references that keeps memory: tensors, arrays, unreleased saves."""
    seen = set() if seen is None else seen
    if id(obj) in seen:
        return []
    seen.add(id(obj))
    if isinstance(obj, Tensor):
        return [path]
    if isinstance(obj, np.ndarray):
        return [path] if obj.size > 1 or obj.base is not None else []
    if isinstance(obj, SavedTensor):
        live = obj.storage is not None or getattr(obj, "packed", None) is not None
        return [path + " (SavedTensor)"] if live else []
    if isinstance(obj, (list, tuple)):
        return [h for i, v in enumerate(obj) for h in _held(v, f"{path}[{i}]", seen)]
    if isinstance(obj, dict):
        return [h for k, v in obj.items() for h in _held(v, f"{path}[{k!r}]", seen)]
    return []


def _node_fields(node: Function):
    fields = dict(getattr(node, "__dict__", {}))
    for cls in type(node).__mro__:
        for slot in getattr(cls, "__slots__", ()):
            if hasattr(node, slot):
                fields[slot] = getattr(node, slot)
    for skip in ("_edges", "variable", "fn"):  # edges; AccumulateGrad's leaf
        fields.pop(skip, None)
    return fields


def _graph(roots) -> list[Function]:
    nodes, stack, seen = [], [r for r in roots if r is not None], set()
    while stack:
        n = stack.pop()
        if id(n) in seen:
            continue
        seen.add(id(n))
        nodes.append(n)
        inner = getattr(n, "fn", None)
        if isinstance(inner, Function):
            stack.append(inner)
        stack.extend(e[0] for e in n.next_functions if e[0] is not None)
    return nodes


def _call(row, leaves):
    def L(*shape):
        t = _leaf(*shape)
        leaves.append(t)
        return t

    if row.name in CALLS:
        return CALLS[row.name](L)
    inplace = row.name.endswith("_") and not row.name.startswith("__")
    inplace = inplace or row.name in ("__iadd__", "__isub__", "__imul__", "__itruediv__")
    errors = []
    for shapes, extra in PATTERNS:
        del leaves[:]
        ts = [L(*s) for s in shapes]
        if inplace:
            ts[0] = ts[0] * 1.0
        try:
            return row.fn(*ts, *extra)
        except Exception as exc:  # noqa: BLE001 - the next pattern may fit
            errors.append(f"{shapes}+{extra}: {exc}")
    raise AssertionError(
        f"{row.name}: no argument pattern fits; add it to CALLS\n" + "\n".join(errors)
    )


def _outputs(result) -> list[Tensor]:
    items = result if isinstance(result, (tuple, list)) else (result,)
    return [t for t in items if isinstance(t, Tensor) and t.requires_grad]


WALKED = [r.name for r in registry.rows() if r.name not in NOT_WALKED]


def test_every_row_is_walked_or_says_why():
    names = {r.name for r in registry.rows()}
    assert set(NOT_WALKED) <= names, set(NOT_WALKED) - names
    assert set(CALLS) <= names, set(CALLS) - names


@pytest.mark.parametrize("name", WALKED)
def test_nothing_is_held_after_backward(name):
    row = registry.get(name)
    start = memory_allocated()
    leaves: list[Tensor] = []
    result = _call(row, leaves)
    outs = _outputs(result)
    held = []
    if outs:
        nodes = _graph([o.grad_fn for o in outs])
        loss = outs[0].sum()
        for i in range(1, len(outs)):  # (no loop variable left holding an output)
            loss = loss + outs[i].sum()
        loss.backward()
        del loss
        for n in nodes:
            held += [f"{n.name()}: {h}" for h in _held(_node_fields(n))]
        del nodes
    del result, outs
    for t in leaves:
        t.grad = None
    leaves_bytes = sum(t.nbytes for t in leaves)
    if memory_allocated() - start != leaves_bytes:
        gc.collect()  # (reference cycles are no leak: collected, they must free everything)
    assert not held, f"{name}: still held after backward: {held}"
    assert memory_allocated() - start == leaves_bytes, (
        f"{name}: {memory_allocated() - start - leaves_bytes} bytes still charged after backward"
    )


def test_where_on_a_million_elements_leaves_nothing_charged():
    """The issue's figure: where's mask used to outlive backward (1 MB charged); PyTorch frees it."""
    gc.collect()
    start = memory_allocated()
    x = engine.rand(1_000_000, requires_grad=True)
    y = engine.where(x > 0.5, x, 0.0)
    y.sum().backward()
    del y
    x.grad = None
    gc.collect()
    assert memory_allocated() - start == 4_000_000  # x itself, nothing else
