"""F.bilinear: torch's composite at::bilinear over at::_trilinear (ATen's Linear.cpp).

bilinear flattens both inputs to [B, in], runs one `_trilinear` node (TrilinearBackward0) and
reshapes the [B, out] result back to the inputs' leading dims (ViewBackward0), the bias added
out of place (AddBackward0). `_trilinear` is written as ATen's: a zero-filled output, then one
unrolled step per output feature, each two `sumproduct_pair` contractions (a product or a
permute/reshape/bmm, and the sums of dims only one side has), added into its slice. Its backward
is `_trilinear` three times with the roles of the dims exchanged (derivatives.yaml's
_trilinear_backward), so forward and backward make the blocks torch's profiler shows, step for
step.
"""

from __future__ import annotations

from engine import kernels
from engine.autograd.function import Function
from engine.autograd.grad_mode import no_grad


def _sumproduct_pair(left, right, sum_dims, keepdim):
    """(left * right).sum(sum_dims) through permute, reshape and bmm (ATen's sumproduct_pair;
    both operands already unsqueezed to one rank)."""
    from engine import ops

    if left.ndim != right.ndim:
        raise RuntimeError("number of dimensions must match")
    if not sum_dims:
        return ops.mul(left, right)
    dim = left.ndim
    summed = {d % dim for d in sum_dims}
    lro, lo, ro = [], [], []
    lro_size = lo_size = ro_size = sum_size = 1
    for i in range(dim):
        sl, sr = left.shape[i] != 1, right.shape[i] != 1
        if i in summed:
            if sl and sr:
                if left.shape[i] != right.shape[i]:
                    raise RuntimeError("non-broadcast dimensions must match")
                sum_size *= left.shape[i]
            elif sl:  # in one operand only: summed right away
                left = left.sum(i, True)
            elif sr:
                right = right.sum(i, True)
        elif sl and sr:
            if left.shape[i] != right.shape[i]:
                raise RuntimeError("non-broadcast dimensions must match")
            lro.append(i)
            lro_size *= left.shape[i]
        elif sl:
            lo.append(i)
            lo_size *= left.shape[i]
        else:
            ro.append(i)
            ro_size *= right.shape[i]
    sum_list = list(sum_dims)
    out_size = (
        [left.shape[d] for d in lro]
        + [left.shape[d] for d in lo]
        + [1] * len(sum_list)
        + [right.shape[d] for d in ro]
    )
    lperm = lro + lo + sum_list + ro
    rperm = lro + sum_list + ro + lo
    operm = [0] * len(out_size)
    for i, d in enumerate(lro + lo + sum_list + ro):
        operm[d] = i
    left = left.permute(*lperm).reshape(lro_size, lo_size, sum_size)
    right = right.permute(*rperm).reshape(lro_size, sum_size, ro_size)
    result = ops.matmul(left, right)  # (torch.bmm is matmul here)
    del left, right
    result = result.view(*out_size).permute(*operm)
    if not keepdim:
        sizes = [s for i, s in enumerate(result.shape) if i not in summed]
        result = result.view(*sizes)
    return result


def _trilinear_kernel(i1, i2, i3, expand1, expand2, expand3, sumdim, unroll_dim=1):
    """(i1.unsqueeze(expand1) * i2.unsqueeze(expand2) * i3.unsqueeze(expand3)).sum(sumdim),
    unrolled along unroll_dim (ATen's _trilinear, op for op; no history)."""

    total_dim = i1.ndim + len(expand1)
    if not 0 <= unroll_dim < total_dim:
        raise RuntimeError(f"unroll_dim must be in [0,{total_dim - 1}]")
    e1, e2, e3, sd = (set(d % total_dim for d in s) for s in (expand1, expand2, expand3, sumdim))
    output_size, sum_12, sum_23 = [], [], []
    unroll_size = -1
    with no_grad():
        for i in range(total_dim):
            s = 0
            if i in e1:
                i1 = i1.unsqueeze(i)
            else:
                s = i1.shape[i]
            if i in e2:
                i2 = i2.unsqueeze(i)
            else:
                s = i2.shape[i]
            if i in e3:
                i3 = i3.unsqueeze(i)
                if i in sd and i != unroll_dim:
                    sum_12.append(i)
            else:
                s = i3.shape[i]
                if i in sd and i != unroll_dim:
                    sum_23.append(i)
            output_size.append(1 if i in sd else s)
            if i == unroll_dim:
                unroll_size = s
        m1, m2, m3 = (0 if unroll_dim in e else 1 for e in (e1, e2, e3))
        output = kernels.zeros(tuple(output_size), i1._dtype, i1._device)
        if i1.numel() and i2.numel() and i3.numel():
            for k in range(unroll_size):
                buf = _sumproduct_pair(
                    i1.narrow(unroll_dim, k * m1, 1), i2.narrow(unroll_dim, k * m2, 1), sum_12, True
                )
                buf = _sumproduct_pair(buf, i3.narrow(unroll_dim, k * m3, 1), sum_23, True)
                if unroll_dim in sd:
                    output.add_(buf)
                else:
                    output.narrow(unroll_dim, k, 1).add_(buf)
                del buf
        for i in reversed(range(output.ndim)):
            if i in sd:
                output.squeeze_(i)
    return output


