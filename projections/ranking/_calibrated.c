/* The per-note arithmetic of calibrated relevance (calibrated.py: signals, context,
 * probability, evidence, the floor) in C, one pass over a query's visible notes instead of
 * ~30 numpy passes of a few microseconds each. calibrated.py's numpy code stays the
 * reference (tests/unit/projections/ranking/test_calibrated_native.py runs both on the same
 * inputs and requires the same bits).
 *
 * Two functions, over C-contiguous buffers (numpy arrays), for n notes in creation order:
 *   logits(seq int64[n], at int64[h], lex float64[h], cosine float64[N or 0],
 *          owner int32[n], named float64[A or 0], wb float64[n], wc float64[n],
 *          base float64[n], near uint8[k * n], k, w_cb, w_cc, w_an, min_cosine,
 *          neg float64[n] (out), evidence uint8[n] (out)) -> None
 *       neg[i] = -logit of note i: with b = lex / max(lex) at positions at (0 elsewhere),
 *       c = cosine[seq[i]] (0 when cosine is empty), cb / cc the largest b / c among the
 *       positions up to k before and after i that are near it (near[(j - 1) * n + p]: the
 *       notes at p and p + j are near; 0 if none) and author = named[owner[i]] (0 when
 *       named is empty),
 *           logit = ((((b * wb + base) + c * wc) + cb * w_cb) + cc * w_cc) + author * w_an
 *       (calibrated.probability's additions in its order); evidence[i] = b > 0 or
 *       c >= min_cosine.
 *   finish(e float64[n] (in: exp(neg), out: p), evidence uint8[n], floor,
 *          pos int64[n] (out)) -> m
 *       p = 1 / (e + 1), 0 without evidence or under floor (when floor > 0); pos[:m] the
 *       positions with p > 0, ascending.
 *   nearest(seq int64[n], cosine float64[N], k, min_cosine, out int64[n]) -> m
 *       out[:m] the positions i, ascending, whose c = cosine[seq[i]] is among the k largest
 *       (every one tied with the k-th included; all of them when n <= k) and at least
 *       min_cosine: calibrated.nearest over the gathered cosines, in one pass and a k-slot
 *       table instead of a gather and a partition of the n values (cosines are never NaN).
 *   compact(neg float64[n] (in/out), evidence uint8[n], at int64[n] (out)) -> m
 *       at[:m] the positions with evidence, ascending, and neg[:m] their values (moved to
 *       the front in place): the exponential and finish then run over those alone.
 * finish also takes an empty evidence: every note has evidence (compact's output).
 * The exponential stays numpy's (np.exp between the two calls): its last bit may differ from
 * the C library's. Floating point: the same IEEE operations in the same order as the numpy
 * code (compile with -ffp-contract=off); maxima are exact, and where numpy's and this
 * code's maxima could differ (the sign of a zero) the logit's value does not.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

typedef int64_t i64;

/* The loops below compiled twice, for AVX2 and for any x86-64, the one the CPU has chosen at
 * load: four doubles a step instead of two. The same IEEE operations either way (no FMA: the
 * avx2 target does not enable it, and -ffp-contract=off forbids contraction), so the same
 * bits. */
#if defined(__GNUC__) && defined(__x86_64__) && !defined(__clang__)
#define CLONES __attribute__((target_clones("avx2", "default")))
#else
#define CLONES
#endif

/* logits' scratch (b, c, cb, cc), kept between calls and grown as needed: a fresh allocation
 * of this size is an mmap whose page faults cost more than the arithmetic. The GIL is held
 * throughout, so one buffer serves every call. */
static double *scratch = NULL;
static size_t scratch_cap = 0;

/* logits' per-note arithmetic, once b and c are filled (cb and cc zeroed). */
CLONES static void arithmetic(i64 n, const double *b, const double *c, double *restrict cb,
                              double *restrict cc, const unsigned char *near, i64 k,
                              const int32_t *owner, const double *named, i64 na,
                              const double *wb, const double *wc, const double *base,
                              double w_cb, double w_cc, double w_an, double min_cosine,
                              double *restrict neg, unsigned char *restrict ev) {
    /* context: the largest of the near neighbours' values, from 0 (branch-free selects, so
     * the loops vectorise; the maxima are exact) */
    for (i64 j = 1; j <= k && j < n; j++) {
        const unsigned char *m = near + (size_t)(j - 1) * (size_t)n;
        for (i64 i = 0; i + j < n; i++) {  /* i sees i + j */
            double bv = b[i + j], cv = c[i + j];
            double v = m[i] ? bv : 0.0, w = m[i] ? cv : 0.0;
            cb[i] = cb[i] > v ? cb[i] : v;
            cc[i] = cc[i] > w ? cc[i] : w;
        }
        for (i64 i = j; i < n; i++) {  /* i sees i - j */
            double bv = b[i - j], cv = c[i - j];
            double v = m[i - j] ? bv : 0.0, w = m[i - j] ? cv : 0.0;
            cb[i] = cb[i] > v ? cb[i] : v;
            cc[i] = cc[i] > w ? cc[i] : w;
        }
    }
    /* the logit, in calibrated.probability's order of additions: all but the author's term
     * (the loop vectorises), then that term (without a named owner every author is 0, whose
     * product is one constant), negated */
    for (i64 i = 0; i < n; i++) {
        double logit = b[i] * wb[i];
        logit += base[i];
        double t = c[i] * wc[i];
        logit += t;
        t = cb[i] * w_cb;
        logit += t;
        t = cc[i] * w_cc;
        logit += t;
        neg[i] = logit;
    }
    const double none = 0.0 * w_an;
    for (i64 i = 0; i < n; i++) {
        double t = na ? named[owner[i]] * w_an : none;
        neg[i] = -(neg[i] + t);
        ev[i] = (unsigned char)((b[i] > 0.0) | (c[i] >= min_cosine));
    }
}

