"""Reverse-mode autograd that stays correct under in-place ops (version counters, leaf checks,
CopySlices for writes through views)."""

from engine.autograd import graph
from engine.autograd.api import (
    backward,
    grad,
    inference_mode,
    is_inference_mode_enabled,
    register_hook,
    register_post_accumulate_grad_hook,
)
from engine.autograd.grad_mode import enable_grad, is_grad_enabled, no_grad, set_grad_enabled
from engine.tensor import Tensor as _Tensor

# An autograd field of every tensor, like retain_grad (engine/tensor.py): bound here, where
# the hooks are run from.
_Tensor.register_hook = register_hook
_Tensor.register_post_accumulate_grad_hook = register_post_accumulate_grad_hook

__all__ = [
    "backward",
    "enable_grad",
    "grad",
    "graph",
    "inference_mode",
    "is_grad_enabled",
    "is_inference_mode_enabled",
    "no_grad",
    "register_hook",
    "register_post_accumulate_grad_hook",
    "set_grad_enabled",
]
