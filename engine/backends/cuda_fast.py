"""Vectorised CuPy kernels for the cuda backend's common float32 elementwise ops.

CuPy's ufuncs run one element per thread through generic indexing. On an H100 a float32 `exp`
over 64 MiB took 86 us where torch's took 50 us, as long as a device-to-device copy (bench_cuda;
docs/gpu-fidelity.md), and the engine's sigmoid, four ufunc passes, 341 us. When every operand
is float32, C-contiguous, 16-byte aligned and of one size, the kernels here read and write
four elements at a time (float4), as torch's vectorised loops do, and fuse the few-pass ops
into one pass (a float4 sigmoid: 54 us on the same machine).

`unary(name, x, out)` and `binary(name, a, b, out)` return False when they do not apply
(another dtype, a view with strides or an offset, broadcasting, an integer scalar), and the
caller runs CuPy's ufunc as before. The formulas compute in float32 as torch's float kernels do.
"""

from __future__ import annotations

import numpy as np

# name -> float expression of `a` (and `b`): CUDA's accurate single-precision functions.
UNARY = {
    "exp": "expf(a)",
    "negative": "-a",
    "sigmoid": "1.0f / (1.0f + expf(-a))",
    # NaN stays NaN, as torch's clamp_min(0) keeps it
    "relu": "(a > 0.0f || a != a) ? a : 0.0f",
    "tanh": "tanhf(a)",
    "log": "logf(a)",
    "sqrt": "sqrtf(a)",
    "reciprocal": "1.0f / a",
    "absolute": "fabsf(a)",
    "sin": "sinf(a)",
    "cos": "cosf(a)",
    "square": "a * a",
}
BINARY = {
    "add": "a + b",
    "subtract": "a - b",
    "multiply": "a * b",
    "divide": "a / b",
    "true_divide": "a / b",
}

_THREADS = 256
_MAX_BLOCKS = 4096
_F32 = np.dtype(np.float32)
_kernels: dict = {}


def _source(name: str, expr: str, operands: str) -> str:
    """A grid-stride kernel: float4 over the first n - n % 4 elements, one by one after."""
    if operands == "u":
        params, load4, load1 = "const float* __restrict__ x", ("a", "x4[i]"), "float a = x[i];"
        lanes = ["{{ float a = va.{c}; r.{c} = {e}; }}"]
        head = "const float4* x4 = reinterpret_cast<const float4*>(x);"
    elif operands == "tt":
        params = "const float* __restrict__ x, const float* __restrict__ z"
        load4, load1 = ("a", "x4[i]", "b", "z4[i]"), "float a = x[i]; float b = z[i];"
        lanes = ["{{ float a = va.{c}; float b = vb.{c}; r.{c} = {e}; }}"]
        head = (
            "const float4* x4 = reinterpret_cast<const float4*>(x);"
            " const float4* z4 = reinterpret_cast<const float4*>(z);"
        )
    else:  # "ts": tensor op scalar, "st": scalar op tensor
        params = "const float* __restrict__ x, const float s"
        load4 = ("a", "x4[i]")
        if operands == "ts":
            load1 = "float a = x[i]; float b = s;"
            lanes = ["{{ float a = va.{c}; float b = s; r.{c} = {e}; }}"]
        else:
            load1 = "float b = x[i]; float a = s;"
            lanes = ["{{ float b = va.{c}; float a = s; r.{c} = {e}; }}"]
        head = "const float4* x4 = reinterpret_cast<const float4*>(x);"
    loads = f"float4 va = {load4[1]};" + (f" float4 vb = {load4[3]};" if len(load4) > 2 else "")
    body = " ".join(lanes[0].format(c=c, e=expr) for c in "xyzw")
    return f"""
extern "C" __global__ void {name}({params}, float* __restrict__ y, const long long n) {{
    {head}
    float4* y4 = reinterpret_cast<float4*>(y);
    const long long n4 = n >> 2;
    const long long step = (long long)gridDim.x * blockDim.x;
    const long long first = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    for (long long i = first; i < n4; i += step) {{
        {loads} float4 r; {body} y4[i] = r;
    }}
    for (long long i = (n4 << 2) + first; i < n; i += step) {{
        {load1} y[i] = {expr};
    }}
}}
"""


def _kernel(name: str, expr: str, operands: str):
    key = (name, operands)
    k = _kernels.get(key)
    if k is None:
        import cupy

        fn = f"memprof_{name}_{operands}"
        k = _kernels[key] = cupy.RawKernel(_source(fn, expr, operands), fn)
    return k


def _fits(arr, n: int) -> bool:
    """A CuPy array of n float32 elements, C-contiguous and 16-byte aligned (float4 loads)."""
    return (
        type(arr).__module__.startswith("cupy")
        and arr.dtype == _F32
        and arr.size == n
        and arr.flags.c_contiguous
        and arr.data.ptr % 16 == 0
    )


