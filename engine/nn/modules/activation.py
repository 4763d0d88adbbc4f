"""Activations: ReLU, Sigmoid, Tanh, GELU, Softmax, LogSoftmax, and SiLU, LeakyReLU, ELU, CELU,
SELU, Hardtanh, ReLU6, Hardswish, Hardsigmoid, Mish, Threshold, Softplus, LogSigmoid, Softsign,
Tanhshrink, Softmin, GLU (PyTorch's arguments and
reprs; each in-place form frees or clones as PyTorch's does, see engine/ops/activations.py)."""

from __future__ import annotations

from engine.nn import functional as F
from engine.nn.modules.module import Module


class ReLU(Module):
    """max(x, 0). With inplace=True the input is overwritten and no new buffer is allocated."""

    def __init__(self, inplace: bool = False):
        super().__init__()
        self.inplace = inplace

    def forward(self, input):
        return F.relu(input, inplace=self.inplace)

    def extra_repr(self) -> str:
        return "inplace=True" if self.inplace else ""


class Sigmoid(Module):
    def forward(self, input):
        return F.sigmoid(input)


class Tanh(Module):
    def forward(self, input):
        return F.tanh(input)


class GELU(Module):
    """x * Phi(x) (approximate='tanh' for the tanh formula)."""

    def __init__(self, approximate: str = "none"):
        super().__init__()
        self.approximate = approximate

    def forward(self, input):
        return F.gelu(input, approximate=self.approximate)

    def extra_repr(self) -> str:
        return f"approximate={self.approximate!r}"


class Softmax(Module):
    def __init__(self, dim: int | None = None):
        super().__init__()
        self.dim = dim

    def forward(self, input):
        return F.softmax(input, self.dim)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


class LogSoftmax(Softmax):
    def forward(self, input):
        return F.log_softmax(input, self.dim)


def _inplace_suffix(inplace: bool, first: bool = False) -> str:
    if not inplace:
        return ""
    return "inplace=True" if first else ", inplace=True"


class SiLU(Module):
    """x * sigmoid(x). In place it pays a clone of the input (backward reads the input)."""

    def __init__(self, inplace: bool = False):
        super().__init__()
        self.inplace = inplace

    def forward(self, input):
        return F.silu(input, inplace=self.inplace)

    def extra_repr(self) -> str:
        return _inplace_suffix(self.inplace, first=True)


class Mish(SiLU):
    """x * tanh(softplus(x)). In place it pays a clone of the input."""

    def forward(self, input):
        return F.mish(input, inplace=self.inplace)


class Hardswish(SiLU):
    """x * relu6(x + 3) / 6. In place it pays a clone of the input."""

    def forward(self, input):
        return F.hardswish(input, inplace=self.inplace)

    def extra_repr(self) -> str:
        return ""


class Hardsigmoid(Hardswish):
    """relu6(x + 3) / 6. In place it pays a clone of the input."""

    def forward(self, input):
        return F.hardsigmoid(input, inplace=self.inplace)


class SELU(SiLU):
    """scale * elu(x, alpha) with the self-normalising constants. In place it is free."""

    def forward(self, input):
        return F.selu(input, inplace=self.inplace)


class LeakyReLU(Module):
    """x, or negative_slope * x below 0. In place it is free (backward reads the result)."""

    def __init__(self, negative_slope: float = 1e-2, inplace: bool = False):
        super().__init__()
        self.negative_slope = negative_slope
        self.inplace = inplace

    def forward(self, input):
        return F.leaky_relu(input, self.negative_slope, self.inplace)

    def extra_repr(self) -> str:
        return f"negative_slope={self.negative_slope}" + _inplace_suffix(self.inplace)


class ELU(Module):
    """x above 0, alpha * (exp(x) - 1) below. In place it is free (backward reads the result)."""

    def __init__(self, alpha: float = 1.0, inplace: bool = False):
        super().__init__()
        self.alpha = alpha
        self.inplace = inplace

    def forward(self, input):
        return F.elu(input, self.alpha, self.inplace)

    def extra_repr(self) -> str:
        return f"alpha={self.alpha}" + _inplace_suffix(self.inplace)


class CELU(ELU):
    """max(0, x) + min(0, alpha * (exp(x / alpha) - 1)). In place it is free."""

    def forward(self, input):
        return F.celu(input, self.alpha, self.inplace)