static PyObject *cal_logits(PyObject *self, PyObject *args) {
    Py_buffer bseq, bat, blex, bcos, bown, bnamed, bwb, bwc, bbase, bnear, bneg, bev;
    Py_ssize_t k;
    double w_cb, w_cc, w_an, min_cosine;
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*y*y*y*y*y*nddddw*w*", &bseq, &bat, &blex, &bcos,
                          &bown, &bnamed, &bwb, &bwc, &bbase, &bnear, &k, &w_cb, &w_cc,
                          &w_an, &min_cosine, &bneg, &bev))
        return NULL;
    PyObject *ret = NULL;
    double *b = NULL;
    i64 n = bseq.len / 8, h = bat.len / 8, ncos = bcos.len / 8, na = bnamed.len / 8;
    if (blex.len != bat.len || bown.len != n * 4 || bwb.len != n * 8 || bwc.len != n * 8 ||
        bbase.len != n * 8 || k < 0 || bnear.len != k * n || bneg.len != n * 8 ||
        bev.len != n) {
        PyErr_SetString(PyExc_ValueError, "logits: arrays of different lengths");
        goto done;
    }
    const i64 *seq = bseq.buf, *at = bat.buf;
    const double *lex = blex.buf, *cos = bcos.buf, *named = bnamed.buf;
    const int32_t *owner = bown.buf;
    const double *wb = bwb.buf, *wc = bwc.buf, *base = bbase.buf;
    const unsigned char *near = bnear.buf;
    double *neg = bneg.buf;
    unsigned char *ev = bev.buf;
    size_t need = 4 * (size_t)n + 1;
    if (need > scratch_cap) {
        double *grown = PyMem_Realloc(scratch, need * sizeof(double));
        if (!grown) { PyErr_NoMemory(); goto done; }
        scratch = grown;
        scratch_cap = need;
    }
    b = scratch;
    double *c = b + n, *cb = b + 2 * n, *cc = b + 3 * n;
    memset(b, 0, (size_t)n * sizeof(double));
    memset(cb, 0, 2 * (size_t)n * sizeof(double));  /* cb and cc */
    if (h) {
        double top = lex[0];
        for (i64 j = 1; j < h; j++)
            top = lex[j] > top ? lex[j] : top;
        for (i64 j = 0; j < h; j++) {
            if (at[j] < 0 || at[j] >= n) {
                PyErr_SetString(PyExc_ValueError, "logits: a BM25 hit outside the notes");
                goto done;
            }
            b[at[j]] = lex[j] / top;
        }
    }
    for (i64 i = 0; i < n; i++) {
        if ((ncos && (seq[i] < 0 || seq[i] >= ncos)) ||
            (na && (owner[i] < 0 || owner[i] >= na))) {
            PyErr_SetString(PyExc_ValueError, "logits: a slot outside the cosines or an owner "
                            "outside the named mask");
            goto done;
        }
    }
    if (ncos)
        for (i64 i = 0; i < n; i++) c[i] = cos[seq[i]];
    else
        memset(c, 0, (size_t)n * sizeof(double));
    arithmetic(n, b, c, cb, cc, near, k, owner, named, na, wb, wc, base, w_cb, w_cc, w_an,
               min_cosine, neg, ev);
    ret = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&bseq);
    PyBuffer_Release(&bat);
    PyBuffer_Release(&blex);
    PyBuffer_Release(&bcos);
    PyBuffer_Release(&bown);
    PyBuffer_Release(&bnamed);
    PyBuffer_Release(&bwb);
    PyBuffer_Release(&bwc);
    PyBuffer_Release(&bbase);
    PyBuffer_Release(&bnear);
    PyBuffer_Release(&bneg);
    PyBuffer_Release(&bev);
    return ret;
}

