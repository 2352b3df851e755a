/* Exact cosines of a query with the notes' quantized vectors (vectors.py) in C, read straight
 * from the int8 integers: no float32 copy of the matrix (a quarter of the memory) and no BLAS
 * call whose cost is reading 4 bytes a component. vectors.py's numpy code stays the reference
 * and the fallback (tests/unit/projections/ranking/test_vectors.py runs both and requires the
 * same bits).
 *
 *   cosines(mat int8[rows * dim], dim, slots int64[m] or empty, q int16[k * dim],
 *           qn float64[k], norm float64[>= rows], out float64[k * m] (out)) -> None
 *       For each query j and each row i (slots[i], or i itself when slots is empty; then
 *       m = len(out) / k): dot = the integer dot product of the row and q[j] (int32: exact
 *       while dim * 127 * 256 < 2**31, which the caller checks), den = qn[j] * norm[row],
 *       out[j * m + i] = den > 0 ? (double)dot / den : 0.0.
 * That is numpy's ``np.divide(dots, qn * norm, where=qn * norm > 0)`` with ``dots`` the same
 * exact integers (one multiplication and one division, compile with -ffp-contract=off): the
 * same bits. The integer sums are exact in any order, so the vectorised clones (SSE2, AVX2)
 * give the same integers as the plain loop.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

typedef int64_t i64;

#if defined(__GNUC__) && defined(__x86_64__) && !defined(__clang__)
#define CLONES __attribute__((target_clones("avx2", "default")))
#else
#define CLONES
#endif

#define BLOCK 256

/* One query against m rows: those of ``slots``, or rows first..first+m-1 when it is NULL. */
CLONES static void cos_rows(const int8_t *mat, i64 dim, const i64 *slots, i64 m, i64 first,
                            const int16_t *q, double qn, const double *norm, double *out) {
    for (i64 i = 0; i < m; i++) {
        const i64 r = slots ? slots[i] : first + i;
        const int8_t *row = mat + r * dim;
        int32_t dot = 0;
        for (i64 d = 0; d < dim; d++)
            dot += (int32_t)row[d] * (int32_t)q[d];
        const double den = qn * norm[r];
        out[i] = den > 0.0 ? (double)dot / den : 0.0;
    }
}

static PyObject *vec_cosines(PyObject *self, PyObject *args) {
    Py_buffer bmat, bslots, bq, bqn, bnorm, bout;
    Py_ssize_t dim;
    if (!PyArg_ParseTuple(args, "y*ny*y*y*y*w*", &bmat, &dim, &bslots, &bq, &bqn, &bnorm,
                          &bout))
        return NULL;
    PyObject *ret = NULL;
    i64 k = bqn.len / 8, h = bslots.len / 8;
    if (dim < 1 || bmat.len % dim || bq.len != k * dim * 2 || k < 1 || bout.len % (8 * k)) {
        PyErr_SetString(PyExc_ValueError, "cosines: arrays of different lengths");
        goto done;
    }
    i64 rows = bmat.len / dim, m = bout.len / 8 / k;
    if (bnorm.len / 8 < rows || (h && h != m) || (!h && m > rows)) {
        PyErr_SetString(PyExc_ValueError, "cosines: arrays of different lengths");
        goto done;
    }
    const i64 *slots = h ? (const i64 *)bslots.buf : NULL;
    for (i64 i = 0; i < h; i++)
        if (slots[i] < 0 || slots[i] >= rows) {
            PyErr_SetString(PyExc_ValueError, "cosines: a slot outside the matrix");
            goto done;
        }
    const int8_t *mat = bmat.buf;
    const int16_t *q = bq.buf;
    const double *qn = bqn.buf, *norm = bnorm.buf;
    double *out = bout.buf;
    /* rows in blocks, every query over a block while it is in cache (a batch's queries) */
    for (i64 a = 0; a < m; a += BLOCK) {
        const i64 z = a + BLOCK < m ? a + BLOCK : m;
        for (i64 j = 0; j < k; j++)
            cos_rows(mat, dim, slots ? slots + a : NULL, z - a, a, q + j * dim, qn[j], norm,
                     out + j * m + a);
    }
    ret = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&bmat);
    PyBuffer_Release(&bslots);
    PyBuffer_Release(&bq);
    PyBuffer_Release(&bqn);
    PyBuffer_Release(&bnorm);
    PyBuffer_Release(&bout);
    return ret;
}

static PyMethodDef methods[] = {
    {"cosines", vec_cosines, METH_VARARGS,
     "cosines(mat, dim, slots, q, qn, norm, out) -> None"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_vectors",
                                    "Exact cosines over int8 vectors in C (see vectors.py).",
                                    -1, methods};

PyMODINIT_FUNC PyInit__vectors(void) { return PyModule_Create(&module); }
