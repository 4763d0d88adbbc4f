"""Load and check a scenario file: YAML -> variants -> `$param` substitution -> pydantic model ->
names, arities and phases -> a dry run of each variant on the meta device for shapes.

Every problem is a line `file:line:col: what was expected, what was found`; `load_scenario`
raises `memprof.errors.InvalidInput` carrying them all (exit code 2, no traceback).
"""

from __future__ import annotations

import hashlib
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from memprof.errors import InvalidInput
from memprof.scenario.catalog import MODULES, OPS, suggest
from memprof.scenario.discover import scenario_files
from memprof.scenario.loader import Document, Problem, ScenarioYAMLError, load_yaml
from memprof.scenario.model import Expectation, ModuleCall, Scenario
from memprof.scenario.problems import pydantic_problems
from memprof.scenario.variants import expand_variants, references, substitute

DEVICES = ("cpu", "cuda", "meta", "auto")
INT64_MAX = 2**63 - 1
ITEMSIZE = {
    "float16": 2,
    "bfloat16": 2,
    "float32": 4,
    "float64": 8,
    "uint8": 1,
    "int32": 4,
    "int64": 8,
    "bool": 1,
}
ALLOCATORS = ("exact", "caching")


@dataclass
class Variant:
    """One way to run the scenario: its parameters substituted, and what it must measure."""

    name: str
    params: dict[str, Any]
    spec: Scenario
    expect: Expectation | None = None

    @property
    def expects_failure(self) -> bool:
        e = self.expect
        return e is not None and (e.error is not None or e.status in ("error", "oom"))


@dataclass
class LoadedScenario:
    path: str
    text: str
    sha256: str
    doc: Document
    variants: list[Variant]
    variant_names: list[str]
    baseline: str | None
    warnings: list[Problem] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.variants[0].spec.name

    @property
    def description(self) -> str:
        return self.variants[0].spec.description


def read_scenario_text(path: str | os.PathLike) -> tuple[str, bytes]:
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
    except FileNotFoundError:
        raise InvalidInput(f"{path}: no such scenario file") from None
    except IsADirectoryError:
        raise InvalidInput(f"{path}: is a directory; expected a scenario .yaml file") from None
    except OSError as exc:
        raise InvalidInput(f"{path}: cannot read: {exc.strerror}") from None
    try:
        return raw.decode("utf-8"), raw
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        start = raw.rfind(b"\n", 0, exc.start) + 1
        column = len(raw[start : exc.start].decode("utf-8", errors="replace")) + 1
        raise InvalidInput(
            f"{path}: not UTF-8 text",
            [
                f"{path}:{line}:{column}: expected UTF-8 text, found the byte "
                f"0x{raw[exc.start]:02x}; save the file as UTF-8"
            ],
        ) from None


