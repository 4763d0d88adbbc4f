"""View ops (share the storage, new metadata) and copies (clone, contiguous, copy_, fill_, cast).

A view remembers its root `_base` and `_view_fn`, the chain of view ops that rebuilds it from the
base; CopySlices and regenerated view grad_fns use it to route gradients through in-place writes.
"""

from __future__ import annotations

import math

import numpy as np

from engine import dtypes, kernels
from engine.autograd.function import Function, specialised_apply
from engine.autograd.grad_mode import STATE
from engine.backends.strided import infer_shape, view_strides
from engine.ops.common import broadcast_shape, check_out, data, sum_to
from engine.storage import alias_storage, wrap_storage
from engine.tensor import Tensor, _wrap_dim


def make_view(x: Tensor, arr, step) -> Tensor:
    v = Tensor._make(arr, x._storage, x._dtype, x._device)
    base = x._base
    if base is None:
        v._base = x
        v._view_fn = step
    else:
        v._base = base
        prev = x._view_fn
        v._view_fn = lambda b: step(prev(b))
    if x._view_meta is not None:
        v._view_meta = x._view_meta
    elif not STATE.enabled and v._base.requires_grad:
        v._view_meta = "no_grad"
    return v


def view_array(x: Tensor, shape):
    """The backend array viewed as `shape`, or None when the strides do not allow it."""
    arr = x._data
    kind = x._device.type
    if kind == "cpu":
        if arr.flags.c_contiguous:  # always viewable: reshape cannot copy
            return arr.reshape(shape)
        try:
            return np.reshape(arr, shape, copy=False)
        except ValueError:
            return None
    if kind == "meta":
        return arr.view_as_shape(shape)
    strides = view_strides(arr.shape, arr.strides, shape)
    if strides is None:
        return None
    import cupy

    return cupy.lib.stride_tricks.as_strided(arr, shape, strides)


class View(Function):
    apply = specialised_apply(1)  # one tensor argument

    def forward(self, x, out=None, shape=()):
        shape = infer_shape(shape, math.prod(x._data.shape))
        self.in_shape = x._data.shape
        arr = view_array(x, shape)
        if arr is None:
            raise RuntimeError(
                "view size is not compatible with input tensor's size and stride (at least one "
                "dimension spans across two contiguous subspaces). Use .reshape(...) instead."
            )
        return make_view(x, arr, lambda b: b.view(shape))

    def backward(self, g):
        return (g.reshape(self.in_shape),)

    def name(self):
        return "ViewBackward0"


class ReshapeAlias(View):
    """reshape of a non-contiguous tensor that can be viewed: torch's _reshape_alias."""

    def name(self):
        return "ReshapeAliasBackward0"


class Squeeze(View):
    """squeeze(): every size-1 dim out (torch's SqueezeBackward0)."""

    def name(self):
        return "SqueezeBackward0"


class SqueezeDim(View):
    """squeeze(dim)."""

    def name(self):
        return "SqueezeBackward1"


class SqueezeDims(View):
    """squeeze(dims) with a tuple of dims."""

    def name(self):
        return "SqueezeBackward2"


class Unsqueeze(View):
    """unsqueeze(dim)."""

    def name(self):
        return "UnsqueezeBackward0"


class Permute(Function):
    apply = specialised_apply(1)  # one tensor argument

    def forward(self, x, out=None, dims=()):
        n = x._data.ndim
        dims = tuple([_wrap_dim(d, n) for d in dims])
        if sorted(dims) != list(range(n)):
            raise RuntimeError(
                f"permute(sparse_coo): number of dimensions in the tensor input does not match the "
                f"length of the desired ordering of dimensions i.e. input.dim() = {x.ndim} is not "
                f"equal to len(dims) = {len(dims)}"
                if len(dims) != x.ndim
                else f"permute(): duplicate dims are not allowed in {list(dims)}"
            )
        self.dims = dims
        return make_view(x, x._data.transpose(dims), lambda b: b.permute(dims))

    def backward(self, g):
        inv = [0] * len(self.dims)
        for i, d in enumerate(self.dims):
            inv[d] = i
        return (g.permute(inv),)

    def name(self):
        return "PermuteBackward0"


