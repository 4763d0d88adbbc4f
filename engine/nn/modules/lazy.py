"""Lazy modules (torch.nn.modules.lazy): parameters whose shapes come from the first input.

Until its first call a lazy module holds `UninitializedParameter`s (and `UninitializedBuffer`s
for normalisation's running stats): zero-element tensors that remember their dtype, device and
`requires_grad` and refuse to tell a shape. The first call runs a forward pre-hook that reads
in_features / in_channels / num_features from the input, materializes each uninitialized tensor
(one `empty` each, in torch's order: weight, bias, running_mean, running_var), runs the module's
`reset_parameters`, and turns the module into its plain class (`cls_to_become`): a LazyLinear
becomes a Linear, and the call then runs Linear's forward. The parameter objects stay the same,
so an optimizer built before the first call (torch accepts them) updates them after it.

>>> fc = engine.nn.LazyLinear(10)
>>> fc(engine.ones(4, 3)).shape, type(fc).__name__, fc.in_features
((4, 10), 'Linear', 3)
"""

from __future__ import annotations

import itertools
from collections import OrderedDict

from engine import dtypes
from engine.allocator.tracked import context
from engine.autograd.grad_mode import no_grad
from engine.creation import empty, tensor
from engine.nn.modules.conv import (
    Conv1d,
    Conv2d,
    Conv3d,
    ConvTranspose1d,
    ConvTranspose2d,
    ConvTranspose3d,
)
from engine.nn.modules.linear import Linear
from engine.nn.modules.normalization import (
    BatchNorm1d,
    BatchNorm2d,
    BatchNorm3d,
    InstanceNorm1d,
    InstanceNorm2d,
    InstanceNorm3d,
)
from engine.nn.parameter import Parameter
from engine.tensor import Tensor

__all__ = [
    "LazyModuleMixin",
    "UninitializedBuffer",
    "UninitializedParameter",
    "is_lazy",
    "LazyLinear",
    "LazyConv1d",
    "LazyConv2d",
    "LazyConv3d",
    "LazyConvTranspose1d",
    "LazyConvTranspose2d",
    "LazyConvTranspose3d",
    "LazyBatchNorm1d",
    "LazyBatchNorm2d",
    "LazyBatchNorm3d",
    "LazyInstanceNorm1d",
    "LazyInstanceNorm2d",
    "LazyInstanceNorm3d",
]


# --- uninitialized tensors ---------------------------------------------------------------------
class UninitializedTensorMixin:
    """A zero-element placeholder: dtype, device and requires_grad, no shape (torch's words)."""

    __slots__ = ()  # the same layout as the class it becomes
    _category = "parameter"

    def materialize(self, shape, device=None, dtype=None) -> None:
        """Allocate the real tensor (torch.empty(shape)) and become `cls_to_become`."""
        device = self._device if device is None else device
        dtype = self._dtype if dtype is None else dtype
        with context(category=self._category):
            self.data = empty(*shape, device=device, dtype=dtype)
        self.__class__ = self.cls_to_become

    @property
    def shape(self):
        raise RuntimeError(
            "Can't access the shape of an uninitialized parameter or buffer. "
            "This error usually happens in `load_state_dict` when trying to load "
            "an uninitialized parameter into an initialized one. "
            "Call `forward` to initialize the parameters before accessing their attributes."
        )

    def share_memory_(self):
        raise RuntimeError(
            "Can't share memory on an uninitialized parameter or buffer. "
            "Call `forward` to initialize the parameters before calling "
            "`module.share_memory()`."
        )

    def to(self, *args, **kwargs):
        """A cast or move stays uninitialized (Module.to / .double() on a lazy module)."""
        plain = Tensor._make(self._data, self._storage, self._dtype, self._device)
        out = Tensor.to(plain, *args, **kwargs)
        if out is plain:  # nothing to change
            return self
        out.__class__ = type(self)
        out.requires_grad = self.requires_grad
        return out

    def __repr__(self) -> str:
        return f"<{type(self).__name__}>"

    __str__ = __repr__


class UninitializedParameter(UninitializedTensorMixin, Parameter):
    """A Parameter whose shape is not known yet; `materialize(shape)` makes it a Parameter."""

    __slots__ = ()
    cls_to_become = Parameter

    def __new__(cls, requires_grad: bool = True, device=None, dtype=None):
        return Parameter.__new__(cls, empty(0, device=device, dtype=dtype), requires_grad)

    def __init__(self, *args, **kwargs):
        pass

    def __deepcopy__(self, memo):
        if id(self) not in memo:
            memo[id(self)] = type(self)(self.requires_grad, self._device, self._dtype)
        return memo[id(self)]


class UninitializedBuffer(UninitializedTensorMixin, Tensor):
    """A buffer whose shape is not known yet; `materialize(shape)` makes it a Tensor."""

    __slots__ = ()
    _category = "buffer"
    cls_to_become = Tensor

    def __new__(cls, requires_grad: bool = False, device=None, dtype=None, persistent=True):
        t = empty(0, device=device, dtype=dtype, requires_grad=requires_grad)
        t.__class__ = cls
        t.persistent = persistent
        return t

    def __init__(self, *args, **kwargs):
        pass

    def __deepcopy__(self, memo):
        if id(self) not in memo:
            memo[id(self)] = type(self)(self.requires_grad, self._device, self._dtype)
        return memo[id(self)]


