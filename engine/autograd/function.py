"""Function: the base of every primitive, and how a call records history.

A primitive subclasses Function and writes `forward` and `backward` side by side. The instance
created for a call *is* the graph node (like PyTorch's ctx / Chainer's FunctionNode).

What backward keeps goes through one path, `SavedTensor`: the inputs and output an op declares
(`retain_inputs` / `to_save`, `retain_output`; Function.apply saves them) and the buffers its
forward makes (masks, indices, statistics: `self.save(name=tensor)`, read back with
`self.kept(name)`). Every saved tensor is tagged `saved_for_backward` in the allocator, goes
through saved_tensors_hooks when they are active, is version-checked when unpacked (as PyTorch's
SavedVariable), and is released by `release_saved` when the node has run (or dies with the graph).
An op keeps no other reference to a tensor or array past its forward.

`Function.apply(*args, out=None, op=...)` runs the checks PyTorch runs before the kernel
(leaf and view rules for in-place writes), clones an input that an in-place op overwrites but
backward needs, runs the kernel, bumps the version counter of what was written, and wires the
node into the graph (CopySlices when the write went through a view).
"""

from __future__ import annotations

import itertools
import linecache
import os
import textwrap
import types
import weakref

from engine.allocator import tracked as _tracked
from engine.allocator.tracked import set_op
from engine.amp import autocast_mode as _autocast
from engine.autograd.grad_mode import STATE
from engine.tensor import Tensor

_sequence = itertools.count()
_AUTOCAST = _autocast.STATE
_MAX_SEQ = 1 << 62
_HERE = os.path.dirname(os.path.abspath(__file__))
_new = object.__new__


def _node_label(fn) -> str:
    """How PyTorch names a node in the version error: "ReluBackward0" -> "Relu"."""
    name = fn.name()
    stripped = name.rstrip("0123456789")
    if stripped.endswith("Backward") and stripped != "Backward":
        return stripped[: -len("Backward")]
    return name


class SavedTensor:
    """A tensor kept for backward with the version it had when saved.

    Holds the tensor's data and storage, not the tensor (unpack() makes a detached alias), so
    that saving an op's own output makes no reference cycle: the storage dies when the last real
    reference does. For a saved input,
    `source` is a weak reference to the tensor itself, so the version error can name its current
    producer as PyTorch does ("which is output 0 of Relu" after `a.relu_()`).

    `producer` is the node that made the tensor (None for a leaf), or a weak reference to it when
    the saving node made it itself (retain_output: a strong one would be a reference cycle). Its
    label is worked out only for the version error, off the hot path.
    """

    __slots__ = (
        "data",
        "storage",
        "dtype",
        "device",
        "version",
        "producer",
        "output_nr",
        "source",
        "packed",  # PackedSavedTensor only
        "unpack_hook",
    )

    def __init__(self, t: Tensor, producer, output_nr: int = 0, source=None):
        # The alias tensor is made on unpack: saving stays cheap on the forward hot path.
        self.data = t._data
        storage = self.storage = t._storage
        self.dtype = t._dtype
        self.device = t._device
        self.version = storage.version
        self.producer = producer
        self.output_nr = output_nr
        self.source = source
        if SAVED_TENSORS_HOOKS:  # engine.autograd.graph.saved_tensors_hooks is active
            PackedSavedTensor._pack(self, t)
            return
        alloc = storage.allocator
        if alloc is not None and alloc.observers:
            alloc.tag(storage.id, "saved_for_backward", True)

    @property
    def alias(self) -> Tensor | None:
        """A detached tensor over the saved data (None once released)."""
        if self.storage is None:
            return None
        return Tensor._make(self.data, self.storage, self.dtype, self.device)

    def unpack(self) -> Tensor:
        storage = self.storage
        if storage is None:
            raise RuntimeError(
                "Trying to backward through the graph a second time (or directly access saved "
                "tensors after they have already been freed). Saved intermediate values of the "
                "graph are freed when you call .backward() or autograd.grad(). Specify "
                "retain_graph=True if you need to backward through the graph a second time or if "
                "you need to access saved tensors after calling backward."
            )
        if storage.version != self.version:
            raise RuntimeError(self._version_message())
        return Tensor._make(self.data, storage, self.dtype, self.device)

    def _version_message(self) -> str:
        alias = self.alias
        producer, output_nr = self.producer, self.output_nr
        if isinstance(producer, weakref.ref):
            producer = producer()
        if producer is not None:
            producer = _node_label(producer)
        src = self.source() if self.source is not None else None
        if src is not None:
            fn = src._grad_fn
            producer = _node_label(fn) if fn is not None else None
            output_nr = src._output_nr
        kind = alias._dtype.torch_tensor_name
        where = f", which is output {output_nr} of {producer}," if producer else ""
        return (
            "one of the variables needed for gradient computation has been modified by an "
            f"inplace operation: [engine.{kind} {list(alias.shape)}]{where} is at version "
            f"{alias._storage.version}; expected version {self.version} instead. Hint: the "
            "backtrace further above shows the operation that failed to compute its gradient. "
            "The variable in question was changed in there or anywhere later. Good luck!"
        )

    def release(self) -> None:
        self.data = self.storage = self.source = None


