"""Python scenario files: `memprof run train.py` runs a function decorated `@memprof.scenario`.

    import engine, memprof

    @memprof.scenario(
        variants={"inplace": {"inplace": True}, "out_of_place": {"inplace": False}},
        baseline="out_of_place",
        device="cpu",
        expect={"inplace": {"peak_allocated": "64 MiB"}},
    )
    def relu_block(inplace):
        x = engine.rand(1, 64, 512, 512)
        y = engine.relu_(x) if inplace else engine.relu(x)

Each variant calls the function with its parameters as keyword arguments inside a
`memprof.profile` (memprof/profile.py), from a fresh engine state, in the same process, one after
the other; the variants make one report, as a YAML scenario's do. `expect` takes what YAML's
`expect` takes (per variant name, or "*" for all). An exception inside a variant fails that
variant (status error, or oom) and the others still run; the report is still written.

Loading executes the file as a module (so its imports and definitions run) and checks the
decorator's arguments against the function's signature; a problem in the file (a syntax error,
an exception while importing it, a bad argument) is an InvalidInput naming `file:line`.
`read_summary` reads the name, description and variant names without executing anything (for
`memprof list` and the dashboard's scenario list).
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import inspect
import os
import re
import sys
import traceback
from dataclasses import dataclass, field
from typing import Any

from memprof.errors import InvalidInput

_PACKAGE = os.path.dirname(os.path.abspath(__file__))
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
OPTIONS = (
    "variants",
    "baseline",
    "device",
    "allocator",
    "expect",
    "name",
    "description",
    "seed",
    "memory_limit",
)


class ScenarioDefinitionError(Exception):
    """A bad @memprof.scenario(...) call; `where` is its `file:line`."""

    def __init__(self, where: str, message: str):
        super().__init__(f"{where}: {message}")
        self.where = where
        self.message = message


@dataclass
class ScenarioDef:
    """What @memprof.scenario recorded about a function."""

    fn: Any
    where: str  # file:line of the decorator
    variants: dict[str, dict[str, Any]]
    baseline: str | None = None
    device: str = "cpu"
    allocator: str = "exact"
    expect: dict[str, Any] = field(default_factory=dict)
    name: str | None = None
    description: str = ""
    seed: int | None = 0
    memory_limit: int | str | None = None


def scenario(fn=None, /, **options):
    """`@memprof.scenario(variants=..., baseline=..., device=..., allocator=..., expect=...)`.

    variants: {variant name: {keyword argument: value}} (default: one variant "default" with no
    arguments). baseline: the variant others compare with. device: cpu, cuda, meta or auto;
    allocator: exact or caching. expect: {variant name or "*": YAML expectations}. name and
    description default to the function's name and docstring. The function is returned as it
    is, marked for `memprof run`; calling it directly runs it without profiling.
    """
    caller = sys._getframe(1)
    while caller.f_back is not None and caller.f_code.co_filename.startswith(_PACKAGE):
        caller = caller.f_back  # called as memprof.scenario(...): the package's __call__
    where = f"{caller.f_code.co_filename}:{caller.f_lineno}"
    unknown = [k for k in options if k not in OPTIONS]
    if unknown:
        raise ScenarioDefinitionError(
            where,
            f"@memprof.scenario got an unknown argument {unknown[0]!r}; "
            f"expected some of {', '.join(OPTIONS)}",
        )

    def mark(func):
        if not callable(func):
            raise ScenarioDefinitionError(
                where, f"@memprof.scenario decorates a function, found {type(func).__name__}"
            )
        func.__memprof_scenario__ = _definition(func, where, options)
        return func

    return mark(fn) if fn is not None else mark


def _definition(fn, where: str, options: dict) -> ScenarioDef:
    from memprof.scenario.validate import ALLOCATORS, DEVICES

    def bad(message: str):
        raise ScenarioDefinitionError(where, message)

    variants = options.get("variants")
    if variants is None:
        variants = {"default": {}}
    if not isinstance(variants, dict) or not variants:
        bad(f"variants: expected a dict of variant name -> keyword arguments, found {variants!r}")
    for vname, params in variants.items():
        if not isinstance(vname, str) or not _NAME.match(vname):
            bad(f"variants: expected names of letters, digits, '_', '-' or '.', found {vname!r}")
        if not isinstance(params, dict) or not all(isinstance(k, str) for k in params):
            bad(f"variants[{vname!r}]: expected a dict of keyword arguments, found {params!r}")
        try:
            inspect.signature(fn).bind(**params)
        except TypeError as exc:
            bad(f"variants[{vname!r}]: {fn.__name__}() cannot take {params!r}: {exc}")
        except ValueError:  # no signature (a builtin): nothing to check
            pass
    names = list(variants)
    baseline = options.get("baseline")
    if baseline is not None and baseline not in variants:
        bad(f"baseline: expected a variant name ({', '.join(names)}), found {baseline!r}")
    device = options.get("device", "cpu")
    if device not in DEVICES:
        bad(f"device: expected one of {', '.join(DEVICES)}, found {device!r}")
    allocator = options.get("allocator", "exact")
    if allocator not in ALLOCATORS:
        bad(f"allocator: expected one of {', '.join(ALLOCATORS)}, found {allocator!r}")
    expect = options.get("expect") or {}
    if not isinstance(expect, dict):
        bad(f"expect: expected a dict of variant name (or '*') -> expectations, found {expect!r}")
    for key, value in expect.items():
        if key != "*" and key not in variants:
            bad(f"expect: expected a variant name ({', '.join(names)}) or '*', found {key!r}")
        try:
            _expectation(value)
        except ValueError as exc:
            bad(f"expect[{key!r}]: {exc}")
    seed = options.get("seed", 0)
    if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool)):
        bad(f"seed: expected an integer or None, found {seed!r}")
    limit = options.get("memory_limit")
    if limit is not None:
        try:
            limit = _size(limit)
        except ValueError as exc:
            bad(f"memory_limit: {exc}")
    name = options.get("name") or fn.__name__
    if not isinstance(name, str):
        bad(f"name: expected a string, found {name!r}")
    description = options.get("description")
    if description is None:
        description = inspect.cleandoc(fn.__doc__ or "")
    return ScenarioDef(
        fn=fn,
        where=where,
        variants={k: dict(v) for k, v in variants.items()},
        baseline=baseline,
        device=device,
        allocator=allocator,
        expect=dict(expect),
        name=name,
        description=str(description),
        seed=seed,
        memory_limit=limit,
    )


def _size(value) -> int:
    if isinstance(value, bool):
        raise ValueError(f"expected a size, found {value!r}")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"expected a size >= 0, found {value}")
        return value
    from memprof.units import parse_size

    return parse_size(str(value))


def _expectation(value):
    from pydantic import ValidationError

    from memprof.scenario.model import Expectation

    if value is None:
        return None
    try:
        return Expectation.model_validate(value)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(p) for p in first["loc"])
        raise ValueError(f"{loc + ': ' if loc else ''}{first['msg']}") from None


# --- the loaded scenario -----------------------------------------------------------------------


@dataclass
class _Spec:
    """The parts of a YAML variant's spec that commands read (progress bars, device)."""

    name: str
    description: str
    device: str
    allocator: str
    iterations: int = 1
    program: tuple = ()
    seed: int | None = 0
    memory_limit: int | None = None