class Trilinear(Function):
    """at::_trilinear: one node (TrilinearBackward0) that keeps its three inputs."""

    retain_inputs = (0, 1, 2)

    def forward(self, i1, i2, i3, out=None, expand=((), (), ()), sumdim=(), unroll_dim=1):
        self.expand, self.sumdim = expand, sumdim
        return _trilinear_kernel(i1, i2, i3, *expand, sumdim, unroll_dim)

    def backward(self, g):
        i1, i2, i3 = self.saved_tensors
        e1, e2, e3 = self.expand
        sd = self.sumdim
        n1, n2, n3 = (edge is not None for edge in self._edges)
        # derivatives.yaml's _trilinear_backward: the gradient takes the place of one operand
        g1 = _trilinear_kernel(g, i2, i3, sd, e2, e3, e1) if n1 else None
        g2 = _trilinear_kernel(i1, g, i3, e1, sd, e3, e2) if n2 else None
        g3 = _trilinear_kernel(i1, i2, g, e1, e2, sd, e3) if n3 else None
        return (g1, g2, g3)

    def name(self):
        return "TrilinearBackward0"


def _trilinear(i1, i2, i3, expand1, expand2, expand3, sumdim, unroll_dim=1):
    expand = (tuple(expand1), tuple(expand2), tuple(expand3))
    return Trilinear.apply(
        i1, i2, i3, op="_trilinear", expand=expand, sumdim=tuple(sumdim), unroll_dim=unroll_dim
    )


def bilinear(input1, input2, weight, bias=None):
    """y[..., o] = sum_ij input1[..., i] * weight[o, i, j] * input2[..., j] + bias[o]."""
    if input1.ndim != input2.ndim:
        raise RuntimeError(
            f"bilinear(): input dimensions do not match: got {input1.ndim} and {input2.ndim}"
        )
    for i in range(input1.ndim - 1):
        if input1.shape[i] != input2.shape[i]:
            raise RuntimeError(
                f"bilinear(): input batch dimensions do not match at dim {i}: got "
                f"{input1.shape[i]} and {input2.shape[i]}"
            )
    if input1.shape[-1] != weight.shape[1]:
        raise RuntimeError(
            f"bilinear(): input1 size does not match weight size: got {input1.shape[-1]} but "
            f"expected {weight.shape[1]}"
        )
    if input2.shape[-1] != weight.shape[2]:
        raise RuntimeError(
            f"bilinear(): input2 size does not match weight size: got {input2.shape[-1]} but "
            f"expected {weight.shape[2]}"
        )
    if bias is not None and bias.shape[0] != weight.shape[0]:
        raise RuntimeError(
            f"bilinear(): bias size does not match weight size: got {bias.shape[0]} but "
            f"expected {weight.shape[0]}"
        )
    output_size = (*input1.shape[:-1], weight.shape[0])
    flat1 = input1.reshape(-1, input1.shape[-1])
    flat2 = input2.reshape(-1, input2.shape[-1])
    output = _trilinear(flat1, weight, flat2, (1, 3), (0,), (1, 2), (2, 3)).reshape(output_size)
    if bias is not None:
        output = output + bias
    return output