# (pack_hook, unpack_hook) pairs, innermost last: engine.autograd.graph.saved_tensors_hooks
SAVED_TENSORS_HOOKS: list = []


class PackedSavedTensor(SavedTensor):
    """A saved tensor handed to a pack hook: it holds what the hook returned, not the tensor.

    unpack() gives the unpack hook's tensor (activation checkpointing recomputes it there). The
    version check is the hook's business, as in PyTorch.
    """

    __slots__ = ()

    @staticmethod
    def _pack(saved: SavedTensor, t: Tensor) -> None:
        pack, unpack = SAVED_TENSORS_HOOKS[-1]
        saved.__class__ = PackedSavedTensor
        saved.data = saved.storage = None  # the bytes are the hook's to keep or to drop
        saved.unpack_hook = unpack
        saved.packed = pack(Tensor._make(t._data, t._storage, t._dtype, t._device))

    @property
    def alias(self) -> Tensor | None:
        return None

    def unpack(self) -> Tensor:
        hook = self.unpack_hook
        if hook is None:
            raise RuntimeError(
                "Trying to backward through the graph a second time (or directly access saved "
                "tensors after they have already been freed). Specify retain_graph=True if you "
                "need to backward through the graph a second time."
            )
        t = hook(self.packed)
        if not isinstance(t, Tensor):
            raise TypeError(
                f"saved_tensors_hooks: the unpack hook returned {type(t).__name__}, expected a Tensor"
            )
        return t

    def release(self) -> None:
        self.source = None
        self.packed = self.unpack_hook = None


_NO_EDGE = (None, 0)


