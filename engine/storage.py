"""Storage: one allocation on one device, charged to that device's TrackedAllocator.

A storage is released when its last reference dies (CPython refcounting), so the allocator's
timeline matches what PyTorch shows for the same program. The version counter lives here:
a storage's base tensor, all its views and detached aliases share it.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from engine.allocator.tracked import get_allocator
from engine.backends import cupy_module
from engine.backends.meta import MetaArray
from engine.errors import OutOfMemoryError

_fake_addresses = itertools.count(1)
_allocators: dict = {}


def allocator_for(dev):
    alloc = _allocators.get(dev)
    if alloc is None:
        alloc = _allocators[dev] = get_allocator(dev)
    return alloc


class Storage:
    __slots__ = ("data", "nbytes", "device", "block", "id", "epoch", "version", "allocator",
                 "fake_address", "__weakref__")

    def __del__(self):
        alloc = self.allocator
        if alloc is not None:
            self.allocator = None
            try:
                alloc.release(self.block, self.id, self.epoch)
            except Exception:  # interpreter shutdown: modules may be gone
                pass

    def data_ptr(self) -> int:
        if self.device.type == "cpu":
            return self.data.__array_interface__["data"][0]
        if self.device.type == "cuda":
            return self.data.data.ptr
        return self.fake_address


def new_storage(shape: tuple, np_dtype, dev) -> Storage:
    """Allocate a C-contiguous storage of `shape`; storage.data is the backend array."""
    nbytes = math.prod(shape) * np_dtype.itemsize
    alloc = allocator_for(dev)
    block, sid, epoch = alloc.allocate(nbytes)
    try:
        kind = dev.type
        if kind == "cpu":
            data = np.empty(shape, np_dtype)
        elif kind == "meta":
            data = MetaArray(shape, np_dtype)
        else:
            from engine.allocator.cuda_hook import storage_allocation

            cp = cupy_module()
            with storage_allocation(), cp.cuda.Device(dev.index or 0):
                data = cp.empty(shape, np_dtype)
    except MemoryError:
        alloc.release(block, sid, epoch)
        raise OutOfMemoryError(
            f"{dev} out of memory: the system refused {nbytes} bytes", device=str(dev), requested=nbytes
        ) from None
    except BaseException:
        alloc.release(block, sid, epoch)
        raise
    s = Storage()
    s.data = data
    s.nbytes = nbytes
    s.device = dev
    s.block = block
    s.id = sid
    s.epoch = epoch
    s.version = 0
    s.allocator = alloc
    s.fake_address = (next(_fake_addresses) << 32) if dev.type == "meta" else 0
    return s


def wrap_storage(array, dev) -> Storage:
    """Adopt an existing array (from_numpy / as_tensor): its bytes are charged as a new storage."""
    alloc = allocator_for(dev)
    block, sid, epoch = alloc.allocate(array.nbytes)
    s = Storage()
    s.data = array
    s.nbytes = array.nbytes
    s.device = dev
    s.block = block
    s.id = sid
    s.epoch = epoch
    s.version = 0
    s.allocator = alloc
    s.fake_address = 0
    return s
