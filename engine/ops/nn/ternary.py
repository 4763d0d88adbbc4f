"""Optimizer arithmetic run in place without full-size temporaries: addcmul, addcdiv, lerp."""

from __future__ import annotations

from engine import kernels
from engine.autograd.function import Function
from engine.ops.common import broadcast_shapes, device_of, result_buffer, result_type, sum_to
from engine.ops.nn.common import _blocked, _live, _needs
from engine.tensor import Tensor


def _dtype_name(d) -> str:
    return d.scalar_name.lower()


class _Ternary(Function):
    """out = f(self, a, b) for tensors of one shape (broadcasting allowed). PyTorch's fused
    kernel allocates nothing but the result; where the engine needs a full-size temporary (a
    broadcast operand, or the CuPy backend, which cannot run the blocked loop) it is kernel
    scratch, reported apart from memory_allocated (kernels.Scratch)."""

    opname = "ternary"

    def _prepare_out(self, s, a, b, out):
        if out is not None:
            # The optimizer's case, decided inline: tensors of out's shape, dtype and device
            # (what the general rules below conclude, their checks passing). b: None for
            # lerp's scalar weight.
            dt, dev, shape = out._dtype, out._device, out._data.shape
            for t in (s, a, b):
                if t is not None and not (
                    isinstance(t, Tensor)
                    and t._dtype is dt
                    and t._device is dev
                    and t._data.shape == shape
                ):
                    break
            else:
                self.shapes = (shape, shape, () if b is None else shape)
                return out, dev
        args = [t for t in (s, a, b) if isinstance(t, Tensor)]
        shape = args[0].shape
        for t in args:  # the optimizer's case, operands of one shape, without broadcast_shapes
            if t.shape != shape:
                shape = tuple(broadcast_shapes(self.opname, *(t.shape for t in args)))
                break
        self.shapes = tuple(t.shape if isinstance(t, Tensor) else () for t in (s, a, b))
        dev = device_of(*args)
        return result_buffer(out, shape, result_type(*args), dev, self.opname), dev

    def _combine(self, s, t1, t2, out, value, pair: str):
        """out = s + value * pair(t1, t2), blocked with a small scratch (a full-size one when
        it cannot be)."""
        self.value = value
        y, dev = self._prepare_out(s, t1, t2, out)
        if _live(dev):
            xp = kernels.xp_of_device(dev)
            combine = getattr(xp, pair)

            def fn(o, a, b, c, scratch):
                combine(b, c, out=scratch)
                if value != 1:
                    xp.multiply(scratch, value, out=scratch)
                xp.add(a, scratch, out=o)

            if not _blocked(fn, y._data, s._data, t1._data, t2._data):
                tmp = kernels.Scratch(y.shape, y._dtype, dev)
                combine(t1._data, t2._data, out=tmp.data)
                if value != 1:
                    xp.multiply(tmp.data, value, out=tmp.data)
                xp.add(s._data, tmp.data, out=y._data)
                del tmp
        return y

    def _grads(self, *gs):
        out = []
        for gi, shape in zip(gs, self.shapes, strict=False):
            out.append(None if gi is None else sum_to(gi, shape))
        return tuple(out)


class Addcmul(_Ternary):
    """self + value * t1 * t2."""

    opname = "addcmul"

    def to_save(self, tensors):
        idx = []
        if tensors[2].requires_grad:
            idx.append(1)
        if tensors[1].requires_grad:
            idx.append(2)
        self._save_idx = tuple(idx)
        return self._save_idx

    def forward(self, s, t1, t2, out=None, value=1):
        return self._combine(s, t1, t2, out, value, "multiply")

    def backward(self, g):
        saved = dict(zip(self._save_idx, self.saved_tensors, strict=True))
        ns, n1, n2 = _needs(self)
        g1 = g * saved[2] * self.value if n1 else None
        g2 = g * saved[1] * self.value if n2 else None
        return self._grads(g if ns else None, g1, g2)

    def name(self):
        return "AddcmulBackward0"


