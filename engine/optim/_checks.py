"""Constructor checks shared by NAdam, RAdam, Adamax and Adadelta (PyTorch's words)."""

from __future__ import annotations

from engine.tensor import Tensor


def check_lr_eps_betas(lr, eps, betas=None, weight_decay=None) -> None:
    """torch's checks, in its order: a 1-element tensor lr, lr, eps, betas, weight_decay."""
    if isinstance(lr, Tensor) and lr.numel() != 1:
        raise ValueError("Tensor lr must be 1-element")
    if not 0.0 <= lr:
        raise ValueError(f"Invalid learning rate: {lr}")
    if not 0.0 <= eps:
        raise ValueError(f"Invalid epsilon value: {eps}")
    if betas is not None:
        if not 0.0 <= betas[0] < 1.0:
            raise ValueError(f"Invalid beta parameter at index 0: {betas[0]}")
        if not 0.0 <= betas[1] < 1.0:
            raise ValueError(f"Invalid beta parameter at index 1: {betas[1]}")
    if weight_decay is not None and not 0.0 <= weight_decay:
        raise ValueError(f"Invalid weight_decay value: {weight_decay}")
