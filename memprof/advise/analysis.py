"""What a recorded run says about each in-place candidate: the facts and the verdict.

A run of the variant through the runner (`AdviceRun`, the runner's own `_Run` with three hooks
more) records, for the first iteration of the forward program:
- which storages each node read (its inputs; a view or a detached alias shares its base's
  storage, so reading a view is reading the storage);
- which node saved which storage for backward, and at what version (the autograd nodes each
  program node created, walked from its result);
- per node, its first input (the operand an in-place form overwrites): leaf, requires grad,
  scenario input, parameter or buffer, shape, dtype, strides;
and for every iteration the values of every tensor the program binds (right after the node that
made it), every gradient after backward and every parameter and buffer at the end, for the proof.

`verdicts()` then decides, for every node that runs out of place and has an in-place form, the
first that applies of: leaf, input, shape or dtype (or self-overlap), stale read, saved for
backward; otherwise safe (docs/advise.md).
"""

from __future__ import annotations

import weakref
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from memprof.runner.execute import _Run
from memprof.scenario.build import named_parameters, storage_key
from memprof.scenario.catalog import OPS
from memprof.scenario.model import ModuleCall

# the reasons, in the order they are checked; `reason` texts start with these words
LEAF = "leaf"
INPUT = "input"
SHAPE = "shape or dtype"
STALE = "stale read"
SAVED = "saved for backward"
REFUTED = "refuted by the re-run"


@dataclass
class Operand:
    """The tensor an in-place form of a node would overwrite (its first input)."""

    name: str
    storage: int
    version: int
    shape: tuple
    dtype: str
    nbytes: int
    leaf_requires_grad: bool
    view_of_leaf: bool
    self_overlap: bool


@dataclass
class NodeFacts:
    """What one program node, or one layer of a Sequential a node calls (id `node[i]`), did in
    the first iteration. `index` is its place in the order things ran."""

    index: int
    node_id: str
    op: str  # the op name, or the module's type for a module call
    reads: list[tuple[str, int]]  # (name, storage) of each input
    candidate: bool = False  # runs out of place and has an in-place form
    operand: Operand | None = None
    out_shape: tuple | None = None
    out_dtype: str | None = None
    saves: list[tuple[int, int, str]] = field(default_factory=list)  # (storage, version, grad fn)


def candidate_op(spec, node) -> str | None:
    """The op (or module type) of a program node that runs out of place but has an in-place
    form (a Sequential's layers are candidates of their own, `node[i]`)."""
    if isinstance(node, ModuleCall):
        mspec = spec.modules[node.module]
        if getattr(mspec, "inplace", None) is False:
            return mspec.type
        return None
    opdef = OPS.get(node.op)
    if opdef is not None and opdef.inplace and not getattr(node, "inplace", False):
        return node.op
    return None


def _storage_id(storage) -> int:
    return getattr(storage, "id", None) or id(storage)


def _snapshot(t):
    """A copy of a tensor's values as numpy (None on meta: shapes only)."""
    import numpy as np

    kind = t.device.type
    if kind == "meta":
        return None
    data = t._data
    if kind == "cuda":
        return data.get()
    return np.array(data, copy=True)


def make_facts(order: int, fid: str, op: str, candidate: bool, names, tensors) -> NodeFacts:
    """The facts of a node (or layer, or module call) about to run on `tensors`."""
    facts = NodeFacts(
        order,
        fid,
        op,
        [(n, storage_key(t)) for n, t in zip(names, tensors, strict=True)],
        candidate,
    )
    if tensors:
        t = tensors[0]
        base = t._base
        facts.operand = Operand(
            name=names[0],
            storage=storage_key(t),
            version=t._version,
            shape=tuple(t.shape),
            dtype=str(t.dtype).replace("engine.", ""),
            nbytes=t.numel() * t.element_size(),
            leaf_requires_grad=bool(t.requires_grad and t.grad_fn is None),
            view_of_leaf=bool(base is not None and base.requires_grad and base.grad_fn is None),
            self_overlap=any(
                st == 0 and sz > 1 for st, sz in zip(t.stride(), t.shape, strict=False)
            ),
        )
    return facts


def record_result(facts: NodeFacts, outs: list, seen: weakref.WeakSet) -> None:
    """The result's shape and dtype, and what the autograd nodes the call made saved."""
    facts.out_shape = tuple(outs[0].shape)
    facts.out_dtype = str(outs[0].dtype).replace("engine.", "")
    for o in outs:
        for fn in new_grad_fns(o.grad_fn, seen):
            for saved in getattr(fn, "saved", None) or ():
                storage = getattr(saved, "storage", None)
                if storage is not None:
                    facts.saves.append((_storage_id(storage), saved.version, fn.name()))


