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

#if !defined(_WIN32)
#include <pthread.h>
#include <sched.h>
#include <time.h>
#define NATIVE_THREADS 1
#endif

typedef void (*part_fn)(void *ctx, Py_ssize_t lo, Py_ssize_t hi);
static void parallel_run(part_fn fn, void *ctx, Py_ssize_t n, int parts);

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
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
__attribute__((target_clones("avx512f", "avx2", "default"), optimize("no-trapping-math")))
#endif
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

typedef struct { const float *x; float *out; } erf_ctx;
static void erf_part(void *c, Py_ssize_t lo, Py_ssize_t hi) {
    erf_ctx *e = (erf_ctx *)c;
    erf_f32_loop(e->x + lo, e->out + lo, hi - lo);
}

static PyObject *erf_f32(PyObject *self, PyObject *args) {
    PyObject *src, *dst;
    int threads = 1;
    if (!PyArg_ParseTuple(args, "OO|i", &src, &dst, &threads)) return NULL;
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
    erf_ctx ctx = {(const float *)in.buf, (float *)out.buf};
    Py_BEGIN_ALLOW_THREADS
    parallel_run(erf_part, &ctx, n, threads);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&in);
    PyBuffer_Release(&out);
    Py_RETURN_NONE;
}


/* --- numpy's float32 exp, and the float32 exact GELU over it -----------------------------------
 *
 * npexp_f32 is np.exp on float32 as numpy's SIMD loop computes it (its AVX2/FMA3 and AVX512F
 * dispatch; numpy 2.x loops_exponent_log): q = rint(x log2 e) (by the 0x1.8p23 magic), r = x -
 * q ln 2 in two fused steps (Cody-Waite: ln 2's high and low parts), exp(r) as a P5/Q2 rational
 * in fused multiply-adds, then poly 2^q rounded once (here two exact-then-rounded scalings:
 * 2^(q/2) leaves poly normal, so only the second rounds, as scalef does). x >= XMAX gives inf,
 * x <= XMIN +0, NaN the default NaN. All 2^32 float32 inputs gave np.exp's bits (numpy 2.4,
 * AVX512F). Where numpy takes another loop (a build without the dispatch calls libm's expf),
 * kernels checks the two against each other once (kernels._native_exp_matches) and keeps the
 * numpy forms when they differ. Branch-free, so gcc vectorizes the loops (the clones: AVX512F,
 * Haswell's AVX2 + FMA, and a default that calls libm's fmaf). */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
#define EXP_CLONES __attribute__((target_clones("avx512f", "arch=haswell", "default")))
#else
#define EXP_CLONES
#endif
#define NPEXP_XMAX 88.72283935546875f
#define NPEXP_XMIN (-103.97208404541015625f)

static inline float npexp_pow2(int k) {  /* 2^k for -126 <= k <= 127 */
    uint32_t b = (uint32_t)(k + 127) << 23;
    float f;
    memcpy(&f, &b, 4);
    return f;
}

static inline float npexp_f32(float x) {
    const float c1 = -6.93145752e-1f, c2 = -1.42860677e-6f, magic = 0x1.8p23f;
    const float log2e = 1.442695040888963407359924681001892137f;
    const float p0 = 9.999999999980870924916e-01f, p1 = 7.257664613233124478488e-01f,
                p2 = 2.473615434895520810817e-01f, p3 = 5.114512081637298353406e-02f,
                p4 = 6.757896990527504603057e-03f, p5 = 5.082762527590693718096e-04f;
    const float q0 = 1.0f, q1 = -2.742335390411667452936e-01f, q2 = 2.159509375685829852307e-02f;
    float xc = x > NPEXP_XMIN ? x : NPEXP_XMIN; /* (a NaN too: the result is chosen below) */
    xc = xc < NPEXP_XMAX ? xc : NPEXP_XMAX;
    float q = xc * log2e;
    q = q + magic;
    q = q - magic;
    float r = fmaf(q, c1, xc);
    r = fmaf(q, c2, r);
    float num = fmaf(p5, r, p4);
    num = fmaf(num, r, p3);
    num = fmaf(num, r, p2);
    num = fmaf(num, r, p1);
    num = fmaf(num, r, p0);
    float den = fmaf(q2, r, q1);
    den = fmaf(den, r, q0);
    float poly = num / den;
    int k = (int)q;
    int k1 = k >> 1;
    float y = (poly * npexp_pow2(k1)) * npexp_pow2(k - k1);
    y = x >= NPEXP_XMAX ? INFINITY : y;
    y = x <= NPEXP_XMIN ? 0.0f : y;
    return x != x ? NAN : y;
}

EXP_CLONES
static void exp_f32_portable(const float *x, float *out, Py_ssize_t n) {
    /* (x and out one array or apart, element i read before out[i] is written: no dependence
     * between iterations, in place too) */
#pragma GCC ivdep
    for (Py_ssize_t i = 0; i < n; i++) out[i] = npexp_f32(x[i]);
}

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#include <immintrin.h>
/* numpy's AVX512F loop itself, instruction for instruction (simd_exp_f32): NaN, >= XMAX and
 * <= XMIN lanes computed from 0 and replaced at the end; rint by the magic; the three-step
 * Cody-Waite reduction (its last constant 0); scalef for 2^q. About 1.4x the portable loop's
 * speed, the same bits. */
__attribute__((target("avx512f")))
static void exp_f32_avx512(const float *x, float *out, Py_ssize_t n) {
    const __m512 zero = _mm512_setzero_ps(), xmax = _mm512_set1_ps(NPEXP_XMAX),
                 xmin = _mm512_set1_ps(NPEXP_XMIN), log2e = _mm512_set1_ps(1.442695040888963407359924681001892137f),
                 magic = _mm512_set1_ps(0x1.8p23f), c1 = _mm512_set1_ps(-6.93145752e-1f),
                 c2 = _mm512_set1_ps(-1.42860677e-6f),
                 p0 = _mm512_set1_ps(9.999999999980870924916e-01f),
                 p1 = _mm512_set1_ps(7.257664613233124478488e-01f),
                 p2 = _mm512_set1_ps(2.473615434895520810817e-01f),
                 p3 = _mm512_set1_ps(5.114512081637298353406e-02f),
                 p4 = _mm512_set1_ps(6.757896990527504603057e-03f),
                 p5 = _mm512_set1_ps(5.082762527590693718096e-04f), q0 = _mm512_set1_ps(1.0f),
                 q1 = _mm512_set1_ps(-2.742335390411667452936e-01f),
                 q2 = _mm512_set1_ps(2.159509375685829852307e-02f),
                 inf = _mm512_set1_ps(INFINITY), nan = _mm512_set1_ps(NAN);
    for (Py_ssize_t i = 0; i < n; i += 16) {
        __mmask16 lanes = n - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - i)) - 1);
        __m512 v = _mm512_maskz_loadu_ps(lanes, x + i);
        __mmask16 nanm = _mm512_cmp_ps_mask(v, v, _CMP_NEQ_UQ);
        v = _mm512_mask_mov_ps(v, nanm, zero);
        __mmask16 maxm = _mm512_cmp_ps_mask(v, xmax, _CMP_GE_OQ);
        __mmask16 minm = _mm512_cmp_ps_mask(v, xmin, _CMP_LE_OQ);
        v = _mm512_mask_mov_ps(v, (__mmask16)(nanm | minm | maxm), zero);
        __m512 q = _mm512_mul_ps(v, log2e);
        q = _mm512_add_ps(q, magic);
        q = _mm512_sub_ps(q, magic);
        __m512 r = _mm512_fmadd_ps(q, c1, v);
        r = _mm512_fmadd_ps(q, c2, r);
        r = _mm512_fmadd_ps(q, zero, r);
        __m512 num = _mm512_fmadd_ps(p5, r, p4);
        num = _mm512_fmadd_ps(num, r, p3);
        num = _mm512_fmadd_ps(num, r, p2);
        num = _mm512_fmadd_ps(num, r, p1);
        num = _mm512_fmadd_ps(num, r, p0);
        __m512 den = _mm512_fmadd_ps(q2, r, q1);
        den = _mm512_fmadd_ps(den, r, q0);
        __m512 y = _mm512_scalef_ps(_mm512_div_ps(num, den), q);
        y = _mm512_mask_mov_ps(y, nanm, nan);
        y = _mm512_mask_mov_ps(y, maxm, inf);
        y = _mm512_mask_mov_ps(y, minm, zero);
        _mm512_mask_storeu_ps(out + i, lanes, y);
    }
}
#define HAVE_EXP_AVX512 1
#endif

/* out[i] = np.exp(x[i]) for float32 (x and out one array or apart): the AVX512F loop where the
 * processor has it, else the portable one. */
static int exp_avx512 = 0; /* set once at import (PyInit__native) */
static void exp_f32_loop(const float *x, float *out, Py_ssize_t n) {
#ifdef HAVE_EXP_AVX512
    if (exp_avx512) {
        exp_f32_avx512(x, out, n);
        return;
    }
#endif
    exp_f32_portable(x, out, n);
}

/* The constants of activation.py's float32 exact GELU (_AS_P, _AS_A, 1/sqrt(2 pi)), as numpy
 * rounds them against float32 arrays (to nearest). */
typedef struct { float p, a1, a2, a3, a4, a5, inv_sqrt_2pi; } gelu_consts;

/* activation._upper_tail_chunk in blocks: s = the tail's polynomial in t = 1 / (1 + p |x|) and
 * h = -x^2 / 2 first, then exp(h) by exp_f32_loop (numpy's AVX512F loop where there is one),
 * then Q(|x|) = s exp(h) with the rest of the caller's formula: the same operations in the same
 * order as element by element. */
#define GELU_BLOCK 512
EXP_CLONES
static void gelu_tail_pre(const float *x, float *s, float *h, Py_ssize_t m, gelu_consts c) {
#pragma GCC ivdep
    for (Py_ssize_t i = 0; i < m; i++) {
        float a = fabsf(x[i]);
        float t = a * c.p;
        t = t + 1.0f;
        t = 1.0f / t;
        float v = t * c.a5;
        v = v + c.a4; v = v * t;
        v = v + c.a3; v = v * t;
        v = v + c.a2; v = v * t;
        v = v + c.a1; v = v * t;
        s[i] = v;
        float w = a * a;
        h[i] = w * -0.5f;
    }
}

/* activation._gelu_chunk's float32 exact form: relu(x) - |x| Q(|x|), x's sign. */
EXP_CLONES
static void gelu_post(const float *x, const float *s, const float *e, float *out, Py_ssize_t m) {
#pragma GCC ivdep
    for (Py_ssize_t i = 0; i < m; i++) {
        float xi = x[i], a = fabsf(xi);
        float q = s[i] * e[i];
        q = q * a;
        float o = a + xi;
        o = o * 0.5f;
        o = o - q;
        out[i] = copysignf(o, xi);
    }
}

/* activation._gelu_grad_chunk's float32 exact form: (Phi(x) + x phi(x)) g. */
EXP_CLONES
static void gelu_grad_post(const float *x, const float *g, const float *s, const float *e,
                           float *out, Py_ssize_t m, float inv_sqrt_2pi) {
#pragma GCC ivdep
    for (Py_ssize_t i = 0; i < m; i++) {
        float xi = x[i];
        float q = s[i] * e[i];
        float o = 0.5f - q;
        o = copysignf(o, xi);
        o = o + 0.5f;
        float d = e[i] * xi;
        d = d * inv_sqrt_2pi;
        o = o + d;
        out[i] = o * g[i];
    }
}

static void gelu_blocks(const float *x, const float *g, float *out, Py_ssize_t n,
                        gelu_consts c) {
    float s[GELU_BLOCK], e[GELU_BLOCK];
    for (Py_ssize_t i0 = 0; i0 < n; i0 += GELU_BLOCK) {
        Py_ssize_t m = n - i0 < GELU_BLOCK ? n - i0 : GELU_BLOCK;
        gelu_tail_pre(x + i0, s, e, m, c);
        exp_f32_loop(e, e, m);
        if (g == NULL)
            gelu_post(x + i0, s, e, out + i0, m);
        else
            gelu_grad_post(x + i0, g + i0, s, e, out + i0, m, c.inv_sqrt_2pi);
    }
}

typedef struct { const float *x, *g; float *out; int kind; gelu_consts c; } act_ctx;
static void act_part(void *p, Py_ssize_t lo, Py_ssize_t hi) {
    act_ctx *a = (act_ctx *)p;
    if (a->kind == 0) exp_f32_loop(a->x + lo, a->out + lo, hi - lo);
    else gelu_blocks(a->x + lo, a->kind == 2 ? a->g + lo : NULL, a->out + lo, hi - lo, a->c);
}

/* exp_gelu_f32(x, g, out, kind, consts, threads=1): kind 0: out = np.exp(x); 1: out = gelu(x);
 * 2: out = gelu'(x) g (g None for kinds 0 and 1); consts: the 7 of gelu_consts. */
static PyObject *exp_gelu_f32(PyObject *self, PyObject *args) {
    PyObject *xo, *go, *oo, *co;
    int kind, threads = 1;
    if (!PyArg_ParseTuple(args, "OOOiO|i", &xo, &go, &oo, &kind, &co, &threads)) return NULL;
    if (kind < 0 || kind > 2 || (kind == 2) != (go != Py_None)) {
        PyErr_SetString(PyExc_ValueError, "kind must be 0, 1 (g None) or 2 (g given)");
        return NULL;
    }
    act_ctx ctx;
    memset(&ctx, 0, sizeof ctx);
    ctx.kind = kind;
    PyObject *cs = PySequence_Fast(co, "consts must be a sequence");
    if (!cs) return NULL;
    if (PySequence_Fast_GET_SIZE(cs) != 7) {
        Py_DECREF(cs);
        PyErr_SetString(PyExc_ValueError, "expected 7 constants");
        return NULL;
    }
    float v[7];
    for (int i = 0; i < 7; i++) v[i] = (float)PyFloat_AsDouble(PySequence_Fast_GET_ITEM(cs, i));
    Py_DECREF(cs);
    if (PyErr_Occurred()) return NULL;
    ctx.c = (gelu_consts){v[0], v[1], v[2], v[3], v[4], v[5], v[6]};
    Py_buffer bx, bg, bo;
    if (get_buffer(xo, &bx, 0) < 0) return NULL;
    if (go != Py_None && get_buffer(go, &bg, 0) < 0) { PyBuffer_Release(&bx); return NULL; }
    if (get_buffer(oo, &bo, 1) < 0) {
        PyBuffer_Release(&bx);
        if (go != Py_None) PyBuffer_Release(&bg);
        return NULL;
    }
    const char *why = NULL;
    PyObject *error = PyExc_TypeError;
    if (real_kind(&bx) != 'f' || real_kind(&bo) != 'f' || (go != Py_None && real_kind(&bg) != 'f')) {
        why = "x, g and out must be contiguous float32 buffers";
    } else if (bx.len != bo.len || (go != Py_None && bg.len != bo.len)) {
        error = PyExc_ValueError;
        why = "x, g and out must have the same number of elements";
    }
    if (!why) {
        ctx.x = (const float *)bx.buf;
        ctx.g = go != Py_None ? (const float *)bg.buf : NULL;
        ctx.out = (float *)bo.buf;
        Py_BEGIN_ALLOW_THREADS
        parallel_run(act_part, &ctx, bo.len / 4, threads);
        Py_END_ALLOW_THREADS
    }
    PyBuffer_Release(&bx);
    if (go != Py_None) PyBuffer_Release(&bg);
    PyBuffer_Release(&bo);
    if (why) {
        PyErr_SetString(error, why);
        return NULL;
    }
    Py_RETURN_NONE;
}

/* --- the loops' own threads --------------------------------------------------------------------
 *
 * parallel_run(fn, ctx, n, parts) cuts range(n) into equal chunks (CHUNKS_PER_PART per part)
 * that the calling thread and up to parts - 1 of the pool's threads claim one at a time, and
 * returns when all are done. A thread that is late (descheduled on a busy machine) finds the
 * chunks taken and does nothing: the caller never waits for a thread that has not started, only
 * for chunks another thread is running (with one part per thread, a 2-core machine with two
 * busy processes ran the small CNN step 5.8x torch's). Every loop here computes each element
 * (or row, or plane) on its own, so the cut never changes a value. Python threads handing work
 * to each other cost ~40 us a wake on a VM (the GIL's hand-offs); these threads poll for the
 * next job for POOL_SPIN_NS, then sleep on a condition variable, and hold no Python state. One
 * job at a time: a second caller meanwhile (another Python thread) runs its job alone. After
 * fork() the child has no pool threads: the pool starts again on its first job. */
#define CHUNKS_PER_PART 4

/* How long the loops' threads poll for the next job before they sleep (set_pool_spin). On a
 * VM a thread that sleeps lets its virtual CPU idle, and waking it again takes the host's
 * time: with 0.1 ms, steps after a pause ran their loops on one thread for tens of ms (small
 * CNN steps in bursts of three after 0.25 s: 25.4, 25.4, 17.0 ms; with 2 ms 18.4, 15.3, 15.2;
 * with two busy processes 56.2 -> 53.5 ms, the transformer block and the MLP unchanged). The
 * polling yields the core to any other runnable thread. */
static long long pool_spin_ns = 5000000LL;

static PyObject *set_pool_spin(PyObject *self, PyObject *args) {
    long long ns;
    if (!PyArg_ParseTuple(args, "L", &ns)) return NULL;
    if (ns < 0) {
        PyErr_SetString(PyExc_ValueError, "set_pool_spin: a negative time");
        return NULL;
    }
    __atomic_store_n(&pool_spin_ns, ns, __ATOMIC_RELAXED);
    Py_RETURN_NONE;
}

