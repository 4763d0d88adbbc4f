"""Padding modules over F.pad: ZeroPad, ConstantPad, ReflectionPad, ReplicationPad and
CircularPad, in 1, 2 and 3 dims (torch.nn.modules.padding: reprs and arguments)."""

from __future__ import annotations

from engine.nn import functional as F
from engine.nn.modules.module import Module


class _Pad(Module):
    mode = "constant"
    dims = 2

    def __init__(self, padding):
        super().__init__()
        if isinstance(padding, int):
            padding = (padding,) * (2 * self.dims)
        self.padding = tuple(padding)

    def forward(self, input):
        return F.pad(input, self.padding, mode=self.mode)

    def extra_repr(self) -> str:
        return f"{self.padding}"


class _ConstantPad(_Pad):
    def __init__(self, padding, value: float):
        super().__init__(padding)
        self.value = value

    def forward(self, input):
        return F.pad(input, self.padding, mode="constant", value=self.value)

    def extra_repr(self) -> str:
        return f"padding={self.padding}, value={self.value}"


class _ZeroPad(_ConstantPad):
    def __init__(self, padding):
        super().__init__(padding, 0.0)

    def extra_repr(self) -> str:
        return f"{self.padding}"


def _family(base, mode, prefix):
    out = {}
    for d in (1, 2, 3):
        name = f"{prefix}{d}d"
        out[name] = type(
            name,
            (base,),
            {"mode": mode, "dims": d, "__doc__": f"F.pad(mode={mode!r}) of the last {d} dims."},
        )
        out[name].__module__ = __name__
    return out


_CLASSES = {
    **_family(_ZeroPad, "constant", "ZeroPad"),
    **_family(_ConstantPad, "constant", "ConstantPad"),
    **_family(_Pad, "reflect", "ReflectionPad"),
    **_family(_Pad, "replicate", "ReplicationPad"),
    **_family(_Pad, "circular", "CircularPad"),
}
globals().update(_CLASSES)
__all__ = sorted(_CLASSES)  # noqa: PLE0605 - built above
