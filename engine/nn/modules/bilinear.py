"""Bilinear: y = x1^T W x2 + b (PyTorch's layout and init)."""

from __future__ import annotations

import math

from engine.allocator.tracked import context
from engine.creation import empty
from engine.nn import functional as F
from engine.nn import init
from engine.nn.modules.module import Module
from engine.nn.parameter import Parameter


class Bilinear(Module):
    """y[..., o] = sum_ij x1[..., i] weight[o, i, j] x2[..., j] + bias[o]; weight
    [out_features, in1_features, in2_features]. Weight and bias are drawn from
    U(-1/sqrt(in1_features), 1/sqrt(in1_features)), as torch's."""

    def __init__(
        self,
        in1_features: int,
        in2_features: int,
        out_features: int,
        bias: bool = True,
        device=None,
        dtype=None,
    ):
        super().__init__()
        self.in1_features = in1_features
        self.in2_features = in2_features
        self.out_features = out_features
        with context(category="parameter"):
            self.weight = Parameter(
                empty(out_features, in1_features, in2_features, device=device, dtype=dtype)
            )
            if bias:
                self.bias = Parameter(empty(out_features, device=device, dtype=dtype))
            else:
                self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        if self.in1_features <= 0:
            raise ValueError(
                f"in1_features must be > 0, but got (in1_features={self.in1_features})"
            )
        bound = 1 / math.sqrt(self.weight.size(1))
        init.uniform_(self.weight, -bound, bound)
        if self.bias is not None:
            init.uniform_(self.bias, -bound, bound)

    def forward(self, input1, input2):
        return F.bilinear(input1, input2, self.weight, self.bias)

    def extra_repr(self) -> str:
        return (
            f"in1_features={self.in1_features}, in2_features={self.in2_features}, "
            f"out_features={self.out_features}, bias={self.bias is not None}"
        )
