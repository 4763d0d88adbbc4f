"""Turn a validated scenario into engine objects: inputs, modules, optimizers, node calls; and
the name bindings of a program with their stale-read check.

Used by the meta dry run (shapes.py) and by the runner, which share one interpreter of the
forward program (`run_forward`); imports the engine lazily.
"""

from __future__ import annotations

import functools
import inspect
import itertools
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from memprof.scenario.catalog import MODULES, OPS, module_kwargs, suggest
from memprof.scenario.model import InputSpec, ModuleCall


def resolve_device(name: str) -> str:
    """`auto` is cuda when CuPy sees a GPU, else cpu; other names pass through."""
    if name != "auto":
        return name
    from engine.device import cuda_available

    return "cuda" if cuda_available() else "cpu"


def make_input(engine, spec: InputSpec, dtype_name: str, device: str):
    """Create one input tensor as its spec says (its bytes are one storage)."""
    dtype = getattr(engine, spec.dtype or dtype_name)
    shape = tuple(spec.shape)
    kw = {"dtype": dtype, "device": device}
    init = spec.init
    if init in ("rand", "randn", "zeros", "ones", "empty"):
        t = getattr(engine, init)(shape, **kw)
    elif init == "full":
        t = engine.full(shape, spec.value, **kw)
    elif init == "arange":
        n = 1
        for s in shape:
            n *= s
        t = engine.arange(n, **kw).reshape(shape)
    elif init == "randint":
        if hasattr(engine, "randint"):
            t = engine.randint(0, spec.high, shape, **kw)
        else:  # uniform floats in [0, high) truncated: the same distribution
            t = engine.rand(shape, device=device).mul_(spec.high).to(dtype)
    else:  # pragma: no cover - the model only admits the inits above
        raise ValueError(f"unknown init {init!r}")
    if spec.requires_grad:
        t.requires_grad_(True)
    return t


def build_module(engine, spec, device: str, dtype_name: str):
    """nn.<type>(**args) on `device` with the scenario's dtype (parameters as PyTorch makes them)."""
    if spec.type == "Sequential":
        return engine.nn.Sequential(
            *(build_module(engine, s, device, dtype_name) for s in spec.layers)
        )
    cls = getattr(engine.nn, spec.type)
    nested = MODULES[spec.type].module_args
    # the arguments the spec sets, as validated (an options dataclass stays one: a dump would
    # make it a mapping)
    set_args = spec.model_fields_set - {"type", *nested}
    kwargs = module_kwargs({name: getattr(spec, name) for name in set_args})
    for name in nested:  # a module argument (TransformerEncoder's encoder_layer) is built first
        sub = getattr(spec, name)
        if sub is not None:
            kwargs[name] = build_module(engine, sub, device, dtype_name)
    params = _init_params(cls)
    if "device" in params:
        kwargs["device"] = device
    if "dtype" in params:
        kwargs["dtype"] = getattr(engine, dtype_name)
    module = cls(**kwargs)
    if "device" not in params and any(True for _ in module.parameters()):
        module = module.to(device=device, dtype=getattr(engine, dtype_name))
    return module


@functools.cache
def _init_params(cls) -> frozenset:
    """The names of cls.__init__'s parameters (once per class: GPT-2 builds 380 modules)."""
    try:
        return frozenset(inspect.signature(cls.__init__).parameters)
    except (TypeError, ValueError):
        return frozenset()


def module_parameters(modules: dict, names: list[str] | None = None) -> list:
    """Parameters of the named modules (all, in declaration order, by default), each once."""
    seen, params = set(), []
    for name in names or list(modules):
        for p in modules[name].parameters():
            if id(p) not in seen:
                seen.add(id(p))
                params.append(p)
    return params


def named_parameters(modules: dict) -> list[tuple[str, Any]]:
    """(`module.param`, tensor) for every parameter and buffer, for attributing their storages."""
    out = []
    for mname, module in modules.items():
        for pname, p in module.named_parameters():
            out.append((f"{mname}.{pname}", p))
        buffers = getattr(module, "named_buffers", None)
        if buffers is not None:
            for bname, b in buffers():
                out.append((f"{mname}.{bname}", b))
    return out


def _optimizer_kwargs(spec) -> dict:
    kwargs = spec.model_dump(exclude={"type", "params", "zero_grad", "in_backward"})
    if "betas" in kwargs:
        kwargs["betas"] = tuple(kwargs["betas"])
    if not kwargs.get("amsgrad", True):
        kwargs.pop("amsgrad")
    return kwargs


