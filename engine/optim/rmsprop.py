"""RMSprop and Adagrad (PyTorch's single-tensor updates, the ones it uses on cpu)."""

from __future__ import annotations

from engine import dtypes
from engine.autograd.grad_mode import no_grad
from engine.creation import full_like, tensor
from engine.optim.optimizer import Optimizer


class RMSprop(Optimizer):
    """RMSprop (Hinton). State per parameter, made at its first step, in PyTorch's order: a
    float32 `step`, `square_avg`, then `momentum_buffer` (momentum > 0) and `grad_avg`
    (centered), each the parameter's size.

    The update allocates what PyTorch's does: `avg = square_avg.sqrt()` (centered:
    `square_avg.addcmul(grad_avg, grad_avg, value=-1).sqrt_()`) per parameter, and a
    gradient-sized temporary with weight_decay or maximize; the rest is in place.
    """

    def __init__(
        self,
        params,
        lr: float = 1e-2,
        alpha: float = 0.99,
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        momentum: float = 0.0,
        centered: bool = False,
        *,
        maximize: bool = False,
    ):
        self._check_non_negative(
            lr=lr, eps=eps, momentum=momentum, weight_decay=weight_decay, alpha=alpha
        )
        defaults = dict(
            lr=lr,
            alpha=alpha,
            eps=eps,
            weight_decay=weight_decay,
            momentum=momentum,
            centered=centered,
            maximize=maximize,
        )
        super().__init__(params, defaults)

    def _init_state(self, group, param) -> dict:
        fields = ["square_avg"]
        if group["momentum"] > 0:
            fields.append("momentum_buffer")
        if group["centered"]:
            fields.append("grad_avg")
        return self._lazy_state(param, *fields)

    @no_grad()
    def step(self, closure=None):
        loss = self._closure_loss(closure)
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            states = [self._init_state(group, p) for p in params]  # all state first, like torch
            lr, alpha, eps = group["lr"], group["alpha"], group["eps"]
            weight_decay, momentum = group["weight_decay"], group["momentum"]
            for param, state in zip(params, states, strict=True):
                grad = param.grad if not group["maximize"] else -param.grad
                square_avg = state["square_avg"]
                state["step"] += 1
                if weight_decay != 0:
                    grad = grad.add(param, alpha=weight_decay)
                square_avg.mul_(alpha).addcmul_(grad, grad, value=1 - alpha)
                if group["centered"]:
                    grad_avg = state["grad_avg"]
                    grad_avg.lerp_(grad, 1 - alpha)
                    avg = square_avg.addcmul(grad_avg, grad_avg, value=-1).sqrt_()
                else:
                    avg = square_avg.sqrt()
                avg = avg.add_(eps)
                if momentum > 0:
                    buf = state["momentum_buffer"]
                    buf.mul_(momentum).addcdiv_(grad, avg)
                    param.add_(buf, alpha=-lr)
                else:
                    param.addcdiv_(grad, avg, value=-lr)
                del avg, grad
        return loss


class Adagrad(Optimizer):
    """Adagrad. Its state is made when the optimizer is (as PyTorch's): per parameter a float32
    `step` and `sum` (the parameter's size, filled with initial_accumulator_value).

    The update allocates `std = state_sum.sqrt().add_(eps)` per parameter, and a gradient-sized
    temporary with weight_decay or maximize; the rest is in place.
    """

    def __init__(
        self,
        params,
        lr: float = 1e-2,
        lr_decay: float = 0.0,
        weight_decay: float = 0.0,
        initial_accumulator_value: float = 0.0,
        eps: float = 1e-10,
        *,
        maximize: bool = False,
    ):
        self._check_non_negative(
            lr=lr,
            lr_decay=lr_decay,
            weight_decay=weight_decay,
            initial_accumulator_value=initial_accumulator_value,
            eps=eps,
        )
        defaults = dict(
            lr=lr,
            lr_decay=lr_decay,
            eps=eps,
            weight_decay=weight_decay,
            initial_accumulator_value=initial_accumulator_value,
            maximize=maximize,
        )
        super().__init__(params, defaults)
        with self._state_context():
            for group in self.param_groups:
                for p in group["params"]:
                    state = self.state[p]
                    state["step"] = tensor(0.0, dtype=dtypes.float32)
                    state["sum"] = full_like(p, initial_accumulator_value)

    @no_grad()
    def step(self, closure=None):
        loss = self._closure_loss(closure)
        for group in self.param_groups:
            lr, lr_decay, eps = group["lr"], group["lr_decay"], group["eps"]
            weight_decay = group["weight_decay"]
            for param in group["params"]:
                if param.grad is None:
                    continue
                state = self.state[param]
                state_sum, step_t = state["sum"], state["step"]
                step_t += 1
                step = float(step_t.item())
                grad = param.grad if not group["maximize"] else -param.grad
                if weight_decay != 0:
                    grad = grad.add(param, alpha=weight_decay)
                clr = lr / (1 + (step - 1) * lr_decay)
                state_sum.addcmul_(grad, grad, value=1)
                std = state_sum.sqrt().add_(eps)
                param.addcdiv_(grad, std, value=-clr)
                del std, grad
        return loss
