"""engine: a small tensor + autograd engine in which every byte is accounted.

Backends: numpy ("cpu"), CuPy ("cuda", imported lazily) and "meta" (shapes only). Every storage
goes through a tracked allocator (engine.allocator) with an exact or a caching accounting model.
Public names follow PyTorch.

>>> import engine
>>> x = engine.rand(1, 64, 512, 512)
>>> engine.relu_(x) is x
True
"""

from engine import dtypes as _dtypes
from engine.autograd import enable_grad, is_grad_enabled, no_grad, set_grad_enabled
from engine.creation import (
    arange, as_tensor, empty, empty_like, from_numpy, full, full_like, get_generator, initial_seed,
    manual_seed, ones, ones_like, rand, rand_like, randn, randn_like, tensor, zeros, zeros_like,
)
from engine.device import device
from engine.dtypes import (
    bool_, double, float, float16, float32, float64, get_default_dtype, half, int, int32, int64,
    long, set_default_dtype, uint8,
)
from engine.errors import MetaDataError, OutOfMemoryError
from engine.ops import _ns as _ops
from engine.ops.kernels import get_num_threads, set_num_threads
from engine.tensor import Tensor, is_tensor

globals().update(_ops)
globals()["bool"] = bool_
dtype = _dtypes.dtype

from engine import memory  # noqa: E402
from engine import allocator  # noqa: E402
from engine import autograd  # noqa: E402


def __getattr__(name):
    # nn and optim import lazily so `import engine` stays light
    if name in ("nn", "optim"):
        import importlib

        mod = importlib.import_module(f"engine.{name}")
        globals()[name] = mod
        return mod
    raise AttributeError(f"module 'engine' has no attribute {name!r}")


__version__ = "0.1.0"