def make_optimizer(engine, spec, modules: dict):
    params = module_parameters(modules, spec.params)
    return getattr(engine.optim, spec.type)(params, **_optimizer_kwargs(spec))


def optimizers_in_backward(engine, spec, modules: dict, around=None) -> dict:
    """PyTorch's "optimizer step in backward": one optimizer per parameter of `spec`, stepped
    and (with spec.zero_grad) zeroed by a post-accumulate-grad hook on the parameter, so each
    gradient is freed as soon as it is used. Returns {parameter: its optimizer}.

    around(action): a context manager the hook runs "step" and "zero_grad" in (the runner's
    attribution), or None."""
    kind, kwargs = getattr(engine.optim, spec.type), _optimizer_kwargs(spec)
    opts = {p: kind([p], **kwargs) for p in module_parameters(modules, spec.params)}
    zero = spec.zero_grad

    def hook(p) -> None:
        opt = opts[p]
        if around is None:
            opt.step()
            if zero:
                opt.zero_grad(set_to_none=True)
            return
        with around("step"):
            opt.step()
        if zero:
            with around("zero_grad"):
                opt.zero_grad(set_to_none=True)

    for p in opts:
        p.register_post_accumulate_grad_hook(hook)
    return opts


def call_node(
    node,
    tensors: list,
    modules: dict,
    kwargs: dict | None = None,
    checkpointed: bool = False,
    autocast: tuple[str, str | None] | None = None,
    device: str | None = None,
):
    """Run one program node on engine tensors; returns its result.

    kwargs: a module node's forward arguments (`args`, mask names already resolved to tensors);
    checkpointed: run the module call under engine.utils.checkpoint (non-reentrant), its
    recomputation under `autocast` (device type, dtype) as PyTorch's checkpoint restores it.
    """
    if isinstance(node, ModuleCall):
        module = modules[node.module]
        if checkpointed:
            from engine.utils.checkpoint import checkpoint

            def run(*ts, **kw):
                with autocast_region(autocast):  # the recomputation runs as the forward did
                    return module(*ts, **kw)

            return checkpoint(run, *tensors, use_reentrant=False, **(kwargs or {}))
        return module(*tensors, **(kwargs or {}))
    opdef = OPS[node.op]
    args = node.args.model_dump(exclude_unset=True)
    inplace = bool(getattr(node, "inplace", False))
    if not tensors and device is not None:  # a factory (randint): on the variant's device
        import engine

        before = engine.get_default_device()
        engine.set_default_device(device)
        try:
            return opdef.call(tensors, args, inplace)
        finally:
            engine.set_default_device(before)
    return opdef.call(tensors, args, inplace)


def describe_tensor(name: str, t) -> str:
    try:
        dtype = str(t.dtype).replace("engine.", "")
        return f"{name} {list(t.shape)} {dtype}"
    except Exception:
        return name


# --- name bindings and stale reads ------------------------------------------------------------


@dataclass(frozen=True)
class StaleRead:
    """Node `reader` reads `tensor`, whose storage `writers` overwrote in place after it was bound."""

    reader: str
    tensor: str
    writers: tuple[str, ...]

    @property
    def message(self) -> str:
        who = self.writers[-1]
        if len(self.writers) == 1:
            by = f"node {who}"
        else:
            by = "nodes " + ", ".join(self.writers)
        return (
            f"node {self.reader} reads {self.tensor}, which {by} overwrote in place; "
            f"it sees {who}'s values"
        )


def storage_key(t) -> int:
    """Identity of a tensor's storage (shared by views and detached aliases)."""
    storage = t.untyped_storage()
    return getattr(storage, "id", None) or id(storage)


