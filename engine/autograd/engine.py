"""The backward pass: a topological walk over nodes, accumulating input gradients in one place.

Like PyTorch's engine: nodes run when every gradient they expect has arrived, the ready node with
the highest sequence number first; saved tensors are released as their node runs (unless
retain_graph); intermediate gradients die as soon as they are consumed; leaf gradients are
accumulated by AccumulateGrad, which takes over an incoming buffer nobody else holds.
"""

from __future__ import annotations

import heapq
import sys

from engine import kernels
from engine.allocator import tracked as _tracked
from engine.autograd.function import Function, _round_emulated, gradient_edge
from engine.autograd.grad_mode import STATE
from engine.backends.strided import is_dense
from engine.tensor import Tensor


def _accumulate(buffer: list, pos: int, grad: Tensor) -> None:
    """The one place gradients from several consumers are summed: torch's InputBuffer
    accumulate, `old.add_(grad)` when the buffer's gradient is a plain dense tensor nobody else
    holds (whatever the incoming one's layout: an expanded `sum()` gradient adds in place),
    else `old + grad`. (torch's other in-place form, `grad.add_(old)`, needs the incoming
    gradient unshared, and a summed one is still held by its node's outputs.)"""
    old = buffer[pos]
    if old is None:
        buffer[pos] = grad
        return
    arr = old._data
    if (
        old.shape == grad.shape
        and old._base is None
        and sys.getrefcount(old) <= 3
        and sys.getrefcount(old._storage) <= 3
        and old._dtype is grad._dtype
        and is_dense(arr.shape, arr.strides, arr.itemsize)
    ):
        kernels.add_into(old, grad)
    else:
        buffer[pos] = kernels.add_new(old, grad)


class _Transposed(Function):
    """The TBackward0 PyTorch's node reaches an input through (Function.t_edges) and the engine's
    does not record: it runs right after that node (its sequence number just below), takes the
    gradient over and hands it on, so that a gradient summed into its input's buffer is summed
    there, after the node's other gradients were freed, as in torch. The gradient arrives in the
    input's own layout: handed on as it is."""

    def __init__(self, edge, sequence_nr):
        self._edges = (edge,)
        self.sequence_nr = sequence_nr
        self.saved = []

    def backward(self, grad):
        return (grad,)

    def name(self):
        return "TBackward0"


