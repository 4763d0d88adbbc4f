"""LinearCrossEntropyLoss (torch 2.13): a Linear of C * prod(out_features) outputs, reshaped in
forward and passed to F.linear_cross_entropy."""

from __future__ import annotations

import math

from engine.nn import functional as F
from engine.nn.modules.linear import Linear
from engine.nn.modules.loss import _WeightedLoss
from engine.ops.nn.linear_ce import LinearCrossEntropyOptions


class LinearCrossEntropyLoss(_WeightedLoss):
    def __init__(
        self,
        in_features: int,
        num_classes: int,
        *,
        out_features: tuple[int, ...] = (),
        bias: bool = False,
        device=None,
        dtype=None,
        reduction: str = "mean",
        weight=None,
        ignore_index: int | None = None,
        label_smoothing: float = 0.0,
        options: LinearCrossEntropyOptions | None = None,
    ) -> None:
        if weight is not None and tuple(weight.shape) != (num_classes,):
            raise RuntimeError(
                f"expected weight shape to be {(num_classes,)}, got {tuple(weight.shape)}"
            )
        if label_smoothing < 0 or label_smoothing > 1.0:
            raise RuntimeError(
                f"expected label_smoothing to be in range [0, 1], got {label_smoothing}"
            )
        super().__init__(weight, reduction)
        self.num_classes = num_classes
        self.out_features = out_features
        self.ignore_index = ignore_index
        self.label_smoothing = label_smoothing
        self.linear = Linear(
            in_features,
            math.prod(out_features, start=num_classes),
            bias=bias,
            device=device,
            dtype=dtype,
        )
        self.options = options

    def forward(self, input, target):
        linear_weight = self.linear.weight.reshape(
            (self.num_classes, *self.out_features, self.linear.in_features)
        )
        linear_bias = (
            self.linear.bias.reshape((self.num_classes, *self.out_features))
            if self.linear.bias is not None
            else None
        )
        return F.linear_cross_entropy(
            input,
            linear_weight,
            target,
            linear_bias=linear_bias,
            weight=self.weight,
            reduction=self.reduction,
            ignore_index=self.ignore_index,
            label_smoothing=self.label_smoothing,
            options=self.options,
        )

    def extra_repr(self) -> str:
        return (
            f"in_features={self.linear.in_features},"
            f" num_classes={self.num_classes},"
            f" out_features={self.out_features},"
            f" bias={self.linear.bias is not None},"
            f" reduction={self.reduction},"
            f" ignore_index={self.ignore_index},"
            f" label_smoothing={self.label_smoothing},"
            f" options={self.options}"
        )
