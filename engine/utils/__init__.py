"""engine.utils: training utilities with torch.utils' names (checkpoint)."""
