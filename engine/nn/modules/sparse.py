"""Embedding."""

from __future__ import annotations

from engine.allocator.tracked import context
from engine.autograd.grad_mode import no_grad
from engine.creation import empty
from engine.nn import functional as F
from engine.nn import init
from engine.nn.modules.module import Module
from engine.nn.parameter import Parameter


class Embedding(Module):
    """A lookup table: weight [num_embeddings, embedding_dim] ~ N(0, 1), padding row zeroed."""

    def __init__(
        self,
        num_embeddings: int,
        embedding_dim: int,
        padding_idx: int | None = None,
        max_norm=None,
        norm_type: float = 2.0,
        scale_grad_by_freq: bool = False,
        sparse: bool = False,
        _weight=None,
        _freeze: bool = False,
        device=None,
        dtype=None,
    ):
        super().__init__()
        if max_norm is not None or scale_grad_by_freq or sparse:
            raise NotImplementedError(
                "Embedding: max_norm, scale_grad_by_freq and sparse are not supported"
            )
        if padding_idx is not None:
            if not -num_embeddings <= padding_idx < num_embeddings:
                raise AssertionError("Padding_idx must be within num_embeddings")
            if padding_idx < 0:
                padding_idx += num_embeddings
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        self.padding_idx = padding_idx
        with context(category="parameter"):
            if _weight is None:
                self.weight = Parameter(
                    empty(num_embeddings, embedding_dim, device=device, dtype=dtype),
                    requires_grad=not _freeze,
                )
                self.reset_parameters()
            else:
                self.weight = Parameter(_weight, requires_grad=not _freeze)

    def reset_parameters(self) -> None:
        init.normal_(self.weight)
        if self.padding_idx is not None:
            with no_grad():
                self.weight[self.padding_idx].fill_(0)

    def forward(self, input):
        return F.embedding(input, self.weight, self.padding_idx)

    def extra_repr(self) -> str:
        s = f"{self.num_embeddings}, {self.embedding_dim}"
        if self.padding_idx is not None:
            s += f", padding_idx={self.padding_idx}"
        return s
