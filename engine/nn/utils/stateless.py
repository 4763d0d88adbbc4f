"""torch.nn.utils.stateless.functional_call and torch.func.functional_call: call a module with
the given tensors standing in for its parameters and buffers (swapped into `_parameters` /
`_buffers` for the call, the originals put back afterwards, tied weights untied onto the given
value). Nothing is allocated by the swap itself: the call's blocks are the module's forward's.

`engine.func` does not exist: torch.func.functional_call is `func_functional_call` here.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Sequence
from typing import Any

from engine.nn.modules.module import Module
from engine.tensor import Tensor

_MISSING: Any = object()


def _untie_named_tensors_map(
    module: Module, parameters_and_buffers: dict[str, Tensor]
) -> dict[str, Tensor]:
    all_named_tensors: dict[str, Tensor] = {}
    all_named_tensors.update(module.named_parameters(remove_duplicate=False))
    all_named_tensors.update(module.named_buffers(remove_duplicate=False))

    by_tensor: dict[int, set[str]] = {}
    for name, tensor in all_named_tensors.items():
        by_tensor.setdefault(id(tensor), set()).add(name)
    tied_names_map: dict[str, set[str]] = {}
    for tied_names in by_tensor.values():
        if len(tied_names) > 1:
            for tied_name in tied_names:
                tied_names_map[tied_name] = tied_names

    given = {name for name in parameters_and_buffers if name in tied_names_map}
    for given_name in given:
        tied_names = tied_names_map[given_name]
        if (
            len(tied_names & given) > 1
            and len({id(parameters_and_buffers[n]) for n in tied_names & given}) != 1
        ):
            raise ValueError(
                f"functional_call got multiple values for keys {sorted(tied_names)}, "
                f"which are tied. Consider using tie_weights=False"
            )
    untied = parameters_and_buffers.copy()
    for given_name in given:
        for tied_name in tied_names_map[given_name]:
            untied[tied_name] = parameters_and_buffers[given_name]
    return untied


def _submodule(module: Module, prefix: str) -> Module:
    if not prefix:
        return module
    for attr in prefix.split("."):
        try:
            sub = getattr(module, attr)
        except AttributeError as ex:
            raise AttributeError(f"{module._get_name()} has no attribute `{attr}`") from ex
        if not isinstance(sub, Module):
            raise TypeError(f"submodule `{prefix}`: {sub} is not an instance of torch.nn.Module")
        module = sub
    return module


def _swap_tensor(module: Module, path: str, tensor) -> Any:
    prefix, _, name = path.rpartition(".")
    module = _submodule(module, prefix)
    if tensor is not _MISSING and not isinstance(tensor, Tensor) and tensor is not None:
        raise TypeError(f"{tensor} is not an instance of torch.Tensor")
    if name == "":
        raise KeyError('tensor name can\'t be empty string ""')
    if name in module._parameters:
        orig = module._parameters[name]
        if tensor is not _MISSING:
            module._parameters[name] = tensor
        else:
            del module._parameters[name]
    elif name in module._buffers:
        orig = module._buffers[name]
        if tensor is not _MISSING:
            module._buffers[name] = tensor
        else:
            del module._buffers[name]
    else:
        orig = getattr(module, name) if hasattr(module, name) else _MISSING
        if orig is not _MISSING and not isinstance(orig, Tensor) and orig is not None:
            raise TypeError(f"attribute `{name}`: {orig} is not an instance of torch.Tensor")
        if tensor is not _MISSING:
            setattr(module, name, tensor)
        elif hasattr(module, name):
            delattr(module, name)
    return orig


def _swap_tensors_dict(module: Module, named: dict) -> dict:
    orig: dict = {}
    try:
        for name, tensor in named.items():
            orig[name] = _swap_tensor(module, name, tensor)
    except Exception:
        for name, tensor in orig.items():
            _swap_tensor(module, name, tensor)
        raise
    return orig


@contextlib.contextmanager
def _reparametrize_module(
    module: Module,
    parameters_and_buffers: dict[str, Tensor],
    tie_weights: bool = False,
    strict: bool = False,
    stack_weights: bool = False,
):
    if tie_weights:
        untied = _untie_named_tensors_map(module, parameters_and_buffers)
    else:
        untied = parameters_and_buffers

    if strict:
        valid = {n for n, _ in module.named_parameters(remove_duplicate=False)}
        valid |= {n for n, _ in module.named_buffers(remove_duplicate=False)}
        missing_keys, unexpected_keys = sorted(valid - set(untied)), sorted(set(untied) - valid)
        error_msgs = []
        if unexpected_keys:
            error_msgs.append(f"Unexpected key(s): {', '.join(map(repr, unexpected_keys))}.")
        if missing_keys:
            error_msgs.append(f"Missing key(s): {', '.join(map(repr, missing_keys))}.")
        if error_msgs:
            raise RuntimeError(
                "Error(s) in reparametrizing for {}:\n\t{}".format(
                    module._get_name(), "\n\t".join(error_msgs)
                )
            )

    orig: dict = {}
    try:
        orig = _swap_tensors_dict(module, untied)
        yield
    finally:
        if stack_weights:
            orig = dict(reversed(orig.items()))
        new = _swap_tensors_dict(module, orig)
        parameters_and_buffers.update({k: new[k] for k in parameters_and_buffers if k in new})


def _functional_call(
    module: Module,
    parameters_and_buffers: dict[str, Tensor],
    args: Any = None,
    kwargs: dict[str, Any] | None = None,
    *,
    tie_weights: bool = True,
    strict: bool = False,
):
    if kwargs is None:
        kwargs = {}
    if args is None:
        args = ()
    elif not isinstance(args, tuple):
        args = (args,)
    with _reparametrize_module(
        module, parameters_and_buffers, tie_weights=tie_weights, strict=strict
    ):
        return module(*args, **kwargs)


def functional_call(
    module: Module,
    parameters_and_buffers: dict[str, Tensor],
    args: Any = None,
    kwargs: dict[str, Any] | None = None,
    *,
    tie_weights: bool = True,
    strict: bool = False,
):
    """Deprecated torch.nn.utils.stateless.functional_call: module(*args, **kwargs) with the
    given tensors standing in for its parameters and buffers."""
    warnings.warn(
        "`torch.nn.utils.stateless.functional_call` is deprecated as of PyTorch 2.0 and will "
        "be removed in a future version of PyTorch. Please use `torch.func.functional_call` "
        "instead which is a drop-in replacement.",
        FutureWarning,
        stacklevel=2,
    )
    return _functional_call(
        module, parameters_and_buffers, args, kwargs, tie_weights=tie_weights, strict=strict
    )


def func_functional_call(
    module: Module,
    parameter_and_buffer_dicts,
    args: Any = None,
    kwargs: dict[str, Any] | None = None,
    *,
    tie_weights: bool = True,
    strict: bool = False,
):
    """torch.func.functional_call: as the stateless one, also taking a sequence of dicts."""
    if isinstance(parameter_and_buffer_dicts, dict):
        parameters_and_buffers = parameter_and_buffer_dicts
    elif isinstance(parameter_and_buffer_dicts, Sequence):
        if not all(isinstance(d, dict) for d in parameter_and_buffer_dicts):
            raise ValueError(
                "Expected all elements of parameter_and_buffer_dicts to be dictionaries"
            )
        counts: dict[str, int] = {}
        for d in parameter_and_buffer_dicts:
            for k in d:
                counts[k] = counts.get(k, 0) + 1
        repeated_keys = [k for k, n in counts.items() if n > 1]
        if repeated_keys:
            raise ValueError(
                f"{repeated_keys} appeared in multiple dictionaries; behavior of functional "
                "call is ambiguous"
            )
        parameters_and_buffers = {k: v for d in parameter_and_buffer_dicts for k, v in d.items()}
    else:
        raise ValueError(
            "Expected parameter_and_buffer_dicts to be a dict, or a list/tuple of dicts, "
            f"but got {type(parameter_and_buffer_dicts)}"
        )
    return _functional_call(
        module, parameters_and_buffers, args, kwargs, tie_weights=tie_weights, strict=strict
    )


__all__ = ["func_functional_call", "functional_call"]
