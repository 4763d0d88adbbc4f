"""The ops and nn modules a scenario may use: their tensor inputs, arguments, in-place form,
and how each is called on the engine. One table row per op or module.

The ops are the rows of the engine's op table (engine/ops/registry.py) that carry a scenario
spec: an op is added to scenarios where it is registered. The pydantic model (model.py) builds
its per-op and per-module argument types from these rows, so the JSON Schema offers each op's
arguments to editors, and the runner calls `OpDef.call`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from engine.ops.registry import Dims, IntOrPair, Reduction  # noqa: F401 - argument types

REQUIRED: Any = ...  # marks an argument without a default


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


# --- ops: the rows of the engine's op table that a scenario may call -----------------------


def _tuple(v):
    return tuple(v) if isinstance(v, list) else v


def _op_def(row) -> OpDef:
    s = row.scenario
    return OpDef(
        row.name,
        s.inputs,
        row.run,
        args=tuple(Arg(*a) for a in s.args),
        optional_inputs=s.optional_inputs,
        variadic=s.variadic,
        inplace=row.inplace is not None,
        doc=s.doc,
    )


def _ops() -> dict[str, OpDef]:
    from engine.ops import registry

    return {row.name: _op_def(row) for row in registry.scenario_ops()}


OPS: dict[str, OpDef] = _ops()


# --- modules ----------------------------------------------------------------------------------


def _activation_modules() -> list[ModuleDef]:
    """engine.nn's activations (issue 10), with PyTorch's arguments; in place each one is free or
    pays a clone of its input exactly as PyTorch's (engine/ops/activations.py)."""
    clone = "in place it pays a clone of its input (backward keeps the input)"
    free = "in place it is free (backward keeps the result)"
    inplace = Arg("inplace", bool, False)
    return [
        ModuleDef("SiLU", (inplace,), doc=f"x * sigmoid(x); {clone}"),
        ModuleDef("Mish", (inplace,), doc=f"x * tanh(softplus(x)); {clone}"),
        ModuleDef("Hardswish", (inplace,), doc=f"x * relu6(x + 3) / 6; {clone}"),
        ModuleDef("Hardsigmoid", (inplace,), doc=f"relu6(x + 3) / 6; {clone}"),
        ModuleDef("ReLU6", (inplace,), doc=f"min(max(x, 0), 6); {clone}"),
        ModuleDef(
            "Hardtanh",
            (Arg("min_val", float, -1.0), Arg("max_val", float, 1.0), inplace),
            doc=f"clamp(x, min_val, max_val); {clone}",
        ),
        ModuleDef(
            "Threshold",
            (Arg("threshold", float), Arg("value", float), inplace),
            doc=f"x where x > threshold else value; {clone}",
        ),
        ModuleDef(
            "LeakyReLU",
            (Arg("negative_slope", float, 0.01), inplace),
            doc=f"x, or negative_slope * x below 0; {free}",
        ),
        ModuleDef("ELU", (Arg("alpha", float, 1.0), inplace), doc=f"exponential linear; {free}"),
        ModuleDef("CELU", (Arg("alpha", float, 1.0), inplace), doc=f"continuous ELU; {free}"),
        ModuleDef("SELU", (inplace,), doc=f"scaled ELU; {free}"),
        ModuleDef(
            "Softplus",
            (Arg("beta", float, 1.0), Arg("threshold", float, 20.0)),
            doc="log(1 + exp(beta x)) / beta; no in-place form",
        ),
    ]


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
    *_activation_modules(),
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
