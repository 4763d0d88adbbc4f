"""torch.special's functions that are aliases of engine ops: the op itself, so values, gradients,
nodes (torch.special.expit(x).grad_fn is SigmoidBackward0) and blocks are the op's.

Not here (each would need a kernel or node of its own to match torch): entr
(SpecialEntrBackward0), xlog1py (SpecialXlog1PyBackward0), polygamma, multigammaln (mvlgamma),
i0/i0e/i1/i1e, ndtri, log_ndtr, erfcx, zeta, gammainc/gammaincc, the Bessel and orthogonal
polynomial functions; ndtr (torch's composite makes MulBackward1/AddBackward1 scalar nodes the
engine's scalar arithmetic does not); round (torch.special.round is round(decimals=0),
RoundBackward1, where engine.round is torch.round's RoundBackward0).
"""

from __future__ import annotations

from engine.ops import _ns

__all__ = [
    "digamma",
    "erf",
    "erfc",
    "erfinv",
    "exp2",
    "expit",
    "expm1",
    "gammaln",
    "log1p",
    "log_softmax",
    "logit",
    "logsumexp",
    "psi",
    "sinc",
    "softmax",
    "xlogy",
]

# torch.special name = the engine op (an alias keeps the op's node, as torch's)
digamma = _ns["digamma"]
erf = _ns["erf"]
erfc = _ns["erfc"]
erfinv = _ns["erfinv"]
exp2 = _ns["exp2"]
expit = _ns["sigmoid"]
expm1 = _ns["expm1"]
gammaln = _ns["lgamma"]
log1p = _ns["log1p"]
log_softmax = _ns["log_softmax"]
logit = _ns["logit"]
logsumexp = _ns["logsumexp"]
psi = _ns["digamma"]
sinc = _ns["sinc"]
softmax = _ns["softmax"]
xlogy = _ns["xlogy"]