class Transpose(Permute):
    """transpose / swapaxes / swapdims / mT: a permutation that swaps two dims (ops.transpose
    gives it wrapped, a permutation already: nothing to check again)."""

    def forward(self, x, out=None, dims=()):
        self.dims = dims
        return make_view(x, x._data.transpose(dims), lambda b: b.permute(dims))

    def backward(self, g):  # a swap is its own inverse
        return (_transpose(g, op="transpose", dims=self.dims),)

    def name(self):
        return "TransposeBackward0"


_transpose = Transpose.apply


class TransposeT(Permute):
    """t(): the matrix transpose (a 0-d or 1-d tensor as it is)."""

    def name(self):
        return "TBackward0"


class Expand(Function):
    apply = specialised_apply(1)  # one tensor argument

    def forward(self, x, out=None, shape=()):
        shape = tuple(shape)
        xs = x._data.shape
        # nothing to walk when x has that shape already (a batched matmul's operands)
        full = xs if shape == xs else _expanded_shape(x, shape)
        self.in_shape = xs
        return make_view(x, kernels.xp_of(x).broadcast_to(x._data, full), lambda b: b.expand(full))

    def backward(self, g):
        return (sum_to(g, self.in_shape),)

    def name(self):
        return "ExpandBackward0"


def _expanded_shape(x, shape: tuple) -> tuple:
    """expand's target: `shape` with each -1 x's size there, or torch's refusal."""
    lead = len(shape) - x.ndim
    if lead < 0:
        raise RuntimeError(
            f"expand({x._dtype.torch_tensor_name}{{{list(x.shape)}}}, size={list(shape)}): the "
            "number of sizes provided must be greater or equal to the number of dimensions in the tensor"
        )
    full = []
    for i, n in enumerate(shape):
        if n == -1:
            if i < lead:
                raise RuntimeError("expand: -1 is not allowed in a leading, non-existing dimension")
            n = x.shape[i - lead]
        elif i >= lead and x.shape[i - lead] not in (1, n):
            raise RuntimeError(
                f"The expanded size of the tensor ({n}) must match the existing size "
                f"({x.shape[i - lead]}) at non-singleton dimension {i}.  Target sizes: "
                f"{list(shape)}.  Tensor sizes: {list(x.shape)}"
            )
        full.append(n)
    return tuple(full)


def _has_tensor_index(index) -> bool:
    items = index if isinstance(index, tuple) else (index,)
    return any(isinstance(i, (Tensor, list, np.ndarray)) for i in items)


def _np_index(index):
    items = index if isinstance(index, tuple) else (index,)
    out = []
    for i in items:
        if isinstance(i, Tensor):
            out.append(i._data)
        elif isinstance(i, list):
            out.append(np.asarray(i))
        else:
            out.append(i)
    return tuple(out)


def index_steps(shape, index, lone: bool = False) -> list[tuple]:
    """torch's steps for a basic index of a tensor of `shape`, applied left to right: (kind,
    dim of the tensor the step applies to, item), kind "unsqueeze" for None, "select" for an
    int, "slice" for a slice that is not the whole dim; Ellipsis and whole-dim slices are no
    step, but a lone slice (x[a:b], not in a tuple) always slices. x[1:, :-1] is x[1:] then
    [:, :-1]."""
    items = index if isinstance(index, tuple) else (index,)
    rest = len(shape) - sum(1 for i in items if i is not None and i is not Ellipsis)
    steps = []
    pos = 0  # the dim of the tensor so far that the next item indexes
    dim = 0  # the input's dim it indexes
    for item in items:
        if item is None:
            steps.append(("unsqueeze", pos, None))
            pos += 1
        elif item is Ellipsis:
            pos += rest
            dim += rest
        elif isinstance(item, slice):
            if lone or (item != _WHOLE and item.indices(shape[dim]) != (0, shape[dim], 1)):
                steps.append(("slice", pos, item))
            pos += 1
            dim += 1
        else:
            steps.append(("select", pos, item))
            dim += 1
    return steps


_WHOLE = slice(None)
_STEP_NODE = {
    "unsqueeze": "UnsqueezeBackward0",
    "select": "SelectBackward0",
    "slice": "SliceBackward0",
}


