"""Reverse-mode autograd that stays correct under in-place ops (version counters, leaf checks,
CopySlices for writes through views)."""

from engine.autograd.grad_mode import enable_grad, is_grad_enabled, no_grad, set_grad_enabled

__all__ = ["enable_grad", "is_grad_enabled", "no_grad", "set_grad_enabled"]
