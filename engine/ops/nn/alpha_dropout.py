"""alpha_dropout and feature_alpha_dropout: torch's _dropout_impl<alpha_dropout=true>, a
composite. Noise (input-sized, or [N, C, 1, ...] for the feature form) drawn bernoulli(1 - p)
from the engine's RNG; b = (noise - 1) * alpha a + alpha a p (a new tensor), noise *= a in
place; the result is input * noise (MulBackward0 keeps the noise) with b added in place
(AddBackward0), b freed after. Identity in eval, for p == 0 or an empty input; p == 1
multiplies by a 0-d zero."""

from __future__ import annotations

import math

ALPHA = 1.7580993408473766  # SELU's -scale * alpha: the value a dropped unit takes


def _check_p(p):
    if p < 0.0 or p > 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")


def _alpha_dropout(input, p, training, inplace, feature):
    from engine import creation

    if p == 0 or not training or input.numel() == 0:
        return input
    if p == 1:
        zero = creation.zeros((), dtype=input.dtype, device=input.device)
        return input.mul_(zero) if inplace else input * zero
    if feature:
        if input.ndim < 2:
            raise RuntimeError("Feature dropout requires at least 2 dimensions in the input")
        shape = tuple(input.shape[:2]) + (1,) * (input.ndim - 2)
        noise = creation.empty(shape, dtype=input.dtype, device=input.device)
    else:
        noise = creation.empty_like(input)
    noise.bernoulli_(1 - p)
    a = 1.0 / math.sqrt((ALPHA * ALPHA * p + 1) * (1 - p))
    b = noise.add(-1).mul_(ALPHA * a).add_(ALPHA * a * p)
    noise.mul_(a)
    y = input.mul_(noise) if inplace else input * noise
    return y.add_(b)


def alpha_dropout(input, p=0.5, training=False, inplace=False):
    """Dropout that keeps SELU's self-normalisation: dropped units take -alpha', the rest are
    scaled and shifted to keep mean and variance."""
    _check_p(p)
    return _alpha_dropout(input, p, training, inplace, feature=False)


def feature_alpha_dropout(input, p=0.5, training=False, inplace=False):
    """alpha_dropout of whole channels ([N, C, 1, ...] noise)."""
    _check_p(p)
    return _alpha_dropout(input, p, training, inplace, feature=True)
