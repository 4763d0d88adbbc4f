"""Dropout."""

from __future__ import annotations

from engine.nn import functional as F
from engine.nn.modules.module import Module


class Dropout(Module):
    """Zeroes elements with probability p in training (scaling the rest by 1/(1-p)); identity in eval."""

    def __init__(self, p: float = 0.5, inplace: bool = False):
        super().__init__()
        if p < 0 or p > 1:
            raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
        self.p = p
        self.inplace = inplace

    def forward(self, input):
        return F.dropout(input, self.p, self.training, self.inplace)

    def extra_repr(self) -> str:
        return f"p={self.p}, inplace={self.inplace}"


class Dropout1d(Dropout):
    """Zeroes whole channels of [N, C, L] (or [C, L]) inputs in training."""

    def forward(self, input):
        return F.dropout1d(input, self.p, self.training, self.inplace)


class Dropout2d(Dropout):
    """Zeroes whole channels of [N, C, H, W] inputs in training."""

    def forward(self, input):
        return F.dropout2d(input, self.p, self.training, self.inplace)


class Dropout3d(Dropout):
    """Zeroes whole channels of [N, C, D, H, W] (or [C, D, H, W]) inputs in training."""

    def forward(self, input):
        return F.dropout3d(input, self.p, self.training, self.inplace)


class AlphaDropout(Dropout):
    """Alpha dropout in training (dropped units take SELU's negative saturation, the rest are
    scaled and shifted to keep mean and variance); identity in eval."""

    def forward(self, input):
        return F.alpha_dropout(input, self.p, self.training)


class FeatureAlphaDropout(Dropout):
    """Alpha dropout of whole channels in training; identity in eval."""

    def forward(self, input):
        return F.feature_alpha_dropout(input, self.p, self.training)
