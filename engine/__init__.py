"""engine: a small tensor + autograd engine in which every byte is accounted.

Backends: numpy ("cpu"), CuPy ("cuda", imported lazily) and "meta" (shapes only). Every storage
goes through a tracked allocator (engine.allocator) with an exact or a caching accounting model.
Public names follow PyTorch.

>>> import engine
>>> x = engine.rand(1, 64, 512, 512)
>>> engine.relu_(x) is x
True
"""

import warnings as _warnings

# first: OpenBLAS's thread timeout, before anything loads numpy (engine/_blas_env.py)
from engine import _blas_env  # noqa: F401
from engine import dtypes as _dtypes
from engine.amp import autocast
from engine.autograd import (
    enable_grad,
    inference_mode,
    is_grad_enabled,
    is_inference_mode_enabled,
    no_grad,
    set_grad_enabled,
)
from engine.creation import (
    arange,
    as_tensor,
    empty,
    eye,
    from_numpy,
    full,
    get_generator,
    initial_seed,
    linspace,
    logspace,
    manual_seed,
    ones,
    rand,
    randn,
    tensor,
    tril_indices,
    triu_indices,
    zeros,
)
from engine.device import device, get_default_device, set_default_device
from engine.dtypes import (
    bfloat16,
    bool_,
    double,
    float,
    float16,
    float32,
    float64,
    get_default_dtype,
    half,
    int,
    int32,
    int64,
    long,
    set_default_dtype,
    uint8,
)
from engine.errors import MetaDataError, OutOfMemoryError
from engine.kernels import get_num_threads, set_num_threads
from engine.ops import _ns as _ops
from engine.ops import broadcast_shapes
from engine.tensor import Tensor, is_tensor

# Like PyTorch, the engine computes inf/nan silently: numpy's floating-point RuntimeWarnings
# from engine kernels are dropped (only those raised inside engine modules; the filter costs
# nothing until a warning is raised).
_warnings.filterwarnings("ignore", category=RuntimeWarning, module=r"engine(\.|$)")

globals().update(_ops)
globals()["bool"] = bool_
dtype = _dtypes.dtype

from engine import allocator, amp, autograd, memory  # noqa: E402
from engine.tensor import (  # noqa: E402
    channels_last,
    channels_last_3d,
    contiguous_format,
    layout,
    memory_format,
    preserve_format,
    strided,
)

_LAZY = ("nn", "optim", "linalg", "special", "cuda")


def __getattr__(name):
    # nn, optim and torch's other namespaces import lazily so `import engine` stays light
    if name in _LAZY:
        import importlib

        mod = importlib.import_module(f"engine.{name}")
        globals()[name] = mod
        return mod
    if name.startswith("_foreach_"):  # torch._foreach_* (engine/optim/foreach.py)
        from engine.optim.foreach import PUBLIC

        if name in PUBLIC:
            globals()[name] = PUBLIC[name]
            return PUBLIC[name]
    raise AttributeError(f"module 'engine' has no attribute {name!r}")


__all__ = [  # the names above, plus every op of the table (engine.ops._ns)
    "MetaDataError",
    "OutOfMemoryError",
    "Tensor",
    "allocator",
    "amp",
    "arange",
    "as_tensor",
    "autocast",
    "autograd",
    "bfloat16",
    "bool",
    "bool_",
    "broadcast_shapes",
    "channels_last",
    "channels_last_3d",
    "contiguous_format",
    "device",
    "double",
    "dtype",
    "empty",
    "empty_like",
    "enable_grad",
    "eye",
    "float",
    "float16",
    "float32",
    "float64",
    "from_numpy",
    "full",
    "full_like",
    "get_default_device",
    "get_default_dtype",
    "get_generator",
    "get_num_threads",
    "half",
    "inference_mode",
    "initial_seed",
    "int",
    "int32",
    "int64",
    "is_grad_enabled",
    "is_inference_mode_enabled",
    "is_tensor",
    "layout",
    "linspace",
    "logspace",
    "long",
    "manual_seed",
    "memory",
    "memory_format",
    "no_grad",
    "ones",
    "ones_like",
    "preserve_format",
    "rand",
    "rand_like",
    "randn",
    "randn_like",
    "set_default_device",
    "set_default_dtype",
    "set_grad_enabled",
    "set_num_threads",
    "strided",
    "tensor",
    "tril_indices",
    "triu_indices",
    "uint8",
    "zeros",
    "zeros_like",
] + sorted(_ops)

__version__ = "0.1.0"
