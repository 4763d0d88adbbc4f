"""Turn a validated scenario into engine objects: inputs, modules, optimizers, node calls; and
the name bindings of a program with their stale-read check.

Used by the meta dry run (shapes.py) and by the runner, which share one interpreter of the
forward program (`run_forward`); imports the engine lazily.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from memprof.scenario.catalog import OPS, module_kwargs
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
    kwargs = module_kwargs(spec.model_dump(exclude={"type"}, exclude_unset=True))
    params = _init_params(cls)
    if "device" in params:
        kwargs["device"] = device
    if "dtype" in params:
        kwargs["dtype"] = getattr(engine, dtype_name)
    module = cls(**kwargs)
    if "device" not in params and any(True for _ in module.parameters()):
        module = module.to(device=device, dtype=getattr(engine, dtype_name))
    return module


def _init_params(cls) -> dict:
    try:
        return dict(inspect.signature(cls.__init__).parameters)
    except (TypeError, ValueError):
        return {}


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


def make_optimizer(engine, spec, modules: dict):
    params = module_parameters(modules, spec.params)
    kwargs = spec.model_dump(exclude={"type", "params", "zero_grad"})
    if "betas" in kwargs:
        kwargs["betas"] = tuple(kwargs["betas"])
    if not kwargs.get("amsgrad", True):
        kwargs.pop("amsgrad")
    return getattr(engine.optim, spec.type)(params, **kwargs)


def call_node(node, tensors: list, modules: dict):
    """Run one program node on engine tensors; returns its result."""
    if isinstance(node, ModuleCall):
        return modules[node.module](*tensors)
    opdef = OPS[node.op]
    args = node.args.model_dump(exclude_unset=True)
    return opdef.call(tensors, args, bool(getattr(node, "inplace", False)))


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
    """A node returned something other than a tensor."""


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


def run_forward(program, bindings: Bindings, modules: dict, hooks: ProgramHooks) -> None:
    """Run a scenario's forward program once: the one interpreter of scenario programs.

    Each node reads its inputs from `bindings` (reporting stale reads first), runs, has its
    in-place writes noted, and binds its result under its name.
    """
    for index, node in enumerate(program):
        for name in node.inputs:
            stale = bindings.stale(node.id, name)
            if stale is not None:
                hooks.stale(index, node, stale)
        tensors = [bindings.values[n] for n in node.inputs]
        before = bindings.versions(tensors)
        with hooks.node(index, node, tensors):
            out = call_node(node, tensors, modules)
            if not _is_tensor(out):
                raise NotATensor(
                    f"expected node {node.id!r} to return a tensor, found {type(out).__name__}"
                )
            wrote = bindings.note_writes(node.id, tensors, before)
            hooks.done(index, node, tensors, out, wrote)
        bindings.bind(node.out_name, out)


def _is_tensor(value) -> bool:
    import engine

    return isinstance(value, engine.Tensor)
