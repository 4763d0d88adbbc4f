"""Turn pydantic's validation errors into `file:line:col: expected ..., found ...` problems."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ValidationError

from memprof.scenario import model as m
from memprof.scenario.catalog import MODULES, OPS, OPTIMIZERS, did_you_mean, nearest, suggest
from memprof.scenario.loader import Document, Problem

_MISSING = object()

# What each name pattern of the model allows, in words (the schema's own rule, stated once).
PATTERN_RULES = {
    m.NAME_PATTERN: "a name of letters, digits and _ (not starting with a digit)",
    m.SCENARIO_NAME_PATTERN: "a name of letters, digits, _, - and . (not starting with - or .)",
    m.VARIANT_NAME_PATTERN: "a variant name of letters, digits and _ . , = + -",
    m.OBSERVED_PATTERN: "a tensor name, or NAME.grad",
    m.TENSOR_REF_PATTERN: "a tensor name, or MODULE.PARAM (a module's parameter)",
}


def found(value: Any) -> str:
    """How a found value reads in a message: YAML spelling, short."""
    if value is None:
        return "nothing (null)"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "a mapping" if value else "an empty mapping"
    if isinstance(value, list):
        return "a list" if value else "an empty list"
    if isinstance(value, str):
        text = value if len(value) <= 50 else value[:47] + "..."
        return repr(text)
    return str(value)


def _resolve(loc: tuple, data: Any) -> tuple[tuple, list]:
    """The data path `loc` points at (union tags dropped) and the loc elements left unresolved."""
    path: list = []
    cur = data
    rest = list(loc)
    while rest:
        elem = rest[0]
        if elem == "[key]":
            break
        if isinstance(cur, dict) and elem in cur:
            cur = cur[elem]
        elif isinstance(cur, list) and isinstance(elem, int) and 0 <= elem < len(cur):
            cur = cur[elem]
        elif len(rest) > 1:  # a union tag such as 'op=relu' or 'Conv2d': not part of the data
            rest.pop(0)
            continue
        else:
            break
        path.append(elem)
        rest.pop(0)
    return tuple(path), rest


def _get(data: Any, path: tuple) -> Any:
    cur = data
    for p in path:
        try:
            cur = cur[p]
        except (KeyError, IndexError, TypeError):
            return _MISSING
    return cur


def _model_at(path: tuple, data: Any) -> type[BaseModel] | None:
    """Which model describes the mapping at `path` (for listing the fields it accepts)."""
    value = _get(data, path)
    if not isinstance(value, dict):
        return None
    if path == ():
        return m.Scenario
    head = path[0]
    if head == "inputs" and len(path) == 2:
        return m.InputSpec
    if head == "modules" and len(path) >= 2 and (len(path) - 2) % 2 == 0:
        return m._MODULE_MODELS.get(value.get("type"))
    if head == "program" and len(path) == 2:
        if "op" in value:
            return m._OP_MODELS.get(value["op"])
        return m.ModuleCall
    if head == "program" and len(path) == 3 and path[2] == "args":
        op_model = m._OP_MODELS.get(_get(data, path[:2]).get("op"))
        return op_model.model_fields["args"].annotation if op_model else None
    if head == "phases" and len(path) == 2:
        return m.BackwardPhase if "backward" in value else m.OptimizerPhase
    if head == "phases" and len(path) == 3 and path[2] == "optimizer":
        for model in m.OptimizerSpec.__args__[0].__args__:
            if model.model_fields["type"].annotation.__args__[0] == value.get("type"):
                return model
        return None
    if head == "expect" and len(path) == 2:
        return m.Expectation
    if head == "expect" and len(path) == 3 and path[2] == "error":
        return m.ErrorExpectation
    return None


def _field_names(model: type[BaseModel]) -> list[str]:
    return [f.alias or name for name, f in model.model_fields.items()]


def _what(path: tuple, data: Any = None) -> str:
    """A short description of the thing at `path`, for messages."""
    if not path:
        return "the scenario"
    if path[0] == "inputs" and len(path) >= 2:
        return f"input {path[1]!r}"
    if path[0] == "modules" and len(path) >= 2:
        return f"module {path[1]!r}"
    if path[0] == "program" and len(path) >= 2:
        node = _get(data, path[:2])
        if isinstance(node, dict) and isinstance(node.get("id"), str):
            return f"node {node['id']!r}"
        return f"node {path[1] + 1} of the program"
    if path[0] == "phases" and len(path) >= 2:
        return f"phase {path[1] + 1}"
    if path[0] == "expect" and len(path) >= 2:
        return f"the expectations of {path[1]!r}"
    return f"`{path[0]}`"


def pydantic_problems(doc: Document, data: Any, exc: ValidationError) -> list[Problem]:
    """One problem per pydantic error, at the position of the value (or key) it is about."""
    problems = []
    for err in exc.errors(include_url=False):
        problems.append(_one(doc, data, err))
    return problems


def _one(doc: Document, data: Any, err: dict) -> Problem:
    loc, kind, value = tuple(err["loc"]), err["type"], err.get("input")
    ctx = err.get("ctx") or {}
    path, rest = _resolve(loc, data)

    if rest and rest[0] == "[key]":
        return doc.problem(
            path,
            f"expected a name of letters, digits and _ (not starting with a digit), "
            f"found {found(path[-1])}",
            key=True,
        )
    if kind == "missing":
        name = rest[-1] if rest else loc[-1]
        return doc.problem(
            path, f"expected field {name!r} in {_what(path, data)}, found no such field"
        )
    if kind == "extra_forbidden":
        model = _model_at(path[:-1], data)
        key = path[-1]
        if model is not None:
            allowed = _field_names(model)
            hint = suggest(key, allowed)
            if path[0] == "program" and len(path) == 2 and key in ("op", "module"):
                return doc.problem(
                    path, "expected either `op` or `module` in a node, found both", key=True
                )
            if path[0] == "program" and len(path) == 3 and key == "inplace":
                op = _get(data, path[:2] + ("op",))
                if isinstance(op, str) and op in OPS:
                    forms = nearest(op, [n for n, o in OPS.items() if o.inplace])
                    alt = f" (ops with one near it: {', '.join(forms)})" if forms else ""
                    return doc.problem(
                        path,
                        f"{op} has no in-place form{alt}; remove `inplace: true`",
                        key=True,
                    )
                return doc.problem(
                    path,
                    "expected `inplace` only on ops with an in-place form "
                    "(for a module, set it on the module: ReLU(inplace: true)), "
                    f"found it on {_what(path[:2], data)}",
                    key=True,
                )
            return doc.problem(
                path,
                f"expected one of the fields {', '.join(allowed)}{hint}, found {key!r}",
                key=True,
            )
        return doc.problem(path, f"unexpected field {key!r}", key=True)
    if kind == "union_tag_invalid":
        tag = ctx.get("tag", value)
        if path[:1] == ("program",):
            op = _get(data, path + ("op",))
            hint = did_you_mean(op, OPS) or " (`memprof schema` lists them)"
            return doc.problem(path + ("op",), f"expected a known op{hint}, found {found(op)}")
        if path[:1] == ("modules",):
            return doc.problem(
                path + ("type",),
                f"expected a module type such as Linear, Conv2d or "
                f"ReLU{did_you_mean(tag, MODULES)}, found {found(tag)}",
            )
        if path[:1] == ("phases",) and len(path) == 3:
            return doc.problem(
                path + ("type",),
                f"expected an optimizer type ({', '.join(OPTIMIZERS)})"
                f"{suggest(tag, OPTIMIZERS)}, found {found(tag)}",
            )
        if path[:1] == ("phases",):
            return doc.problem(
                path,
                "expected forward, {backward: LOSS} or {optimizer: {type: SGD, ...}}"
                f"{suggest(tag, ['forward'])}, found {found(value)}",
            )
        return doc.problem(path, f"expected one of {ctx.get('expected_tags')}, found {found(tag)}")
    if kind == "union_tag_not_found":
        if path[:1] == ("program",):
            return doc.problem(
                path, "expected `op: NAME` or `module: NAME` in a node, found neither"
            )
        if path[:1] == ("modules",) or path[:1] == ("phases",) and len(path) == 3:
            return doc.problem(path, f"expected a `type` field in {_what(path, data)}, found none")
        if path[:1] == ("phases",):
            return doc.problem(
                path,
                "expected forward, {backward: LOSS} or {optimizer: {type: SGD, ...}}, "
                f"found {found(value)}",
            )
        return doc.problem(path, f"expected a tagged mapping, found {found(value)}")
    if kind == "literal_error":
        return doc.problem(path, f"expected {ctx.get('expected')}, found {found(value)}")
    if kind == "string_pattern_mismatch":
        rule = PATTERN_RULES.get(ctx.get("pattern"), PATTERN_RULES[m.NAME_PATTERN])
        return doc.problem(path, f"expected {rule}, found {found(value)}")
    if kind == "value_error":
        msg = str(ctx.get("error", err["msg"]))
        if msg.startswith("expected"):
            return doc.problem(path, msg)
        return doc.problem(path, f"{msg} (in {_what(path, data)})")
    if kind in ("model_type", "model_attributes_type", "dict_type"):
        return doc.problem(
            path, f"expected a mapping for {_what(path, data)}, found {found(value)}"
        )
    if kind == "too_short":
        return doc.problem(
            path, f"expected at least {ctx.get('min_length', 1)} item(s), found {found(value)}"
        )
    if kind in ("greater_than_equal", "greater_than", "less_than_equal", "less_than"):
        bound = next(iter(ctx.values()), "")
        sign = {
            "greater_than_equal": ">=",
            "greater_than": ">",
            "less_than_equal": "<=",
            "less_than": "<",
        }[kind]
        return doc.problem(path, f"expected a number {sign} {bound}, found {found(value)}")
    msg = err["msg"]
    if msg.startswith("Input should be "):
        msg = "expected " + msg[len("Input should be ") :]
    return doc.problem(path, f"{msg}, found {found(value)}")