def new_grad_fns(fn, seen: weakref.WeakSet) -> list:
    """The autograd nodes reachable from `fn` not in `seen` (added to it): what one call made."""
    found, stack = [], [fn]
    while stack:
        f = stack.pop()
        if f is None or f in seen:
            continue
        seen.add(f)
        found.append(f)
        for edge in getattr(f, "next_functions", None) or ():
            if edge is not None:
                stack.append(edge[0])
    return found


class AdviceRun(_Run):
    """A run of one variant that also records the facts advice needs and the values to compare."""

    def __init__(self, variant, switch: frozenset = frozenset()):
        super().__init__(variant)
        self.switch = switch  # (node id, layer path) of module calls to run in place
        self.facts: dict[str, NodeFacts] = {}
        self.values: dict[tuple, Any] = {}
        self._seen_fns: weakref.WeakSet = weakref.WeakSet()
        self._order = 0
        self._names: dict[int, str] = {}  # storage -> the name or layer id that made it
        self._handles: list = []

    def setup(self) -> None:
        super().setup()
        for name, mspec in self.spec.modules.items():
            if getattr(mspec, "layers", None):
                self._hook_layers(self.modules[name], mspec, ())

    def finish(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        super().finish()

    # the forward program's hooks
    @contextmanager
    def node(self, index, node, tensors):
        if self.k == 0:
            spec = self.spec
            if isinstance(node, ModuleCall):
                op = spec.modules[node.module].type
            else:
                op = getattr(node, "op", "?")
            for n, t in zip(node.inputs, tensors, strict=True):
                self._names.setdefault(storage_key(t), n)
            self._record(node.id, op, candidate_op(spec, node) is not None, node.inputs, tensors)
        switched = [self._module_at(node, path) for nid, path in self.switch if nid == node.id]
        before = [m.inplace for m in switched]
        for m in switched:
            m.inplace = True
        try:
            with super().node(index, node, tensors):
                yield
        finally:
            for m, value in zip(switched, before, strict=True):
                m.inplace = value

    def _module_at(self, node, path: tuple):
        module = self.modules[node.module]
        for i in path:
            module = module[i]
        return module

    def done(self, index, node, tensors, out, wrote) -> None:
        super().done(index, node, tensors, out, wrote)
        outs = list(out) if isinstance(out, (tuple, list)) else [out]
        outs = [o for o in outs if o is not None]
        if self.k == 0 and outs:
            self._record_result(node.id, outs)
            for name, o in zip(
                node.out_names if hasattr(node, "out_names") else [node.out_name],
                outs,
                strict=False,
            ):
                self._names[storage_key(o)] = name
        for i, o in enumerate(outs):
            self.values[("node", self.k, node.id if i == 0 else f"{node.id}[{i}]")] = _snapshot(o)

    # the layers of Sequential modules, one fact each (`node[i]`, nested `node[i][j]`)
    def _hook_layers(self, module, mspec, path: tuple) -> None:
        for i, cspec in enumerate(mspec.layers):
            child, where = module[i], path + (i,)
            if getattr(cspec, "layers", None):
                self._hook_layers(child, cspec, where)
                continue
            self._handles.append(
                child.register_forward_pre_hook(
                    lambda _m, args, w=where, c=cspec: self._layer_before(w, c, args)
                )
            )
            self._handles.append(
                child.register_forward_hook(
                    lambda _m, _args, out, w=where: self._layer_after(w, out)
                )
            )

    def _layer_id(self, where: tuple) -> str | None:
        node = self.current_node
        if self.k != 0 or not node or node.startswith("<"):
            return None
        return node + "".join(f"[{i}]" for i in where)

    def _layer_before(self, where, cspec, args) -> None:
        fid = self._layer_id(where)
        tensors = [a for a in args if isinstance(a, self.engine.Tensor)][:1]
        if fid is None or not tensors:
            return
        names = [self._names.get(storage_key(tensors[0]), "its input")]
        self._record(fid, cspec.type, getattr(cspec, "inplace", None) is False, names, tensors)

    def _layer_after(self, where, out) -> None:
        fid = self._layer_id(where)
        if fid is None or fid not in self.facts or not isinstance(out, self.engine.Tensor):
            return
        self._record_result(fid, [out])
        self._names[storage_key(out)] = f"{fid}'s result"

    # recording
    def _record(self, fid: str, op: str, candidate: bool, names, tensors) -> None:
        self.facts[fid] = make_facts(self._order, fid, op, candidate, names, tensors)
        self._order += 1

    def _record_result(self, fid: str, outs: list) -> None:
        record_result(self.facts[fid], outs, self._seen_fns)

    def backward(self, k, phase) -> None:
        super().backward(k, phase)
        for name, t in self._named_leaves():
            g = getattr(t, "grad", None)
            if g is not None:
                self.values[("grad", k, name)] = _snapshot(g)

    def _named_leaves(self) -> list[tuple[str, Any]]:
        return list(self.inputs.items()) + named_parameters(self.modules)

    def capture_final(self) -> None:
        """Parameters and buffers at the end (what the optimizer made of them). Inputs are not
        compared at the end: an input written in place in the last iteration is read by nothing
        after (each value is compared when its node binds it)."""
        for name, t in named_parameters(self.modules):
            self.values[("final", name)] = _snapshot(t.detach())

    # what outlives an iteration
    def state_storages(self) -> dict[int, str]:
        """Storage -> name for parameters and buffers (they outlive every iteration)."""
        return {storage_key(t): name for name, t in named_parameters(self.modules)}

    def input_storages(self) -> dict[int, str]:
        return {storage_key(t): name for name, t in self.inputs.items()}


@dataclass
class Verdict:
    node: str
    op: str
    verdict: str  # safe | unsafe
    reason: str
    involves: list[str]
    clone_bytes: int = 0
    kind: str = "safe"


def verdicts(spec, facts: dict[str, NodeFacts], state: dict[int, str], inputs: dict[int, str]):
    """The verdict of every candidate (program nodes and Sequential layers), in the order they
    ran (from one recorded run)."""
    has_backward = any(hasattr(p, "backward") for p in spec.phases)
    ordered = sorted(facts.values(), key=lambda f: f.index)
    return [
        _verdict(spec, f, ordered, state, inputs, has_backward)
        for f in ordered
        if f.candidate and f.operand is not None
    ]


def _verdict(spec, f: NodeFacts, ordered, state, inputs, has_backward) -> Verdict:
    o, me, op = f.operand, f.node_id, f.op
    own_clone = o.nbytes if any(s[0] == o.storage for s in f.saves) else 0

    def unsafe(kind: str, text: str, involves=()) -> Verdict:
        return Verdict(me, op, "unsafe", f"{kind}: {text}", list(involves), 0, kind)

    if o.leaf_requires_grad:
        return unsafe(
            LEAF,
            f"{o.name} is a leaf that requires grad; autograd refuses to write it in place",
        )
    if o.view_of_leaf:
        return unsafe(
            LEAF,
            f"{o.name} is a view of a leaf that requires grad; autograd refuses to write it "
            "in place",
        )
    if o.storage in state:
        return unsafe(
            INPUT,
            f"{_as(o.name, state[o.storage])} module state (a parameter or buffer) that "
            "outlives the iteration",
        )
    if o.storage in inputs and spec.iterations > 1:
        return unsafe(
            INPUT,
            f"{_as(o.name, inputs[o.storage])} a scenario input, which the next iteration "
            "reads again",
        )
    if f.out_shape != o.shape or f.out_dtype != o.dtype:
        return unsafe(
            SHAPE,
            f"the result is {list(f.out_shape or ())} {f.out_dtype}, the operand {o.name} "
            f"{list(o.shape)} {o.dtype}: it cannot hold the result",
        )
    if o.self_overlap:
        return unsafe(SHAPE, f"{o.name} overlaps itself (an expanded view)")
    later = [g for g in ordered if g.index > f.index and not _inside(g.node_id, me)]
    readers = [g.node_id for g in later if any(sid == o.storage for _, sid in g.reads)]
    if readers:
        names = sorted(
            {n for g in later if g.node_id in readers for n, s in g.reads if s == o.storage}
        )
        what = o.name if names == [o.name] else f"{o.name} (as {', '.join(names)})"
        return unsafe(
            STALE,
            f"node {readers[0]} reads {what} after {me}; in place it would see {me}'s result",
            readers,
        )
    if has_backward:
        savers = [
            (g.node_id, fn, version)
            for g in ordered
            if g.index < f.index and not _inside(me, g.node_id)
            for sid, version, fn in g.saves
            if sid == o.storage and version == o.version
        ]
        if savers:
            who, fn, version = savers[0]
            return unsafe(
                SAVED,
                f"node {who}'s {fn} keeps {o.name} (at version {version}) for backward; "
                "writing it would make backward fail",
                list(dict.fromkeys(s[0] for s in savers)),
            )
    text = "nothing reads or keeps the operand afterwards"
    if own_clone:
        text += f"; backward needs {o.name}, so autograd keeps a clone of it"
    return Verdict(me, op, "safe", text, [], own_clone, "safe")


def _inside(inner: str, outer: str) -> bool:
    """Whether fact `inner` is a layer of the Sequential call `outer` (`h[1]` inside `h`)."""
    return inner.startswith(outer + "[")


def _as(name: str, owner: str) -> str:
    """'x is' or 'h (the storage of fc.weight) is'."""
    return f"{name} is" if name == owner else f"{name} (the storage of {owner}) is"