class Function:
    """Base class of primitives (and the graph node of one call).

    Subclasses set `retain_inputs` / `retain_output` and implement::

        def forward(self, *args, out=None, **attrs) -> Tensor      # writes into `out` when given
        def backward(self, grad) -> tuple                           # one grad (or None) per tensor arg
    """

    retain_inputs: tuple[int, ...] = ()
    retain_output: bool = False
    differentiable = True
    num_outputs = 1
    input_dtypes: tuple | None = None  # the dtypes of the tensor arguments, edge by edge
    # set on a node only when used (the backward walk reads them from every node it runs):
    tensor_hooks: dict | None = None  # register_hook on a non-leaf: {output_nr: {id: fn}}
    retained: list | None = None  # retain_grad(): [(weakref to the tensor, output_nr)]
    edge_order: tuple | None = None  # the order PyTorch's node lists its inputs in
    # edges PyTorch's node reaches through TBackward0 (the w.t() of at::linear), which the engine's
    # node does not record: the backward walk runs one for them (engine/autograd/engine.py)
    t_edges: tuple[int, ...] = ()
    inplace_view = False  # an in-place op that changes only metadata (t_, transpose_)
    writes_overlap = False  # may write into an expanded tensor (fill_ / zero_, as PyTorch)

    # (node, input_nr) per input, None for an input that needs no gradient (the engine's own
    # walk tests `is None`); torch's view of them is next_functions, (None, 0) for those
    _edges: tuple = ()

    def _public_edges(self) -> tuple:
        """The edges torch's node lists: its inputs in its order (edge_order), an input it
        reaches through a transpose behind that TBackward0 (t_edges); a node whose inputs
        differ from the engine's otherwise (a mask, a Python number) says so here."""
        edges = self._edges
        if self.t_edges:
            shown = self.__dict__.get("_shown_t")  # one TBackward0 per input, kept: `is` holds
            if shown is None:
                from engine.autograd.engine import _Transposed

                shown = self._shown_t = {
                    i: (_Transposed(edges[i], self.sequence_nr), 0)
                    for i in self.t_edges
                    if i < len(edges) and edges[i] is not None
                }
            edges = tuple(shown.get(i, e) for i, e in enumerate(edges))
        order = self.edge_order
        return tuple(edges[i] for i in order) if order else edges

    @property
    def next_functions(self) -> tuple:
        """torch's next_functions: one (node, input_nr) pair per input, (None, 0) where the
        input needs no gradient."""
        return tuple(_NO_EDGE if e is None else e for e in self._public_edges())

    _named: dict | None = None  # what save() kept, by name
    saved: list
    sequence_nr: int

    def name(self) -> str:
        return type(self).__name__

    def prepare(self, *args) -> None:
        """Called before to_save when history is recorded (e.g. to note which args are tensors)."""

    def to_save(self, tensor_args: list) -> tuple[int, ...]:
        """Indices (into the tensor args) backward needs; override to depend on requires_grad."""
        return self.retain_inputs

    @property
    def saved_tensors(self) -> tuple:
        """The declared inputs/output, in order (retain_inputs / to_save, then retain_output)."""
        return tuple(s.unpack() for s in self.saved)

    def save(self, **buffers: Tensor | None) -> None:
        """Keep tensors made in forward (masks, indices, statistics) for backward, by name.

        They are held as the declared ones are (SavedTensor: tagged saved_for_backward,
        version-checked on use, released with the node); `kept(name)` gives them back.
        """
        named = self._named
        if named is None:
            named = self._named = {}
        me = weakref.ref(self)
        for key, t in buffers.items():
            named[key] = None if t is None else SavedTensor(t, t._grad_fn or me, t._output_nr)

    def kept(self, key: str) -> Tensor | None:
        """A buffer kept by `save` (None when it was saved as None)."""
        named = self._named
        if named is None or key not in named:
            raise RuntimeError(
                "Trying to backward through the graph a second time (or directly access saved "
                "tensors after they have already been freed). Specify retain_graph=True if you "
                "need to backward through the graph a second time."
            )
        s = named[key]
        return None if s is None else s.unpack()

    def release_saved(self) -> None:
        """Drop everything kept for backward (the engine calls it once the node has run)."""
        for s in self.saved:
            s.release()
        named = self._named
        if named:
            for s in named.values():
                if s is not None:
                    s.release()
            named.clear()

    def __repr__(self) -> str:
        return f"<{self.name()} object>"

    # --- recording a call ----------------------------------------------------------------------
    # apply(*args, out=None, op=None, **attrs) is generated from _APPLY_TEMPLATE below, once for
    # any number of arguments and once per arity that a family of small ops uses (Unary: 1,
    # Binary: 2, `apply = specialised_apply(n)`): one protocol, one text, no hand-made copies.

    def _forward_named(self, op, args, out, attrs):
        """forward, with the allocator's events inside it attributed to `op`."""
        prev = _tracked._op
        _tracked._op = op
        try:
            return self.forward(*args, out=out, **attrs)
        finally:
            _tracked._op = prev

    def _record(self, args, out, op, attrs):
        """Run forward and wire this node into the graph (saved tensors, edges, outputs)."""
        node = self
        tensors = args  # the tensor arguments: usually all of them
        if len(args) == 2:  # (a binary op: tensor op number, the commonest mix, decided inline)
            a, b = args
            if b.__class__ is not Tensor and not isinstance(b, Tensor):
                tensors = (a,) if a.__class__ is Tensor or isinstance(a, Tensor) else ()
            elif a.__class__ is not Tensor and not isinstance(a, Tensor):
                tensors = (b,)
        else:
            for a in args:
                if a.__class__ is not Tensor and not isinstance(a, Tensor):
                    tensors = tuple([a for a in args if isinstance(a, Tensor)])
                    break
        if node.inplace_view:
            return node._record_inplace_view(args, out, op, attrs, tensors)
        node.prepare(*args)
        to_save = node.to_save(tensors)
        clones = None
        if out is not None and to_save and _broadcasts_into(tensors, out):
            # (when it does not, forward raises the shape error before anything is allocated)
            clones = _clone_overwritten(tensors, to_save, out, op)

        if _tracked.observed:  # _forward_named, written out (a call per op saved)
            prev = _tracked._op
            _tracked._op = op
            try:
                if attrs or out is not None:
                    result = node.forward(*args, out=out, **attrs)
                else:
                    result = node.forward(*args)
            finally:
                _tracked._op = prev
        elif attrs or out is not None:
            result = node.forward(*args, out=out, **attrs)
        else:
            result = node.forward(*args)
        if out is not None:
            out._storage.version += 1
        if isinstance(result, Tensor):
            if result._dtype.emulated and (result._base is None or out is not None):
                _round_emulated(result)  # (a view shows values that are rounded already)
        elif type(result) is tuple:
            _round_emulated(*result)

        node.sequence_nr = next(_sequence)
        # the edges, and the dtypes gradients are cast to (written out for the usual arities: a
        # comprehension is a call of its own)
        if len(tensors) == 2:
            a, b = tensors
            node._edges = (
                _edge(a) if a.requires_grad else None,
                _edge(b) if b.requires_grad else None,
            )
            dt = a._dtype
            node.input_dtypes = dt._paired if b._dtype is dt else (dt, b._dtype)
        elif len(tensors) == 1:
            a = tensors[0]
            node._edges = (_edge(a) if a.requires_grad else None,)
            node.input_dtypes = a._dtype._alone
        else:
            node._edges = tuple([_edge(t) if t.requires_grad else None for t in tensors])
            node.input_dtypes = tuple([t._dtype for t in tensors])
        if to_save or node.retain_output:
            saved = []
            for i in to_save:
                if clones is not None and i in clones:
                    saved.append(clones[i])
                else:
                    t = tensors[i]
                    saved.append(SavedTensor(t, t._grad_fn, t._output_nr, weakref.ref(t)))
        else:
            saved = _NOTHING_SAVED
        node.saved = saved
        if out is not None:
            _rebase_history(out, node)
        elif type(result) is Tensor or not isinstance(result, tuple):
            if result._dtype.is_floating_point:
                result.requires_grad = True
                result._grad_fn = node
                if result._base is not None:
                    result._grad_fn_version = result._storage.version
        else:
            for nr, r in enumerate(result):
                if isinstance(r, Tensor) and r._dtype.is_floating_point:
                    r.requires_grad = True
                    r._grad_fn = node
                    if nr:
                        r._output_nr = nr
                    if r._base is not None:
                        r._grad_fn_version = r._storage.version
        if node.retain_output:
            first = result if isinstance(result, Tensor) else result[0]
            saved.append(SavedTensor(first, weakref.ref(node), 0))
        return result

    def _record_inplace_view(self, args, out, op, attrs, tensors):
        # The edges are taken before the metadata changes; the tensor keeps its own history.
        self._edges = tuple(gradient_edge(t) if t.requires_grad else None for t in tensors)
        self.sequence_nr = next(_sequence)
        self.saved = []
        result = self._forward_named(op, args, out, attrs)
        out._storage.version += 1
        out.requires_grad = True
        out._grad_fn = self
        if out._base is not None:
            out._grad_fn_version = out._storage.version
        return result