#ifdef NATIVE_THREADS
#define POOL_MAX 64
#define POOL_SPIN_NS __atomic_load_n(&pool_spin_ns, __ATOMIC_RELAXED)
static pthread_mutex_t pool_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t pool_wake = PTHREAD_COND_INITIALIZER;
static pthread_cond_t pool_done = PTHREAD_COND_INITIALIZER;
static int pool_started = 0;        /* threads running (under pool_mu) */
static unsigned long pool_gen = 0;  /* bumped for each job (under pool_mu; polled atomically) */
static part_fn pool_fn;
static void *pool_ctx;
static Py_ssize_t pool_n;
static int pool_parts, pool_chunks;
static unsigned long long pool_claim; /* (job's generation << 32) | next chunk, claimed by CAS */
static int pool_finished;           /* chunks done (atomic) */
static int pool_waiting = 0;        /* the caller sleeps on pool_done (under pool_mu) */
static int pool_busy = 0;           /* a job is running (under pool_mu) */
static int pool_atfork = 0;
static unsigned long pool_first_gen[POOL_MAX]; /* the generation before a thread's first job */
static int pool_sleeping = 0;       /* threads waiting on pool_wake (under pool_mu) */

static long long now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

static void chunk_bounds(Py_ssize_t n, int chunks, int i, Py_ssize_t *lo, Py_ssize_t *hi) {
    *lo = (Py_ssize_t)((long double)n * i / chunks);
    *hi = (Py_ssize_t)((long double)n * (i + 1) / chunks);
}

/* The next chunk of job `gen`, or -1 when that job has none left (or is over). */
static int pool_take(unsigned long gen, int chunks) {
    unsigned long long cur = __atomic_load_n(&pool_claim, __ATOMIC_ACQUIRE);
    for (;;) {
        if ((cur >> 32) != (gen & 0xffffffffUL) || (int)(cur & 0xffffffffULL) >= chunks)
            return -1;
        if (__atomic_compare_exchange_n(&pool_claim, &cur, cur + 1, 0, __ATOMIC_ACQ_REL,
                                        __ATOMIC_ACQUIRE))
            return (int)(cur & 0xffffffffULL);
    }
}

/* Run chunks of job `gen` until none is left; wake the caller after the last one. */
static void pool_work(unsigned long gen, part_fn fn, void *ctx, Py_ssize_t n, int chunks) {
    int i;
    while ((i = pool_take(gen, chunks)) >= 0) {
        Py_ssize_t lo, hi;
        chunk_bounds(n, chunks, i, &lo, &hi);
        if (hi > lo) fn(ctx, lo, hi);
        if (__atomic_add_fetch(&pool_finished, 1, __ATOMIC_ACQ_REL) == chunks) {
            pthread_mutex_lock(&pool_mu);
            if (pool_waiting) pthread_cond_signal(&pool_done);
            pthread_mutex_unlock(&pool_mu);
        }
    }
}

/* Poll *word until it differs from `from` or POOL_SPIN_NS pass: a job posted soon after the
 * last (the next op's loop) starts without a sleeping thread's wake-up, which on a VM costs tens
 * of microseconds. Yields the core on every poll, so a runnable thread is not kept waiting. */
static void pool_poll(unsigned long *word, unsigned long from) {
    long long end = now_ns() + POOL_SPIN_NS;
    while (__atomic_load_n(word, __ATOMIC_ACQUIRE) == from) {
        if (now_ns() > end) return;
        sched_yield();
    }
}

static void *pool_main(void *arg) {
    int id = (int)(intptr_t)arg; /* 1 .. POOL_MAX - 1 */
    unsigned long seen;
    pthread_mutex_lock(&pool_mu);
    seen = pool_first_gen[id]; /* (its first job may be posted before it runs) */
    for (;;) {
        if (pool_gen == seen) {
            pthread_mutex_unlock(&pool_mu);
            pool_poll(&pool_gen, seen);
            pthread_mutex_lock(&pool_mu);
        }
        while (pool_gen == seen) {
            pool_sleeping++;
            pthread_cond_wait(&pool_wake, &pool_mu);
            pool_sleeping--;
        }
        seen = pool_gen;
        if (id >= pool_parts) continue;
        part_fn fn = pool_fn;
        void *ctx = pool_ctx;
        Py_ssize_t n = pool_n;
        int chunks = pool_chunks;
        pthread_mutex_unlock(&pool_mu);
        pool_work(seen, fn, ctx, n, chunks);
        pthread_mutex_lock(&pool_mu);
    }
    return NULL;
}

static void pool_after_fork(void) {
    pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    pthread_cond_t c1 = PTHREAD_COND_INITIALIZER, c2 = PTHREAD_COND_INITIALIZER;
    pool_mu = mu;
    pool_wake = c1;
    pool_done = c2;
    pool_started = 0;
    pool_busy = 0;
    pool_waiting = 0;
    pool_sleeping = 0;
}
#endif

static void parallel_run(part_fn fn, void *ctx, Py_ssize_t n, int parts) {
    if (parts > n) parts = (int)n;
#ifdef NATIVE_THREADS
    if (parts > POOL_MAX) parts = POOL_MAX;
    if (parts > 1) {
        pthread_mutex_lock(&pool_mu);
        if (pool_busy) parts = 1;
        if (!pool_atfork && pthread_atfork(NULL, NULL, pool_after_fork) == 0) pool_atfork = 1;
        while (parts > 1 && pool_started < parts - 1) {
            pthread_t t;
            pthread_attr_t attr;
            pthread_attr_init(&attr);
            pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
            pool_first_gen[pool_started + 1] = pool_gen;
            int rc = pthread_create(&t, &attr, pool_main, (void *)(intptr_t)(pool_started + 1));
            pthread_attr_destroy(&attr);
            if (rc != 0) { parts = pool_started + 1; break; } /* fewer threads, not an error */
            pool_started++;
        }
        if (parts > 1) {
            Py_ssize_t chunks = (Py_ssize_t)parts * CHUNKS_PER_PART;
            if (chunks > n) chunks = n;
            unsigned long gen = pool_gen + 1;
            pool_busy = 1;
            pool_fn = fn;
            pool_ctx = ctx;
            pool_n = n;
            pool_parts = parts;
            pool_chunks = (int)chunks;
            __atomic_store_n(&pool_finished, 0, __ATOMIC_RELEASE);
            __atomic_store_n(&pool_claim, (unsigned long long)(gen & 0xffffffffUL) << 32,
                             __ATOMIC_RELEASE);
            __atomic_store_n(&pool_gen, gen, __ATOMIC_RELEASE);
            if (pool_sleeping) pthread_cond_broadcast(&pool_wake);
            pthread_mutex_unlock(&pool_mu);
            pool_work(gen, fn, ctx, n, (int)chunks);
            /* only chunks another thread took are left: they are about as long as one here */
            long long end = now_ns() + POOL_SPIN_NS;
            while (__atomic_load_n(&pool_finished, __ATOMIC_ACQUIRE) < chunks && now_ns() < end)
                sched_yield();
            pthread_mutex_lock(&pool_mu);
            pool_waiting = 1;
            while (__atomic_load_n(&pool_finished, __ATOMIC_ACQUIRE) < chunks)
                pthread_cond_wait(&pool_done, &pool_mu);
            pool_waiting = 0;
            pool_busy = 0;
            pthread_mutex_unlock(&pool_mu);
            return;
        }
        pthread_mutex_unlock(&pool_mu);
    }
#endif
    if (n > 0) fn(ctx, 0, n);
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

typedef struct {
    char kind;
    const void *x;
    void *y;
    long long *idx;
    Py_ssize_t h, w, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow;
} pool_ctx_t;
static void max_pool_part(void *c, Py_ssize_t lo, Py_ssize_t hi) {
    pool_ctx_t *p = (pool_ctx_t *)c;
    Py_ssize_t in_n = p->h * p->w, out_n = p->oh * p->ow;
    if (p->kind == 'f')
        max_pool2d_float((const float *)p->x + lo * in_n, (float *)p->y + lo * out_n,
                         p->idx + lo * out_n, hi - lo, p->h, p->w, p->kh, p->kw, p->sh, p->sw,
                         p->ph, p->pw, p->dh, p->dw, p->oh, p->ow);
    else
        max_pool2d_double((const double *)p->x + lo * in_n, (double *)p->y + lo * out_n,
                          p->idx + lo * out_n, hi - lo, p->h, p->w, p->kh, p->kw, p->sh, p->sw,
                          p->ph, p->pw, p->dh, p->dw, p->oh, p->ow);
}

static PyObject *max_pool2d(PyObject *self, PyObject *args) {
    PyObject *xo, *yo, *io;
    Py_ssize_t planes, h, w, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow;
    int threads = 1;
    if (!PyArg_ParseTuple(args, "OOOnnnnnnnnnnnnn|i", &xo, &yo, &io, &planes, &h, &w, &kh, &kw,
                          &sh, &sw, &ph, &pw, &dh, &dw, &oh, &ow, &threads))
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
    pool_ctx_t ctx = {kind, x.buf, y.buf, (long long *)idx.buf, h, w, kh, kw, sh, sw, ph, pw,
                      dh, dw, oh, ow};
    Py_BEGIN_ALLOW_THREADS
    parallel_run(max_pool_part, &ctx, planes, threads);
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
                                        int accumulate, int zero) {                            \
        for (Py_ssize_t p = 0; p < planes; p++) {                                              \
            T *gp = gx + p * in_n;                                                             \
            if (zero) /* the plane zeroed just before its scatter, while it is in cache */     \
                memset(gp, 0, (size_t)in_n * sizeof(T));                                       \
            if (accumulate)                                                                    \
                for (Py_ssize_t o = 0; o < out_n; o++) gp[*idx++] += *g++;                     \
            else                                                                               \
                for (Py_ssize_t o = 0; o < out_n; o++) gp[*idx++] = *g++;                      \
        }                                                                                      \
    }
MAX_POOL_BACKWARD_LOOP(float)
MAX_POOL_BACKWARD_LOOP(double)

typedef struct {
    char kind;
    const void *g;
    const long long *idx;
    void *gx;
    Py_ssize_t in_n, out_n;
    int accumulate, zero;
} pool_back_ctx_t;
static void max_pool_back_part(void *c, Py_ssize_t lo, Py_ssize_t hi) {
    pool_back_ctx_t *p = (pool_back_ctx_t *)c;
    if (p->kind == 'f')
        max_pool2d_backward_float((const float *)p->g + lo * p->out_n, p->idx + lo * p->out_n,
                                  (float *)p->gx + lo * p->in_n, hi - lo, p->in_n, p->out_n,
                                  p->accumulate, p->zero);
    else
        max_pool2d_backward_double((const double *)p->g + lo * p->out_n,
                                   p->idx + lo * p->out_n, (double *)p->gx + lo * p->in_n,
                                   hi - lo, p->in_n, p->out_n, p->accumulate, p->zero);
}

static PyObject *max_pool2d_backward(PyObject *self, PyObject *args) {
    PyObject *go, *io, *gxo;
    Py_ssize_t planes, in_n, out_n;
    int accumulate, threads = 1, zero = 0;
    if (!PyArg_ParseTuple(args, "OOOnnnp|ip", &go, &io, &gxo, &planes, &in_n, &out_n, &accumulate,
                          &threads, &zero))
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
    pool_back_ctx_t ctx = {kind, g.buf, (const long long *)idx.buf, gx.buf, in_n, out_n,
                           accumulate, zero};
    Py_BEGIN_ALLOW_THREADS
    parallel_run(max_pool_back_part, &ctx, planes, threads);
    Py_END_ALLOW_THREADS
    release_three(&g, &idx, &gx);
    Py_RETURN_NONE;
}

/* threshold_backward (torch's ReLU and Threshold gradients): out = v <= threshold ? 0 : g, a
 * literal +0 where the input is at or below the threshold (a NaN input passes its gradient),
 * g's own bits elsewhere. out may be g or v itself (element for element). */
/* strict: out = v < threshold ? 0 : g, which with g = v = x and threshold 0 is ReLU's forward
 * as numpy's maximum(0, x) gives it (-0 and NaNs kept bit for bit: x's own bits, a select).
 * Element i is read before out[i] is written (in place too): no dependence between iterations. */
#define THRESHOLD_BACKWARD_LOOP(T)                                                              \
    static void threshold_backward_##T(const T *g, const T *v, T *out, Py_ssize_t n,          \
                                       T threshold, int strict) {                              \
        if (strict) {                                                                          \
            _Pragma("GCC ivdep") for (Py_ssize_t i = 0; i < n; i++) {                          \
                T gi = g[i], vi = v[i];                                                        \
                out[i] = vi < threshold ? (T)0 : gi;                                           \
            }                                                                                  \
            return;                                                                            \
        }                                                                                      \
        _Pragma("GCC ivdep") for (Py_ssize_t i = 0; i < n; i++) { /* both loads first: a      \
                                                                     select gcc vectorizes */  \
            T gi = g[i], vi = v[i];                                                            \
            out[i] = vi <= threshold ? (T)0 : gi;                                              \
        }                                                                                      \
    }
THRESHOLD_BACKWARD_LOOP(float)
THRESHOLD_BACKWARD_LOOP(double)

typedef struct {
    char kind;
    const void *g, *v;
    void *out;
    double threshold;
    int strict;
} threshold_ctx_t;
static void threshold_part(void *c, Py_ssize_t lo, Py_ssize_t hi) {
    threshold_ctx_t *t = (threshold_ctx_t *)c;
    if (t->kind == 'f')
        threshold_backward_float((const float *)t->g + lo, (const float *)t->v + lo,
                                 (float *)t->out + lo, hi - lo, (float)t->threshold, t->strict);
    else
        threshold_backward_double((const double *)t->g + lo, (const double *)t->v + lo,
                                  (double *)t->out + lo, hi - lo, t->threshold, t->strict);
}

static PyObject *threshold_backward(PyObject *self, PyObject *args) {
    PyObject *go, *vo, *oo;
    double threshold;
    int threads = 1, strict = 0;
    if (!PyArg_ParseTuple(args, "OOOd|ip", &go, &vo, &oo, &threshold, &threads, &strict))
        return NULL;
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
    threshold_ctx_t ctx = {kind, g.buf, v.buf, out.buf, threshold, strict};
    Py_BEGIN_ALLOW_THREADS
    parallel_run(threshold_part, &ctx, out.len / out.itemsize, threads);
    Py_END_ALLOW_THREADS
    release_three(&g, &v, &out);
    Py_RETURN_NONE;
}

/* --- per-channel passes of batch normalization ---------------------------------------------
 *
 * The input is `rows` rows of L values, row r of channel r % c ([N, C, L] as N * C rows); a
 * thread's part from row r0 on.
 * Sums are per row, in double, in a fixed order that kernels.row_sums' numpy form repeats: with
 * L8 = L - L % 8, lane k (k < 8) takes the terms at k, k + 8, ... below L8, one after another from
 * the first; the lanes are joined as ((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7)), and the
 * terms from L8 on are added after, in order (L8 = 0: the terms in order). A term is x (kind 0),
 * d * d with d = x - m[channel] in the element type (kind 1), or for kind 2 two sums, g and
 * g * d with d = x - m[channel] (a = g, b = x). Eight independent chains keep the adds busy. */
#define LANE_SUM(TERM, out)                                                                     \
    do {                                                                                       \
        Py_ssize_t L8_ = L - L % 8;                                                            \
        double s_;                                                                             \
        if (L8_ > 0) {                                                                         \
            double acc_[8];                                                                    \
            for (int k_ = 0; k_ < 8; k_++) { Py_ssize_t i = k_; acc_[k_] = (TERM); }            \
            for (Py_ssize_t j_ = 8; j_ < L8_; j_ += 8)                                         \
                for (int k_ = 0; k_ < 8; k_++) { Py_ssize_t i = j_ + k_; acc_[k_] += (TERM); }  \
            s_ = ((acc_[0] + acc_[1]) + (acc_[2] + acc_[3])) +                                 \
                 ((acc_[4] + acc_[5]) + (acc_[6] + acc_[7]));                                  \
        } else if (L > 0) {                                                                    \
            Py_ssize_t i = 0;                                                                  \
            s_ = (TERM);                                                                       \
            L8_ = 1;                                                                           \
        } else                                                                                 \
            s_ = 0.0;                                                                          \
        for (Py_ssize_t i = L8_; i < L; i++) s_ += (TERM);                                     \
        (out) = s_;                                                                            \
    } while (0)

#define ROW_SUMS_LOOP(T)                                                                        \
    static void row_sums_##T(const T *a, const T *b, const T *m, double *p1, double *p2,      \
                             Py_ssize_t r0, Py_ssize_t rows, Py_ssize_t c, Py_ssize_t L,       \
                             int kind) {                                                       \
        for (Py_ssize_t r = 0; r < rows; r++) {                                                \
            const T *ar = a + r * L;                                                           \
            if (kind == 0) {                                                                   \
                LANE_SUM((double)ar[i], p1[r]);                                                \
                continue;                                                                      \
            }                                                                                  \
            T mc = m[(r0 + r) % c];                                                            \
            if (kind == 1) {                                                                   \
                LANE_SUM(((double)(T)(ar[i] - mc)) * ((double)(T)(ar[i] - mc)), p1[r]);         \
                continue;                                                                      \
            }                                                                                  \
            const T *br = b + r * L;                                                           \
            LANE_SUM((double)ar[i], p1[r]);                                                    \
            LANE_SUM((double)ar[i] * (double)(T)(br[i] - mc), p2[r]);                          \
        }                                                                                      \
    }
ROW_SUMS_LOOP(float)
ROW_SUMS_LOOP(double)

/* Buffer i of `objs` (a tuple), all C-contiguous; written when `writable`. On failure the ones
 * got so far are released. */
static int get_many(PyObject *objs, Py_buffer *views, Py_ssize_t count, const int *writable) {
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *o = PyTuple_GET_ITEM(objs, i);
        if (get_buffer(o, &views[i], writable[i]) < 0) {
            while (i-- > 0) PyBuffer_Release(&views[i]);
            return -1;
        }
    }
    return 0;
}

static void release_many(Py_buffer *views, Py_ssize_t count) {
    for (Py_ssize_t i = 0; i < count; i++) PyBuffer_Release(&views[i]);
}

static int is_double(Py_buffer *v) { return real_kind(v) == 'd'; }

