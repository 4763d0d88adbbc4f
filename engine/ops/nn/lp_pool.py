"""lp_pool1d / lp_pool2d and local_response_norm: torch's Python composites, op for op (their
nodes and temporaries are those of pow, avg_pool, sign, relu, abs, mul and div)."""

from __future__ import annotations


def _lp_pool(input, norm_type, kernel_size, stride, ceil_mode, max_pool, avg_pool, window):
    if isinstance(norm_type, (int, float)):
        if norm_type == float("inf"):
            return max_pool(input.abs(), kernel_size, stride, 0, 1, ceil_mode)
        if norm_type == -float("inf"):
            return -max_pool(-input.abs(), kernel_size, stride, 0, 1, ceil_mode)
    if stride is not None:
        out = avg_pool(input.pow(norm_type), kernel_size, stride, 0, ceil_mode)
    else:
        out = avg_pool(input.pow(norm_type), kernel_size, padding=0, ceil_mode=ceil_mode)
    sign = out.sign()  # torch.sign(out) * relu(torch.abs(out))
    return (sign * out.abs().relu()).mul(window).pow(1.0 / norm_type)


def lp_pool1d(input, norm_type, kernel_size, stride=None, ceil_mode=False):
    """(sum over each window of x^p)^(1/p)."""
    from engine.ops.nn.pool import avg_pool1d, max_pool1d

    return _lp_pool(
        input, norm_type, kernel_size, stride, ceil_mode, max_pool1d, avg_pool1d, kernel_size
    )


def lp_pool2d(input, norm_type, kernel_size, stride=None, ceil_mode=False):
    """(sum over each window of x^p)^(1/p), 2-D windows."""
    from engine.ops.nn.common import _pair
    from engine.ops.nn.pool import avg_pool2d, max_pool2d

    kw, kh = _pair(kernel_size)
    return _lp_pool(
        input, norm_type, kernel_size, stride, ceil_mode, max_pool2d, avg_pool2d, kw * kh
    )


def local_response_norm(input, size, alpha=1e-4, beta=0.75, k=1.0):
    """input / (k + alpha * mean of x^2 over `size` neighbouring channels)^beta."""
    from engine.ops.nn import pool
    from engine.ops.nn.pool3d import avg_pool3d
    from engine.ops.shape import pad

    dim = input.ndim
    if dim < 3:
        raise ValueError(
            "Expected 3D or higher dimensionality                          input (got "
            f"{dim} dimensions)"
        )
    if input.numel() == 0:
        return input
    div = input.mul(input)
    if dim == 3:
        div = div.unsqueeze(1)
        div = pad(div, (0, 0, size // 2, (size - 1) // 2))
        div = pool.avg_pool2d(div, (size, 1), stride=1).squeeze(1)
    else:
        sizes = tuple(input.shape)
        div = div.view(sizes[0], 1, sizes[1], sizes[2], -1)
        div = pad(div, (0, 0, 0, 0, size // 2, (size - 1) // 2))
        div = avg_pool3d(div, (size, 1, 1), stride=1).squeeze(1)
        div = div.view(sizes)
    div = div.mul(alpha).add(k).pow(beta)
    return input / div


def lp_pool3d(input, norm_type, kernel_size, stride=None, ceil_mode=False):
    """(sum over each window of x^p)^(1/p), 3-D windows."""
    from engine.ops.nn.pool3d import avg_pool3d, max_pool3d

    kd, kw, kh = _tuple(kernel_size, 3)
    return _lp_pool(
        input, norm_type, kernel_size, stride, ceil_mode, max_pool3d, avg_pool3d, kd * kw * kh
    )


def _tuple(v, n: int) -> tuple:
    return tuple(v) if isinstance(v, (tuple, list)) else (v,) * n