_NOTHING_SAVED = ()  # a node that keeps nothing shares this (release_saved only reads it)

# The dispatcher. `{params}` are the call's positional parameters and `{args}` the tuple of them:
# "*args" / "args" for Function.apply, "a0, a1" / "(a0, a1)" for a specialised one (packing and
# unpacking *args costs a noticeable part of a small op).
_APPLY_TEMPLATE = """
{header}
    if _AUTOCAST.active:  # inside engine.autocast: the op's casting policy
        cast = _autocast.for_primitive(cls, {args})
        if cast is not None:
            {unpack} = cast
    if out is None:
        if STATE.enabled and cls.differentiable:
{record}
        # No history to record: the lean path every op takes under no_grad or without grads.
        if _tracked.observed:  # _forward_named, written out
            prev = _tracked._op
            _tracked._op = op or cls.__name__
            try:
                if attrs:
                    result = _new(cls).forward({call}, **attrs)
                else:
                    result = _new(cls).forward({call})
            finally:
                _tracked._op = prev
        elif attrs:
            result = _new(cls).forward({call}, **attrs)
        else:  # a call without keywords is cheaper
            result = _new(cls).forward({call})
        if result.__class__ is Tensor and not result._dtype.emulated:
            return result  # the common case, straight back
    else:  # PyTorch's checks before a write (inline: in-place ops are small)
        if out is not {first}:
            check_out(cls, {args}, out, op)
        if out._base is not None:
            check_inplace(out)
            if 0 in out._data.strides and not cls.writes_overlap:
                check_overlap(out)  # (only a view can overlap itself: expand, broadcast_to)
        elif out.requires_grad:
            check_inplace(out)  # (a tensor that is no view and needs no grad passes it)
        if STATE.enabled and cls.differentiable:
{record}
        if _tracked.observed:  # _forward_named, written out
            prev = _tracked._op
            _tracked._op = op or cls.__name__
            try:
                if attrs:
                    result = _new(cls).forward({call}, out=out, **attrs)
                else:
                    result = _new(cls).forward({call}, out=out)
            finally:
                _tracked._op = prev
        elif attrs:
            result = _new(cls).forward({call}, out=out, **attrs)
        else:  # (a call with **attrs costs more even when attrs is empty)
            result = _new(cls).forward({call}, out=out)
        out._storage.version += 1
        if result is out and not out._dtype.emulated:
            return out  # the common case of an in-place op, straight back
    if type(result) is Tensor:
        if result._dtype.emulated and (result._base is None or out is not None):
            _round_emulated(result)  # (a view shows values that are rounded already)
    elif type(result) is tuple:
        _round_emulated(*result)
    return result
"""


