"""engine.nn.attention: choose how scaled_dot_product_attention runs (PyTorch's names).

>>> from engine.nn.attention import SDPBackend, sdpa_kernel
>>> with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
...     y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # saves only out + lse

Without it the backend is PyTorch's own choice (on cpu its flash kernel when the inputs fit it,
else MATH; MATH on meta and cuda). MATH composes the attention of ordinary ops as ATen's math
path does, with its memory; FLASH_ATTENTION and EFFICIENT_ATTENTION account it as the fused
kernels do (see engine/ops/attention.py).
"""

from __future__ import annotations

import enum

from engine.ops import attention as _attention


class SDPBackend(enum.Enum):
    MATH = _attention.MATH
    FLASH_ATTENTION = _attention.FLASH_ATTENTION
    EFFICIENT_ATTENTION = _attention.EFFICIENT_ATTENTION


class sdpa_kernel:  # noqa: N801 - PyTorch's spelling
    """Context manager (and decorator) that restricts scaled_dot_product_attention's backends."""

    def __init__(self, backends, set_priority: bool = False):
        if isinstance(backends, (SDPBackend, str)):
            backends = [backends]
        names = []
        for b in backends:
            if isinstance(b, str):
                try:
                    b = SDPBackend[b.upper()]
                except KeyError:
                    valid = ", ".join(m.name for m in SDPBackend)
                    raise ValueError(
                        f"unknown SDPA backend {b!r}; expected one of {valid}"
                    ) from None
            if not isinstance(b, SDPBackend):
                raise TypeError(f"sdpa_kernel expects SDPBackend values, got {b!r}")
            names.append(b.value)
        self._backends = tuple(names)

    def __enter__(self):
        self._prev = _attention.CHOICE.backends
        _attention.CHOICE.backends = self._backends
        return self

    def __exit__(self, *exc):
        _attention.CHOICE.backends = self._prev
        return False

    def __call__(self, func):
        import functools

        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            with sdpa_kernel([SDPBackend(b) for b in self._backends]):
                return func(*args, **kwargs)

        return wrapper


__all__ = ["SDPBackend", "sdpa_kernel"]