def load_scenario(
    path: str | os.PathLike,
    *,
    variants: list[str] | None = None,
    device: str | None = None,
    allocator: str | None = None,
    check_shapes: bool = True,
) -> LoadedScenario:
    """Parse and check a scenario; raise InvalidInput with one line per problem.

    variants: run only these (by name); device / allocator: override the file's choice.
    check_shapes: dry-run every variant's forward program on the meta device (needs the engine).
    """
    path = str(path)
    if path.lower().endswith(".py"):  # a Python scenario file (memprof/scenario/python_file.py)
        from memprof.scenario.python_file import load_python_scenario

        return load_python_scenario(path, variants=variants, device=device, allocator=allocator)
    text, raw = read_scenario_text(path)
    try:
        doc = load_yaml(text, path)
    except ScenarioYAMLError as exc:
        raise InvalidInput(f"{path}: invalid YAML", [str(exc.problem)]) from None
    if not isinstance(doc.data, dict):
        raise InvalidInput(
            f"{path}: not a scenario",
            [
                str(
                    doc.problem(
                        (),
                        f"expected a mapping with name, inputs, program, ..., found {_kind(doc.data)}",
                    )
                )
            ],
        )

    defs, problems = expand_variants(doc)
    if problems:
        _fail(path, problems)
    check_overrides(device, allocator)

    refs = references(doc)
    all_params = {k for d in defs for k in d.params}
    warnings = [
        doc.problem(
            ("variants",) if "variants" in doc.data else ("matrix",),
            f"parameter {name!r} is set by the variants but no value uses ${name}",
            key=True,
            severity="warning",
        )
        for name in sorted(all_params - set(refs))
    ]

    collected: dict[str, list[str]] = {}  # problem line -> variants it occurs in
    order: list[Problem] = []
    loaded: list[Variant] = []
    names = [d.name for d in defs]
    for vdef in defs:
        data, missing = substitute(doc, vdef.params)
        vproblems = [
            doc.problem(
                p,
                f"expected a parameter the variants define "
                f"({', '.join(sorted(all_params)) or 'none defined'}){suggest(n, all_params)}, "
                f"found ${n}",
            )
            for p, n in missing
        ]
        spec = None
        if not missing:
            try:
                spec = Scenario.model_validate(data)
            except ValidationError as exc:
                vproblems += pydantic_problems(doc, data, exc)
        if spec is not None:
            vproblems += check_semantics(spec, doc, names)
        for p in vproblems:
            line = str(p)
            if line not in collected:
                collected[line] = []
                order.append(p)
            collected[line].append(vdef.name)
        if spec is not None:
            loaded.append(Variant(vdef.name, vdef.params, spec))
    if order:
        _fail(path, order, collected, len(defs))

    baseline = loaded[0].spec.baseline
    if baseline is not None and baseline not in names:
        _fail(
            path,
            [
                doc.problem(
                    ("baseline",),
                    f"expected a variant name ({', '.join(names)})"
                    f"{suggest(baseline, names)}, found {baseline!r}",
                )
            ],
        )
    expect = loaded[0].spec.expect
    bad = [k for k in expect if k != "*" and k not in names]
    if bad:
        _fail(
            path,
            [
                doc.problem(
                    ("expect", k),
                    f"expected a variant name ({', '.join(names)}) or '*'"
                    f"{suggest(k, names)}, found {k!r}",
                    key=True,
                )
                for k in bad
            ],
        )
    for v in loaded:
        v.expect = _merge_expect(v.spec.expect.get("*"), v.spec.expect.get(v.name))

    if variants:
        unknown = [n for n in variants if n not in names]
        if unknown:
            raise InvalidInput(
                f"{path}: unknown variant {unknown[0]!r}{suggest(unknown[0], names)}; "
                f"the scenario defines: {', '.join(names)}"
            )
        loaded = [v for v in loaded if v.name in variants]
    if device or allocator:
        update = {k: val for k, val in (("device", device), ("allocator", allocator)) if val}
        for v in loaded:
            v.spec = v.spec.model_copy(update=update)

    if any(v.spec.device == "cuda" for v in loaded):
        from engine.device import cuda_available

        if not cuda_available():
            where = (
                "--device cuda"
                if device == "cuda"
                else str(doc.problem(("device",), "device cuda"))
            )
            raise InvalidInput(
                f"{where}: expected a GPU that CuPy can see, found none; "
                f"use cpu, meta, or auto (cuda when there is a GPU)"
            )
    meta_problems = [p for v in loaded for p in check_meta(v, doc)]
    if meta_problems:
        _fail(path, meta_problems)

    if check_shapes:
        from memprof.scenario.shapes import dry_run

        collected = {}
        order = []
        for v in loaded:
            for p in dry_run(v, doc):
                if p.severity == "warning":
                    if str(p) not in {str(w) for w in warnings}:
                        warnings.append(p)
                    continue
                if str(p) not in collected:
                    collected[str(p)] = []
                    order.append(p)
                collected[str(p)].append(v.name)
        if order:
            _fail(path, order, collected, len(loaded))

    return LoadedScenario(
        path=path,
        text=text,
        sha256=hashlib.sha256(raw).hexdigest(),
        doc=doc,
        variants=loaded,
        variant_names=names,
        baseline=baseline,
        warnings=warnings,
    )


