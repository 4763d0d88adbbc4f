"""engine.optim: SGD, Adam, AdamW, RMSprop, Adagrad with PyTorch's update rules, in place under
no_grad.

>>> opt = engine.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
>>> opt.zero_grad(); loss.backward(); opt.step()
"""

from engine.optim import lr_scheduler
from engine.optim.adadelta import Adadelta
from engine.optim.adafactor import Adafactor
from engine.optim.adam import Adam, AdamW
from engine.optim.adamax import Adamax
from engine.optim.nadam import NAdam
from engine.optim.optimizer import Optimizer
from engine.optim.radam import RAdam
from engine.optim.rmsprop import Adagrad, RMSprop
from engine.optim.sgd import SGD

__all__ = ["Adagrad", "Adam", "AdamW", "Optimizer", "RMSprop", "SGD", "lr_scheduler"]
__all__ += ["Adadelta", "Adafactor", "Adamax", "NAdam", "RAdam"]
from engine.optim.asgd import ASGD  # noqa: E402
from engine.optim.rprop import Rprop  # noqa: E402

__all__ += ["ASGD", "Rprop"]
