"""engine.utils: training utilities with torch.utils' names (checkpoint), and
`engine.utils.collector.paused()` (run a region without Python's cyclic garbage collector)."""
