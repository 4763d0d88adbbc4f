"""SGD with momentum, dampening, weight decay and Nesterov: PyTorch's three updates."""

from __future__ import annotations

from engine import kernels
from engine.allocator.tracked import tracking
from engine.autograd.grad_mode import no_grad
from engine.optim import foreach
from engine.optim.optimizer import (
    Optimizer,
    by_device_and_dtype,
    number,
)


class SGD(Optimizer):
    """p -= lr * v, with v = momentum * v + (1 - dampening) * g (buffer made at the first step).

    Like PyTorch, the momentum buffer is a copy of the first gradient, the update runs in place
    (`buf.mul_(momentum).add_(grad, alpha=1 - dampening)`, `param.add_(buf, alpha=-lr)`), and
    only weight_decay / nesterov / maximize allocate a gradient-sized temporary: one at a time
    single-tensor (cpu's default), the whole group's at once foreach (cuda's default; nesterov
    then adds the momentum into the gradients themselves, as torch's does). Fused allocates the
    momentum buffers (empty, filled by the kernel) and nothing else.
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
        foreach: bool | None = None,
        differentiable: bool = False,
        fused: bool | None = None,
    ):
        self._check_non_negative(lr=lr, momentum=momentum, weight_decay=weight_decay)
        defaults = dict(
            lr=lr,
            momentum=momentum,
            dampening=dampening,
            weight_decay=weight_decay,
            nesterov=nesterov,
            maximize=maximize,
            foreach=foreach,
            differentiable=differentiable,
            fused=fused,
        )
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")
        super().__init__(params, defaults)
        self._check_flags(foreach, fused, differentiable)

    @no_grad()
    def step(self, closure=None):
        loss = self._closure_loss(closure)
        self._update_groups()
        return loss

    def _single(self, group, params, *, fresh: bool = False) -> None:
        """torch.optim.sgd._single_tensor_sgd. fresh: the momentum buffers exist but hold
        nothing yet (fused's first step, run with its temporaries uncharged): the gradient is
        copied in, where the single-tensor update clones it."""
        lr, momentum, dampening = number(group["lr"]), group["momentum"], group["dampening"]
        weight_decay, nesterov, maximize = (
            group["weight_decay"],
            group["nesterov"],
            group["maximize"],
        )
        for param in params:
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
                elif fresh:
                    buf.copy_(grad)
                elif not nesterov and _momentum_step(param, buf, grad, momentum, dampening, lr):
                    continue
                else:
                    buf.mul_(momentum).add_(grad, alpha=1 - dampening)
                grad = grad.add(buf, alpha=momentum) if nesterov else buf
            param.add_(grad, alpha=-lr)

    def _foreach(self, group, params) -> None:
        """torch.optim.sgd._multi_tensor_sgd, line for line (engine.optim.foreach)."""
        lr, momentum, dampening = number(group["lr"]), group["momentum"], group["dampening"]
        weight_decay, nesterov, maximize = (
            group["weight_decay"],
            group["nesterov"],
            group["maximize"],
        )
        for (device_params,) in by_device_and_dtype(params):
            device_grads = [p.grad for p in device_params]
            device_grads = foreach.gradients(
                device_params, device_grads, maximize=maximize, weight_decay=weight_decay
            )
            if momentum != 0:
                bufs = self._foreach_momentum(device_params, device_grads, momentum, dampening)
                if nesterov:  # into the gradients (or their copies), as torch's
                    foreach.add_(device_grads, bufs, alpha=momentum)
                else:
                    device_grads = bufs
            foreach.add_(device_params, device_grads, alpha=-lr)

    def _foreach_momentum(self, params, grads, momentum, dampening) -> list:
        """The momentum buffers, updated (foreach when all exist) or made from the gradients."""
        states = [self.state[p] for p in params]
        bufs = [s.get("momentum_buffer") for s in states]
        if all(b is not None for b in bufs):
            foreach.mul_(bufs, momentum)
            foreach.add_(bufs, grads, alpha=1 - dampening)
            return bufs
        with self._state_context():
            for i, (state, g) in enumerate(zip(states, grads, strict=True)):
                if bufs[i] is None:
                    bufs[i] = state["momentum_buffer"] = g.detach().clone()
                else:
                    bufs[i].mul_(momentum).add_(g, alpha=1 - dampening)
        return bufs

    def _fused(self, group, params) -> None:
        """torch.optim.sgd._fused_sgd: at the first step an empty momentum buffer per parameter
        (the kernel copies the gradient in); then one kernel in place, allocating nothing."""
        fresh = group["momentum"] != 0 and all(
            self.state[p].get("momentum_buffer") is None for p in params
        )
        if fresh:
            from engine.creation import empty_like

            with self._state_context():
                for p in params:
                    self.state[p]["momentum_buffer"] = empty_like(p.grad)
        with tracking(False):  # the kernel's temporaries are registers
            self._single(group, params, fresh=fresh)


def _momentum_step(param, buf, grad, momentum, dampening, lr) -> bool:
    """`buf.mul_(momentum).add_(grad, alpha=1 - dampening)` and `param.add_(buf, alpha=-lr)`
    as one pass over the three cpu arrays (kernels.momentum_step_: the same values, sooner).
    Nothing is allocated by either form; each tensor's version moves as the three in-place ops
    move it. False (nothing done) where the ops must run one by one: another device, bfloat16
    (held in float32, rounded per op), views, distinct dtypes or layouts, or shared memory."""
    if param.device.type != "cpu" or buf.device.type != "cpu" or grad.device.type != "cpu":
        return False
    if param._dtype.emulated or param._base is not None or buf._base is not None:
        return False
    if len({id(param._storage), id(buf._storage), id(grad._storage)}) < 3:
        return False
    if not kernels.momentum_step_(param._data, buf._data, grad._data, momentum, 1 - dampening, lr):
        return False
    buf._storage.version += 2
    param._storage.version += 1
    return True