typedef struct {
    char k;
    const void *a, *b, *m;
    double *p1, *p2;
    Py_ssize_t c, L;
    int kind;
} row_sums_ctx_t;
static void row_sums_part(void *ctx, Py_ssize_t lo, Py_ssize_t hi) {
    row_sums_ctx_t *t = (row_sums_ctx_t *)ctx;
    if (t->k == 'f')
        row_sums_float((const float *)t->a + lo * t->L, (const float *)t->b + lo * t->L,
                       (const float *)t->m, t->p1 + lo, t->p2 + lo, lo, hi - lo, t->c,
                       t->L, t->kind);
    else
        row_sums_double((const double *)t->a + lo * t->L, (const double *)t->b + lo * t->L,
                        (const double *)t->m, t->p1 + lo, t->p2 + lo, lo, hi - lo,
                        t->c, t->L, t->kind);
}

static PyObject *row_sums(PyObject *self, PyObject *args) {
    PyObject *ao, *bo, *mo, *p1o, *p2o;
    Py_ssize_t rows, c, L;
    int kind, threads = 1;
    if (!PyArg_ParseTuple(args, "OOOOOnnni|i", &ao, &bo, &mo, &p1o, &p2o, &rows, &c, &L, &kind,
                          &threads))
        return NULL;
    if (kind < 0 || kind > 2 || rows < 0 || c < 1 || L < 0) {
        PyErr_SetString(PyExc_ValueError, "row_sums: invalid kind or sizes");
        return NULL;
    }
    /* a and the first sums always; m from kind 1; b and the second sums for kind 2 (else
     * any object, not read) */
    PyObject *objs = PyTuple_Pack(5, ao, kind == 2 ? bo : ao, kind ? mo : ao, p1o,
                                  kind == 2 ? p2o : p1o);
    if (!objs) return NULL;
    Py_buffer v[5];
    const int writable[5] = {0, 0, 0, 1, 1};
    int got = get_many(objs, v, 5, writable);
    Py_DECREF(objs);
    if (got < 0) return NULL;
    char kind_a = real_kind(&v[0]);
    const char *error = NULL;
    if (kind_a == 0 || real_kind(&v[1]) != kind_a || real_kind(&v[2]) != kind_a)
        error = "a, b and m must be float32 or float64 alike";
    else if (!is_double(&v[3]) || !is_double(&v[4])) error = "the sums must be float64";
    else if (v[0].len != rows * L * v[0].itemsize || v[1].len != v[0].len)
        error = "a and b must hold rows * L values";
    else if (kind && v[2].len != c * v[2].itemsize) error = "m must hold c values";
    else if (v[3].len != rows * 8 || v[4].len != rows * 8) error = "the sums must hold rows values";
    if (error) {
        PyErr_SetString(PyExc_ValueError, error);
        release_many(v, 5);
        return NULL;
    }
    row_sums_ctx_t ctx = {kind_a, v[0].buf, v[1].buf, v[2].buf, (double *)v[3].buf,
                          (double *)v[4].buf, c, L, kind};
    Py_BEGIN_ALLOW_THREADS
    parallel_run(row_sums_part, &ctx, rows, threads);
    Py_END_ALLOW_THREADS
    release_many(v, 5);
    Py_RETURN_NONE;
}

/* Per-row (channel) affine passes in the element type, each operation rounded as numpy's:
 *   kind 0 (batch norm's output):   y = ((x - p0) * p1) [+ p2]   (p2 only when has_last)
 *   kind 1 (its input gradient):    y = ((((x - p0) * p1) + g) - p2) * p3
 * with pK[channel] per row; y may be x or g element for element. */
#define ROW_AFFINE_LOOP(T)                                                                      \
    static void row_affine_##T(const T *x, const T *g, const T *p0, const T *p1, const T *p2,  \
                               const T *p3, T *y, Py_ssize_t r0, Py_ssize_t rows, Py_ssize_t c, \
                               Py_ssize_t L, int kind, int has_last) {                         \
        for (Py_ssize_t r = 0; r < rows; r++) {                                                \
            Py_ssize_t ch = (r0 + r) % c;                                                      \
            const T *xr = x + r * L;                                                           \
            T *yr = y + r * L;                                                                 \
            T a = p0[ch], s = p1[ch];                                                          \
            if (kind == 0 && has_last) {                                                       \
                T t = p2[ch];                                                                  \
                for (Py_ssize_t i = 0; i < L; i++) {                                           \
                    T v = xr[i] - a;                                                           \
                    v = v * s;                                                                 \
                    yr[i] = v + t;                                                             \
                }                                                                              \
            } else if (kind == 0) {                                                            \
                for (Py_ssize_t i = 0; i < L; i++) {                                           \
                    T v = xr[i] - a;                                                           \
                    yr[i] = v * s;                                                             \
                }                                                                              \
            } else {                                                                           \
                const T *gr = g + r * L;                                                       \
                T t = p2[ch], u = p3[ch];                                                      \
                for (Py_ssize_t i = 0; i < L; i++) {                                           \
                    T v = xr[i] - a;                                                           \
                    v = v * s;                                                                 \
                    v = v + gr[i];                                                             \
                    v = v - t;                                                                 \
                    yr[i] = v * u;                                                             \
                }                                                                              \
            }                                                                                  \
        }                                                                                      \
    }
ROW_AFFINE_LOOP(float)
ROW_AFFINE_LOOP(double)

typedef struct {
    char k;
    const void *x, *g, *p0, *p1, *p2, *p3;
    void *y;
    Py_ssize_t c, L;
    int kind, has_last;
} row_affine_ctx_t;
static void row_affine_part(void *ctx, Py_ssize_t lo, Py_ssize_t hi) {
    row_affine_ctx_t *t = (row_affine_ctx_t *)ctx;
    Py_ssize_t off = lo * t->L;
    if (t->k == 'f')
        row_affine_float((const float *)t->x + off, (const float *)t->g + off,
                         (const float *)t->p0, (const float *)t->p1, (const float *)t->p2,
                         (const float *)t->p3, (float *)t->y + off, lo, hi - lo, t->c,
                         t->L, t->kind, t->has_last);
    else
        row_affine_double((const double *)t->x + off, (const double *)t->g + off,
                          (const double *)t->p0, (const double *)t->p1, (const double *)t->p2,
                          (const double *)t->p3, (double *)t->y + off, lo, hi - lo,
                          t->c, t->L, t->kind, t->has_last);
}

static PyObject *row_affine(PyObject *self, PyObject *args) {
    PyObject *xo, *go, *p0o, *p1o, *p2o, *p3o, *yo;
    Py_ssize_t rows, c, L;
    int kind, has_last, threads = 1;
    if (!PyArg_ParseTuple(args, "OOOOOOOnnnip|i", &xo, &go, &p0o, &p1o, &p2o, &p3o, &yo, &rows,
                          &c, &L, &kind, &has_last, &threads))
        return NULL;
    if (kind < 0 || kind > 1 || rows < 0 || c < 1 || L < 0) {
        PyErr_SetString(PyExc_ValueError, "row_affine: invalid kind or sizes");
        return NULL;
    }
    int last = kind == 1 || has_last;
    PyObject *objs = PyTuple_Pack(7, xo, kind ? go : xo, p0o, p1o, last ? p2o : p1o,
                                  kind ? p3o : p1o, yo);
    if (!objs) return NULL;
    Py_buffer v[7];
    const int writable[7] = {0, 0, 0, 0, 0, 0, 1};
    int got = get_many(objs, v, 7, writable);
    Py_DECREF(objs);
    if (got < 0) return NULL;
    char k = real_kind(&v[6]);
    const char *error = NULL;
    for (int i = 0; i < 6 && !error; i++)
        if (k == 0 || real_kind(&v[i]) != k) error = "operands must be float32 or float64 alike";
    if (!error) {
        if (v[0].len != rows * L * v[0].itemsize || v[1].len != v[0].len || v[6].len != v[0].len)
            error = "x, g and y must hold rows * L values";
        for (int i = 2; i < 6 && !error; i++)
            if (v[i].len != c * v[i].itemsize) error = "the parameters must hold c values";
    }
    if (error) {
        PyErr_SetString(PyExc_ValueError, error);
        release_many(v, 7);
        return NULL;
    }
    row_affine_ctx_t ctx = {k, v[0].buf, v[1].buf, v[2].buf, v[3].buf, v[4].buf, v[5].buf,
                            v[6].buf, c, L, kind, has_last};
    Py_BEGIN_ALLOW_THREADS
    parallel_run(row_affine_part, &ctx, rows, threads);
    Py_END_ALLOW_THREADS
    release_many(v, 7);
    Py_RETURN_NONE;
}

/* --- layer normalization over the last dim ------------------------------------------------
 *
 * `rows` rows of d values, each normalized alone. Sums in double in LANE_SUM's order (kernels.
 * layer_norm_forward's numpy form repeats them), every other operation rounded in the element
 * type as numpy rounds it:
 *   forward:  mean = T(sum(x) / d), rstd = T(1 / sqrt(sum(c * c) / d + eps)), c = x - mean;
 *             y = ((c * rstd) [* w]) [+ b]
 *   backward: h = c * rstd, u = g [* w]; a1 = sum(u), a2 = sum(u * h) per row;
 *             gx = (((h * T(-a2 / d)) - T(a1 / d)) + u) * rstd
 *             gw[j] = T(sum over rows in order of g * h), gb[j] = T(sum over rows of g)
 * Rows (columns, for the column sums) are split across threads: no value depends on it. */
#define LN_LOOPS(T)                                                                             \
    static void ln_forward_##T(const T *x, const T *w, const T *b, T *y, T *mean, T *rstd,     \
                               Py_ssize_t rows, Py_ssize_t L, double eps, int has_w,          \
                               int has_b) {                                                    \
        for (Py_ssize_t r = 0; r < rows; r++) {                                                \
            const T *xr = x + r * L;                                                           \
            T *yr = y + r * L;                                                                 \
            double s, v;                                                                       \
            LANE_SUM((double)xr[i], s);                                                        \
            T m = (T)(s / (double)L);                                                          \
            LANE_SUM(((double)(T)(xr[i] - m)) * ((double)(T)(xr[i] - m)), v);                  \
            T rs = (T)(1.0 / sqrt(v / (double)L + eps));                                       \
            mean[r] = m;                                                                       \
            rstd[r] = rs;                                                                      \
            for (Py_ssize_t i = 0; i < L; i++) {                                               \
                T t = xr[i] - m;                                                               \
                t = t * rs;                                                                    \
                if (has_w) t = t * w[i];                                                       \
                if (has_b) t = t + b[i];                                                       \
                yr[i] = t;                                                                     \
            }                                                                                  \
        }                                                                                      \
    }                                                                                          \
    static void ln_backward_rows_##T(const T *x, const T *g, const T *w, const T *mean,        \
                                     const T *rstd, T *gx, Py_ssize_t rows, Py_ssize_t L,     \
                                     int has_w) {                                              \
        for (Py_ssize_t r = 0; r < rows; r++) {                                                \
            const T *xr = x + r * L, *gr = g + r * L;                                          \
            T *out = gx + r * L;                                                               \
            T m = mean[r], rs = rstd[r];                                                       \
            double a1, a2;                                                                     \
            if (has_w) {                                                                       \
                LANE_SUM((double)(T)(gr[i] * w[i]), a1);                                       \
                LANE_SUM((double)(T)(gr[i] * w[i]) * (double)(T)((T)(xr[i] - m) * rs), a2);    \
            } else {                                                                           \
                LANE_SUM((double)gr[i], a1);                                                   \
                LANE_SUM((double)gr[i] * (double)(T)((T)(xr[i] - m) * rs), a2);                \
            }                                                                                  \
            T k2 = (T)(-a2 / (double)L), k1 = (T)(a1 / (double)L);                             \
            for (Py_ssize_t i = 0; i < L; i++) {                                               \
                T h = xr[i] - m;                                                               \
                h = h * rs;                                                                    \
                h = h * k2;                                                                    \
                h = h - k1;                                                                    \
                T u = has_w ? (T)(gr[i] * w[i]) : gr[i];                                       \
                h = h + u;                                                                     \
                out[i] = h * rs;                                                               \
            }                                                                                  \
        }                                                                                      \
    }                                                                                          \
    static void ln_backward_cols_##T(const T *x, const T *g, const T *mean, const T *rstd,     \
                                     T *gw, T *gb, double *acc, Py_ssize_t j0, Py_ssize_t j1,  \
                                     Py_ssize_t rows, Py_ssize_t L) {                          \
        Py_ssize_t n = j1 - j0;                                                                \
        double *aw = acc, *ab = acc + n;                                                       \
        for (Py_ssize_t r = 0; r < rows; r++) {                                                \
            const T *xr = x + r * L + j0, *gr = g + r * L + j0;                                \
            T m = mean[r], rs = rstd[r];                                                       \
            if (r == 0) {                                                                      \
                for (Py_ssize_t j = 0; j < n; j++) {                                           \
                    aw[j] = (double)gr[j] * (double)(T)((T)(xr[j] - m) * rs);                  \
                    ab[j] = (double)gr[j];                                                     \
                }                                                                              \
                continue;                                                                      \
            }                                                                                  \
            for (Py_ssize_t j = 0; j < n; j++) {                                               \
                aw[j] += (double)gr[j] * (double)(T)((T)(xr[j] - m) * rs);                     \
                ab[j] += (double)gr[j];                                                        \
            }                                                                                  \
        }                                                                                      \
        for (Py_ssize_t j = 0; j < n; j++) {                                                   \
            if (gw) gw[j0 + j] = (T)(rows ? aw[j] : 0.0);                                      \
            if (gb) gb[j0 + j] = (T)(rows ? ab[j] : 0.0);                                      \
        }                                                                                      \
    }
LN_LOOPS(float)
LN_LOOPS(double)

/* columns per part of the column sums: a multiple of 16 (whole cache lines of float32) */
#define LN_COL_BLOCK 64

typedef struct {
    char k;
    const void *x, *g, *w, *b, *mean, *rstd;
    void *y, *gx, *gw, *gb, *mean_out, *rstd_out;
    Py_ssize_t rows, L;
    double eps;
    int has_w, has_b;
} ln_ctx_t;

static void ln_forward_part(void *c, Py_ssize_t lo, Py_ssize_t hi) {
    ln_ctx_t *t = (ln_ctx_t *)c;
    Py_ssize_t off = lo * t->L;
    if (t->k == 'f')
        ln_forward_float((const float *)t->x + off, (const float *)t->w, (const float *)t->b,
                         (float *)t->y + off, (float *)t->mean_out + lo, (float *)t->rstd_out + lo,
                         hi - lo, t->L, t->eps, t->has_w, t->has_b);
    else
        ln_forward_double((const double *)t->x + off, (const double *)t->w,
                          (const double *)t->b, (double *)t->y + off,
                          (double *)t->mean_out + lo, (double *)t->rstd_out + lo, hi - lo, t->L,
                          t->eps, t->has_w, t->has_b);
}

static void ln_rows_part(void *c, Py_ssize_t lo, Py_ssize_t hi) {
    ln_ctx_t *t = (ln_ctx_t *)c;
    Py_ssize_t off = lo * t->L;
    if (t->k == 'f')
        ln_backward_rows_float((const float *)t->x + off, (const float *)t->g + off,
                               (const float *)t->w, (const float *)t->mean + lo,
                               (const float *)t->rstd + lo, (float *)t->gx + off, hi - lo, t->L,
                               t->has_w);
    else
        ln_backward_rows_double((const double *)t->x + off, (const double *)t->g + off,
                                (const double *)t->w, (const double *)t->mean + lo,
                                (const double *)t->rstd + lo, (double *)t->gx + off, hi - lo,
                                t->L, t->has_w);
}

/* blocks lo..hi of LN_COL_BLOCK columns */
static void ln_cols_part(void *c, Py_ssize_t lo, Py_ssize_t hi) {
    ln_ctx_t *t = (ln_ctx_t *)c;
    double acc[2 * LN_COL_BLOCK];
    for (Py_ssize_t blk = lo; blk < hi; blk++) {
        Py_ssize_t j0 = blk * LN_COL_BLOCK, j1 = j0 + LN_COL_BLOCK < t->L ? j0 + LN_COL_BLOCK : t->L;
        if (t->k == 'f')
            ln_backward_cols_float((const float *)t->x, (const float *)t->g,
                                   (const float *)t->mean, (const float *)t->rstd,
                                   (float *)t->gw, (float *)t->gb, acc, j0, j1, t->rows, t->L);
        else
            ln_backward_cols_double((const double *)t->x, (const double *)t->g,
                                    (const double *)t->mean, (const double *)t->rstd,
                                    (double *)t->gw, (double *)t->gb, acc, j0, j1, t->rows,
                                    t->L);
    }
}

/* The buffers of `objs` (None: absent, not got) with their expected lengths in elements and
 * whether written; all present ones one real kind. Returns that kind, or 0 with an error set. */
static char get_optional(PyObject **objs, Py_buffer *views, int count, const Py_ssize_t *lens,
                         const int *writable, int *got) {
    char k = 0;
    for (int i = 0; i < count; i++) got[i] = 0;
    for (int i = 0; i < count; i++) {
        if (objs[i] == Py_None) continue;
        if (get_buffer(objs[i], &views[i], writable[i]) < 0) goto fail;
        got[i] = 1;
        char ki = real_kind(&views[i]);
        if (ki == 0 || (k && ki != k)) {
            PyErr_SetString(PyExc_ValueError, "operands must be float32 or float64 alike");
            goto fail;
        }
        k = ki;
        if (views[i].len != lens[i] * views[i].itemsize) {
            PyErr_Format(PyExc_ValueError, "operand %d must hold %zd values", i, lens[i]);
            goto fail;
        }
    }
    if (k) return k;
    PyErr_SetString(PyExc_ValueError, "no operands");
fail:
    for (int i = 0; i < count; i++)
        if (got[i]) PyBuffer_Release(&views[i]);
    return 0;
}

