"""engine.autograd.grad / backward, Tensor.register_hook and inference_mode (PyTorch's names).

>>> gx, = engine.autograd.grad(loss, [x])        # d loss / d x, nothing accumulated in .grad
>>> h = w.register_hook(lambda g: g.clamp(-1, 1)) # runs on w's gradient before it is used
>>> with engine.inference_mode(): y = model(x)    # no history, as no_grad
"""

from __future__ import annotations

import itertools
from collections import OrderedDict

from engine.autograd.grad_mode import no_grad
from engine.tensor import Tensor

_hook_ids = itertools.count()


def _as_list(x):
    if x is None:
        return None
    if isinstance(x, Tensor):
        return [x]
    return list(x)


def _check_inputs(inputs, opname):
    for i, t in enumerate(inputs):
        if not isinstance(t, Tensor):
            raise TypeError(f"{opname}: inputs[{i}] is {type(t).__name__}, expected a Tensor")
        if not t.requires_grad:
            raise RuntimeError(
                f"One of the differentiated Tensors (inputs[{i}]) does not require grad"
            )


def _run(*args, **kwargs):
    """The autograd engine's backward; while a profiler listens, in allocator phase "backward"
    (as Tensor.backward), so memprof.profile tells the phase apart."""
    from engine.allocator import tracked
    from engine.autograd.engine import backward as run

    if tracked.observed and tracked.current_context().get("phase") != "backward":
        with tracked.context(phase="backward"):
            return run(*args, **kwargs)
    return run(*args, **kwargs)


def backward(tensors, grad_tensors=None, retain_graph=None, create_graph=False, inputs=None):
    """Accumulate d(sum of tensors)/d(leaf) into each leaf's .grad (only `inputs`' when given)."""
    run = _run
    if create_graph:
        raise NotImplementedError("backward(create_graph=True) is not supported")
    tensors = _as_list(tensors)
    grads = _as_list(grad_tensors) or [None] * len(tensors)
    inputs = _as_list(inputs)
    if inputs is not None:
        if not inputs:
            raise RuntimeError("'inputs' argument to backward() cannot be empty.")
        _check_inputs(inputs, "backward")
    run(tensors, grads, retain_graph=retain_graph, inputs=inputs)


def grad(
    outputs,
    inputs,
    grad_outputs=None,
    retain_graph=None,
    create_graph=False,
    only_inputs=True,
    allow_unused=None,
    is_grads_batched=False,
    materialize_grads=False,
):
    """The gradients of `outputs` with respect to `inputs`, returned (nothing goes into .grad).

    Only the nodes on a path from outputs to inputs run, and each computes only the gradients
    that lead to an input (as PyTorch's engine does), so the memory is that of this
    differentiation alone. create_graph=True (higher order) is not supported.
    """
    run = _run

    if create_graph:
        raise NotImplementedError(
            "autograd.grad(create_graph=True) (higher-order gradients) is not supported"
        )
    if is_grads_batched:
        raise NotImplementedError("autograd.grad(is_grads_batched=True) is not supported")
    single = isinstance(inputs, Tensor)
    outputs, inputs = _as_list(outputs), _as_list(inputs)
    if not inputs:
        raise RuntimeError("grad requires non-empty inputs.")
    _check_inputs(inputs, "grad")
    grads = _as_list(grad_outputs) or [None] * len(outputs)
    if allow_unused is None:
        allow_unused = materialize_grads
    result = run(outputs, grads, retain_graph=retain_graph, capture=inputs)
    out = []
    for i, (t, g) in enumerate(zip(inputs, result, strict=True)):
        if g is None:
            if not allow_unused:
                raise RuntimeError(
                    f"One of the differentiated Tensors (inputs[{i}]) appears to not have been "
                    "used in the graph. Set allow_unused=True if this is the desired behavior."
                )
            if materialize_grads:
                from engine.creation import zeros_like

                g = zeros_like(t)
        elif g._grad_fn is not None or g.requires_grad or g._base is not None:
            g = Tensor._make(g._data, g._storage, g._dtype, g._device)
        out.append(g)
    del single
    return tuple(out)


class _HookHandle:
    """What register_hook returns: .remove() takes the hook off."""

    def __init__(self, hooks: OrderedDict, key: int):
        self._hooks, self.id = hooks, key

    def remove(self) -> None:
        self._hooks.pop(self.id, None)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()


def register_hook(self: Tensor, hook) -> _HookHandle:
    """Call hook(grad) whenever this tensor's gradient is computed; a returned tensor replaces
    the gradient (before it is accumulated into .grad for a leaf, or passed on otherwise)."""
    if not self.requires_grad:
        raise RuntimeError("cannot register a hook on a tensor that doesn't require gradient")
    if not callable(hook):
        raise TypeError(f"register_hook expects a callable, got {type(hook).__name__}")
    fn = self.grad_fn
    if fn is None:  # a leaf: AccumulateGrad reads the tensor's own hooks
        hooks = self.__dict__.get("_backward_hooks")
        if hooks is None:
            hooks = self.__dict__["_backward_hooks"] = OrderedDict()
    else:
        table = fn.__dict__.setdefault("tensor_hooks", {})
        hooks = table.setdefault(self._output_nr, OrderedDict())
    key = next(_hook_ids)
    hooks[key] = hook
    return _HookHandle(hooks, key)


def register_post_accumulate_grad_hook(self: Tensor, hook) -> _HookHandle:
    """Call hook(tensor) once this leaf's gradient has been accumulated into its .grad, during
    backward (under no_grad unless create_graph): e.g. an optimizer step per parameter inside
    backward, which frees each gradient as soon as it is used (PyTorch's "optimizer step in
    backward"). Not run by autograd.grad, which accumulates nothing."""
    if not self.requires_grad:
        raise RuntimeError("cannot register a hook on a tensor that doesn't require gradient")
    if self.grad_fn is not None:
        raise RuntimeError("post accumulate grad hooks cannot be registered on non-leaf tensors")
    hooks = self.__dict__.get("_post_accumulate_grad_hooks")
    if hooks is None:
        hooks = self.__dict__["_post_accumulate_grad_hooks"] = OrderedDict()
    key = next(_hook_ids)
    hooks[key] = hook
    return _HookHandle(hooks, key)


class _InferenceState:
    enabled = False


INFERENCE = _InferenceState()


class inference_mode(no_grad):  # noqa: N801 - PyTorch's spelling
    """no_grad for inference: ops record no history and keep nothing for backward.

    Memory is the same as under no_grad. (PyTorch's inference tensors also skip version
    counters; the engine's tensors keep theirs, which costs no memory.)
    """

    def __init__(self, mode: bool = True):
        self.mode = bool(mode)
        self._target = not self.mode

    def __enter__(self):
        self._prev_inference = INFERENCE.enabled
        INFERENCE.enabled = self.mode
        if self.mode:
            return super().__enter__()
        return self

    def __exit__(self, *exc):
        INFERENCE.enabled = self._prev_inference
        if self.mode:
            return super().__exit__(*exc)
        return False

    def __call__(self, func):
        import functools

        mode = self.mode

        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            with inference_mode(mode):
                return func(*args, **kwargs)

        return wrapper


def is_inference_mode_enabled() -> bool:
    return INFERENCE.enabled


__all__ = [
    "backward",
    "grad",
    "inference_mode",
    "is_inference_mode_enabled",
    "register_hook",
]
