"""The deprecated torch.nn.utils.weight_norm / remove_weight_norm: `weight_g` and `weight_v`
are the parameters and a forward pre-hook sets `module.weight` to torch._weight_norm(v, g, dim)
before each call (a new weight per forward; the previous one is dropped when replaced).
Supported as the parametrization is: dim 0 or the weight's last dimension (the fused kernel).
"""

from __future__ import annotations

import warnings

from engine.nn.modules.module import Module
from engine.nn.parameter import Parameter
from engine.nn.utils.parametrizations import _WeightNorm
from engine.ops.nn.weight_norm import _weight_norm


class WeightNorm:
    """The forward pre-hook: recomputes `module.<name>` from `<name>_g` and `<name>_v`."""

    def __init__(self, name: str, dim: int | None) -> None:
        self.name = name
        self.dim = -1 if dim is None else dim

    def compute_weight(self, module: Module):
        g = getattr(module, self.name + "_g")
        v = getattr(module, self.name + "_v")
        return _weight_norm(v, g, self.dim)

    @staticmethod
    def apply(module: Module, name: str, dim: int | None) -> WeightNorm:
        warnings.warn(
            "`torch.nn.utils.weight_norm` is deprecated in favor of "
            "`torch.nn.utils.parametrizations.weight_norm`.",
            FutureWarning,
            stacklevel=3,
        )
        for hook in module._forward_pre_hooks.values():
            if isinstance(hook, WeightNorm) and hook.name == name:
                raise RuntimeError(
                    f"Cannot register two weight_norm hooks on the same parameter {name}"
                )
        fn = WeightNorm(name, dim)
        weight = getattr(module, name)
        g, _ = _WeightNorm(fn.dim).right_inverse(weight)  # refuses the unfused dims
        del module._parameters[name]
        module.register_parameter(name + "_g", Parameter(g.data))
        module.register_parameter(name + "_v", Parameter(weight.data))
        setattr(module, name, fn.compute_weight(module))
        module.register_forward_pre_hook(fn)
        return fn

    def remove(self, module: Module) -> None:
        weight = self.compute_weight(module)
        delattr(module, self.name)
        del module._parameters[self.name + "_g"]
        del module._parameters[self.name + "_v"]
        setattr(module, self.name, Parameter(weight.data))

    def __call__(self, module: Module, inputs) -> None:
        setattr(module, self.name, self.compute_weight(module))


def weight_norm(module: Module, name: str = "weight", dim: int | None = 0) -> Module:
    """Deprecated form of parametrizations.weight_norm (parameters `<name>_g`, `<name>_v`)."""
    WeightNorm.apply(module, name, dim)
    return module


def remove_weight_norm(module: Module, name: str = "weight") -> Module:
    """Make `module.<name>` a plain parameter again, holding the current normalized weight."""
    return remove_hook(module, name, WeightNorm, "weight_norm")


def remove_hook(module: Module, name: str, kind: type, what: str) -> Module:
    """Take the deprecated norm hook `kind` on `module.<name>` off (its `remove` leaves a plain
    parameter), or torch's ValueError naming `what` when there is none."""
    for k, hook in module._forward_pre_hooks.items():
        if isinstance(hook, kind) and hook.name == name:
            hook.remove(module)
            del module._forward_pre_hooks[k]
            return module
    raise ValueError(f"{what} of '{name}' not found in {module}")


__all__ = ["remove_weight_norm", "weight_norm"]
