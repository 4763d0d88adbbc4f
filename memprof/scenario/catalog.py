"""The ops and nn modules a scenario may use: their tensor inputs, arguments, in-place form,
and how each is called on the engine. One table row per op or module.

The pydantic model (model.py) builds its per-op and per-module argument types from these rows,
so the JSON Schema offers each op's arguments to editors, and the runner calls `OpDef.call`.
Engine imports happen inside the call functions: reading the catalog costs nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

REQUIRED: Any = ...  # marks an argument without a default

IntOrPair = int | list[int]
Dims = int | list[int] | None
Reduction = Literal["mean", "sum", "none"]


@dataclass(frozen=True)
class Arg:
    """One keyword argument of an op or module: its name, type (a typing form) and default."""

    name: str
    type: Any
    default: Any = REQUIRED
    doc: str = ""


@dataclass(frozen=True)
class OpDef:
    """An op a program node can call: `{op: NAME, in: [...], args: {...}, inplace: bool}`.

    inputs: names of the tensor inputs, in order; optional_inputs may follow them; variadic
    ops take one or more tensors. inplace: whether a trailing-underscore form exists.
    call(ts, args, inplace) runs it on engine tensors and returns the result tensor.
    """

    name: str
    inputs: tuple[str, ...]
    call: Callable[[list, dict, bool], Any]
    args: tuple[Arg, ...] = ()
    optional_inputs: tuple[str, ...] = ()
    variadic: bool = False
    inplace: bool = False
    doc: str = ""

    @property
    def min_inputs(self) -> int:
        return len(self.inputs)

    @property
    def max_inputs(self) -> int | None:
        return None if self.variadic else len(self.inputs) + len(self.optional_inputs)


@dataclass(frozen=True)
class ModuleDef:
    """An nn layer a scenario declares under `modules:` and calls from a program node."""

    name: str
    args: tuple[Arg, ...]
    inputs: tuple[str, ...] = ("input",)
    build: Callable[[dict], Any] | None = None  # default: engine.nn.<name>(**args)
    doc: str = ""
    children: bool = False  # Sequential: args hold nested module specs


# --- call helpers -----------------------------------------------------------------------------


def _F():
    import engine.nn.functional as F

    return F


def _tuple(v):
    return tuple(v) if isinstance(v, list) else v


def _method(name: str, *arg_names: str):
    """Call `x.name(*args)` or, in place, `x.name_(*args)`."""

    def call(ts, a, inplace):
        fn = getattr(ts[0], name + "_" if inplace else name)
        return fn(*(_tuple(a[n]) for n in arg_names))

    return call


def _binary(name: str):
    """add/sub/mul/div: `other` is the second input tensor, or the `other` scalar argument."""

    def call(ts, a, inplace):
        other = ts[1] if len(ts) > 1 else a.get("other")
        fn = getattr(ts[0], name + "_" if inplace else name)
        if a.get("alpha", 1) != 1:
            return fn(other, alpha=a["alpha"])
        return fn(other)

    return call


def _reduce(name: str):
    def call(ts, a, inplace):
        dim = _tuple(a.get("dim"))
        fn = getattr(ts[0], name)
        if dim is None:
            return fn()
        return fn(dim=dim, keepdim=a.get("keepdim", False))

    return call


def _functional(name: str, *arg_names: str):
    def call(ts, a, inplace):
        kwargs = {n: _tuple(a[n]) for n in arg_names if n in a}
        return getattr(_F(), name)(*ts, **kwargs)

    return call


def _scale(ts, a, inplace):
    x = ts[0]
    return x.scale_(a["scale"]) if inplace else x.scale(a["scale"])


_UNARY_INPLACE = ("relu", "sigmoid", "tanh", "exp", "log", "sin", "cos", "abs", "neg", "sqrt")

_OPS: list[OpDef] = [
    *(
        OpDef(n, ("input",), _method(n), inplace=True, doc=f"elementwise {n}; {n}_ in place")
        for n in _UNARY_INPLACE
    ),
    OpDef(
        "scale",
        ("input",),
        _scale,
        args=(Arg("scale", float, doc="multiplier"),),
        inplace=True,
        doc="x * scale (Paddle's scale; mul by a scalar); scale_ in place",
    ),
    *(
        OpDef(
            n,
            ("input",),
            _binary(n),
            optional_inputs=("other",),
            inplace=True,
            args=(
                Arg("other", float | None, None, "a scalar second operand instead of a tensor"),
                *((Arg("alpha", float, 1, "multiplier of other"),) if n in ("add", "sub") else ()),
            ),
            doc=f"{n} of two tensors, or of a tensor and the scalar `other`",
        )
        for n in ("add", "sub", "mul", "div")
    ),
    OpDef("matmul", ("input", "other"), lambda ts, a, i: ts[0].matmul(ts[1]), doc="matrix product"),
    OpDef(
        "linear",
        ("input", "weight"),
        _functional("linear"),
        optional_inputs=("bias",),
        doc="input @ weight.T + bias",
    ),
    OpDef(
        "conv2d",
        ("input", "weight"),
        _functional("conv2d", "stride", "padding", "dilation", "groups"),
        optional_inputs=("bias",),
        args=(
            Arg("stride", IntOrPair, 1),
            Arg("padding", IntOrPair, 0),
            Arg("dilation", IntOrPair, 1),
            Arg("groups", int, 1),
        ),
        doc="2-D convolution (NCHW)",
    ),
    OpDef(
        "max_pool2d",
        ("input",),
        _functional("max_pool2d", "kernel_size", "stride", "padding"),
        args=(
            Arg("kernel_size", IntOrPair),
            Arg("stride", IntOrPair | None, None),
            Arg("padding", IntOrPair, 0),
        ),
        doc="2-D max pooling",
    ),
    OpDef(
        "adaptive_avg_pool2d",
        ("input",),
        _functional("adaptive_avg_pool2d", "output_size"),
        args=(Arg("output_size", IntOrPair),),
        doc="2-D adaptive average pooling",
    ),
    OpDef(
        "sum",
        ("input",),
        _reduce("sum"),
        args=(Arg("dim", Dims, None), Arg("keepdim", bool, False)),
        doc="sum over dims (all by default)",
    ),
    OpDef(
        "mean",
        ("input",),
        _reduce("mean"),
        args=(Arg("dim", Dims, None), Arg("keepdim", bool, False)),
        doc="mean over dims (all by default)",
    ),
    OpDef(
        "softmax",
        ("input",),
        _method("softmax", "dim"),
        args=(Arg("dim", int),),
        doc="softmax along dim",
    ),
    OpDef(
        "log_softmax",
        ("input",),
        _method("log_softmax", "dim"),
        args=(Arg("dim", int),),
        doc="log of softmax along dim",
    ),
    OpDef(
        "reshape",
        ("input",),
        lambda ts, a, i: ts[0].reshape(tuple(a["shape"])),
        args=(Arg("shape", list[int]),),
        doc="reshape (a view when possible)",
    ),
    OpDef(
        "view",
        ("input",),
        lambda ts, a, i: ts[0].view(tuple(a["shape"])),
        args=(Arg("shape", list[int]),),
        doc="a view with a new shape",
    ),
    OpDef(
        "transpose",
        ("input",),
        _method("transpose", "dim0", "dim1"),
        args=(Arg("dim0", int), Arg("dim1", int)),
        doc="swap two dims (a view)",
    ),
    OpDef(
        "permute",
        ("input",),
        lambda ts, a, i: ts[0].permute(*a["dims"]),
        args=(Arg("dims", list[int]),),
        doc="reorder dims (a view)",
    ),
    OpDef(
        "flatten",
        ("input",),
        lambda ts, a, i: ts[0].flatten(a.get("start_dim", 0), a.get("end_dim", -1)),
        args=(Arg("start_dim", int, 0), Arg("end_dim", int, -1)),
        doc="flatten a range of dims",
    ),
    OpDef("clone", ("input",), lambda ts, a, i: ts[0].clone(), doc="a copy with its own memory"),
    OpDef(
        "detach", ("input",), lambda ts, a, i: ts[0].detach(), doc="same memory, out of the graph"
    ),
    OpDef(
        "contiguous",
        ("input",),
        lambda ts, a, i: ts[0].contiguous(),
        doc="a contiguous copy if needed",
    ),
    OpDef(
        "mse_loss",
        ("input", "target"),
        _functional("mse_loss", "reduction"),
        args=(Arg("reduction", Reduction, "mean"),),
        doc="mean squared error",
    ),
    OpDef(
        "cross_entropy",
        ("input", "target"),
        _functional("cross_entropy", "reduction"),
        args=(Arg("reduction", Reduction, "mean"),),
        doc="cross entropy of logits and class indices",
    ),
]

OPS: dict[str, OpDef] = {op.name: op for op in _OPS}


# --- modules ----------------------------------------------------------------------------------

_MODULES: list[ModuleDef] = [
    ModuleDef(
        "Linear",
        (Arg("in_features", int), Arg("out_features", int), Arg("bias", bool, True)),
        doc="y = x @ W.T + b",
    ),
    ModuleDef(
        "Conv2d",
        (
            Arg("in_channels", int),
            Arg("out_channels", int),
            Arg("kernel_size", IntOrPair),
            Arg("stride", IntOrPair, 1),
            Arg("padding", IntOrPair, 0),
            Arg("dilation", IntOrPair, 1),
            Arg("groups", int, 1),
            Arg("bias", bool, True),
        ),
        doc="2-D convolution",
    ),
    ModuleDef(
        "BatchNorm2d",
        (
            Arg("num_features", int),
            Arg("eps", float, 1e-5),
            Arg("momentum", float, 0.1),
            Arg("affine", bool, True),
            Arg("track_running_stats", bool, True),
        ),
        doc="batch normalisation over N, H, W",
    ),
    ModuleDef(
        "ReLU", (Arg("inplace", bool, False),), doc="max(x, 0); inplace=True overwrites its input"
    ),
    ModuleDef("Sigmoid", (), doc="1 / (1 + exp(-x))"),
    ModuleDef("Tanh", (), doc="tanh(x)"),
    ModuleDef("Softmax", (Arg("dim", int | None, None),), doc="softmax along dim"),
    ModuleDef("Dropout", (Arg("p", float, 0.5), Arg("inplace", bool, False)), doc="random zeroing"),
    ModuleDef(
        "MaxPool2d",
        (
            Arg("kernel_size", IntOrPair),
            Arg("stride", IntOrPair | None, None),
            Arg("padding", IntOrPair, 0),
        ),
        doc="2-D max pooling",
    ),
    ModuleDef(
        "AdaptiveAvgPool2d", (Arg("output_size", IntOrPair),), doc="2-D adaptive average pooling"
    ),
    ModuleDef("Flatten", (Arg("start_dim", int, 1), Arg("end_dim", int, -1)), doc="flatten dims"),
    ModuleDef("Identity", (), doc="returns its input"),
    ModuleDef(
        "MSELoss",
        (Arg("reduction", Reduction, "mean"),),
        inputs=("input", "target"),
        doc="mean squared error",
    ),
    ModuleDef(
        "CrossEntropyLoss",
        (Arg("reduction", Reduction, "mean"),),
        inputs=("input", "target"),
        doc="cross entropy of logits and class indices",
    ),
    ModuleDef("Sequential", (), children=True, doc="the `layers` run one after another"),
]

MODULES: dict[str, ModuleDef] = {m.name: m for m in _MODULES}

OPTIMIZERS: dict[str, tuple[Arg, ...]] = {
    "SGD": (
        Arg("lr", float, 1e-3),
        Arg("momentum", float, 0.0),
        Arg("dampening", float, 0.0),
        Arg("weight_decay", float, 0.0),
        Arg("nesterov", bool, False),
    ),
    "Adam": (
        Arg("lr", float, 1e-3),
        Arg("betas", list[float], [0.9, 0.999]),
        Arg("eps", float, 1e-8),
        Arg("weight_decay", float, 0.0),
        Arg("amsgrad", bool, False),
    ),
    "AdamW": (
        Arg("lr", float, 1e-3),
        Arg("betas", list[float], [0.9, 0.999]),
        Arg("eps", float, 1e-8),
        Arg("weight_decay", float, 1e-2),
        Arg("amsgrad", bool, False),
    ),
}

INITS = ("rand", "randn", "zeros", "ones", "empty", "full", "arange", "randint")
DTYPES = ("float16", "float32", "float64", "uint8", "int32", "int64", "bool")


def module_kwargs(args: dict) -> dict:
    """Arguments as the engine constructor takes them (pairs as tuples)."""
    return {k: _tuple(v) for k, v in args.items()}


def suggest(name: str, choices) -> str:
    """' (did you mean 'relu'?)' when a close match exists, else ''."""
    import difflib

    close = difflib.get_close_matches(str(name), list(choices), n=1, cutoff=0.6)
    if not close:
        lowered = {c.lower(): c for c in choices}
        if str(name).lower() in lowered:
            close = [lowered[str(name).lower()]]
    return f" (did you mean {close[0]!r}?)" if close else ""


__all__ = [
    "Arg",
    "OpDef",
    "ModuleDef",
    "OPS",
    "MODULES",
    "OPTIMIZERS",
    "INITS",
    "DTYPES",
    "REQUIRED",
    "suggest",
    "module_kwargs",
]