def is_lazy(param) -> bool:
    """Whether `param` is an UninitializedParameter or UninitializedBuffer."""
    return isinstance(param, UninitializedTensorMixin)


# --- the mixin ---------------------------------------------------------------------------------
class LazyModuleMixin:
    """Infers parameter shapes from the first call, then becomes `cls_to_become`."""

    cls_to_become = None

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._load_hook = self._register_load_state_dict_pre_hook(self._lazy_load_hook)
        self._initialize_hook = self.register_forward_pre_hook(self._infer_parameters)

    def initialize_parameters(self, *args, **kwargs):
        raise NotImplementedError(
            f"initialize_parameters is not implemented for {self.__class__.__name__}"
        )

    def has_uninitialized_params(self) -> bool:
        return any(
            is_lazy(t) for t in itertools.chain(self._parameters.values(), self._buffers.values())
        )

    def _infer_parameters(self, module, args):
        module.initialize_parameters(*args)
        if module.has_uninitialized_params():
            raise RuntimeError(f"module {self._get_name()} has not been fully initialized")
        module._initialize_hook.remove()
        module._load_hook.remove()
        del module.__dict__["_initialize_hook"]
        del module.__dict__["_load_hook"]
        if module.cls_to_become is not None:
            module.__class__ = module.cls_to_become

    def state_dict(self, destination=None, prefix: str = "", keep_vars: bool = False):
        """Uninitialized tensors go in as themselves (torch's _save_to_state_dict)."""
        if destination is None:
            destination = OrderedDict()
        for name, p in self._parameters.items():
            if p is not None:
                destination[prefix + name] = p if (is_lazy(p) or keep_vars) else p.detach()
        for name, b in self._buffers.items():
            if b is not None and name not in self._non_persistent_buffers:
                destination[prefix + name] = b if (is_lazy(b) or keep_vars) else b.detach()
        return destination

    def _lazy_load_hook(
        self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
    ):
        """load_state_dict pre-hook (torch's): an initialized value materializes the
        uninitialized tensor it loads into; the module stays lazy until its first call."""
        for name, t in itertools.chain(self._parameters.items(), self._buffers.items()):
            key = prefix + name
            if key in state_dict and t is not None and is_lazy(t):
                value = state_dict[key]
                if not is_lazy(value):
                    with no_grad():
                        t.materialize(tuple(value.shape))


# --- Linear ------------------------------------------------------------------------------------
class LazyLinear(LazyModuleMixin, Linear):
    """A Linear whose in_features is the first input's last dim."""

    cls_to_become = Linear

    def __init__(self, out_features: int, bias: bool = True, device=None, dtype=None):
        super().__init__(0, 0, False)  # no bias: it would be replaced at once
        self.weight = UninitializedParameter(device=device, dtype=dtype)
        self.out_features = out_features
        if bias:
            self.bias = UninitializedParameter(device=device, dtype=dtype)

    def reset_parameters(self) -> None:
        if not self.has_uninitialized_params() and self.in_features != 0:
            super().reset_parameters()

    def initialize_parameters(self, input) -> None:
        if self.has_uninitialized_params():
            with no_grad():
                self.in_features = input.shape[-1]
                self.weight.materialize((self.out_features, self.in_features))
                if self.bias is not None:
                    self.bias.materialize((self.out_features,))
                self.reset_parameters()
        if self.in_features == 0:  # loaded from a state_dict before the first call
            if input.shape[-1] != self.weight.shape[-1]:
                raise AssertionError(
                    f"The in_features inferred from input: {input.shape[-1]} is not equal to "
                    f"in_features from self.weight: {self.weight.shape[-1]}"
                )
            self.in_features = input.shape[-1]