static void release_optional(Py_buffer *views, int count, const int *got) {
    for (int i = 0; i < count; i++)
        if (got[i]) PyBuffer_Release(&views[i]);
}

static PyObject *layer_norm(PyObject *self, PyObject *args) {
    PyObject *o[6];
    Py_ssize_t rows, L;
    double eps;
    int threads = 1;
    if (!PyArg_ParseTuple(args, "OOOOOOnnd|i", &o[0], &o[1], &o[2], &o[3], &o[4], &o[5], &rows,
                          &L, &eps, &threads))
        return NULL;
    if (rows < 0 || L < 1 || o[0] == Py_None || o[3] == Py_None || o[4] == Py_None ||
        o[5] == Py_None) {
        PyErr_SetString(PyExc_ValueError, "layer_norm: invalid sizes or a missing buffer");
        return NULL;
    }
    Py_buffer v[6];
    int got[6];
    const Py_ssize_t lens[6] = {rows * L, L, L, rows * L, rows, rows};
    const int writable[6] = {0, 0, 0, 1, 1, 1};
    char k = get_optional(o, v, 6, lens, writable, got);
    if (!k) return NULL;
    ln_ctx_t ctx = {k, v[0].buf, NULL, got[1] ? v[1].buf : NULL, got[2] ? v[2].buf : NULL,
                    NULL, NULL, v[3].buf, NULL, NULL, NULL, v[4].buf, v[5].buf, rows, L, eps,
                    got[1], got[2]};
    Py_BEGIN_ALLOW_THREADS
    parallel_run(ln_forward_part, &ctx, rows, threads);
    Py_END_ALLOW_THREADS
    release_optional(v, 6, got);
    Py_RETURN_NONE;
}

static PyObject *layer_norm_backward(PyObject *self, PyObject *args) {
    PyObject *o[8];
    Py_ssize_t rows, L;
    int threads = 1;
    if (!PyArg_ParseTuple(args, "OOOOOOOOnn|i", &o[0], &o[1], &o[2], &o[3], &o[4], &o[5], &o[6],
                          &o[7], &rows, &L, &threads))
        return NULL;
    for (int i = 0; i < 5; i++)
        if (o[i] == Py_None && i != 2) {
            PyErr_SetString(PyExc_ValueError, "layer_norm_backward: x, g, mean and rstd needed");
            return NULL;
        }
    if (rows < 0 || L < 1) {
        PyErr_SetString(PyExc_ValueError, "layer_norm_backward: invalid sizes");
        return NULL;
    }
    Py_buffer v[8];
    int got[8];
    const Py_ssize_t lens[8] = {rows * L, rows * L, L, rows, rows, rows * L, L, L};
    const int writable[8] = {0, 0, 0, 0, 0, 1, 1, 1};
    char k = get_optional(o, v, 8, lens, writable, got);
    if (!k) return NULL;
    ln_ctx_t ctx = {k, v[0].buf, v[1].buf, got[2] ? v[2].buf : NULL, NULL, v[3].buf, v[4].buf,
                    NULL, got[5] ? v[5].buf : NULL, got[6] ? v[6].buf : NULL,
                    got[7] ? v[7].buf : NULL, NULL, NULL, rows, L, 0.0, got[2], 0};
    Py_ssize_t blocks = (L + LN_COL_BLOCK - 1) / LN_COL_BLOCK;
    Py_BEGIN_ALLOW_THREADS
    if (ctx.gx) parallel_run(ln_rows_part, &ctx, rows, threads);
    if (ctx.gw || ctx.gb)
        parallel_run(ln_cols_part, &ctx, blocks, blocks < threads ? (int)blocks : threads);
    Py_END_ALLOW_THREADS
    release_optional(v, 8, got);
    Py_RETURN_NONE;
}

/* --- strided copies of contiguous runs -----------------------------------------------------
 *
 * dst[..., 0:D] = src[..., 0:D] (+ bias[index on axis 1]) for strided views of one shape (up to
 * COPY_RUNS_MAX_DIMS dims, negative strides too) whose last axis is a run of D contiguous
 * elements: the layout changes around a convolution's product (its columns cut from the padded
 * input, its outputs from the padded width, samples and channels swapped), which numpy copies
 * with a transposed, short-run iteration. A copy gives the same bits; the bias add is one
 * rounding, as numpy's. The rows (every index but the last axis's) are split across threads;
 * src and dst must not overlap. */
#define COPY_RUNS_MAX_DIMS 8
typedef struct {
    char k;
    const char *src, *bias;
    char *dst;
    int nd; /* dims before the last */
    Py_ssize_t shape[COPY_RUNS_MAX_DIMS], ss[COPY_RUNS_MAX_DIMS], ds[COPY_RUNS_MAX_DIMS];
    Py_ssize_t D, item;
} copy_runs_ctx_t;

#define COPY_RUN(T)                                                                             \
    do {                                                                                       \
        const T *x = (const T *)sp;                                                            \
        T *y = (T *)dp;                                                                        \
        if (t->bias) {                                                                         \
            T b = ((const T *)t->bias)[idx[1]];                                                \
            for (Py_ssize_t i = 0; i < t->D; i++) y[i] = x[i] + b;                             \
        } else                                                                                 \
            memcpy(y, x, (size_t)t->D * sizeof(T));                                            \
    } while (0)

static void copy_runs_part(void *c, Py_ssize_t lo, Py_ssize_t hi) {
    copy_runs_ctx_t *t = (copy_runs_ctx_t *)c;
    Py_ssize_t idx[COPY_RUNS_MAX_DIMS];
    Py_ssize_t r = lo;
    const char *sp = t->src;
    char *dp = t->dst;
    for (int d = t->nd - 1; d >= 0; d--) { /* row lo's index, then step through the rows */
        idx[d] = r % t->shape[d];
        r /= t->shape[d];
        sp += idx[d] * t->ss[d];
        dp += idx[d] * t->ds[d];
    }
    for (Py_ssize_t row = lo; row < hi; row++) {
        if (t->k == 'f')
            COPY_RUN(float);
        else
            COPY_RUN(double);
        for (int d = t->nd - 1; d >= 0; d--) {
            sp += t->ss[d];
            dp += t->ds[d];
            if (++idx[d] < t->shape[d]) break;
            sp -= t->shape[d] * t->ss[d];
            dp -= t->shape[d] * t->ds[d];
            idx[d] = 0;
        }
    }
}

static PyObject *copy_runs(PyObject *self, PyObject *args) {
    PyObject *so, *dso, *bo;
    int threads = 1;
    if (!PyArg_ParseTuple(args, "OOO|i", &so, &dso, &bo, &threads)) return NULL;
    Py_buffer v[3];
    int got[3] = {0, 0, 0};
    /* src and dst as any strided views (their own shapes and strides bound what is read and
     * written); the bias C-contiguous */
    if (PyObject_GetBuffer(so, &v[0], PyBUF_RECORDS_RO) < 0) goto fail;
    got[0] = 1;
    if (PyObject_GetBuffer(dso, &v[2], PyBUF_RECORDS) < 0) goto fail;
    got[2] = 1;
    if (bo != Py_None) {
        if (get_buffer(bo, &v[1], 0) < 0) goto fail;
        got[1] = 1;
    }
    char k = real_kind(&v[2]);
    if (k == 0 || real_kind(&v[0]) != k || (got[1] && real_kind(&v[1]) != k)) {
        PyErr_SetString(PyExc_ValueError, "operands must be float32 or float64 alike");
        goto fail;
    }
    int nd = v[2].ndim;
    if (nd < 1 || nd > COPY_RUNS_MAX_DIMS + 1 || v[0].ndim != nd || (got[1] && nd < 3)) {
        PyErr_SetString(PyExc_ValueError,
                        "copy_runs: src and dst must have one number of dims (1 to 9; 3 with bias)");
        goto fail;
    }
    Py_ssize_t item = v[2].itemsize, rows = 1;
    for (int i = 0; i < nd; i++)
        if (v[0].shape[i] != v[2].shape[i]) {
            PyErr_SetString(PyExc_ValueError, "copy_runs: src and dst must have one shape");
            goto fail;
        }
    Py_ssize_t D = v[2].shape[nd - 1];
    if (D > 1 && (v[0].strides[nd - 1] != item || v[2].strides[nd - 1] != item)) {
        PyErr_SetString(PyExc_ValueError, "copy_runs: the last axis must be contiguous");
        goto fail;
    }
    if (got[1] && v[1].len != v[2].shape[1] * item) {
        PyErr_SetString(PyExc_ValueError, "copy_runs: bias must hold one value per index of axis 1");
        goto fail;
    }
    copy_runs_ctx_t ctx = {k, v[0].buf, got[1] ? v[1].buf : NULL, v[2].buf, nd - 1};
    for (int i = 0; i < nd - 1; i++) {
        ctx.shape[i] = v[2].shape[i];
        ctx.ss[i] = v[0].strides[i];
        ctx.ds[i] = v[2].strides[i];
        rows *= v[2].shape[i];
    }
    ctx.D = D;
    ctx.item = item;
    if (rows && D) {
        Py_BEGIN_ALLOW_THREADS
        parallel_run(copy_runs_part, &ctx, rows, threads);
        Py_END_ALLOW_THREADS
    }
    release_optional(v, 3, got);
    Py_RETURN_NONE;
fail:
    release_optional(v, 3, got);
    return NULL;
}

/* --- matrix products split across the loops' threads ---------------------------------------
 *
 * When the engine owns the thread budget (kernels.set_num_threads(n, own_blas=True)), numpy's
 * BLAS runs single-threaded and a large product is cut into parts along its larger output dim,
 * each part one BLAS call on one of these threads: no BLAS thread spins beside the engine's
 * loops after a product. kernels.py hands in the addresses of numpy's own cblas_sgemm and
 * cblas_dgemm (found with ctypes) and their integer width. */
typedef void (*sgemm_lp_t)(int, int, int, int, int, int, float, const float *, int, const float *,
                           int, float, float *, int);
typedef void (*sgemm_ilp_t)(int, int, int, long long, long long, long long, float, const float *,
                            long long, const float *, long long, float, float *, long long);
typedef void (*dgemm_lp_t)(int, int, int, int, int, int, double, const double *, int,
                           const double *, int, double, double *, int);
typedef void (*dgemm_ilp_t)(int, int, int, long long, long long, long long, double,
                            const double *, long long, const double *, long long, double,
                            double *, long long);
static void *blas_sgemm = NULL, *blas_dgemm = NULL;
static int blas_ilp64 = 0;
#define CBLAS_ROW_MAJOR 101
#define CBLAS_NO_TRANS 111

static PyObject *set_gemm(PyObject *self, PyObject *args) {
    unsigned long long s, d;
    int ilp64;
    if (!PyArg_ParseTuple(args, "KKp", &s, &d, &ilp64)) return NULL;
    blas_sgemm = (void *)(uintptr_t)s;
    blas_dgemm = (void *)(uintptr_t)d;
    blas_ilp64 = ilp64;
    Py_RETURN_NONE;
}

/* out[b] (m x n) = a[b] (m x k) @ bm[b] (k x n), row-major, for `batch` products (a's or bm's
 * batch stride 0: one matrix for all). A part is a range of products when there are at least as
 * many as parts, else a range of rows (split_rows) or columns of every product. */
typedef struct {
    char kind;
    const void *a, *b;
    void *out;
    Py_ssize_t batch, m, n, k, a_step, b_step;
    int split; /* 0: products, 1: rows, 2: columns */
    int ta, tb; /* a (b) held transposed: k x m (n x k) row-major */
} gemm_ctx_t;

#define CBLAS_TRANS 112
static void gemm_one(char kind, int ta, int tb, const void *a, const void *b, void *out,
                     Py_ssize_t m, Py_ssize_t n, Py_ssize_t k, Py_ssize_t lda, Py_ssize_t ldb,
                     Py_ssize_t ldc) {
    if (m <= 0 || n <= 0) return;
    int tra = ta ? CBLAS_TRANS : CBLAS_NO_TRANS, trb = tb ? CBLAS_TRANS : CBLAS_NO_TRANS;
    if (kind == 'f') {
        if (blas_ilp64)
            ((sgemm_ilp_t)blas_sgemm)(CBLAS_ROW_MAJOR, tra, trb, m, n, k, 1.0f, a, lda, b, ldb,
                                      0.0f, out, ldc);
        else
            ((sgemm_lp_t)blas_sgemm)(CBLAS_ROW_MAJOR, tra, trb, (int)m, (int)n, (int)k, 1.0f, a,
                                     (int)lda, b, (int)ldb, 0.0f, out, (int)ldc);
    } else {
        if (blas_ilp64)
            ((dgemm_ilp_t)blas_dgemm)(CBLAS_ROW_MAJOR, tra, trb, m, n, k, 1.0, a, lda, b, ldb,
                                      0.0, out, ldc);
        else
            ((dgemm_lp_t)blas_dgemm)(CBLAS_ROW_MAJOR, tra, trb, (int)m, (int)n, (int)k, 1.0, a,
                                     (int)lda, b, (int)ldb, 0.0, out, (int)ldc);
    }
}

static void gemm_part(void *c, Py_ssize_t lo, Py_ssize_t hi) {
    gemm_ctx_t *g = (gemm_ctx_t *)c;
    Py_ssize_t size = g->kind == 'f' ? 4 : 8;
    const char *a = (const char *)g->a, *b = (const char *)g->b;
    char *out = (char *)g->out;
    Py_ssize_t lda = g->ta ? g->m : g->k, ldb = g->tb ? g->k : g->n;
    if (g->split == 0) {
        for (Py_ssize_t p = lo; p < hi; p++)
            gemm_one(g->kind, g->ta, g->tb, a + p * g->a_step * size, b + p * g->b_step * size,
                     out + p * g->m * g->n * size, g->m, g->n, g->k, lda, ldb, g->n);
        return;
    }
    /* rows lo..hi of a (columns of a held transposed), or columns lo..hi of b (its rows) */
    Py_ssize_t a_off = g->split == 1 ? lo * (g->ta ? 1 : g->k) : 0;
    Py_ssize_t b_off = g->split == 2 ? lo * (g->tb ? g->k : 1) : 0;
    Py_ssize_t o_off = g->split == 1 ? lo * g->n : lo;
    Py_ssize_t rows = g->split == 1 ? hi - lo : g->m, cols = g->split == 2 ? hi - lo : g->n;
    for (Py_ssize_t p = 0; p < g->batch; p++)
        gemm_one(g->kind, g->ta, g->tb, a + (p * g->a_step + a_off) * size,
                 b + (p * g->b_step + b_off) * size, out + (p * g->m * g->n + o_off) * size,
                 rows, cols, g->k, lda, ldb, g->n);
}

static PyObject *gemm(PyObject *self, PyObject *args) {
    PyObject *ao, *bo, *oo;
    Py_ssize_t batch, m, n, k, a_step, b_step;
    int ta, tb, threads = 1;
    if (!PyArg_ParseTuple(args, "OOOnnnnnnpp|i", &ao, &bo, &oo, &batch, &m, &n, &k, &a_step,
                          &b_step, &ta, &tb, &threads))
        return NULL;
    if (blas_sgemm == NULL || blas_dgemm == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "gemm: set_gemm was not called");
        return NULL;
    }
    if (batch < 0 || m < 0 || n < 0 || k < 1 || (a_step != 0 && a_step != m * k) ||
        (b_step != 0 && b_step != k * n) ||
        (!blas_ilp64 && (m > INT32_MAX || n > INT32_MAX || k > INT32_MAX))) {
        PyErr_SetString(PyExc_ValueError, "gemm: invalid sizes");
        return NULL;
    }
    Py_buffer a, b, out;
    if (get_three(ao, bo, oo, &a, &b, &out, 0) < 0) return NULL;
    char kind = real_kind(&out);
    const char *error = NULL;
    Py_ssize_t na = a_step ? batch : 1, nb = b_step ? batch : 1;
    if (kind == 0 || real_kind(&a) != kind || real_kind(&b) != kind)
        error = "a, b and out must be float32 or float64 alike";
    else if (a.len != na * m * k * a.itemsize || b.len != nb * k * n * b.itemsize ||
             out.len != batch * m * n * out.itemsize)
        error = "a, b and out must hold their products' values";
    if (error) {
        PyErr_SetString(PyExc_ValueError, error);
        release_three(&a, &b, &out);
        return NULL;
    }
    gemm_ctx_t ctx = {kind, a.buf, b.buf, out.buf, batch, m, n, k, a_step, b_step, 0, ta, tb};
    Py_ssize_t count = batch;
    if (threads > 1 && batch < threads) {
        ctx.split = m >= n ? 1 : 2;
        count = m >= n ? m : n;
    }
    Py_BEGIN_ALLOW_THREADS
    parallel_run(gemm_part, &ctx, count, threads);
    Py_END_ALLOW_THREADS
    release_three(&a, &b, &out);
    Py_RETURN_NONE;
}

/* --- softmax rows (the fused attention's passes over its scores) -----------------------------
 *
 * `rows` contiguous rows of L values, in place. kind 0: m = the row's maximum (NaN when it holds
 * a NaN), 0 where m is not finite, + 0 (a zero maximum as +0: which zero numpy's maximum picks
 * depends on its order); row -= m; v[r] = m. kind 1: t = numpy's float sum of the row, 1 where t == 0; row /= t; v[r] = t.
 * kind 2: row -= v[r] (backward's sc -= lse). kind 3: row = (row - v[r]) * p[same place]
 * (backward's dP -= rows; dP *= P). Each operation rounded in the element type, as numpy's. */

/* numpy's sum of n contiguous values (its pairwise_sum, loops_utils.h): fewer than 8 added in
 * order to 0; to 128 in 8 lanes, joined ((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7)), the
 * rest after in order; above, the two halves (the first a multiple of 8 long) summed apart. */
