"""Smaller tensor methods torch has beside the core rows: vdot (VdotBackward0), msort (sort along
dim 0), sum_to_size (torch's composite: sum over the broadcast dims with keepdim, then a view),
fill_diagonal_ (torch's composite: fill_ of an as_strided view of the diagonal, wrapping for a
tall matrix), get_device / is_inference, and the in-place spellings torch publishes under a
second name (absolute_, arccos_, greater_, ...).
"""

from __future__ import annotations

from engine.ops import linalg as L
from engine.ops.registry import alias, get, register


class Vdot(L.Matmul):
    """vdot of real 1-D tensors: dot's product and gradients under torch's node name."""

    def name(self):
        return "VdotBackward0"


def vdot(input, other, *, out=None):
    """sum(conj(input) * other) of two 1-D tensors; real tensors: their dot product."""
    if input.ndim != 1 or other.ndim != 1:
        raise RuntimeError(f"1D tensors expected, but got {input.ndim}D and {other.ndim}D tensors")
    if input.shape[0] != other.shape[0]:
        n, m = input.shape[0], other.shape[0]
        raise RuntimeError(
            f"inconsistent tensor size, expected tensor [{n}] and src [{m}] to have the same "
            f"number of elements, but got {n} and {m} elements respectively"
        )
    return Vdot.apply(input, other, out=out, op="vdot")


def msort(input, *, out=None):
    """input sorted along dim 0 (torch's composite: sort(input, 0).values)."""
    values = input.sort(0)[0]
    if out is not None:
        return out.copy_(values)
    return values


def sum_to_size(input, *size):
    """input summed to `size`, a shape it broadcasts to (torch's at::sum_to: one sum with
    keepdim over the dims to reduce, then a view dropping the leading ones)."""
    if len(size) == 1 and isinstance(size[0], (tuple, list)):
        size = tuple(size[0])
    size = tuple(int(s) for s in size)
    shape = tuple(input.shape)
    lead = len(shape) - len(size)
    if lead < 0 or any(t not in (1, s) for t, s in zip(size, shape[lead:], strict=True)):
        raise RuntimeError(f"size {{{list(size)}}} is not expandable to size {{{list(shape)}}}.")
    if shape == size:
        return input
    dims = list(range(lead)) + [
        lead + i for i, t in enumerate(size) if t == 1 and shape[lead + i] != 1
    ]
    result = input.sum(dims, keepdim=True) if dims else input
    return result.view(size) if lead else result


def fill_diagonal_(input, fill_value, wrap=False):
    """Fill the main diagonal (all dims equal for more than 2); `wrap` continues it below a tall
    matrix every width + 1 rows, as torch (fill_ through as_strided views: CopySlices)."""
    nd = input.ndim
    if nd < 2:
        raise RuntimeError("dimensions must larger than 1")
    height, width = input.shape[0], input.shape[1]
    if nd > 2 and any(s != height for s in input.shape[1:]):
        raise RuntimeError("all dimensions of input must be of equal length")
    offset = input.storage_offset()
    stride = sum(input.stride())
    size = min(height, width)
    input.as_strided((size,), (stride,), offset).fill_(fill_value)
    if wrap and nd == 2 and height > width + 1:
        step = width + 1
        wrap_size = (input.numel() + step - 1) // step - size
        start = offset + input.stride(0) * (width + 1)
        input.as_strided((wrap_size,), (stride,), start).fill_(fill_value)
    return input


def get_device(input) -> int:
    """The CUDA device index, -1 on cpu (and meta)."""
    dev = input.device
    return dev.index or 0 if dev.type == "cuda" else -1


def is_inference(input) -> bool:
    """False: the engine has no inference tensors (torch.inference_mode's)."""
    return False


register("vdot", vdot, method=True)
register("msort", msort, method=True)
register("sum_to_size", sum_to_size, function=False, method=True)
register("fill_diagonal_", fill_diagonal_, function=False, method=True)
register("get_device", get_device, method=True)
register("is_inference", is_inference, method=True)

# torch's second names of in-place rows: (name, target, published as torch.<name> too)
for _name, _target, _function in (
    ("absolute_", "abs_", False),
    ("arccos_", "acos_", True),
    ("arcsin_", "asin_", True),
    ("arctan_", "atan_", True),
    ("arctan2_", "atan2_", False),
    ("greater_", "gt_", False),
    ("greater_equal_", "ge_", False),
    ("less_", "lt_", False),
    ("less_equal_", "le_", False),
    ("not_equal_", "ne_", False),
):
    alias(_name, _target, function=_function, method=get(_target).method or False)