# --- convolutions ------------------------------------------------------------------------------
class _LazyConvXdMixin(LazyModuleMixin):
    _spatial = 1
    _transposed = False

    def reset_parameters(self) -> None:
        if not self.has_uninitialized_params() and self.in_channels != 0:
            Conv2d.reset_parameters(self)

    def initialize_parameters(self, input, *args, **kwargs) -> None:
        if self.has_uninitialized_params():
            self.in_channels = self._get_in_channels(input)
            if self.in_channels % self.groups != 0:
                raise ValueError("in_channels must be divisible by groups")
            if self._transposed:
                shape = (self.in_channels, self.out_channels // self.groups, *self.kernel_size)
            else:
                shape = (self.out_channels, self.in_channels // self.groups, *self.kernel_size)
            self.weight.materialize(shape)
            if self.bias is not None:
                self.bias.materialize((self.out_channels,))
            self.reset_parameters()

    def _get_in_channels(self, input) -> int:
        unbatched = self._spatial + 1
        if input.ndim not in (unbatched, unbatched + 1):
            raise RuntimeError(
                f"Expected {unbatched}D (unbatched) or {unbatched + 1}D (batched) input to "
                f"{self.__class__.__name__}, but got input of size: "
                f"torch.Size({list(input.shape)})"
            )
        return input.shape[1] if input.ndim == unbatched + 1 else input.shape[0]


def _lazy_conv(base, spatial):
    class _LazyConv(_LazyConvXdMixin, base):
        cls_to_become = base
        _spatial = spatial

        def __init__(
            self,
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
            super().__init__(
                0, 0, kernel_size, stride, padding, dilation, groups, False, padding_mode,
                device=device, dtype=dtype,
            )  # fmt: skip
            self.weight = UninitializedParameter(device=device, dtype=dtype)
            self.out_channels = out_channels
            if bias:
                self.bias = UninitializedParameter(device=device, dtype=dtype)

    return _LazyConv


def _lazy_conv_transpose(base, spatial):
    class _LazyConvTranspose(_LazyConvXdMixin, base):
        cls_to_become = base
        _spatial = spatial
        _transposed = True

        def __init__(
            self,
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
            super().__init__(
                0, 0, kernel_size, stride, padding, output_padding, groups, False, dilation,
                padding_mode, device=device, dtype=dtype,
            )  # fmt: skip
            self.weight = UninitializedParameter(device=device, dtype=dtype)
            self.out_channels = out_channels
            if bias:
                self.bias = UninitializedParameter(device=device, dtype=dtype)

    return _LazyConvTranspose


class LazyConv1d(_lazy_conv(Conv1d, 1)):
    """A Conv1d whose in_channels is the first input's channel dim."""


class LazyConv2d(_lazy_conv(Conv2d, 2)):
    """A Conv2d whose in_channels is the first input's channel dim."""


class LazyConv3d(_lazy_conv(Conv3d, 3)):
    """A Conv3d whose in_channels is the first input's channel dim."""


class LazyConvTranspose1d(_lazy_conv_transpose(ConvTranspose1d, 1)):
    """A ConvTranspose1d whose in_channels is the first input's channel dim."""


class LazyConvTranspose2d(_lazy_conv_transpose(ConvTranspose2d, 2)):
    """A ConvTranspose2d whose in_channels is the first input's channel dim."""


class LazyConvTranspose3d(_lazy_conv_transpose(ConvTranspose3d, 3)):
    """A ConvTranspose3d whose in_channels is the first input's channel dim."""


# --- normalisation -----------------------------------------------------------------------------
class _LazyNormBase(LazyModuleMixin):
    def __init__(
        self,
        eps=1e-5,
        momentum=0.1,
        affine=True,
        track_running_stats=True,
        device=None,
        dtype=None,
        *,
        bias=True,
    ):
        # affine and track_running_stats off: nothing made that would be replaced at once
        super().__init__(0, eps, momentum, False, False, device, dtype, bias=False)
        self.affine, self.track_running_stats = affine, track_running_stats
        if affine:
            self.weight = UninitializedParameter(device=device, dtype=dtype)
            if bias:
                self.bias = UninitializedParameter(device=device, dtype=dtype)
        if track_running_stats:
            self.running_mean = UninitializedBuffer(device=device, dtype=dtype)
            self.running_var = UninitializedBuffer(device=device, dtype=dtype)
            with context(category="buffer"):
                self.num_batches_tracked = tensor(0, dtype=dtypes.int64, device=device)

    def reset_parameters(self) -> None:
        if not self.has_uninitialized_params() and self.num_features != 0:
            super().reset_parameters()

    def initialize_parameters(self, input) -> None:
        if self.has_uninitialized_params():
            self.num_features = input.shape[1]
            if self.affine:
                self.weight.materialize((self.num_features,))
                if self.bias is not None:
                    self.bias.materialize((self.num_features,))
            if self.track_running_stats:
                self.running_mean.materialize((self.num_features,))
                self.running_var.materialize((self.num_features,))
            self.reset_parameters()


def _lazy_norm(base):
    class _LazyNorm(_LazyNormBase, base):
        cls_to_become = base

    return _LazyNorm


class LazyBatchNorm1d(_lazy_norm(BatchNorm1d)):
    """A BatchNorm1d whose num_features is the first input's dim 1."""


class LazyBatchNorm2d(_lazy_norm(BatchNorm2d)):
    """A BatchNorm2d whose num_features is the first input's dim 1."""


class LazyBatchNorm3d(_lazy_norm(BatchNorm3d)):
    """A BatchNorm3d whose num_features is the first input's dim 1."""


class LazyInstanceNorm1d(_lazy_norm(InstanceNorm1d)):
    """An InstanceNorm1d whose num_features is the first input's dim 1."""


class LazyInstanceNorm2d(_lazy_norm(InstanceNorm2d)):
    """An InstanceNorm2d whose num_features is the first input's dim 1."""


class LazyInstanceNorm3d(_lazy_norm(InstanceNorm3d)):
    """An InstanceNorm3d whose num_features is the first input's dim 1."""
