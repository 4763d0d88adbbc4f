"""torch._foreach_* as the optimizers' foreach updates call them: each one the per-tensor op over
the list, which is what PyTorch runs itself on cpu (its "slow path") and allocates what its cuda
kernels do (a list result: one new tensor per entry, in order; an in-place one: nothing).

Each is a function so that no tensor outlives the call in a loop variable: a list of results
is then freed as PyTorch frees it, last entry first, when the caller drops the list.

`other` / `scalars`: a list (one per entry) or one value for all.

The public ones are also `engine._foreach_<name>` (torch's names: `engine._foreach_lerp_(ema,
params, 0.001)` for an EMA of a model's parameters), listed in PUBLIC.
"""

from __future__ import annotations

from engine.ops import _ns as _op_table

_maximum = _op_table["maximum"]


def _each(other, n: int):
    return other if isinstance(other, (list, tuple)) else [other] * n


def neg(ts) -> list:
    return [t.neg() for t in ts]


def neg_(ts) -> None:
    for t in ts:
        t.neg_()


def zero_(ts) -> None:
    for t in ts:
        t.zero_()


def copy_(ts, src) -> None:
    for t, s in zip(ts, src, strict=True):
        t.copy_(s)


def norm(ts, ord=2) -> list:  # noqa: A002 - torch's name
    """One 0-d norm per tensor (torch._foreach_norm; outside autograd here), each computed
    without a full-size temporary, as torch's fused norm."""
    from engine.nn.utils.clip_grad import _norm

    return [_norm(t, float(ord)) for t in ts]


def sqrt(ts) -> list:
    return [t.sqrt() for t in ts]


def sqrt_(ts) -> None:
    for t in ts:
        t.sqrt_()


def add(ts, others, alpha=1) -> list:
    return [t.add(o, alpha=alpha) for t, o in zip(ts, _each(others, len(ts)), strict=True)]


def add_(ts, other, alpha=1) -> None:
    for t, o in zip(ts, _each(other, len(ts)), strict=True):
        t.add_(o, alpha=alpha)


def sub(ts, others, alpha=1) -> list:
    return [t.sub(o, alpha=alpha) for t, o in zip(ts, _each(others, len(ts)), strict=True)]


def sub_(ts, other, alpha=1) -> None:
    for t, o in zip(ts, _each(other, len(ts)), strict=True):
        t.sub_(o, alpha=alpha)


def mul(ts, scalars) -> list:
    return [t.mul(s) for t, s in zip(ts, _each(scalars, len(ts)), strict=True)]


def mul_(ts, scalars) -> None:
    for t, s in zip(ts, _each(scalars, len(ts)), strict=True):
        t.mul_(s)


def div(ts, scalars) -> list:
    return [t.div(s) for t, s in zip(ts, _each(scalars, len(ts)), strict=True)]


def div_(ts, scalars) -> None:
    for t, s in zip(ts, _each(scalars, len(ts)), strict=True):
        t.div_(s)


def lerp_(ts, ends, weight) -> None:
    for t, e, w in zip(ts, ends, _each(weight, len(ts)), strict=True):
        t.lerp_(e, w)


def maximum_(ts, others) -> None:
    for t, o in zip(ts, others, strict=True):
        _maximum(t, o, out=t)


def addcmul(ts, t1, t2, value=1) -> list:
    return [t.addcmul(a, b, value=value) for t, a, b in zip(ts, t1, t2, strict=True)]


def addcmul_(ts, t1, t2, value=1) -> None:
    for t, a, b, v in zip(ts, t1, t2, _each(value, len(ts)), strict=True):
        t.addcmul_(a, b, value=v)


def addcdiv_(ts, t1, t2, scalars=1) -> None:
    for t, a, b, s in zip(ts, t1, t2, _each(scalars, len(ts)), strict=True):
        t.addcdiv_(a, b, value=s)


def step_counters(steps) -> None:
    """torch._foreach_add_(steps, 1) as PyTorch's foreach updates write it: the cpu counters
    through one 0-d tensor made for the call (its 4 bytes are a cpu allocation)."""
    if steps and steps[0].device.type == "cpu":
        from engine.creation import tensor

        add_(steps, tensor(1.0), alpha=1.0)
    else:
        add_(steps, 1)


def gradients(params, grads, steps=None, *, maximize: bool, weight_decay: float) -> list:
    """The prologue of PyTorch's multi-tensor updates: the gradients negated (maximize: new
    tensors), the step counters advanced (when given), then weight decay added, into the negated
    copies or as new tensors. Decoupled weight decay (AdamW) is the caller's."""
    if maximize:
        grads = neg(grads)
    if steps is not None:
        step_counters(steps)
    if weight_decay != 0:
        if maximize:  # the negated copies are written into
            add_(grads, params, alpha=weight_decay)
        else:
            grads = add(grads, params, alpha=weight_decay)
    return grads


# engine._foreach_<name> -> these functions (engine/__init__.py resolves them on first use)
PUBLIC = {
    f"_foreach_{name}": globals()[name]
    for name in (
        "add",
        "add_",
        "sub",
        "sub_",
        "mul",
        "mul_",
        "div",
        "div_",
        "neg",
        "neg_",
        "sqrt",
        "sqrt_",
        "lerp_",
        "maximum_",
        "addcmul",
        "addcmul_",
        "addcdiv_",
        "zero_",
        "copy_",
        "norm",
    )
}