@dataclass
class PythonVariant:
    name: str
    params: dict[str, Any]
    spec: _Spec
    expect: Any = None

    @property
    def expects_failure(self) -> bool:
        e = self.expect
        return e is not None and (e.error is not None or e.status in ("error", "oom"))


@dataclass
class PythonScenario:
    """A loaded Python scenario file: what `run_loaded` runs (duck-compatible with the YAML
    LoadedScenario where commands read it)."""

    path: str
    text: str
    sha256: str
    definition: ScenarioDef
    variants: list[PythonVariant]
    variant_names: list[str]
    baseline: str | None
    warnings: list = field(default_factory=list)
    doc: Any = None

    @property
    def name(self) -> str:
        return self.definition.name

    @property
    def description(self) -> str:
        return self.definition.description

    def run(self, progress=None) -> dict[str, Any]:
        """Run every variant (each in a memprof.profile) and assemble one report."""
        from memprof.profile import Profile

        entries = []
        total = len(self.variants)
        last = None
        for i, variant in enumerate(self.variants):
            base = {
                "variant": variant.name,
                "index": i,
                "total": total,
                "iterations": 1,
                "nodes": 1,
            }
            if progress is not None:
                progress({**base, "stage": "start", "iteration": 0, "node": 0})
            spec = variant.spec
            prof = Profile(
                self.name,
                device=spec.device,
                allocator=spec.allocator,
                save=False,
                standalone=False,
                seed=spec.seed,
                memory_limit=spec.memory_limit,
                variant=variant.name,
                params=variant.params,
                description=self.description,
                path=self.path,
                expect=variant.expect,
            )
            try:
                with prof:
                    self.definition.fn(**variant.params)
            except Exception as exc:  # the variant failed; its entry says how, the rest run
                prof.entry["error"]["message"] += _where(exc, self.path)
            entries.append(prof.entry)
            last = prof
            if progress is not None:
                progress({**base, "stage": "done", "iteration": 1, "node": 0})
        if last is None:
            raise InvalidInput(f"{self.path}: no variant to run")
        report = last._assemble(entries, self.baseline)
        report["scenario"]["sha256"] = self.sha256
        return report


