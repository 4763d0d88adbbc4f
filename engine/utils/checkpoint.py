"""engine.utils.checkpoint: activation checkpointing (torch.utils.checkpoint's names).

>>> from engine.utils.checkpoint import checkpoint
>>> y = checkpoint(block, x, use_reentrant=False)   # block's activations are not kept
>>> y.sum().backward()                                # ... they are recomputed here

Non-reentrant (use_reentrant=False, what PyTorch recommends), as PyTorch implements it: the
function runs normally, but every tensor its ops save for backward goes through a
saved_tensors_hooks pack hook that keeps only a small handle, so the region's activations are
freed as soon as forward is done with them. When backward first needs one of them, the function
runs again (same inputs, the random state of the first run, grad enabled) and the tensors its ops
save are matched to the handles in order; the recomputation stops as soon as every handle has its
tensor (PyTorch's early stop). Each recomputed tensor is dropped when the node that needed it has
run. So a checkpointed region costs, in backward, one recomputation of its saved activations at
once, then frees them node by node, as in PyTorch.

Reentrant (use_reentrant=True, PyTorch's default when not given, with a warning): the function
runs under no_grad; one node keeps the inputs; its backward recomputes the function with grad and
runs a nested backward through it, which accumulates the parameters' gradients directly.
"""

from __future__ import annotations

import warnings
import weakref

from engine.allocator.tracked import context
from engine.autograd.function import Function
from engine.autograd.grad_mode import STATE, enable_grad, no_grad
from engine.autograd.graph import saved_tensors_hooks
from engine.tensor import Tensor


class CheckpointError(RuntimeError):
    """The recomputation did not reproduce what the first forward saved."""


class _StopRecomputation(Exception):
    pass


class _Holder:
    """What the graph keeps for one saved tensor of a checkpointed region (no bytes)."""

    __slots__ = ("index", "meta", "__weakref__")

    def __init__(self, index: int, meta):
        self.index = index
        self.meta = meta


# PyTorch stashes torch.get_rng_state() per checkpointed call when preserve_rng_state: a CPU
# ByteTensor of 5056 bytes (the Mersenne Twister state), alive as long as the graph. The engine's
# random state is numpy's; the same bytes are charged to the cpu allocator so that cpu figures
# match PyTorch's (a cuda or meta device's figures are unaffected, as in PyTorch).
TORCH_CPU_RNG_STATE_BYTES = 5056


class _RngState:
    __slots__ = ("state", "stand_in")

    def __init__(self):
        from engine.creation import empty, get_generator
        from engine.dtypes import uint8

        self.state = get_generator().bit_generator.state
        with context(category="rng_state"):
            self.stand_in = empty(TORCH_CPU_RNG_STATE_BYTES, dtype=uint8, device="cpu")


def _rng_state():
    from engine.creation import get_generator

    return get_generator().bit_generator.state


def _set_rng_state(state) -> None:
    from engine.creation import get_generator

    get_generator().bit_generator.state = state


def _autocast_state():
    """The autocast region active at the first run (PyTorch reruns under the same one)."""
    from engine.amp import autocast_mode

    s = autocast_mode.STATE
    return (s.device_type, s.dtype, s.cache_enabled) if s.active else None


def _sdpa_backends():
    from engine.ops import attention

    return attention.CHOICE.backends


class _Rerun:
    """The first run's autocast region and attention backends, around the recomputation (a
    backward outside `with autocast(...)` / `with sdpa_kernel(...)` must recompute the same
    tensors)."""

    def __init__(self, autocast_state, backends):
        self.autocast_state, self.backends = autocast_state, backends

    def __enter__(self):
        from engine.ops import attention

        self._prev = attention.CHOICE.backends
        attention.CHOICE.backends = self.backends
        self._amp = None
        if self.autocast_state is not None:
            from engine.amp import autocast

            device_type, dtype, cache_enabled = self.autocast_state
            self._amp = autocast(device_type, dtype=dtype, cache_enabled=cache_enabled)
            self._amp.__enter__()
        return self

    def __exit__(self, *exc):
        from engine.ops import attention

        if self._amp is not None:
            self._amp.__exit__(*exc)
        attention.CHOICE.backends = self._prev
        return False