def load_scenarios(
    paths: Sequence[str | os.PathLike],
    *,
    variants: list[str] | None = None,
    device: str | None = None,
    allocator: str | None = None,
) -> tuple[list[LoadedScenario], list[str]]:
    """load_scenario for every scenario file named in `paths` or found in directories there:
    the scenarios that load, and one line per problem (bad options, missing paths, bad files)."""
    files, problems = scenario_files(paths)
    try:
        check_overrides(device, allocator)
    except InvalidInput as exc:
        return [], exc.problems + problems  # every file would repeat them
    loaded = []
    for path in files:
        try:
            loaded.append(
                load_scenario(path, variants=variants, device=device, allocator=allocator)
            )
        except InvalidInput as exc:
            problems += exc.problems or [str(exc)]
    return loaded, problems


def _kind(value: Any) -> str:
    if value is None:
        return "an empty file"
    return {dict: "a mapping", list: "a list"}.get(type(value), f"the scalar {value!r}")


def check_overrides(device: str | None = None, allocator: str | None = None) -> None:
    """Raise InvalidInput with one line per bad `--device` / `--allocator` value."""
    problems = [
        f"--{what}: expected one of {', '.join(allowed)}{suggest(value, allowed)}, found {value!r}"
        for what, value, allowed in (
            ("device", device, DEVICES),
            ("allocator", allocator, ALLOCATORS),
        )
        if value is not None and value not in allowed
    ]
    if problems:
        raise InvalidInput("invalid option", problems)


def _fail(
    path: str, problems: list[Problem], where: dict[str, list[str]] | None = None, total: int = 1
) -> None:
    lines = []
    problems = sorted(
        problems, key=lambda p: (p.position.line, p.position.column) if p.position else (0, 0)
    )
    for p in problems:
        line = str(p)
        names = (where or {}).get(line)
        if names and len(names) < total:
            label = "variant" if len(names) == 1 else "variants"
            line += f" (in {label} {', '.join(names)})"
        lines.append(line)
    n = len(lines)
    raise InvalidInput(f"{path}: {n} problem{'s' if n != 1 else ''}", lines)


def _merge_expect(general: Expectation | None, specific: Expectation | None) -> Expectation | None:
    if general is None or specific is None:
        return specific or general
    merged = general.model_dump(exclude_unset=True)
    for key, value in specific.model_dump(exclude_unset=True).items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict) and key != "error":
            merged[key] = {**merged[key], **value}  # per-tensor / per-category entries merge
        else:
            merged[key] = value
    return Expectation.model_validate(merged)


# --- names, arities, phases -------------------------------------------------------------------


