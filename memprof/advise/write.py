"""`memprof advise --write OUT.yaml`: the scenario with the advised nodes switched to in place, as a
new variant `advised` beside the original ones (which run exactly as before).

The file is edited as YAML with ruamel.yaml's round trip, so comments, key order and flow or block
style stay. A node switches by its `inplace` value (an op node's own, or its module's):
- written `$p`, and every value written `$p` belongs to an advised node: `advised` sets `p: true`;
- otherwise the value becomes `$advise_<node>` (`$advise_<module>` for a module all of whose calls
  are advised), each original variant gets that parameter with the value it had, and `advised`
  sets it true; a module also called by a node that stays out of place is copied for the node.
"""

from __future__ import annotations

import copy
import io
import os
from typing import Any

from memprof.advise.proof import layer_spec, parse_id
from memprof.errors import InvalidInput
from memprof.scenario.model import ModuleCall

ADVISED = "advised"


def _yaml():
    from ruamel.yaml import YAML

    y = YAML(typ="rt")
    y.preserve_quotes = True
    y.width = 4096  # keep long flow mappings on one line, as written
    y.indent(mapping=2, sequence=4, offset=2)
    return y


def advised_text(
    path: str, variant_name: str, nodes: list[str], levers: tuple[str, ...] = ()
) -> tuple[str, list[str]]:
    """The text of the scenario at `path` with variant `advised`: `variant_name` with `nodes` in
    place (and the `levers` named, e.g. "optimizer_in_backward"); and a note for each node left
    out. A node whose module other nodes also call is switched in a copy of the module made for
    it, unless the module has parameters or buffers (a copy would have its own): that node is
    left out. Raises InvalidInput when the file cannot take the variant."""
    from ruamel.yaml.comments import CommentedMap

    from memprof.scenario import load_scenario

    if str(path).lower().endswith(".py"):
        raise InvalidInput(f"{path}: --write edits YAML scenarios, not Python ones")
    loaded = load_scenario(path, check_shapes=False)
    with open(path, encoding="utf-8") as fh:
        text = fh.read()
    y = _yaml()
    data = y.load(text)
    if "matrix" in data:
        raise InvalidInput(
            f"{path}: --write adds a named variant, and this scenario's variants come from "
            "matrix:; write the advised nodes' inplace values by hand"
        )
    variants = data.get("variants")
    if variants is not None and ADVISED in variants:
        raise InvalidInput(
            f"{path}: already has a variant named {ADVISED!r}; rename it or write to a new file"
        )
    specs = {v.name: v.spec for v in loaded.variants}
    chosen = specs[variant_name]
    index = {n.id: i for i, n in enumerate(chosen.program)}
    parsed = [parse_id(n) for n in nodes]
    parsed = [(nid, path) for nid, path in parsed if nid in index]
    callers: dict[str, list[str]] = {}
    for n in chosen.program:
        if isinstance(n, ModuleCall):
            callers.setdefault(n.module, []).append(n.id)

    # the places to switch: (path into the data, a name for a new parameter, value per variant)
    targets: list[tuple[tuple, str, dict[str, Any]]] = []
    done_modules: set[str] = set()
    whole = {nid for nid, path in parsed if not path}
    copies: dict[str, str] = {}
    notes: list[str] = []
    for nid, path in parsed:
        i = index[nid]
        node = chosen.program[i]
        if isinstance(node, ModuleCall):
            module = node.module
            shared = len(callers[module]) > 1 and (path or not set(callers[module]) <= whole)
            if shared and _has_state(chosen.modules[module], chosen.dtype):
                others = ", ".join(n for n in callers[module] if n != nid)
                notes.append(
                    f"{nid}{''.join(f'[{j}]' for j in path)} is not in variant {ADVISED}: module "
                    f"{module} is also called by {others} and has parameters, which a copy for "
                    f"{nid} would not share; set its inplace by hand"
                )
                continue
            if path:  # a layer of a Sequential: in the node's own copy if others call it
                values = {
                    name: bool(layer_spec(s.modules[module], path).inplace)
                    for name, s in specs.items()
                }
                if len(callers[module]) > 1:
                    if nid not in copies:
                        copies[nid] = _copy_module(data, module, nid, i)
                    module = copies[nid]
                where = ("modules", module) + sum((("layers", j) for j in path), ()) + ("inplace",)
                suffix = "_".join(str(j) for j in path)
                targets.append((where, f"advise_{nid}_{suffix}", values))
                continue
            if module in done_modules:
                continue
            values = {name: bool(s.modules[module].inplace) for name, s in specs.items()}
            if set(callers[module]) <= whole:
                done_modules.add(module)
                targets.append((("modules", module, "inplace"), f"advise_{module}", values))
            else:
                copy_name = _copy_module(data, module, nid, i)
                targets.append((("modules", copy_name, "inplace"), f"advise_{nid}", values))
        else:
            values = {
                name: bool(getattr(s.program[i], "inplace", False)) for name, s in specs.items()
            }
            targets.append((("program", i, "inplace"), f"advise_{nid}", values))

    overrides: dict[str, Any] = {}  # variant parameters advised sets to a new value
    if "optimizer_in_backward" in levers:
        notes += _in_backward_targets(data, chosen, specs, variant_name, targets, overrides)

    refs = _references(data)
    target_paths = {t[0] for t in targets}
    advised_params: dict[str, Any] = {}
    new_params: dict[str, dict[str, Any]] = {}
    for where, new_name, values in targets:
        raw = _get(data, where)
        param = _param_name(raw)
        if param is not None and refs.get(param, set()) <= target_paths:
            advised_params[param] = True
            continue
        name = _free_name(refs, new_name)
        refs[name] = {where}
        _set(data, where, f"${name}")
        new_params[name] = values
        advised_params[name] = True

    if variants is None:  # one implicit variant, `default`
        from memprof.scenario.variants import DEFAULT_VARIANT

        variants = data["variants"] = CommentedMap()
        variants[DEFAULT_VARIANT] = CommentedMap()
        variants[DEFAULT_VARIANT].fa.set_flow_style()
    flow = all(getattr(v, "fa", None) is None or v.fa.flow_style() for v in variants.values())
    for vname in list(variants):
        if variants[vname] is None:
            variants[vname] = CommentedMap()
            if flow:
                variants[vname].fa.set_flow_style()
        for pname, values in new_params.items():
            variants[vname][pname] = values.get(vname, False)
    advised = CommentedMap(copy.deepcopy(dict(variants[variant_name] or {})))
    for pname, value in advised_params.items():
        advised[pname] = value
    for pname, value in overrides.items():
        advised[pname] = value
    if flow:
        advised.fa.set_flow_style()
    variants[ADVISED] = advised
    out = io.StringIO()
    y.dump(data, out)
    return out.getvalue(), notes


