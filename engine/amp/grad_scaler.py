"""GradScaler: loss scaling for float16 training (torch.amp.GradScaler's API and rules).

>>> scaler = engine.amp.GradScaler("cuda")
>>> with engine.autocast("cuda", dtype=engine.float16):
...     loss = loss_fn(model(x), y)
>>> scaler.scale(loss).backward()      # gradients of loss * scale
>>> scaler.unscale_(opt)               # optional (before clipping): grads /= scale, in place
>>> scaler.step(opt)                   # skipped when a gradient has inf/nan
>>> scaler.update()                    # scale *= backoff on inf, *= growth after N good steps

Memory as PyTorch's: the scale (0-d float32) and the growth tracker (0-d int32) live on the
device from the first scale(); unscale_ makes the inverse scale (through a float64 copy, as
`scale.double().reciprocal().float()`) and a 0-d found_inf per device; gradients are unscaled in
place.
"""

from __future__ import annotations

import enum
from collections import defaultdict

import numpy as np

from engine import dtypes
from engine.autograd.grad_mode import no_grad
from engine.tensor import Tensor


class OptState(enum.Enum):
    READY = 0
    UNSCALED = 1
    STEPPED = 2


def _refresh_per_optimizer_state() -> dict:
    return {"stage": OptState.READY, "found_inf_per_device": {}}


def _full(value, dtype, device) -> Tensor:
    from engine.creation import full

    return full((), value, dtype=dtype, device=device)


def _value(t: Tensor) -> float:
    """A 0-d tensor's value; meta has none (treated as finite: 0 infs, the scale unchanged)."""
    if t._device.type == "meta":
        return 0.0
    return float(t.item())