#define PAIRWISE_SUM(T)                                                                         \
    static T pairwise_sum_##T(const T *a, Py_ssize_t n) {                                      \
        if (n < 8) {                                                                           \
            T res = 0;                                                                         \
            for (Py_ssize_t i = 0; i < n; i++) res += a[i];                                    \
            return res;                                                                        \
        }                                                                                      \
        if (n <= 128) {                                                                        \
            T r[8];                                                                            \
            for (int k = 0; k < 8; k++) r[k] = a[k];                                           \
            Py_ssize_t i;                                                                      \
            for (i = 8; i < n - (n % 8); i += 8)                                               \
                for (int k = 0; k < 8; k++) r[k] += a[i + k];                                  \
            T res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));         \
            for (; i < n; i++) res += a[i];                                                    \
            return res;                                                                        \
        }                                                                                      \
        Py_ssize_t n2 = n / 2;                                                                 \
        n2 -= n2 % 8;                                                                          \
        return pairwise_sum_##T(a, n2) + pairwise_sum_##T(a + n2, n - n2);                     \
    }
PAIRWISE_SUM(float)
PAIRWISE_SUM(double)

/* The maximum of n contiguous values, NaN when one is (the maximum is the same in any order;
 * which of two zeros comes out is left open). With SSE2, four (two) lanes at a time. */
#if defined(__SSE2__)
#include <emmintrin.h>
static float row_max_float(const float *a, Py_ssize_t n) {
    __m128 m0 = _mm_set1_ps(-INFINITY), m1 = m0, u = _mm_setzero_ps();
    Py_ssize_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m128 x0 = _mm_loadu_ps(a + i), x1 = _mm_loadu_ps(a + i + 4);
        m0 = _mm_max_ps(x0, m0); /* (a NaN x gives m back: NaNs are told apart by u) */
        m1 = _mm_max_ps(x1, m1);
        u = _mm_or_ps(u, _mm_or_ps(_mm_cmpunord_ps(x0, x0), _mm_cmpunord_ps(x1, x1)));
    }
    float lanes[4], nan[4];
    _mm_storeu_ps(lanes, _mm_max_ps(m0, m1));
    _mm_storeu_ps(nan, u);
    float m = lanes[0];
    int any = 0;
    for (int k = 0; k < 4; k++) {
        m = lanes[k] > m ? lanes[k] : m;
        any |= nan[k] != 0 || nan[k] != nan[k];
    }
    for (; i < n; i++) {
        any |= a[i] != a[i];
        m = a[i] > m ? a[i] : m;
    }
    return any ? NAN : m;
}
static double row_max_double(const double *a, Py_ssize_t n) {
    __m128d m0 = _mm_set1_pd(-INFINITY), m1 = m0, u = _mm_setzero_pd();
    Py_ssize_t i = 0;
    for (; i + 4 <= n; i += 4) {
        __m128d x0 = _mm_loadu_pd(a + i), x1 = _mm_loadu_pd(a + i + 2);
        m0 = _mm_max_pd(x0, m0);
        m1 = _mm_max_pd(x1, m1);
        u = _mm_or_pd(u, _mm_or_pd(_mm_cmpunord_pd(x0, x0), _mm_cmpunord_pd(x1, x1)));
    }
    double lanes[2], nan[2];
    _mm_storeu_pd(lanes, _mm_max_pd(m0, m1));
    _mm_storeu_pd(nan, u);
    double m = lanes[0] > lanes[1] ? lanes[0] : lanes[1];
    int any = nan[0] != 0 || nan[0] != nan[0] || nan[1] != 0 || nan[1] != nan[1];
    for (; i < n; i++) {
        any |= a[i] != a[i];
        m = a[i] > m ? a[i] : m;
    }
    return any ? NAN : m;
}
#else
#define ROW_MAX(T)                                                                              \
    static T row_max_##T(const T *a, Py_ssize_t n) {                                           \
        T m = -(T)INFINITY;                                                                    \
        for (Py_ssize_t i = 0; i < n; i++) {                                                   \
            if (a[i] != a[i]) return (T)NAN;                                                   \
            m = a[i] > m ? a[i] : m;                                                           \
        }                                                                                      \
        return m;                                                                              \
    }
ROW_MAX(float)
ROW_MAX(double)
#endif

#define SOFTMAX_ROWS_LOOP(T)                                                                    \
    static void softmax_rows_##T(T *x, T *v, const T *p, Py_ssize_t rows, Py_ssize_t L,       \
                                 int kind) {                                                   \
        for (Py_ssize_t r = 0; r < rows; r++) {                                                \
            T *row = x + r * L;                                                                \
            if (kind == 0) {                                                                   \
                T m = row_max_##T(row, L);                                                     \
                if (!isfinite(m)) m = 0; /* NaN, +-inf, or no values */                        \
                m += 0; /* -0 as +0 */                                                         \
                for (Py_ssize_t i = 0; i < L; i++) row[i] -= m;                                \
                v[r] = m;                                                                      \
            } else if (kind == 1) {                                                            \
                T t = pairwise_sum_##T(row, L);                                                \
                if (t == 0) t = 1;                                                             \
                for (Py_ssize_t i = 0; i < L; i++) row[i] /= t;                                \
                v[r] = t;                                                                      \
            } else if (kind == 2) {                                                            \
                T m = v[r];                                                                    \
                for (Py_ssize_t i = 0; i < L; i++) row[i] -= m;                                \
            } else {                                                                           \
                T m = v[r];                                                                    \
                const T *pr = p + r * L;                                                       \
                for (Py_ssize_t i = 0; i < L; i++) {                                           \
                    T d = row[i] - m;                                                          \
                    row[i] = d * pr[i];                                                        \
                }                                                                              \
            }                                                                                  \
        }                                                                                      \
    }
SOFTMAX_ROWS_LOOP(float)
SOFTMAX_ROWS_LOOP(double)

typedef struct {
    char k;
    void *x, *v;
    const void *p;
    Py_ssize_t L;
    int kind;
} softmax_ctx_t;
static void softmax_part(void *c, Py_ssize_t lo, Py_ssize_t hi) {
    softmax_ctx_t *t = (softmax_ctx_t *)c;
    if (t->k == 'f')
        softmax_rows_float((float *)t->x + lo * t->L, (float *)t->v + lo,
                           (const float *)t->p + lo * t->L, hi - lo, t->L, t->kind);
    else
        softmax_rows_double((double *)t->x + lo * t->L, (double *)t->v + lo,
                            (const double *)t->p + lo * t->L, hi - lo, t->L, t->kind);
}

static PyObject *softmax_rows(PyObject *self, PyObject *args) {
    PyObject *xo, *vo, *po;
    Py_ssize_t rows, L;
    int kind, threads = 1;
    if (!PyArg_ParseTuple(args, "OOOnni|i", &xo, &vo, &po, &rows, &L, &kind, &threads))
        return NULL;
    if (kind < 0 || kind > 3 || rows < 0 || L < 0) {
        PyErr_SetString(PyExc_ValueError, "softmax_rows: invalid kind or sizes");
        return NULL;
    }
    /* p is read for kind 3 only (else any buffer: x again) */
    PyObject *objs = PyTuple_Pack(3, xo, vo, kind == 3 ? po : xo);
    if (!objs) return NULL;
    Py_buffer b[3];
    const int writable[3] = {1, 1, 0};
    int got = get_many(objs, b, 3, writable);
    Py_DECREF(objs);
    if (got < 0) return NULL;
    char k = real_kind(&b[0]);
    const char *error = NULL;
    if (k == 0 || real_kind(&b[1]) != k || real_kind(&b[2]) != k)
        error = "x, v and p must be float32 or float64 alike";
    else if (b[0].len != rows * L * b[0].itemsize || b[2].len != b[0].len)
        error = "x and p must hold rows * L values";
    else if (b[1].len != rows * b[1].itemsize) error = "v must hold rows values";
    if (error) {
        PyErr_SetString(PyExc_ValueError, error);
        release_many(b, 3);
        return NULL;
    }
    softmax_ctx_t ctx = {k, b[0].buf, b[1].buf, b[2].buf, L, kind};
    Py_BEGIN_ALLOW_THREADS
    parallel_run(softmax_part, &ctx, rows, threads);
    Py_END_ALLOW_THREADS
    release_many(b, 3);
    Py_RETURN_NONE;
}

/* --- the fused attention's forward, float32 (attention.FusedAttention._native_forward) --------
 *
 * For each (batch..., head) slice s, as FusedAttention._chunks and its part compute it on numpy:
 *   qs = q[s] * scale (L x E, rounded in float32);  sc = qs @ k[s]^T (numpy's cblas_sgemm call:
 *   NoTrans, Trans); causal: sc += 0 on and below the diagonal, -inf above;  softmax_rows kind 0
 *   (m[s] = the row maxima);  sc = np.exp(sc) (npexp_f32);  kind 1 (t[s] = the row sums);
 *   y[s] = sc @ v[s] (NoTrans, NoTrans);
 * numpy's own products are these BLAS calls with these arguments (its matmul hands a 2-D
 * product whose dims are all >= 2 and whose rows are unit-stride to gemm), so the bits are the
 * numpy path's. q, k, v and y are addressed by their first elements' addresses and per-slice
 * byte offsets (kernels checks the layouts); rows of E (Dv) contiguous floats at a row stride. */
typedef struct {
    const char *q, *k, *v;
    char *y;
    const long long *oq, *ok, *ov, *oy;
    float *m, *t;
    Py_ssize_t L, S, E, Dv, rq, rk, rv, ry; /* rows: strides in elements */
    float scale;
    int causal;
    int failed;
} attf_ctx;

/* A slice's scores as FusedAttention._chunks makes them: qs = q * scale (L x E, in float32),
 * sc = qs @ k^T (numpy's cblas_sgemm call: NoTrans, Trans), the causal -inf added above the
 * diagonal (+0 on and below it, as numpy's add of the mask). */
static void att_scores(const float *q, Py_ssize_t rq, const char *k, Py_ssize_t rk,
                       Py_ssize_t L, Py_ssize_t S, Py_ssize_t E, float scale, int causal,
                       float *qs, float *sc) {
    for (Py_ssize_t i = 0; i < L; i++)
        for (Py_ssize_t e = 0; e < E; e++) qs[i * E + e] = q[i * rq + e] * scale;
    gemm_one('f', 0, 1, qs, k, sc, L, S, E, E, rk, S);
    if (causal)
        for (Py_ssize_t i = 0; i < L; i++)
            for (Py_ssize_t j = 0; j < S; j++) sc[i * S + j] += j <= i ? 0.0f : -INFINITY;
}

static void attf_part(void *c, Py_ssize_t lo, Py_ssize_t hi) {
    attf_ctx *a = (attf_ctx *)c;
    Py_ssize_t L = a->L, S = a->S, E = a->E;
    float *qs = malloc(sizeof(float) * (size_t)(L * E + L * S));
    if (qs == NULL) {
        a->failed = 1;
        return;
    }
    float *sc = qs + L * E;
    for (Py_ssize_t s = lo; s < hi; s++) {
        att_scores((const float *)(a->q + a->oq[s]), a->rq, a->k + a->ok[s], a->rk, L, S, E,
                   a->scale, a->causal, qs, sc);
        softmax_rows_float(sc, a->m + s * L, NULL, L, S, 0);
        exp_f32_loop(sc, sc, L * S);
        softmax_rows_float(sc, a->t + s * L, NULL, L, S, 1);
        gemm_one('f', 0, 0, sc, a->v + a->ov[s], a->y + a->oy[s], L, a->Dv, S, S, a->rv, a->ry);
    }
    free(qs);
}

/* The compiled attention's arrays: offsets int64 [arrays, slices] (each array's slices' byte
 * offsets), then two float32 [slices * L] (`names`: written when `write`); held on success
 * (release_many(b, 3)), their slice count in *slices. */
static int att_arrays(PyObject *oo, PyObject *ao, PyObject *bo, int write, int arrays,
                      Py_ssize_t L, const char *names, Py_buffer *b, Py_ssize_t *slices) {
    const int writable[3] = {0, write, write};
    PyObject *objs = PyTuple_Pack(3, oo, ao, bo);
    if (objs == NULL) return -1;
    int got = get_many(objs, b, 3, writable);
    Py_DECREF(objs);
    if (got < 0) return -1;
    Py_ssize_t n = b[0].len / (8 * arrays);
    if (!is_int64(&b[0]) || b[0].len != n * 8 * arrays)
        PyErr_Format(PyExc_ValueError, "offsets must be int64 [%d, slices]", arrays);
    else if (real_kind(&b[1]) != 'f' || real_kind(&b[2]) != 'f' || b[1].len != n * L * 4 ||
             b[2].len != n * L * 4)
        PyErr_Format(PyExc_ValueError, "%s must be float32 [slices * L]", names);
    else {
        *slices = n;
        return 0;
    }
    release_many(b, 3);
    return -1;
}

/* attention_forward_f32(q, k, v, y, offsets, m, t, dims, scale, causal, threads=1):
 * q, k, v, y: the first elements' addresses; offsets: int64 [4, slices] byte offsets of each
 * slice in q, k, v, y; m, t: float32 [slices * L] (the row maxima and sums); dims: (L, S, E,
 * Dv, rq, rk, rv, ry). */
static PyObject *attention_forward_f32(PyObject *self, PyObject *args) {
    unsigned long long q, k, v, y;
    PyObject *oo, *mo, *to;
    Py_ssize_t L, S, E, Dv, rq, rk, rv, ry;
    double scale;
    int causal, threads = 1;
    if (!PyArg_ParseTuple(args, "KKKKOOO(nnnnnnnn)dp|i", &q, &k, &v, &y, &oo, &mo, &to, &L, &S,
                          &E, &Dv, &rq, &rk, &rv, &ry, &scale, &causal, &threads))
        return NULL;
    if (blas_sgemm == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "attention_forward_f32: set_gemm was not called");
        return NULL;
    }
    if (L < 1 || S < 1 || E < 1 || Dv < 1 || rq < E || rk < E || rv < Dv || ry < Dv ||
        (!blas_ilp64 && (L > INT32_MAX || S > INT32_MAX || E > INT32_MAX || rq > INT32_MAX ||
                         rk > INT32_MAX || rv > INT32_MAX || ry > INT32_MAX))) {
        PyErr_SetString(PyExc_ValueError, "attention_forward_f32: invalid sizes");
        return NULL;
    }
    Py_buffer b[3];
    Py_ssize_t slices;
    if (att_arrays(oo, mo, to, 1, 4, L, "m and t", b, &slices) < 0) return NULL;
    const long long *off = (const long long *)b[0].buf;
    attf_ctx ctx = {(const char *)(uintptr_t)q, (const char *)(uintptr_t)k,
                    (const char *)(uintptr_t)v, (char *)(uintptr_t)y, off, off + slices,
                    off + 2 * slices, off + 3 * slices, (float *)b[1].buf, (float *)b[2].buf,
                    L, S, E, Dv, rq, rk, rv, ry, (float)scale, causal, 0};
    Py_BEGIN_ALLOW_THREADS
    parallel_run(attf_part, &ctx, slices, threads);
    Py_END_ALLOW_THREADS
    release_many(b, 3);
    if (ctx.failed) return PyErr_NoMemory();
    Py_RETURN_NONE;
}

/* The fused attention's float32 backward per slice s (FusedAttention._native_backward), as
 * _chunks (given the log-sum-exp) and _grads compute it on numpy:
 *   P = exp(q[s] * scale @ k[s]^T (+ causal) - lse[s])   (softmax_rows kind 2, npexp_f32)
 *   gv[s] = P^T @ g[s]          (Trans, NoTrans)
 *   dP = gsc[s] @ v[s]^T        (NoTrans, Trans; gsc = g * scale, made by the caller)
 *   dS = (dP - rows[s]) * P     (kind 3; rows = einsum(gsc, y) per row, made by the caller)
 *   gq[s] = dS @ k[s]           (NoTrans, NoTrans)
 *   gk[s] = dS^T @ q[s]         (Trans, NoTrans)
 * a gradient whose address is 0 is not made. */
typedef struct {
    const char *q, *k, *v, *g, *gsc;
    char *gq, *gk, *gv;
    const long long *off; /* [8, slices]: q, k, v, g, gsc, gq, gk, gv */
    const float *lse, *rows;
    Py_ssize_t slices, L, S, E, Dv, rq, rk, rv, rgq, rgk, rgv, rg, rgsc;
    float scale;
    int causal;
    int failed;
} attb_ctx;

static void attb_part(void *c, Py_ssize_t lo, Py_ssize_t hi) {
    attb_ctx *a = (attb_ctx *)c;
    Py_ssize_t L = a->L, S = a->S, E = a->E, Dv = a->Dv, n = a->slices;
    float *qs = malloc(sizeof(float) * (size_t)(L * E + 2 * L * S));
    if (qs == NULL) {
        a->failed = 1;
        return;
    }
    float *P = qs + L * E, *dP = P + L * S;
    for (Py_ssize_t s = lo; s < hi; s++) {
        att_scores((const float *)(a->q + a->off[s]), a->rq, a->k + a->off[n + s], a->rk, L, S,
                   E, a->scale, a->causal, qs, P);
        softmax_rows_float(P, (float *)(a->lse + s * L), NULL, L, S, 2);
        exp_f32_loop(P, P, L * S);
        const char *g = a->g + a->off[3 * n + s];
        if (a->gv)
            gemm_one('f', 1, 0, P, g, a->gv + a->off[7 * n + s], S, Dv, L, S, a->rg, a->rgv);
        gemm_one('f', 0, 1, a->gsc + a->off[4 * n + s], a->v + a->off[2 * n + s], dP, L, S, Dv,
                 a->rgsc, a->rv, S);
        softmax_rows_float(dP, (float *)(a->rows + s * L), P, L, S, 3);
        if (a->gq)
            gemm_one('f', 0, 0, dP, a->k + a->off[n + s], a->gq + a->off[5 * n + s], L, E, S, S,
                     a->rk, a->rgq);
        if (a->gk)
            gemm_one('f', 1, 0, dP, a->q + a->off[s], a->gk + a->off[6 * n + s], S, E, L, S,
                     a->rq, a->rgk);
    }
    free(qs);
}

