"""engine.nn: Module, Parameter, layers, losses, functional and init (PyTorch's names).

>>> import engine
>>> model = engine.nn.Sequential(engine.nn.Linear(512, 1024), engine.nn.ReLU(inplace=True),
...                              engine.nn.Linear(1024, 512))
>>> loss = engine.nn.functional.mse_loss(model(x), target)
"""

from engine.nn import functional, init, utils
from engine.nn.modules import *  # noqa: F403
from engine.nn.modules import __all__ as _modules_all
from engine.nn.parameter import Buffer, Parameter

__all__ = ["Buffer", "Parameter", "functional", "init", "utils", *_modules_all]