class GradScaler:
    def __init__(
        self,
        device: str = "cuda",
        init_scale: float = 2.0**16,
        growth_factor: float = 2.0,
        backoff_factor: float = 0.5,
        growth_interval: int = 2000,
        enabled: bool = True,
    ):
        if growth_factor <= 1.0:
            raise ValueError("The growth factor must be > 1.0.")
        if backoff_factor >= 1.0:
            raise ValueError("The backoff factor must be < 1.0.")
        self._device = device
        self._enabled = enabled
        self._init_scale = init_scale
        self._growth_factor = growth_factor
        self._backoff_factor = backoff_factor
        self._growth_interval = growth_interval
        self._init_growth_tracker = 0
        self._scale: Tensor | None = None
        self._growth_tracker: Tensor | None = None
        self._per_optimizer_states: defaultdict = defaultdict(_refresh_per_optimizer_state)

    # --- scaling ----------------------------------------------------------------------------
    def _lazy_init_scale_growth_tracker(self, dev) -> None:
        self._scale = _full(self._init_scale, dtypes.float32, dev)
        self._growth_tracker = _full(self._init_growth_tracker, dtypes.int32, dev)

    def scale(self, outputs):
        """outputs * scale (a tensor, or every tensor of a list/tuple)."""
        if not self._enabled:
            return outputs
        if isinstance(outputs, Tensor):
            if self._scale is None:
                self._lazy_init_scale_growth_tracker(outputs._device)
            return outputs * self._scale.to(device=outputs._device)
        if isinstance(outputs, (list, tuple)):
            return type(outputs)(self.scale(o) for o in outputs)
        raise ValueError("outputs must be a Tensor or an iterable of Tensors")

    def _check(self, funcname: str):
        if self._scale is None:
            raise RuntimeError(
                f"Attempted {funcname} but _scale is None.  This may indicate your script did not "
                "use scaler.scale(loss or outputs) earlier in the iteration."
            )
        return self._scale, self._growth_tracker

    # --- unscaling ----------------------------------------------------------------------------
    def _unscale_grads_(self, optimizer, inv_scale: Tensor, found_inf: Tensor, allow_fp16: bool):
        grads_by_device: dict = defaultdict(list)
        with no_grad():
            for group in optimizer.param_groups:
                for param in group["params"]:
                    g = param.grad
                    if g is None:
                        continue
                    if not allow_fp16 and g._dtype is dtypes.float16:
                        raise ValueError("Attempting to unscale FP16 gradients.")
                    grads_by_device[g._device].append(g)
            per_device = {}
            for dev, grads in grads_by_device.items():
                fi = found_inf if dev == found_inf._device else found_inf.to(device=dev)
                inv = inv_scale if dev == inv_scale._device else inv_scale.to(device=dev)
                _non_finite_check_and_unscale_(grads, fi, inv)
                per_device[dev] = fi
        return per_device

    def unscale_(self, optimizer) -> None:
        """Divide the optimizer's gradients by the scale, in place (once per step)."""
        if not self._enabled:
            return
        self._check("unscale_")
        state = self._per_optimizer_states[id(optimizer)]
        if state["stage"] is OptState.UNSCALED:
            raise RuntimeError(
                "unscale_() has already been called on this optimizer since the last update()."
            )
        if state["stage"] is OptState.STEPPED:
            raise RuntimeError("unscale_() is being called after step().")
        with no_grad():
            inv_scale = (1.0 / self._scale.double()).float()  # double().reciprocal().float()
        found_inf = _full(0.0, dtypes.float32, self._scale._device)
        state["found_inf_per_device"] = self._unscale_grads_(optimizer, inv_scale, found_inf, False)
        state["stage"] = OptState.UNSCALED

    # --- stepping -----------------------------------------------------------------------------
    def step(self, optimizer, *args, **kwargs):
        """optimizer.step() unless a gradient was inf/nan (unscales first if not yet done)."""
        if not self._enabled:
            return optimizer.step(*args, **kwargs)
        if "closure" in kwargs:
            raise RuntimeError("Closure use is not currently supported if GradScaler is enabled.")
        self._check("step")
        state = self._per_optimizer_states[id(optimizer)]
        if state["stage"] is OptState.STEPPED:
            raise RuntimeError("step() has already been called since the last update().")
        if state["stage"] is OptState.READY:
            self.unscale_(optimizer)
        if not state["found_inf_per_device"]:
            raise RuntimeError("No inf checks were recorded for this optimizer.")
        retval = None
        if not sum(_value(v) for v in state["found_inf_per_device"].values()):
            retval = optimizer.step(*args, **kwargs)
        state["stage"] = OptState.STEPPED
        return retval

    def update(self, new_scale=None) -> None:
        """Back the scale off after an inf/nan step; grow it after growth_interval good ones."""
        if not self._enabled:
            return
        scale, tracker = self._check("update")
        if new_scale is not None:
            with no_grad():
                if isinstance(new_scale, (int, float)):
                    scale.fill_(float(new_scale))
                else:
                    scale.copy_(new_scale)
        else:
            found = [
                fi.to(device=scale._device)
                for st in self._per_optimizer_states.values()
                for fi in st["found_inf_per_device"].values()
            ]
            if not found:
                raise RuntimeError("No inf checks were recorded prior to update.")
            combined = found[0]
            with no_grad():
                for f in found[1:]:
                    combined += f
            _update_scale_(
                scale,
                tracker,
                combined,
                self._growth_factor,
                self._backoff_factor,
                self._growth_interval,
            )
        self._per_optimizer_states = defaultdict(_refresh_per_optimizer_state)

    # --- accessors ----------------------------------------------------------------------------
    def get_scale(self) -> float:
        if not self._enabled:
            return 1.0
        return self._init_scale if self._scale is None else _value(self._scale) or self._init_scale

    def get_growth_factor(self) -> float:
        return self._growth_factor

    def get_backoff_factor(self) -> float:
        return self._backoff_factor

    def get_growth_interval(self) -> int:
        return self._growth_interval

    def is_enabled(self) -> bool:
        return self._enabled

    def state_dict(self) -> dict:
        if not self._enabled:
            return {}
        return {
            "scale": self.get_scale(),
            "growth_factor": self._growth_factor,
            "backoff_factor": self._backoff_factor,
            "growth_interval": self._growth_interval,
            "_growth_tracker": 0
            if self._growth_tracker is None
            else int(_value(self._growth_tracker)),
        }

    def load_state_dict(self, state_dict: dict) -> None:
        if not self._enabled:
            return
        if not state_dict:
            raise RuntimeError(
                "The source state dict is empty, possibly because it was saved from a disabled "
                "instance of GradScaler."
            )
        self._init_scale = state_dict["scale"]
        if self._scale is not None:
            self._scale.fill_(state_dict["scale"])
        self._growth_factor = state_dict["growth_factor"]
        self._backoff_factor = state_dict["backoff_factor"]
        self._growth_interval = state_dict["growth_interval"]
        self._init_growth_tracker = state_dict["_growth_tracker"]
        if self._growth_tracker is not None:
            self._growth_tracker.fill_(state_dict["_growth_tracker"])


def _non_finite_check_and_unscale_(grads, found_inf: Tensor, inv_scale: Tensor) -> None:
    """torch._amp_foreach_non_finite_check_and_unscale_: grads *= inv_scale in place; found_inf
    is set to 1 when any gradient holds inf or nan (no memory beyond the gradients)."""
    for g in grads:
        g.mul_(inv_scale)
        if g._device.type != "meta":
            xp = np if g._device.type == "cpu" else __import__("cupy")
            if not bool(xp.isfinite(g._data).all()):
                found_inf._data[...] = 1.0


def _update_scale_(scale, tracker, found_inf, growth_factor, backoff_factor, interval) -> None:
    """torch._amp_update_scale_, in place on the 0-d scale and growth tracker."""
    if scale._device.type == "meta":
        return
    if _value(found_inf):
        scale._data[...] = _value(scale) * backoff_factor
        tracker._data[...] = 0
    else:
        successful = int(_value(tracker)) + 1
        if successful == interval:
            new = np.float32(_value(scale) * growth_factor)
            if np.isfinite(new):
                scale._data[...] = new
            tracker._data[...] = 0
        else:
            tracker._data[...] = successful
    scale._storage.version += 1
    tracker._storage.version += 1


__all__ = ["GradScaler", "OptState"]