/* attention_backward_f32(addresses, offsets, lse, rows, dims, scale, causal, threads=1):
 * addresses: (q, k, v, g, gsc, gq, gk, gv), 0 for a gradient not made; offsets: int64 [8,
 * slices] byte offsets of each slice; lse, rows: float32 [slices * L]; dims: (L, S, E, Dv, rq,
 * rk, rv, rgq, rgk, rgv, rg, rgsc), row strides in elements. */
static PyObject *attention_backward_f32(PyObject *self, PyObject *args) {
    unsigned long long ad[8];
    PyObject *oo, *lo, *ro;
    Py_ssize_t L, S, E, Dv, rq, rk, rv, rgq, rgk, rgv, rg, rgsc;
    double scale;
    int causal, threads = 1;
    if (!PyArg_ParseTuple(args, "(KKKKKKKK)OOO(nnnnnnnnnnnn)dp|i", &ad[0], &ad[1], &ad[2],
                          &ad[3], &ad[4], &ad[5], &ad[6], &ad[7], &oo, &lo, &ro, &L, &S, &E, &Dv,
                          &rq, &rk, &rv, &rgq, &rgk, &rgv, &rg, &rgsc, &scale, &causal, &threads))
        return NULL;
    if (blas_sgemm == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "attention_backward_f32: set_gemm was not called");
        return NULL;
    }
    if (L < 1 || S < 1 || E < 1 || Dv < 1 || rq < E || rk < E || rv < Dv || rg < Dv ||
        rgsc < Dv || (ad[5] && rgq < E) || (ad[6] && rgk < E) || (ad[7] && rgv < Dv) ||
        (!blas_ilp64 && (L > INT32_MAX || S > INT32_MAX || E > INT32_MAX || rq > INT32_MAX ||
                         rk > INT32_MAX || rv > INT32_MAX || rgq > INT32_MAX ||
                         rgk > INT32_MAX || rgv > INT32_MAX))) {
        PyErr_SetString(PyExc_ValueError, "attention_backward_f32: invalid sizes");
        return NULL;
    }
    Py_buffer b[3];
    Py_ssize_t slices;
    if (att_arrays(oo, lo, ro, 0, 8, L, "lse and rows", b, &slices) < 0) return NULL;
    attb_ctx ctx = {(const char *)(uintptr_t)ad[0], (const char *)(uintptr_t)ad[1],
                    (const char *)(uintptr_t)ad[2], (const char *)(uintptr_t)ad[3],
                    (const char *)(uintptr_t)ad[4], (char *)(uintptr_t)ad[5],
                    (char *)(uintptr_t)ad[6], (char *)(uintptr_t)ad[7],
                    (const long long *)b[0].buf, (const float *)b[1].buf,
                    (const float *)b[2].buf, slices, L, S, E, Dv, rq, rk, rv, rgq, rgk, rgv,
                    rg, rgsc, (float)scale, causal, 0};
    Py_BEGIN_ALLOW_THREADS
    parallel_run(attb_part, &ctx, slices, threads);
    Py_END_ALLOW_THREADS
    release_many(b, 3);
    if (ctx.failed) return PyErr_NoMemory();
    Py_RETURN_NONE;
}

/* --- a convolution's forward when its inner dim is small (Conv2d._direct) ----------------------
 *
 * y[n, o] = sum over (c, i, j) of w[o, c, i, j] * xpad[n, c, y + i, x + j], then + b[o]: stride
 * 1, no dilation, one group, float32, an inner dim C*kh*kw of at most a few dozen (an image's
 * first layer), where the columns and a BLAS call per sample cost more than the products. Each
 * output is one fused multiply-add after another in (c, i, j) order from 0, then the bias
 * added: the same on any thread count (often the im2col path's bits too: OpenBLAS's kernel
 * sums a short inner dim in that order, though not for every size). Eight output channels by
 * 32 outputs of a row at a time in AVX512F registers; samples split across the loops' threads,
 * each chunk padding its samples into a stage of its own. AVX512F only (conv2d_direct_avx512
 * answers whether it runs here). */
typedef struct {
    const float *x, *wt, *b;
    float *y, *stages;
    const Py_ssize_t *taps; /* tap (c, i, j)'s offset in the stage from an output's position */
    Py_ssize_t N, C, H, W, O, kh, kw, pt, pl, OH, OW, sh, sw, Hp, Wpad, Wq, K, stage_len, parts;
} convd_ctx;

#define CONVD_OB 8 /* output channels a step */
#define CONVD_V 3  /* vectors of 16 outputs a step (along a row, then on the next rows) */
#ifdef HAVE_EXP_AVX512
/* Sample n into the stage [C, Hp, sw, Wq]: padded position (row, q*sw + r) at [row, r, q] (the
 * columns one kernel column reads at a stride of sw lie side by side); rows and columns past
 * what the outputs read are left out. The rest of the stage stays zero. */
static void convd_load(const convd_ctx *a, float *xp, Py_ssize_t n) {
    Py_ssize_t sw = a->sw, Wq = a->Wq, line = sw * Wq;
    for (Py_ssize_t c = 0; c < a->C; c++)
        for (Py_ssize_t r = 0; r < a->H; r++) {
            Py_ssize_t pr = r + a->pt;
            if (pr >= a->Hp) break;
            const float *src = a->x + ((n * a->C + c) * a->H + r) * a->W;
            float *dst = xp + (c * a->Hp + pr) * line;
            Py_ssize_t width = a->W < a->Wpad - a->pl ? a->W : a->Wpad - a->pl;
            if (width <= 0) break; /* (padding past every column the outputs read) */
            if (sw == 1) {
                memcpy(dst + a->pl, src, (size_t)width * 4);
                continue;
            }
            for (Py_ssize_t r = 0; r < sw; r++) { /* residue r: columns f0, f0 + sw, ... */
                Py_ssize_t f0 = ((r - a->pl) % sw + sw) % sw;
                float *run = dst + r * Wq + (f0 + a->pl) / sw;
                for (Py_ssize_t f = f0, q = 0; f < width; f += sw, q++) run[q] = src[f];
            }
        }
}

__attribute__((target("avx512f")))
static void convd_sample(const convd_ctx *a, float *xp, Py_ssize_t n) {
    Py_ssize_t O = a->O, OH = a->OH, OW = a->OW, K = a->K, sh = a->sh;
    Py_ssize_t line = a->sw * a->Wq; /* a padded row: sw runs of Wq (column q*sw + r) */
    convd_load(a, xp, n);
    Py_ssize_t per_row = (OW + 15) / 16, total = OH * per_row;
    for (Py_ssize_t o0 = 0; o0 < O; o0 += CONVD_OB) {
        const float *wb = a->wt + (o0 / CONVD_OB) * K * CONVD_OB;
        for (Py_ssize_t s0 = 0; s0 < total; s0 += CONVD_V) {
            const float *base[CONVD_V];
            Py_ssize_t out_at[CONVD_V];
            __mmask16 keep[CONVD_V];
            for (int v = 0; v < CONVD_V; v++) {
                Py_ssize_t s = s0 + v < total ? s0 + v : s0; /* (a spare slot: not stored) */
                Py_ssize_t yy = s / per_row, x0 = (s % per_row) * 16, rem = OW - x0;
                base[v] = xp + yy * sh * line + x0;
                out_at[v] = yy * OW + x0;
                keep[v] = s0 + v >= total ? (__mmask16)0
                          : rem >= 16    ? (__mmask16)0xFFFF
                                         : (__mmask16)((1u << rem) - 1);
            }
            __m512 acc[CONVD_OB][CONVD_V];
            for (int q = 0; q < CONVD_OB; q++)
                for (int v = 0; v < CONVD_V; v++) acc[q][v] = _mm512_setzero_ps();
            for (Py_ssize_t k = 0; k < K; k++) {
                __m512 xv[CONVD_V];
                Py_ssize_t at = a->taps[k];
                for (int v = 0; v < CONVD_V; v++) xv[v] = _mm512_loadu_ps(base[v] + at);
                const float *wk = wb + k * CONVD_OB;
                for (int q = 0; q < CONVD_OB; q++) {
                    __m512 wv = _mm512_set1_ps(wk[q]);
                    for (int v = 0; v < CONVD_V; v++)
                        acc[q][v] = _mm512_fmadd_ps(wv, xv[v], acc[q][v]);
                }
            }
            for (int q = 0; q < CONVD_OB && o0 + q < O; q++) {
                float *plane = a->y + (n * O + o0 + q) * OH * OW;
                __m512 bv = a->b ? _mm512_set1_ps(a->b[o0 + q]) : _mm512_setzero_ps();
                for (int v = 0; v < CONVD_V; v++) {
                    __m512 r = a->b ? _mm512_add_ps(acc[q][v], bv) : acc[q][v];
                    _mm512_mask_storeu_ps(plane + out_at[v], keep[v], r);
                }
            }
        }
    }
}

/* Part p: its share of the samples on its own stage (C x Hp x sw x Wq floats of the caller's
 * workspace), zeroed once; each sample overwrites the same inner positions. */
static void convd_part(void *c, Py_ssize_t lo, Py_ssize_t hi) {
    convd_ctx *a = (convd_ctx *)c;
    for (Py_ssize_t p = lo; p < hi; p++) {
        float *xp = a->stages + p * a->stage_len;
        memset(xp, 0, sizeof(float) * (size_t)a->stage_len);
        for (Py_ssize_t n = a->N * p / a->parts; n < a->N * (p + 1) / a->parts; n++)
            convd_sample(a, xp, n);
    }
}
#endif

static PyObject *conv2d_direct_avx512(PyObject *self, PyObject *args) {
#ifdef HAVE_EXP_AVX512
    if (exp_avx512) Py_RETURN_TRUE;
#endif
    Py_RETURN_FALSE;
}

/* A direct convolution's dims, as conv2d_direct and the grad_W entries take them: (N, C, H, W,
 * O, kh, kw, pt, pl, OH, OW, sh, sw) with OH = (H + pt + pb - kh) / sh + 1 and OW alike; Hp,
 * Wpad: the padded rows and columns the outputs read; K = C kh kw; Wq = Wpad / sw rounded up,
 * and stage, the floats of every sample's stage [C, Hp, sw, Wq] (the grad_W entries'). */
typedef struct {
    Py_ssize_t N, C, H, W, O, kh, kw, pt, pl, OH, OW, sh, sw, Hp, Wpad, Wq, K, stage;
} conv_dims;

static int conv_dims_parse(PyObject *dims, conv_dims *a, const char *name) {
    if (!PyArg_ParseTuple(dims, "nnnnnnnnnnnnn", &a->N, &a->C, &a->H, &a->W, &a->O, &a->kh, &a->kw,
                          &a->pt, &a->pl, &a->OH, &a->OW, &a->sh, &a->sw))
        return -1;
    if (a->N < 0 || a->C < 1 || a->H < 1 || a->W < 1 || a->O < 1 || a->kh < 1 || a->kw < 1 ||
        a->pt < 0 || a->pl < 0 || a->OH < 1 || a->OW < 1 || a->sh < 1 || a->sw < 1 ||
        (a->OH - 1) * a->sh + a->kh > a->H + a->pt + a->kh ||
        (a->OW - 1) * a->sw + a->kw > a->W + a->pl + a->kw) {
        PyErr_Format(PyExc_ValueError, "%s: invalid sizes", name);
        return -1;
    }
    a->Hp = (a->OH - 1) * a->sh + a->kh;
    a->Wpad = (a->OW - 1) * a->sw + a->kw;
    a->Wq = (a->Wpad + a->sw - 1) / a->sw;
    a->K = a->C * a->kh * a->kw;
    a->stage = a->N * a->C * a->Hp * a->sw * a->Wq;
    return 0;
}

/* Tap k = (c, i, j)'s offset in a stage [C, Hp, sw, Wq] from its output's first input: padded
 * column q*sw + r lies at [.., r, q]. */
static inline Py_ssize_t conv_tap(const conv_dims *a, Py_ssize_t k, Py_ssize_t Wq) {
    Py_ssize_t c = k / (a->kh * a->kw), i = k / a->kw % a->kh, j = k % a->kw;
    return ((c * a->Hp + i) * a->sw + j % a->sw) * Wq + j / a->sw;
}

/* The workspace of conv2d_direct, in floats: the weights in blocks of 8 output channels
 * ([O/8 rounded up][K][8]), then a stage per part ([C][Hp][sw][Wq]: the padded rows and
 * columns the outputs read, split by the stride, runs 16 longer for the loads past them). */
static void convd_sizes(const conv_dims *a, Py_ssize_t *weights, Py_ssize_t *stage) {
    *weights = (a->O + CONVD_OB - 1) / CONVD_OB * CONVD_OB * a->K;
    *stage = a->C * a->Hp * a->sw * (a->Wq + 16);
}

/* conv2d_direct_work(dims, parts): the floats conv2d_direct's workspace takes. */
static PyObject *conv2d_direct_work(PyObject *self, PyObject *args) {
    PyObject *dims;
    conv_dims a;
    Py_ssize_t parts, weights, stage;
    if (!PyArg_ParseTuple(args, "O!n", &PyTuple_Type, &dims, &parts) ||
        conv_dims_parse(dims, &a, "conv2d_direct_work") < 0)
        return NULL;
    convd_sizes(&a, &weights, &stage);
    return PyLong_FromSsize_t(weights + parts * stage);
}

/* conv2d_direct(x, w, b, y, dims, work, parts): x [N, C, H, W], w [O, C, kh, kw], b [O] or
 * None, y [N, O, OH, OW], all contiguous float32; dims (N, C, H, W, O, kh, kw, pt, pl, OH, OW,
 * sh, sw) with OH = (H + pt + pb - kh) / sh + 1 and OW alike; work: float32, the workspace for
 * `parts` parts (conv2d_direct_work), each part one thread's share of the samples. */
static PyObject *conv2d_direct(PyObject *self, PyObject *args) {
    PyObject *xo, *wo, *bo, *yo, *ko, *dims;
    conv_dims a;
    int parts = 1;
    if (!PyArg_ParseTuple(args, "OOOOO!O|i", &xo, &wo, &bo, &yo, &PyTuple_Type, &dims, &ko,
                          &parts) ||
        conv_dims_parse(dims, &a, "conv2d_direct") < 0)
        return NULL;
#ifndef HAVE_EXP_AVX512
    PyErr_SetString(PyExc_RuntimeError, "conv2d_direct: built without AVX512F");
    return NULL;
#else
    if (!exp_avx512) {
        PyErr_SetString(PyExc_RuntimeError, "conv2d_direct: this processor has no AVX512F");
        return NULL;
    }
    if (parts < 1) {
        PyErr_SetString(PyExc_ValueError, "conv2d_direct: invalid sizes");
        return NULL;
    }
    Py_ssize_t N = a.N, C = a.C, H = a.H, W = a.W, O = a.O, OH = a.OH, OW = a.OW, K = a.K;
    Py_buffer b[5];
    int has_bias = bo != Py_None;
    PyObject *objs = has_bias ? PyTuple_Pack(5, xo, wo, yo, ko, bo) : PyTuple_Pack(4, xo, wo, yo, ko);
    if (objs == NULL) return NULL;
    static const int writable[5] = {0, 0, 1, 1, 0};
    int got = get_many(objs, b, 4 + has_bias, writable);
    Py_DECREF(objs);
    if (got < 0) return NULL;
    const char *why = NULL;
    Py_ssize_t weights, stage_len;
    convd_sizes(&a, &weights, &stage_len);
    for (int i = 0; i < 4 + has_bias; i++)
        if (real_kind(&b[i]) != 'f') why = "x, w, y, work and b must be contiguous float32";
    if (!why && (b[0].len != N * C * H * W * 4 || b[1].len != O * K * 4 ||
                 b[2].len != N * O * OH * OW * 4 || (has_bias && b[4].len != O * 4)))
        why = "x, w, b and y must hold [N, C, H, W], [O, C, kh, kw], [O], [N, O, OH, OW]";
    if (!why && b[3].len != (weights + parts * stage_len) * 4)
        why = "work must hold conv2d_direct_work(dims, parts) floats";
    if (!why) {
        float *wt = (float *)b[3].buf;
        const float *w = (const float *)b[1].buf;
        memset(wt, 0, sizeof(float) * (size_t)weights);
        for (Py_ssize_t o = 0; o < O; o++)
            for (Py_ssize_t k = 0; k < K; k++)
                wt[((o / CONVD_OB) * K + k) * CONVD_OB + o % CONVD_OB] = w[o * K + k];
        Py_ssize_t Wq = a.Wq + 16; /* (runs 16 longer for the loads past them) */
        Py_ssize_t *taps = malloc(sizeof(Py_ssize_t) * (size_t)K);
        if (taps == NULL) {
            release_many(b, 4 + has_bias);
            return PyErr_NoMemory();
        }
        for (Py_ssize_t k = 0; k < K; k++) taps[k] = conv_tap(&a, k, Wq);
        convd_ctx ctx = {(const float *)b[0].buf, wt, has_bias ? (const float *)b[4].buf : NULL,
                         (float *)b[2].buf, wt + weights, taps, N, C, H, W, O, a.kh, a.kw, a.pt,
                         a.pl, OH, OW, a.sh, a.sw, a.Hp, a.Wpad, Wq, K, stage_len, parts};
        Py_BEGIN_ALLOW_THREADS
        parallel_run(convd_part, &ctx, parts, parts);
        Py_END_ALLOW_THREADS
        free(taps);
    }
    release_many(b, 4 + has_bias);
    if (why) {
        PyErr_SetString(PyExc_ValueError, why);
        return NULL;
    }
    Py_RETURN_NONE;
#endif
}

/* conv2d_direct_grad_w: grad_W of the same convolutions, without columns:
 *   dw[o, (c, i, j)] = sum over n, y, x of g[n, o, y, x] * xpad[n, c, y + i, x + j]
 * Tiles of 4 output channels by 6 taps hold 16-lane partial sums in registers; for each sample
 * in turn (its g and padded input in cache) every tile of a part sweeps the sample's output
 * positions, row by row, 16 at a time (the row's tail masked to zero in both operands), its
 * sums kept in memory between samples; at the end each (o, tap)'s 16 lanes are added in one
 * fixed order. Each tile belongs to one part, so the sums do not depend on the thread count.
 * xpad: the input zero-padded as conv2d_direct's stage, [N, C, Hp, sw, Wq]: padded position
 * (row, q*sw + r) at [row, r, q] (Hp = (OH - 1) sh + kh rows). */