def _where(exc: BaseException, path: str) -> str:
    """` (at file:line)`: the innermost line of the scenario file in the exception's traceback."""
    target = os.path.abspath(path)
    found = None
    for frame in traceback.extract_tb(exc.__traceback__):
        if os.path.abspath(frame.filename) == target:
            found = f"{path}:{frame.lineno}"
    return f" (at {found})" if found else ""


def is_python_path(path: str | os.PathLike) -> bool:
    return str(path).lower().endswith(".py")


def load_python_scenario(
    path: str | os.PathLike,
    *,
    variants: list[str] | None = None,
    device: str | None = None,
    allocator: str | None = None,
) -> PythonScenario:
    """Execute a Python scenario file and check its @memprof.scenario function.

    Raises InvalidInput with `file:line: message` lines for every problem found.
    """
    from memprof.scenario.validate import _merge_expect, check_overrides, read_scenario_text

    path = str(path)
    text, raw = read_scenario_text(path)
    check_overrides(device, allocator)
    module = _execute(path, text)
    found = [
        value.__memprof_scenario__
        for value in vars(module).values()
        if callable(value) and isinstance(getattr(value, "__memprof_scenario__", None), ScenarioDef)
    ]
    unique = list({id(d): d for d in found}.values())
    if not unique:
        raise InvalidInput(
            f"{path}: no scenario",
            [
                f"{path}:1: expected a function decorated @memprof.scenario(variants=...), "
                f"found none"
            ],
        )
    if len(unique) > 1:
        where = ", ".join(d.where.rsplit(":", 1)[-1] for d in unique)
        raise InvalidInput(
            f"{path}: several scenarios",
            [
                f"{unique[1].where}: expected one @memprof.scenario per file, found one at lines {where}"
            ],
        )
    definition = unique[0]
    names = list(definition.variants)
    general = _expectation(definition.expect.get("*"))
    loaded = []
    for vname, params in definition.variants.items():
        spec = _Spec(
            name=definition.name,
            description=definition.description,
            device=device or definition.device,
            allocator=allocator or definition.allocator,
            seed=definition.seed,
            memory_limit=definition.memory_limit,
        )
        expect = _merge_expect(general, _expectation(definition.expect.get(vname)))
        loaded.append(PythonVariant(vname, params, spec, expect))
    if variants:
        unknown = [n for n in variants if n not in names]
        if unknown:
            raise InvalidInput(
                f"{path}: unknown variant {unknown[0]!r}; the scenario defines: {', '.join(names)}"
            )
        loaded = [v for v in loaded if v.name in variants]
    if any(v.spec.device == "cuda" for v in loaded):
        from engine.device import cuda_available

        if not cuda_available():
            raise InvalidInput(
                f"{definition.where}: expected a GPU that CuPy can see for device cuda, found "
                f"none; use cpu, meta, or auto (cuda when there is a GPU)"
            )
    return PythonScenario(
        path=path,
        text=text,
        sha256=hashlib.sha256(raw).hexdigest(),
        definition=definition,
        variants=loaded,
        variant_names=names,
        baseline=definition.baseline,
    )


