"""The scenario format: these pydantic models are its single source.

`memprof schema` prints `scenario_json_schema()`; the shipped copy lives in
memprof/schemas/scenario.schema.json (a test keeps the two equal). Per-op and per-module
argument types are built from the catalog, so editors complete `args:` for each op.

Any value may be written `$name` and is replaced by the variant parameter `name`
(variants.py); the JSON Schema accepts such references everywhere a value goes.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal, Union

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    WithJsonSchema,
    create_model,
    model_validator,
)

from memprof.reports.vocab import Category
from memprof.scenario.catalog import DTYPES, INITS, MODULES, OPS, OPTIMIZERS, REQUIRED, Arg
from memprof.units import parse_size

NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*$"
MAX_SEED = 2**64 - 1
MAX_ITERATIONS = 10_000
VARIANT_NAME_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9_.,=+-]*$"
SCENARIO_NAME_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$"
OBSERVED_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*(\.grad)?$"
PARAM_REF_RE = re.compile(r"^\$([A-Za-z_][A-Za-z0-9_]*)$")
SIZE_PATTERN = r"^\s*([0-9]+(\.[0-9]*)?|\.[0-9]+)\s*([kKmMgGtT]([iI]?[bB])?|[bB])?\s*$"
CHECK_PATTERN = (
    r"^\s*(==|<=|>=|<|>)?\s*([0-9]+(\.[0-9]*)?|\.[0-9]+)\s*([kKmMgGtT]([iI]?[bB])?|[bB])?\s*$"
)

Name = Annotated[str, Field(pattern=NAME_PATTERN)]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, populate_by_name=True, defer_build=True)


# --- sizes ------------------------------------------------------------------------------------


def _to_size(value: Any) -> Any:
    if isinstance(value, (str, int, float)) and not isinstance(value, bool):
        return parse_size(value)
    return value


Size = Annotated[
    int,
    BeforeValidator(_to_size),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "integer", "minimum": 0},
                {"type": "string", "pattern": SIZE_PATTERN},
            ],
            "description": "bytes: a plain integer or a size such as 64 MiB, 1.5 GiB, 512 KiB, 2 GB",
        }
    ),
]

_CHECK_RE = re.compile(r"^\s*(==|<=|>=|<|>)?\s*(.*)$")


def parse_check(value: Any) -> tuple[str, int]:
    """``"<= 64 MiB"`` -> ``("<=", 67108864)``; a bare size or integer means ``==``."""
    if (
        isinstance(value, (list, tuple))
        and len(value) == 2
        and value[0] in ("==", "<=", ">=", "<", ">")
    ):
        return value[0], parse_size(value[1])
    if isinstance(value, str):
        m = _CHECK_RE.match(value)
        op = m.group(1) or "=="
        try:
            return op, parse_size(m.group(2))
        except ValueError:
            raise ValueError(
                f"expected a size with an optional comparison such as '64 MiB', '<= 1.5 GiB' "
                f"or '>= 1000', found {value!r}"
            ) from None
    return "==", parse_size(value)


SizeCheck = Annotated[
    tuple[str, int],
    BeforeValidator(parse_check),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "integer", "minimum": 0},
                {"type": "string", "pattern": CHECK_PATTERN},
            ],
            "description": "a size, compared with == unless it starts with <=, >=, < or >: "
            "'64 MiB', '<= 1.5 GiB', 67108864",
        }
    ),
]


def _one_or_many(value: Any) -> Any:
    return [value] if isinstance(value, str) else value


NameList = Annotated[
    list[Name],
    BeforeValidator(_one_or_many),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "string", "pattern": NAME_PATTERN},
                {"type": "array", "items": {"type": "string", "pattern": NAME_PATTERN}},
            ],
        }
    ),
]

# a tensor a node reads: a name of the program, or a module's parameter (`wte.weight`: a tied head)
TENSOR_REF_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z0-9_]+)*$"
TensorRef = Annotated[str, Field(pattern=TENSOR_REF_PATTERN)]
TensorRefList = Annotated[
    list[TensorRef],
    BeforeValidator(_one_or_many),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "string", "pattern": TENSOR_REF_PATTERN},
                {"type": "array", "items": {"type": "string", "pattern": TENSOR_REF_PATTERN}},
            ],
        }
    ),
]


# --- inputs -----------------------------------------------------------------------------------


class InputSpec(Strict):
    """A tensor the program starts from, created before the program runs (category `input`)."""

    shape: list[Annotated[int, Field(ge=0)]] = Field(description="e.g. [1, 64, 512, 512]")
    dtype: Literal[DTYPES] | None = Field(None, description="defaults to the scenario's dtype")
    init: Literal[INITS] = Field("randn", description="how the values are made")
    value: float | None = Field(None, description="the fill value for init: full")
    high: int | None = Field(
        None, description="exclusive upper bound for init: randint (class labels)"
    )
    requires_grad: bool = False

    @model_validator(mode="after")
    def _init_arguments(self):
        if self.init == "full" and self.value is None:
            raise ValueError("expected a `value` with init: full, found none")
        if self.init == "randint" and self.high is None:
            raise ValueError(
                "expected `high` (the exclusive upper bound) with init: randint, found none"
            )
        return self


# --- modules ----------------------------------------------------------------------------------


def _field_for(arg: Arg):
    default = ... if arg.default is REQUIRED else arg.default
    return (arg.type, Field(default, description=arg.doc or None))


def _module_model(mdef) -> type[BaseModel]:
    fields: dict[str, Any] = {"type": (Literal[mdef.name], ...)}
    for arg in mdef.args:
        if arg.name in mdef.module_args:  # a nested module spec (TransformerEncoder's layer)
            optional = arg.default is None
            fields[arg.name] = (
                "ModuleSpec | None" if optional else "ModuleSpec",
                Field(None if optional else ..., description="a module spec: {type: ..., ...}"),
            )
            continue
        fields[arg.name] = _field_for(arg)
    if mdef.children:
        fields["layers"] = (list["ModuleSpec"], Field(..., min_length=1))
    return create_model(
        f"{mdef.name}Spec", __base__=Strict, __doc__=f"nn.{mdef.name}: {mdef.doc}", **fields
    )


_MODULE_MODELS = {name: _module_model(m) for name, m in MODULES.items()}
ModuleSpec = Annotated[Union[tuple(_MODULE_MODELS.values())], Field(discriminator="type")]
for _name, _m in _MODULE_MODELS.items():
    if MODULES[_name].children or MODULES[_name].module_args:  # specs nested in the union
        _m.model_rebuild(_types_namespace={"ModuleSpec": ModuleSpec})


# --- program nodes ----------------------------------------------------------------------------


def _flat_names(out: list) -> list[str]:
    """The names of an `out` list, nested lists flattened in order."""
    return [n for item in out for n in (item if isinstance(item, list) else [item])]


class NodeBase(Strict):
    id: Name = Field(description="the node's name, used in reports and warnings")
    inputs: TensorRefList = Field(
        default_factory=list,
        alias="in",
        description="tensor names read by the node, in order; MODULE.PARAM reads a parameter",
    )
    out: (
        Name
        | Annotated[list[Name | Annotated[list[Name], Field(min_length=1)]], Field(min_length=1)]
        | None
    ) = Field(
        None,
        description="the name bound to the result (default: the node id); a list binds the "
        "values of a tuple result in order (`out: [y, weights]`), a list inside it a nested "
        "tuple (an LSTM's `out: [y, [h, c]]`), `_` drops one",
    )

    @property
    def out_name(self) -> str:
        """The name of a single result (the first name of a list)."""
        if isinstance(self.out, list):
            return _flat_names(self.out)[0]
        return self.out or self.id

    @property
    def out_names(self) -> list[str]:
        """Every name the node binds (`_` in a list binds nothing)."""
        if isinstance(self.out, list):
            return [n for n in _flat_names(self.out) if n != "_"]
        return [self.out or self.id]


class ModuleCall(NodeBase):
    """Calls a module declared under `modules:`."""

    module: Name
    args: dict[Name, Any] = Field(
        default_factory=dict,
        description="keyword arguments of the module's forward (need_weights: false, "
        "is_causal: true); a mask argument takes a tensor name",
    )


def _op_node_model(opdef) -> type[BaseModel]:
    arg_fields = {a.name: _field_for(a) for a in opdef.args}
    args_model = create_model(f"{opdef.name}_args", __base__=Strict, **arg_fields)
    required = any(a.default is REQUIRED for a in opdef.args)
    fields: dict[str, Any] = {
        "op": (Literal[opdef.name], ...),
        "args": (args_model, ... if required else Field(default_factory=args_model)),
    }
    if opdef.inplace:
        fields["inplace"] = (bool, Field(False, description=f"call {opdef.name}_ (in place)"))
    return create_model(
        f"op_{opdef.name}", __base__=NodeBase, __doc__=f"{opdef.name}: {opdef.doc}", **fields
    )


_OP_MODELS = {name: _op_node_model(o) for name, o in OPS.items()}


def _node_tag(value: Any) -> str | None:
    if isinstance(value, dict):
        if "op" in value:
            return f"op={value['op']}"
        if "module" in value:
            return "module call"
        return None
    if isinstance(value, BaseModel):
        return f"op={value.op}" if hasattr(value, "op") else "module call"
    return None


Node = Annotated[
    Union[
        tuple(Annotated[m, Tag(f"op={n}")] for n, m in _OP_MODELS.items())
        + (Annotated[ModuleCall, Tag("module call")],)
    ],
    Discriminator(_node_tag),
]


# --- phases -----------------------------------------------------------------------------------


def _optimizer_model(name: str, args: tuple[Arg, ...]) -> type[BaseModel]:
    fields: dict[str, Any] = {"type": (Literal[name], ...)}
    for arg in args:
        fields[arg.name] = _field_for(arg)
    fields["params"] = (
        list[Name] | None,
        Field(None, description="modules whose parameters it updates (default: every module)"),
    )
    fields["zero_grad"] = (
        bool,
        Field(True, description="zero_grad(set_to_none=True) right after each step"),
    )
    fields["in_backward"] = (
        bool,
        Field(
            False,
            description=(
                "PyTorch's optimizer step in backward: one optimizer per parameter, stepped "
                "(and zeroed) in the parameter's post-accumulate-grad hook as soon as its "
                "gradient is ready, so each gradient is freed during backward; the optimizer "
                "phase itself then runs nothing"
            ),
        ),
    )
    return create_model(f"{name}Spec", __base__=Strict, __doc__=f"optim.{name}", **fields)


OptimizerSpec = Annotated[
    Union[tuple(_optimizer_model(n, a) for n, a in OPTIMIZERS.items())],
    Field(discriminator="type"),
]


class BackwardPhase(Strict):
    """`{backward: loss}`: loss.backward() on a scalar tensor of the program."""

    backward: Name
    retain_graph: bool = False


class OptimizerPhase(Strict):
    """`{optimizer: {type: SGD, lr: 0.1}}`: one optimizer step (the optimizer is made once)."""

    optimizer: OptimizerSpec


def _phase_tag(value: Any) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        for key in ("backward", "optimizer"):
            if key in value:
                return f"{key} phase"
    if isinstance(value, BaseModel):
        return "backward phase" if isinstance(value, BackwardPhase) else "optimizer phase"
    return None


Phase = Annotated[
    Union[
        Annotated[Literal["forward"], Tag("forward")],
        Annotated[BackwardPhase, Tag("backward phase")],
        Annotated[OptimizerPhase, Tag("optimizer phase")],
    ],
    Discriminator(_phase_tag),
]


# --- expectations -----------------------------------------------------------------------------


class ErrorExpectation(Strict):
    """The variant must fail with this exception type, its message containing `message`."""

    type: str = Field(description="exception class name, e.g. RuntimeError, OutOfMemoryError")
    message: str | None = Field(None, description="a substring of the error message")


class Expectation(Strict):
    """What a variant must measure. Sizes compare with == unless written '<= 64 MiB' etc."""

    status: Literal["ok", "error", "oom"] | None = None
    peak_allocated: SizeCheck | None = None
    peak_reserved: SizeCheck | None = None
    final_allocated: SizeCheck | None = None
    baseline: SizeCheck | None = Field(None, description="inputs and parameters before the program")
    peak_over_baseline: SizeCheck | None = Field(
        None, description="peak allocated minus the baseline: what the program added"
    )
    peak_by_category: dict[Category, SizeCheck] | None = Field(
        None, description="bytes of each category live at the peak, e.g. {gradient: 2 MiB}"
    )
    error: ErrorExpectation | None = None
    values: (
        dict[
            Annotated[str, Field(pattern=OBSERVED_PATTERN)],
            Annotated[float, Field(allow_inf_nan=False)],
        ]
        | None
    ) = Field(None, description="every element of the tensor (or NAME.grad) equals this number")
    warnings: dict[Literal["stale_read", "inplace_clone"], Annotated[int, Field(ge=0)]] | None = (
        Field(None, description="how many warnings of each kind the variant reports")
    )
    inplace: dict[Name, Literal["free", "clone"]] | None = Field(
        None,
        description="per node: whether its in-place call was free or paid a clone for backward",
    )


# --- training levers: activation checkpointing and mixed precision ----------------------------

REGION_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*(\.\.[A-Za-z_][A-Za-z0-9_]*)?$"
Region = Annotated[
    str,
    Field(
        pattern=REGION_PATTERN,
        description="a module name (each call of it is checkpointed) or a node range FIRST..LAST",
    ),
]


class CheckpointSpec(Strict):
    """Activation checkpointing: each region runs under engine.utils.checkpoint.checkpoint
    (non-reentrant, PyTorch's recommended form): its activations are dropped after forward and
    recomputed in backward."""

    regions: list[Region] = Field(
        default_factory=list, description="module names and node ranges FIRST..LAST"
    )
    enabled: bool = Field(True, description="false runs the regions normally (for a matrix)")

    @property
    def active(self) -> list[str]:
        return list(self.regions) if self.enabled else []


def _checkpoint_shorthand(value: Any) -> Any:
    if isinstance(value, str) and not PARAM_REF_RE.match(value):
        value = [value]
    if isinstance(value, list):
        return {"regions": value}
    return value


class AutocastSpec(Strict):
    """Mixed precision: the forward program runs under engine.autocast (PyTorch's casting lists
    and cast cache; meta follows CUDA's lists); backward and the optimizer run outside it."""

    dtype: Literal["float16", "bfloat16", "float32"] | None = Field(
        None,
        description="the lower precision (default: the device's, float16 on cuda and meta, "
        "bfloat16 on cpu); float32 turns autocast off, for a matrix over precisions",
    )
    enabled: bool = True

    @property
    def active(self) -> bool:
        return self.enabled and self.dtype != "float32"


# --- the scenario -----------------------------------------------------------------------------

ParamValue = Any


class Scenario(Strict):
    """A memprof scenario: a tensor program, the variants to run it in, and what to expect."""

    name: Annotated[str, Field(pattern=SCENARIO_NAME_PATTERN)]
    description: str = ""
    device: Literal["cpu", "cuda", "meta", "auto"] = "cpu"
    dtype: Literal[DTYPES] = "float32"
    seed: Annotated[int, Field(ge=0, le=MAX_SEED)] = Field(
        0, description="the random seed (0 to 2**64 - 1, as numpy and torch take it)"
    )
    allocator: Literal["exact", "caching"] = Field(
        "exact", description="exact: bytes as requested; caching: PyTorch's CUDA caching allocator"
    )
    memory_limit: Size | None = Field(None, description="allocations past this raise out-of-memory")
    strict: bool = Field(False, description="a stale read after an in-place write is an error")
    inputs: dict[Name, InputSpec] = Field(default_factory=dict)
    modules: dict[Name, ModuleSpec] = Field(default_factory=dict)
    program: list[Node] = Field(..., min_length=1)
    phases: list[Phase] = Field(default_factory=lambda: ["forward"])
    iterations: Annotated[int, Field(ge=1, le=MAX_ITERATIONS)] = 1
    variants: (
        dict[Annotated[str, Field(pattern=VARIANT_NAME_PATTERN)], dict[Name, ParamValue]] | None
    ) = Field(None, description="named variants: each maps parameter names to values")
    matrix: dict[Name, Annotated[list[ParamValue], Field(min_length=1)]] | None = Field(
        None, description="every combination of these parameter values is a variant"
    )
    checkpoint: Annotated[CheckpointSpec | None, BeforeValidator(_checkpoint_shorthand)] = Field(
        None,
        description="activation checkpointing: a list of module names and node ranges "
        "FIRST..LAST, or {regions: [...], enabled: $ckpt}",
    )
    autocast: AutocastSpec | None = Field(
        None, description="mixed precision for the forward program: {dtype: bfloat16}"
    )
    baseline: str | None = Field(None, description="the variant others are compared against")
    expect: dict[str, Expectation] = Field(
        default_factory=dict, description="per variant name ('*' for all): what it must measure"
    )


def scenario_json_schema() -> dict:
    """The JSON Schema of the scenario format, accepting `$param` references for values."""
    schema = Scenario.model_json_schema(by_alias=True)
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = "https://memprof.dev/schemas/scenario.schema.json"
    schema.setdefault("$defs", {})["ParamRef"] = {
        "type": "string",
        "pattern": r"^\$[A-Za-z_][A-Za-z0-9_]*$",
        "description": "a variant parameter, replaced by its value in each variant",
    }
    _allow_refs(schema, top=True)
    for name, sub in schema["$defs"].items():
        if name != "ParamRef":
            _allow_refs(sub)
    return schema


_REF = {"$ref": "#/$defs/ParamRef"}


def _allow_refs(node: dict, top: bool = False) -> None:
    """Let every property value and array item also be a `$param` string."""
    props = node.get("properties", {})
    for key, sub in list(props.items()):
        if top and key in ("variants", "matrix"):
            continue
        _allow_refs_inner(sub)
        props[key] = _with_ref(sub)
    if isinstance(node.get("additionalProperties"), dict):
        _allow_refs_inner(node["additionalProperties"])
        node["additionalProperties"] = _with_ref(node["additionalProperties"])


def _allow_refs_inner(sub: dict) -> None:
    for key in ("anyOf", "oneOf"):
        for alt in sub.get(key, []):
            _allow_refs_inner(alt)
    if isinstance(sub.get("items"), dict):
        _allow_refs_inner(sub["items"])
        sub["items"] = _with_ref(sub["items"])
    if isinstance(sub.get("additionalProperties"), dict):
        _allow_refs_inner(sub["additionalProperties"])
        sub["additionalProperties"] = _with_ref(sub["additionalProperties"])
    if "properties" in sub:
        _allow_refs(sub)


def _with_ref(sub: dict) -> dict:
    if sub == _REF or sub.get("const") is not None:
        return sub
    alts = sub.get("anyOf")
    if alts is not None and _REF in alts:
        return sub
    meta = {k: sub[k] for k in ("title", "description", "default") if k in sub}
    body = {k: v for k, v in sub.items() if k not in meta}
    if set(body) == {"anyOf"}:
        return {**meta, "anyOf": [*body["anyOf"], _REF]}
    return {**meta, "anyOf": [body, _REF]}
