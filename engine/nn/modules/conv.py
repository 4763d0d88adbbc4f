"""Conv2d."""

from __future__ import annotations

import math

from engine.allocator.tracked import context
from engine.creation import empty
from engine.nn import functional as F
from engine.nn import init
from engine.nn.modules.module import Module
from engine.nn.parameter import Parameter
from engine.ops.nn.common import _pair


class Conv2d(Module):
    """2-D convolution; weight [out_channels, in_channels/groups, kh, kw], PyTorch's init."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size,
        stride=1,
        padding=0,
        dilation=1,
        groups: int = 1,
        bias: bool = True,
        padding_mode: str = "zeros",
        device=None,
        dtype=None,
    ):
        super().__init__()
        if groups <= 0:
            raise ValueError("groups must be a positive integer")
        if in_channels % groups:
            raise ValueError("in_channels must be divisible by groups")
        if out_channels % groups:
            raise ValueError("out_channels must be divisible by groups")
        _check_padding_mode(padding_mode)
        if isinstance(padding, str):
            if padding not in ("same", "valid"):
                raise ValueError(
                    f"Invalid padding string {padding!r}, should be one of {{'valid', 'same'}}"
                )
            if padding == "same" and _pair(stride) != (1, 1):
                raise ValueError("padding='same' is not supported for strided convolutions")
        self.in_channels, self.out_channels = in_channels, out_channels
        self.kernel_size = _pair(kernel_size, "kernel_size")
        self.stride = _pair(stride, "stride")
        self.padding = padding if isinstance(padding, str) else _pair(padding, "padding")
        self.dilation = _pair(dilation, "dilation")
        self.groups = groups
        self.padding_mode = padding_mode
        with context(category="parameter"):
            self.weight = Parameter(
                empty(
                    out_channels,
                    in_channels // groups,
                    *self.kernel_size,
                    device=device,
                    dtype=dtype,
                )
            )
            if bias:
                self.bias = Parameter(empty(out_channels, device=device, dtype=dtype))
            else:
                self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            fan_in, _ = init._calculate_fan_in_and_fan_out(self.weight)
            if fan_in != 0:
                bound = 1 / math.sqrt(fan_in)
                init.uniform_(self.bias, -bound, bound)

    def forward(self, input):
        input, padding = _mode_padded(self, input)
        return F.conv2d(
            input, self.weight, self.bias, self.stride, padding, self.dilation, self.groups
        )

    def extra_repr(self) -> str:
        return _conv_nd_repr(self)


class Conv1d(Module):
    """1-D convolution; weight [out_channels, in_channels/groups, k], PyTorch's init."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size,
        stride=1,
        padding=0,
        dilation=1,
        groups: int = 1,
        bias: bool = True,
        padding_mode: str = "zeros",
        device=None,
        dtype=None,
    ):
        super().__init__()
        if groups <= 0:
            raise ValueError("groups must be a positive integer")
        if in_channels % groups or out_channels % groups:
            raise ValueError("in_channels and out_channels must be divisible by groups")
        _check_padding_mode(padding_mode)
        one = lambda v: v[0] if isinstance(v, (tuple, list)) else v  # noqa: E731
        self.in_channels, self.out_channels = in_channels, out_channels
        self.kernel_size = (one(kernel_size),)
        self.stride, self.dilation = (one(stride),), (one(dilation),)
        self.padding = padding if isinstance(padding, str) else (one(padding),)
        self.groups, self.padding_mode = groups, padding_mode
        with context(category="parameter"):
            self.weight = Parameter(
                empty(
                    out_channels,
                    in_channels // groups,
                    self.kernel_size[0],
                    device=device,
                    dtype=dtype,
                )
            )
            if bias:
                self.bias = Parameter(empty(out_channels, device=device, dtype=dtype))
            else:
                self.register_parameter("bias", None)
        Conv2d.reset_parameters(self)

    def forward(self, input):
        from engine.ops.conv1d import conv1d

        input, padding = _mode_padded(self, input)
        padding = padding if isinstance(padding, str) else padding[0]
        return conv1d(
            input, self.weight, self.bias, self.stride[0], padding, self.dilation[0], self.groups
        )

    def extra_repr(self) -> str:
        return _conv_nd_repr(self)


