"""Distances: CosineSimilarity, PairwiseDistance (torch.nn.modules.distance)."""

from __future__ import annotations

from engine.nn import functional as F
from engine.nn.modules.module import Module


class CosineSimilarity(Module):
    """Cosine similarity of two inputs along dim, each norm clamped to eps."""

    def __init__(self, dim: int = 1, eps: float = 1e-8):
        super().__init__()
        self.dim, self.eps = dim, eps

    def forward(self, x1, x2):
        return F.cosine_similarity(x1, x2, self.dim, self.eps)


class PairwiseDistance(Module):
    """p-norm of x1 - x2 + eps over the last dim."""

    def __init__(self, p: float = 2.0, eps: float = 1e-6, keepdim: bool = False):
        super().__init__()
        self.norm, self.eps, self.keepdim = p, eps, keepdim

    def forward(self, x1, x2):
        return F.pairwise_distance(x1, x2, self.norm, self.eps, self.keepdim)