def _zero_around(data, pos: int, item) -> None:
    """Zero `data` (a new gradient) outside item (an int, or a slice) along dim pos: what the
    gradient copied in leaves of torch's zeros. One pass fewer over the selected part than
    zeroing all first (the transformer step's q/k/v selects: 3 of 3 MB zeroed, 1 written)."""
    n = data.shape[pos]
    if isinstance(item, slice):
        lo, hi, step = item.indices(n)
    else:
        lo = item + n if item < 0 else item
        hi, step = lo + 1, 1
    if step != 1 or hi <= lo:
        data.fill(0)
        return
    lead = (slice(None),) * pos
    if lo > 0:
        data[lead + (slice(0, lo),)] = 0
    if hi < n:
        data[lead + (slice(hi, n),)] = 0


class Select(Function):
    """Basic indexing: ints, slices, None, Ellipsis -> a view."""

    apply = specialised_apply(1)  # one tensor argument

    def forward(self, x, out=None, index=None):
        self.in_shape = x.shape
        self.index = index
        if x._device.type != "meta" and x._data.ndim == 0 and index not in ((), Ellipsis, None):
            raise IndexError(
                "invalid index of a 0-dim tensor. Use `tensor.item()` to convert a 0-dim tensor to a number"
            )
        items = index if isinstance(index, tuple) else (index,)
        if not any(i is Ellipsis for i in items):
            items = items + (Ellipsis,)  # numpy gives a copied scalar for a full int index
        try:
            arr = x._data[items]
        except IndexError as exc:
            raise IndexError(str(exc).replace("axis", "dimension")) from None
        return make_view(x, arr, lambda b: b[index])

    def backward(self, g):
        """torch's chain of nodes, last step first: an unsqueeze's backward is a view of the
        gradient, an alias's the gradient itself, and each select or slice makes zeros of the
        shape before it with the gradient copied in (an intermediate lives until the step
        before has made its own): x[1:, :-1] allocates x[1:]'s shape, then x's."""
        cur = g
        for kind, pos, item, before in reversed(self._steps()):
            if kind == "unsqueeze":
                cur = cur.squeeze(pos)
                continue
            new = kernels.empty(before, g._dtype, g._device)
            if g._device.type != "meta":
                _zero_around(new._data, pos, item)
                where = (slice(None),) * pos + (item,)
                slot = new._data[where]
                if type(slot) is np.ndarray and slot.shape == cur._data.shape:
                    kernels.copy_runs(cur._data, slot)  # (on engine._native's threads)
                else:  # (a single element, or broadcast)
                    new._data[where] = cur._data
            cur = new
        return (cur,)

    def _steps(self):
        """(kind, dim, item, shape before) of each of torch's steps (index_steps), in order."""
        shape = list(self.in_shape)
        steps = []
        for kind, pos, item in index_steps(self.in_shape, self.index, self._lone()):
            steps.append((kind, pos, item, tuple(shape)))
            if kind == "unsqueeze":
                shape.insert(pos, 1)
            elif kind == "slice":
                shape[pos] = len(range(*item.indices(shape[pos])))
            else:
                del shape[pos]
        return steps

    def _lone(self) -> bool:
        return isinstance(self.index, slice)

    def name(self):
        """torch's node for its last step (index_steps); nothing at all is an alias."""
        steps = index_steps(self.in_shape, self.index, self._lone())
        return _STEP_NODE[steps[-1][0]] if steps else "AliasBackward0"


class Narrow(Select):
    """narrow(dim, start, length): a slice of one dim (SliceBackward0 even when it is whole)."""

    def backward(self, g):
        out = kernels.zeros(self.in_shape, g._dtype, g._device)
        if g._device.type != "meta":
            out._data[self.index] = g._data
        return (out,)

    def name(self):
        return "SliceBackward0"


