"""parameters_to_vector / vector_to_parameters (torch.nn.utils.convert_parameters).

parameters_to_vector is one `cat` of the flattened parameters (one block, `CatBackward0`);
vector_to_parameters points each parameter's `.data` at a view of the vector (no copy).
"""

from __future__ import annotations

from engine.tensor import Tensor


def _check_param_device(param: Tensor, old_param_device: int | None) -> int:
    kind = param._device.type
    if old_param_device is None:
        return (param._device.index or 0) if kind == "cuda" else -1
    if kind == "cuda":
        warn = (param._device.index or 0) != old_param_device
    else:
        warn = old_param_device != -1
    if warn:
        raise TypeError(
            "Found two parameters on different devices, this is currently not supported."
        )
    return old_param_device


def parameters_to_vector(parameters) -> Tensor:
    """The parameters flattened and concatenated into one vector."""
    import engine

    param_device = None
    vec = []
    for param in parameters:
        param_device = _check_param_device(param, param_device)
        vec.append(param.view(-1))
    return engine.cat(vec)


def vector_to_parameters(vec: Tensor, parameters) -> None:
    """Make each parameter's data the matching slice of `vec` (a view, shared storage)."""
    if not isinstance(vec, Tensor):
        raise TypeError(f"expected torch.Tensor, but got: {_typename(vec)}")
    param_device = None
    pointer = 0
    for param in parameters:
        param_device = _check_param_device(param, param_device)
        num_param = param.numel()
        param.data = vec[pointer : pointer + num_param].view_as(param).data
        pointer += num_param


def _typename(obj) -> str:
    kind = type(obj)
    module = "" if kind.__module__ in ("builtins", "__builtin__", None) else kind.__module__ + "."
    return module + kind.__qualname__


__all__ = ["parameters_to_vector", "vector_to_parameters"]
