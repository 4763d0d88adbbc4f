"""conv1d: a 2-D convolution over [N, C, 1, L], as ATen runs conv1d on CPU (it views the input
and weight as 2-D and calls the 2-D kernel), so its memory is conv2d's for that shape."""

from __future__ import annotations


def _single(v, name):
    if isinstance(v, (tuple, list)):
        if len(v) != 1:
            raise RuntimeError(
                f"conv1d: expected {name} to be a single integer value or a list of 1 values"
            )
        return int(v[0])
    return int(v)


def conv1d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """1-D convolution of input [N, C, L] (or [C, L]) with weight [O, C/groups, k]."""
    from engine.ops.nn.conv import conv2d

    if weight.ndim != 3:
        raise RuntimeError(
            f"conv1d: weight must be 3-D [out_channels, in_channels/groups, k], got {list(weight.shape)}"
        )
    unbatched = input.ndim == 2
    x = input.unsqueeze(0) if unbatched else input
    if x.ndim != 3:
        raise RuntimeError(
            f"Expected 2D (unbatched) or 3D (batched) input to conv1d, but got input of size: "
            f"{list(input.shape)}"
        )
    pad = padding if isinstance(padding, str) else (0, _single(padding, "padding"))
    y = conv2d(
        x.unsqueeze(2),
        weight.unsqueeze(2),
        bias,
        (1, _single(stride, "stride")),
        pad,
        (1, _single(dilation, "dilation")),
        groups,
    ).squeeze(2)
    return y.squeeze(0) if unbatched else y


def _register() -> None:
    from engine.ops.registry import Scenario, register

    register(
        "conv1d",
        conv1d,
        functional=True,
        scenario=Scenario(
            inputs=("input", "weight"),
            optional_inputs=("bias",),
            args=(
                ("stride", int, 1, ""),
                ("padding", int | str, 0, "an int, 'same' or 'valid'"),
                ("dilation", int, 1, ""),
                ("groups", int, 1, ""),
            ),
            doc="1-D convolution (conv2d over [N, C, 1, L])",
        ),
    )


_register()

__all__ = ["conv1d"]