def _in_backward_targets(data, chosen, specs, variant_name, targets, overrides) -> list[str]:
    """Every optimizer phase of variant `advised` stepped in backward (`in_backward: true`): a
    phase written `optimizer: $p` takes advised's own copy of p's mapping with the key set
    (into `overrides`); one written as a mapping gets its `in_backward` as a place to switch
    (into `targets`, as a node's inplace). Returns notes for phases it cannot reach."""
    phases = data.get("phases")
    if not isinstance(phases, list):
        return ["the optimizer is not stepped in backward in variant advised: phases is not a "
                "list in the file; set in_backward: true by hand"]  # fmt: skip
    raw_variants = data.get("variants") or {}
    raw_chosen = raw_variants.get(variant_name) or {}
    notes: list[str] = []
    for i, phase in enumerate(phases):
        if not isinstance(phase, dict) or "optimizer" not in phase:
            continue
        raw = phase["optimizer"]
        param = _param_name(raw)
        if param is not None:
            value = raw_chosen.get(param)
            if not isinstance(value, dict):
                notes.append(
                    f"phase {i} (optimizer: {raw}) is not stepped in backward in variant "
                    f"{ADVISED}: {param} is not a mapping there; set in_backward: true by hand"
                )
                continue
            new = copy.deepcopy(value)
            new["in_backward"] = True
            overrides[param] = new
        elif isinstance(raw, dict):
            values = {name: bool(s.phases[i].optimizer.in_backward) for name, s in specs.items()}
            targets.append(
                (("phases", i, "optimizer", "in_backward"), "advise_in_backward", values)
            )
    return notes


def write_advised(
    path: str, variant_name: str, nodes: list[str], out_path: str, levers: tuple[str, ...] = ()
) -> list[str]:
    """Write `advised_text` to `out_path`, check that the result loads as a scenario, and return
    the notes on nodes left out."""
    from memprof.scenario import load_scenario

    text, notes = advised_text(path, variant_name, nodes, levers)
    tmp = f"{out_path}.tmp{os.getpid()}"
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, out_path)
    except OSError as exc:
        raise InvalidInput(f"{out_path}: cannot write: {exc.strerror}") from None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    load_scenario(out_path, variants=[ADVISED], check_shapes=False)
    return notes


def _has_state(module_spec, dtype: str) -> bool:
    """Whether a module (a Sequential: any layer) has parameters or buffers (built on meta)."""
    import engine
    from memprof.scenario.build import build_module

    module = build_module(engine, module_spec, "meta", dtype)
    if any(True for _ in module.parameters()):
        return True
    buffers = getattr(module, "buffers", None)
    return buffers is not None and any(True for _ in buffers())


def _copy_module(data, module: str, nid: str, index: int) -> str:
    """Copy module `module` as `<module>_<node>` right after it; node `index` calls the copy."""
    mods = data["modules"]
    copy_name = _free_name(mods, f"{module}_{nid}")
    mods.insert(list(mods).index(module) + 1, copy_name, copy.deepcopy(mods[module]))
    data["program"][index]["module"] = copy_name
    return copy_name


def _param_name(raw: Any) -> str | None:
    from memprof.scenario.model import PARAM_REF_RE

    if isinstance(raw, str):
        m = PARAM_REF_RE.match(raw)
        if m:
            return m.group(1)
    return None


def _references(data) -> dict[str, set]:
    """Parameter name -> paths of the values written `$name` (outside variants and matrix)."""
    found: dict[str, set] = {}

    def walk(value, where):
        if isinstance(value, dict):
            for k, v in value.items():
                if not where and k in ("variants", "matrix"):
                    continue
                walk(v, where + (k,))
        elif isinstance(value, list):
            for i, v in enumerate(value):
                walk(v, where + (i,))
        else:
            name = _param_name(value)
            if name is not None:
                found.setdefault(name, set()).add(where)

    walk(data, ())
    return found


def _get(data, where: tuple):
    for key in where[:-1]:
        data = data[key]
    return data.get(where[-1]) if hasattr(data, "get") else None


def _set(data, where: tuple, value) -> None:
    for key in where[:-1]:
        data = data[key]
    data[where[-1]] = value


def _free_name(taken, name: str) -> str:
    out, n = name, 2
    while out in taken:
        out, n = f"{name}_{n}", n + 1
    return out
