"""ChannelShuffle."""

from __future__ import annotations

from engine.nn import functional as F
from engine.nn.modules.module import Module


class ChannelShuffle(Module):
    """Interleaves the channels of `groups` groups ([N, C, *] -> [N, C, *], a copy)."""

    def __init__(self, groups: int):
        super().__init__()
        self.groups = groups

    def forward(self, input):
        return F.channel_shuffle(input, self.groups)

    def extra_repr(self) -> str:
        return f"groups={self.groups}"
