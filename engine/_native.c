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

static int get_floats(PyObject *obj, Py_buffer *view, int writable, const char *what) {
    int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, view, flags) < 0) return -1;
    if (view->itemsize != 4 || view->format == NULL || strcmp(view->format, "f") != 0) {
        PyErr_Format(PyExc_TypeError, "%s must be a contiguous float32 buffer", what);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

static PyObject *erf_f32(PyObject *self, PyObject *args) {
    PyObject *src, *dst;
    if (!PyArg_ParseTuple(args, "OO", &src, &dst)) return NULL;
    if (!erf_ready) {
        PyErr_SetString(PyExc_RuntimeError, "set_erf_coefficients was not called");
        return NULL;
    }
    Py_buffer in, out;
    if (get_floats(src, &in, 0, "x") < 0) return NULL;
    if (get_floats(dst, &out, 1, "out") < 0) { PyBuffer_Release(&in); return NULL; }
    if (in.len != out.len) {
        PyErr_SetString(PyExc_ValueError, "x and out must have the same number of elements");
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

static PyMethodDef methods[] = {
    {"set_erf_coefficients", set_erf_coefficients, METH_VARARGS,
     "set_erf_coefficients(P, Q): kernels._ERF_P and _ERF_Q (7 and 6 floats)."},
    {"erf_f32", erf_f32, METH_VARARGS,
     "erf_f32(x, out): out = erf(x) for contiguous float32 buffers of equal length, as "
     "kernels._erf_rational_block computes it (bit for bit), without the GIL."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "engine._native",
    "Optional compiled loops of engine.kernels (bit for bit their numpy forms).", -1, methods,
};

PyMODINIT_FUNC PyInit__native(void) { return PyModule_Create(&module); }
