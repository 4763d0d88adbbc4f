"""SGD with momentum, dampening, weight decay and Nesterov (PyTorch's single-tensor update)."""

from __future__ import annotations

from engine.autograd.grad_mode import no_grad
from engine.optim.optimizer import Optimizer


class SGD(Optimizer):
    """p -= lr * v, with v = momentum * v + (1 - dampening) * g (buffer made at the first step).

    Like PyTorch, the momentum buffer is a copy of the first gradient, the update runs in place
    (`buf.mul_(momentum).add_(grad, alpha=1 - dampening)`, `param.add_(buf, alpha=-lr)`), and
    only weight_decay / nesterov / maximize allocate a gradient-sized temporary.
    """

    def __init__(
        self,
        params,
        lr: float = 1e-3,
        momentum: float = 0.0,
        dampening: float = 0.0,
        weight_decay: float = 0.0,
        nesterov: bool = False,
        *,
        maximize: bool = False,
    ):
        self._check_non_negative(lr=lr, momentum=momentum, weight_decay=weight_decay)
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")
        defaults = dict(
            lr=lr,
            momentum=momentum,
            dampening=dampening,
            weight_decay=weight_decay,
            nesterov=nesterov,
            maximize=maximize,
        )
        super().__init__(params, defaults)

    @no_grad()
    def step(self, closure=None):
        loss = self._closure_loss(closure)
        for group in self.param_groups:
            lr, momentum, dampening = group["lr"], group["momentum"], group["dampening"]
            weight_decay, nesterov, maximize = (
                group["weight_decay"],
                group["nesterov"],
                group["maximize"],
            )
            for param in group["params"]:
                if param.grad is None:
                    continue
                grad = param.grad if not maximize else -param.grad
                if weight_decay != 0:
                    grad = grad.add(param, alpha=weight_decay)
                if momentum != 0:
                    state = self.state[param]
                    buf = state.get("momentum_buffer")
                    if buf is None:
                        with self._state_context():
                            buf = grad.clone().detach()
                        state["momentum_buffer"] = buf
                    else:
                        buf.mul_(momentum).add_(grad, alpha=1 - dampening)
                    grad = grad.add(buf, alpha=momentum) if nesterov else buf
                param.add_(grad, alpha=-lr)
        return loss
