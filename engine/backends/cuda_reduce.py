"""The scratch PyTorch's CUDA reductions allocate: Reduce.cuh's global-reduction buffers.

When a reduction (sum, mean, amax, ...) has many inputs per output and few outputs, torch's
CUDA kernel splits each output's inputs across thread blocks and combines the partial results
through global memory: `gpu_reduce_kernel` allocates a staging buffer and a semaphore array
from the caching allocator for the duration of the kernel. They count in
`torch.cuda.memory_allocated()` and can set a backward pass's peak: a Linear's bias gradient,
`grad.sum(0)` over a (16384, 1024) float32 gradient, stages 128 MiB (measured on an H100).

`global_scratch` reproduces the decision and the sizes: the TensorIterator's dimension order
for a reduction (reduced dimensions first, then by stride) and coalescing, then
`setReduceConfig` (block shape, vectorisation along the output, the number of blocks per
output from the device's multiprocessor count and threads per multiprocessor) and
`ReduceConfig::global_memory_size` / `semaphore_size`. Checked against torch 2.11 on an H100
(tests/engine/test_cuda_reduce.py, 200 recorded shapes, float32 and bfloat16).

Not modelled: a reduction over more than 2**31 bytes, which torch splits into 32-bit-indexable
pieces (each with its own configuration).
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.allocator import tracked
from engine.storage import allocator_for

WARP = 32
MAX_THREADS = 512  # mnt_wrapper<T>::MAX_NUM_THREADS (256 for complex128, which is not modelled)
INPUT_VEC = 4
MIN_VALUES_PER_THREAD = 16
MAX_VALUES_PER_THREAD = 256


@dataclass(frozen=True)
class GPU:
    """What the reduction configuration reads of the device."""

    multiprocessors: int = 132  # H100 SXM
    max_threads_per_multiprocessor: int = 2048


def _div_up(a: int, b: int) -> int:
    return -(-a // b)


def _last_pow2(n: int) -> int:
    return 1 << (max(1, n).bit_length() - 1)


def _order_and_coalesce(shape, in_strides, out_strides):
    """TensorIterator's dims for a reduction, fastest first: (shape, input strides, output
    strides) after reorder_dimensions and coalesce_dimensions, each operand's strides in its
    own unit (the input's in bytes)."""
    from engine.kernels import stride_order

    ndim = len(shape)
    ops = [list(out_strides), list(in_strides)]  # the output first, as torch's operands
    perm = stride_order(shape, ops, reduction=True)
    shape = [shape[p] for p in perm]
    ops = [[s[p] for p in perm] for s in ops]
    if ndim <= 1:
        return shape, ops[1], ops[0]
    prev = 0
    for dim in range(1, ndim):
        s0, s1 = shape[prev], shape[dim]
        if s0 == 1 or s1 == 1 or all(st[prev] * s0 == st[dim] for st in ops):
            if s0 == 1:
                for st in ops:
                    st[prev] = st[dim]
            shape[prev] *= s1
        else:
            prev += 1
            if prev != dim:
                for st in ops:
                    st[prev] = st[dim]
                shape[prev] = shape[dim]
    n = prev + 1
    return shape[:n], ops[1][:n], ops[0][:n]


def _output_vec_size(shape, in_strides, itemsize, num_reduce, data_ptr) -> int:
    vec = 4

    def update(n):
        nonlocal vec
        while n % vec:
            vec //= 2

    update(data_ptr // itemsize)
    update(shape[num_reduce])
    for j, s in enumerate(in_strides):
        if j != num_reduce:
            update(s // itemsize)
    return vec


def global_scratch(
    shape,
    in_strides,
    reduce_dims,
    itemsize: int,
    acc_itemsize: int,
    gpu: GPU = GPU(),
    data_ptr: int = 0,
) -> tuple[int, int]:
    """(staging buffer bytes, semaphore bytes) of one CUDA reduction; (0, 0) when the kernel
    reduces without global memory. `in_strides` in elements; `reduce_dims` the reduced dims;
    `acc_itemsize` the accumulation type's size (float32 for float16/bfloat16 sums)."""
    numel = 1
    for s in shape:
        numel *= s
    if numel == 0:
        return 0, 0
    reduce_dims = set(reduce_dims)
    # a contiguous keepdim output, in elements (only its order and its 0s are read)
    out_strides, step = [], 1
    for d in range(len(shape) - 1, -1, -1):
        out_strides.append(0 if d in reduce_dims else step)
        if d not in reduce_dims:
            step *= shape[d]
    out_strides.reverse()
    in_bytes = [s * itemsize for s in in_strides]
    shape_i, ins, outs = _order_and_coalesce(list(shape), in_bytes, out_strides)
    ndim = len(shape_i)
    num_reduce = sum(1 for s in outs if s == 0)
    num_outputs = 1
    for d in range(ndim):
        if outs[d] != 0:
            num_outputs *= shape_i[d]
    inputs_per_output = numel // num_outputs

    if ndim > 0:
        fastest = num_reduce == ndim or ins[0] < ins[num_reduce]
        if fastest:
            dim0, dim1, fastest_stride = inputs_per_output, num_outputs, ins[0]
        else:
            dim0, dim1, fastest_stride = num_outputs, inputs_per_output, ins[num_reduce]
    else:
        fastest, dim0, dim1, fastest_stride = True, 1, 1, itemsize
    output_vec = 1
    if fastest_stride == itemsize:
        if fastest and dim0 > 128 and num_reduce == 1:
            dim0 //= INPUT_VEC  # vectorise along the input
        elif not fastest:
            output_vec = _output_vec_size(shape_i, ins, itemsize, num_reduce, data_ptr)
            dim0 //= output_vec

    # set_block_dimension
    max_threads = MAX_THREADS // output_vec
    dim0_pow2 = _last_pow2(dim0) if dim0 < max_threads else max_threads
    dim1_pow2 = _last_pow2(dim1) if dim1 < max_threads else max_threads
    width = min(dim0_pow2, WARP)
    height = min(dim1_pow2, max_threads // width)
    width = min(dim0_pow2, max_threads // height)
    threads = width * height

    step_input = step_output = 1
    block_x_reduce = False
    if ndim == 0 or fastest:
        step_input *= width
        block_x_reduce = True
    else:
        step_output *= width
    block_y_reduce = False
    values = _div_up(inputs_per_output, step_input)
    if values >= height * 16 or values >= MAX_VALUES_PER_THREAD:
        step_input *= height
        block_y_reduce = True
    else:
        step_output *= height

    blocks_per_sm = gpu.max_threads_per_multiprocessor // threads
    target_grid = gpu.multiprocessors * blocks_per_sm
    grid_x = _div_up(num_outputs // output_vec, step_output)
    values = _div_up(inputs_per_output, step_input)
    if not (block_y_reduce and values >= MAX_VALUES_PER_THREAD and grid_x <= target_grid):
        return 0, 0
    ctas = max(
        min(_div_up(target_grid, grid_x), _div_up(values, MIN_VALUES_PER_THREAD)),
        _div_up(values, MAX_VALUES_PER_THREAD),
    )
    if ctas <= 1:
        return 0, 0
    size = acc_itemsize * num_outputs * ctas
    if not block_x_reduce:
        size *= width * output_vec
    return size, 4 * grid_x


_gpus: dict = {}
_sizes: dict = {}  # (shape, strides, dims, itemsize, acc itemsize, GPU, alignment) -> sizes


def device_gpu(index: int) -> GPU:
    """The multiprocessor figures of CUDA device `index`, read once through CuPy."""
    gpu = _gpus.get(index)
    if gpu is None:
        import cupy

        attrs = cupy.cuda.Device(index).attributes
        gpu = _gpus[index] = GPU(attrs["MultiProcessorCount"], attrs["MaxThreadsPerMultiProcessor"])
    return gpu


# The GPU that meta stands for under the caching model (PyTorch's CUDA caching allocator): the
# reduction scratch there is sized for this device. An H100 SXM, where the model was checked.
META_GPU = GPU()


def _gpu_of(dev):
    """(allocator, GPU) while tracking where `dev` runs torch's CUDA kernels
    (runs_cuda_kernels): the device's own figures on cuda, META_GPU on meta; else None."""
    if not runs_cuda_kernels(dev):
        return None
    if not tracked.TRACKING:
        return None
    gpu = device_gpu(dev.index or 0) if dev.type == "cuda" else META_GPU
    return allocator_for(dev), gpu


def runs_cuda_kernels(dev) -> bool:
    """Whether ops on `dev` account as torch's CUDA kernels do: cuda, or meta under the caching
    model (the model of PyTorch's CUDA caching allocator)."""
    if dev.type == "cuda":
        return True
    if dev.type != "meta":
        return False
    return allocator_for(dev).model_name == "caching"


def transient(dev, nbytes: int) -> None:
    """Charge, then give back, `nbytes` that torch's CUDA kernel for an op allocates and frees
    inside the op (softmax backward's grad * output), where `dev` runs torch's CUDA kernels."""
    found = _gpu_of(dev)
    if found is not None and nbytes:
        alloc = found[0]
        alloc.release(*alloc.allocate(nbytes))


def charge(dev, data, dims, acc_itemsize: int | None = None) -> None:
    """Charge, then give back, the staging buffer and semaphores torch's CUDA kernel allocates
    to reduce `data` (the array of a tensor on device `dev`) over `dims`, as torch does: after
    the result, the semaphores freed first. On cuda with the device's own figures; on meta
    under the caching model with META_GPU's; a no-op on cpu, untracked, or when the kernel
    needs no global memory."""
    found = _gpu_of(dev)
    if found is None:
        return
    alloc, gpu = found
    ptr = data.data.ptr if dev.type == "cuda" else 0  # the caching allocator's blocks: aligned
    itemsize = data.itemsize
    acc = acc_itemsize or max(itemsize, 4)  # float16/bfloat16 accumulate in float32
    key = (data.shape, data.strides, tuple(dims), itemsize, acc, gpu, ptr % 64)
    sizes = _sizes.get(key)
    if sizes is None:  # a model's layers repeat their shapes: decided once per shape
        if len(_sizes) > 4096:
            _sizes.clear()
        strides = [s // itemsize for s in data.strides]
        sizes = _sizes[key] = global_scratch(data.shape, strides, dims, itemsize, acc, gpu, ptr)
    buf, sem = sizes
    if not buf:
        return
    held = alloc.allocate(buf)
    try:
        alloc.release(*alloc.allocate(sem))
    finally:
        alloc.release(*held)