def backward(tensors, grad_tensors, retain_graph=None, inputs=None, capture=None):
    """Run the backward pass from `tensors` with their incoming `grad_tensors`.

    inputs: only these tensors' gradients are accumulated into their .grad (and only the nodes
    that lead to them run). capture: autograd.grad's form: returns the gradient arriving at each
    of these tensors instead of accumulating anything (None where none arrives).
    """
    if retain_graph is None:
        retain_graph = False
    targets = capture if capture is not None else inputs
    roots = []
    # The gradients made here (ones for a scalar output) live until the pass returns, as in
    # torch.autograd.backward, whose list of them is a local of the call: on a GPU the seed's
    # 512-byte block is live at a backward pass's peak.
    implicit = []
    for t, g in zip(tensors, grad_tensors, strict=True):
        if not t.requires_grad:
            raise RuntimeError(
                "element 0 of tensors does not require grad and does not have a grad_fn"
            )
        if g is None:
            if t.numel() != 1:
                raise RuntimeError("grad can be implicitly created only for scalar outputs")
            g = kernels.ones_like_new(t)
            implicit.append(g)
        elif not isinstance(g, Tensor):
            raise TypeError(f"gradient must be a Tensor, got {type(g).__name__}")
        elif g.shape != t.shape:
            raise RuntimeError(
                f"Mismatch in shape: grad_output[0] has a shape of {list(g.shape)} and output[0] "
                f"has a shape of {list(t.shape)}."
            )
        roots.append((gradient_edge(t), g))

    # Dependencies: how many gradient contributions each node waits for. A node is visited
    # once: when first reached (its count is new), or as a root.
    deps: dict[Function, int] = {}
    stack = list({id(edge[0]): edge[0] for edge, _ in roots}.values())
    root_nodes = set(stack)
    parents = {} if targets is not None else None  # node -> nodes with an edge to it
    while stack:
        node = stack.pop()
        for edge in node._edges:
            if edge is None:
                continue
            nxt = edge[0]
            count = deps.get(nxt)
            if count is None:
                deps[nxt] = 1
                if nxt not in root_nodes:
                    stack.append(nxt)
            else:
                deps[nxt] = count + 1
            if parents is not None:
                parents.setdefault(nxt, []).append(node)
    needed = wanted = None
    if targets is not None:
        needed, wanted = _prune(targets, parents, capture is not None)
        keep = needed | set(wanted)
        results = [None] * len(targets)

    buffers: dict[Function, list] = {}
    # the TBackward0 nodes run for Function.t_edges, alive until the pass returns as the graph's
    # own (observers tell one run of a node from another by its id)
    transposed: list = []
    ready: list = []
    counter = 0
    for (node, nr), g in roots:
        buf = buffers.get(node)
        if buf is None:
            buf = buffers[node] = [None] * node.num_outputs
        _accumulate(buf, nr, g)
    del g, roots
    for node in list(buffers):
        if deps.get(node, 0) == 0:
            heapq.heappush(ready, (-node.sequence_nr, counter, node))
            counter += 1

    prev = STATE.enabled
    STATE.enabled = False
    # A node made ready while no other node waits is the next to run whatever its sequence
    # number: it runs without the heap (a chain's every node: its push and pop skipped).
    # Invariant: `direct` is set only while `ready` is empty.
    direct = None
    push, pop = heapq.heappush, heapq.heappop
    try:
        while True:
            if direct is not None:
                node, direct = direct, None
            elif ready:
                node = pop(ready)[2]
            else:
                break
            grads = buffers.pop(node)
            hooks = node.tensor_hooks
            if hooks:
                _run_hooks(hooks, grads)
            retained = node.retained
            if retained:
                _retain_grads(retained, grads)
            edges = node._edges
            if needed is not None:
                for nr, i in wanted.get(node, ()):
                    results[i] = grads[nr]
                if node not in needed:
                    grads = [None]  # not on a path to an input: nothing to compute
                else:  # compute only the gradients that lead somewhere wanted
                    node._edges = tuple(
                        e if e is not None and e[0] in keep else None for e in edges
                    )
            # While observers listen, backward allocations are attributed to their node (the op
            # name, read only for events) and observers (memprof's recorder) learn which node
            # runs, through inner ops too; otherwise nothing needs the name.
            scope = _tracked.enter_node(node) if _tracked.observed else None
            try:
                if len(grads) == 1:
                    g = grads[0]
                    del grads
                    if g is None:
                        out = [None] * len(node._edges)
                    else:
                        out = list(node.backward(g))
                        del g
                else:
                    out = list(node.backward(*grads))
                    for i in range(len(grads)):  # freed first to last, as torch's input buffer
                        grads[i] = None
                    del grads
            finally:
                if scope is not None:
                    _tracked.leave_node(scope)
                if needed is not None:
                    node._edges = edges
            if not retain_graph:
                node.release_saved()
            dtypes = node.input_dtypes
            n_out = len(out)
            # edge_order: the order PyTorch's node lists its inputs in, when the engine's
            # arguments come in another (Linear: AddmmBackward0's self=bias, mat1, mat2)
            t_edges = node.t_edges
            summed = False  # a gradient left in `out` after being summed into a buffer
            for i in node.edge_order or range(len(edges)):
                edge = edges[i]
                if edge is None:
                    continue
                nxt, nr = edge
                if i in t_edges and i < n_out and out[i] is not None:
                    # torch's TBackward0 between: a node of its own, made ready here
                    nxt, nr = _Transposed(edge, node.sequence_nr - 0.5), 0
                    transposed.append(nxt)
                    deps[nxt] = 1
                    if needed is not None:
                        needed.add(nxt)
                buf = buffers.get(nxt)
                if buf is None:
                    buf = buffers[nxt] = [None] * nxt.num_outputs
                gi = None
                if i < n_out:
                    gi = out[i]
                    out[i] = None  # the buffer becomes the gradient's only holder
                if gi is not None:
                    dt = gi._dtype
                    if dtypes and dt is not dtypes[i] and dtypes[i] is not None:
                        gi = gi.to(dtypes[i])  # PyTorch's validate_outputs (float32 + bfloat16
                        # under autocast: a bf16 gradient)
                    elif dt.emulated:  # bfloat16 held in float32: a bf16 kernel's values
                        _round_emulated(gi)
                    if buf[nr] is None:  # the first gradient to arrive: nothing to sum
                        buf[nr] = gi
                    else:
                        # torch's InputBuffer::add moves only a first gradient into the buffer:
                        # one summed in is read, left in evaluate_function's outputs, and freed
                        # with them once every edge is served (after the next sums' blocks)
                        out[i] = gi
                        summed = True
                        _accumulate(buf, nr, gi)
                del gi
                left = deps[nxt] - 1
                deps[nxt] = left
                if not left:
                    if direct is None and not ready:
                        direct = nxt
                    else:
                        if direct is not None:  # two ready: both to the heap, in order
                            push(ready, (-direct.sequence_nr, counter, direct))
                            counter += 1
                            direct = None
                        push(ready, (-nxt.sequence_nr, counter, nxt))
                        counter += 1
            # The gradients summed into a buffer die now, first to last as torch's outputs vector
            # (a list's del frees its items last to first).
            if summed:
                for i in node.edge_order or range(n_out):
                    if i < n_out:
                        out[i] = None
            # `buf` is the last edge's gradient list: left bound it would pin that gradient, and
            # AccumulateGrad would copy it instead of taking it over (the bias of every Linear).
            del out
            buf = None
    finally:
        STATE.enabled = prev
    if targets is None:
        return None
    if capture is not None:
        return results
    for t, g in zip(inputs, results, strict=True):  # backward(inputs=): non-leaf inputs
        if g is not None and t.grad_fn is not None:
            t._grad = kernels.copy_new(g, contiguous=True) if t._grad is None else t._grad + g
    return None


