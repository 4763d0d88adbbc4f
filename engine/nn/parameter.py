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

    def __repr__(self) -> str:
        return "Parameter containing:\n" + super().__repr__()

    __str__ = __repr__