class Hardtanh(Module):
    """clamp(x, min_val, max_val). In place it pays a clone of the input (as PyTorch's)."""

    def __init__(
        self,
        min_val: float = -1.0,
        max_val: float = 1.0,
        inplace: bool = False,
        min_value: float | None = None,
        max_value: float | None = None,
    ):
        super().__init__()
        if min_value is not None:
            min_val = min_value
        if max_value is not None:
            max_val = max_value
        if max_val <= min_val:
            raise AssertionError(f"Hardtanh: max_val ({max_val}) must be above min_val ({min_val})")
        self.min_val = min_val
        self.max_val = max_val
        self.inplace = inplace

    def forward(self, input):
        return F.hardtanh(input, self.min_val, self.max_val, self.inplace)

    def extra_repr(self) -> str:
        return f"min_val={self.min_val}, max_val={self.max_val}" + _inplace_suffix(self.inplace)


class ReLU6(Hardtanh):
    """min(max(x, 0), 6) = hardtanh(x, 0, 6): in place it pays a clone of the input, as in
    PyTorch 2.x (backward reads the input), so ReLU6(inplace=True) saves no memory there."""

    def __init__(self, inplace: bool = False):
        super().__init__(0.0, 6.0, inplace)

    def forward(self, input):
        return F.relu6(input, self.inplace)

    def extra_repr(self) -> str:
        return _inplace_suffix(self.inplace, first=True)


class Threshold(Module):
    """x where x > threshold, else value. In place it pays a clone of the input."""

    def __init__(self, threshold: float, value: float, inplace: bool = False):
        super().__init__()
        self.threshold = threshold
        self.value = value
        self.inplace = inplace

    def forward(self, input):
        return F.threshold(input, self.threshold, self.value, self.inplace)

    def extra_repr(self) -> str:
        return f"threshold={self.threshold}, value={self.value}" + _inplace_suffix(self.inplace)


class Softplus(Module):
    """log(1 + exp(beta x)) / beta (x itself where beta x > threshold). No in-place form."""

    def __init__(self, beta: float = 1.0, threshold: float = 20.0):
        super().__init__()
        self.beta = beta
        self.threshold = threshold

    def forward(self, input):
        return F.softplus(input, self.beta, self.threshold)

    def extra_repr(self) -> str:
        return f"beta={self.beta}, threshold={self.threshold}"


class LogSigmoid(Module):
    """log(sigmoid(x)); on cpu backward keeps an input-sized buffer (as torch's)."""

    def forward(self, input):
        return F.logsigmoid(input)


class Softsign(Module):
    def forward(self, input):
        return F.softsign(input)


class Tanhshrink(Module):
    def forward(self, input):
        return F.tanhshrink(input)


class Softmin(Softmax):
    def forward(self, input):
        return F.softmin(input, self.dim)


class GLU(Module):
    """a * sigmoid(b), a and b the halves of the input along dim."""

    def __init__(self, dim: int = -1):
        super().__init__()
        self.dim = dim

    def forward(self, input):
        return F.glu(input, self.dim)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


class Hardshrink(Module):
    def __init__(self, lambd: float = 0.5):
        super().__init__()
        self.lambd = lambd

    def forward(self, input):
        return F.hardshrink(input, self.lambd)

    def extra_repr(self) -> str:
        return f"{self.lambd}"


class Softshrink(Hardshrink):
    def forward(self, input):
        return F.softshrink(input, self.lambd)


class PReLU(Module):
    """max(0, x) + weight * min(0, x), with a learned weight of 1 or num_parameters (= C)
    slopes, each initialised to `init`."""

    def __init__(self, num_parameters: int = 1, init: float = 0.25, device=None, dtype=None):
        from engine.allocator.tracked import context
        from engine.creation import empty
        from engine.nn.parameter import Parameter

        self.num_parameters = num_parameters
        super().__init__()
        self.init = init
        with context(category="parameter"):
            self.weight = Parameter(empty(num_parameters, device=device, dtype=dtype))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        from engine.nn import init

        init.constant_(self.weight, self.init)

    def forward(self, input):
        return F.prelu(input, self.weight)

    def extra_repr(self) -> str:
        return f"num_parameters={self.num_parameters}"


class RReLU(Module):
    """Leaky ReLU with a random negative slope from U(lower, upper) in training (the engine's
    RNG), (lower + upper) / 2 in eval."""

    def __init__(self, lower: float = 1.0 / 8, upper: float = 1.0 / 3, inplace: bool = False):
        super().__init__()
        self.lower, self.upper, self.inplace = lower, upper, inplace

    def forward(self, input):
        return F.rrelu(input, self.lower, self.upper, self.training, self.inplace)

    def extra_repr(self) -> str:
        return f"lower={self.lower}, upper={self.upper}" + _inplace_suffix(self.inplace)


class Softmax2d(Module):
    """softmax over the channels of [N, C, H, W] or [C, H, W] inputs (dim -3)."""

    def forward(self, input):
        if input.dim() not in (3, 4):
            raise ValueError(
                f"Softmax2d: expected input to be 3D or 4D, got {input.dim()}D instead"
            )
        return F.softmax(input, -3)