class Unfold(Function):
    """Tensor.unfold(dimension, size, step): every window of `size` entries along a dim, `step`
    apart, as a view (that dim counts the windows, a new last dim holds a window's entries).
    Backward is torch's unfold_backward: input-sized zeros, each window's gradient added where
    it was read (one strided add per offset in the window: overlapping windows sum)."""

    apply = specialised_apply(1)  # one tensor argument

    def forward(self, x, out=None, dim=0, size=1, step=1):
        d = _wrap_dim(dim, max(x.ndim, 1))
        length = x.shape[d] if x.ndim else 1
        if size < 0:
            raise RuntimeError(f"size is {size} but must be >= 0")
        if size > length:
            raise RuntimeError(
                f"maximum size for tensor at dimension {d} is {length} but size is {size}"
            )
        if step <= 0:
            raise RuntimeError(f"step is {step} but must be > 0")
        arr = x._data
        self.in_shape, self.dim, self.size, self.step = x.shape, d, size, step
        if x.ndim == 0:
            shape, strides = (size,), (arr.itemsize,)
        else:
            count = (length - size) // step + 1
            shape = (*arr.shape[:d], count, *arr.shape[d + 1 :], size)
            st = tuple(arr.strides)
            strides = (*st[:d], st[d] * step, *st[d + 1 :], st[d])
        view = kernels.as_strided(arr, shape, strides)
        return make_view(x, view, lambda b: b.unfold(d, size, step))

    def backward(self, g):
        out = kernels.zeros(self.in_shape, g._dtype, g._device)
        if g._device.type != "meta":
            if not self.in_shape:  # a 0-d input: its one window
                out._data[...] = g._data[0]
                return (out,)
            xp = kernels.xp_of(g)
            d, size, step = self.dim, self.size, self.step
            count = g.shape[d]
            lead = (slice(None),) * d
            for k in range(size):  # offset k of every window: input k, k + step, ...
                dst = out._data[lead + (slice(k, k + step * (count - 1) + 1, step),)]
                xp.add(dst, g._data[..., k], out=dst)
        return (out,)

    def name(self):
        return "UnfoldBackward0"


class SplitViews(Function):
    """split / chunk / unbind: views of consecutive pieces along `dim`, and one backward node that
    writes every piece's gradient into one buffer (PyTorch's SplitBackward0 / UnbindBackward0).

    A piece whose output got no gradient contributes zeros, made as PyTorch makes them: a
    piece-sized zeros tensor for split (split_with_sizes_backward), a 0-d zero expanded for
    unbind (unbind_backward); then one cat / stack allocates the input-sized gradient.
    """

    def forward(self, x, out=None, dim=0, sizes=(), unbind=False, with_sizes=False):
        self.dim, self.sizes, self.unbind = dim, tuple(sizes), unbind
        self.with_sizes = with_sizes  # split by a list of sizes: torch's split_with_sizes
        self.in_shape = x.shape
        self.num_outputs = len(sizes)
        label = self.name()
        outs = []
        start = 0
        lead = (slice(None),) * dim
        for i, k in enumerate(sizes):
            idx = lead + ((start,) if unbind else (slice(start, start + k),))
            v = make_view(x, x._data[idx + (Ellipsis,)], lambda b, idx=idx: b[idx])
            v._view_meta = ("multi", i, label)
            outs.append(v)
            start += k
        return tuple(outs)

    def backward(self, *grads):
        ref = next((g for g in grads if g is not None), None)
        if ref is None:
            return (None,)
        dtype, dev = ref._dtype, ref._device
        meta = dev.type == "meta"
        zeros = {}
        for i, g in enumerate(grads):
            if g is None:
                shape = () if self.unbind else _piece_shape(self.in_shape, self.dim, self.sizes[i])
                zeros[i] = kernels.zeros(shape, dtype, dev)
        result = kernels.empty(self.in_shape, dtype, dev)
        if not meta:
            lead = (slice(None),) * self.dim
            start = 0
            for i, k in enumerate(self.sizes):
                idx = lead + ((start,) if self.unbind else (slice(start, start + k),))
                src = grads[i] if i not in zeros else zeros[i]
                result._data[idx] = src._data
                start += k
        del zeros
        return (result,)

    def name(self):
        if self.unbind:
            return "UnbindBackward0"
        return "SplitWithSizesBackward0" if self.with_sizes else "SplitBackward0"


def _piece_shape(shape, dim, k):
    return shape[:dim] + (k,) + shape[dim + 1 :]