class Bindings:
    """The program's names: what each is bound to, the storage version at binding, and which node
    wrote each storage in place since: after `h = relu_(x1)`, `conv2(x1)` reads h's values.
    """

    def __init__(self):
        self.values: dict[str, Any] = {}
        self._bound_version: dict[str, int] = {}
        self._writes: list[tuple[int, int, str]] = []  # (storage key, version after, node id)

    def bind(self, name: str, tensor) -> None:
        self.values[name] = tensor
        self._bound_version[name] = tensor._version

    def drop(self, names) -> None:
        for n in names:
            self.values.pop(n, None)
            self._bound_version.pop(n, None)

    def stale(self, reader: str, name: str) -> StaleRead | None:
        t = self.values[name]
        v0 = self._bound_version[name]
        if t._version == v0:
            return None
        key = storage_key(t)
        writers: list[str] = []
        for sid, version, node in self._writes:
            if sid == key and version > v0 and node not in writers:
                writers.append(node)
        return StaleRead(reader, name, tuple(writers) or ("(unknown)",))

    def versions(self, tensors: list) -> list[int]:
        return [t._version for t in tensors]

    def note_writes(self, node_id: str, tensors: list, before: list[int]) -> bool:
        """Record in-place writes of a node (inputs whose version moved); True if there were any."""
        wrote = False
        for t, v in zip(tensors, before, strict=True):
            if t._version != v:
                self._writes.append((storage_key(t), t._version, node_id))
                wrote = True
        return wrote


# --- the interpreter --------------------------------------------------------------------------


class NotATensor(TypeError):
    """A node returned something other than a tensor (or than as many tensors as `out` names)."""


class ProgramHooks:
    """What a caller of `run_forward` does around each node; the defaults do nothing.

    The meta dry run (shapes.py) turns stale reads and failures into problems in the file; the
    runner (runner/execute.py) records each node as a step and reports stale reads as warnings.
    """

    def stale(self, index: int, node, stale: StaleRead) -> None:
        """Node `index` reads a name overwritten in place since it was bound."""

    @contextmanager
    def node(self, index: int, node, tensors: list) -> Iterator[None]:
        """Around the call of node `index` (an exception from the node passes through)."""
        yield

    def done(self, index: int, node, tensors: list, out, wrote: bool) -> None:
        """Inside `node`'s block, after the call: `out` is the result, `wrote` whether the node
        wrote any input in place. The result is bound to the node's name right after."""


@dataclass(frozen=True)
class ForwardOptions:
    """The scenario-level training levers a forward program runs with.

    checkpoint_modules: module names whose every call is checkpointed; regions: (first, last)
    node indexes run as one checkpointed function; autocast: (device type, dtype name or None
    for the device's default) of the autocast region around the program, or None; needed:
    names read after the forward program (the loss, observed values), which a region keeps.
    """

    checkpoint_modules: frozenset = frozenset()
    regions: tuple[tuple[int, int], ...] = ()
    autocast: tuple[str, str | None] | None = None
    needed: frozenset = frozenset()
    device: str | None = None  # where an op with no tensor inputs (randint) makes its result


class LeverError(ValueError):
    """A checkpoint region that names no module or node, or overlaps another."""

    def __init__(self, index: int, message: str):
        super().__init__(message)
        self.index = index


def forward_options(spec, device: str = "meta") -> ForwardOptions:
    """The levers of a (substituted) scenario: `checkpoint:` resolved to module names and node
    ranges, `autocast:` to its device type and dtype. Raises LeverError for a bad region."""
    ids = {n.id: i for i, n in enumerate(spec.program)}
    mods, regions = set(), []
    ckpt = spec.checkpoint
    for k, region in enumerate(ckpt.active if ckpt is not None else []):
        first, sep, last = region.partition("..")
        if not sep:
            if region in spec.modules:
                mods.add(region)
                continue
            if region in ids:  # one node: a region of one
                first = last = region
            else:
                raise LeverError(
                    k,
                    f"expected a module name ({', '.join(spec.modules) or 'none declared'}) or a "
                    f"node range FIRST..LAST{suggest(region, [*spec.modules, *ids])}, "
                    f"found {region!r}",
                )
        for end in (first, last):
            if end not in ids:
                raise LeverError(
                    k, f"expected a node id in {region!r}{suggest(end, ids)}, found {end!r}"
                )
        a, b = ids[first], ids[last]
        if a > b:
            raise LeverError(k, f"expected {first!r} to come before {last!r} in the program")
        for a2, b2 in regions:
            if a <= b2 and a2 <= b:
                raise LeverError(
                    k,
                    f"expected checkpoint regions apart, found {region!r} overlapping "
                    f"{spec.program[a2].id}..{spec.program[b2].id}",
                )
        regions.append((a, b))
    ac = spec.autocast
    autocast = None
    if ac is not None and ac.active:
        dev = device.split(":")[0]
        autocast = (dev if dev in ("cpu", "cuda", "meta") else "cuda", ac.dtype)
    needed = {p.backward for p in spec.phases if hasattr(p, "backward")}
    for exp in spec.expect.values():
        needed.update(k.split(".")[0] for k in exp.values or {})
    return ForwardOptions(
        frozenset(mods), tuple(sorted(regions)), autocast, frozenset(needed), device
    )


