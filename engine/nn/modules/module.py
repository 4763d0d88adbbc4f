"""Module: the base of layers and models (parameters, buffers, submodules, train/eval, state)."""

from __future__ import annotations

import functools
import itertools
from collections import OrderedDict, namedtuple

import numpy as np

from engine.autograd.grad_mode import no_grad
from engine.nn.parameter import Buffer, Parameter
from engine.tensor import Tensor


class _IncompatibleKeys(namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])):
    """load_state_dict's result, printed as torch's."""

    __slots__ = ()

    def __repr__(self) -> str:
        if not self.missing_keys and not self.unexpected_keys:
            return "<All keys matched successfully>"
        return super().__repr__()

    __str__ = __repr__


# Hooks every module runs (register_module_forward_pre_hook / register_module_forward_hook):
# a profiler uses them to attribute memory to the module that is running.
_global_forward_pre_hooks: dict = OrderedDict()
_global_forward_hooks: dict = OrderedDict()
_hook_ids = itertools.count()


class RemovableHandle:
    """Returned by the register_*_hook functions; `remove()` unregisters the hook."""

    def __init__(self, hooks: dict, key: int):
        self._hooks = hooks
        self.id = key

    def remove(self) -> None:
        self._hooks.pop(self.id, None)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()


def register_module_forward_pre_hook(hook) -> RemovableHandle:
    """hook(module, args) runs before every module's forward; it may return replacement args."""
    key = next(_hook_ids)
    _global_forward_pre_hooks[key] = hook
    return RemovableHandle(_global_forward_pre_hooks, key)


def register_module_forward_hook(hook) -> RemovableHandle:
    """hook(module, args, output) runs after every module's forward; it may replace the output."""
    key = next(_hook_ids)
    _global_forward_hooks[key] = hook
    return RemovableHandle(_global_forward_hooks, key)


