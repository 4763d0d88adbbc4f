"""engine.nn.functional: the functional forms of the layers (PyTorch's names and signatures).

Built from the op table (engine/ops/registry.py): every row with a functional form is published
here under its name. Primitives live in engine/ops (engine/ops/nn/ for the nn ones); composites
such as cross_entropy = nll_loss(log_softmax(x)) need no backward of their own.
"""

from __future__ import annotations

from engine.ops import registry as _registry

globals().update(_registry.functional())

__all__ = sorted(_registry.functional())  # noqa: PLE0605 - built from the op table
