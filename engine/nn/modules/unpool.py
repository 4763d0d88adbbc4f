"""MaxUnpool1d, MaxUnpool2d (torch.nn.modules.pooling): F.max_unpool1d/2d with the module's
kernel_size, stride (the kernel size by default) and padding."""

from __future__ import annotations

from engine.nn import functional as F
from engine.nn.modules.module import Module


def _ntuple(v, n):
    return tuple(v) if isinstance(v, (tuple, list)) else (v,) * n


class _MaxUnpoolNd(Module):
    _n = 2

    def __init__(self, kernel_size, stride=None, padding=0):
        super().__init__()
        self.kernel_size = _ntuple(kernel_size, self._n)
        self.stride = _ntuple(stride if stride is not None else kernel_size, self._n)
        self.padding = _ntuple(padding, self._n)

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class MaxUnpool1d(_MaxUnpoolNd):
    """Each value written at its index (from MaxPool1d(return_indices=True)), zeros elsewhere."""

    _n = 1

    def forward(self, input, indices, output_size=None):
        return F.max_unpool1d(
            input, indices, self.kernel_size, self.stride, self.padding, output_size
        )


class MaxUnpool2d(_MaxUnpoolNd):
    """Each value written at its index (from MaxPool2d(return_indices=True)), zeros elsewhere."""

    def forward(self, input, indices, output_size=None):
        return F.max_unpool2d(
            input, indices, self.kernel_size, self.stride, self.padding, output_size
        )


class MaxUnpool3d(_MaxUnpoolNd):
    """Each value written at its index (from MaxPool3d(return_indices=True)), zeros elsewhere."""

    _n = 3

    def forward(self, input, indices, output_size=None):
        return F.max_unpool3d(
            input, indices, self.kernel_size, self.stride, self.padding, output_size
        )
