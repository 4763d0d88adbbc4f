"""The graph nodes autograd makes itself (the ops' nodes are their Function subclasses).

- AccumulateGrad: the node of a leaf; writes the incoming gradient into ``variable.grad``,
  taking the buffer over when nothing else holds it (PyTorch's AccumulateGrad::accumulateGrad).
- CopySlices: the base's node after an in-place op wrote through one of its views.
- ViewRegenBackward: a view's node regenerated from its base after an in-place op.

The backward walk that runs them is engine/autograd/engine.py.
"""

from __future__ import annotations

import sys

from engine import kernels
from engine.autograd.function import _MAX_SEQ, Function
from engine.backends.strided import is_dense
from engine.tensor import Tensor


class AccumulateGrad(Function):
    """Writes the incoming gradient into `variable.grad` (a leaf)."""

    def __init__(self, variable: Tensor):
        self.variable = variable
        self.sequence_nr = _MAX_SEQ
        self._edges = ()
        self.saved = []

    def name(self) -> str:
        return "AccumulateGrad"

    @property
    def tensor_hooks(self):
        """Tensor hooks on the gradient arriving here: the leaf's own (a non-leaf's are on its
        grad_fn, by output index)."""
        hooks = getattr(self.variable, "_backward_hooks", None)
        return {0: list(hooks.values())} if hooks else None

    def backward(self, grad):
        var = self.variable
        if var._grad is None:
            if _stealable(grad, var):
                var._grad = _as_plain(grad)
            else:
                var._grad = kernels.copy_new(grad, contiguous=True)
            alloc = var._grad._storage.allocator
            if alloc is not None and alloc.observers:
                alloc.tag(var._grad._storage.id, "category", "gradient")
        else:
            kernels.add_into(var._grad, grad)
            var._grad._storage.version += 1
        post = var.__dict__.get("_post_accumulate_grad_hooks")
        if post:
            del grad  # (torch's node no longer holds the incoming gradient when its hooks run)
            for hook in tuple(post.values()):
                ret = hook(var)
                if ret is var:  # (p.add_(...) returns the leaf itself: torch lets it pass)
                    continue
                if isinstance(ret, Tensor):
                    raise RuntimeError("Tensor post accumulate grad hooks should return None.")
                if ret is not None:
                    raise TypeError(f"expected Variable, but hook returned '{type(ret).__name__}'")
        return ()


def _as_plain(t: Tensor) -> Tensor:
    """The same storage and metadata, without history (what .grad holds)."""
    if t._grad_fn is None and not t.requires_grad and t._base is None:
        return t
    return Tensor._make(t._data, t._storage, t._dtype, t._device)


def _stealable(grad: Tensor, var: Tensor) -> bool:
    # PyTorch steals the incoming buffer when nothing else references the tensor and its layout
    # obeys the variable's (same strides, dense): a view counts too (Matmul's gradient ends in a
    # reshape), as in AccumulateGrad::accumulateGrad, which looks at the tensor's use count only.
    # References here: the engine's buffer slot was cleared before the call, so we expect the
    # `grad` argument, the caller's local and getrefcount's own.
    if grad._dtype is not var._dtype or not _obeys_layout(grad._data, var._data):
        return False
    if sys.getrefcount(grad) > 4:
        return False
    if grad._base is None:
        return sys.getrefcount(grad._storage) <= 3
    return _dense(grad._data)


def _obeys_layout(g, v) -> bool:
    """torch's obeys_layout_contract: a dense variable's gradient has its strides on every dim
    of more than one element (a size-1 dim's stride does not matter, unless it is 0); any other
    variable's gradient is C-contiguous."""
    if not _dense(v):
        expect = g.itemsize
        for n, sg in zip(reversed(g.shape), reversed(g.strides), strict=True):
            if n != 1 and sg != expect:
                return False
            expect *= n
        return True
    for n, sg, sv in zip(g.shape, g.strides, v.strides, strict=True):
        if n != 1:
            if sg != sv:
                return False
        elif sg == 0:
            return False
    return True


def _dense(a) -> bool:
    """Non-overlapping and dense (PyTorch's is_non_overlapping_and_dense), any order of dims."""
    return is_dense(a.shape, a.strides, a.itemsize)


class CopySlices(Function):
    """The base's node after an in-place op wrote through one of its views."""

    def __init__(self, base_edge, view_fn, fn: Function, base_shape, dtype, device):
        self.fn = fn
        self.view_fn = view_fn
        self.base_shape = base_shape
        self.dtype = dtype
        self.device = device
        self.sequence_nr = fn.sequence_nr
        self._edges = (base_edge,) + tuple(fn._edges[1:])
        self.saved = []

    def name(self) -> str:
        return "CopySlices"

    def release_saved(self) -> None:
        self.fn.release_saved()

    def backward(self, grad):
        result = kernels.copy_new(grad, contiguous=True)
        region = self.view_fn(result)
        grads = self.fn.backward(kernels.copy_new(region, contiguous=True))
        if grads[0] is None:
            kernels.fill_(region, 0)
        else:
            kernels.copy_into(region, grads[0])
        return (result,) + tuple(grads[1:])


class ViewRegenBackward(Function):
    """A view's node regenerated from its base after an in-place op (AsStridedBackward)."""

    def __init__(self, base_edge, view_fn, base_shape, dtype, device):
        self.view_fn = view_fn
        self.base_shape = base_shape
        self.dtype = dtype
        self.device = device
        self.sequence_nr = next(
            __import__("engine.autograd.function", fromlist=["_sequence"])._sequence
        )
        self._edges = (base_edge,)
        self.saved = []

    def name(self) -> str:
        return "AsStridedBackward0"

    def backward(self, grad):
        result = kernels.zeros(self.base_shape, self.dtype, self.device)
        kernels.copy_into(self.view_fn(result), grad)
        return (result,)
