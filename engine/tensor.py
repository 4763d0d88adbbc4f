"""engine.Tensor: a strided view of a Storage, with autograd state.

Metadata lives in the backend array (`_data`: a numpy/cupy ndarray or a MetaArray that views the
storage's memory). Op methods are attached by engine/ops/__init__.py from the op table, so this
file holds only what every tensor is: its memory, its metadata and its autograd fields.
"""

from __future__ import annotations

import math

import numpy as np

from engine import dtypes
from engine.autograd.grad_mode import STATE as _GRAD
from engine.backends.meta import MetaArray as _MetaArray
from engine.backends.strided import is_contiguous as _is_contiguous
from engine.device import device as _device_cls
from engine.errors import MetaDataError
from engine.storage import Storage

_ndarray = np.ndarray


class Tensor:
    # The hot fields are slots; rarely set ones (views, multi-output nodes, retain_grad, names)
    # fall back to the class defaults below until a tensor sets its own (in its __dict__).
    __slots__ = (
        "_data",
        "_storage",
        "_dtype",
        "_device",
        "_base",
        "requires_grad",
        "_grad",
        "_grad_fn",
        "__weakref__",
        "__dict__",
    )

    _view_fn = None  # view: rebuilds this view from its root base (used by CopySlices)
    _view_meta = None  # view: None, "no_grad", or ("multi", output index, node name)
    _output_nr = 0  # which output of its grad_fn this tensor is
    _retains_grad = False
    _grad_fn_version = 0  # storage version when _grad_fn was set (views regenerate on change)
    _acc = None  # leaf: weak reference to its AccumulateGrad (autograd.function._accumulator)
    name = None

    __array_priority__ = 1000  # numpy defers to our operators

    # --- construction --------------------------------------------------------------------------
    @staticmethod
    def _make(data, storage: Storage, dtype, device, requires_grad=False) -> Tensor:
        t = _new(Tensor)
        t._data = data
        t._storage = storage
        t._dtype = dtype
        t._device = device
        t._base = None
        t.requires_grad = requires_grad
        t._grad = None
        t._grad_fn = None
        return t

    def __init__(self, *args, **kwargs):
        raise TypeError(
            "use engine.tensor(...), engine.empty(...) or engine.from_numpy(...) to make a tensor"
        )

    # --- metadata -------------------------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        return self._data.shape

    def size(self, dim: int | None = None):
        if dim is None:
            return self._data.shape
        return self._data.shape[_wrap_dim(dim, self._data.ndim)]

    @property
    def dtype(self):
        return self._dtype

    @property
    def device(self) -> _device_cls:
        return self._device

    @property
    def is_meta(self) -> bool:
        return self._device.type == "meta"

    @property
    def is_cuda(self) -> bool:
        return self._device.type == "cuda"

    @property
    def is_cpu(self) -> bool:
        return self._device.type == "cpu"

    @property
    def layout(self):
        return strided

    @property
    def output_nr(self) -> int:
        return self._output_nr

    @property
    def ndim(self) -> int:
        return self._data.ndim

    def dim(self) -> int:
        return self._data.ndim

    def numel(self) -> int:
        return math.prod(self._data.shape)

    nelement = numel

    def element_size(self) -> int:
        return self._dtype.itemsize

    @property
    def itemsize(self) -> int:
        return self._dtype.itemsize

    @property
    def nbytes(self) -> int:
        return self.numel() * self._dtype.itemsize

    def stride(self, dim: int | None = None):
        item = self._data.itemsize  # the array's (bfloat16 is held in float32)
        strides = tuple(s // item for s in self._data.strides)
        return strides if dim is None else strides[_wrap_dim(dim, self.ndim)]

    def storage_offset(self) -> int:
        return (self.data_ptr() - self._storage.data_ptr()) // self._data.itemsize

    def data_ptr(self) -> int:
        kind = self._device.type
        if kind == "cpu":
            return self._data.__array_interface__["data"][0]
        if kind == "cuda":
            return self._data.data.ptr
        return self._storage.fake_address + self._data.offset

    def untyped_storage(self) -> Storage:
        return self._storage

    def is_contiguous(self) -> bool:
        """torch's rule: strides are C-contiguous ones, size-1 dims aside; a tensor with no
        elements is contiguous whatever its strides. numpy's flag follows the same rule."""
        d = self._data
        if d.__class__ is _ndarray:
            return d.flags.c_contiguous
        if d.__class__ is _MetaArray and d.c_contiguous:  # (its C strides exactly, worked out once)
            return True
        return _is_contiguous(d.shape, d.strides, d.itemsize)

    def is_floating_point(self) -> bool:
        return self._dtype.is_floating_point

    @property
    def _version(self) -> int:
        return self._storage.version

    @property
    def is_leaf(self) -> bool:
        return self.grad_fn is None

    @property
    def _is_view(self) -> bool:
        return self._base is not None

    def _is_view_method(self) -> bool:
        return self._base is not None

    # --- autograd fields ------------------------------------------------------------------------
    @property
    def grad_fn(self):
        base = self._base
        if (
            base is not None
            and self._grad_fn_version != self._storage.version
            and (base.requires_grad or self.requires_grad)
        ):
            # The storage moved since this view's grad_fn was set: an in-place op on the base or
            # on another view may have changed the base's history. Regenerate from the base.
            from engine.autograd.function import regenerate_view_grad_fn

            regenerate_view_grad_fn(self)
        return self._grad_fn

    @grad_fn.setter
    def grad_fn(self, fn):
        self._grad_fn = fn
        if self._base is not None:
            self._grad_fn_version = self._storage.version

    @property
    def grad(self):
        return self._grad

    @grad.setter
    def grad(self, value):
        if value is not None:
            if not isinstance(value, Tensor):
                raise TypeError(
                    f"assigned grad expected to be a Tensor or None but got {type(value).__name__}"
                )
            if value.shape != self.shape:
                raise RuntimeError(
                    f"assigned grad has data of a different size: {list(value.shape)} vs {list(self.shape)}"
                )
        self._grad = value

    def requires_grad_(self, requires_grad: bool = True) -> Tensor:
        if not requires_grad and self._grad_fn is not None:
            raise RuntimeError(
                "you can only change requires_grad flags of leaf variables. If you want to use a "
                "computed variable in a subgraph that doesn't require differentiation use "
                "var_no_grad = var.detach()."
            )
        if requires_grad and not self._dtype.is_floating_point:
            raise RuntimeError("only Tensors of floating point dtype can require gradients")
        self.requires_grad = requires_grad
        return self

    def retain_grad(self) -> None:
        if not self.requires_grad:
            raise RuntimeError("can't retain_grad on Tensor that has requires_grad=False")
        fn = self.grad_fn
        if fn is not None and not self._retains_grad:
            import weakref

            self._retains_grad = True
            if fn.retained is None:
                fn.retained = []
            fn.retained.append((weakref.ref(self), self._output_nr))

    @property
    def retains_grad(self) -> bool:
        return self._retains_grad

    def backward(self, gradient=None, retain_graph=None, create_graph=False, inputs=None) -> None:
        """Accumulate d(self)/d(leaf) into every leaf's .grad (a non-scalar needs `gradient`)."""
        from engine.allocator import tracked
        from engine.autograd.engine import backward

        if tracked.observed:  # a profiler is listening: what backward allocates is its phase
            with tracked.context(phase="backward"):
                backward([self], [gradient], retain_graph=retain_graph, inputs=inputs)
            return
        backward([self], [gradient], retain_graph=retain_graph, inputs=inputs)

    # --- values ---------------------------------------------------------------------------------
    def numpy(self, *, force: bool = False) -> np.ndarray:
        """The values as a numpy array (shares memory on cpu)."""
        if self.requires_grad and not force:
            raise RuntimeError(
                "Can't call numpy() on Tensor that requires grad. Use tensor.detach().numpy() instead."
            )
        kind = self._device.type
        if kind == "cpu":
            return self._data
        if kind == "meta":
            self._data._no_data()
        if not force:
            raise TypeError(
                "can't convert cuda tensor to numpy. Use Tensor.cpu() to copy the tensor to host memory first."
            )
        return self._data.get()

    def item(self):
        if self.numel() != 1:
            raise RuntimeError(
                f"a Tensor with {self.numel()} elements cannot be converted to Scalar"
            )
        if self._device.type == "meta":
            self._data._no_data()
        return self._data.reshape(()).item() if self._data.ndim else self._data.item()

    def tolist(self):
        if self._device.type == "meta":
            self._data._no_data()
        if self._device.type == "cuda":
            return self._data.get().tolist()
        return self._data.tolist()

    def __float__(self) -> float:
        return float(self.item())

    def __int__(self) -> int:
        return int(self.item())

    def __bool__(self) -> bool:
        if self.numel() != 1:
            raise RuntimeError(f"Boolean value of Tensor with {self.numel()} values is ambiguous")
        return bool(self.item())

    def __index__(self) -> int:
        if self._dtype.is_floating_point or self.numel() != 1:
            raise TypeError("only integer tensors of a single element can be converted to an index")
        return int(self.item())

    def __len__(self) -> int:
        if not self._data.ndim:
            raise TypeError("len() of a 0-d tensor")
        return self._data.shape[0]

    def __iter__(self):
        if not self._data.ndim:
            raise TypeError("iteration over a 0-d tensor")
        return (self[i] for i in range(self._data.shape[0]))

    def __hash__(self) -> int:
        return id(self)

    def __repr__(self) -> str:
        extras = []
        kind = self._device.type
        if kind != "cpu":
            extras.append(f"device='{self._device}'")
        if kind == "meta":
            extras.append(f"size={tuple(self.shape)}")
        if self._dtype not in (dtypes.get_default_dtype(), dtypes.int64, dtypes.bool_) or (
            kind != "meta" and self.numel() == 0 and self._dtype is not dtypes.get_default_dtype()
        ):
            extras.append(f"dtype={self._dtype!r}")
        if self._grad_fn is not None:
            extras.append(f"grad_fn=<{self._grad_fn.name()}>")
        elif self.requires_grad:
            extras.append("requires_grad=True")
        if kind == "meta":
            return "tensor(..., " + ", ".join(extras) + ")"
        arr = self._data if kind == "cpu" else self._data.get()
        body = _format_values(arr)
        return "tensor(" + body + "".join(", " + e for e in extras) + ")"

    __str__ = __repr__

    # Pickling is deliberately unsupported; copy.deepcopy is (copy.copy goes through pickling's
    # protocol, and fails as pickle does).
    def __reduce__(self):
        raise TypeError("engine tensors cannot be pickled; use .numpy() to save values")

    def __deepcopy__(self, memo):
        """torch.Tensor.__deepcopy__: leaves only; new memory (a copy made once per storage, so
        views of one storage stay views of one new storage; on meta a clone, as torch's),
        requires_grad and a deep copy of .grad, and the tensor's own Python attributes."""
        if not self.is_leaf:
            raise RuntimeError(
                "Only Tensors created explicitly by the user (graph leaves) support the deepcopy "
                "protocol at the moment.  If you were attempting to deepcopy a module, this may "
                "be because of a torch.nn.utils.weight_norm usage, see "
                "https://github.com/pytorch/pytorch/pull/103001"
            )
        if id(self) in memo:
            return memo[id(self)]
        import copy

        from engine.autograd.grad_mode import no_grad

        live = self._device.type != "meta"
        with no_grad():
            base, replay = self._base, self.__dict__.get("_view_fn")
            same = memo.get(id(self._storage)) if live and base is None else None
            if base is not None and replay is not None and live:
                # (a leaf view of a non-leaf, made under no_grad: its base's storage is copied
                # through a detached alias, which the storage memo below shares)
                new = replay(copy.deepcopy(base if base.is_leaf else base.detach(), memo))
                new = new.detach()  # a leaf of its own, over the new base's storage
            elif (
                same is not None
                and same._data.shape == self._data.shape
                and same._data.strides == self._data.strides
            ):  # another tensor of this storage (a detach()) was copied: share that copy
                new = same.detach()
            else:
                new = self.clone()  # its own storage, the same layout
                if live and base is None:
                    memo[id(self._storage)] = new
        if type(self) is not Tensor:
            new.__class__ = type(self)
        if self.requires_grad:
            new.requires_grad_()
        if self._grad is not None:
            new._grad = copy.deepcopy(self._grad, memo)
        for key, value in self.__dict__.items():
            if not key.startswith("_"):  # the engine's own fields start with "_"
                setattr(new, key, copy.deepcopy(value, memo))
        memo[id(self)] = new
        return new


_new = object.__new__


def _format_values(arr: np.ndarray) -> str:
    """PyTorch's print style: `1., 2.` for whole floats, 4 fixed decimals, else scientific."""
    opts = dict(separator=", ", prefix="tensor(", threshold=1000, edgeitems=3)
    if arr.dtype.kind != "f" or arr.size == 0:
        return np.array2string(arr, **opts)
    finite = np.abs(arr[np.isfinite(arr)]).astype(np.float64)
    if finite.size == 0 or np.all(finite == np.round(finite)) and finite.max() < 1e8:
        fmt = lambda v: f"{v:.0f}." if np.isfinite(v) else str(v)  # noqa: E731
    elif (
        finite.max() >= 1e8
        or (finite[finite > 0].min(initial=1) < 1e-4)
        or (finite.max() / max(finite[finite > 0].min(initial=1), 1e-300) > 1000)
    ):
        fmt = lambda v: f"{v:.4e}" if np.isfinite(v) else str(v)  # noqa: E731
    else:
        fmt = lambda v: f"{v:.4f}" if np.isfinite(v) else str(v)  # noqa: E731
    return np.array2string(arr, formatter={"float_kind": fmt}, **opts)


def _wrap_dim(dim: int, ndim: int) -> int:
    n = max(ndim, 1)
    if dim < -n or dim >= n:
        raise IndexError(
            f"Dimension out of range (expected to be in range of [{-n}, {n - 1}], but got {dim})"
        )
    return dim % n


def is_tensor(obj) -> bool:
    return isinstance(obj, Tensor)


def grad_enabled() -> bool:
    return _GRAD.enabled


__all__ = ["Tensor", "is_tensor", "MetaDataError"]


class layout:  # noqa: N801  (torch.layout's name)
    """A tensor's memory layout; the engine has one, dense strided (torch.strided)."""

    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return f"engine.{self.name}"

    def __reduce__(self):
        return (_layout_named, (self.name,))


def _layout_named(name: str) -> layout:
    return strided


strided = layout("strided")


class memory_format(str):  # noqa: N801  (torch.memory_format's name)
    """torch.contiguous_format, preserve_format, channels_last, channels_last_3d: the engine's
    functions take these (or their names); its tensors are dense and strided, made C-contiguous
    or laid out as their input (preserve_format), never channels-last."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"engine.{str(self)}"


contiguous_format = memory_format("contiguous_format")
preserve_format = memory_format("preserve_format")
channels_last = memory_format("channels_last")
channels_last_3d = memory_format("channels_last_3d")


def check_memory_format(fmt, opname: str) -> None:
    """Refuse the channels-last formats by name (the engine makes no such layout)."""
    if fmt is not None and fmt not in (contiguous_format, preserve_format):
        raise NotImplementedError(
            f"{opname}: memory_format={fmt!s} is not supported by the engine (its tensors are "
            "contiguous, or laid out as their input with preserve_format)"
        )