class _KeepsIndex:
    """Advanced indexing keeps its index tensors for backward, as PyTorch's IndexBackward0 and
    IndexPutBackward0 save `indices`: a mask stays charged until backward runs (or the graph
    dies) and is version-checked when unpacked. A bool mask costs PyTorch a nonzero() of int64
    coordinates wherever the kernel gathers or scatters through it; the engine charges the same
    temporary (`_coordinates`), freed when the kernel returns."""

    index_saved: tuple = ()  # positions in `index` of the tensors kept by save()

    def _keep_index(self, index, recording: bool) -> None:
        items = index if isinstance(index, tuple) else (index,)
        self.index = _np_index(index)
        if recording:
            self.index_saved = tuple(pos for pos, t in enumerate(items) if isinstance(t, Tensor))
            self.save(**{f"index{pos}": items[pos] for pos in self.index_saved})
            plain = list(self.index)
            for pos in self.index_saved:
                plain[pos] = None
            self.index = tuple(plain)

    def _backward_index(self):
        if not self.index_saved:
            return self.index
        index = list(self.index)
        for pos in self.index_saved:
            index[pos] = self.kept(f"index{pos}")._data
        return tuple(index)

    def _coordinates(self, index, device):
        """nonzero() of each bool mask in `index`: (count, mask.ndim) int64, held by the caller."""
        held = []
        for i in index:
            if getattr(i, "dtype", None) == np.bool_ and i.ndim:
                n = int(np.count_nonzero(i)) if device.type == "cpu" else int(i.sum())
                held.append(kernels.empty((n, i.ndim), dtypes.int64, device))
        return held


def _recording(*args) -> bool:
    return STATE.enabled and any(isinstance(a, Tensor) and a.requires_grad for a in args)


class IndexGather(_KeepsIndex, Function):
    """Advanced indexing (integer / bool tensors): a copy."""

    def forward(self, x, out=None, index=None):
        self.in_shape = x.shape
        if x._device.type == "meta":
            raise RuntimeError(
                "indexing with tensors is not supported on the meta device (the result shape depends on values)"
            )
        self._keep_index(index, _recording(x))
        idx = _np_index(index)
        coords = self._coordinates(idx, x._device)
        arr = x._data[idx]
        s = wrap_storage(arr, x._device)
        del coords
        return Tensor._make(arr, s, x._dtype, x._device)

    def backward(self, g):
        # PyTorch: grad.new_zeros(self.sizes()).index_put_(indices, grad, accumulate=True)
        index = self._backward_index()
        out = kernels.zeros(self.in_shape, g._dtype, g._device)
        coords = self._coordinates(index, g._device)
        xp = kernels.xp_of(g)
        xp.add.at(out._data, index, g._data)
        del coords
        return (out,)

    def name(self):
        return "IndexBackward0"


class IndexPut(_KeepsIndex, Function):
    """x[tensor_index] = values, in place."""

    def forward(self, x, values, out=None, index=None):
        self.v_t = isinstance(values, Tensor)
        self.v_shape = values.shape if self.v_t else None
        self._keep_index(index, _recording(x, values))
        if x._device.type != "meta":
            idx = _np_index(index)
            # One bool mask and a single value is masked_fill_ in PyTorch: no coordinates.
            fill = len(idx) == 1 and (not self.v_t or values.ndim == 0)
            coords = () if fill else self._coordinates(idx, x._device)
            x._data[idx] = data(values)
            del coords
        return x

    def backward(self, g):
        # PyTorch: self: grad.index_put(indices, zeros_like(values)); values: grad[indices]
        index = self._backward_index()
        gx = g.clone()
        gx._data[index] = 0
        return (gx, self._values_grad(g, index)) if self.v_t else (gx,)

    def _values_grad(self, g, index):
        """values' gradient: grad[indices] (the coordinates of a mask made first), summed to
        the values' shape when they were broadcast."""
        coords = self._coordinates(index, g._device)
        picked = g._data[index]
        gv = Tensor._make(picked, wrap_storage(picked, g._device), g._dtype, g._device)
        del coords
        return sum_to(gv, self.v_shape) if gv.shape != self.v_shape else gv

    def name(self):
        return "IndexPutBackward0"


class Clone(Function):
    apply = specialised_apply(1)  # one tensor argument

    def forward(self, x, out=None):
        return kernels.copy_new(x)

    def backward(self, g):
        return (g,)

    def name(self):
        return "CloneBackward0"


