"""engine.amp: automatic mixed precision (torch.amp's names): autocast and GradScaler."""

from engine.amp.autocast_mode import autocast, custom_fwd, get_autocast_dtype, is_autocast_enabled

__all__ = ["GradScaler", "autocast", "custom_fwd", "get_autocast_dtype", "is_autocast_enabled"]


def __getattr__(name):
    if name == "GradScaler":  # imported on first use: it needs engine.optim
        from engine.amp.grad_scaler import GradScaler

        return GradScaler
    raise AttributeError(f"module 'engine.amp' has no attribute {name!r}")