def _source(arity: int | None, names=None, header=None) -> str:
    """The dispatcher's text for `arity` positional arguments (None: any number, as *args)."""
    if arity is None:
        fields = dict(
            params="*args",
            first="(args[0] if args else None)",
            args="args",
            unpack="args",
            call="*args",
            record=(
                "            for a in args:\n"
                "                if isinstance(a, Tensor) and a.requires_grad:\n"
                "                    return _new(cls)._record(args, out, op or cls.__name__, attrs)"
            ),
        )
    else:
        names = names or [f"a{i}" for i in range(arity)]
        fields = dict(
            params=", ".join(names),
            first=names[0],
            args="(" + ", ".join(names) + ",)",
            unpack="(" + ", ".join(names) + ",)",
            call=", ".join(names),
            record=(
                "            if "
                + " or ".join(f"isinstance({n}, Tensor) and {n}.requires_grad" for n in names)
                + ":\n"
                + "                return _new(cls)._record("
                + "("
                + ", ".join(names)
                + ",), out, op or cls.__name__, attrs)"
            ),
        )
    fields["header"] = (header or "def apply(cls, {params}, out=None, op=None, **attrs):").format(
        **fields
    )
    return _APPLY_TEMPLATE.format(**fields)


def _compile(source: str, label: str) -> dict:
    # A file name inside engine/ (profilers skip the engine's frames by their folder), with the
    # source in linecache so that tracebacks show the generated lines.
    filename = os.path.join(_HERE, f"<{label}>")
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace = {}
    exec(compile(source, filename, "exec"), globals(), namespace)  # noqa: S102 - our template
    return namespace


def _generate_apply(arity: int | None):
    label = f"apply: {'any' if arity is None else arity} args"
    return classmethod(_compile(_source(arity), label)["apply"])


_SPECIALISED: dict[int, classmethod] = {}


