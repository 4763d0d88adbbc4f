"""ASGD (averaged stochastic gradient descent): PyTorch's single-tensor and foreach updates,
with their memory."""

from __future__ import annotations

from engine import dtypes
from engine.autograd.grad_mode import no_grad
from engine.creation import as_tensor, ones, zeros, zeros_like
from engine.optim import foreach
from engine.optim.optimizer import Optimizer, by_device_and_dtype, number
from engine.tensor import Tensor


class ASGD(Optimizer):
    """ASGD. State per parameter, made at its first step in PyTorch's order, all on the
    parameter's device (unlike the other optimizers' step counters): float32 0-d `step`, `eta`
    (lr) and `mu` (one), and `ax` (the average, the parameter's size).

    Single-tensor allocates per parameter `param.sub(ax)` (once the averaging has started,
    mu != 1) and two 0-d tensors for the new eta and mu; foreach `grad + lambd * param` for the
    whole group, then `param - ax`, and the new etas, computed as 0-d float32 tensors from the
    step counters (torch's arithmetic, so float32 rounding), and mus.

    On meta the counters have no values: the step count the update reads is kept by the
    optimizer itself there (the number of steps each parameter has taken)."""

    def __init__(
        self,
        params,
        lr: float = 1e-2,
        lambd: float = 1e-4,
        alpha: float = 0.75,
        t0: float = 1e6,
        weight_decay: float = 0,
        foreach: bool | None = None,
        maximize: bool = False,
        differentiable: bool = False,
        capturable: bool = False,
    ):
        if isinstance(lr, Tensor) and lr.numel() != 1:
            raise ValueError("Tensor lr must be 1-element")
        if not 0.0 <= lr:
            raise ValueError(f"Invalid learning rate: {lr}")
        if not 0.0 <= weight_decay:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        defaults = dict(
            lr=lr,
            lambd=lambd,
            alpha=alpha,
            t0=t0,
            weight_decay=weight_decay,
            foreach=foreach,
            maximize=maximize,
            differentiable=differentiable,
            capturable=capturable,
        )
        super().__init__(params, defaults)
        self._check_flags(foreach, None, differentiable, capturable)
        self._meta_steps: dict[int, int] = {}

    def _init_state(self, param, lr) -> dict:
        state = self.state[param]
        if not state:
            if param.is_complex():
                raise NotImplementedError(
                    "ASGD on complex parameters (torch's view_as_real update) is not modelled "
                    "by engine.optim; real floating parameters are supported"
                )
            f32, device = dtypes.float32, param.device
            with self._state_context():
                state["step"] = zeros((), device=device, dtype=f32)
                state["eta"] = as_tensor(number(lr), device=device, dtype=f32).clone().detach()
                state["mu"] = ones((), device=device, dtype=f32)
                state["ax"] = zeros_like(param)
        return state

    def _value(self, param, t, key: str) -> float:
        """A 0-d state tensor's value (torch's _get_value / .item()); on meta, which has no
        values, the one the device would hold, from the optimizer's own step count."""
        if t.device.type != "meta":
            return float(t.item())
        group = next(g for g in self.param_groups if any(p is param for p in g["params"]))
        step = self._meta_steps.get(id(param), 0)
        if key == "step":
            return float(step)
        lr, lambd, alpha, t0 = number(group["lr"]), group["lambd"], group["alpha"], group["t0"]
        if key == "eta":
            return lr / ((1 + lambd * lr * (step - 1)) ** alpha) if step > 1 else lr
        return 1 / max(1, step - 1 - t0) if step > 1 else 1.0  # mu

    def _count(self, params) -> None:
        for p in params:
            if p.device.type == "meta":
                self._meta_steps[id(p)] = self._meta_steps.get(id(p), 0) + 1

    @no_grad()
    def step(self, closure=None):
        return self._step_groups(closure, lambda p, group: self._init_state(p, group["lr"]))

    def _single(self, group, params, states) -> None:
        """torch.optim.asgd._single_tensor_asgd."""
        lr, lambd, alpha, t0 = number(group["lr"]), group["lambd"], group["alpha"], group["t0"]
        weight_decay = group["weight_decay"]
        for param, state in zip(params, states, strict=True):
            grad = param.grad
            grad = grad if not group["maximize"] else -grad
            mu, ax, eta, step_t = state["mu"], state["ax"], state["eta"], state["step"]
            step_t += 1
            self._count([param])
            if weight_decay != 0:
                grad = grad.add(param, alpha=weight_decay)
            eta_value = self._value(param, eta, "eta")
            param.mul_(1 - lambd * eta_value)
            param.add_(grad, alpha=-eta_value)
            if self._value(param, mu, "mu") != 1:
                ax.add_(param.sub(ax).mul_(mu))
            else:
                ax.copy_(param)
            step = self._value(param, step_t, "step")
            new_eta = as_tensor(lr / ((1 + lambd * lr * step) ** alpha))
            eta.copy_(new_eta)
            new_mu = as_tensor(1 / max(1, step - t0))
            mu.copy_(new_mu)

    def _foreach(self, group, params, states) -> None:
        """torch.optim.asgd._multi_tensor_asgd (engine.optim.foreach)."""
        lr, lambd, alpha, t0 = number(group["lr"]), group["lambd"], group["alpha"], group["t0"]
        weight_decay = group["weight_decay"]
        for grouped_params, grouped_states in by_device_and_dtype(params, states):
            device = grouped_params[0].device
            grouped_grads = [p.grad for p in grouped_params]
            grouped_axs = [s["ax"] for s in grouped_states]
            grouped_mus = [s["mu"] for s in grouped_states]
            grouped_etas = [s["eta"] for s in grouped_states]
            grouped_state_steps = [s["step"] for s in grouped_states]
            if group["maximize"]:
                grouped_grads = foreach.neg(grouped_grads)
            foreach.step_counters(grouped_state_steps)
            self._count(grouped_params)
            if weight_decay != 0:
                if group["maximize"]:
                    foreach.add_(grouped_grads, grouped_params, alpha=weight_decay)
                    intermediate = grouped_grads
                else:
                    intermediate = foreach.add(grouped_grads, grouped_params, alpha=weight_decay)
                foreach.add_(intermediate, grouped_params, alpha=lambd)
            else:
                intermediate = foreach.add(grouped_grads, grouped_params, alpha=lambd)
            foreach.addcmul_(grouped_params, intermediate, grouped_etas, value=-1)
            del intermediate
            intermediate = foreach.sub(grouped_params, grouped_axs)
            foreach.addcmul_(grouped_axs, intermediate, grouped_mus)
            del intermediate
            new_etas = [
                as_tensor(lr / ((1 + lambd * lr * step) ** alpha), device=device)
                for step in grouped_state_steps
            ]
            new_mus = [
                as_tensor(1 / max(1, self._value(p, step, "step") - t0), device=device)
                for p, step in zip(grouped_params, grouped_state_steps, strict=True)
            ]
            foreach.copy_(grouped_etas, new_etas)
            foreach.copy_(grouped_mus, new_mus)