class Copy(Function):
    """dst.copy_(src): in place, src broadcast into dst and cast to dst's dtype."""

    def forward(self, dst, src, out=None):
        self.src_t = isinstance(src, Tensor)
        self.src_shape = src.shape if self.src_t else ()
        self.src_dtype = src._dtype if self.src_t else None
        check_out(
            dst,
            broadcast_shape(dst, src, "copy_"),
            dst._dtype,
            "copy_",
            (dst.shape, self.src_shape),
        )
        if dst._device.type != "meta":
            src_data = data(src)
            if self.src_t and src._device != dst._device:
                src_data = _transfer(src_data, src._device, dst._device)
            kernels.xp_of(dst).copyto(dst._data, src_data, casting="unsafe")
        return dst

    def backward(self, g):
        # torch's CopyBackwards: zeros for dst's history when that needs a gradient (dst's old
        # values did not reach the result, so its gradient is 0, not absent), made first
        grads = [
            None if self._edges[0] is None else kernels.zeros(tuple(g.shape), g._dtype, g._device)
        ]
        if self.src_t:
            gs = sum_to(g, self.src_shape)
            if self.src_dtype is not g._dtype:
                gs = gs.to(self.src_dtype)
            grads.append(gs)
        return tuple(grads)

    def name(self):
        return "CopyBackwards"


def _writable(t: Tensor):
    """t's array, writable: numpy marks an expanded (broadcast) view read-only, but fill_ and
    zero_ may write through it as PyTorch does, so build the same view over the storage."""
    arr = t._data
    if not isinstance(arr, np.ndarray) or arr.flags.writeable:
        return arr
    buf = t._storage.data
    offset = arr.__array_interface__["data"][0] - buf.__array_interface__["data"][0]
    return np.ndarray(arr.shape, arr.dtype, buffer=buf, offset=offset, strides=arr.strides)


class Fill(Function):
    writes_overlap = True  # fill_ / zero_ of an expanded tensor: allowed by PyTorch

    def forward(self, dst, value, out=None):
        self.v_t = isinstance(value, Tensor)
        if self.v_t and value.ndim:
            raise RuntimeError(
                f"fill_ only supports 0-dimension value tensor but got tensor with {value.ndim} dimensions."
            )
        check_out(dst, dst.shape, dst._dtype, "fill_")
        if dst._device.type != "meta":
            _writable(dst)[...] = data(value)
        return dst

    def backward(self, g):
        # derivatives.yaml: fill_ / zero_: self: zeros_like(grad); value: grad.sum()
        zeros = kernels.zeros(g.shape, g._dtype, g._device)
        if not self.v_t:
            return (zeros,)
        return (zeros, g.sum() if self._edges[1] is not None else None)

    def name(self):
        return "FillBackward0"


class Cast(Function):
    """to(dtype=..., device=...): a new tensor (or self when nothing changes)."""

    apply = specialised_apply(1)  # one tensor argument

    def forward(self, x, out=None, dtype=None, device=None):
        self.src_dtype, self.src_device = x._dtype, x._device
        y = kernels.empty(x.shape, dtype, device)
        if device.type != "meta" and x._device.type != "meta":
            src = x._data
            if x._device != device:
                src = _transfer(src, x._device, device)
            kernels.xp_of(y).copyto(y._data, src, casting="unsafe")
        elif device.type != "meta":
            raise RuntimeError("Cannot copy out of meta tensor; no data!")
        return y

    def backward(self, g):
        return (g.to(dtype=self.src_dtype, device=self.src_device),)

    def name(self):
        return "ToCopyBackward0"


def _transfer(arr, src_dev, dst_dev):
    if src_dev.type == "cuda" and dst_dev.type == "cpu":
        return arr.get()
    if src_dev.type == "cpu" and dst_dev.type == "cuda":
        import cupy

        return cupy.asarray(arr)
    return arr


def is_basic_index(index) -> bool:
    return not _has_tensor_index(index)


__all__ = [
    "View",
    "Permute",
    "Expand",
    "Select",
    "SplitViews",
    "IndexGather",
    "IndexPut",
    "Clone",
    "Copy",
    "Fill",
    "Cast",
    "make_view",
    "view_array",
    "is_basic_index",
    "dtypes",
]


