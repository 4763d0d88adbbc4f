"""Factories and random fills: new_empty / new_zeros / new_ones / new_full, randint (and
randint_like), and the in-place random fills normal_ / uniform_ / bernoulli_ with bernoulli.

The fills write into the tensor they are called on (nothing allocated, its version moves); like
PyTorch's they are legal on a non-leaf that requires grad, and its gradient through them is zero
(NormalBackward0, UniformBackward0, BernoulliBackward1/2: `self: zeros_like(grad)`).
"""

from __future__ import annotations

import numpy as np

from engine import creation as _creation
from engine import dtypes, kernels
from engine.autograd.function import Function
from engine.backends import get_xp
from engine.creation import _finish, _size, fill_random_, get_generator
from engine.device import as_device
from engine.ops import registry as _registry
from engine.tensor import Tensor


# ---------------------------------------------------------------------------------------------
# new_* (dtype and device default to the tensor's)
# ---------------------------------------------------------------------------------------------
def _new(self, size, dtype, device, requires_grad, fill):
    dt = dtypes.from_any(dtype) if dtype is not None else self._dtype
    dev = as_device(device) if device is not None else self._device
    t = kernels.empty(_size(size), dt, dev)
    if fill is not None and dev.type != "meta":
        t._data.fill(fill)
    return _finish(t, requires_grad)


def new_empty(self, *size, dtype=None, device=None, requires_grad=False):
    return _new(self, size, dtype, device, requires_grad, None)


def new_zeros(self, *size, dtype=None, device=None, requires_grad=False):
    return _new(self, size, dtype, device, requires_grad, 0)


def new_ones(self, *size, dtype=None, device=None, requires_grad=False):
    return _new(self, size, dtype, device, requires_grad, 1)


def new_full(self, size, fill_value, *, dtype=None, device=None, requires_grad=False):
    return _new(self, (size,), dtype, device, requires_grad, fill_value)


# ---------------------------------------------------------------------------------------------
# randint
# ---------------------------------------------------------------------------------------------
def _randint_fill(t: Tensor, low: int, high: int, generator=None) -> None:
    if high <= low:
        raise RuntimeError(
            f"random_ expects 'from' to be less than 'to', but got from={low} >= to={high}"
        )
    dev = t._device
    if dev.type == "meta":
        return
    if dev.type == "cuda":
        t._data[...] = get_xp("cuda").random.randint(low, high, t.shape)
        return
    gen = generator or get_generator()
    arr = t._data
    if arr.dtype.kind in "iu" and arr.flags.c_contiguous:
        arr.reshape(-1)[...] = gen.integers(low, high, arr.size, dtype=arr.dtype)
    else:
        arr[...] = gen.integers(low, high, arr.shape)


def randint(*args, size=None, generator=None, dtype=None, device=None, requires_grad=False):
    """randint(high, size) or randint(low, high, size): integers in [low, high)."""
    args = list(args)
    if size is None:
        if not args:
            raise TypeError("randint() missing required argument 'size'")
        size = args.pop()
    if len(args) == 1:
        low, high = 0, args[0]
    elif len(args) == 2:
        low, high = args
    else:
        raise TypeError("randint() takes (high, size) or (low, high, size)")
    dt = dtypes.from_any(dtype) if dtype is not None else dtypes.int64
    t = kernels.empty(_size((size,)), dt, as_device(device))
    _randint_fill(t, int(low), int(high), generator)
    return _finish(t, requires_grad)


def randperm(n, *, generator=None, dtype=None, device=None, requires_grad=False, pin_memory=False):
    """A random permutation of 0..n-1, int64 by default (the engine's generator draws it: the
    same seed gives the same permutation here, not torch's)."""
    n = int(n)
    if n < 0:
        raise RuntimeError(f"Trying to create tensor with negative dimension {n}: [{n}]")
    dt = dtypes.from_any(dtype) if dtype is not None else dtypes.int64
    dev = as_device(device)
    t = kernels.empty((n,), dt, dev)
    if dev.type == "cuda":
        t._data[...] = get_xp("cuda").random.permutation(n)
    elif dev.type != "meta":
        t._data[...] = (generator or get_generator()).permutation(n)
    return _finish(t, requires_grad)


def randint_like(input, low=0, high=None, *, dtype=None, device=None, requires_grad=False):
    if high is None:
        low, high = 0, low
    dt = dtypes.from_any(dtype) if dtype is not None else input._dtype
    dev = as_device(device) if device is not None else input._device
    t = _creation._like_layout(kernels.empty(input.shape, dt, dev), input, None)
    _randint_fill(t, int(low), int(high))
    return _finish(t, requires_grad)


