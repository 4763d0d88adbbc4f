"""The deprecated torch.nn.utils.spectral_norm / remove_spectral_norm: `weight_orig` is the
parameter, `weight_u` / `weight_v` the power-iteration buffers, and a forward pre-hook sets
`module.weight = weight_orig / dot(u, mv(W, v))` before each call (in training after
`n_power_iterations` steps under no_grad, written into u and v in place, then their clones).
torch's state_dict version metadata and its loader for version-0 checkpoints are not modelled.
"""

from __future__ import annotations

from engine.autograd.grad_mode import no_grad
from engine.nn import functional as F
from engine.nn.modules.module import Module
from engine.nn.parameter import Parameter
from engine.nn.utils.parametrizations import default_dim
from engine.nn.utils.weight_norm import remove_hook


class SpectralNorm:
    """The forward pre-hook: recomputes `module.<name>` from `<name>_orig`, `_u` and `_v`."""

    def __init__(self, name="weight", n_power_iterations=1, dim=0, eps=1e-12) -> None:
        self.name = name
        self.dim = dim
        if n_power_iterations <= 0:
            raise ValueError(
                "Expected n_power_iterations to be positive, but "
                f"got n_power_iterations={n_power_iterations}"
            )
        self.n_power_iterations = n_power_iterations
        self.eps = eps

    def reshape_weight_to_matrix(self, weight):
        if self.dim != 0:
            weight = weight.permute(self.dim, *[d for d in range(weight.ndim) if d != self.dim])
        return weight.reshape(weight.shape[0], -1)

    def compute_weight(self, module: Module, do_power_iteration: bool):
        import engine

        weight = getattr(module, self.name + "_orig")
        u = getattr(module, self.name + "_u")
        v = getattr(module, self.name + "_v")
        weight_mat = self.reshape_weight_to_matrix(weight)
        if do_power_iteration:
            with no_grad():
                for _ in range(self.n_power_iterations):
                    v = F.normalize(engine.mv(weight_mat.t(), u), dim=0, eps=self.eps, out=v)
                    u = F.normalize(engine.mv(weight_mat, v), dim=0, eps=self.eps, out=u)
                u = u.clone(memory_format="contiguous_format")
                v = v.clone(memory_format="contiguous_format")
        sigma = engine.dot(u, engine.mv(weight_mat, v))
        return weight / sigma

    def remove(self, module: Module) -> None:
        with no_grad():
            weight = self.compute_weight(module, do_power_iteration=False)
        delattr(module, self.name)
        delattr(module, self.name + "_u")
        delattr(module, self.name + "_v")
        delattr(module, self.name + "_orig")
        module.register_parameter(self.name, Parameter(weight.detach()))

    def __call__(self, module: Module, inputs) -> None:
        setattr(module, self.name, self.compute_weight(module, module.training))

    @staticmethod
    def apply(module: Module, name: str, n_power_iterations: int, dim: int, eps: float):
        for hook in module._forward_pre_hooks.values():
            if isinstance(hook, SpectralNorm) and hook.name == name:
                raise RuntimeError(
                    f"Cannot register two spectral_norm hooks on the same parameter {name}"
                )
        fn = SpectralNorm(name, n_power_iterations, dim, eps)
        weight = module._parameters[name]
        if weight is None:
            raise ValueError(f"`SpectralNorm` cannot be applied as parameter `{name}` is None")
        with no_grad():
            weight_mat = fn.reshape_weight_to_matrix(weight)
            h, w = weight_mat.shape
            u = F.normalize(weight.new_empty(h).normal_(0, 1), dim=0, eps=fn.eps)
            v = F.normalize(weight.new_empty(w).normal_(0, 1), dim=0, eps=fn.eps)
        delattr(module, fn.name)
        module.register_parameter(fn.name + "_orig", weight)
        setattr(module, fn.name, weight.data)
        module.register_buffer(fn.name + "_u", u)
        module.register_buffer(fn.name + "_v", v)
        module.register_forward_pre_hook(fn)
        return fn


def spectral_norm(module: Module, name: str = "weight", n_power_iterations: int = 1,
                  eps: float = 1e-12, dim: int | None = None) -> Module:  # fmt: skip
    """Deprecated form of parametrizations.spectral_norm (`<name>_orig`, `_u`, `_v`)."""
    if dim is None:
        dim = default_dim(module)
    SpectralNorm.apply(module, name, n_power_iterations, dim, eps)
    return module


def remove_spectral_norm(module: Module, name: str = "weight") -> Module:
    """Make `module.<name>` a plain parameter again (the normalized weight, no power step)."""
    return remove_hook(module, name, SpectralNorm, "spectral_norm")


__all__ = ["remove_spectral_norm", "spectral_norm"]
