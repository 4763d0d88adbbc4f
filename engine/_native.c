/* engine._native: optional compiled loops for kernels whose numpy form is many passes.
 *
 * The engine runs with numpy alone (engine/kernels.py keeps the numpy form of each loop here and
 * uses it when this module is not built). A loop here computes bit for bit what its numpy form
 * computes: the same IEEE double operations in the same order, no fused multiply-adds
 * (-ffp-contract=off) and no reassociation (no -ffast-math), so a result never depends on
 * whether the module was built. Each loop releases the GIL, so the engine's thread pool runs
 * them in parallel. Buffers are checked: C-contiguous, the expected item format, equal lengths.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

/* kernels._ERF_P and kernels._ERF_Q: erf(x) = x P(x^2) / Q(x^2) for |x| <= 4 (x clamped to
 * +-4 beyond), evaluated in double and rounded once to float. kernels.py passes the
 * coefficients in (set_erf_coefficients) so that the two forms cannot drift apart. */
#define ERF_P_N 7
#define ERF_Q_N 6
static double erf_p[ERF_P_N];
static double erf_q[ERF_Q_N];
static int erf_ready = 0;

static PyObject *set_erf_coefficients(PyObject *self, PyObject *args) {
    PyObject *p, *q;
    if (!PyArg_ParseTuple(args, "OO", &p, &q)) return NULL;
    PyObject *ps = PySequence_Fast(p, "P must be a sequence");
    if (!ps) return NULL;
    PyObject *qs = PySequence_Fast(q, "Q must be a sequence");
    if (!qs) { Py_DECREF(ps); return NULL; }
    if (PySequence_Fast_GET_SIZE(ps) != ERF_P_N || PySequence_Fast_GET_SIZE(qs) != ERF_Q_N) {
        PyErr_Format(PyExc_ValueError, "expected %d and %d coefficients", ERF_P_N, ERF_Q_N);
        Py_DECREF(ps); Py_DECREF(qs);
        return NULL;
    }
    for (int i = 0; i < ERF_P_N; i++) {
        erf_p[i] = PyFloat_AsDouble(PySequence_Fast_GET_ITEM(ps, i));
    }
    for (int i = 0; i < ERF_Q_N; i++) {
        erf_q[i] = PyFloat_AsDouble(PySequence_Fast_GET_ITEM(qs, i));
    }
    Py_DECREF(ps); Py_DECREF(qs);
    if (PyErr_Occurred()) return NULL;
    erf_ready = 1;
    Py_RETURN_NONE;
}

/* kernels._erf_rational_block, element by element:
 *   z = clip(x, -4, 4); u = z * z
 *   p = u * P[6]; p += P[5]; p *= u; ... p += P[0]  (kernels._horner)
 *   p *= z
 *   q = u * Q[5]; q += Q[4]; ... q += Q[0]
 *   out = (float)(p / q)
 * np.clip keeps a NaN (neither comparison holds for it), as below. */
static void erf_f32_loop(const float *x, float *out, Py_ssize_t n) {
    const double p6 = erf_p[6], p5 = erf_p[5], p4 = erf_p[4], p3 = erf_p[3], p2 = erf_p[2],
                 p1 = erf_p[1], p0 = erf_p[0];
    const double q5 = erf_q[5], q4 = erf_q[4], q3 = erf_q[3], q2 = erf_q[2], q1 = erf_q[1],
                 q0 = erf_q[0];
    for (Py_ssize_t i = 0; i < n; i++) {
        double z = (double)x[i];
        z = z < -4.0 ? -4.0 : z;
        z = z > 4.0 ? 4.0 : z;
        double u = z * z;
        double p = u * p6;
        p += p5; p *= u;
        p += p4; p *= u;
        p += p3; p *= u;
        p += p2; p *= u;
        p += p1; p *= u;
        p += p0;
        p *= z;
        double q = u * q5;
        q += q4; q *= u;
        q += q3; q *= u;
        q += q2; q *= u;
        q += q1; q *= u;
        q += q0;
        out[i] = (float)(p / q);
    }
}

/* Buffers of one element type: 'f' (float32) or 'd' (float64); indices 8-byte integers. */
static int get_buffer(PyObject *obj, Py_buffer *view, int writable) {
    int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    return PyObject_GetBuffer(obj, view, flags);
}

