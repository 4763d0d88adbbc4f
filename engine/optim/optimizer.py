"""Optimizer: parameter groups, per-parameter state, zero_grad, state_dict (torch.optim's API).

State is created lazily by `step()` (the first time a parameter has a gradient), inside
`engine.allocator.context(category="optimizer_state")`, so its memory shows up at the first step,
where PyTorch allocates it too.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
from collections import defaultdict

from engine.allocator import tracked
from engine.allocator.tracked import context
from engine.autograd.grad_mode import enable_grad
from engine.tensor import Tensor


class _RequiredParameter:
    def __repr__(self) -> str:
        return "<required parameter>"


required = _RequiredParameter()


# Hooks every optimizer runs around step() (torch.optim.optimizer's global step hooks).
_global_step_pre_hooks: dict = {}
_global_step_post_hooks: dict = {}
_hook_ids = itertools.count()


class _HookHandle:
    """What the register_* functions return: `remove()` takes the hook off."""

    def __init__(self, hooks: dict, key: int):
        self._hooks, self.id = hooks, key

    def remove(self) -> None:
        self._hooks.pop(self.id, None)


def register_optimizer_step_pre_hook(hook) -> _HookHandle:
    """hook(optimizer, args, kwargs) runs before every optimizer's step() (args: step's
    positional arguments, the optimizer first, as torch passes them); it may return
    (new_args, new_kwargs)."""
    key = next(_hook_ids)
    _global_step_pre_hooks[key] = hook
    return _HookHandle(_global_step_pre_hooks, key)


def register_optimizer_step_post_hook(hook) -> _HookHandle:
    """hook(optimizer, args, kwargs) runs after every optimizer's step()."""
    key = next(_hook_ids)
    _global_step_post_hooks[key] = hook
    return _HookHandle(_global_step_post_hooks, key)


def _in_optimizer_phase(fn, step: bool = False):
    """Wrap an optimizer method so that, while an observer listens to an allocator (a profiler),
    what it allocates and frees is attributed to phase "optimizer"; a step also runs the global
    step hooks."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        self = args[0]  # as torch, the hooks see step's whole args, the optimizer first
        if step and _global_step_pre_hooks:
            for hook in tuple(_global_step_pre_hooks.values()):
                result = hook(self, args, kwargs)
                if result is not None:
                    if not (isinstance(result, tuple) and len(result) == 2):
                        raise RuntimeError(
                            f"{hook} must return None or a tuple of (new_args, new_kwargs), "
                            f"but got {result}."
                        )
                    args, kwargs = result
        if not tracked.observed or tracked.current_context().get("phase") == "optimizer":
            out = fn(*args, **kwargs)
        else:
            with context(phase="optimizer"):
                out = fn(*args, **kwargs)
        if step and _global_step_post_hooks:
            for hook in tuple(_global_step_post_hooks.values()):
                hook(self, args, kwargs)
        return out

    wrapper._optimizer_phase = True
    return wrapper


# --- which implementation runs: PyTorch's three ----------------------------------------------
# PyTorch's optimizers have a single-tensor update (a loop over the parameters), a foreach one
# (each step of the rule over the whole list, torch._foreach_*: the list's temporaries are all
# alive at once) and, for some, a fused one (one kernel per list: no temporaries at all). With
# foreach=None and fused=None it runs foreach when every parameter is on a device with foreach
# kernels (torch.optim.optimizer._default_to_fused_or_foreach: cuda here) and single-tensor
# otherwise, so the same program has different peaks on cpu and on a GPU.
FOREACH_DEVICES = ("cuda",)
# Where fused=True runs: PyTorch's cpu and cuda, and meta, which stands for a GPU in this
# project (torch itself refuses fused=True on meta).
FUSED_DEVICES = ("cpu", "cuda", "meta")


def implementation(group: dict, params) -> str:
    """'fused', 'foreach' or 'single': what PyTorch runs for this group's `params` (those with a
    gradient), from the group's foreach / fused flags."""
    fused, foreach = group.get("fused"), group.get("foreach")
    if fused is None and foreach is None:
        if group.get("differentiable"):
            return "single"
        if isinstance(group.get("lr"), Tensor) and not group.get("capturable"):
            return "single"  # torch: foreach is not flipped on for a tensor lr
        return "foreach" if all(p.device.type in FOREACH_DEVICES for p in params) else "single"
    return "fused" if fused else "foreach" if foreach else "single"


def number(value):
    """A hyper-parameter as the update reads it: a one-element tensor (lr=torch.tensor(1e-3),
    which PyTorch accepts) as its Python number, as torch's kernels read a Scalar."""
    if isinstance(value, Tensor):
        if value.numel() != 1:
            raise ValueError("Tensor lr must be 1-element")
        return value.item()
    return value