class Addcdiv(_Ternary):
    """self + value * t1 / t2."""

    opname = "addcdiv"

    def to_save(self, tensors):
        if tensors[1].requires_grad or tensors[2].requires_grad:
            return (1, 2)
        return ()

    def forward(self, s, t1, t2, out=None, value=1):
        return self._combine(s, t1, t2, out, value, "true_divide")

    def backward(self, g):
        ns, n1, n2 = _needs(self)
        t1 = t2 = None
        if n1 or n2:
            t1, t2 = self.saved_tensors
        g1 = g * self.value / t2 if n1 else None
        g2 = -(g * self.value) * t1 / (t2 * t2) if n2 else None
        return self._grads(g if ns else None, g1, g2)

    def name(self):
        return "AddcdivBackward0"


class Lerp(_Ternary):
    """self + weight * (end - self), weight a number or a tensor (PyTorch's two-sided formula)."""

    opname = "lerp"

    def to_save(self, tensors):
        if len(tensors) == 3 and tensors[2].requires_grad:
            return (0, 1, 2)
        if len(tensors) == 3:
            return (2,)
        return ()

    def forward(self, s, end, weight=None, out=None, scalar_weight=0.5):
        self.w_t = isinstance(weight, Tensor)
        for name, t in (("end", end), ("weight", weight if self.w_t else None)):
            if t is not None and t._dtype is not s._dtype:  # PyTorch's lerp does not promote
                raise RuntimeError(
                    f"expected dtype {_dtype_name(s._dtype)} for `{name}` but got dtype "
                    f"{_dtype_name(t._dtype)}"
                )
        self.scalar = scalar_weight
        y, dev = self._prepare_out(s, end, weight if self.w_t else None, out)
        if _live(dev):
            xp = kernels.xp_of_device(dev)
            if not self.w_t:
                w = float(scalar_weight)

                def fn(o, a, b, scratch):
                    xp.subtract(b, a, out=scratch)
                    if abs(w) < 0.5:
                        xp.multiply(scratch, w, out=scratch)
                        xp.add(a, scratch, out=o)
                    else:
                        xp.multiply(scratch, 1.0 - w, out=scratch)
                        xp.subtract(b, scratch, out=o)

                if not _blocked(fn, y._data, s._data, end._data):
                    tmp = kernels.Scratch(y.shape, y._dtype, dev)
                    fn(y._data, s._data, end._data, tmp.data)
                    del tmp
            else:
                tmp = kernels.Scratch(y.shape, y._dtype, dev)
                xp.subtract(end._data, s._data, out=tmp.data)
                xp.multiply(tmp.data, weight._data, out=tmp.data)
                xp.add(s._data, tmp.data, out=y._data)
                del tmp
        return y

    def backward(self, g):
        needs = _needs(self)
        if not self.w_t:
            w = self.scalar
            return self._grads(
                g * (1.0 - w) if needs[0] else None, g * w if needs[1] else None, None
            )[:2]
        saved = self.saved_tensors
        wt = saved[-1]
        gs = g * (1 - wt) if needs[0] else None
        ge = g * wt if needs[1] else None
        gw = g * (saved[1] - saved[0]) if needs[2] else None
        return self._grads(gs, ge, gw)

    def name(self):
        return "LerpBackward0" if not self.w_t else "LerpBackward1"


def addcmul(input, tensor1, tensor2, *, value=1, out=None):
    return Addcmul.apply(input, tensor1, tensor2, out=out, op="addcmul", value=value)


def addcmul_(input, tensor1, tensor2, *, value=1):
    return Addcmul.apply(input, tensor1, tensor2, out=input, op="addcmul_", value=value)


def addcdiv(input, tensor1, tensor2, *, value=1, out=None):
    return Addcdiv.apply(input, tensor1, tensor2, out=out, op="addcdiv", value=value)


def addcdiv_(input, tensor1, tensor2, *, value=1):
    return Addcdiv.apply(input, tensor1, tensor2, out=input, op="addcdiv_", value=value)


def lerp(input, end, weight, *, out=None):
    if isinstance(weight, Tensor):
        return Lerp.apply(input, end, weight, out=out, op="lerp")
    return Lerp.apply(input, end, out=out, op="lerp", scalar_weight=weight)


def lerp_(input, end, weight):
    if isinstance(weight, Tensor):
        return Lerp.apply(input, end, weight, out=input, op="lerp_")
    return Lerp.apply(input, end, out=input, op="lerp_", scalar_weight=weight)