#define CONVW_OB 4
#define CONVW_KB 6
typedef struct {
    const float *xpad, *g;
    float *dw, *sums;
    Py_ssize_t N, C, O, kh, kw, OH, OW, sh, sw, Hp, Wq, K, oblocks, kblocks, parts;
    const conv_dims *d;
} convw_ctx;

#ifdef HAVE_EXP_AVX512
__attribute__((target("avx512f")))
static void convw_part(void *c, Py_ssize_t lo, Py_ssize_t hi) {
    convw_ctx *a = (convw_ctx *)c;
    Py_ssize_t tiles = a->oblocks * a->kblocks;
    for (Py_ssize_t part = lo; part < hi; part++) {
        Py_ssize_t t0 = tiles * part / a->parts, t1 = tiles * (part + 1) / a->parts;
        if (t1 <= t0) continue;
        float *sums = a->sums + t0 * CONVW_OB * CONVW_KB * 16;
        memset(sums, 0, sizeof(float) * (size_t)((t1 - t0) * CONVW_OB * CONVW_KB * 16));
        Py_ssize_t OH = a->OH, OW = a->OW, Hp = a->Hp, O = a->O, K = a->K;
        Py_ssize_t sw = a->sw, Wq = a->Wq, line = sw * Wq;
        /* samples in blocks whose g and stage fit about 1 MiB (in cache while every tile of
         * the part visits them): a tile's sums stay in registers through the block */
        Py_ssize_t per_sample = (O * OH * OW + a->C * Hp * line) * 4;
        Py_ssize_t nb = per_sample >= (1 << 20) ? 1 : (1 << 20) / per_sample;
        for (Py_ssize_t n0 = 0; n0 < a->N; n0 += nb) {
            Py_ssize_t n1 = n0 + nb < a->N ? n0 + nb : a->N;
            for (Py_ssize_t t = t0; t < t1; t++) {
                Py_ssize_t o0 = (t / a->kblocks) * CONVW_OB, k0 = (t % a->kblocks) * CONVW_KB;
                Py_ssize_t off[CONVW_KB];
                for (int u = 0; u < CONVW_KB; u++) {
                    Py_ssize_t k = k0 + u < K ? k0 + u : k0; /* (a spare tap: not stored) */
                    off[u] = conv_tap(a->d, k, Wq);
                }
                float *mine = sums + (t - t0) * CONVW_OB * CONVW_KB * 16;
                __m512 acc[CONVW_OB][CONVW_KB];
                for (int q = 0; q < CONVW_OB; q++)
                    for (int u = 0; u < CONVW_KB; u++)
                        acc[q][u] = _mm512_loadu_ps(mine + (q * CONVW_KB + u) * 16);
                for (Py_ssize_t n = n0; n < n1; n++) {
                    const float *xs = a->xpad + n * a->C * Hp * line;
                    /* (a channel past O reads channel o0's g: its sums are not stored) */
                    const float *gq[CONVW_OB];
                    for (int q = 0; q < CONVW_OB; q++)
                        gq[q] = a->g + (n * O + (o0 + q < O ? o0 + q : o0)) * OH * OW;
                    Py_ssize_t full = OW / 16 * 16;
                    __mmask16 tail = (__mmask16)((1u << (OW - full)) - 1);
                    for (Py_ssize_t y = 0; y < OH; y++) {
                        const float *xr = xs + y * a->sh * line;
                        Py_ssize_t gy = y * OW;
                        for (Py_ssize_t x0 = 0; x0 < full; x0 += 16) {
                            __m512 gv[CONVW_OB];
                            for (int q = 0; q < CONVW_OB; q++)
                                gv[q] = _mm512_loadu_ps(gq[q] + gy + x0);
                            for (int u = 0; u < CONVW_KB; u++) {
                                __m512 xv = _mm512_loadu_ps(xr + off[u] + x0);
                                for (int q = 0; q < CONVW_OB; q++)
                                    acc[q][u] = _mm512_fmadd_ps(gv[q], xv, acc[q][u]);
                            }
                        }
                        if (tail) { /* the row's last outputs, the rest of both operands 0 */
                            __m512 gv[CONVW_OB];
                            for (int q = 0; q < CONVW_OB; q++)
                                gv[q] = _mm512_maskz_loadu_ps(tail, gq[q] + gy + full);
                            for (int u = 0; u < CONVW_KB; u++) {
                                __m512 xv = _mm512_maskz_loadu_ps(tail, xr + off[u] + full);
                                for (int q = 0; q < CONVW_OB; q++)
                                    acc[q][u] = _mm512_fmadd_ps(gv[q], xv, acc[q][u]);
                            }
                        }
                    }
                }
                for (int q = 0; q < CONVW_OB; q++)
                    for (int u = 0; u < CONVW_KB; u++)
                        _mm512_storeu_ps(mine + (q * CONVW_KB + u) * 16, acc[q][u]);
            }
        }
        for (Py_ssize_t t = t0; t < t1; t++) {
            Py_ssize_t o0 = (t / a->kblocks) * CONVW_OB, k0 = (t % a->kblocks) * CONVW_KB;
            const float *mine = sums + (t - t0) * CONVW_OB * CONVW_KB * 16;
            for (int q = 0; q < CONVW_OB && o0 + q < O; q++)
                for (int u = 0; u < CONVW_KB && k0 + u < K; u++)
                    a->dw[(o0 + q) * K + k0 + u] =
                        _mm512_reduce_add_ps(_mm512_loadu_ps(mine + (q * CONVW_KB + u) * 16));
        }
    }
}
#endif

/* The grad_W entries' common part: arguments (x, g, dw, dims, work, threads=1) with x [N, C,
 * H, W], g [N, O, OH, OW], dw [O, C, kh, kw] contiguous float32 and dims as conv_dims_parse
 * reads them; the workspace starts with the stage [N, C, Hp, sw, Wq] (conv2d_direct's, its
 * runs not lengthened), each sample zero-padded into it by convw_stage on the loops' threads. */
typedef struct {
    Py_buffer b[4];
    conv_dims d;
    int threads;
} convw_args;

/* Parse and check (x, g, dw, dims, work, threads=1), work holding `work(a)` floats; on success
 * the four buffers are held (release_many(a->b, 4)). */
static int convw_parse(PyObject *args, convw_args *a, const char *name,
                       Py_ssize_t (*work)(const convw_args *)) {
    PyObject *xo, *go, *wo, *dims, *ko;
    a->threads = 1;
    if (!PyArg_ParseTuple(args, "OOOO!O|i", &xo, &go, &wo, &PyTuple_Type, &dims, &ko, &a->threads))
        return -1;
    if (conv_dims_parse(dims, &a->d, name) < 0) return -1;
#ifndef HAVE_EXP_AVX512
    PyErr_Format(PyExc_RuntimeError, "%s: built without AVX512F", name);
    return -1;
#else
    if (!exp_avx512) {
        PyErr_Format(PyExc_RuntimeError, "%s: this processor has no AVX512F", name);
        return -1;
    }
#endif
    PyObject *objs = PyTuple_Pack(4, xo, go, wo, ko);
    if (objs == NULL) return -1;
    static const int writable[4] = {0, 0, 1, 1};
    int got = get_many(objs, a->b, 4, writable);
    Py_DECREF(objs);
    if (got < 0) return -1;
    const char *why = NULL;
    for (int i = 0; i < 4; i++)
        if (real_kind(&a->b[i]) != 'f') why = "x, g, dw and work must be contiguous float32";
    if (!why && (a->b[0].len != a->d.N * a->d.C * a->d.H * a->d.W * 4 ||
                 a->b[1].len != a->d.N * a->d.O * a->d.OH * a->d.OW * 4 || a->b[2].len != a->d.O * a->d.K * 4))
        why = "x, g and dw must hold [N, C, H, W], [N, O, OH, OW], [O, C, kh, kw]";
    if (!why && a->b[3].len != work(a) * 4) why = "work is not the size its _work entry gives";
    if (why) {
        PyErr_Format(PyExc_ValueError, "%s: %s", name, why);
        release_many(a->b, 4);
        return -1;
    }
    return 0;
}

#ifdef HAVE_EXP_AVX512
typedef struct {
    convd_ctx d;
    float *stage;
    Py_ssize_t len;
} convw_stage_ctx;

static void convw_stage_part(void *c, Py_ssize_t lo, Py_ssize_t hi) {
    convw_stage_ctx *a = (convw_stage_ctx *)c;
    for (Py_ssize_t n = lo; n < hi; n++) {
        memset(a->stage + n * a->len, 0, sizeof(float) * (size_t)a->len);
        convd_load(&a->d, a->stage + n * a->len, n);
    }
}

/* every sample zero-padded and split by the stride into the workspace's first floats (called
 * without the GIL) */
static void convw_stage(const convw_args *a, float *stage) {
    convw_stage_ctx ctx;
    memset(&ctx, 0, sizeof ctx);
    ctx.d.x = (const float *)a->b[0].buf;
    ctx.d.N = a->d.N, ctx.d.C = a->d.C, ctx.d.H = a->d.H, ctx.d.W = a->d.W;
    ctx.d.pt = a->d.pt, ctx.d.pl = a->d.pl, ctx.d.sw = a->d.sw;
    ctx.d.Hp = a->d.Hp, ctx.d.Wpad = a->d.Wpad, ctx.d.Wq = a->d.Wq;
    ctx.stage = stage;
    ctx.len = a->d.C * a->d.Hp * a->d.sw * a->d.Wq;
    parallel_run(convw_stage_part, &ctx, a->d.N, a->threads);
}
#endif

static Py_ssize_t convw_work(const convw_args *a) {
    Py_ssize_t tiles = (a->d.O + CONVW_OB - 1) / CONVW_OB * ((a->d.K + CONVW_KB - 1) / CONVW_KB);
    return a->d.stage + tiles * CONVW_OB * CONVW_KB * 16;
}

/* A grad_W entry's _work(dims): the floats `work` gives for those dims. */
static PyObject *convw_work_of(PyObject *args, const char *name,
                               Py_ssize_t (*work)(const convw_args *)) {
    convw_args a;
    PyObject *dims;
    if (!PyArg_ParseTuple(args, "O!", &PyTuple_Type, &dims) || conv_dims_parse(dims, &a.d, name) < 0)
        return NULL;
    return PyLong_FromSsize_t(work(&a));
}

/* conv2d_direct_grad_w_work(dims): the floats of its workspace (the stage, the tiles' sums). */
static PyObject *conv2d_direct_grad_w_work(PyObject *self, PyObject *args) {
    return convw_work_of(args, "conv2d_direct_grad_w_work", convw_work);
}

/* conv2d_direct_grad_w(x, g, dw, dims, work, threads=1): as convw_parse; the tiles are cut
 * into one part per thread (each part reads all of g and the stage once); a tile's sums are
 * the same in any part. */
static PyObject *conv2d_direct_grad_w(PyObject *self, PyObject *args) {
    convw_args a;
    if (convw_parse(args, &a, "conv2d_direct_grad_w", convw_work) < 0) return NULL;
#ifdef HAVE_EXP_AVX512
    float *work = (float *)a.b[3].buf;
    convw_ctx ctx = {work, (const float *)a.b[1].buf, (float *)a.b[2].buf, work + a.d.stage,
                     a.d.N, a.d.C, a.d.O, a.d.kh, a.d.kw, a.d.OH, a.d.OW, a.d.sh, a.d.sw, a.d.Hp, a.d.Wq, a.d.K,
                     (a.d.O + CONVW_OB - 1) / CONVW_OB, (a.d.K + CONVW_KB - 1) / CONVW_KB,
                     a.threads < 1 ? 1 : a.threads, &a.d};
    Py_BEGIN_ALLOW_THREADS
    if (a.d.N > 0) convw_stage(&a, work);
    parallel_run(convw_part, &ctx, ctx.parts, ctx.parts);
    Py_END_ALLOW_THREADS
#endif
    release_many(a.b, 4);
    Py_RETURN_NONE;
}

/* conv2d_direct_grad_w_many: the same grad_W for many taps (C kh kw beyond a few dozen), with
 * the lanes over output channels, as a product's microkernel: g transposed once into gt, in
 * blocks of NV*16 channels ([N OH OW, the block's width]; Op: O rounded up to 16, the extra
 * channels 0); MR taps by NV vectors of 16 channels in registers sweep the output positions of
 * whole rows (t = (n, y), across samples), at least CONVW_MANY_POSITIONS of them (each
 * position: NV loads of gt and MR broadcasts of the taps' inputs, found through the positions'
 * offsets in the stage), then are stored (the first sweep) or added into the sums [taps, Op].
 * Sweeps go in order, so each (tap, channel) is its sweeps' sums added in order, each sweep's
 * products summed in order. A part is a fixed range of whole tap blocks (one range per
 * thread: each reads gt once) and writes its taps of dw, a tile at a time: the same sums on
 * any thread count. Against conv2d_direct_grad_w on 2 threads: 8x3x224x224 11x11 stride 4 ->
 * 64 (363 taps) 9.0 -> 5.7 ms; 16x64x56x56 3x3 -> 64 25.7 -> 17.5 ms; 8x512x7x7 -> 512
 * 64 -> 10.6 ms. With few taps the transpose costs as much as the products (32x3x32x32 -> 32:
 * 0.5 -> 1.0 ms): conv2d_direct_grad_w (lanes over positions) takes those. */
#define CONVW_MANY_POSITIONS 110
#define CONVW_MANY_KERNEL(MR, NV)                                                              \
    __attribute__((target("avx512f"))) static void convw_many_##MR##_##NV(                     \
        const float *const *p, const Py_ssize_t *pos, const float *gr, Py_ssize_t gs,          \
        Py_ssize_t count, float *s, Py_ssize_t Op, int first) {                                \
        __m512 acc[MR][NV];                                                                    \
        for (int m = 0; m < MR; m++)                                                           \
            for (int v = 0; v < NV; v++) acc[m][v] = _mm512_setzero_ps();                      \
        for (Py_ssize_t i = 0; i < count; i++) {                                               \
            __m512 gv[NV];                                                                     \
            for (int v = 0; v < NV; v++) gv[v] = _mm512_loadu_ps(gr + i * gs + 16 * v);        \
            Py_ssize_t at = pos[i];                                                            \
            for (int m = 0; m < MR; m++) {                                                     \
                __m512 xs = _mm512_set1_ps(p[m][at]);                                          \
                for (int v = 0; v < NV; v++) acc[m][v] = _mm512_fmadd_ps(xs, gv[v], acc[m][v]); \
            }                                                                                  \
        }                                                                                      \
        for (int m = 0; m < MR; m++)                                                           \
            for (int v = 0; v < NV; v++) {                                                     \
                float *d = s + m * Op + 16 * v;                                                \
                __m512 sum = first ? acc[m][v] : _mm512_add_ps(_mm512_loadu_ps(d), acc[m][v]); \
                _mm512_storeu_ps(d, sum);                                                      \
            }                                                                                  \
    }

/* MR taps by NV vectors: 24 sums in registers where the channels allow (6x4, 8x3, 12x2), the
 * last block of channels with the vectors left */
static Py_ssize_t convw_many_mr(Py_ssize_t O) {
    Py_ssize_t V = (O + 15) / 16;
    return V >= 4 ? 6 : V == 3 ? 8 : 12;
}

#ifdef HAVE_EXP_AVX512
CONVW_MANY_KERNEL(6, 4)
CONVW_MANY_KERNEL(6, 3)
CONVW_MANY_KERNEL(6, 2)
CONVW_MANY_KERNEL(6, 1)
CONVW_MANY_KERNEL(8, 3)
CONVW_MANY_KERNEL(12, 2)
CONVW_MANY_KERNEL(12, 1)

typedef void (*convw_many_fn)(const float *const *, const Py_ssize_t *, const float *,
                              Py_ssize_t, Py_ssize_t, float *, Py_ssize_t, int);

typedef struct {
    const float *xpad, *g;
    float *dw, *sums, *gt;
    const Py_ssize_t *off, *posoff;
    Py_ssize_t N, C, O, Op, OH, OW, sh, sw, Hp, Wq, K, MR, kblocks, parts;
} convw_many_ctx;

/* The vectors of channels a kernel call takes (NV) for MR taps */
static Py_ssize_t convw_many_nv(Py_ssize_t MR, Py_ssize_t V) {
    return MR == 6 ? 4 : MR == 8 ? 3 : (V >= 2 ? 2 : 1);
}

/* gt rows (n, y) lo..hi: g[n, :, y, :] transposed into blocks of NV*16 channels, each block
 * [N OH OW, its width] (the last block the vectors left), channels O..Op zero */
static void convw_many_transpose(void *c, Py_ssize_t lo, Py_ssize_t hi) {
    convw_many_ctx *a = (convw_many_ctx *)c;
    Py_ssize_t O = a->O, Op = a->Op, OH = a->OH, OW = a->OW, P = a->N * OH * OW;
    Py_ssize_t bw = convw_many_nv(a->MR, Op / 16) * 16;
    for (Py_ssize_t o0 = 0; o0 < Op; o0 += bw) {
        Py_ssize_t w = Op - o0 < bw ? Op - o0 : bw;
        for (Py_ssize_t r = lo; r < hi; r++) {
            float *dst = a->gt + o0 * P + r * OW * w;
            const float *src = a->g + ((r / OH) * O * OH + r % OH) * OW;
            for (Py_ssize_t o = o0; o < o0 + w; o++) {
                if (o < O)
                    for (Py_ssize_t x = 0; x < OW; x++) dst[x * w + o - o0] = src[o * OH * OW + x];
                else
                    for (Py_ssize_t x = 0; x < OW; x++) dst[x * w + o - o0] = 0.0f;
            }
        }
    }
}