def _launch(kernel, n: int, args) -> None:
    blocks = min(_MAX_BLOCKS, max(1, -(-(n >> 2) // _THREADS)))
    kernel((blocks,), (_THREADS,), (*args, np.int64(n)))


def unary(name: str, x, out) -> bool:
    """out[...] = name(x) for float32 contiguous x and out of one size; False otherwise."""
    expr = UNARY.get(name)
    n = out.size
    if expr is None or n == 0 or not (_fits(out, n) and _fits(x, n)):
        return False
    _launch(_kernel(name, expr, "u"), n, (x, out))
    return True


_SCALARS = (float, int)  # a Python number meets a float32 array in float32 (bool: CuPy's rules)


def binary(name: str, a, b, out) -> bool:
    """out[...] = a (op) b: both float32 contiguous arrays of out's size, or one of them a
    Python int or float (computed in float32, as torch and CuPy do); False otherwise."""
    expr = BINARY.get(name)
    n = out.size
    if expr is None or n == 0 or not _fits(out, n):
        return False
    if type(b) in _SCALARS:
        if not _fits(a, n):
            return False
        _launch(_kernel(name, expr, "ts"), n, (a, np.float32(b), out))
        return True
    if type(a) in _SCALARS:
        if not _fits(b, n):
            return False
        _launch(_kernel(name, expr, "st"), n, (b, np.float32(a), out))
        return True
    if not (_fits(a, n) and _fits(b, n)):
        return False
    _launch(_kernel(name, expr, "tt"), n, (a, b, out))
    return True


# torch's GELU kernels (ATen/native/cuda/ActivationGeluKernel.cu), each statement as torch writes
# it, so that the compiler makes the same operations of them (and the same fused multiply-adds:
# NVRTC contracts as nvcc does by default); erf, exp and tanh of a float are CUDA's erff, expf and
# tanhf, as in torch's. float32 and float64 (torch computes half types in float: not these).
# The same bits as torch.cuda's (an H200, 600K inputs) but where torch's float32 result is
# subnormal: CuPy builds every kernel with -ftz=true (cupy/cuda/compiler.py appends it after the
# caller's options), so there the engine gives 0 (the gradient below x = -13, 114 of 600K).
_GELU_CONSTANTS = """
const T alpha = (T)0.70710678118654752440;
const T beta_erf = (T)(1.12837916709551257390 * 0.70710678118654752440 * 0.5);
const T beta_tanh = (T)(1.41421356237309504880 * 1.12837916709551257390 * 0.5);
const T kappa = (T)0.044715;
"""
_GELU = {
    ("none", "forward"): "y = x * T(0.5) * (T(1) + erf(x * alpha));",
    ("none", "backward"): """
const T cdf = T(0.5) * (T(1) + erf(x * alpha));
const T pdf = exp(T(-0.5) * x * x) * beta_erf;
y = dy * (cdf + x * pdf);""",
    ("tanh", "forward"): """
T x_cube = x * x * x;
T inner = beta_tanh * (x + kappa * x_cube);
y = T(0.5) * x * (T(1) + tanh(inner));""",
    ("tanh", "backward"): """
T x_sq = x * x;
T x_cube = x_sq * x;
T inner = beta_tanh * (x + kappa * x_cube);
T tanh_inner = tanh(inner);
T left = T(0.5) * x;
T right = T(1) + tanh_inner;
T left_derivative = T(0.5) * right;
T tanh_derivative = T(1) - tanh_inner * tanh_inner;
T inner_derivative = beta_tanh * (T(1) + T(3) * kappa * x_sq);
T right_derivative = left * tanh_derivative * inner_derivative;
y = dy * (left_derivative + right_derivative);""",
}
_FLOAT_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


def _elementwise_kernel(name: str, params: str, body: str):
    """A CuPy ElementwiseKernel `memprof_<name>` (inputs `params`, output `T y`), made once."""
    k = _kernels.get(name)
    if k is None:
        import cupy

        k = _kernels[name] = cupy.ElementwiseKernel(params, "T y", body, f"memprof_{name}")
    return k


def _gelu_kernel(approximate: str, direction: str):
    return _elementwise_kernel(
        f"gelu_{approximate}_{direction}",
        "T x" if direction == "forward" else "T dy, T x",
        _GELU_CONSTANTS + _GELU[(approximate, direction)],
    )


def gelu(x, out, approximate: str) -> bool:
    """out[...] = gelu(x) by torch's cuda kernel (float32, float64); False for other dtypes."""
    if x.dtype not in _FLOAT_DTYPES or out.dtype != x.dtype:
        return False
    _gelu_kernel(approximate, "forward")(x, out)
    return True


def gelu_backward(g, x, out, approximate: str) -> bool:
    """out[...] = the input's gradient of gelu by torch's cuda kernel; False as gelu()."""
    if x.dtype not in _FLOAT_DTYPES or not (g.dtype == out.dtype == x.dtype):
        return False
    _gelu_kernel(approximate, "backward")(g, x, out)
    return True


# torch's float floor division (c10/util/generic_math.h, div_floor_floating: Python's //, exact
# where floor(a / b) rounds wrongly; inf // b is NaN, as fmod(inf, b) is), which CuPy's
# floor_divide (floor of the quotient) is not.
_FLOOR_DIVIDE = """
if (b == T(0)) {
    y = a / b;
} else {
    T mod = fmod(a, b);
    T div = (a - mod) / b;
    if ((mod != T(0)) && ((b < T(0)) != (mod < T(0)))) {
        div -= T(1);
    }
    if (div != T(0)) {
        T floordiv = floor(div);
        if (div - floordiv > T(0.5)) {
            floordiv += T(1);
        }
        y = floordiv;
    } else {
        y = copysign(T(0), a / b);
    }
}"""


def floor_divide(a, b, out) -> bool:
    """out[...] = a // b by torch's float kernel: a and b CuPy arrays of out's float dtype, or
    one of them a Python number (taken in that dtype); False otherwise."""
    dt = out.dtype
    if dt not in _FLOAT_DTYPES:
        return False
    ops = []
    for v in (a, b):
        if type(v) in _SCALARS:
            v = dt.type(v)
        elif not (type(v).__module__.startswith("cupy") and v.dtype == dt):
            return False
        ops.append(v)
    _elementwise_kernel("floor_divide", "T a, T b", _FLOOR_DIVIDE)(*ops, out)
    return True