# ---------------------------------------------------------------------------------------------
# in-place random fills
# ---------------------------------------------------------------------------------------------
class RandomFill(Function):
    """normal_ / uniform_ / bernoulli_: overwrite x; backward gives x's history zeros."""

    def forward(self, x, p=None, out=None, kind="normal", a=0.0, b=1.0, generator=None):
        if not x._dtype.is_floating_point and kind != "bernoulli":
            kind_name = x._dtype.scalar_name
            raise RuntimeError(f"\"{kind}_kernel_cpu\" not implemented for '{kind_name}'")
        self.kind, self.p_is_tensor = kind, isinstance(p, Tensor)
        if kind == "normal":
            if b < 0:
                raise RuntimeError(f"normal expects std >= 0.0, but found std {b}")
            fill_random_(x, "normal", generator, mean=a, std=b, bump_version=False)
        elif kind == "uniform":
            if a > b:
                raise RuntimeError(
                    f"uniform_ expects to return a [from, to) range, but found from={a} > to={b}"
                )
            fill_random_(x, "uniform", generator, low=a, high=b, bump_version=False)
        else:
            _bernoulli_into(x, p, generator)
        return x

    def backward(self, g):
        gx = kernels.zeros(g.shape, g._dtype, g._device)
        return (gx, None) if self.p_is_tensor else (gx,)

    def name(self):
        if self.kind == "bernoulli":
            return "BernoulliBackward1" if self.p_is_tensor else "BernoulliBackward2"
        return "NormalBackward0" if self.kind == "normal" else "UniformBackward0"


def _bernoulli_into(x: Tensor, p, generator=None) -> None:
    """x = (uniform < p) in x's dtype; p a number or a tensor broadcastable to x."""
    pv = p._data if isinstance(p, Tensor) else p
    if not isinstance(p, Tensor) and not 0 <= p <= 1:
        raise RuntimeError(f"bernoulli_ expects p to be in [0, 1], but got p={p}")
    dev = x._device
    if dev.type == "meta":
        return
    if dev.type == "cuda":
        cp = get_xp("cuda")
        x._data[...] = cp.random.random(x.shape) < pv
        return
    gen = generator or get_generator()
    arr = x._data
    step = kernels.SCRATCH_ELEMS
    flat = arr.reshape(-1) if arr.flags.c_contiguous else None
    pb = np.broadcast_to(pv, arr.shape) if isinstance(p, Tensor) else None
    if flat is not None and pb is None:
        for i in range(0, flat.size, step):  # bounded scratch
            j = min(i + step, flat.size)
            flat[i:j] = gen.random(j - i) < pv
    else:
        arr[...] = gen.random(arr.shape) < (pb if pb is not None else pv)


def normal_(input, mean=0.0, std=1.0, *, generator=None):
    return RandomFill.apply(
        input, out=input, op="normal_", kind="normal", a=mean, b=std, generator=generator
    )


def uniform_(input, a=0.0, b=1.0, *, generator=None, **kw):
    # torch's keyword names are `from` and `to` (Python keywords): accept them through **kw
    a = kw.pop("from", a)
    b = kw.pop("to", b)
    if kw:
        raise TypeError(f"uniform_() got unexpected keyword argument(s) {sorted(kw)}")
    return RandomFill.apply(
        input, out=input, op="uniform_", kind="uniform", a=a, b=b, generator=generator
    )


def bernoulli_(input, p=0.5, *, generator=None):
    if isinstance(p, Tensor):
        return RandomFill.apply(
            input, p, out=input, op="bernoulli_", kind="bernoulli", generator=generator
        )
    return RandomFill.apply(
        input, out=input, op="bernoulli_", kind="bernoulli", p=p, generator=generator
    )


class Bernoulli(Function):
    """bernoulli(probs): a new tensor of 0/1 draws; its gradient to probs is zero."""

    def forward(self, probs, out=None, generator=None):
        if not probs._dtype.is_floating_point:
            raise RuntimeError("bernoulli: expected a floating point tensor of probabilities")
        y = kernels.empty(probs.shape, probs._dtype, probs._device)
        _bernoulli_into(y, probs, generator)
        return y

    def backward(self, g):
        return (kernels.zeros(g.shape, g._dtype, g._device),)

    def name(self):
        return "BernoulliBackward0"