/* parts lo..hi: each its range of tap blocks over every sweep (a sweep's block of channels
 * of gt in cache while every tap block of the part takes it), then its taps of dw */
static void convw_many_part(void *c, Py_ssize_t lo, Py_ssize_t hi) {
    convw_many_ctx *a = (convw_many_ctx *)c;
    Py_ssize_t MR = a->MR, Op = a->Op, V = Op / 16, K = a->K, OW = a->OW, OH = a->OH;
    Py_ssize_t NV = convw_many_nv(MR, V), tail = V % NV, P = a->N * OH * OW;
    convw_many_fn main_k, tail_k;
    if (MR == 6) {
        main_k = convw_many_6_4;
        tail_k = tail == 3 ? convw_many_6_3 : tail == 2 ? convw_many_6_2 : convw_many_6_1;
    } else if (MR == 8) {
        main_k = tail_k = convw_many_8_3; /* (V == 3: no tail) */
    } else {
        main_k = NV == 2 ? convw_many_12_2 : convw_many_12_1;
        tail_k = convw_many_12_1;
    }
    Py_ssize_t rows = (CONVW_MANY_POSITIONS + OW - 1) / OW;
    for (Py_ssize_t part = lo; part < hi; part++) {
        Py_ssize_t b0 = a->kblocks * part / a->parts, b1 = a->kblocks * (part + 1) / a->parts;
        if (b1 <= b0) continue;
        const float *p[12];
        for (Py_ssize_t t = 0; t < a->N * OH; t += rows) { /* rows t = (n, y) in order */
            Py_ssize_t count = (a->N * OH - t < rows ? a->N * OH - t : rows) * OW;
            for (Py_ssize_t v = 0; v < V; v += NV) {
                Py_ssize_t w = V - v < NV ? (V - v) * 16 : NV * 16;
                convw_many_fn k = V - v < NV ? tail_k : main_k;
                const float *gr = a->gt + v * 16 * P + t * OW * w;
                for (Py_ssize_t kb = b0; kb < b1; kb++) {
                    Py_ssize_t k0 = kb * MR;
                    for (Py_ssize_t m = 0; m < MR; m++) /* (a spare tap reads tap k0: not kept) */
                        p[m] = a->xpad + a->off[k0 + m < K ? k0 + m : k0];
                    k(p, a->posoff + t * OW, gr, w, count, a->sums + k0 * Op + 16 * v, Op, t == 0);
                }
            }
        }
        Py_ssize_t k1 = b1 * MR < K ? b1 * MR : K; /* dw = the sums transposed, in tiles */
        for (Py_ssize_t kt = b0 * MR; kt < k1; kt += 16)
            for (Py_ssize_t ot = 0; ot < a->O; ot += 16)
                for (Py_ssize_t o = ot; o < ot + 16 && o < a->O; o++)
                    for (Py_ssize_t k = kt; k < kt + 16 && k < k1; k++)
                        a->dw[o * K + k] = a->sums[k * Op + o];
    }
}
#endif

/* The workspace of conv2d_direct_grad_w_many, in floats: the stage, the taps' sums [taps in
 * whole blocks, Op], gt [N OH OW, Op]. */
static Py_ssize_t convw_many_sums(const convw_args *a) {
    Py_ssize_t MR = convw_many_mr(a->d.O);
    return (a->d.K + MR - 1) / MR * MR * ((a->d.O + 15) / 16 * 16);
}

static Py_ssize_t convw_many_work(const convw_args *a) {
    return a->d.stage + convw_many_sums(a) + a->d.N * a->d.OH * a->d.OW * ((a->d.O + 15) / 16 * 16);
}

/* conv2d_direct_grad_w_many_work(dims): the floats of its workspace. */
static PyObject *conv2d_direct_grad_w_many_work(PyObject *self, PyObject *args) {
    return convw_work_of(args, "conv2d_direct_grad_w_many_work", convw_many_work);
}

/* conv2d_direct_grad_w_many(x, g, dw, dims, work, threads=1): as conv2d_direct_grad_w, work
 * holding conv2d_direct_grad_w_many_work(dims) floats. */
static PyObject *conv2d_direct_grad_w_many(PyObject *self, PyObject *args) {
    convw_args a;
    if (convw_parse(args, &a, "conv2d_direct_grad_w_many", convw_many_work) < 0) return NULL;
#ifdef HAVE_EXP_AVX512
    Py_ssize_t N = a.d.N, O = a.d.O, K = a.d.K, OH = a.d.OH, OW = a.d.OW, Op = (O + 15) / 16 * 16;
    Py_ssize_t MR = convw_many_mr(O), sums = convw_many_sums(&a);
    Py_ssize_t *off = PyMem_RawMalloc(sizeof(Py_ssize_t) * (size_t)(K + N * OH * OW));
    if (off == NULL) {
        release_many(a.b, 4);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t k = 0; k < K; k++) off[k] = conv_tap(&a.d, k, a.d.Wq);
    for (Py_ssize_t t = 0; t < N * OH; t++) /* output (n, y, x)'s first input */
        for (Py_ssize_t x = 0; x < OW; x++)
            off[K + t * OW + x] = (t / OH * a.d.C * a.d.Hp + t % OH * a.d.sh) * a.d.sw * a.d.Wq + x;
    float *work = (float *)a.b[3].buf;
    int parts = a.threads < 1 ? 1 : a.threads;
    convw_many_ctx ctx = {work, (const float *)a.b[1].buf, (float *)a.b[2].buf,
                          work + a.d.stage, work + a.d.stage + sums, off, off + K, N, a.d.C, O, Op,
                          OH, OW, a.d.sh, a.d.sw, a.d.Hp, a.d.Wq, K, MR, (K + MR - 1) / MR, parts};
    Py_BEGIN_ALLOW_THREADS
    if (N == 0) /* a sum of nothing */
        memset(ctx.dw, 0, sizeof(float) * (size_t)(O * K));
    else {
        convw_stage(&a, work);
        parallel_run(convw_many_transpose, &ctx, N * OH, parts);
        parallel_run(convw_many_part, &ctx, parts, parts);
    }
    Py_END_ALLOW_THREADS
    PyMem_RawFree(off);
    release_many(a.b, 4);
#endif
    Py_RETURN_NONE;
}

/* --- col2im: a convolution's input gradient from its columns -----------------------------------
 *
 * cols [C, kh, kw, S, OH, OW] (contiguous) added into the zero-padded samples stage [S, C, Hp, Wp]
 * (contiguous): stage[s, c, oh * sh + i * dh, ow * sw + j * dw] += cols[c, i, j, s, oh, ow], kernel
 * offsets (i, j) in order, as the numpy form's one add per offset; a thread's part is whole
 * planes (s, c), so each element gets its terms in the same order whatever the thread count. */
#define COL2IM_LOOP(T)                                                                          \
    static void col2im_##T(const T *cols, T *stage, Py_ssize_t p0, Py_ssize_t p1,              \
                           const Py_ssize_t *g) {                                              \
        Py_ssize_t S = g[0], C = g[1], kh = g[2], kw = g[3], OH = g[4], OW = g[5], Hp = g[6],  \
                   Wp = g[7], sh = g[8], sw = g[9], dh = g[10], dw = g[11];                    \
        for (Py_ssize_t p = p0; p < p1; p++) {                                                 \
            Py_ssize_t s = p / C, c = p % C;                                                   \
            T *plane = stage + p * Hp * Wp;                                                    \
            for (Py_ssize_t i = 0; i < kh; i++)                                                \
                for (Py_ssize_t j = 0; j < kw; j++) {                                          \
                    const T *src = cols + (((c * kh + i) * kw + j) * S + s) * OH * OW;         \
                    for (Py_ssize_t oh = 0; oh < OH; oh++) {                                   \
                        T *dst = plane + (oh * sh + i * dh) * Wp + j * dw;                     \
                        const T *row = src + oh * OW;                                          \
                        if (sw == 1)                                                           \
                            for (Py_ssize_t ow = 0; ow < OW; ow++) dst[ow] += row[ow];         \
                        else                                                                   \
                            for (Py_ssize_t ow = 0; ow < OW; ow++) dst[ow * sw] += row[ow];    \
                    }                                                                          \
                }                                                                              \
        }                                                                                      \
    }
COL2IM_LOOP(float)
COL2IM_LOOP(double)

typedef struct {
    char k;
    const void *cols;
    void *stage;
    Py_ssize_t g[12];
} col2im_ctx_t;
static void col2im_part(void *c, Py_ssize_t lo, Py_ssize_t hi) {
    col2im_ctx_t *t = (col2im_ctx_t *)c;
    if (t->k == 'f')
        col2im_float((const float *)t->cols, (float *)t->stage, lo, hi, t->g);
    else
        col2im_double((const double *)t->cols, (double *)t->stage, lo, hi, t->g);
}

static PyObject *col2im(PyObject *self, PyObject *args) {
    PyObject *co, *so;
    col2im_ctx_t ctx;
    Py_ssize_t *g = ctx.g;
    int threads = 1;
    if (!PyArg_ParseTuple(args, "OO(nnnnnnnnnnnn)|i", &co, &so, &g[0], &g[1], &g[2], &g[3],
                          &g[4], &g[5], &g[6], &g[7], &g[8], &g[9], &g[10], &g[11], &threads))
        return NULL;
    Py_ssize_t S = g[0], C = g[1], kh = g[2], kw = g[3], OH = g[4], OW = g[5], Hp = g[6],
               Wp = g[7], sh = g[8], sw = g[9], dh = g[10], dw = g[11];
    for (int i = 0; i < 12; i++)
        if (g[i] < 0 || (i >= 8 && g[i] < 1)) {
            PyErr_SetString(PyExc_ValueError, "col2im: invalid sizes");
            return NULL;
        }
    /* every window inside the padded sample */
    if (OH && OW && kh && kw &&
        ((OH - 1) * sh + (kh - 1) * dh >= Hp || (OW - 1) * sw + (kw - 1) * dw >= Wp)) {
        PyErr_SetString(PyExc_ValueError, "col2im: the windows leave the padded sample");
        return NULL;
    }
    Py_buffer c, s;
    if (get_buffer(co, &c, 0) < 0) return NULL;
    if (get_buffer(so, &s, 1) < 0) {
        PyBuffer_Release(&c);
        return NULL;
    }
    char k = real_kind(&c);
    const char *error = NULL;
    if (k == 0 || real_kind(&s) != k) error = "cols and stage must be float32 or float64 alike";
    else if (c.len != C * kh * kw * S * OH * OW * c.itemsize)
        error = "cols must hold C * kh * kw * S * OH * OW values";
    else if (s.len != S * C * Hp * Wp * s.itemsize) error = "stage must hold S * C * Hp * Wp values";
    if (error) {
        PyErr_SetString(PyExc_ValueError, error);
        PyBuffer_Release(&c);
        PyBuffer_Release(&s);
        return NULL;
    }
    ctx.k = k;
    ctx.cols = c.buf;
    ctx.stage = s.buf;
    Py_BEGIN_ALLOW_THREADS
    parallel_run(col2im_part, &ctx, S * C, threads);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&c);
    PyBuffer_Release(&s);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"set_erf_coefficients", set_erf_coefficients, METH_VARARGS,
     "set_erf_coefficients(P, Q): kernels._ERF_P and _ERF_Q (7 and 6 floats)."},
    {"erf_f32", erf_f32, METH_VARARGS,
     "erf_f32(x, out): out = erf(x) for contiguous float32 buffers of equal length, as "
     "kernels._erf_rational_block computes it (bit for bit), without the GIL."},
    {"exp_gelu_f32", exp_gelu_f32, METH_VARARGS,
     "exp_gelu_f32(x, g, out, kind, consts, threads=1): over contiguous float32 buffers of "
     "equal length, kind 0: out = np.exp(x) (numpy's SIMD loop's bits); 1: the exact GELU of "
     "activation._gelu_chunk; 2: its gradient times g (_gelu_grad_chunk); without the GIL."},
    {"set_pool_spin", set_pool_spin, METH_VARARGS,
     "set_pool_spin(ns): how long the loops' threads poll for the next job before they sleep."},
    {"max_pool2d", max_pool2d, METH_VARARGS,
     "max_pool2d(x, y, indices, planes, h, w, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow): "
     "PyTorch's max_pool2d_with_indices over contiguous planes, without the GIL."},
    {"max_pool2d_backward", max_pool2d_backward, METH_VARARGS,
     "max_pool2d_backward(g, indices, grad_input, planes, in_n, out_n, accumulate, threads=1, "
     "zero=False): grad_input[plane, index] += g (or = g), in output order (each plane zeroed "
     "first when zero), without the GIL."},
    {"threshold_backward", threshold_backward, METH_VARARGS,
     "threshold_backward(g, v, out, threshold, threads=1, strict=False): out = v <= threshold "
     "? 0 : g (strict: v < threshold) over contiguous float32/float64 buffers of equal length, "
     "without the GIL."},
    {"row_sums", row_sums, METH_VARARGS,
     "row_sums(a, b, m, p1, p2, rows, c, L, kind, threads=1): float64 sums of each row of L "
     "values (kind 0: a; 1: (a - m[ch])^2; 2: a, and a * (b - m[ch])) in kernels.row_sums' "
     "order."},
    {"set_gemm", set_gemm, METH_VARARGS,
     "set_gemm(sgemm, dgemm, ilp64): the addresses of numpy's cblas_sgemm and cblas_dgemm."},
    {"gemm", gemm, METH_VARARGS,
     "gemm(a, b, out, batch, m, n, k, a_step, b_step, ta, tb, threads=1): out = a @ b over "
     "row-major products (a, b held transposed: ta, tb), parts on the loops' threads, one BLAS "
     "call each, without the GIL."},
    {"row_affine", row_affine, METH_VARARGS,
     "row_affine(x, g, p0, p1, p2, p3, y, rows, c, L, kind, has_last, threads=1): per-channel "
     "affine passes of batch normalization (kernels.row_affine), without the GIL."},
    {"layer_norm", layer_norm, METH_VARARGS,
     "layer_norm(x, w, b, y, mean, rstd, rows, L, eps, threads=1): layer normalization of rows "
     "of L values (w, b: None or L values), kernels.layer_norm_forward's loop, without the GIL."},
    {"layer_norm_backward", layer_norm_backward, METH_VARARGS,
     "layer_norm_backward(x, g, w, mean, rstd, gx, gw, gb, rows, L, threads=1): its gradients "
     "(w, gx, gw, gb: None when absent or not wanted), kernels.layer_norm_backward's loops."},
    {"attention_forward_f32", attention_forward_f32, METH_VARARGS,
     "attention_forward_f32(q, k, v, y, offsets, m, t, dims, scale, causal, threads=1): the "
     "fused attention's float32 forward per slice (FusedAttention._native_forward), numpy's "
     "BLAS calls and the softmax passes in cache, without the GIL."},
    {"attention_backward_f32", attention_backward_f32, METH_VARARGS,
     "attention_backward_f32(addresses, offsets, lse, rows, dims, scale, causal, threads=1): "
     "the fused attention's float32 backward per slice (FusedAttention._native_backward), "
     "numpy's BLAS calls and the softmax passes in cache, without the GIL."},
    {"conv2d_direct", conv2d_direct, METH_VARARGS,
     "conv2d_direct(x, w, b, y, dims, work, parts=1): a float32 convolution's forward without "
     "columns, fused multiply-adds in (c, i, j) order then the bias (Conv2d._direct), on the "
     "caller's workspace, without the GIL; AVX512F only."},
    {"conv2d_direct_work", conv2d_direct_work, METH_VARARGS,
     "conv2d_direct_work(dims, parts): the float32 values conv2d_direct's workspace holds."},
    {"conv2d_direct_grad_w", conv2d_direct_grad_w, METH_VARARGS,
     "conv2d_direct_grad_w(x, g, dw, dims, work, threads=1): grad_W of conv2d_direct's "
     "convolutions (dims as its) from x and g, without columns, without the GIL, for a few "
     "taps (16-lane sums over output positions); AVX512F only."},
    {"conv2d_direct_grad_w_many", conv2d_direct_grad_w_many, METH_VARARGS,
     "conv2d_direct_grad_w_many(x, g, dw, dims, work, threads=1): conv2d_direct_grad_w for "
     "many taps (lanes over output channels)."},
    {"conv2d_direct_grad_w_many_work", conv2d_direct_grad_w_many_work, METH_VARARGS,
     "conv2d_direct_grad_w_many_work(dims): the float32 values of its workspace."},
    {"conv2d_direct_grad_w_work", conv2d_direct_grad_w_work, METH_VARARGS,
     "conv2d_direct_grad_w_work(dims): the float32 values of its workspace."},
    {"conv2d_direct_avx512", conv2d_direct_avx512, METH_NOARGS,
     "conv2d_direct_avx512(): whether conv2d_direct runs here (built with it, AVX512F)."},
    {"softmax_rows", softmax_rows, METH_VARARGS,
     "softmax_rows(x, v, p, rows, L, kind, threads=1): the passes of a softmax over contiguous "
     "rows of L values, in place (kernels.softmax_rows), without the GIL."},
    {"col2im", col2im, METH_VARARGS,
     "col2im(cols, stage, (S, C, kh, kw, OH, OW, Hp, Wp, sh, sw, dh, dw), threads=1): a "
     "convolution's columns added into its zero-padded samples (kernels.col2im_add), without "
     "the GIL."},
    {"copy_runs", copy_runs, METH_VARARGS,
     "copy_runs(src, dst, bias, threads=1): dst[...] = src (+ bias on axis 1) for strided views "
     "of one shape whose last axis is contiguous (kernels.copy_runs), without the GIL."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "engine._native",
    "Optional compiled loops of engine.kernels (bit for bit their numpy forms).", -1, methods,
};

PyMODINIT_FUNC PyInit__native(void) {
#ifdef HAVE_EXP_AVX512
    __builtin_cpu_init();
    exp_avx512 = __builtin_cpu_supports("avx512f") ? 1 : 0;
#endif
    return PyModule_Create(&module);
}
