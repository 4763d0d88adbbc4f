"""torch.nn.utils.parametrizations: weight_norm and spectral_norm as parametrizations.

`weight_norm(m)` makes `m.weight` torch._weight_norm(original1, original0, dim) on every read
(the fused kernel's node `WeightNormInterfaceBackward0`; engine/ops/nn/weight_norm.py): g is
`parametrizations.weight.original0`, v `original1`. `spectral_norm(m)` divides the weight by
its largest singular value, estimated by power iteration on the `_u` / `_v` buffers in training
(under no_grad, written in place), then `weight / vdot(u, mv(W, v))` (`DivBackward0`).
"""

from __future__ import annotations

from engine.autograd.grad_mode import no_grad
from engine.nn import functional as F
from engine.nn.modules.module import Module
from engine.nn.utils import parametrize
from engine.ops.nn.weight_norm import _weight_norm
from engine.tensor import Tensor


def _norm_except_dim(weight: Tensor, dim: int) -> Tensor:
    """torch.norm_except_dim(weight, 2, dim) for dim 0 or the last (values only, no graph)."""
    with no_grad():
        shape = [1] * weight.ndim
        shape[dim] = weight.shape[dim]
        if dim == 0:
            flat = weight.contiguous().reshape(weight.shape[0], -1)
            return flat.norm(2, 1).reshape(shape)
        flat = weight.contiguous().reshape(-1, weight.shape[-1])
        return flat.norm(2, 0).reshape(shape)


class _WeightNorm(Module):
    def __init__(self, dim: int | None = 0) -> None:
        super().__init__()
        self.dim = -1 if dim is None else dim

    def forward(self, weight_g, weight_v):
        return _weight_norm(weight_v, weight_g, self.dim)

    def right_inverse(self, weight):
        if self.dim != 0 and self.dim != weight.ndim - 1:
            raise NotImplementedError(
                "engine's weight_norm supports dim=0 and dim=weight.dim() - 1 (torch's fused "
                f"kernel), not dim={None if self.dim == -1 else self.dim}"
            )
        return _norm_except_dim(weight, self.dim), weight


def weight_norm(module: Module, name: str = "weight", dim: int | None = 0) -> Module:
    """w = g * v / ||v|| with g (`original0`) and v (`original1`) the parameters.

    >>> m = weight_norm(engine.nn.Linear(20, 40))
    >>> tuple(m.parametrizations.weight.original0.shape)
    (40, 1)
    """
    wn = _WeightNorm(dim)
    weight = getattr(module, name, None)
    if isinstance(weight, Tensor):
        wn.right_inverse(weight)  # the engine's refusal before the module changes
    parametrize.register_parametrization(module, name, wn, unsafe=True)

    def _weight_norm_compat_hook(state_dict, prefix, local_metadata, strict, missing_keys,
                                 unexpected_keys, error_msgs):  # fmt: skip
        g_key, v_key = f"{prefix}{name}_g", f"{prefix}{name}_v"
        if g_key in state_dict and v_key in state_dict:
            state_dict[f"{prefix}parametrizations.{name}.original0"] = state_dict.pop(g_key)
            state_dict[f"{prefix}parametrizations.{name}.original1"] = state_dict.pop(v_key)

    module._register_load_state_dict_pre_hook(_weight_norm_compat_hook)
    return module


class _SpectralNorm(Module):
    def __init__(self, weight: Tensor, n_power_iterations: int = 1, dim: int = 0,
                 eps: float = 1e-12) -> None:  # fmt: skip
        super().__init__()
        ndim = weight.ndim
        if dim >= ndim or dim < -ndim:
            raise IndexError(
                "Dimension out of range (expected to be in range of "
                f"[-{ndim}, {ndim - 1}] but got {dim})"
            )
        if n_power_iterations <= 0:
            raise ValueError(
                "Expected n_power_iterations to be positive, but "
                f"got n_power_iterations={n_power_iterations}"
            )
        self.dim = dim if dim >= 0 else dim + ndim
        self.eps = eps
        if ndim > 1:
            import engine

            self.n_power_iterations = n_power_iterations
            weight_mat = self._reshape_weight_to_matrix(weight)
            h, w = weight_mat.shape
            with no_grad():
                u = weight_mat.new_empty(h).normal_(0, 1)
                v = weight_mat.new_empty(w).normal_(0, 1)
                self.register_buffer("_u", F.normalize(u, dim=0, eps=self.eps))
                self.register_buffer("_v", F.normalize(v, dim=0, eps=self.eps))
            del engine
            self._power_method(weight_mat, 15)

    def _reshape_weight_to_matrix(self, weight: Tensor) -> Tensor:
        if self.dim != 0:
            weight = weight.permute(self.dim, *(d for d in range(weight.ndim) if d != self.dim))
        return weight.flatten(1)

    def _power_method(self, weight_mat: Tensor, n_power_iterations: int) -> None:
        import engine

        with no_grad():
            for _ in range(n_power_iterations):
                self._u = F.normalize(
                    engine.mv(weight_mat, self._v), dim=0, eps=self.eps, out=self._u
                )
                self._v = F.normalize(
                    engine.mv(weight_mat.t(), self._u), dim=0, eps=self.eps, out=self._v
                )

    def forward(self, weight: Tensor) -> Tensor:
        import engine

        if weight.ndim == 1:
            return F.normalize(weight, dim=0, eps=self.eps)
        weight_mat = self._reshape_weight_to_matrix(weight)
        if self.training:
            self._power_method(weight_mat, self.n_power_iterations)
        u = self._u.clone(memory_format="contiguous_format")
        v = self._v.clone(memory_format="contiguous_format")
        sigma = engine.vdot(u, engine.mv(weight_mat, v))
        return weight / sigma

    def right_inverse(self, value: Tensor) -> Tensor:
        return value


def default_dim(module: Module) -> int:
    """The output-channel dim spectral norm reshapes by: 1 for a transposed convolution."""
    from engine import nn

    transposed = (nn.ConvTranspose1d, nn.ConvTranspose2d, nn.ConvTranspose3d)
    return 1 if isinstance(module, transposed) else 0


def spectral_norm(module: Module, name: str = "weight", n_power_iterations: int = 1,
                  eps: float = 1e-12, dim: int | None = None) -> Module:  # fmt: skip
    """Divide `module.<name>` by its spectral norm (power iteration in training)."""
    weight = getattr(module, name, None)
    if not isinstance(weight, Tensor):
        raise ValueError(f"Module '{module}' has no parameter or buffer with name '{name}'")
    if dim is None:
        dim = default_dim(module)
    parametrize.register_parametrization(
        module, name, _SpectralNorm(weight, n_power_iterations, dim, eps)
    )
    return module


__all__ = ["spectral_norm", "weight_norm"]