def specialised_apply(arity: int) -> classmethod:
    """Function.apply for ops that always take `arity` positional arguments (same protocol)."""
    fn = _SPECIALISED.get(arity)
    if fn is None:
        fn = _SPECIALISED[arity] = _generate_apply(arity)
    return fn


_METHOD_NAMES = {1: ["input"], 2: ["input", "other"]}
_NO_ATTRS = types.MappingProxyType({})  # a direct form's attributes: none, read-only


def direct_form(cls, op: str, arity: int):
    """`cls.apply(input[, other], out=out, op=op)` as one function of its own: the same
    dispatcher text with `cls` and `op` bound, so that a Tensor method or an operator
    (``Tensor.relu``, ``a + b``) reaches forward without a wrapper's call in between.
    Signature ``(input[, other], *, out=None)``."""
    factory = _DIRECT_FACTORIES.get(arity)
    if factory is None:  # the text is compiled once per arity; each op gets its own closure
        names = _METHOD_NAMES[arity]
        body = _source(arity, names, header="def direct({params}, *, out=None):")
        source = (
            "def factory(cls, op, attrs):\n" + textwrap.indent(body, "    ") + "    return direct\n"
        )
        factory = _DIRECT_FACTORIES[arity] = _compile(source, f"direct: {arity} args")["factory"]
    fn = factory(cls, op, _NO_ATTRS)
    fn.__name__ = fn.__qualname__ = op
    fn.__code__ = fn.__code__.replace(co_name=op, co_qualname=op)  # profiles show the op
    return fn


_DIRECT_FACTORIES: dict = {}


Function.apply = _generate_apply(None)


OUT_GRAD_MSG = (
    "{}(): functions with out=... arguments don't support automatic differentiation, but one of "
    "the arguments requires grad."
)
OVERLAP_MSG = (
    "unsupported operation: more than one element of the written-to tensor refers to a single "
    "memory location. Please clone() the tensor before performing the operation."
)


def check_out(cls, args, out: Tensor, op) -> None:
    """`out` is not the first operand: an explicit out= (unless another operand is `out`), which
    PyTorch refuses when autograd would have to record it."""
    if any(a is out for a in args):
        return
    if (
        STATE.enabled
        and cls.differentiable
        and (out.requires_grad or any(isinstance(a, Tensor) and a.requires_grad for a in args))
    ):
        raise RuntimeError(OUT_GRAD_MSG.format((op or cls.__name__.lower()).rstrip("_")))


def check_overlap(out: Tensor) -> None:
    """Internal overlap as PyTorch detects it: a dimension of size > 1 with stride 0 (expand)."""
    a = out._data
    if any(st == 0 and n > 1 for n, st in zip(a.shape, a.strides, strict=True)):
        raise RuntimeError(OVERLAP_MSG)


def _round_emulated(*tensors) -> None:
    """bfloat16 is held in float32 (engine/dtypes.py): an op's bfloat16 results are rounded to
    bfloat16 values, as a bfloat16 kernel's would be."""
    for t in tensors:
        if isinstance(t, Tensor) and t._dtype.emulated and t._device.type != "meta":
            if t._base is not None and not t._data.flags.writeable:
                continue
            from engine.dtypes import round_to_bfloat16_

            round_to_bfloat16_(t._data)


def _broadcasts_into(tensors, out: Tensor) -> bool:
    shape = out._data.shape
    for t in tensors:
        s = t._data.shape
        if s != shape and (
            len(s) > len(shape)
            or any(a != 1 and a != b for a, b in zip(reversed(s), reversed(shape), strict=False))
        ):
            return False
    return True


def _clone_overwritten(tensors, to_save, out, opname):
    """Inputs an in-place op overwrites but backward reads are cloned first (PyTorch/Paddle >= 2.6)."""
    clones = {}
    for i in to_save:
        t = tensors[i]
        if t._storage is out._storage:
            from engine.allocator.tracked import context

            with context(inplace_clone=opname):
                c = _raw_clone(t)
            alloc = c._storage.allocator
            if alloc is not None and alloc.observers:
                alloc.tag(c._storage.id, "inplace_clone", opname)
            clones[i] = SavedTensor(c, t._grad_fn, t._output_nr)
    return clones