/* A loop's three buffers, all or none: a read, b read (or written: b_writable), c written. */
static int get_three(PyObject *a, PyObject *b, PyObject *c, Py_buffer *va, Py_buffer *vb,
                     Py_buffer *vc, int b_writable) {
    if (get_buffer(a, va, 0) < 0) return -1;
    if (get_buffer(b, vb, b_writable) < 0) { PyBuffer_Release(va); return -1; }
    if (get_buffer(c, vc, 1) < 0) {
        PyBuffer_Release(va); PyBuffer_Release(vb);
        return -1;
    }
    return 0;
}

static void release_three(Py_buffer *va, Py_buffer *vb, Py_buffer *vc) {
    PyBuffer_Release(va); PyBuffer_Release(vb); PyBuffer_Release(vc);
}

static char real_kind(Py_buffer *v) {
    if (v->format == NULL) return 0;
    if (strcmp(v->format, "f") == 0 && v->itemsize == 4) return 'f';
    if (strcmp(v->format, "d") == 0 && v->itemsize == 8) return 'd';
    return 0;
}

static int is_int64(Py_buffer *v) {
    return v->format != NULL && v->itemsize == 8 &&
           (strcmp(v->format, "q") == 0 || strcmp(v->format, "l") == 0);
}

static PyObject *erf_f32(PyObject *self, PyObject *args) {
    PyObject *src, *dst;
    if (!PyArg_ParseTuple(args, "OO", &src, &dst)) return NULL;
    if (!erf_ready) {
        PyErr_SetString(PyExc_RuntimeError, "set_erf_coefficients was not called");
        return NULL;
    }
    Py_buffer in, out;
    if (get_buffer(src, &in, 0) < 0) return NULL;
    if (get_buffer(dst, &out, 1) < 0) { PyBuffer_Release(&in); return NULL; }
    PyObject *error = NULL;
    const char *why = NULL;
    if (real_kind(&in) != 'f' || real_kind(&out) != 'f') {
        error = PyExc_TypeError;
        why = "x and out must be contiguous float32 buffers";
    } else if (in.len != out.len) {
        error = PyExc_ValueError;
        why = "x and out must have the same number of elements";
    }
    if (error) {
        PyErr_SetString(error, why);
        PyBuffer_Release(&in); PyBuffer_Release(&out);
        return NULL;
    }
    Py_ssize_t n = in.len / 4;
    Py_BEGIN_ALLOW_THREADS
    erf_f32_loop((const float *)in.buf, (float *)out.buf, n);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&in);
    PyBuffer_Release(&out);
    Py_RETURN_NONE;
}

/* --- max pooling ---------------------------------------------------------------------------- */

/* PyTorch's max_pool2d_with_indices cpu kernel (aten/src/ATen/native/cpu/MaxPoolKernel.cpp),
 * one window at a time: the scan starts at -inf with the window's first in-bounds position as
 * its index and goes row-major over the in-bounds positions; a value takes over when strictly
 * greater or NaN (so the first maximum wins, and the last NaN).
 *
 * Takeovers are bit masks, not branches (random data mispredicts them). One window's scan is a
 * chain of dependent compares, so windows that lie wholly inside the input are scanned
 * POOL_LANES at a time, side by side (independent chains the core overlaps: 3x faster for 2x2
 * windows); each window's own scan, and so its value and index, is the same as alone. */
#define POOL_LANES 8
#if defined(__GNUC__)
#define NOINLINE __attribute__((noinline)) /* vectorized alone; inlined, gcc leaves it scalar */
#else
#define NOINLINE
#endif

/* One step of a window's scan: v at offset `pos` takes over m (and its offset `best`, of type
 * B) when greater or NaN, by bit masks of U (the values' bits) and of B. */
#define MAX_POOL_TAKE(T, U, B, v, m, pos, best)                                                  \
    do {                                                                                       \
        T v_ = (v);                                                                            \
        U take_ = (U)0 - (U)((v_ > (m)) | (v_ != v_));                                         \
        U vb_, mb_;                                                                            \
        memcpy(&vb_, &v_, sizeof vb_);                                                         \
        memcpy(&mb_, &(m), sizeof mb_);                                                        \
        mb_ = (vb_ & take_) | (mb_ & ~take_);                                                  \
        memcpy(&(m), &mb_, sizeof mb_);                                                        \
        B tk_ = -(B)(take_ & 1);                                                               \
        (best) = ((pos) & tk_) | ((best) & ~tk_);                                              \
    } while (0)

