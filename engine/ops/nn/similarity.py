"""normalize, cosine_similarity and pairwise_distance: torch's composites (F.normalize in
Python, the other two in ATen), written with the same ops in the same order, so their nodes,
what those save and the temporaries they make are torch's (tests/engine/test_similarity.py)."""

from __future__ import annotations

from engine.autograd.grad_mode import no_grad
from engine.ops.common import result_type
from engine.ops.nn.common import add_scalar
from engine.tensor import Tensor


def normalize(input: Tensor, p=2.0, dim=1, eps=1e-12, out=None) -> Tensor:
    """input / max(||input||_p along dim, eps)."""
    from engine import ops

    denom = input.norm(p, dim, keepdim=True).clamp_min(eps).expand_as(input)
    return ops.div(input, denom, out=out)


def cosine_similarity(x1: Tensor, x2: Tensor, dim=1, eps=1e-8) -> Tensor:
    """sum((x1 / ||x1||) * (x2 / ||x2||)) along dim, each norm clamped to eps (ATen's order:
    the norms cloned, clamped in place without grad, each input divided by its own)."""
    from engine import ops

    dtype = result_type(x1, x2)
    if not x1.dtype.is_floating_point:  # vector_norm takes floats: integers cast first
        x1 = x1.to(dtype)
    if not x2.dtype.is_floating_point:
        x2 = x2.to(dtype)
    x1, x2 = ops.broadcast_tensors(x1, x2)
    n1 = x1.norm(2, dim, keepdim=True).clone()
    n2 = x2.norm(2, dim, keepdim=True).clone()
    with no_grad():
        n1.clamp_min_(eps)
        n2.clamp_min_(eps)
    # torch's build evaluates the product's right operand first (its node runs second)
    q2 = x2 / n2
    q1 = x1 / n1
    prod = q1 * q2
    del q1, q2
    return prod.sum(dim)


def pairwise_distance(x1: Tensor, x2: Tensor, p=2.0, eps=1e-6, keepdim=False) -> Tensor:
    """||x1 - x2 + eps||_p over the last dim (ATen's)."""
    from engine.ops import reduce as R

    last = max(x1.ndim, x2.ndim) - 1
    # one C++ statement: x1 - x2 lives until the norm is made; + eps is add.Scalar
    diff = x1 - x2
    shifted = add_scalar(diff, eps)
    return R.VectorNorm.apply(shifted, op="norm", ord=p, dim=last, keepdim=keepdim, aten_norm=True)
