"""CTCLoss (torch.nn.modules.loss): F.ctc_loss with the module's blank, reduction and
zero_infinity."""

from __future__ import annotations

from engine.nn import functional as F
from engine.nn.modules.module import Module


class CTCLoss(Module):
    """The connectionist temporal classification loss of log_probs [T, N, C] against targets."""

    def __init__(self, blank: int = 0, reduction: str = "mean", zero_infinity: bool = False):
        super().__init__()
        self.reduction = reduction
        self.blank = blank
        self.zero_infinity = zero_infinity

    def forward(self, log_probs, targets, input_lengths, target_lengths):
        return F.ctc_loss(
            log_probs, targets, input_lengths, target_lengths, self.blank, self.reduction,
            self.zero_infinity,
        )  # fmt: skip