#define MAX_POOL_LOOP(T, U, S)                                                                    \
    /* POOL_LANES windows side by side from `start` on, each wholly inside the plane; offsets  \
     * within a window held as S, the values' width (so that the compiler can vectorize the     \
     * lanes: 3x faster for float32's 2x2 windows than with 64-bit offsets) */                  \
    static NOINLINE void max_pool_lanes_##T(const T *xp, T *y, long long *idx,                   \
                                          Py_ssize_t start, Py_ssize_t w, Py_ssize_t kh,       \
                                          Py_ssize_t kw, Py_ssize_t sw, Py_ssize_t dh,         \
                                          Py_ssize_t dw) {                                     \
        T m[POOL_LANES];                                                                       \
        S best[POOL_LANES];                                                                    \
        for (int l = 0; l < POOL_LANES; l++) {                                                 \
            m[l] = -(T)INFINITY;                                                               \
            best[l] = 0;                                                                       \
        }                                                                                      \
        const T *base = xp + start;                                                            \
        for (Py_ssize_t a = 0; a < kh; a++) {                                                  \
            for (Py_ssize_t b = 0; b < kw; b++) {                                              \
                S off = (S)(a * dh * w + b * dw);                                              \
                const T *r = base + off;                                                       \
                for (int l = 0; l < POOL_LANES; l++)                                           \
                    MAX_POOL_TAKE(T, U, S, r[l * sw], m[l], off, best[l]);                    \
            }                                                                                  \
        }                                                                                      \
        for (int l = 0; l < POOL_LANES; l++) {                                                 \
            y[l] = m[l];                                                                       \
            idx[l] = (long long)(start + l * sw) + (long long)best[l];                         \
        }                                                                                      \
    }                                                                                          \
    static void max_pool2d_##T(const T *x, T *y, long long *idx, Py_ssize_t planes,           \
                               Py_ssize_t h, Py_ssize_t w, Py_ssize_t kh, Py_ssize_t kw,       \
                               Py_ssize_t sh, Py_ssize_t sw, Py_ssize_t ph, Py_ssize_t pw,     \
                               Py_ssize_t dh, Py_ssize_t dw, Py_ssize_t oh, Py_ssize_t ow) {   \
        /* the output columns whose windows lie wholly inside: [j0, j1) */                    \
        Py_ssize_t j0 = (pw + sw - 1) / sw, j1 = j0;                                           \
        while (j1 < ow && j1 * sw - pw + (kw - 1) * dw < w) j1++;                              \
        if ((kh - 1) * dh * w + (kw - 1) * dw > (Py_ssize_t)((~(U)0) >> 1))                    \
            j1 = j0; /* offsets within a window too large for S: one by one */               \
        for (Py_ssize_t p = 0; p < planes; p++) {                                              \
            const T *xp = x + p * h * w;                                                       \
            for (Py_ssize_t i = 0; i < oh; i++) {                                              \
                Py_ssize_t hs = i * sh - ph;                                                   \
                Py_ssize_t he = hs + (kh - 1) * dh + 1;                                        \
                int inside = hs >= 0 && he <= h;                                               \
                if (he > h) he = h;                                                            \
                while (hs < 0) hs += dh;                                                       \
                for (Py_ssize_t j = 0; j < ow; j++) {                                          \
                    if (inside && j == j0 && j1 - j0 >= POOL_LANES) {                          \
                        /* whole groups of POOL_LANES windows; the rest one by one */         \
                        for (; j + POOL_LANES <= j1; j += POOL_LANES) {                        \
                            max_pool_lanes_##T(xp, y, idx, hs * w + j * sw - pw, w, kh, kw,    \
                                               sw, dh, dw);                                    \
                            y += POOL_LANES;                                                   \
                            idx += POOL_LANES;                                                 \
                        }                                                                      \
                        if (j == ow) break;                                                    \
                    }                                                                          \
                    Py_ssize_t ws = j * sw - pw;                                               \
                    Py_ssize_t we = ws + (kw - 1) * dw + 1;                                    \
                    if (we > w) we = w;                                                        \
                    while (ws < 0) ws += dw;                                                   \
                    long long best = (long long)(hs * w + ws);                                 \
                    T m = -(T)INFINITY;                                                        \
                    for (Py_ssize_t a = hs; a < he; a += dh)                                   \
                        for (Py_ssize_t b = ws; b < we; b += dw)                               \
                            MAX_POOL_TAKE(T, U, long long, xp[a * w + b], m,                   \
                                          (long long)(a * w + b), best);                       \
                    *y++ = m;                                                                  \
                    *idx++ = best;                                                             \
                }                                                                              \
            }                                                                                  \
        }                                                                                      \
    }
MAX_POOL_LOOP(float, uint32_t, int32_t)
MAX_POOL_LOOP(double, uint64_t, int64_t)

