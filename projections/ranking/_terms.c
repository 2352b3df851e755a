/* A term table's lookup of a list of terms (terms.py: TermTable.lookup) in C: a binary search
 * of each term's hash among the sealed terms' sorted hashes, then its UTF-8 bytes compared
 * with the sealed term's, for every sealed term under that hash (a collision costs a second
 * compare, never a wrong id). terms.py's Python loop stays the reference and the fallback
 * (tests/unit/projections/ranking/test_terms_native.py runs both and requires the same ids).
 *
 *   lookup(terms list[str], hashes int64[n] (ascending), ids int32[n], off int64[m + 1],
 *          buf bytes) -> list[int]
 *       The id of each of terms among the sealed ones (-1: not sealed): hashes[i] is
 *       hash(term) of the term of id ids[i]; the term of id t is buf[off[t] .. off[t + 1] - 1)
 *       (each followed by one "\n" in buf). Hashes are Python's own (PyObject_Hash, what
 *       hash() gives), so the sorted array built in Python is searched with the same keys.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

typedef int64_t i64;

static PyObject *terms_lookup(PyObject *self, PyObject *args) {
    PyObject *terms, *buf;
    Py_buffer bh, bids, boff;
    if (!PyArg_ParseTuple(args, "O!y*y*y*S", &PyList_Type, &terms, &bh, &bids, &boff, &buf))
        return NULL;
    PyObject *out = NULL;
    const i64 n = bh.len / 8, m = boff.len / 8 - 1;
    if (bids.len != n * 4 || bh.len % 8 || m < 0) {
        PyErr_SetString(PyExc_ValueError, "lookup: arrays of different lengths");
        goto done;
    }
    const i64 *h = bh.buf, *off = boff.buf;
    const int32_t *ids = bids.buf;
    const char *data = PyBytes_AS_STRING(buf);
    const i64 size = PyBytes_GET_SIZE(buf);
    const Py_ssize_t k = PyList_GET_SIZE(terms);
    out = PyList_New(k);
    if (!out) goto done;
    for (Py_ssize_t q = 0; q < k; q++) {
        PyObject *term = PyList_GET_ITEM(terms, q);
        if (!PyUnicode_Check(term)) {
            PyErr_SetString(PyExc_TypeError, "lookup: terms must be str");
            Py_CLEAR(out);
            goto done;
        }
        const Py_hash_t key = PyObject_Hash(term);
        if (key == -1) {
            Py_CLEAR(out);
            goto done;
        }
        i64 lo = 0, hi = n;  /* the first hash >= key */
        while (lo < hi) {
            const i64 mid = lo + (hi - lo) / 2;
            if (h[mid] < (i64)key) lo = mid + 1;
            else hi = mid;
        }
        i64 found = -1;
        if (lo < n && h[lo] == (i64)key) {
            Py_ssize_t len;
            const char *utf8 = PyUnicode_AsUTF8AndSize(term, &len);
            if (!utf8) {  /* not encodable (a lone surrogate): no sealed term holds it */
                PyErr_Clear();
            } else {
                for (i64 i = lo; i < n && h[i] == (i64)key; i++) {
                    const i64 t = ids[i];
                    if (t < 0 || t >= m || off[t] < 0 || off[t + 1] > size ||
                        off[t + 1] - off[t] < 1) {
                        PyErr_SetString(PyExc_ValueError, "lookup: an id outside the terms");
                        Py_CLEAR(out);
                        goto done;
                    }
                    if (off[t + 1] - 1 - off[t] == len && memcmp(data + off[t], utf8, len) == 0) {
                        found = t;
                        break;
                    }
                }
            }
        }
        PyObject *v = PyLong_FromLongLong(found);
        if (!v) {
            Py_CLEAR(out);
            goto done;
        }
        PyList_SET_ITEM(out, q, v);
    }
done:
    PyBuffer_Release(&bh);
    PyBuffer_Release(&bids);
    PyBuffer_Release(&boff);
    return out;
}

static PyMethodDef methods[] = {
    {"lookup", terms_lookup, METH_VARARGS, "lookup(terms, hashes, ids, off, buf) -> list[int]"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_terms",
                                    "A term table's lookup in C (terms.py).", -1, methods,
                                    NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__terms(void) { return PyModule_Create(&module); }
