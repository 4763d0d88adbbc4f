"""Variants: named (`variants:`), a matrix (`matrix:`), or both (every named variant crossed with
every matrix combination); then `$param` substitution into any value of the scenario.

A value written exactly `$name` is replaced by the parameter's value (any YAML value, so
`shape: [$batch, 3, 224, 224]` and `inplace: $inplace` both work). `$$name` is the literal text
`$name`. The `variants` and `matrix` sections themselves are never substituted.
"""

from __future__ import annotations

import itertools
import math
import re
from dataclasses import dataclass
from typing import Any

from memprof.scenario.loader import Document, Problem, dedupe
from memprof.scenario.model import NAME_PATTERN, PARAM_REF_RE, VARIANT_NAME_PATTERN

_NAME_RE = re.compile(NAME_PATTERN)
_VARIANT_RE = re.compile(VARIANT_NAME_PATTERN)
DEFAULT_VARIANT = "default"
MAX_VARIANTS = 256  # variants one scenario may define (named variants x matrix combinations)


@dataclass(frozen=True)
class VariantDef:
    name: str
    params: dict[str, Any]


def _format_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, list):
        return "x".join(_format_value(i) for i in v)
    return str(v)


def expand_variants(doc: Document) -> tuple[list[VariantDef], list[Problem]]:
    """The variants a scenario defines, in file order; problems in `variants`/`matrix` syntax."""
    data = doc.data if isinstance(doc.data, dict) else {}
    problems: list[Problem] = []
    named: list[VariantDef] = []
    raw = data.get("variants")
    if raw is not None:
        if not isinstance(raw, dict) or not raw:
            problems.append(
                doc.problem(
                    ("variants",),
                    f"expected a mapping of variant names to parameters, found {_short(raw)}",
                )
            )
        else:
            for name, params in raw.items():
                if not isinstance(name, str) or not _VARIANT_RE.match(name):
                    problems.append(
                        doc.problem(
                            ("variants", name),
                            f"expected a variant name of letters, digits and _.,=+-, found {name!r}",
                            key=True,
                        )
                    )
                    continue
                if params is None:
                    params = {}
                if not isinstance(params, dict):
                    problems.append(
                        doc.problem(
                            ("variants", name),
                            f"expected a mapping of parameter names to values, found {_short(params)}",
                        )
                    )
                    continue
                bad = [k for k in params if not isinstance(k, str) or not _NAME_RE.match(k)]
                for k in bad:
                    problems.append(
                        doc.problem(
                            ("variants", name, k),
                            f"expected a parameter name (letters, digits, _), found {k!r}",
                            key=True,
                        )
                    )
                for k, v in params.items():
                    problems += _value_problems(doc, ("variants", name, k), v)
                named.append(VariantDef(name, dict(params)))
    combos: list[dict[str, Any]] = [{}]
    raw_matrix = data.get("matrix")
    if raw_matrix is not None:
        if not isinstance(raw_matrix, dict) or not raw_matrix:
            problems.append(
                doc.problem(
                    ("matrix",),
                    f"expected a mapping of parameter names to lists of values, found {_short(raw_matrix)}",
                )
            )
        else:
            axes = []
            for key, values in raw_matrix.items():
                if not isinstance(key, str) or not _NAME_RE.match(key):
                    problems.append(
                        doc.problem(
                            ("matrix", key),
                            f"expected a parameter name (letters, digits, _), found {key!r}",
                            key=True,
                        )
                    )
                    continue
                if not isinstance(values, list) or not values:
                    problems.append(
                        doc.problem(
                            ("matrix", key),
                            f"expected a non-empty list of values, found {_short(values)}",
                        )
                    )
                    continue
                for i, v in enumerate(values):
                    problems += _value_problems(doc, ("matrix", key, i), v)
                axes.append([(key, v) for v in values])
            asked = max(len(named), 1) * math.prod(len(a) for a in axes)
            if asked > MAX_VARIANTS:
                sizes = " x ".join(str(len(a)) for a in axes)
                named_part = f"{len(named)} named variants x " if named else ""
                problems.append(
                    doc.problem(
                        ("matrix",),
                        f"expected at most {MAX_VARIANTS} variants, found {asked} "
                        f"({named_part}{len(axes)} matrix axes of {sizes} values); "
                        "split the scenario or use fewer values",
                        key=True,
                    )
                )
            elif not problems:
                combos = [dict(c) for c in itertools.product(*axes)] if axes else [{}]
    if problems:
        return [], problems
    if len(named) > MAX_VARIANTS:
        return [], [
            doc.problem(
                ("variants",),
                f"expected at most {MAX_VARIANTS} variants, found {len(named)}; split the scenario",
                key=True,
            )
        ]
    if not named and raw_matrix is None:
        return [VariantDef(DEFAULT_VARIANT, {})], []
    result: list[VariantDef] = []
    for base in named or [VariantDef("", {})]:
        for combo in combos:
            suffix = ",".join(f"{k}={_format_value(v)}" for k, v in combo.items())
            name = base.name if not suffix else (f"{base.name}/{suffix}" if base.name else suffix)
            overlap = set(base.params) & set(combo)
            for key in sorted(overlap):
                problems.append(
                    doc.problem(
                        ("matrix", key),
                        f"expected each parameter in either variants or matrix, found {key!r} in both",
                        key=True,
                    )
                )
            result.append(VariantDef(name, {**base.params, **combo}))
    seen: set[str] = set()
    for v in result:
        if v.name in seen:
            problems.append(
                doc.problem(("matrix",), f"expected distinct variant names, found {v.name!r} twice")
            )
        seen.add(v.name)
    return result, dedupe(problems)


def substitute(doc: Document, params: dict[str, Any]) -> tuple[Any, list[tuple[tuple, str]]]:
    """The scenario data with every `$name` replaced; and the (path, name) of undefined references."""
    missing: list[tuple[tuple, str]] = []

    def walk(value: Any, path: tuple) -> Any:
        if isinstance(value, dict):
            return {
                k: (v if path == () and k in ("variants", "matrix") else walk(v, path + (k,)))
                for k, v in value.items()
            }
        if isinstance(value, list):
            return [walk(v, path + (i,)) for i, v in enumerate(value)]
        if isinstance(value, str):
            if value.startswith("$$"):
                return value[1:]
            m = PARAM_REF_RE.match(value)
            if m:
                if m.group(1) in params:
                    return params[m.group(1)]
                missing.append((path, m.group(1)))
        return value

    return walk(doc.data, ()), missing


def references(doc: Document) -> dict[str, list[tuple]]:
    """Every `$name` used in the scenario (outside variants/matrix) with the paths using it."""
    found: dict[str, list[tuple]] = {}

    def walk(value: Any, path: tuple) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                if not (path == () and k in ("variants", "matrix")):
                    walk(v, path + (k,))
        elif isinstance(value, list):
            for i, v in enumerate(value):
                walk(v, path + (i,))
        elif isinstance(value, str):
            m = PARAM_REF_RE.match(value)
            if m:
                found.setdefault(m.group(1), []).append(path)

    walk(doc.data, ())
    return found


def _value_problems(doc: Document, path: tuple, value: Any) -> list[Problem]:
    """A parameter value goes into the report as JSON: no NaN or infinity (JSON has none)."""
    if isinstance(value, float) and not math.isfinite(value):
        return [
            doc.problem(
                path, f"expected a finite number as a parameter value, found {_short(value)}"
            )
        ]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in _value_problems(doc, path + (i,), v)]
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in _value_problems(doc, path + (k,), v)]
    return []


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