class ConvTranspose2d(Module):
    """Transposed 2-D convolution; weight [in_channels, out_channels/groups, kh, kw]."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size,
        stride=1,
        padding=0,
        output_padding=0,
        groups: int = 1,
        bias: bool = True,
        dilation=1,
        padding_mode: str = "zeros",
        device=None,
        dtype=None,
    ):
        super().__init__()
        if in_channels % groups or out_channels % groups:
            raise ValueError("in_channels and out_channels must be divisible by groups")
        if padding_mode != "zeros":
            raise ValueError(f'Only "zeros" padding mode is supported for {type(self).__name__}')
        self.in_channels, self.out_channels = in_channels, out_channels
        self.kernel_size = _pair(kernel_size, "kernel_size")
        self.stride, self.padding = _pair(stride, "stride"), _pair(padding, "padding")
        self.output_padding = _pair(output_padding, "output_padding")
        self.dilation, self.groups = _pair(dilation, "dilation"), groups
        self.padding_mode = padding_mode
        with context(category="parameter"):
            self.weight = Parameter(
                empty(
                    in_channels,
                    out_channels // groups,
                    *self.kernel_size,
                    device=device,
                    dtype=dtype,
                )
            )
            if bias:
                self.bias = Parameter(empty(out_channels, device=device, dtype=dtype))
            else:
                self.register_parameter("bias", None)
        Conv2d.reset_parameters(self)

    def forward(self, input, output_size=None):
        from engine.ops.conv_transpose import conv_transpose2d

        if output_size is not None:
            raise NotImplementedError("ConvTranspose2d: output_size= is not supported")
        return conv_transpose2d(
            input,
            self.weight,
            self.bias,
            self.stride,
            self.padding,
            self.output_padding,
            self.groups,
            self.dilation,
        )

    def extra_repr(self) -> str:
        return _conv_nd_repr(self)


def _triple(v, name="value"):
    from engine.ops.nn.conv3d import _ntuple

    return _ntuple(v, 3, name)


def _check_padding_mode(padding_mode) -> None:
    valid_padding_modes = {"zeros", "reflect", "replicate", "circular"}  # (torch's set, words)
    if padding_mode not in valid_padding_modes:
        raise ValueError(
            f"padding_mode must be one of {valid_padding_modes}, but got "
            f"padding_mode='{padding_mode}'"
        )


def _mode_padded(m, input):
    """torch's _conv_forward: a padding_mode other than zeros is F.pad(input, mode) first, then
    the convolution without padding. Returns (input, padding) for the convolution."""
    if m.padding_mode == "zeros":
        return input, m.padding
    n = len(m.kernel_size)
    pads = [0, 0] * n  # torch's _reversed_padding_repeated_twice: F.pad's order, last dim first
    for i in range(n):
        if m.padding == "same":
            total = m.dilation[i] * (m.kernel_size[i] - 1)
            left, right = total // 2, total - total // 2
        elif m.padding == "valid":
            left = right = 0
        else:
            left = right = m.padding[i]
        pads[2 * (n - 1 - i)], pads[2 * (n - 1 - i) + 1] = left, right
    return F.pad(input, pads, mode=m.padding_mode), (0,) * n


def _conv_nd_repr(m) -> str:
    """torch's _ConvNd.extra_repr."""
    s = f"{m.in_channels}, {m.out_channels}, kernel_size={m.kernel_size}, stride={m.stride}"
    if isinstance(m.padding, str) or m.padding != (0,) * len(m.padding):
        s += f", padding={m.padding}"
    if m.dilation != (1,) * len(m.dilation):
        s += f", dilation={m.dilation}"
    op = getattr(m, "output_padding", None)
    if op is not None and op != (0,) * len(op):
        s += f", output_padding={op}"
    if m.groups != 1:
        s += f", groups={m.groups}"
    if m.bias is None:
        s += ", bias=False"
    if m.padding_mode != "zeros":
        s += f", padding_mode={m.padding_mode}"
    return s