# ---------------------------------------------------------------------------------------------
# diagonal (a view) and diag_embed (its adjoint)
# ---------------------------------------------------------------------------------------------
def _diagonal_array(arr, offset, d1, d2):
    """The backend array of PyTorch's diagonal view: the other dims in order, then the entries
    [..., i, ..., i + offset, ...] (writable where the source is)."""
    i1, i2 = max(0, -offset), max(0, offset)
    length = max(0, min(arr.shape[d1] - i1, arr.shape[d2] - i2))
    rest = [i for i in range(arr.ndim) if i not in (d1, d2)]
    shape = tuple(arr.shape[i] for i in rest) + (length,)
    strides = tuple(arr.strides[i] for i in rest) + (arr.strides[d1] + arr.strides[d2],)
    first = arr
    if length and (i1 or i2):  # start at the diagonal's first entry
        index = [slice(None)] * arr.ndim
        index[d1], index[d2] = slice(i1, None), slice(i2, None)
        first = arr[tuple(index)]
    return kernels.as_strided(first, shape, strides)


class Diagonal(Function):
    """diagonal(x, offset, dim1, dim2): a view of the entries x[..., i, ..., i + offset, ...]
    with the diagonal as the last dim (PyTorch's DiagonalBackward0: a zeros tensor of x's shape
    whose diagonal receives the gradient)."""

    apply = specialised_apply(1)  # one tensor argument

    def forward(self, x, out=None, offset=0, dim1=0, dim2=1):
        if x.ndim < 2:
            raise RuntimeError(f"diagonal dimensions requires ndim larger than 1, but got {x.ndim}")
        d1, d2 = _wrap_dim(dim1, x.ndim), _wrap_dim(dim2, x.ndim)
        if d1 == d2:
            raise RuntimeError(f"diagonal dimensions cannot be identical {dim1}, {dim2}")
        self.in_shape, self.args = x.shape, (offset, d1, d2)
        arr = _diagonal_array(x._data, offset, d1, d2)
        return make_view(x, arr, lambda b: b.diagonal(offset, d1, d2))

    def backward(self, g):
        out = kernels.zeros(self.in_shape, g._dtype, g._device)
        if g._device.type != "meta":
            _diagonal_array(out._data, *self.args)[...] = g._data
        return (out,)

    def name(self):
        return "DiagonalBackward0"


class DiagEmbed(Function):
    """diag_embed(x, offset, dim1, dim2): a new zeros tensor with x on the chosen diagonal of
    two new dims; backward is the diagonal view of the gradient (PyTorch's DiagEmbedBackward0
    allocates nothing)."""

    def forward(self, x, out=None, offset=0, dim1=-2, dim2=-1):
        nd = x.ndim + 1
        d1, d2 = _wrap_dim(dim1, nd), _wrap_dim(dim2, nd)
        if d1 == d2:
            raise RuntimeError(f"diagonal dimensions cannot be identical {dim1}, {dim2}")
        n = x.shape[-1] + abs(offset) if x.ndim else abs(offset) + 1
        rest = list(x.shape[:-1])
        shape = [0] * nd
        it = iter(rest)
        for i in range(nd):
            shape[i] = n if i in (d1, d2) else next(it)
        self.args = (offset, d1, d2)
        y = kernels.zeros(tuple(shape), x._dtype, x._device)
        if x._device.type != "meta":
            _diagonal_array(y._data, offset, d1, d2)[...] = x._data
        return y

    def backward(self, g):
        return (g.diagonal(*self.args),)

    def name(self):
        return "DiagEmbedBackward0"


class UnsafeView(Function):
    """at::_unsafe_view: the same memory reshaped, no view for autograd (an in-place add on it
    is a plain AddBackward0); backward reshapes the gradient back (UnsafeViewBackward0)."""

    def forward(self, x, out=None, shape=()):
        self.in_shape = x.shape
        data = view_array(
            x, tuple(math.prod(x.shape) // -math.prod(shape) if d == -1 else d for d in shape)
        )
        return Tensor._make(data, alias_storage(x._storage), x._dtype, x._device)

    def backward(self, g):
        return (g.reshape(self.in_shape),)

    def name(self):
        return "UnsafeViewBackward0"


def unsafe_view(t, shape):
    """at::_unsafe_view(t, shape) (UnsafeViewBackward0)."""
    return UnsafeView.apply(t, op="_unsafe_view", shape=tuple(shape))
