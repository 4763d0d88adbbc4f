"""Parameter: a Tensor that a Module registers as a parameter."""

from __future__ import annotations

from engine.tensor import Tensor


class Parameter(Tensor):
    """A leaf tensor that requires grad by default and shares memory with `data`.

    >>> w = Parameter(engine.zeros(3, 4))
    >>> w.requires_grad, w.is_leaf
    (True, True)
    """

    __slots__ = ()

    def __new__(cls, data: Tensor | None = None, requires_grad: bool = True):
        if data is None:
            from engine.creation import empty

            data = empty(0)
        if not isinstance(data, Tensor):
            raise TypeError(f"Parameter expects a Tensor, got {type(data).__name__}")
        # The same storage and metadata as `data`, out of any graph (like detach()).
        p = Tensor._make(data._data, data._storage, data._dtype, data._device)
        p.__class__ = cls
        if requires_grad:
            p.requires_grad_(True)
        return p

    def __init__(self, data: Tensor | None = None, requires_grad: bool = True):
        pass  # everything happens in __new__ (Tensor.__init__ refuses direct construction)

    def __deepcopy__(self, memo):
        """torch.nn.Parameter.__deepcopy__: a clone of the data as a new Parameter (its .grad
        is not copied)."""
        if id(self) in memo:
            return memo[id(self)]
        from engine.autograd.grad_mode import no_grad

        with no_grad():
            data = self.detach().clone()
        result = type(self)(data, self.requires_grad)
        memo[id(self)] = result
        return result

    def __repr__(self) -> str:
        return "Parameter containing:\n" + super().__repr__()

    __str__ = __repr__


class _BufferMeta(type):
    """isinstance(t, Buffer) holds for a tensor made by Buffer(...), as torch's metaclass does."""

    def __instancecheck__(cls, instance) -> bool:
        if cls is Buffer:
            return isinstance(instance, Tensor) and getattr(instance, "_is_buffer", False)
        return super().__instancecheck__(instance)


class Buffer(metaclass=_BufferMeta):
    """torch.nn.Buffer: a tensor marked as a module buffer. Buffer(data) is data detached (the
    same storage, out of any graph, requiring grad as data does) and flagged, so that assigning it to a module attribute
    registers a buffer (persistent or not) rather than a plain attribute.

    >>> self.running = engine.nn.Buffer(engine.zeros(3), persistent=False)
    """

    def __new__(cls, data: Tensor | None = None, *, persistent: bool = True):
        if data is None:
            from engine.creation import empty

            data = empty(0)
        t = data.detach()  # (a number raises AttributeError here, as torch's)
        if data.requires_grad:  # torch's detach().requires_grad_(data.requires_grad)
            t.requires_grad_(True)
        t._is_buffer = True
        t.persistent = persistent
        return t