def check_fused_param(p) -> None:
    """torch.optim.optimizer._device_dtype_check_for_fused, the engine's devices."""
    if not (p.device.type in FUSED_DEVICES and p.is_floating_point()):
        raise RuntimeError(
            "`fused=True` requires all the params to be floating point Tensors of supported "
            f"devices: {list(FUSED_DEVICES)} but {p.dtype} and {p.device.type}"
        )


def by_device_and_dtype(*lists):
    """Optimizer._group_tensors_by_device_and_dtype: the lists (parallel, the first one's
    tensors deciding) cut into one set of lists per (device, dtype), in order of first
    appearance; entries of the other lists may be None."""
    groups: dict = {}
    for i, t in enumerate(lists[0]):
        key = (t.device, t.dtype)
        cut = groups.get(key)
        if cut is None:
            cut = groups[key] = tuple([] for _ in lists)
        for out, lst in zip(cut, lists, strict=True):
            out.append(lst[i] if lst else None)
    return list(groups.values())


def _loaded(param, value, key, group):
    """A loaded state tensor as PyTorch's load_state_dict makes it
    (Optimizer._process_value_according_to_param_policy): `step` as it is (a cpu counter stays
    on the cpu), unless fused or capturable (float32 on the parameter's device); the rest on the
    parameter's device, in its dtype when it is floating. No copy where nothing changes: the
    optimizer then holds the very tensors of the state dict, as torch's does."""
    if key == "step":
        if group.get("fused") or group.get("capturable"):
            from engine import dtypes

            return value.to(dtype=dtypes.float32, device=param.device)
        return value
    if param.is_floating_point():
        return value.to(dtype=param.dtype, device=param.device)
    return value.to(device=param.device)