def _conv_nd_params(m, weight_shape, out_channels, bias, device, dtype) -> None:
    with context(category="parameter"):
        m.weight = Parameter(empty(*weight_shape, device=device, dtype=dtype))
        if bias:
            m.bias = Parameter(empty(out_channels, device=device, dtype=dtype))
        else:
            m.register_parameter("bias", None)
    Conv2d.reset_parameters(m)


def _check_groups(in_channels, out_channels, groups) -> None:
    if groups <= 0:
        raise ValueError("groups must be a positive integer")
    if in_channels % groups:
        raise ValueError("in_channels must be divisible by groups")
    if out_channels % groups:
        raise ValueError("out_channels must be divisible by groups")


class Conv3d(Module):
    """3-D convolution; weight [out_channels, in_channels/groups, kd, kh, kw], PyTorch's init."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size,
        stride=1,
        padding=0,
        dilation=1,
        groups: int = 1,
        bias: bool = True,
        padding_mode: str = "zeros",
        device=None,
        dtype=None,
    ):
        super().__init__()
        _check_groups(in_channels, out_channels, groups)
        _check_padding_mode(padding_mode)
        if isinstance(padding, str):
            if padding not in ("same", "valid"):
                raise ValueError(
                    f"Invalid padding string {padding!r}, should be one of {{'valid', 'same'}}"
                )
            if padding == "same" and _triple(stride) != (1, 1, 1):
                raise ValueError("padding='same' is not supported for strided convolutions")
        self.in_channels, self.out_channels = in_channels, out_channels
        self.kernel_size = _triple(kernel_size, "kernel_size")
        self.stride = _triple(stride, "stride")
        self.padding = padding if isinstance(padding, str) else _triple(padding, "padding")
        self.dilation = _triple(dilation, "dilation")
        self.groups, self.padding_mode = groups, padding_mode
        shape = (out_channels, in_channels // groups, *self.kernel_size)
        _conv_nd_params(self, shape, out_channels, bias, device, dtype)

    def forward(self, input):
        input, padding = _mode_padded(self, input)
        return F.conv3d(
            input, self.weight, self.bias, self.stride, padding, self.dilation, self.groups
        )

    def extra_repr(self) -> str:
        return _conv_nd_repr(self)


class _ConvTransposeNd(Module):
    _rank = 1

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size,
        stride=1,
        padding=0,
        output_padding=0,
        groups: int = 1,
        bias: bool = True,
        dilation=1,
        padding_mode: str = "zeros",
        device=None,
        dtype=None,
    ):
        super().__init__()
        from engine.ops.nn.conv3d import _ntuple

        _check_groups(in_channels, out_channels, groups)
        if padding_mode != "zeros":
            raise ValueError(f'Only "zeros" padding mode is supported for {type(self).__name__}')
        r = self._rank
        self.in_channels, self.out_channels = in_channels, out_channels
        self.kernel_size = _ntuple(kernel_size, r, "kernel_size")
        self.stride, self.padding = _ntuple(stride, r, "stride"), _ntuple(padding, r, "padding")
        self.output_padding = _ntuple(output_padding, r, "output_padding")
        self.dilation, self.groups = _ntuple(dilation, r, "dilation"), groups
        self.padding_mode = padding_mode
        shape = (in_channels, out_channels // groups, *self.kernel_size)
        _conv_nd_params(self, shape, out_channels, bias, device, dtype)

    def forward(self, input, output_size=None):
        if output_size is not None:
            raise NotImplementedError(f"{type(self).__name__}: output_size= is not supported")
        fn = F.conv_transpose1d if self._rank == 1 else F.conv_transpose3d
        return fn(
            input,
            self.weight,
            self.bias,
            self.stride,
            self.padding,
            self.output_padding,
            self.groups,
            self.dilation,
        )

    def extra_repr(self) -> str:
        return _conv_nd_repr(self)


class ConvTranspose1d(_ConvTransposeNd):
    """Transposed 1-D convolution; weight [in_channels, out_channels/groups, k]."""

    _rank = 1


class ConvTranspose3d(_ConvTransposeNd):
    """Transposed 3-D convolution; weight [in_channels, out_channels/groups, kd, kh, kw]."""

    _rank = 3