def _raw_clone(t: Tensor) -> Tensor:
    from engine.kernels import copy_new

    prev = set_op("clone")
    try:
        return copy_new(t)
    finally:
        set_op(prev)


LEAF_MSG = "a leaf Variable that requires grad is being used in an in-place operation."
VIEW_LEAF_MSG = (
    "a view of a leaf Variable that requires grad is being used in an in-place operation."
)


def check_inplace(t: Tensor) -> None:
    """PyTorch's checks before an in-place write, run before the kernel so nothing changes."""
    if not STATE.enabled:
        return
    base = t._base
    if base is None:
        if t.requires_grad and t._grad_fn is None:
            raise RuntimeError(LEAF_MSG)
        return
    meta = t._view_meta
    if isinstance(meta, tuple) and base.requires_grad:  # ("multi", index, node): split / unbind
        raise RuntimeError(
            f"Output {meta[1]} of {meta[2]} is a view and is being modified inplace. This view is the output of a function that "
            "returns multiple views. Such functions do not allow the output views to be modified "
            "inplace. You should replace the inplace operation by an out-of-place one."
        )
    if meta == "no_grad":
        raise RuntimeError(
            "A view was created in no_grad mode and is being modified inplace with grad mode "
            "enabled. Given that this use case is ambiguous and error-prone, it is forbidden. You "
            "can clarify your code by moving both the view and the inplace either both inside the "
            "no_grad block (if you don't want the inplace to be tracked) or both outside (if you "
            "want the inplace to be tracked)."
        )
    if base.requires_grad and base._grad_fn is None:
        raise RuntimeError(VIEW_LEAF_MSG)


def _edge(t: Tensor):
    """gradient_edge, with the common cases (a non-view with a grad_fn, a leaf) inline."""
    if t._base is None:
        fn = t._grad_fn
        if fn is not None:
            return (fn, t._output_nr)
        return (_accumulator(t), 0)
    return gradient_edge(t)


def gradient_edge(t: Tensor):
    """(node, input_nr) that receives t's gradient: its grad_fn, or its AccumulateGrad if a leaf."""
    fn = t.grad_fn
    if fn is not None:
        return (fn, t._output_nr)
    return (_accumulator(t), 0)


_AccumulateGrad = None  # engine.autograd.nodes.AccumulateGrad, imported on first use


def _accumulator(leaf: Tensor):
    """The leaf's AccumulateGrad: one per leaf while any graph holds it (PyTorch keeps a weak
    pointer too), so gradients from several graphs accumulate through the same node."""
    global _AccumulateGrad
    ref = leaf._acc
    acc = ref() if ref is not None else None
    if acc is None:
        if _AccumulateGrad is None:
            from engine.autograd.nodes import AccumulateGrad as _AccumulateGrad
        acc = _AccumulateGrad(leaf)
        leaf._acc = weakref.ref(acc)
    return acc


def _rebase_history(out: Tensor, node: Function) -> None:
    """After an in-place op recorded `node`, make it the history of `out` (and its base)."""
    base = out._base
    if base is None:
        out.requires_grad = True
        out._grad_fn = node
        out._output_nr = 0
        out._grad_fn_version = out._storage.version
        return
    # Write through a view: the base gets CopySlices wrapping the op; the view's grad_fn is
    # regenerated from the base (lazily, by Tensor.grad_fn) because the version moved.
    from engine.autograd.nodes import CopySlices

    base_edge = gradient_edge(base) if base.requires_grad else None
    cs = CopySlices(base_edge, out._view_fn, node, base.shape, base._dtype, base._device)
    base.requires_grad = True
    base._grad_fn = cs
    base._output_nr = 0
    base._grad_fn_version = base._storage.version
    out.requires_grad = True
    out._grad_fn_version = -1  # force regeneration on next access


def regenerate_view_grad_fn(view: Tensor) -> None:
    from engine.autograd.nodes import ViewRegenBackward

    base = view._base
    if base.requires_grad:
        view._grad_fn = ViewRegenBackward(
            gradient_edge(base), view._view_fn, base.shape, base._dtype, base._device
        )
        view._output_nr = 0
        view.requires_grad = True
    view._grad_fn_version = view._storage.version
