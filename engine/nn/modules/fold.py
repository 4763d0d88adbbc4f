"""Fold, Unfold (torch.nn.modules.fold): F.fold / F.unfold with the module's arguments."""

from __future__ import annotations

from engine.nn import functional as F
from engine.nn.modules.module import Module


class Fold(Module):
    """Sums sliding blocks, columns [N, C * kh * kw, L], back into an image [N, C, *output_size]."""

    def __init__(self, output_size, kernel_size, dilation=1, padding=0, stride=1):
        super().__init__()
        self.output_size = output_size
        self.kernel_size = kernel_size
        self.dilation = dilation
        self.padding = padding
        self.stride = stride

    def forward(self, input):
        return F.fold(
            input, self.output_size, self.kernel_size, self.dilation, self.padding, self.stride
        )

    def extra_repr(self) -> str:
        return (
            "output_size={output_size}, kernel_size={kernel_size}, dilation={dilation}, "
            "padding={padding}, stride={stride}".format(**self.__dict__)
        )


class Unfold(Module):
    """The sliding blocks of an image [N, C, H, W] as columns [N, C * kh * kw, L]."""

    def __init__(self, kernel_size, dilation=1, padding=0, stride=1):
        super().__init__()
        self.kernel_size = kernel_size
        self.dilation = dilation
        self.padding = padding
        self.stride = stride

    def forward(self, input):
        return F.unfold(input, self.kernel_size, self.dilation, self.padding, self.stride)

    def extra_repr(self) -> str:
        return (
            "kernel_size={kernel_size}, dilation={dilation}, padding={padding}, "
            "stride={stride}".format(**self.__dict__)
        )
