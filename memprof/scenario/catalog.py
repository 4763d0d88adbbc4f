"""The ops and nn modules a scenario may use: their tensor inputs, arguments, in-place form,
and how each is called on the engine. One table row per op or module.

The ops are the rows of the engine's op table (engine/ops/registry.py) that carry a scenario
spec: an op is added to scenarios where it is registered. The pydantic model (model.py) builds
its per-op and per-module argument types from these rows, so the JSON Schema offers each op's
arguments to editors, and the runner calls `OpDef.call`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, Literal, get_origin

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
    optional_inputs: tuple[str, ...] = ()  # tensors forward takes after `inputs` (masks)
    forward_args: tuple[ForwardArg, ...] = ()  # keyword arguments of forward (a node's `args`)
    module_args: tuple[str, ...] = ()  # constructor arguments that are nested module specs

    @property
    def min_inputs(self) -> int:
        return len(self.inputs)

    @property
    def max_inputs(self) -> int:
        return len(self.inputs) + len(self.optional_inputs)


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


# --- modules: engine.nn's layers, with the arguments of their constructors and forwards ------

# PyTorch's conventions for constructor arguments that the engine's signatures leave unannotated
# and without a default (torch annotates them as these types).
_ARG_TYPES: dict[str, Any] = {
    "kernel_size": IntOrPair,
    "stride": IntOrPair,
    "padding": IntOrPair,
    "dilation": IntOrPair,
    "output_padding": IntOrPair,
    "output_size": IntOrPair,
    "normalized_shape": int | list[int],
    "embed_dim": int,
    "num_heads": int,
    "d_model": int,
    "nhead": int,
    "num_layers": int,
    "num_groups": int,
    "num_channels": int,
    "kdim": int,
    "vdim": int,
    "eps": float,
    "max_norm": float,
    "divisor_override": int,
    "reduction": Reduction,
    "approximate": Literal["none", "tanh"],
    "activation": Literal["relu", "gelu"],
}
# Constructor arguments that hold a module (built from a nested module spec).
_MODULE_ARGS = ("encoder_layer", "decoder_layer", "norm")
# Constructor arguments a scenario does not set: the scenario's device and dtype apply, and a
# tensor argument (a loss's class weights) has no YAML spelling.
_SKIPPED_ARGS = ("self", "device", "dtype", "weight", "pos_weight")
_JSON_VALUE = int | float | bool | str | list[int] | list[float]


@dataclass(frozen=True)
class ForwardArg:
    """A keyword argument of a module's forward, set per call with a node's `args:`.

    tensor: the value is the name of a tensor of the program (attn_mask, key_padding_mask).
    """

    name: str
    type: Any
    default: Any = None
    tensor: bool = False


def _is_module_class(obj) -> bool:
    from engine.nn import Module

    return isinstance(obj, type) and issubclass(obj, Module) and obj is not Module


def _arg_type(name: str, param, hints: dict) -> Any:
    import inspect

    default = param.default
    if get_origin(hints.get(name)) is Literal:  # the module's own choices win
        return hints[name]
    if name in _ARG_TYPES:
        t = _ARG_TYPES[name]
        return t | None if default is None else t
    if name in hints:
        return _dataclass_arg(hints[name])
    if default is inspect.Parameter.empty or default is None:
        return _JSON_VALUE | None if default is None else _JSON_VALUE
    if isinstance(default, bool):
        return bool
    if isinstance(default, float):
        return float
    if isinstance(default, int):
        return int
    if isinstance(default, str):
        return str
    if isinstance(default, (tuple, list)):
        return list[int] | list[float]
    return _JSON_VALUE


# A dataclass argument's field typed `object` (LinearCrossEntropyOptions.acc_dtype): the scenario
# spelling of its values.
_DATACLASS_FIELD_TYPES: dict[str, Any] = {
    "acc_dtype": Literal["float16", "bfloat16", "float32", "float64"] | None,
}


def _dataclass_arg(hint: Any) -> Any:
    """A hint naming an options dataclass (`LinearCrossEntropyOptions | None`), as a closed mapping.

    pydantic's own handling of a stdlib dataclass takes only an instance in strict mode, and
    whether it closes the mapping differs between its releases; a model of the dataclass's fields
    (closed, strict) that becomes the dataclass after validation reads the same YAML everywhere,
    and the dataclass's own checks (__post_init__) answer for bad values.
    """
    import dataclasses
    import types
    import typing

    is_union = get_origin(hint) in (typing.Union, types.UnionType)
    members = typing.get_args(hint) if is_union else (hint,)
    converted = tuple(
        _dataclass_model(m) if isinstance(m, type) and dataclasses.is_dataclass(m) else m
        for m in members
    )
    if converted == members:
        return hint
    return typing.Union[converted] if is_union else converted[0]


@functools.cache
def _dataclass_model(cls: type) -> Any:
    import dataclasses
    import inspect

    from pydantic import AfterValidator, ConfigDict, Field, PlainSerializer, create_model

    hints = _hints(cls)
    fields: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        t = _DATACLASS_FIELD_TYPES.get(f.name, hints.get(f.name, _JSON_VALUE | None))
        if t is object:
            t = _JSON_VALUE | None
        fields[f.name] = (t, Field(f.default))
    model = create_model(
        cls.__name__,
        __config__=ConfigDict(extra="forbid", strict=True),
        __doc__=inspect.getdoc(cls),
        **fields,
    )

    def mapping(value) -> dict:  # the model's or the dataclass's fields
        return {name: getattr(value, name) for name in fields}

    # validated: the dataclass; dumped (reports): the mapping the scenario wrote
    return Annotated[
        model, AfterValidator(lambda value: cls(**mapping(value))), PlainSerializer(mapping)
    ]


def _hints(fn) -> dict:
    import typing

    try:
        return {k: v for k, v in typing.get_type_hints(fn).items() if k != "return"}
    except Exception:  # an annotation that cannot be evaluated here: infer from the default
        return {}


def _constructor_args(cls) -> tuple[tuple[Arg, ...], tuple[str, ...]]:
    """(the scenario arguments of cls.__init__, those that take a nested module spec)."""
    import inspect

    try:
        sig = inspect.signature(cls.__init__)
    except (TypeError, ValueError):
        return (), ()
    hints = _hints(cls.__init__)
    args, module_args = [], []
    for name, p in sig.parameters.items():
        if name in _SKIPPED_ARGS or name.startswith("_"):
            continue
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        default = REQUIRED if p.default is inspect.Parameter.empty else p.default
        if name in _MODULE_ARGS:
            module_args.append(name)
            args.append(Arg(name, "ModuleSpec", default))
            continue
        args.append(Arg(name, _arg_type(name, p, hints), default))
    return tuple(args), tuple(module_args)


def _forward_args(cls) -> tuple[tuple[str, ...], tuple[str, ...], tuple[ForwardArg, ...]]:
    """(required tensor inputs, optional tensor inputs, keyword arguments) of cls.forward.

    Parameters without a default are tensor inputs; a parameter defaulting to None is an optional
    tensor (a mask) unless its name says it is a flag (is_causal, need_weights); the others are
    keyword arguments typed by their default.
    """
    import inspect

    sig = inspect.signature(cls.forward)
    hints = _hints(cls.forward)
    inputs, optional, kwargs = [], [], []
    for name, p in list(sig.parameters.items())[1:]:
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        if p.default is inspect.Parameter.empty:
            inputs.append(name)
        elif p.default is None and not name.startswith(("is_", "need_")):
            optional.append(name)
            kwargs.append(ForwardArg(name, str | None, None, tensor=True))
        else:
            t = bool | None if p.default is None else _arg_type(name, p, hints)
            kwargs.append(ForwardArg(name, t, p.default))
    return tuple(inputs), tuple(optional), tuple(kwargs)


def _summary(cls) -> str:
    doc = (cls.__doc__ or "").strip()
    if not doc:
        return f"nn.{cls.__name__}, as PyTorch's"
    first = doc.split("\n\n")[0].replace("\n", " ")
    return " ".join(first.split())


def _module_def(name: str, cls) -> ModuleDef:
    if name == "Sequential":  # its modules are the spec's `layers`
        return ModuleDef(name, (), build=None, doc=_summary(cls), children=True)
    args, module_args = _constructor_args(cls)
    inputs, optional, kwargs = _forward_args(cls)
    return ModuleDef(
        name,
        args,
        inputs=inputs,
        optional_inputs=optional,
        forward_args=kwargs,
        module_args=module_args,
        doc=_summary(cls),
    )


def _modules() -> dict[str, ModuleDef]:
    """Every layer engine.nn exports that a program can call (containers without a forward of
    their own, such as ModuleList, are not node types)."""
    import engine.nn as nn

    out = {}
    for name in nn.__all__:
        cls = getattr(nn, name, None)
        if not _is_module_class(cls) or cls.forward is nn.Module.forward:
            continue
        out[name] = _module_def(name, cls)
    return out


MODULES: dict[str, ModuleDef] = _modules()


def _optimizer_args(cls) -> tuple[Arg, ...]:
    """The scenario arguments of an optimizer: its constructor's, after `params` (a default
    that is a tuple, like Adam's betas, is a list of floats), but for the flags the engine
    accepts only as False (capturable, differentiable: not modelled)."""
    import inspect

    out = []
    hints = _hints(cls.__init__)
    for name, p in inspect.signature(cls.__init__).parameters.items():
        if name in ("self", "params", "capturable", "differentiable") or p.kind in (
            p.VAR_POSITIONAL,
            p.VAR_KEYWORD,
        ):
            continue
        default = REQUIRED if p.default is inspect.Parameter.empty else p.default
        if isinstance(default, tuple):
            out.append(Arg(name, list[float], list(default)))
        else:
            out.append(Arg(name, _arg_type(name, p, hints), default))
    return tuple(out)


def _optimizers() -> dict[str, tuple[Arg, ...]]:
    """Every optimizer engine.optim exports, from one table (engine.optim.__all__): a new
    optimizer there is an `optimizer: {type: ...}` of scenarios without more code here."""
    import engine.optim as optim

    out = {}
    for name in optim.__all__:
        cls = getattr(optim, name)
        if (
            isinstance(cls, type)
            and issubclass(cls, optim.Optimizer)
            and cls is not optim.Optimizer
        ):
            out[name] = _optimizer_args(cls)
    return out


OPTIMIZERS: dict[str, tuple[Arg, ...]] = _optimizers()

INITS = ("rand", "randn", "zeros", "ones", "empty", "full", "arange", "randint")
DTYPES = ("float16", "bfloat16", "float32", "float64", "uint8", "int32", "int64", "bool")


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


def nearest(name: str, choices, n: int = 4) -> list[str]:
    """The names of `choices` closest to `name`, best first: spelling first, then names that
    contain it or that it contains (`attention` -> scaled_dot_product_attention)."""
    import difflib

    choices = list(choices)
    text = str(name).lower()
    by_lower = {c.lower(): c for c in choices}
    out = []
    if len(text) >= 3:  # names that contain it, or that it contains
        out = [c for c in choices if text in c.lower() or (c.lower() in text and len(c) >= 3)]
        out.sort(key=lambda c: -difflib.SequenceMatcher(None, text, c.lower()).ratio())
    close = difflib.get_close_matches(text, list(by_lower), n=n, cutoff=0.6)
    out += [by_lower[c] for c in close if by_lower[c] not in out]
    return out[:n]


def did_you_mean(name: str, choices) -> str:
    """' (did you mean 'relu' or 'relu6'?)' with the nearest names of `choices`, else ''."""
    close = [repr(c) for c in nearest(name, choices)]
    if not close:
        return ""
    names = close[0] if len(close) == 1 else f"{', '.join(close[:-1])} or {close[-1]}"
    return f" (did you mean {names}?)"


# --- the docs tables (docs/scenarios.md), generated from the catalog ----------------------------

_TABLE_MARK = "<!-- generated by `python -m memprof.scenario.catalog`: {} -->"


def _default_text(arg) -> str:
    if arg.default is REQUIRED:
        return arg.name
    return f"{arg.name}={arg.default!r}"


def op_table() -> str:
    """The markdown table of the scenario ops (one row per op of the engine's op table)."""
    rows = [
        "| op | tensor inputs ([optional]) | args (default) | in place | what |",
        "|---|---|---|---|---|",
    ]
    for o in OPS.values():
        ins = ", ".join([*o.inputs, *(f"[{i}]" for i in o.optional_inputs)])
        if o.variadic:
            ins = f"{ins}, ... (one or more)" if ins else "tensors, ... (one or more)"
        args = ", ".join(_default_text(a) for a in o.args) or "-"
        rows.append(
            f"| `{o.name}` | {ins or '-'} | {args} | {'yes' if o.inplace else '-'} | {o.doc} |"
        )
    return "\n".join(rows)


def module_table() -> str:
    """The markdown table of the scenario module types (one row per layer of engine.nn)."""
    rows = [
        "| type | arguments (default) | inputs ([optional]) | forward `args` | what |",
        "|---|---|---|---|---|",
    ]
    for m in MODULES.values():
        if m.children:
            args = "layers (a list of module specs)"
        else:
            args = ", ".join(
                f"{a.name} (a module spec)" if a.name in m.module_args else _default_text(a)
                for a in m.args
            )
        ins = ", ".join([*m.inputs, *(f"[{i}]" for i in m.optional_inputs)])
        fargs = ", ".join(
            f"{a.name} (a tensor name)" if a.tensor else f"{a.name}={a.default!r}"
            for a in m.forward_args
            if a.name not in m.optional_inputs or a.tensor
        )
        doc = m.doc.replace("|", "\\|")
        rows.append(f"| `{m.name}` | {args or '-'} | {ins} | {fargs or '-'} | {doc} |")
    return "\n".join(rows)


def docs_with_tables(text: str) -> str:
    """docs/scenarios.md with its generated tables replaced by the catalog's."""
    for what, table in (("modules", module_table()), ("ops", op_table())):
        mark = _TABLE_MARK.format(what)
        start = text.index(mark) + len(mark)
        end = text.index("\n\n", start + 1)
        text = text[:start] + "\n" + table + text[end:]
    return text


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
    "nearest",
    "did_you_mean",
    "module_kwargs",
    "ForwardArg",
]


if __name__ == "__main__":  # regenerate the tables of docs/scenarios.md
    from pathlib import Path

    docs = Path(__file__).resolve().parents[2] / "docs" / "scenarios.md"
    docs.write_text(docs_with_tables(docs.read_text()))
    print(docs)
