"""engine.nn.utils: gradient clipping (torch.nn.utils' names)."""

from engine.nn.utils.clip_grad import clip_grad_norm_, clip_grad_value_, get_total_norm

__all__ = ["clip_grad_norm_", "clip_grad_value_", "get_total_norm"]