@contextmanager
def autocast_region(autocast: tuple[str, str | None] | None) -> Iterator[None]:
    """engine.autocast(device_type, dtype) around a block, or nothing when `autocast` is None."""
    if autocast is None:
        yield
        return
    import engine
    from engine.amp import autocast as engine_autocast

    device_type, dtype = autocast
    with engine_autocast(device_type, dtype=getattr(engine, dtype) if dtype else None):
        yield


def results(node, out) -> list[tuple[str, Any]]:
    """(name, tensor) for each name the node binds to its result (a tuple result is bound by
    position, a nested tuple by a nested list; None values and `_` bind nothing)."""
    if isinstance(node.out, list):
        return _bind(node.out, out)
    return [(node.out_name, out)]


def _bind(names: list, values) -> list[tuple[str, Any]]:
    pairs = []
    for n, v in zip(names, values, strict=True):
        if isinstance(n, list):
            pairs += _bind(n, v)
        elif n != "_" and v is not None:
            pairs.append((n, v))
    return pairs


def bound_names(program) -> list[str]:
    """Every name a program binds (what a step releases when it ends)."""
    return [n for node in program for n in node.out_names]


def _spelled(names: list) -> str:
    """An `out` list as the YAML spells it: [y, [h, c]]."""
    return "[" + ", ".join(_spelled(n) if isinstance(n, list) else n for n in names) + "]"


def _suggested(value) -> str:
    """The `out` list that binds `value`, a tuple (nested tuples as nested lists)."""
    count = itertools.count()

    def walk(v):
        return [walk(e) if isinstance(e, (tuple, list)) else f"y{next(count)}" for e in v]

    return _spelled(walk(value))


def _check_result(node, out) -> None:
    if isinstance(out, (tuple, list)) and not isinstance(node.out, list):
        raise NotATensor(
            f"expected node {node.id!r} to return a tensor, found a tuple of {len(out)} values; "
            f"bind them with a list: out: {_suggested(out)}"
        )
    if isinstance(node.out, list):
        _check_values(node, node.out, out)
        return
    if not _is_tensor(out):
        raise NotATensor(
            f"expected node {node.id!r} to return a tensor, found {type(out).__name__}"
        )


def _check_values(node, names: list, out) -> None:
    """`out` (a tuple, maybe nested) matches the `out` list `names`, and holds tensors."""
    if not isinstance(out, (tuple, list)):
        raise NotATensor(
            f"expected node {node.id!r} to return {len(names)} values for out: "
            f"{_spelled(names)}, found one {type(out).__name__}"
        )
    if len(out) != len(names):
        raise NotATensor(
            f"expected node {node.id!r} to return {len(names)} values for out: "
            f"{_spelled(names)}, found {len(out)}"
        )
    for n, v in zip(names, out, strict=True):
        if isinstance(n, list):
            _check_values(node, n, v)
        elif isinstance(v, (tuple, list)):
            raise NotATensor(
                f"expected node {node.id!r} to return tensors, found a tuple of {len(v)} "
                f"values for {n!r}; bind them with a nested list: out: "
                f"{_spelled([_suggested(v) if m == n else m for m in names])}"
            )
        elif v is not None and not _is_tensor(v):
            raise NotATensor(
                f"expected node {node.id!r} to return tensors, found {type(v).__name__}"
            )


def _module_kwargs(node, values: dict) -> dict:
    """A module node's `args`, mask arguments resolved from tensor names."""
    if not isinstance(node, ModuleCall) or not node.args:
        return {}
    return {
        k: (values[v] if isinstance(v, str) and v in values else v) for k, v in node.args.items()
    }


def _tensor_arg_names(node, values: dict) -> list[str]:
    if not isinstance(node, ModuleCall):
        return []
    return [v for v in node.args.values() if isinstance(v, str) and v in values]


