"""RMSprop and Adagrad: PyTorch's single-tensor updates (its cpu default), foreach ones (its
cuda default) and Adagrad's fused one, with their memory."""

from __future__ import annotations

from engine import dtypes
from engine.allocator.tracked import tracking
from engine.autograd.grad_mode import no_grad
from engine.creation import full_like, tensor, zeros
from engine.optim import foreach
from engine.optim.optimizer import (
    Optimizer,
    by_device_and_dtype,
    implementation,
    number,
)


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
        capturable: bool = False,
        foreach: bool | None = None,
        maximize: bool = False,
        differentiable: bool = False,
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
            capturable=capturable,
            foreach=foreach,
            maximize=maximize,
            differentiable=differentiable,
        )
        super().__init__(params, defaults)
        self._check_flags(foreach, None, differentiable, capturable)

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
            if params:
                getattr(self, "_" + implementation(group, params))(group, params, states)
        return loss

    @staticmethod
    def _single(group, params, states) -> None:
        """torch.optim.rmsprop._single_tensor_rmsprop."""
        lr, alpha, eps = number(group["lr"]), group["alpha"], group["eps"]
        weight_decay, momentum = group["weight_decay"], group["momentum"]
        for param, state in zip(params, states, strict=True):
            grad = param.grad  # as torch: the previous gradient (copy) is dropped first
            grad = grad if not group["maximize"] else -grad
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

    @staticmethod
    def _foreach(group, params, states) -> None:
        """torch.optim.rmsprop._multi_tensor_rmsprop, line for line (engine.optim.foreach)."""
        lr, alpha, eps = number(group["lr"]), group["alpha"], group["eps"]
        weight_decay, momentum, maximize = (
            group["weight_decay"],
            group["momentum"],
            group["maximize"],
        )
        for device_params, device_states in by_device_and_dtype(params, states):
            grads = [p.grad for p in device_params]
            square_avgs = [s["square_avg"] for s in device_states]
            steps = [s["step"] for s in device_states]
            grads = foreach.gradients(
                device_params, grads, steps, maximize=maximize, weight_decay=weight_decay
            )
            foreach.mul_(square_avgs, alpha)
            foreach.addcmul_(square_avgs, grads, grads, value=1 - alpha)
            if group["centered"]:
                grad_avgs = [s["grad_avg"] for s in device_states]
                foreach.lerp_(grad_avgs, grads, 1 - alpha)
                avg = foreach.addcmul(square_avgs, grad_avgs, grad_avgs, value=-1)
                foreach.sqrt_(avg)
                foreach.add_(avg, eps)
            else:
                avg = foreach.sqrt(square_avgs)
                foreach.add_(avg, eps)
            if momentum > 0:
                bufs = [s["momentum_buffer"] for s in device_states]
                foreach.mul_(bufs, momentum)
                foreach.addcdiv_(bufs, grads, avg)
                foreach.add_(device_params, bufs, alpha=-lr)
            else:
                foreach.addcdiv_(device_params, grads, avg, -lr)


class Adagrad(Optimizer):
    """Adagrad. Its state is made when the optimizer is (as PyTorch's): per parameter a float32
    `step` (a cpu tensor; fused: on the parameter's device) and `sum` (the parameter's size,
    filled with initial_accumulator_value).

    The single-tensor update allocates `std = state_sum.sqrt().add_(eps)` per parameter, and a
    gradient-sized temporary with weight_decay or maximize; foreach all of a group's at once;
    fused nothing. The rest is in place.
    """

    def __init__(
        self,
        params,
        lr: float = 1e-2,
        lr_decay: float = 0.0,
        weight_decay: float = 0.0,
        initial_accumulator_value: float = 0.0,
        eps: float = 1e-10,
        foreach: bool | None = None,
        *,
        maximize: bool = False,
        differentiable: bool = False,
        fused: bool | None = None,
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
            foreach=foreach,
            maximize=maximize,
            differentiable=differentiable,
            fused=fused,
        )
        super().__init__(params, defaults)
        self._check_flags(foreach, fused, differentiable)
        with self._state_context():
            for group in self.param_groups:
                for p in group["params"]:
                    state = self.state[p]
                    if group["fused"]:  # fused: the counter on the parameter's device
                        state["step"] = zeros((), dtype=dtypes.float32, device=p.device)
                    else:
                        state["step"] = tensor(0.0, dtype=dtypes.float32)
                    state["sum"] = full_like(p, initial_accumulator_value)

    @no_grad()
    def step(self, closure=None):
        loss = self._closure_loss(closure)
        self._update_groups()
        return loss

    def _single(self, group, params, *, counted: bool = False) -> None:
        """torch.optim.adagrad._single_tensor_adagrad. counted: the step counters are already
        advanced (the fused update runs this with its temporaries uncharged)."""
        lr, lr_decay, eps = number(group["lr"]), group["lr_decay"], group["eps"]
        weight_decay = group["weight_decay"]
        for param in params:
            state = self.state[param]
            state_sum, step_t = state["sum"], state["step"]
            if not counted:
                step_t += 1
            step = 1.0 if step_t.device.type == "meta" else float(step_t.item())
            grad = param.grad  # as torch: the previous gradient (copy) is dropped first
            grad = grad if not group["maximize"] else -grad
            if weight_decay != 0:
                grad = grad.add(param, alpha=weight_decay)
            clr = lr / (1 + (step - 1) * lr_decay)
            state_sum.addcmul_(grad, grad, value=1)
            std = state_sum.sqrt().add_(eps)
            param.addcdiv_(grad, std, value=-clr)

    def _fused(self, group, params) -> None:
        """torch.optim.adagrad._fused_adagrad: per (device, dtype) group the counters, then one
        kernel that reads and writes in place, allocating nothing."""
        for (device_params,) in by_device_and_dtype(params):
            foreach.add_([self.state[p]["step"] for p in device_params], 1)
            with tracking(False):  # the kernel's temporaries are registers
                self._single(group, device_params, counted=True)

    def _foreach(self, group, params) -> None:
        """torch.optim.adagrad._multi_tensor_adagrad, line for line (engine.optim.foreach)."""
        lr, lr_decay, eps = number(group["lr"]), group["lr_decay"], group["eps"]
        weight_decay, maximize = group["weight_decay"], group["maximize"]
        states = [self.state[p] for p in params]
        for device_params, device_states in by_device_and_dtype(params, states):
            device_grads = [p.grad for p in device_params]
            device_state_sums = [s["sum"] for s in device_states]
            device_state_steps = [s["step"] for s in device_states]
            device_grads = foreach.gradients(
                device_params,
                device_grads,
                device_state_steps,
                maximize=maximize,
                weight_decay=weight_decay,
            )
            minus_clr = [-lr / (1 + (float(s.item()) - 1) * lr_decay) for s in device_state_steps]
            foreach.addcmul_(device_state_sums, device_grads, device_grads, value=1)
            std = foreach.sqrt(device_state_sums)
            foreach.add_(std, eps)
            if weight_decay != 0 or maximize:  # the copies are scaled in place
                foreach.mul_(device_grads, minus_clr)
                numerator = device_grads
            else:
                numerator = foreach.mul(device_grads, minus_clr)
            foreach.addcdiv_(device_params, numerator, std)