static PyObject *max_pool2d(PyObject *self, PyObject *args) {
    PyObject *xo, *yo, *io;
    Py_ssize_t planes, h, w, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow;
    if (!PyArg_ParseTuple(args, "OOOnnnnnnnnnnnnn", &xo, &yo, &io, &planes, &h, &w, &kh, &kw,
                          &sh, &sw, &ph, &pw, &dh, &dw, &oh, &ow))
        return NULL;
    if (planes < 0 || h < 1 || w < 1 || kh < 1 || kw < 1 || sh < 1 || sw < 1 || ph < 0 ||
        pw < 0 || dh < 1 || dw < 1 || oh < 0 || ow < 0) {
        PyErr_SetString(PyExc_ValueError, "max_pool2d: invalid geometry");
        return NULL;
    }
    Py_buffer x, y, idx;
    if (get_three(xo, yo, io, &x, &y, &idx, 1) < 0) return NULL;
    char kind = real_kind(&x);
    const char *error = NULL;
    if (kind == 0 || real_kind(&y) != kind) error = "x and y must be float32 or float64 alike";
    else if (!is_int64(&idx)) error = "indices must be int64";
    else if (x.len != planes * h * w * x.itemsize) error = "x must hold planes * h * w values";
    else if (y.len != planes * oh * ow * y.itemsize || idx.len != planes * oh * ow * 8)
        error = "y and indices must hold planes * oh * ow values";
    else {
        /* every window must reach the input (PyTorch's output size rule guarantees it) */
        for (Py_ssize_t i = 0; i < oh && !error; i++) {
            Py_ssize_t hs = i * sh - ph, he = hs + (kh - 1) * dh + 1;
            while (hs < 0) hs += dh;
            if (hs >= h || hs >= he) error = "a window lies wholly in the padding";
        }
        for (Py_ssize_t j = 0; j < ow && !error; j++) {
            Py_ssize_t ws = j * sw - pw, we = ws + (kw - 1) * dw + 1;
            while (ws < 0) ws += dw;
            if (ws >= w || ws >= we) error = "a window lies wholly in the padding";
        }
    }
    if (error) {
        PyErr_SetString(PyExc_ValueError, error);
        release_three(&x, &y, &idx);
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    if (kind == 'f')
        max_pool2d_float((const float *)x.buf, (float *)y.buf, (long long *)idx.buf, planes, h, w,
                         kh, kw, sh, sw, ph, pw, dh, dw, oh, ow);
    else
        max_pool2d_double((const double *)x.buf, (double *)y.buf, (long long *)idx.buf, planes, h,
                          w, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow);
    Py_END_ALLOW_THREADS
    release_three(&x, &y, &idx);
    Py_RETURN_NONE;
}

/* max pooling's backward: per plane, in output order, gx[index] += g (accumulate, PyTorch's
 * kernel and numpy's ufunc.at), or gx[index] = g for windows that do not overlap (the numpy
 * form's put_along_axis; every index then appears once). */
#define MAX_POOL_BACKWARD_LOOP(T)                                                               \
    static void max_pool2d_backward_##T(const T *g, const long long *idx, T *gx,              \
                                        Py_ssize_t planes, Py_ssize_t in_n, Py_ssize_t out_n,  \
                                        int accumulate) {                                      \
        for (Py_ssize_t p = 0; p < planes; p++) {                                              \
            T *gp = gx + p * in_n;                                                             \
            if (accumulate)                                                                    \
                for (Py_ssize_t o = 0; o < out_n; o++) gp[*idx++] += *g++;                     \
            else                                                                               \
                for (Py_ssize_t o = 0; o < out_n; o++) gp[*idx++] = *g++;                      \
        }                                                                                      \
    }
MAX_POOL_BACKWARD_LOOP(float)
MAX_POOL_BACKWARD_LOOP(double)

