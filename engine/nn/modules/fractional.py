"""FractionalMaxPool2d, FractionalMaxPool3d (torch.nn.modules.pooling): fractional max pooling
to an output_size or by an output_ratio; `_random_samples`, a buffer when given, fixes the
windows (see engine/ops/nn/fractional.py)."""

from __future__ import annotations

from engine.nn import functional as F
from engine.nn.modules.module import Module


def _ntuple(v, n):
    return tuple(v) if isinstance(v, (tuple, list)) else (v,) * n


class _FractionalMaxPoolNd(Module):
    _n = 2

    def __init__(
        self, kernel_size, output_size=None, output_ratio=None, return_indices=False,
        _random_samples=None,
    ):  # fmt: skip
        super().__init__()
        n, name = self._n, type(self).__name__
        self.kernel_size = _ntuple(kernel_size, n)
        self.return_indices = return_indices
        self.register_buffer("_random_samples", _random_samples)
        self.output_size = _ntuple(output_size, n) if output_size is not None else None
        self.output_ratio = _ntuple(output_ratio, n) if output_ratio is not None else None
        if output_size is None and output_ratio is None:
            raise ValueError(
                f"{name} requires specifying either an output size, or a pooling ratio"
            )
        if output_size is not None and output_ratio is not None:
            raise ValueError("only one of output_size and output_ratio may be specified")
        if self.output_ratio is not None and not all(0 < r < 1 for r in self.output_ratio):
            raise ValueError(f"output_ratio must be between 0 and 1 (got {output_ratio})")


class FractionalMaxPool2d(_FractionalMaxPoolNd):
    """Max pooling over pseudo-random 2-D windows, to output_size or by output_ratio."""

    def forward(self, input):
        return F.fractional_max_pool2d(
            input, self.kernel_size, self.output_size, self.output_ratio, self.return_indices,
            _random_samples=self._random_samples,
        )  # fmt: skip


class FractionalMaxPool3d(_FractionalMaxPoolNd):
    """Max pooling over pseudo-random 3-D windows, to output_size or by output_ratio."""

    _n = 3

    def forward(self, input):
        return F.fractional_max_pool3d(
            input, self.kernel_size, self.output_size, self.output_ratio, self.return_indices,
            _random_samples=self._random_samples,
        )  # fmt: skip