def _execute(path: str, text: str):
    """Run the file as a fresh module; its problems become InvalidInput with file:line."""
    try:
        compile(text, path, "exec")
    except SyntaxError as exc:
        col = f":{exc.offset}" if exc.offset else ""
        raise InvalidInput(
            f"{path}: not valid Python",
            [f"{path}:{exc.lineno or 1}{col}: Python syntax error: {exc.msg}"],
        ) from None
    digest = hashlib.sha1(os.path.abspath(path).encode()).hexdigest()[:12]
    module_name = f"_memprof_scenario_{digest}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    folder = os.path.dirname(os.path.abspath(path))
    added = folder not in sys.path
    if added:
        sys.path.insert(0, folder)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except ScenarioDefinitionError as exc:
        raise InvalidInput(f"{path}: bad @memprof.scenario", [str(exc)]) from None
    except Exception as exc:
        where = _where(exc, path)
        line = where[5:-1] if where else f"{path}:1"
        raise InvalidInput(
            f"{path}: cannot load",
            [f"{line}: loading the file raised {type(exc).__name__}: {exc}"],
        ) from None
    finally:
        sys.modules.pop(module_name, None)
        if added:
            try:
                sys.path.remove(folder)
            except ValueError:
                pass
    return module


# --- listing without executing -----------------------------------------------------------------


def mentions_scenario(path: str | os.PathLike) -> bool:
    """Whether a .py file may define a scenario (it uses the decorator); read as text only."""
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            text = fh.read(1024 * 1024)
    except OSError:
        return False
    return "scenario(" in text and "memprof" in text


def read_summary(path: str | os.PathLike):
    """Name, description and variant names of a Python scenario file, read with `ast` (nothing
    is executed). Variants written as a dict literal are listed; otherwise none."""
    from memprof.scenario.discover import ScenarioSummary

    path = str(path)
    stem = os.path.splitext(os.path.basename(path))[0]
    try:
        with open(path, encoding="utf-8") as fh:
            tree = ast.parse(fh.read(), path)
    except SyntaxError as exc:
        return ScenarioSummary(stem, error=f"cannot read: Python syntax error (line {exc.lineno})")
    except UnicodeDecodeError:
        return ScenarioSummary(stem, error="cannot read: not UTF-8 text")
    except OSError as exc:
        return ScenarioSummary(stem, error=f"cannot read: {exc.strerror or exc}")
    for node in ast.walk(tree):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for dec in node.decorator_list:
            call = dec if isinstance(dec, ast.Call) else None
            target = call.func if call is not None else dec
            if not (isinstance(target, (ast.Attribute, ast.Name)) and _dec_name(target)):
                continue
            kwargs = {k.arg: k.value for k in (call.keywords if call is not None else [])}
            name = _literal(kwargs.get("name")) or node.name
            description = _literal(kwargs.get("description"))
            if description is None:
                description = inspect.cleandoc(ast.get_docstring(node) or "")
            variants = _literal(kwargs.get("variants"))
            names = tuple(variants) if isinstance(variants, dict) else ()
            if "variants" not in kwargs:
                names = ("default",)
            return ScenarioSummary(str(name), str(description).strip(), names)
    return ScenarioSummary(stem, error="no @memprof.scenario function")


def _dec_name(node) -> bool:
    if isinstance(node, ast.Attribute):
        return node.attr == "scenario"
    return node.id == "scenario"


def _literal(node):
    if node is None:
        return None
    try:
        return ast.literal_eval(node)
    except ValueError:
        return None
