"""engine.nn.utils: gradient clipping (torch.nn.utils' names)."""

from engine.nn.utils.clip_grad import (
    clip_grad_norm_,
    clip_grad_value_,
    clip_grads_with_norm_,
    get_total_norm,
)

__all__ = ["clip_grad_norm_", "clip_grad_value_", "clip_grads_with_norm_", "get_total_norm"]

from engine.nn.utils import parametrizations, parametrize  # noqa: E402

__all__ += ["parametrizations", "parametrize"]

from engine.nn.utils.weight_norm import remove_weight_norm, weight_norm  # noqa: E402

__all__ += ["remove_weight_norm", "weight_norm"]

from engine.nn.utils.spectral_norm import remove_spectral_norm, spectral_norm  # noqa: E402

__all__ += ["remove_spectral_norm", "spectral_norm"]

from engine.nn.utils.convert_parameters import (  # noqa: E402
    parameters_to_vector,
    vector_to_parameters,
)

__all__ += ["parameters_to_vector", "vector_to_parameters"]

from engine.nn.utils import stateless  # noqa: E402
from engine.nn.utils.fusion import (  # noqa: E402
    fuse_conv_bn_eval,
    fuse_conv_bn_weights,
    fuse_linear_bn_eval,
    fuse_linear_bn_weights,
)

__all__ += [
    "fuse_conv_bn_eval",
    "fuse_conv_bn_weights",
    "fuse_linear_bn_eval",
    "fuse_linear_bn_weights",
    "stateless",
]

from engine.nn.utils.init import skip_init  # noqa: E402

__all__ += ["skip_init"]
