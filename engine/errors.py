"""Errors raised by the engine. Messages follow PyTorch's wording where PyTorch has one."""


class OutOfMemoryError(RuntimeError):
    """An allocation would pass the device's memory limit (torch.OutOfMemoryError's counterpart).

    Raised before any state changes: the allocator's counters stay as they were.
    """

    def __init__(self, message: str, *, device: str = "cpu", requested: int = 0):
        super().__init__(message)
        self.device = device
        self.requested = requested


class MetaDataError(RuntimeError):
    """Raised when code tries to read the values of a tensor on the meta device."""