class Module:
    """Base class of every layer: assign Parameters, buffers and Modules as attributes.

    >>> class MLP(Module):
    ...     def __init__(self):
    ...         super().__init__()
    ...         self.fc = Linear(4, 2)
    ...     def forward(self, x):
    ...         return self.fc(x)
    >>> [name for name, _ in MLP().named_parameters()]
    ['fc.weight', 'fc.bias']
    """

    training: bool

    def __init__(self) -> None:
        object.__setattr__(self, "training", True)
        object.__setattr__(self, "_parameters", OrderedDict())
        object.__setattr__(self, "_buffers", OrderedDict())
        object.__setattr__(self, "_non_persistent_buffers", set())
        object.__setattr__(self, "_modules", OrderedDict())
        object.__setattr__(self, "_forward_pre_hooks", OrderedDict())
        object.__setattr__(self, "_forward_hooks", OrderedDict())
        object.__setattr__(self, "_load_state_dict_pre_hooks", OrderedDict())

    # --- running ------------------------------------------------------------------------------
    def forward(self, *args, **kwargs):
        raise NotImplementedError(
            f'Module [{type(self).__name__}] is missing the required "forward" function'
        )

    def __call__(self, *args, **kwargs):
        pre = (*_global_forward_pre_hooks.values(), *self._forward_pre_hooks.values())
        for hook in pre:
            result = hook(self, args)
            if result is not None:
                args = result if isinstance(result, tuple) else (result,)
        output = self.forward(*args, **kwargs)
        for hook in (*_global_forward_hooks.values(), *self._forward_hooks.values()):
            result = hook(self, args, output)
            if result is not None:
                output = result
        return output

    def register_forward_pre_hook(self, hook) -> RemovableHandle:
        key = next(_hook_ids)
        self._forward_pre_hooks[key] = hook
        return RemovableHandle(self._forward_pre_hooks, key)

    def register_forward_hook(self, hook) -> RemovableHandle:
        key = next(_hook_ids)
        self._forward_hooks[key] = hook
        return RemovableHandle(self._forward_hooks, key)

    # --- registration -------------------------------------------------------------------------
    def register_parameter(self, name: str, param: Parameter | None) -> None:
        if "_parameters" not in self.__dict__:
            raise AttributeError("cannot assign parameter before Module.__init__() call")
        _check_name(name, self, "parameter")
        if param is not None and not isinstance(param, Parameter):
            raise TypeError(
                f"cannot assign '{type(param).__name__}' object to parameter '{name}' "
                "(engine.nn.Parameter or None required)"
            )
        if param is not None and param.grad_fn is not None:
            raise ValueError(
                f"Cannot assign non-leaf Tensor to parameter '{name}'. Model parameters must be "
                "created explicitly."
            )
        self._parameters[name] = param

    def register_buffer(self, name: str, tensor: Tensor | None, persistent: bool = True) -> None:
        """A tensor that belongs to the module's state but is not a parameter (running stats)."""
        if "_buffers" not in self.__dict__:
            raise AttributeError("cannot assign buffer before Module.__init__() call")
        _check_name(name, self, "buffer")
        if tensor is not None and not isinstance(tensor, Tensor):
            raise TypeError(
                f"cannot assign '{type(tensor).__name__}' object to buffer '{name}' (Tensor or None required)"
            )
        self._buffers[name] = tensor
        if persistent:
            self._non_persistent_buffers.discard(name)
        else:
            self._non_persistent_buffers.add(name)

    def add_module(self, name: str, module: Module | None) -> None:
        if module is not None and not isinstance(module, Module):
            raise TypeError(f"{type(module).__name__} is not a Module subclass")
        _check_name(name, self, "module", allow_dots=False)
        self._modules[name] = module

    register_module = add_module

    def __setattr__(self, name: str, value) -> None:
        d = self.__dict__
        params = d.get("_parameters")
        if isinstance(value, Parameter):
            if params is None:
                raise AttributeError("cannot assign parameters before Module.__init__() call")
            _remove_from(self, name, ("_buffers", "_modules"))
            self.register_parameter(name, value)
            return
        if params is not None and name in params:
            if value is not None:
                raise TypeError(
                    f"cannot assign '{type(value).__name__}' as parameter '{name}' "
                    "(engine.nn.Parameter or None expected)"
                )
            params[name] = None
            return
        modules = d.get("_modules")
        if isinstance(value, Module):
            if modules is None:
                raise AttributeError("cannot assign module before Module.__init__() call")
            _remove_from(self, name, ("_parameters", "_buffers"))
            modules[name] = value
            return
        if modules is not None and name in modules:
            if value is not None:
                raise TypeError(
                    f"cannot assign '{type(value).__name__}' as child module '{name}' "
                    "(engine.nn.Module or None expected)"
                )
            modules[name] = None
            return
        buffers = d.get("_buffers")
        if isinstance(value, Buffer):  # nn.Buffer: registered, with its persistence
            if buffers is None:
                raise AttributeError("cannot assign buffer before Module.__init__() call")
            _remove_from(self, name, ("_parameters", "_modules"))
            self.register_buffer(name, value, value.persistent)
            return
        if buffers is not None and name in buffers:
            if value is not None and not isinstance(value, Tensor):
                raise TypeError(
                    f"cannot assign '{type(value).__name__}' as buffer '{name}' (Tensor or None expected)"
                )
            buffers[name] = value
            return
        object.__setattr__(self, name, value)

    def __getattr__(self, name: str):
        d = self.__dict__
        for store in ("_parameters", "_buffers", "_modules"):
            values = d.get(store)
            if values is not None and name in values:
                return values[name]
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def __delattr__(self, name: str) -> None:
        for store in ("_parameters", "_buffers", "_modules"):
            values = self.__dict__.get(store)
            if values is not None and name in values:
                del values[name]
                self._non_persistent_buffers.discard(name)
                return
        object.__delattr__(self, name)

    def __dir__(self):
        keys = list(super().__dir__())
        for store in ("_parameters", "_buffers", "_modules"):
            keys += list(self.__dict__.get(store, {}))
        return sorted(set(keys))

    # --- iteration ----------------------------------------------------------------------------
    def named_modules(self, memo=None, prefix: str = "", remove_duplicate: bool = True):
        if memo is None:
            memo = set()
        if remove_duplicate:
            if id(self) in memo:
                return
            memo.add(id(self))
        yield prefix, self
        for name, module in self._modules.items():
            if module is None:
                continue
            sub = prefix + ("." if prefix else "") + name
            yield from module.named_modules(memo, sub, remove_duplicate)

    def modules(self):
        for _, module in self.named_modules():
            yield module

    def named_children(self):
        seen = set()
        for name, module in self._modules.items():
            if module is not None and id(module) not in seen:
                seen.add(id(module))
                yield name, module

    def children(self):
        for _, module in self.named_children():
            yield module

    def _named_members(self, store: str, prefix: str, recurse: bool, remove_duplicate: bool = True):
        seen = set()
        modules = (
            self.named_modules(prefix=prefix, remove_duplicate=remove_duplicate)
            if recurse
            else [(prefix, self)]
        )
        for module_prefix, module in modules:
            for name, value in module.__dict__[store].items():
                if value is None or (remove_duplicate and id(value) in seen):
                    continue
                seen.add(id(value))
                yield module_prefix + ("." if module_prefix else "") + name, value

    def named_parameters(
        self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True
    ):
        yield from self._named_members("_parameters", prefix, recurse, remove_duplicate)

    def parameters(self, recurse: bool = True):
        for _, p in self.named_parameters(recurse=recurse):
            yield p

    def named_buffers(self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True):
        yield from self._named_members("_buffers", prefix, recurse, remove_duplicate)

    def buffers(self, recurse: bool = True):
        for _, b in self.named_buffers(recurse=recurse):
            yield b

    def get_submodule(self, target: str) -> Module:
        module = self
        for part in target.split(".") if target else []:
            if part not in module._modules:
                raise AttributeError(f"{type(module).__name__} has no attribute `{part}`")
            module = module._modules[part]
        return module

    # --- modes and gradients ------------------------------------------------------------------
    def train(self, mode: bool = True) -> Module:
        if not isinstance(mode, bool):
            raise ValueError("training mode is expected to be boolean")
        for module in self.modules():
            object.__setattr__(module, "training", mode)
        return self

    def eval(self) -> Module:
        return self.train(False)

    def requires_grad_(self, requires_grad: bool = True) -> Module:
        for p in self.parameters():
            p.requires_grad_(requires_grad)
        return self

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Drop every parameter's .grad (the default), or zero it in place."""
        for p in self.parameters():
            _zero_grad(p, set_to_none)

    def apply(self, fn) -> Module:
        for module in self.children():
            module.apply(fn)
        fn(self)
        return self

    # --- moving and casting -------------------------------------------------------------------
    def _apply(self, fn) -> Module:
        """Replace every parameter's and buffer's data by fn(data), keeping the objects."""
        for module in self.modules():
            with no_grad():
                for p in module._parameters.values():
                    if p is None:
                        continue
                    p.data = fn(p.detach())
                    if p.grad is not None:
                        p.grad = fn(p.grad)
                for name, b in list(module._buffers.items()):
                    if b is not None:
                        module._buffers[name] = fn(b)
        return self

    def to(self, *args, dtype=None, device=None) -> Module:
        from engine import dtypes

        for a in args:
            if isinstance(a, Tensor):
                dtype, device = a.dtype, a.device
            elif isinstance(a, dtypes.dtype):
                dtype = a
            else:
                device = a

        def convert(t):
            dt = dtype if (dtype is not None and t.is_floating_point()) else None
            return t.to(dtype=dt, device=device)

        return self._apply(convert)

    def float(self) -> Module:
        from engine import dtypes

        return self._apply(lambda t: t.to(dtypes.float32) if t.is_floating_point() else t)

    def double(self) -> Module:
        from engine import dtypes

        return self._apply(lambda t: t.to(dtypes.float64) if t.is_floating_point() else t)

    def cpu(self) -> Module:
        return self._apply(lambda t: t.to(device="cpu"))

    def cuda(self, device=None) -> Module:
        return self._apply(lambda t: t.to(device=device or "cuda"))

    # --- state --------------------------------------------------------------------------------
    def state_dict(self, destination=None, prefix: str = "", keep_vars: bool = False):
        """Parameters and persistent buffers by dotted name (detached unless keep_vars)."""
        if destination is None:
            destination = OrderedDict()
        for name, p in self._parameters.items():
            if p is not None:
                destination[prefix + name] = p if keep_vars else p.detach()
        for name, b in self._buffers.items():
            if b is not None and name not in self._non_persistent_buffers:
                destination[prefix + name] = b if keep_vars else b.detach()
        for name, module in self._modules.items():
            if module is not None:
                module.state_dict(destination, prefix + name + ".", keep_vars)
        return destination

    def _register_load_state_dict_pre_hook(self, hook, with_module: bool = False):
        """hook(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
        error_msgs) runs before this module loads its own entries (torch's private hook, which
        lazy modules use to materialize what they load into); with_module: hook(module, ...)."""
        key = next(_hook_ids)
        hooks = self.__dict__.setdefault("_load_state_dict_pre_hooks", OrderedDict())
        hooks[key] = functools.partial(hook, self) if with_module else hook
        return RemovableHandle(hooks, key)

    def register_load_state_dict_pre_hook(self, hook):
        """hook(module, state_dict, prefix, local_metadata, strict, missing_keys,
        unexpected_keys, error_msgs), before this module loads its entries."""
        return self._register_load_state_dict_pre_hook(hook, with_module=True)

    def _load_from_state_dict(
        self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
    ):
        """Load this module's own parameters and persistent buffers from `state_dict` (keys
        `prefix + name`), after its load pre-hooks; torch's per-module step of load_state_dict."""
        for hook in tuple(self.__dict__.get("_load_state_dict_pre_hooks", {}).values()):
            hook(
                state_dict,
                prefix,
                local_metadata,
                strict,
                missing_keys,
                unexpected_keys,
                error_msgs,
            )
        local = [(n, p) for n, p in self._parameters.items() if p is not None]
        local += [
            (n, b)
            for n, b in self._buffers.items()
            if b is not None and n not in self._non_persistent_buffers
        ]
        for name, target in local:
            key = prefix + name
            if key not in state_dict:
                missing_keys.append(key)
                continue
            value = state_dict[key]
            src = value if isinstance(value, Tensor) else np.asarray(value)
            lazy = getattr(target, "cls_to_become", None) is not None  # uninitialized
            if not lazy and tuple(src.shape) != tuple(target.shape):
                error_msgs.append(
                    f"size mismatch for {key}: copying a param with shape "
                    f"{_size(src.shape)} from checkpoint, the shape in current model is "
                    f"{_size(target.shape)}."
                )
                continue
            if lazy:  # torch copies an uninitialized value into one: nothing to copy
                continue
            with no_grad():
                target.copy_(src)
        if strict:
            names = {n for n, _ in local}
            for key in state_dict:
                if key.startswith(prefix):
                    parts = key[len(prefix) :].split(".", 1)
                    if len(parts) > 1:
                        if parts[0] not in self._modules:
                            unexpected_keys.append(key)
                    elif parts[0] not in names:
                        unexpected_keys.append(key)

    def load_state_dict(self, state_dict, strict: bool = True, assign: bool = False):
        """Copy values into the parameters and buffers in place (tensors or array-likes), module
        by module as torch's (each module's load pre-hooks first, then its entries)."""
        missing, unexpected, errors = [], [], []

        def load(module, local_state, prefix=""):
            module._load_from_state_dict(local_state, prefix, {}, True, missing, unexpected, errors)
            for name, child in module._modules.items():
                if child is not None:
                    child_prefix = prefix + name + "."
                    child_state = {
                        k: v for k, v in local_state.items() if k.startswith(child_prefix)
                    }
                    load(child, child_state, child_prefix)

        load(self, OrderedDict(state_dict))
        if strict:
            if unexpected:
                errors.insert(
                    0,
                    "Unexpected key(s) in state_dict: "
                    + ", ".join(f'"{k}"' for k in unexpected)
                    + ". ",
                )
            if missing:
                errors.insert(
                    0,
                    "Missing key(s) in state_dict: " + ", ".join(f'"{k}"' for k in missing) + ". ",
                )
        if errors:
            raise RuntimeError(
                f"Error(s) in loading state_dict for {type(self).__name__}:\n\t"
                + "\n\t".join(errors)
            )
        return _IncompatibleKeys(missing, unexpected)

    # --- printing -----------------------------------------------------------------------------
    def extra_repr(self) -> str:
        return ""

    def _get_name(self) -> str:
        return type(self).__name__

    def __repr__(self) -> str:
        lines = []
        extra = self.extra_repr()
        if extra:
            lines = extra.split("\n")
        for name, module in self._modules.items():
            body = repr(module).replace("\n", "\n  ")
            lines.append(f"({name}): {body}")
        main = self._get_name() + "("
        if lines:
            if len(lines) == 1 and not self._modules:
                main += lines[0]
            else:
                main += "\n  " + "\n  ".join(lines) + "\n"
        return main + ")"


def _zero_grad(p: Tensor, set_to_none: bool) -> None:
    if p.grad is None:
        return
    if set_to_none:
        p.grad = None
        return
    g = p.grad
    if g.grad_fn is not None:
        g.detach_()
    else:
        g.requires_grad_(False)
    with no_grad():
        g.zero_()


def _size(shape) -> str:
    return f"engine.Size({list(shape)})"


def _check_name(name, module, kind, allow_dots=False):
    if not isinstance(name, str):
        raise TypeError(f"{kind} name should be a string. Got {type(name).__name__}")
    if not name:
        raise KeyError(f'{kind} name can\'t be empty string ""')
    if "." in name and not allow_dots:
        raise KeyError(f'{kind} name can\'t contain "."')
    stores = {"parameter": "_parameters", "buffer": "_buffers", "module": "_modules"}
    if hasattr(type(module), name) or (
        name in module.__dict__ and name not in module.__dict__[stores[kind]]
    ):
        raise KeyError(f"attribute '{name}' already exists")


def _remove_from(module, name, stores):
    """Forget `name` as a plain attribute and in the given stores (it is being re-registered)."""
    module.__dict__.pop(name, None)
    for store in stores:
        values = module.__dict__.get(store)
        if values is not None and name in values:
            del values[name]