static PyObject *cal_finish(PyObject *self, PyObject *args) {
    Py_buffer be, bev, bpos;
    double floor;
    if (!PyArg_ParseTuple(args, "w*y*dw*", &be, &bev, &floor, &bpos)) return NULL;
    PyObject *ret = NULL;
    i64 n = be.len / 8, m = 0;
    if ((bev.len != n && bev.len != 0) || bpos.len != n * 8) {
        PyErr_SetString(PyExc_ValueError, "finish: arrays of different lengths");
        goto done;
    }
    double *p = be.buf;
    const unsigned char *ev = bev.buf;
    const int every = bev.len == 0 && n > 0;
    i64 *pos = bpos.buf;
    const int floored = floor > 0.0;
    for (i64 i = 0; i < n; i++)  /* doubles only: the division vectorises */
        p[i] = 1.0 / (p[i] + 1.0);
    for (i64 i = 0; i < n; i++) {  /* branch-free: about half the notes pass */
        double v = (every || ev[i]) ? p[i] : 0.0;
        v = (floored && v < floor) ? 0.0 : v;
        p[i] = v;
        pos[m] = i;
        m += v > 0.0;
    }
    ret = PyLong_FromLongLong(m);
done:
    PyBuffer_Release(&be);
    PyBuffer_Release(&bev);
    PyBuffer_Release(&bpos);
    return ret;
}

#define NEAREST_MAX 4096

static PyObject *cal_nearest(PyObject *self, PyObject *args) {
    Py_buffer bseq, bcos, bout;
    Py_ssize_t k;
    double min_cosine;
    if (!PyArg_ParseTuple(args, "y*y*ndw*", &bseq, &bcos, &k, &min_cosine, &bout))
        return NULL;
    PyObject *ret = NULL;
    i64 n = bseq.len / 8, ncos = bcos.len / 8, m = 0;
    if (bout.len != n * 8) {
        PyErr_SetString(PyExc_ValueError, "nearest: arrays of different lengths");
        goto done;
    }
    if (k < 0 || k > NEAREST_MAX) {
        PyErr_SetString(PyExc_ValueError, "nearest: k outside [0, 4096]");
        goto done;
    }
    const i64 *seq = bseq.buf;
    const double *cos = bcos.buf;
    i64 *out = bout.buf;
    for (i64 i = 0; i < n; i++) {
        if (seq[i] < 0 || seq[i] >= ncos) {
            PyErr_SetString(PyExc_ValueError, "nearest: a slot outside the cosines");
            goto done;
        }
    }
    if (k > 0 && n > 0) {
        const int every = n <= k;
        double cut = 0.0;
        if (!every) {  /* the k largest values so far, descending (duplicates kept) */
            double top[NEAREST_MAX];
            i64 have = 0;
            for (i64 i = 0; i < n; i++) {
                double v = cos[seq[i]];
                if (have == k && !(v > top[k - 1])) continue;
                i64 j = have < k ? have++ : k - 1;
                while (j > 0 && top[j - 1] < v) {
                    top[j] = top[j - 1];
                    j--;
                }
                top[j] = v;
            }
            cut = top[k - 1];  /* the k-th largest: numpy's partition at n - k */
        }
        for (i64 i = 0; i < n; i++) {
            double v = cos[seq[i]];
            if ((every || v >= cut) && v >= min_cosine) out[m++] = i;
        }
    }
    ret = PyLong_FromLongLong(m);
done:
    PyBuffer_Release(&bseq);
    PyBuffer_Release(&bcos);
    PyBuffer_Release(&bout);
    return ret;
}

static PyObject *cal_compact(PyObject *self, PyObject *args) {
    Py_buffer bneg, bev, bat;
    if (!PyArg_ParseTuple(args, "w*y*w*", &bneg, &bev, &bat)) return NULL;
    PyObject *ret = NULL;
    i64 n = bneg.len / 8, m = 0;
    if (bev.len != n || bat.len != n * 8) {
        PyErr_SetString(PyExc_ValueError, "compact: arrays of different lengths");
        goto done;
    }
    double *neg = bneg.buf;
    const unsigned char *ev = bev.buf;
    i64 *at = bat.buf;
    for (i64 i = 0; i < n; i++) {  /* m <= i: moving forward in place is safe */
        neg[m] = neg[i];
        at[m] = i;
        m += ev[i] != 0;
    }
    ret = PyLong_FromLongLong(m);
done:
    PyBuffer_Release(&bneg);
    PyBuffer_Release(&bev);
    PyBuffer_Release(&bat);
    return ret;
}

static PyMethodDef methods[] = {
    {"logits", cal_logits, METH_VARARGS,
     "logits(seq, at, lex, cosine, owner, named, wb, wc, base, near, k, w_cb, w_cc, w_an, "
     "min_cosine, neg, evidence) -> None"},
    {"finish", cal_finish, METH_VARARGS, "finish(e, evidence, floor, pos) -> m"},
    {"nearest", cal_nearest, METH_VARARGS, "nearest(seq, cosine, k, min_cosine, out) -> m"},
    {"compact", cal_compact, METH_VARARGS, "compact(neg, evidence, at) -> m"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_calibrated",
                                    "Calibrated relevance's per-note arithmetic in C (see "
                                    "calibrated.py).", -1, methods};

PyMODINIT_FUNC PyInit__calibrated(void) { return PyModule_Create(&module); }