def bernoulli(input, p=None, *, generator=None):
    if p is not None:  # Tensor.bernoulli(p): a new tensor of input's shape with probability p
        y = kernels.empty(input.shape, input._dtype, input._device)
        _bernoulli_into(y, p, generator)
        return y
    return Bernoulli.apply(input, op="bernoulli", generator=generator)


_row = _registry.register
_S, _REQ = _registry.Scenario, _registry.REQUIRED
_SIZE = ("size", list[int], _REQ, "the new tensor's shape")


def _new_scenario(fn, doc, fill=False):
    args = (_SIZE, ("fill_value", float, _REQ, "")) if fill else (_SIZE,)
    if fill:
        call = lambda ts, a, inplace: fn(ts[0], tuple(a["size"]), a["fill_value"])  # noqa: E731
    else:
        call = lambda ts, a, inplace: fn(ts[0], *a["size"])  # noqa: E731
    return _S(args=args, call=call, doc=doc + " (the input's dtype and device)")


for _fn, _doc, _fill in (
    (new_empty, "a new uninitialised tensor", False),
    (new_zeros, "a new tensor of zeros", False),
    (new_ones, "a new tensor of ones", False),
    (new_full, "a new tensor filled with fill_value", True),
):
    _row(
        _fn.__name__,
        _fn,
        function=False,
        method=True,
        scenario=_new_scenario(_fn, _doc, fill=_fill),
    )
_row(
    "randint",
    randint,
    scenario=_S(
        inputs=(),
        args=(("low", int, 0, ""), ("high", int, _REQ, "exclusive"), _SIZE),
        call=lambda ts, a, inplace: randint(a.get("low", 0), a["high"], tuple(a["size"])),
        doc="a new int64 tensor of integers drawn from [low, high)",
    ),
)
_row("randperm", randperm, method=False)
_row(
    "randint_like",
    randint_like,
    scenario=_S(
        args=(("low", int, 0, ""), ("high", int, _REQ, "exclusive")),
        call=lambda ts, a, inplace: randint_like(ts[0], a.get("low", 0), a["high"]),
        doc="integers from [low, high) in a new tensor like the input",
    ),
)
_row(
    "normal_",
    normal_,
    function=False,
    method=True,
    scenario=_S(
        args=(("mean", float, 0.0, ""), ("std", float, 1.0, "")),
        call=lambda ts, a, inplace: normal_(ts[0], a.get("mean", 0.0), a.get("std", 1.0)),
        doc="overwrite the input with normal draws (in place: no memory)",
    ),
)
_row(
    "uniform_",
    uniform_,
    function=False,
    method=True,
    scenario=_S(
        args=(("low", float, 0.0, "from"), ("high", float, 1.0, "to")),
        call=lambda ts, a, inplace: uniform_(ts[0], a.get("low", 0.0), a.get("high", 1.0)),
        doc="overwrite the input with uniform draws from [low, high) (in place: no memory)",
    ),
)
_row(
    "bernoulli_",
    bernoulli_,
    function=False,
    method=True,
    scenario=_S(
        args=(("p", float, 0.5, "the probability of a 1"),),
        call=lambda ts, a, inplace: bernoulli_(ts[0], a.get("p", 0.5)),
        doc="overwrite the input with 0/1 draws (in place: no memory)",
    ),
)
_row("bernoulli", bernoulli, method=True)


# zeros_like and its family (engine/creation.py: the input's layout, as PyTorch's
# memory_format=torch.preserve_format)
def _like_scenario(fn, doc, fill=False):
    if fill:
        return _S(
            args=(("fill_value", float, _REQ, ""),),
            call=lambda ts, a, inplace: fn(ts[0], a["fill_value"]),
            doc=doc,
        )
    return _S(call=lambda ts, a, inplace: fn(ts[0]), doc=doc)


for _name, _doc in (
    ("zeros_like", "a new tensor of zeros"),
    ("ones_like", "a new tensor of ones"),
    ("empty_like", "a new uninitialised tensor"),
    ("rand_like", "a new tensor of uniform [0, 1) draws"),
    ("randn_like", "a new tensor of standard normal draws"),
):
    _fn = getattr(_creation, _name)
    _row(_name, _fn, scenario=_like_scenario(_fn, _doc + " with the input's shape and layout"))
_row(
    "full_like",
    _creation.full_like,
    scenario=_like_scenario(
        _creation.full_like, "a new tensor of fill_value with the input's shape and layout", True
    ),
)