def _prune(targets, parents, capture: bool):
    """(nodes that lead to a target, {node: [(input_nr, result index)]} to read gradients at)."""
    wanted: dict = {}
    needed = set()
    stack = []
    for i, t in enumerate(targets):
        node, nr = gradient_edge(t)
        if capture or t.grad_fn is not None:
            wanted.setdefault(node, []).append((nr, i))
        if not capture and t.grad_fn is None:
            needed.add(node)  # backward(inputs=[leaf]): its AccumulateGrad runs
        stack.extend(parents.get(node, ()))
    while stack:
        node = stack.pop()
        if node in needed:
            continue
        needed.add(node)
        stack.extend(parents.get(node, ()))
    return needed, wanted


def _run_hooks(hooks, grads) -> None:
    for nr, fns in hooks.items():
        if isinstance(fns, dict):
            fns = list(fns.values())
        for fn in fns:
            g = grads[nr]
            if g is None:
                break
            new = fn(g)
            if new is not None:
                if not isinstance(new, Tensor) or new.shape != g.shape:
                    raise RuntimeError(
                        "hook returned a value that is not a Tensor of the gradient's shape "
                        f"{list(g.shape)}"
                    )
                grads[nr] = new


def _retain_grads(retained, grads) -> None:
    """retain_grad(): a non-leaf keeps (a copy of) the gradient arriving at its grad_fn."""
    for ref, nr in retained:
        t = ref()
        g = grads[nr]
        if t is None or g is None:
            continue
        if t._grad is None:
            t._grad = kernels.copy_new(g, contiguous=True)
        else:
            t._grad = kernels.add_new(t._grad, g)