class Optimizer:
    """Base class: subclasses implement `step()` with their update rule.

    `step` and `zero_grad` (also a subclass's own) run in allocator context phase="optimizer"
    while a profiler observes an allocator, so memprof.profile tells the optimizer phase apart.
    """

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        for name in ("step", "zero_grad"):
            fn = cls.__dict__.get(name)
            if fn is not None and not getattr(fn, "_optimizer_phase", False):
                setattr(cls, name, _in_optimizer_phase(fn, step=name == "step"))

    # PyTorch's words for a negative hyper-parameter, by argument name
    _INVALID = {
        "lr": "Invalid learning rate",
        "eps": "Invalid epsilon value",
        "momentum": "Invalid momentum value",
        "weight_decay": "Invalid weight_decay value",
        "alpha": "Invalid alpha value",
        "lr_decay": "Invalid lr_decay value",
        "initial_accumulator_value": "Invalid initial_accumulator_value value",
    }

    @classmethod
    def _check_non_negative(cls, **values: float) -> None:
        """ValueError with PyTorch's message for the first negative one, in the given order."""
        for name, value in values.items():
            if value < 0.0:
                raise ValueError(f"{cls._INVALID[name]}: {value}")

    def _lazy_state(self, param, *fields: str, step_on_device: bool = False) -> dict:
        """A parameter's state, made at its first step as PyTorch's is: a float32 `step`, then
        one zeros tensor like the parameter per field, in that order (optimizer_state).

        The step counter is a cpu tensor, unless `step_on_device` (fused or capturable: a 0-d
        tensor on the parameter's device, so on a GPU one more block per parameter)."""
        state = self.state[param]
        if not state:
            from engine import dtypes
            from engine.creation import tensor, zeros, zeros_like

            with self._state_context():
                if step_on_device:
                    state["step"] = zeros((), dtype=dtypes.float32, device=param.device)
                else:
                    state["step"] = tensor(0.0, dtype=dtypes.float32)
                for field in fields:
                    state[field] = zeros_like(param)
        return state

    def _update_groups(self) -> None:
        """Each group's update in the implementation PyTorch picks (implementation()), over its
        parameters with a gradient: self._single / _foreach / _fused(group, params). For the
        optimizers whose state is not made lazily at the step (SGD, Adagrad)."""
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            how = implementation(group, params)
            if how == "fused":
                for p in params[:1]:  # as torch's _init_group: the first parameter, once
                    check_fused_param(p)
            if params:
                getattr(self, "_" + how)(group, params)

    @classmethod
    def _check_flags(cls, foreach, fused, differentiable, capturable=False):
        """PyTorch's constructor checks of the implementation flags; what the engine does not
        model is refused by name rather than run some other way."""
        if fused and differentiable:
            raise RuntimeError("`fused` does not support `differentiable`")
        if fused and foreach:
            raise RuntimeError("`fused` and `foreach` cannot be `True` together.")
        if differentiable:
            raise NotImplementedError(
                f"{cls.__name__}(differentiable=True), autograd through the optimizer step, is "
                "not modelled by engine.optim; leave it False"
            )
        if capturable:
            raise NotImplementedError(
                f"{cls.__name__}(capturable=True), CUDA-graph capture with the step counters and "
                "bias corrections as device tensors, is not modelled by engine.optim; leave it "
                "False"
            )

    def __init__(self, params, defaults: dict):
        self.defaults = defaults
        self.state: defaultdict = defaultdict(dict)
        self.param_groups: list[dict] = []
        if isinstance(params, Tensor):
            raise TypeError(
                "params argument given to the optimizer should be an iterable of Tensors or dicts, "
                f"but got {type(params).__name__}"
            )
        groups = list(params)
        if not groups:
            raise ValueError("optimizer got an empty parameter list")
        if not isinstance(groups[0], dict):
            groups = [{"params": groups}]
        for group in groups:
            self.add_param_group(group)

    def add_param_group(self, param_group: dict) -> None:
        params = param_group["params"]
        if isinstance(params, Tensor):
            params = [params]
        elif isinstance(params, set):
            raise TypeError(
                "optimizer parameters need to be organized in ordered collections, but "
                "the ordering of tensors in sets will change between runs. Please use a list instead."
            )
        else:
            params = list(params)
        for p in params:
            if not isinstance(p, Tensor):
                raise TypeError(
                    f"optimizer can only optimize Tensors, but one of the params is {type(p).__name__}"
                )
            if not p.is_leaf:
                raise ValueError("can't optimize a non-leaf Tensor")
        group = dict(param_group, params=params)
        for key, default in self.defaults.items():
            if default is required and key not in group:
                raise ValueError(
                    f"parameter group didn't specify a value of required optimization parameter {key}"
                )
            group.setdefault(key, default)
        seen = {id(p) for g in self.param_groups for p in g["params"]}
        if any(id(p) in seen for p in params):
            raise ValueError("some parameters appear in more than one parameter group")
        self.param_groups.append(group)

    @_in_optimizer_phase
    def zero_grad(self, set_to_none: bool = True) -> None:
        """Drop every .grad (the default: its memory is freed), or zero it in place."""
        from engine.nn.modules.module import _zero_grad

        for group in self.param_groups:
            for p in group["params"]:
                _zero_grad(p, set_to_none)

    def step(self, closure=None):
        raise NotImplementedError

    @staticmethod
    def _closure_loss(closure):
        if closure is None:
            return None
        with enable_grad():
            return closure()

    def _step_groups(self, closure, state_of):
        """The step of an optimizer with a single-tensor and a foreach update (torch's shape):
        per group, the parameters that have a gradient, their state (state_of(param, group):
        made on first use), then `_single` or `_foreach` as `implementation` picks."""
        loss = self._closure_loss(closure)
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            states = [state_of(p, group) for p in params]
            if params:
                getattr(self, "_" + implementation(group, params))(group, params, states)
        return loss

    @staticmethod
    def _state_context():
        """Allocations of optimizer state are attributed to category 'optimizer_state'."""
        return context(category="optimizer_state")

    # --- state_dict ----------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """{"state": {param index: state}, "param_groups": [hyper-parameters, params as indices]}."""
        index = {}
        groups = []
        for group in self.param_groups:
            packed = {k: v for k, v in group.items() if k != "params"}
            ids = []
            for p in group["params"]:
                index.setdefault(id(p), len(index))
                ids.append(index[id(p)])
            packed["params"] = ids
            groups.append(packed)
        state = {index[id(p)]: s for p, s in self.state.items() if id(p) in index}
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict: dict) -> None:
        groups = state_dict["param_groups"]
        if len(groups) != len(self.param_groups):
            raise ValueError("loaded state dict has a different number of parameter groups")
        by_index = {}
        for own, saved in zip(self.param_groups, groups, strict=True):
            if len(own["params"]) != len(saved["params"]):
                raise ValueError(
                    "loaded state dict contains a parameter group that doesn't match "
                    "the size of optimizer's group"
                )
            by_index.update(
                (i, (p, own)) for i, p in zip(saved["params"], own["params"], strict=True)
            )
            own.update({k: v for k, v in saved.items() if k != "params"})
        self.state = defaultdict(dict)
        with contextlib.ExitStack() as stack:
            stack.enter_context(self._state_context())
            for idx, s in state_dict["state"].items():
                p, group = by_index[idx]
                self.state[p] = {
                    k: (_loaded(p, v, k, group) if isinstance(v, Tensor) else v)
                    for k, v in s.items()
                }

    def __repr__(self) -> str:
        lines = [type(self).__name__ + " ("]
        for i, group in enumerate(self.param_groups):
            lines.append(f"Parameter Group {i}")
            for key in sorted(k for k in group if k != "params"):
                lines.append(f"    {key}: {group[key]}")
        lines.append(")")
        return "\n".join(lines)
