/* The last step of Columns.bm25 in C: summing each query word's weighted parts per note and
 * listing the notes that got any, instead of a bincount over every slot of the table, a
 * comparison and a nonzero over it again (~20 us a query at 10k notes, most of it passes over
 * slots no word touched). columns.py's numpy code stays the reference and the fallback
 * (tests/unit/projections/ranking/test_bm25_native.py runs both and requires the same bits).
 *
 *   accumulate(every int64[m], parts float64[m], n, max_score, keep_zero,
 *              slots int64[m] (out), values float64[m] (out)) -> k
 *       acc[s] = the sum of parts[i] over every[i] == s, added in the order of every (as
 *       numpy's bincount adds its weights, from 0.0); slots[:k] the slots with acc > 0
 *       (keep_zero: every slot that occurs in every), ascending, and values[:k] their
 *       acc / max_score.
 * Floating point: the same IEEE additions in the same order, and one division (compile
 * with -ffp-contract=off).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

typedef int64_t i64;

/* Per-slot sums and marks kept between calls, all zero outside a call (each call clears
 * what it touched): the GIL is held throughout, so one pair serves every call. */
static double *acc = NULL;
static unsigned char *mark = NULL;
static i64 cap = 0;

static PyObject *bm25_accumulate(PyObject *self, PyObject *args) {
    Py_buffer bev, bparts, bslots, bvals;
    Py_ssize_t n;
    double max_score;
    int keep_zero;
    if (!PyArg_ParseTuple(args, "y*y*ndpw*w*", &bev, &bparts, &n, &max_score, &keep_zero,
                          &bslots, &bvals))
        return NULL;
    PyObject *ret = NULL;
    i64 m = bev.len / 8;
    if (bparts.len != bev.len || bslots.len != bev.len || bvals.len != bev.len || n < 0) {
        PyErr_SetString(PyExc_ValueError, "accumulate: arrays of different lengths");
        goto done;
    }
    const i64 *every = bev.buf;
    const double *parts = bparts.buf;
    i64 *slots = bslots.buf;
    double *values = bvals.buf;
    for (i64 i = 0; i < m; i++)
        if (every[i] < 0 || every[i] >= n) {
            PyErr_SetString(PyExc_ValueError, "accumulate: a slot outside the table");
            goto done;
        }
    if (n > cap) {
        double *a = PyMem_Realloc(acc, (size_t)n * sizeof(double));
        if (a) acc = a;
        unsigned char *k = a ? PyMem_Realloc(mark, (size_t)n) : NULL;
        if (k) mark = k;
        if (!a || !k) { PyErr_NoMemory(); goto done; }
        memset(acc + cap, 0, (size_t)(n - cap) * sizeof(double));
        memset(mark + cap, 0, (size_t)(n - cap));
        cap = n;
    }
    for (i64 i = 0; i < m; i++) {
        i64 s = every[i];
        acc[s] += parts[i];
        mark[s] = 1;
    }
    i64 k = 0;
    for (i64 s = 0; s < n; s++) {
        if (!mark[s]) continue;
        if (keep_zero || acc[s] > 0.0) {
            slots[k] = s;
            values[k] = acc[s] / max_score;
            k++;
        }
        acc[s] = 0.0;
        mark[s] = 0;
    }
    ret = PyLong_FromLongLong(k);
done:
    PyBuffer_Release(&bev);
    PyBuffer_Release(&bparts);
    PyBuffer_Release(&bslots);
    PyBuffer_Release(&bvals);
    return ret;
}

static PyMethodDef methods[] = {
    {"accumulate", bm25_accumulate, METH_VARARGS,
     "accumulate(every, parts, n, max_score, keep_zero, slots, values) -> k"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_bm25",
                                    "BM25's per-note sums in C (see columns.py).", -1, methods};

PyMODINIT_FUNC PyInit__bm25(void) { return PyModule_Create(&module); }