class _Frame:
    """One checkpointed call: how to rerun it, and the tensors a rerun recovered."""

    def __init__(self, fn, args, kwargs, rng_state, determinism_check):
        self.fn, self.args, self.kwargs = fn, args, kwargs
        self.autocast, self.backends = _autocast_state(), _sdpa_backends()
        self.rng_state = rng_state
        self.check = determinism_check != "none"
        self.holders: list = []  # weak references, in pack order
        self.recomputed: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    # the first forward ---------------------------------------------------------------------------
    def pack(self, t: Tensor) -> _Holder:
        h = _Holder(len(self.holders), (tuple(t.shape), t._dtype, t._device))
        self.holders.append(weakref.ref(h))
        return h

    def unpack(self, holder: _Holder) -> Tensor:
        t = self.recomputed.pop(holder, None)
        if t is None:
            self.recompute()
            t = self.recomputed.pop(holder, None)
            if t is None:
                raise CheckpointError(
                    "torch.utils.checkpoint: the recomputation saved fewer tensors than the first "
                    "forward (the function must run the same ops each time it is called)"
                )
        return t

    # the rerun in backward --------------------------------------------------------------------
    def recompute(self) -> None:
        wanted = [(i, r()) for i, r in enumerate(self.holders)]
        wanted = {i: h for i, h in wanted if h is not None and h not in self.recomputed}
        if not wanted:
            return
        last = max(wanted)
        counter = iter(range(len(self.holders) + 1))

        def pack(t: Tensor):
            i = next(counter)
            h = wanted.get(i)
            if h is not None:
                if self.check and (tuple(t.shape), t._dtype, t._device) != h.meta:
                    raise CheckpointError(
                        "torch.utils.checkpoint: Recomputed values for the following tensors have "
                        f"different metadata than during the forward pass: saved tensor {i} had "
                        f"{_describe(h.meta)}, recomputed {_describe((tuple(t.shape), t._dtype, t._device))}"
                    )
                self.recomputed[h] = t
            if i >= last:
                raise _StopRecomputation  # PyTorch's early stop: every handle has its tensor
            return None

        def unpack(_):
            raise RuntimeError("checkpoint: a recomputed graph is never run backward")

        current = _rng_state()
        if self.rng_state is not None:
            fork = _RngState()  # torch.random.fork_rng stashes the current state: 5056 bytes
            _set_rng_state(self.rng_state.state)
        try:
            with (
                enable_grad(),
                _Rerun(self.autocast, self.backends),
                saved_tensors_hooks(pack, unpack),
                context(checkpoint="recompute"),
            ):
                try:
                    self.fn(*self.args, **self.kwargs)
                except _StopRecomputation:
                    pass
        finally:
            _set_rng_state(current)
            fork = None  # noqa: F841 - freed here, as fork_rng's copy is


def _describe(meta) -> str:
    shape, dtype, device = meta
    return f"shape {list(shape)}, dtype {dtype.name}, device {device}"


def _checkpoint_without_reentrant(fn, args, kwargs, preserve_rng_state, determinism_check):
    rng = _RngState() if preserve_rng_state else None
    frame = _Frame(fn, args, kwargs, rng, determinism_check)
    with saved_tensors_hooks(frame.pack, frame.unpack):
        return fn(*args, **kwargs)


