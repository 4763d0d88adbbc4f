"""engine.autograd.graph: hooks on what autograd saves for backward (PyTorch's names).

>>> def pack(t):  return t.numpy().copy()        # e.g. move it elsewhere
>>> def unpack(a): return engine.tensor(a)
>>> with engine.autograd.graph.saved_tensors_hooks(pack, unpack):
...     y = x.sin()                                 # sin's saved x goes through pack
>>> y.sum().backward()                              # ... and comes back through unpack

While the hooks are active every tensor an op keeps for backward (its saved inputs and output,
and buffers such as dropout's mask or layer_norm's statistics) is handed to `pack_hook`; the
graph holds only what pack_hook returned, so the tensor's bytes are freed when nothing else holds
it. Backward calls `unpack_hook` on that object and uses the tensor it returns.
"""

from __future__ import annotations

from engine.autograd import function as _function


class saved_tensors_hooks:  # noqa: N801 - PyTorch's spelling
    """Context manager that installs a (pack_hook, unpack_hook) pair; pairs nest."""

    def __init__(self, pack_hook, unpack_hook):
        if not callable(pack_hook) or not callable(unpack_hook):
            raise TypeError("saved_tensors_hooks expects two callables (pack_hook, unpack_hook)")
        self.pack_hook = pack_hook
        self.unpack_hook = unpack_hook

    def __enter__(self):
        _function.SAVED_TENSORS_HOOKS.append((self.pack_hook, self.unpack_hook))
        return self

    def __exit__(self, *exc):
        _function.SAVED_TENSORS_HOOKS.pop()
        return False


class disable_saved_tensors_hooks:  # noqa: N801
    """Runs its body with no saved-tensor hooks active (they are restored on exit)."""

    def __init__(self, error_message: str = ""):
        self.error_message = error_message

    def __enter__(self):
        self._saved = list(_function.SAVED_TENSORS_HOOKS)
        _function.SAVED_TENSORS_HOOKS.clear()
        return self

    def __exit__(self, *exc):
        _function.SAVED_TENSORS_HOOKS[:] = self._saved
        return False


__all__ = ["disable_saved_tensors_hooks", "saved_tensors_hooks"]