def check_semantics(spec: Scenario, doc: Document, variant_names: list[str]) -> list[Problem]:
    """Problems a pydantic model cannot see: undefined or duplicate names, wrong input counts."""
    problems: list[Problem] = []
    bound: dict[str, tuple] = {}  # tensor name -> path of what bound it
    later = {name: ("program", i) for i, n in enumerate(spec.program) for name in n.out_names}
    for name, inp in spec.inputs.items():
        bound[name] = ("inputs", name)
        nbytes = math.prod(inp.shape) * ITEMSIZE[inp.dtype or spec.dtype]
        if nbytes > INT64_MAX or any(d > INT64_MAX for d in inp.shape):
            problems.append(
                doc.problem(
                    ("inputs", name, "shape"),
                    f"expected a shape whose size in bytes fits in 64 bits (at most {INT64_MAX}), "
                    f"found {'x'.join(map(str, inp.shape))} of {inp.dtype or spec.dtype}: "
                    f"{nbytes} bytes",
                )
            )
        if inp.requires_grad and not _is_float(inp.dtype or spec.dtype):
            problems.append(
                doc.problem(
                    ("inputs", name, "requires_grad"),
                    f"expected a floating dtype for requires_grad: true, found "
                    f"{inp.dtype or spec.dtype}",
                )
            )
    node_ids: dict[str, int] = {}
    for i, node in enumerate(spec.program):
        here = ("program", i)
        if node.id in node_ids:
            first = doc.position(("program", node_ids[node.id]))
            problems.append(
                doc.problem(
                    here + ("id",),
                    f"expected a unique node id, found {node.id!r} "
                    f"again (first at line {first.line if first else '?'})",
                )
            )
        node_ids.setdefault(node.id, i)
        for j, name in enumerate(node.inputs):
            if "." in name and name.split(".")[0] in spec.modules:
                continue  # a module's parameter: found (or not) when the module is built
            if name not in bound:
                ipath = (
                    here + ("in", j)
                    if isinstance(_raw(doc, here + ("in",)), list)
                    else here + ("in",)
                )
                if name in later:
                    lpos = doc.position(later[name])
                    msg = (
                        f"expected a tensor defined before this node, found {name!r}, which node "
                        f"{spec.program[later[name][1]].id!r} makes later (line {lpos.line if lpos else '?'})"
                    )
                else:
                    known = list(bound)
                    msg = (
                        f"expected a defined tensor ({', '.join(known) or 'none defined yet'})"
                        f"{suggest(name, known)}, found {name!r}"
                    )
                problems.append(doc.problem(ipath, msg))
        problems += _check_call(spec, node, here, doc)
        problems += _check_module_args(spec, node, here, doc, bound)
        for out in node.out_names:
            if out in bound:
                first = doc.position(bound[out], key=bound[out][0] == "inputs")
                opath = here + ("out",) if node.out else here + ("id",)
                problems.append(
                    doc.problem(
                        opath,
                        f"expected a new tensor name (each name is bound once), "
                        f"found {out!r}, already bound at line "
                        f"{first.line if first else '?'}",
                    )
                )
            else:
                bound[out] = here
    problems += _check_levers(spec, doc)

    has_forward = False
    for i, phase in enumerate(spec.phases):
        here = ("phases", i)
        if phase == "forward":
            has_forward = True
            continue
        if not has_forward:
            problems.append(
                doc.problem(here, "expected `forward` before this phase, found it first")
            )
        if hasattr(phase, "backward"):
            loss = phase.backward
            if loss not in bound:
                problems.append(
                    doc.problem(
                        here + ("backward",),
                        f"expected a tensor of the program to "
                        f"call backward on{suggest(loss, bound)}, found {loss!r}",
                    )
                )
        else:
            opt = phase.optimizer
            for j, name in enumerate(opt.params or []):
                if name not in spec.modules:
                    problems.append(
                        doc.problem(
                            here + ("optimizer", "params", j),
                            f"expected a module name ({', '.join(spec.modules) or 'none declared'})"
                            f"{suggest(name, spec.modules)}, found {name!r}",
                        )
                    )
    if "forward" not in spec.phases:
        problems.append(doc.problem(("phases",), "expected a `forward` phase, found none"))

    node_names = set(node_ids)
    for vname, exp in spec.expect.items():
        for key in exp.values or {}:
            base = key.split(".")[0]
            if base not in bound:
                problems.append(
                    doc.problem(
                        ("expect", vname, "values", key),
                        f"expected a tensor name{suggest(base, bound)}, found {base!r}",
                        key=True,
                    )
                )
        for node in exp.inplace or {}:
            if node not in node_names:
                problems.append(
                    doc.problem(
                        ("expect", vname, "inplace", node),
                        f"expected a node id{suggest(node, node_names)}, found {node!r}",
                        key=True,
                    )
                )
    return problems


def check_meta(variant: Variant, doc: Document) -> list[Problem]:
    """Checks that depend on the final device (after --device)."""
    problems = []
    exp = variant.expect
    if exp is not None and exp.values and variant.spec.device == "meta":
        problems.append(
            doc.problem(
                ("expect", variant.name if variant.name in variant.spec.expect else "*", "values"),
                f"expected a device with data (cpu or cuda) to check values, found device meta "
                f"(variant {variant.name})",
                key=True,
            )
        )
    return problems