class CheckpointFunction(Function):
    """The reentrant form: forward under no_grad; backward reruns the function with grad."""

    def forward(self, *args, out=None, fn=None, rng_state=None):
        self.fn, self.rng_state = fn, rng_state
        self.autocast, self.backends = _autocast_state(), _sdpa_backends()
        self.inputs = args
        with no_grad():
            outputs = fn(*args)
        self.single = isinstance(outputs, Tensor)
        outs = (outputs,) if self.single else tuple(outputs)
        self.num_outputs = len(outs)
        return outputs if self.single else outs

    def to_save(self, tensors):
        return tuple(range(len(tensors)))

    def backward(self, *grads):
        from engine.autograd.engine import backward as run_backward

        saved = iter(self.saved_tensors)
        inputs = []
        for a in self.inputs:
            if isinstance(a, Tensor):
                d = next(saved)
                d.requires_grad = a.requires_grad and a._dtype.is_floating_point
                inputs.append(d)
            else:
                inputs.append(a)
        current = _rng_state()
        fork = None
        if self.rng_state is not None:
            fork = _RngState()  # torch.random.fork_rng stashes the current state: 5056 bytes
            _set_rng_state(self.rng_state.state)
        try:
            with (
                enable_grad(),
                _Rerun(self.autocast, self.backends),
                context(checkpoint="recompute"),
            ):
                outputs = self.fn(*inputs)
        finally:
            _set_rng_state(current)
            del fork
        outs = (outputs,) if isinstance(outputs, Tensor) else tuple(outputs)
        pairs = [(o, g) for o, g in zip(outs, grads, strict=False) if o.requires_grad]
        if not pairs:
            raise RuntimeError(
                "none of output has requires_grad=True, this checkpoint() is not necessary"
            )
        del outputs
        prev = STATE.enabled
        try:
            run_backward([o for o, _ in pairs], [g for _, g in pairs])
        finally:
            STATE.enabled = prev
        del pairs, outs
        result = []
        for a in inputs:
            if isinstance(a, Tensor):
                result.append(a._grad)
                a._grad = None
        self.inputs = None
        return tuple(result)

    def release_saved(self) -> None:
        super().release_saved()
        self.inputs = None

    def name(self):
        return "CheckpointFunctionBackward"


def checkpoint(
    function,
    *args,
    use_reentrant: bool | None = None,
    context_fn=None,
    determinism_check: str = "default",
    debug: bool = False,
    preserve_rng_state: bool = True,
    **kwargs,
):
    """Run `function(*args, **kwargs)` without keeping its activations; recompute them in backward.

    use_reentrant=False is PyTorch's recommended form (see the module docstring); not passing it
    warns and uses the reentrant form, as PyTorch 2.13 does.
    """
    if not callable(function):
        raise TypeError(f"checkpoint: function must be callable, got {type(function).__name__}")
    if context_fn is not None:
        raise NotImplementedError("checkpoint: context_fn is not supported")
    if determinism_check not in ("default", "none"):
        raise ValueError(
            f"determinism_check should be one of 'default', 'none', but got {determinism_check}"
        )
    if use_reentrant is None:
        warnings.warn(
            "engine.utils.checkpoint: the use_reentrant parameter should be passed explicitly "
            "(as in torch.utils.checkpoint); use_reentrant=False is recommended. Using the "
            "reentrant form, PyTorch's default.",
            stacklevel=2,
        )
        use_reentrant = True
    if not use_reentrant:
        return _checkpoint_without_reentrant(
            function, args, kwargs, preserve_rng_state, determinism_check
        )
    if kwargs:
        raise ValueError("Unexpected keyword arguments: " + ",".join(kwargs))
    if not any(isinstance(a, Tensor) and a.requires_grad for a in args):
        warnings.warn(
            "None of the inputs have requires_grad=True. Gradients will be None", stacklevel=2
        )
    rng = _RngState() if preserve_rng_state else None
    return CheckpointFunction.apply(*args, op="checkpoint", fn=function, rng_state=rng)


def checkpoint_sequential(functions, segments: int, input, use_reentrant=None, **kwargs):
    """Split a Sequential (or list of modules) into `segments` checkpointed runs; the last runs
    normally, as in PyTorch."""
    if use_reentrant is None:
        warnings.warn(
            "engine.utils.checkpoint.checkpoint_sequential: pass use_reentrant explicitly",
            stacklevel=2,
        )
        use_reentrant = True
    funcs = list(functions.children()) if hasattr(functions, "children") else list(functions)
    size = len(funcs) // segments
    end = -1

    def run(start, stop):
        def forward(x):
            for f in funcs[start : stop + 1]:
                x = f(x)
            return x

        return forward

    for start in range(0, size * (segments - 1), size):
        end = start + size - 1
        input = checkpoint(run(start, end), input, use_reentrant=use_reentrant, **kwargs)
    return run(end + 1, len(funcs) - 1)(input)


__all__ = ["CheckpointError", "checkpoint", "checkpoint_sequential"]
