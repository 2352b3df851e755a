/* How many words the notes of each pair share, for the near-identical rule (updates.py), in C:
 * each note's distinct words are ascending int32 ids (ranker.KeptTexts.words), and a pair's
 * count is one merge of the two runs. updates.py's pair-by-pair set intersection stays the
 * reference and the fallback (tests/unit/projections/ranking/test_updates.py runs both and
 * requires the same counts).
 *
 *   shared(ids int32[], off int64[n + 1], ii int64[p], jj int64[p], out int64[p] (out))
 *       -> None
 *       Note k's ids are ids[off[k] .. off[k + 1]), strictly ascending; out[q] = the number
 *       of ids notes ii[q] and jj[q] both hold. Integers only: the same counts on any
 *       machine, in any order.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

typedef int64_t i64;

static i64 merge_count(const int32_t *a, i64 na, const int32_t *b, i64 nb) {
    i64 i = 0, j = 0, both = 0;
    while (i < na && j < nb) {
        const int32_t x = a[i], y = b[j];
        both += x == y;
        i += x <= y;
        j += y <= x;
    }
    return both;
}

static PyObject *pairs_shared(PyObject *self, PyObject *args) {
    Py_buffer bids, boff, bii, bjj, bout;
    if (!PyArg_ParseTuple(args, "y*y*y*y*w*", &bids, &boff, &bii, &bjj, &bout))
        return NULL;
    PyObject *ret = NULL;
    const i64 nids = bids.len / 4, n = boff.len / 8 - 1, p = bii.len / 8;
    if (n < 0 || bjj.len != bii.len || bout.len != bii.len || bids.len % 4) {
        PyErr_SetString(PyExc_ValueError, "shared: arrays of different lengths");
        goto done;
    }
    const int32_t *ids = bids.buf;
    const i64 *off = boff.buf, *ii = bii.buf, *jj = bjj.buf;
    i64 *out = bout.buf;
    if (off[0] < 0 || off[n] > nids) {
        PyErr_SetString(PyExc_ValueError, "shared: offsets outside the ids");
        goto done;
    }
    for (i64 k = 0; k < n; k++)
        if (off[k + 1] < off[k]) {
            PyErr_SetString(PyExc_ValueError, "shared: offsets not ascending");
            goto done;
        }
    for (i64 q = 0; q < p; q++)
        if (ii[q] < 0 || ii[q] >= n || jj[q] < 0 || jj[q] >= n) {
            PyErr_SetString(PyExc_ValueError, "shared: a pair names no note");
            goto done;
        }
    for (i64 q = 0; q < p; q++) {
        const i64 a = ii[q], b = jj[q];
        out[q] = merge_count(ids + off[a], off[a + 1] - off[a], ids + off[b],
                             off[b + 1] - off[b]);
    }
    ret = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&bids);
    PyBuffer_Release(&boff);
    PyBuffer_Release(&bii);
    PyBuffer_Release(&bjj);
    PyBuffer_Release(&bout);
    return ret;
}

static PyMethodDef methods[] = {
    {"shared", pairs_shared, METH_VARARGS, "shared(ids, off, ii, jj, out) -> None"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_pairs",
                                    "Shared word counts of note pairs in C (see updates.py).",
                                    -1, methods};

PyMODINIT_FUNC PyInit__pairs(void) { return PyModule_Create(&module); }
