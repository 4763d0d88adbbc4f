"""Storage: one allocation on one device, charged to that device's TrackedAllocator.

A storage is released when its last reference dies (CPython refcounting), so the allocator's
timeline matches what PyTorch shows for the same program. The version counter lives here:
a storage's base tensor, all its views and detached aliases share it.
"""

from __future__ import annotations

import numpy as np

from engine import host_cache
from engine.allocator import tracked
from engine.allocator.tracked import get_allocator
from engine.backends import cupy_module
from engine.errors import OutOfMemoryError

_CACHE_MIN = host_cache.MIN_BYTES
_give = host_cache.give
_ndarray = np.ndarray


def allocator_for(dev):
    """The TrackedAllocator of an engine.device (cached on the device object)."""
    alloc = dev._allocator
    if alloc is None:
        alloc = dev._allocator = get_allocator(dev)
    return alloc


class Storage:
    # handle: what the allocator's accounting model returned for this storage (see
    # AccountingModel.charge), given back when the storage dies; allocator is None when the
    # storage is not charged (made with tracking off) or already released.
    __slots__ = (
        "data",
        "nbytes",
        "device",
        "handle",
        "id",
        "epoch",
        "version",
        "allocator",
        "__weakref__",
    )

    fake_address = 0  # a meta storage's stand-in for data_ptr() (_MetaStorage has its own)

    def __del__(self):
        alloc = self.allocator
        if alloc is not None:
            self.allocator = None
            try:
                if alloc.observers or self.epoch != alloc.epoch:
                    alloc.release(self.handle, self.id, self.epoch)
                else:  # TrackedAllocator.release with nobody to tell, inline
                    alloc.model.uncharge(self.handle)
            except Exception:  # interpreter shutdown: modules may be gone
                pass
        # a large cpu array's memory is reused (engine/host_cache.py)
        if self.nbytes >= _CACHE_MIN and type(self.data) is _ndarray:
            _give(self)

    def data_ptr(self) -> int:
        if self.device.type == "cpu":
            return self.data.__array_interface__["data"][0]
        if self.device.type == "cuda":
            return self.data.data.ptr
        return self.fake_address


class _MetaStorage(Storage):
    """A meta storage: no memory, but a distinct fake address for data_ptr()."""

    __slots__ = ()

    @property
    def fake_address(self):  # distinct per storage, as its id is; 4 GiB apart
        return self.id << 32


class _AliasStorage(Storage):
    """The memory of `owner` under a version counter of its own: what `Tensor.data` gives, as
    PyTorch's `.data` shares the storage but not the version counter. Charges nothing and
    frees nothing; it keeps `owner` alive."""

    __slots__ = ("owner",)

    def __del__(self):
        # Nothing to release: drop the reference to the owner's memory before `owner` goes (its
        # slot is cleared first), so the owner, when this alias held its last reference, finds
        # its array unshared and gives it to engine/host_cache.py for reuse.
        self.data = None

    @property
    def fake_address(self):
        return self.owner.fake_address


def alias_storage(s: Storage) -> Storage:
    """A new version counter over the same memory (see _AliasStorage)."""
    owner = s.owner if isinstance(s, _AliasStorage) else s
    a = _new(_AliasStorage)
    a.data, a.nbytes, a.device, a.id, a.epoch = s.data, s.nbytes, s.device, s.id, s.epoch
    a.handle = a.allocator = None
    a.version = 0
    a.owner = owner
    return a


_new = object.__new__


def cuda_array(shape, np_dtype, dev, alloc, handle, sid, epoch, nbytes):
    """The CuPy array of a new cuda storage (kernels.empty charged `alloc` already: on failure
    the charge is given back; a meta storage's array is made in kernels.empty itself)."""
    try:
        from engine.allocator.cuda_hook import ensure_hook, storage_allocation

        cp = cupy_module()
        if alloc is not None:
            ensure_hook(alloc)  # CuPy's own temporaries reach observers as on_external
        with storage_allocation(), cp.cuda.Device(dev.index or 0):
            return cp.empty(shape, np_dtype)
    except BaseException as exc:
        if alloc is not None:
            alloc.release(handle, sid, epoch)
        if type(exc).__name__ == "OutOfMemoryError":
            raise OutOfMemoryError(
                f"{dev} out of memory: CuPy refused {nbytes} bytes ({exc})",
                device=str(dev),
                requested=nbytes,
            ) from None
        raise


def wrap_storage(array, dev) -> Storage:
    """Adopt an existing array (from_numpy / as_tensor): its bytes are charged as a new storage."""
    if tracked.TRACKING:
        alloc = allocator_for(dev)
        handle, sid, epoch = alloc.allocate(array.nbytes)
    else:  # nothing charged; an id of its own all the same
        alloc = handle = None
        sid, epoch = next(tracked._storage_ids), 0
    s = _new(Storage)
    s.data = array
    s.nbytes = array.nbytes
    s.device = dev
    s.handle = handle
    s.id = sid
    s.epoch = epoch
    s.version = 0
    s.allocator = alloc
    return s