def parameter(modules: dict, ref: str):
    """The parameter `MODULE.PARAM` names (`wte.weight`, `block.attn.in_proj_weight`)."""
    mname, _, pname = ref.partition(".")
    module = modules.get(mname)
    if module is None:
        raise NotATensor(
            f"expected a module's parameter, found {ref!r}: no module {mname!r}"
            f"{suggest(mname, modules)}"
        )
    params = dict(module.named_parameters())
    if pname not in params:
        raise NotATensor(
            f"expected a parameter of module {mname} ({', '.join(params) or 'it has none'})"
            f"{suggest(pname, params)}, found {pname!r}"
        )
    return params[pname]


def _lookup(values: dict, modules: dict, node, name: str):
    if name in values:
        return values[name]
    if "." in name:
        return parameter(modules, name)
    raise NotATensor(
        f"expected node {node.id!r} to read a tensor, found {name!r} bound to no tensor "
        f"(its node returned None in its place)"
    )


def _run_node(index, node, bindings, modules, hooks, options, checkpointed: bool) -> None:
    for name in node.inputs:
        if name not in bindings.values:
            continue
        stale = bindings.stale(node.id, name)
        if stale is not None:
            hooks.stale(index, node, stale)
    tensors = [_lookup(bindings.values, modules, node, n) for n in node.inputs]
    kwargs = _module_kwargs(node, bindings.values)
    before = bindings.versions(tensors)
    with hooks.node(index, node, tensors):
        out = call_node(
            node, tensors, modules, kwargs, checkpointed, options.autocast, options.device
        )
        _check_result(node, out)
        wrote = bindings.note_writes(node.id, tensors, before)
        hooks.done(index, node, tensors, out, wrote)
    for name, value in results(node, out):
        bindings.bind(name, value)


def _run_region(program, first: int, last: int, bindings, modules, hooks, options) -> None:
    """Nodes first..last as one function under engine.utils.checkpoint (non-reentrant): the first
    call runs them as usual (hooks, bindings); the recomputation in backward reruns them on the
    tensors they read at the start, in the forward's autocast state, and binds nothing.

    The region is a function: the names it binds that nothing after it reads (its locals) are
    released when it returns, so that only what it returns and what backward needs stay alive,
    as when PyTorch code checkpoints a block."""
    from engine.utils.checkpoint import checkpoint

    nodes = program[first : last + 1]
    # in the order the nodes bind them: that is the order the region's locals are released in
    # (a set's order would change with the process's string hashing, and the report with it)
    made: dict[str, None] = {}
    outside: dict[str, Any] = {}
    for node in nodes:
        for name in [*node.inputs, *_tensor_arg_names(node, bindings.values)]:
            if name not in made and name in bindings.values:
                outside.setdefault(name, bindings.values[name])
        made.update(dict.fromkeys(node.out_names))
    calls = [0]

    def region():
        calls[0] += 1
        if calls[0] == 1:
            for i, node in enumerate(nodes, start=first):
                _run_node(i, node, bindings, modules, hooks, options, False)
            read_later = set(options.needed)
            for node in program[last + 1 :]:
                read_later.update(node.inputs)
                read_later.update(_tensor_arg_names(node, bindings.values))
            bindings.drop([n for n in made if n not in read_later])
            return None
        local = dict(outside)
        with autocast_region(options.autocast):
            for node in nodes:
                out = call_node(
                    node,
                    [_lookup(local, modules, node, n) for n in node.inputs],
                    modules,
                    _module_kwargs(node, local),
                    device=options.device,
                )
                for name, value in results(node, out):
                    local[name] = value
        return None

    checkpoint(region, use_reentrant=False)


def run_forward(
    program, bindings: Bindings, modules: dict, hooks: ProgramHooks, options=None
) -> None:
    """Run a scenario's forward program once: the one interpreter of scenario programs.

    Each node reads its inputs from `bindings` (reporting stale reads first), runs, has its
    in-place writes noted, and binds its result under its name (a tuple result under the names
    of its `out` list). `options` (forward_options) adds the scenario's activation checkpointing
    and autocast region.
    """
    options = options or ForwardOptions()
    starts = {a: b for a, b in options.regions}
    with autocast_region(options.autocast):
        index = 0
        while index < len(program):
            if index in starts:
                _run_region(program, index, starts[index], bindings, modules, hooks, options)
                index = starts[index] + 1
                continue
            node = program[index]
            checkpointed = (
                isinstance(node, ModuleCall) and node.module in options.checkpoint_modules
            )
            _run_node(index, node, bindings, modules, hooks, options, checkpointed)
            index += 1


def _is_tensor(value) -> bool:
    import engine

    return isinstance(value, engine.Tensor)
