"""Tensor.exponential_(lambd=1): fill in place with draws of an exponential distribution of rate
lambd, from the engine's generator (engine.manual_seed; the values are not torch's for the same
seed). The draws are gumbel_softmax's noise (engine.ops.nn.gumbel.exponential_noise_) divided by
lambd.

Nothing is allocated (torch's cpu kernel shows no block either); the tensor's version moves.
Like torch's, legal on a non-leaf that requires grad, whose gradient through it is zero
(ExponentialBackward0: `self: zeros_like(grad)`).
"""

from __future__ import annotations

from engine import kernels
from engine.autograd.function import Function
from engine.ops import registry as _registry
from engine.ops.nn.gumbel import exponential_noise_
from engine.tensor import Tensor


class ExponentialFill(Function):
    def forward(self, x, out=None, lambd=1.0, generator=None):
        if not lambd > 0.0:
            raise RuntimeError(
                f"exponential_ expects lambda > 0.0, but found lambda={_cpp_double(lambd)}"
            )
        if not x._dtype.is_floating_point:
            raise RuntimeError(
                "Exponential distribution is a continuous probability distribution. dtype must "
                f"be a floating point but you specified {x._dtype.scalar_name}"
            )
        exponential_noise_(x, generator, bump_version=False)
        if lambd != 1.0 and x._device.type != "meta":
            x._data /= lambd
        return x

    def backward(self, g):
        return (kernels.zeros(g.shape, g._dtype, g._device),)

    def name(self):
        return "ExponentialBackward0"


def _cpp_double(v: float) -> str:
    """A double as C++'s ostream writes it (torch's messages): 6 significant digits."""
    return f"{v:g}"


def exponential_(input, lambd=1.0, *, generator=None):
    """Fill input in place with Exp(lambd) draws (rate lambd, mean 1/lambd); returns input."""
    if isinstance(lambd, Tensor) or not isinstance(lambd, (int, float)):
        raise TypeError(
            "exponential_(): argument 'lambd' (position 1) must be float, not "
            f"{type(lambd).__name__}"
        )
    return ExponentialFill.apply(
        input, out=input, op="exponential_", lambd=float(lambd), generator=generator
    )


_registry.register(
    "exponential_",
    exponential_,
    function=False,
    method=True,
    scenario=_registry.Scenario(
        args=(("lambd", float, 1.0, "the rate (the mean is 1 / lambd)"),),
        call=lambda ts, a, inplace: exponential_(ts[0], a.get("lambd", 1.0)),
        doc="overwrite the input with exponential draws of rate lambd (in place: no memory)",
    ),
)