static PyObject *max_pool2d_backward(PyObject *self, PyObject *args) {
    PyObject *go, *io, *gxo;
    Py_ssize_t planes, in_n, out_n;
    int accumulate;
    if (!PyArg_ParseTuple(args, "OOOnnnp", &go, &io, &gxo, &planes, &in_n, &out_n, &accumulate))
        return NULL;
    Py_buffer g, idx, gx;
    if (get_three(go, io, gxo, &g, &idx, &gx, 0) < 0) return NULL;
    char kind = real_kind(&g);
    const char *error = NULL;
    if (planes < 0 || in_n < 1 || out_n < 0) error = "invalid sizes";
    else if (kind == 0 || real_kind(&gx) != kind) error = "grad and grad_input must be alike";
    else if (!is_int64(&idx)) error = "indices must be int64";
    else if (g.len != planes * out_n * g.itemsize || idx.len != planes * out_n * 8)
        error = "grad and indices must hold planes * out_n values";
    else if (gx.len != planes * in_n * gx.itemsize) error = "grad_input must hold planes * in_n";
    else {
        const long long *ip = (const long long *)idx.buf;
        for (Py_ssize_t k = 0; k < planes * out_n; k++)
            if (ip[k] < 0 || ip[k] >= in_n) { error = "an index lies outside its plane"; break; }
    }
    if (error) {
        PyErr_SetString(PyExc_ValueError, error);
        release_three(&g, &idx, &gx);
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    if (kind == 'f')
        max_pool2d_backward_float((const float *)g.buf, (const long long *)idx.buf,
                                  (float *)gx.buf, planes, in_n, out_n, accumulate);
    else
        max_pool2d_backward_double((const double *)g.buf, (const long long *)idx.buf,
                                   (double *)gx.buf, planes, in_n, out_n, accumulate);
    Py_END_ALLOW_THREADS
    release_three(&g, &idx, &gx);
    Py_RETURN_NONE;
}

/* threshold_backward (torch's ReLU and Threshold gradients): out = v <= threshold ? 0 : g, a
 * literal +0 where the input is at or below the threshold (a NaN input passes its gradient),
 * g's own bits elsewhere. out may be g or v itself (element for element). */
#define THRESHOLD_BACKWARD_LOOP(T)                                                              \
    static void threshold_backward_##T(const T *g, const T *v, T *out, Py_ssize_t n,          \
                                       T threshold) {                                          \
        for (Py_ssize_t i = 0; i < n; i++) { /* both loads first: a select gcc vectorizes */  \
            T gi = g[i], vi = v[i];                                                            \
            out[i] = vi <= threshold ? (T)0 : gi;                                              \
        }                                                                                      \
    }
THRESHOLD_BACKWARD_LOOP(float)
THRESHOLD_BACKWARD_LOOP(double)

static PyObject *threshold_backward(PyObject *self, PyObject *args) {
    PyObject *go, *vo, *oo;
    double threshold;
    if (!PyArg_ParseTuple(args, "OOOd", &go, &vo, &oo, &threshold)) return NULL;
    Py_buffer g, v, out;
    if (get_three(go, vo, oo, &g, &v, &out, 0) < 0) return NULL;
    char kind = real_kind(&out);
    if (kind == 0 || real_kind(&g) != kind || real_kind(&v) != kind) {
        PyErr_SetString(PyExc_TypeError, "g, v and out must be float32 or float64 alike");
        release_three(&g, &v, &out);
        return NULL;
    }
    if (g.len != out.len || v.len != out.len) {
        PyErr_SetString(PyExc_ValueError, "g, v and out must have the same number of elements");
        release_three(&g, &v, &out);
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    if (kind == 'f')
        threshold_backward_float((const float *)g.buf, (const float *)v.buf, (float *)out.buf,
                                 out.len / 4, (float)threshold);
    else
        threshold_backward_double((const double *)g.buf, (const double *)v.buf,
                                  (double *)out.buf, out.len / 8, threshold);
    Py_END_ALLOW_THREADS
    release_three(&g, &v, &out);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"set_erf_coefficients", set_erf_coefficients, METH_VARARGS,
     "set_erf_coefficients(P, Q): kernels._ERF_P and _ERF_Q (7 and 6 floats)."},
    {"erf_f32", erf_f32, METH_VARARGS,
     "erf_f32(x, out): out = erf(x) for contiguous float32 buffers of equal length, as "
     "kernels._erf_rational_block computes it (bit for bit), without the GIL."},
    {"max_pool2d", max_pool2d, METH_VARARGS,
     "max_pool2d(x, y, indices, planes, h, w, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow): "
     "PyTorch's max_pool2d_with_indices over contiguous planes, without the GIL."},
    {"max_pool2d_backward", max_pool2d_backward, METH_VARARGS,
     "max_pool2d_backward(g, indices, grad_input, planes, in_n, out_n, accumulate): "
     "grad_input[plane, index] += g (or = g), in output order, without the GIL."},
    {"threshold_backward", threshold_backward, METH_VARARGS,
     "threshold_backward(g, v, out, threshold): out = v <= threshold ? 0 : g over contiguous "
     "float32/float64 buffers of equal length, without the GIL."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "engine._native",
    "Optional compiled loops of engine.kernels (bit for bit their numpy forms).", -1, methods,
};

PyMODINIT_FUNC PyInit__native(void) { return PyModule_Create(&module); }