def _check_call(spec: Scenario, node, here: tuple, doc: Document) -> list[Problem]:
    n = len(node.inputs)
    if isinstance(node, ModuleCall):
        mod = spec.modules.get(node.module)
        if mod is None:
            return [
                doc.problem(
                    here + ("module",),
                    f"expected a module declared under `modules:` "
                    f"({', '.join(spec.modules) or 'none declared'}){suggest(node.module, spec.modules)}, "
                    f"found {node.module!r}",
                )
            ]
        mdef = MODULES[mod.type]
        lo, hi = mdef.min_inputs, mdef.max_inputs
        if not lo <= n <= hi:
            roles = ", ".join(mdef.inputs + tuple(f"{r} (optional)" for r in mdef.optional_inputs))
            want = f"{lo}" if hi == lo else f"{lo} to {hi}"
            return [
                doc.problem(
                    here + ("in",),
                    f"expected {want} input tensor(s) for {mod.type} ({roles}), found {n}",
                )
            ]
        return []
    opdef = OPS[node.op]
    lo, hi = opdef.min_inputs, opdef.max_inputs
    roles = ", ".join(opdef.inputs + tuple(f"{r} (optional)" for r in opdef.optional_inputs))
    if n < lo or (hi is not None and n > hi):
        want = f"{lo}" if hi == lo else (f"{lo} or more" if hi is None else f"{lo} to {hi}")
        if opdef.variadic:
            roles = "tensors to join"
        return [
            doc.problem(
                here + ("in",),
                f"expected {want} input tensor(s) for {node.op} ({roles}), found {n}",
            )
        ]
    if node.op in ("add", "sub", "mul", "div"):
        other = node.args.other
        if n == 1 and other is None:
            return [
                doc.problem(
                    here + ("in",),
                    f"expected a second input tensor or args.other for {node.op}, found neither",
                )
            ]
        if n == 2 and other is not None:
            return [
                doc.problem(
                    here + ("args", "other"),
                    f"expected either a second input tensor or "
                    f"args.other for {node.op}, found both",
                )
            ]
    return []


def _check_module_args(spec: Scenario, node, here: tuple, doc: Document, bound) -> list[Problem]:
    """A module node's `args` are keyword arguments of the module's forward; a mask argument
    names a tensor bound before the node."""
    if not isinstance(node, ModuleCall) or not node.args or node.module not in spec.modules:
        return []
    mtype = spec.modules[node.module].type
    fargs = {a.name: a for a in MODULES[mtype].forward_args}
    problems = []
    for key, value in node.args.items():
        apath = here + ("args", key)
        arg = fargs.get(key)
        if arg is None:
            known = ", ".join(fargs) or "none"
            problems.append(
                doc.problem(
                    apath,
                    f"expected a keyword argument of {mtype}.forward ({known})"
                    f"{suggest(key, fargs)}, found {key!r}",
                    key=True,
                )
            )
        elif arg.tensor and value is not None:
            if not isinstance(value, str) or value not in bound:
                problems.append(
                    doc.problem(
                        apath,
                        f"expected the name of a tensor defined before this node for {key}"
                        f"{suggest(value, bound) if isinstance(value, str) else ''}, found {value!r}",
                    )
                )
        elif not arg.tensor:
            kinds = _json_kinds(arg.type)
            if (
                kinds
                and not isinstance(value, kinds)
                or isinstance(value, bool)
                and bool not in kinds
            ):
                problems.append(
                    doc.problem(
                        apath,
                        f"expected {' or '.join(k.__name__ for k in kinds)} for {mtype}.forward's "
                        f"{key}, found {value!r}",
                    )
                )
    return problems


def _json_kinds(t) -> tuple:
    """The Python types a YAML value may have for an argument typed `t` (empty: anything)."""
    import types
    import typing

    args = typing.get_args(t) if isinstance(t, types.UnionType) or typing.get_origin(t) else (t,)
    kinds = tuple(a for a in args if a in (bool, int, float, str))
    if float in kinds and int not in kinds:
        kinds += (int,)
    return kinds if len(kinds) == len([a for a in args if a is not type(None)]) else ()


def _check_levers(spec: Scenario, doc: Document) -> list[Problem]:
    """`checkpoint:` regions name modules or node ranges that exist, in order, apart."""
    from memprof.scenario.build import LeverError, forward_options

    try:
        forward_options(spec)
    except LeverError as exc:
        raw = _raw(doc, ("checkpoint",))
        if isinstance(raw, list):
            path = ("checkpoint", exc.index)
        elif isinstance(raw, dict) and isinstance(raw.get("regions"), list):
            path = ("checkpoint", "regions", exc.index)
        else:
            path = ("checkpoint",)
        return [doc.problem(path, str(exc))]
    return []


def _raw(doc: Document, path: tuple) -> Any:
    cur = doc.data
    for p in path:
        try:
            cur = cur[p]
        except (KeyError, IndexError, TypeError):
            return None
    return cur


def _is_float(dtype: str) -> bool:
    return dtype.startswith(("float", "bfloat"))
