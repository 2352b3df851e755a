/* The exact path of packing.pack_positions in C: the same reduction (Dembo-Hammer item
 * dropping, Martello-Toth variable fixing, the window lower bound) and the same DP as
 * packing.py's numpy code, which stays the reference (tests/unit/projections/ranking/test_packing_native.py runs both
 * on the same instances and requires the same packing).
 *
 * Why C: on a common-word query (~7,500 candidates, ~200 left after dropping, a core of ~14)
 * the numpy path is ~100 array calls of a few microseconds each; the work itself is tiny.
 *
 * Two functions, over C-contiguous buffers (numpy arrays):
 *   solve(costs int64[n], values float64[n], budget, cap, prune_from, window_from,
 *         fill_chunk, state int8[n] (out), scaled int64[n] (out)) -> room
 *       (prune_from, window_from, fill_chunk: packing.PRUNE_FROM, WINDOW_FROM_CELLS,
 *       FILL_FROM; see knap_solve)
 *       state[i] = 1: every optimal packing takes item i; 2: left open (the core); 0: no
 *       optimal packing takes it. Returns the room left by the fixed items, or -1 when the
 *       reduction failed (the caller falls back to the numpy path).
 *   dp(costs int64[m], values int64[m], width, chosen int8[m] (out)) -> None
 *       the optimal packing within width, strict improvement keeps earlier items (items in
 *       canonical order), walking back from width: packing._dp's choice.
 * Floating point: the same IEEE operations as the numpy code (compile with
 * -ffp-contract=off); sums of floats run left to right where numpy sums pairwise, which can
 * differ in the last bits, so every proof keeps packing.py's safety margin.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define WINDOW 8
#define VALUE_SCALE 1e9            /* packing.VALUE_SCALE */
#define MAX_SCALED_TOTAL 4611686018427387904.0  /* packing.MAX_SCALED_TOTAL, 2**62 */
#define SAMPLE 256

typedef int64_t i64;

/* ---- break density: weighted quickselect ------------------------------------------------ */

static void swap_i(i64 *a, i64 *b) { i64 t = *a; *a = *b; *b = t; }

/* The density r with the items denser than r fitting whole in budget and those at least as
 * dense not fitting (the LP break item's density). 0 when everything fits (*found = 0).
 * work: a permutation of 0..n-1 (scratch). */
static double break_density(const i64 *costs, const double *density, i64 *work, i64 n,
                            i64 budget, int *found) {
    i64 lo = 0, hi = n, rem = budget;
    *found = 0;
    while (lo < hi) {
        i64 a = work[lo], b = work[lo + (hi - lo) / 2], c = work[hi - 1];
        double da = density[a], db = density[b], dc = density[c], p;
        if ((da <= db && db <= dc) || (dc <= db && db <= da)) p = db;
        else if ((db <= da && da <= dc) || (dc <= da && da <= db)) p = da;
        else p = dc;
        /* three-way partition of work[lo:hi]: > p | == p | < p */
        i64 gt = lo, i = lo, lt = hi;
        while (i < lt) {
            double d = density[work[i]];
            if (d > p) swap_i(&work[gt++], &work[i++]);
            else if (d < p) swap_i(&work[i], &work[--lt]);
            else i++;
        }
        i64 cg = 0, ce = 0;
        for (i64 k = lo; k < gt; k++) cg += costs[work[k]];
        if (cg > rem) { hi = gt; continue; }
        for (i64 k = gt; k < lt; k++) ce += costs[work[k]];
        if (cg + ce > rem) { *found = 1; return p; }
        rem -= cg + ce;
        lo = lt;
    }
    return 0.0;
}

/* ---- sorting by density ------------------------------------------------------------------ */

typedef struct { double d; i64 v; i64 c; i64 i; } Key;

static void swap_k(Key *a, Key *b) { Key t = *a; *a = *b; *b = t; }

/* survivors' greedy order: density desc, value desc, cost asc (then index) */
static int fill_cmp(const void *pa, const void *pb) {
    const Key *a = pa, *b = pb;
    if (a->d > b->d) return -1;
    if (a->d < b->d) return 1;
    if (a->v > b->v) return -1;
    if (a->v < b->v) return 1;
    if (a->c < b->c) return -1;
    if (a->c > b->c) return 1;
    return (a->i > b->i) - (a->i < b->i);
}

/* Puts the k first items in fill_cmp order in a[0:k] (in no particular order), 0 < k < m:
 * quickselect (median of three; the keys are distinct, the index breaks ties). */
static void select_first(Key *a, i64 m, i64 k) {
    i64 lo = 0, hi = m - 1;
    while (lo < hi) {
        i64 mid = lo + (hi - lo) / 2;
        if (fill_cmp(&a[mid], &a[lo]) < 0) swap_k(&a[mid], &a[lo]);
        if (fill_cmp(&a[hi], &a[lo]) < 0) swap_k(&a[hi], &a[lo]);
        if (fill_cmp(&a[hi], &a[mid]) < 0) swap_k(&a[hi], &a[mid]);
        Key p = a[mid];
        i64 i = lo, j = hi;
        while (i <= j) {
            while (fill_cmp(&a[i], &p) < 0) i++;
            while (fill_cmp(&p, &a[j]) < 0) j--;
            if (i <= j) { swap_k(&a[i], &a[j]); i++; j--; }
        }
        if (k - 1 <= j) hi = j;
        else if (k - 1 >= i) lo = i;
        else return;
    }
}

/* ---- _survivors ---------------------------------------------------------------------------- */

/* The k-th largest of a[0:n] (0-based; a is reordered): quickselect, median of three. */
static double kth_largest(double *a, i64 n, i64 k) {
    i64 lo = 0, hi = n - 1;
    while (lo < hi) {
        i64 mid = lo + (hi - lo) / 2;
        double x = a[lo], y = a[mid], z = a[hi], p;
        if ((x <= y && y <= z) || (z <= y && y <= x)) p = y;
        else if ((y <= x && x <= z) || (z <= x && x <= y)) p = x;
        else p = z;
        i64 i = lo, j = hi;
        while (i <= j) {
            while (a[i] > p) i++;
            while (a[j] < p) j--;
            if (i <= j) { double t = a[i]; a[i] = a[j]; a[j] = t; i++; j--; }
        }
        if (k <= j) hi = j;
        else if (k >= i) lo = i;
        else return a[k];
    }
    return a[k];
}

/* A density threshold read off a sample of about SAMPLE of the m densities d[k * stride]
 * (k < m): the items at least that dense are roughly the `want` densest. */
static double sampled_threshold(const double *d, i64 m, size_t stride, i64 want,
                                double *sample) {
    i64 step = m / SAMPLE > 1 ? m / SAMPLE : 1, ns = 0;
    for (i64 k = 0; k < m; k += step)
        sample[ns++] = *(const double *)((const char *)d + (size_t)k * stride);
    i64 at = want / step;
    return kth_largest(sample, ns, at < ns ? at : ns - 1);
}

/* Greedy fill of `room` over fits[0:m] in fill_cmp order (density desc, value desc, cost
 * asc), `chunk` or so densest at a time (all ties of the threshold included), the rest
 * dropping what no longer fits; adds to *low what it takes. */
static void fill(Key *fits, i64 m, i64 room, i64 chunk, i64 *low, double *sample) {
    while (m > 0 && room > 0) {
        i64 k = m;
        if (m > 4 * chunk) {
            double t = sampled_threshold(&fits[0].d, m, sizeof(Key), 2 * chunk, sample);
            k = 0;
            for (i64 q = 0; q < m; q++)
                if (fits[q].d >= t) swap_k(&fits[k++], &fits[q]);
            if (k == 0 || k > 16 * chunk) {  /* a poor sample: select exactly */
                k = chunk;
                select_first(fits, m, k);
            }
        }
        qsort(fits, (size_t)k, sizeof(Key), fill_cmp);
        for (i64 q = 0; q < k && room > 0; q++)
            if (fits[q].c <= room) { room -= fits[q].c; *low += fits[q].v; }
        i64 left = 0;  /* the rest that still fits */
        for (i64 q = k; q < m; q++)
            if (fits[q].c <= room) fits[left++] = fits[q];
        m = left;
    }
}

/* packing._survivors: writes the items that may belong to an optimal packing to keys (in
 * index order) and returns how many; all of them when the test drops none. -2: no memory. */
static i64 survivors(const i64 *costs, const i64 *values, const double *density, i64 n,
                     i64 budget, i64 total, i64 chunk, Key *keys) {
    i64 m = 0;
    double *sample = NULL;
    i64 *work = NULL;
    Key *fits = NULL;
    i64 kept = -2;
    if (total <= budget) goto all;
    sample = PyMem_Malloc(sizeof(double) * (2 * SAMPLE + 2));  /* sampled_threshold: < 2 SAMPLE */
    work = PyMem_Malloc(sizeof(i64) * (size_t)n);
    if (!sample || !work) goto done;
    /* the break density among the items at least as dense as a sampled threshold whose
     * cost exceeds the budget (the break item is one of them) */
    i64 nw = 0;
    double want = 2.0 * (double)budget, d;  /* a double: no overflow however large */
    int found = 0;
    for (;;) {
        /* est. count of the densest items costing ~want: want / mean cost */
        double est = want * (double)n / (double)total;
        i64 count = est >= (double)n ? n : (i64)est + 1;
        double t = count >= n ? -INFINITY
                              : sampled_threshold(density, n, sizeof(double), count, sample);
        i64 cw = 0;
        nw = 0;
        for (i64 i = 0; i < n; i++)
            if (density[i] >= t) { work[nw++] = i; cw += costs[i]; }
        if (cw > budget || t == -INFINITY) break;
        want *= 4.0;
    }
    d = break_density(costs, density, work, nw, budget, &found);
    if (!found || !isfinite(d)) goto all;
    double r = -INFINITY;
    i64 room = budget, low = 0, vmax = 0;
    for (i64 k = 0; k < nw; k++) {
        i64 i = work[k];
        if (density[i] == d) {
            double q = (double)values[i] / (double)costs[i];
            if (q > r) r = q;
        } else if (density[i] > d) { room -= costs[i]; low += values[i]; }
    }
    fits = PyMem_Malloc(sizeof(Key) * (size_t)n);
    if (!fits) goto done;
    i64 sc_pos = 0, sv_pos = 0;
    for (i64 i = 0; i < n; i++) {
        i64 c = costs[i], v = values[i];
        double g = (double)v - r * (double)c;
        if (g > 0.0) { sc_pos += c; sv_pos += v; }
        if (v > vmax) vmax = v;
        if (c <= room && !(density[i] > d)) fits[m++] = (Key){density[i], v, c, i};
    }
    double lag = r * (double)(budget - sc_pos) + (double)sv_pos;
    fill(fits, m, room, chunk, &low, sample);
    if (vmax > low) low = vmax;
    double bar = lag + 1e-9 * fabs(lag) + 16.0, lowf = (double)low;
    m = 0;
    for (i64 i = 0; i < n; i++) {
        double g = (double)values[i] - r * (double)costs[i];
        if (!(density[i] < d && g + bar < lowf)) keys[m++] = (Key){density[i], values[i], costs[i], i};
    }
    kept = m;
    goto done;
all:
    for (i64 i = 0; i < n; i++) keys[i] = (Key){density[i], values[i], costs[i], i};
    kept = n;
done:
    PyMem_Free(sample);
    PyMem_Free(work);
    PyMem_Free(fits);
    return kept;
}

/* keys[0:m] (in index order) by density descending, ties in index order: LSD radix sort
 * (stable) on the bits of the density (non-negative doubles order as their bits). */
static int sort_by_density(Key *keys, i64 m) {
    Key *tmp = PyMem_Malloc(sizeof(Key) * ((size_t)m + 1));
    if (!tmp) return -1;
    size_t cnt[256];
    Key *src = keys, *dst = tmp;
    for (int shift = 0; shift < 64; shift += 8) {
        memset(cnt, 0, sizeof cnt);
        for (i64 j = 0; j < m; j++) {
            uint64_t u;
            memcpy(&u, &src[j].d, 8);
            cnt[((~u) >> shift) & 255]++;
        }
        int same = 0;
        for (int q = 0; q < 256; q++) if (cnt[q] == (size_t)m) same = 1;
        if (same) continue;
        size_t pos = 0;
        for (int q = 0; q < 256; q++) { size_t c = cnt[q]; cnt[q] = pos; pos += c; }
        for (i64 j = 0; j < m; j++) {
            uint64_t u;
            memcpy(&u, &src[j].d, 8);
            dst[cnt[((~u) >> shift) & 255]++] = src[j];
        }
        Key *t = src; src = dst; dst = t;
    }
    if (src != keys) memcpy(keys, src, sizeof(Key) * (size_t)m);
    PyMem_Free(tmp);
    return 0;
}

/* ---- DP -------------------------------------------------------------------------------- */

static i64 dp_value(const i64 *c, const i64 *v, i64 m, i64 width, i64 *best) {
    i64 free_v = 0;
    for (i64 k = 0; k <= width; k++) best[k] = 0;
    for (i64 j = 0; j < m; j++) {
        i64 w = c[j], val = v[j];
        if (w == 0) { free_v += val; continue; }
        for (i64 k = width; k >= w; k--) {
            i64 cand = best[k - w] + val;
            if (cand > best[k]) best[k] = cand;
        }
    }
    return best[width] + free_v;
}

/* ---- the reduction (survivors, greedy, Fixing, window, tighten) -------------------------- */

typedef struct {
    i64 m, b;
    i64 *idx;      /* by density: item index */
    i64 *c, *v;    /* costs, values in that order */
    i64 *pc, *pv;  /* prefix sums, m + 1 */
} Order;

static double lp_rest(const Order *o, i64 pos, double room) {
    if (pos >= o->m) return 0.0;
    double cf = (double)o->c[pos];
    return (double)o->v[pos] * room / (cf > 0 ? cf : 1.0);
}

/* first k in [0, m] with pc[k] > x (searchsorted side="right") */
static i64 upper(const i64 *pc, i64 m, i64 x) {
    i64 lo = 0, hi = m + 1;
    while (lo < hi) {
        i64 mid = lo + (hi - lo) / 2;
        if (pc[mid] <= x) lo = mid + 1; else hi = mid;
    }
    return lo;
}

/* The reduction of items 0..n-1 (all eligible: cost <= budget, value > 0): state[i] as in
 * `solve`, *room_out the room the fixed items leave (-1: none). 0, or -1 out of memory. */
static int reduce_core(const i64 *costs, const i64 *values, const double *density, i64 n,
                       i64 budget, i64 cap, i64 prune_from, i64 window_from, i64 fill_chunk,
                       signed char *state, i64 *room_out) {
    int status = -1;
    Key *keys = NULL;
    i64 *mem = NULL;
    double *ub = NULL;
    char *fin = NULL, *fout = NULL;
    keys = PyMem_Malloc(sizeof(Key) * ((size_t)n + 1));
    if (!keys) goto done;
    memset(state, 0, (size_t)n);
    i64 total = 0;
    for (i64 i = 0; i < n; i++) total += costs[i];
    /* n < prune_from: every item (survivors' total <= budget case) */
    i64 m = survivors(costs, values, density, n, budget, n >= prune_from ? total : 0,
                      fill_chunk, keys);
    if (m < 0 || sort_by_density(keys, m) < 0) goto done;
    mem = PyMem_Malloc(sizeof(i64) * (5 * (size_t)m + 2));
    ub = PyMem_Malloc(sizeof(double) * ((size_t)m + 1) * 4);
    fin = PyMem_Malloc((size_t)m + 1);
    fout = PyMem_Malloc((size_t)m + 1);
    if (!mem || !ub || !fin || !fout) goto done;
    Order o = {m, 0, mem, mem + m, mem + 2 * m, mem + 3 * m, mem + 4 * m + 1};
    o.pc[0] = o.pv[0] = 0;
    i64 vmax = 0;
    for (i64 j = 0; j < m; j++) {
        o.idx[j] = keys[j].i;
        o.c[j] = keys[j].c;
        o.v[j] = keys[j].v;
        o.pc[j + 1] = o.pc[j] + o.c[j];
        o.pv[j + 1] = o.pv[j] + o.v[j];
        if (o.v[j] > vmax) vmax = o.v[j];
    }
    /* greedy lower bound: the prefix that fits whole, then whatever still fits */
    i64 b = upper(o.pc, m, budget) - 1;  /* items 0..b-1 fit whole */
    o.b = b;
    i64 room = budget - o.pc[b], low = o.pv[b];
    for (i64 j = b; j < m && room > 0; j++)
        if (o.c[j] <= room) { room -= o.c[j]; low += o.v[j]; }
    if (vmax > low) low = vmax;
    /* Fixing: Dembo-Hammer, then Martello-Toth for what is still open */
    double *g = ub, *without = ub + m, *ub_rp = ub + 2 * m, *ub_ro = ub + 3 * m;
    double margin = 1e-9 * (double)o.pv[m] + 16.0;
    double r = b < m ? (double)o.v[b] / (double)o.c[b] : 0.0;
    double sum_pos = 0.0;
    for (i64 j = 0; j < m; j++) {
        g[j] = (double)o.v[j] - r * (double)o.c[j];
        if (g[j] > 0.0) sum_pos += g[j];
    }
    double lag = r * (double)budget + sum_pos;
    double lowf = (double)low;
    for (i64 j = 0; j < m; j++) {
        without[j] = lag - (g[j] > 0.0 ? g[j] : 0.0);
        fin[j] = without[j] + margin < lowf;
        fout[j] = without[j] + g[j] + margin < lowf;
        ub_rp[j] = INFINITY;
        ub_ro[j] = INFINITY;
        if (fin[j] || fout[j]) continue;
        if (j <= b) {  /* drop the item; the prefix runs on over its freed room */
            i64 m0 = upper(o.pc, m, budget + o.c[j]) - 1;
            double u0 = (double)(o.pv[m0] - o.v[j])
                        + lp_rest(&o, m0, (double)(budget - (o.pc[m0] - o.c[j])));
            ub_rp[j] = without[j] < u0 ? without[j] : u0;
        }
        if (j >= b) {  /* take the item; the rest fills budget - its cost */
            i64 m1 = upper(o.pc, m, budget - o.c[j]) - 1;
            double u1 = (double)(o.v[j] + o.pv[m1])
                        + lp_rest(&o, m1, (double)(budget - o.c[j] - o.pc[m1]));
            double w = without[j] + g[j];
            ub_ro[j] = w < u1 ? w : u1;
        }
    }
    for (int pass = 0; pass < 2; pass++) {
        /* tighten at lowf */
        for (i64 j = 0; j < m; j++) {
            if (ub_rp[j] + margin < lowf) fin[j] = 1;
            if (ub_ro[j] + margin < lowf && !fin[j]) fout[j] = 1;
        }
        i64 fixed_c = 0, fixed_v = 0, ncore = 0;
        for (i64 j = 0; j < m; j++) {
            if (fin[j]) { fixed_c += o.c[j]; fixed_v += o.v[j]; }
            else if (!fout[j]) ncore++;
        }
        room = budget - fixed_c;
        if (room < 0) { *room_out = -1; status = 0; goto done; }
        if (pass == 1 || !(ncore > 2 * WINDOW && ncore * room > window_from)) break;
        /* _window_lower: the core's items that fit the room, in density order */
        i64 *cd = PyMem_Malloc(sizeof(i64) * ((size_t)ncore + 1));
        if (!cd) goto done;
        i64 nc = 0;
        for (i64 j = 0; j < m; j++)
            if (!fin[j] && !fout[j] && o.c[j] <= room) cd[nc++] = j;
        i64 k = 0, acc = 0;
        while (k < nc && acc + o.c[cd[k]] <= room) acc += o.c[cd[k++]];
        i64 better = -1;
        if (k < nc) {
            double dk = keys[cd[k]].d;
            i64 lo = k, hi = k + 1;
            while (lo > 0 && keys[cd[lo - 1]].d == dk) lo--;
            while (hi < nc && keys[cd[hi]].d == dk) hi++;
            lo = lo - WINDOW > 0 ? lo - WINDOW : 0;
            hi = hi + WINDOW < nc ? hi + WINDOW : nc;
            while (lo > 0 && keys[cd[lo - 1]].d == keys[cd[lo]].d) lo--;
            while (hi < nc && keys[cd[hi]].d == keys[cd[hi - 1]].d) hi++;
            if (!(lo == 0 && hi == nc)) {
                i64 before_c = 0, before_v = 0, win_c = 0;
                for (i64 q = 0; q < lo; q++) { before_c += o.c[cd[q]]; before_v += o.v[cd[q]]; }
                for (i64 q = lo; q < hi; q++) win_c += o.c[cd[q]];
                i64 spare = room - before_c;
                i64 width = spare < win_c ? spare : win_c;
                if (width >= 0 && (hi - lo) * width <= cap) {
                    i64 *wc = PyMem_Malloc(sizeof(i64) * (2 * (size_t)(hi - lo) + (size_t)width + 1));
                    if (!wc) { PyMem_Free(cd); goto done; }
                    i64 *wv = wc + (hi - lo), *best = wv + (hi - lo);
                    for (i64 q = lo; q < hi; q++) { wc[q - lo] = o.c[cd[q]]; wv[q - lo] = o.v[cd[q]]; }
                    better = fixed_v + before_v + dp_value(wc, wv, hi - lo, width, best);
                    PyMem_Free(wc);
                }
            }
        }
        PyMem_Free(cd);
        if (better > low) { low = better; lowf = (double)low; }
        else break;
    }
    for (i64 j = 0; j < m; j++)
        state[o.idx[j]] = (signed char)(fin[j] ? 1 : (fout[j] ? 0 : 2));
    *room_out = room;
    status = 0;
done:
    PyMem_Free(keys);
    PyMem_Free(mem);
    PyMem_Free(ub);
    PyMem_Free(fin);
    PyMem_Free(fout);
    return status;
}

/* solve(costs int64[n], values float64[n], budget, cap, prune_from, window_from, fill_chunk,
 *       state int8[n] (out), scaled int64[n] (out)) -> room
 * pack_positions' exact path from its raw arrays: the eligible items (cost <= budget, value
 * > 0), their values as integers (packing._scaled: rint(value * VALUE_SCALE)) and densities,
 * then the reduction (reduce_core) over them; ineligible items get state 0 and scaled 0. Returns -2 where the
 * numpy path must decide (no eligible item, nothing costs anything, or values so large that
 * _scaled would shrink its scale). */
static PyObject *knap_solve(PyObject *self, PyObject *args) {
    Py_buffer bc, bf, bs, bsc;
    long long budget, cap, prune_from, window_from, fill_chunk;
    if (!PyArg_ParseTuple(args, "y*y*LLLLLw*w*", &bc, &bf, &budget, &cap, &prune_from,
                          &window_from, &fill_chunk, &bs, &bsc))
        return NULL;
    PyObject *ret = NULL;
    i64 n = bc.len / 8, room = -2;
    i64 *cc = NULL, *vv = NULL, *at = NULL;
    double *dd = NULL;
    signed char *st = NULL;
    if (bf.len != bc.len || bs.len != n || bsc.len != bc.len || bc.len % 8 || budget < 0
            || fill_chunk < 1) {
        PyErr_SetString(PyExc_ValueError,
                        "solve: arrays of different lengths, budget < 0 or fill_chunk < 1");
        goto done;
    }
    const i64 *costs = bc.buf;
    const double *floats = bf.buf;
    signed char *state = bs.buf;
    i64 *scaled = bsc.buf;
    cc = PyMem_Malloc(sizeof(i64) * ((size_t)n + 1));
    vv = PyMem_Malloc(sizeof(i64) * ((size_t)n + 1));
    at = PyMem_Malloc(sizeof(i64) * ((size_t)n + 1));
    dd = PyMem_Malloc(sizeof(double) * ((size_t)n + 1));
    st = PyMem_Malloc((size_t)n + 1);
    if (!cc || !vv || !at || !dd || !st) { PyErr_NoMemory(); goto done; }
    i64 m = 0, cost_sum = 0;
    double sum = 0.0;
    for (i64 i = 0; i < n; i++) {
        state[i] = 0;
        scaled[i] = 0;
        if (costs[i] <= budget && floats[i] > 0.0) {
            at[m] = i;
            cc[m] = costs[i];
            cost_sum += costs[i];
            sum += floats[i];
            m++;
        }
    }
    /* _scaled's scale is VALUE_SCALE unless the total nears MAX_SCALED_TOTAL / VALUE_SCALE:
     * that (never with scores in [0, 1]) is left to the numpy code */
    if (m == 0 || cost_sum == 0 || !(sum * (1 + 1e-5) < MAX_SCALED_TOTAL / VALUE_SCALE)) {
        ret = PyLong_FromLongLong(-2);
        goto done;
    }
    for (i64 j = 0; j < m; j++) {
        double f = floats[at[j]];
        vv[j] = (i64)nearbyint(f * VALUE_SCALE);
        dd[j] = cc[j] > 0 ? f / (double)cc[j] : INFINITY;
        scaled[at[j]] = vv[j];
    }
    if (reduce_core(cc, vv, dd, m, budget, cap, prune_from, window_from, fill_chunk, st,
                    &room) < 0) {
        PyErr_NoMemory();
        goto done;
    }
    for (i64 j = 0; j < m; j++) state[at[j]] = st[j];
    ret = PyLong_FromLongLong(room);
done:
    PyMem_Free(cc);
    PyMem_Free(vv);
    PyMem_Free(at);
    PyMem_Free(dd);
    PyMem_Free(st);
    PyBuffer_Release(&bc);
    PyBuffer_Release(&bf);
    PyBuffer_Release(&bs);
    PyBuffer_Release(&bsc);
    return ret;
}

static PyObject *knap_dp(PyObject *self, PyObject *args) {
    Py_buffer bc, bv, bs;
    long long width;
    if (!PyArg_ParseTuple(args, "y*y*Lw*", &bc, &bv, &width, &bs)) return NULL;
    PyObject *ret = NULL;
    i64 n = bc.len / 8;
    i64 *best = NULL;
    unsigned char *take = NULL;
    if (bv.len != bc.len || bs.len != n || width < 0) {
        PyErr_SetString(PyExc_ValueError, "dp: arrays of different lengths or width < 0");
        goto done;
    }
    const i64 *c = bc.buf, *v = bv.buf;
    signed char *chosen = bs.buf;
    size_t cols = (size_t)width + 1;
    best = PyMem_Calloc(cols, sizeof(i64));
    take = PyMem_Calloc((size_t)n * cols + 1, 1);
    if (!best || !take) { PyErr_NoMemory(); goto done; }
    for (i64 i = 0; i < n; i++) {
        i64 w = c[i], val = v[i];
        unsigned char *row = take + (size_t)i * cols;
        if (w == 0) { memset(row, 1, cols); continue; }  /* free: always taken */
        for (i64 k = width; k >= w; k--) {
            i64 cand = best[k - w] + val;
            if (cand > best[k]) { best[k] = cand; row[k] = 1; }
        }
    }
    i64 k = width;
    for (i64 i = n - 1; i >= 0; i--) {
        chosen[i] = (signed char)take[(size_t)i * cols + (size_t)k];
        if (chosen[i]) k -= c[i];
    }
    ret = Py_NewRef(Py_None);
done:
    PyMem_Free(best);
    PyMem_Free(take);
    PyBuffer_Release(&bc);
    PyBuffer_Release(&bv);
    PyBuffer_Release(&bs);
    return ret;
}

static PyMethodDef methods[] = {
    {"dp", knap_dp, METH_VARARGS, "dp(costs, values, width, chosen) -> None"},
    {"solve", knap_solve, METH_VARARGS,
     "solve(costs, values, budget, cap, prune_from, window_from, fill_chunk, state, scaled)"
     " -> room (-1: failed, -2: left to the numpy code)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_knapsack",
                                    "The exact packing path in C (see packing.py).", -1,
                                    methods};

PyMODINIT_FUNC PyInit__knapsack(void) {
    PyObject *mod = PyModule_Create(&module);
    if (mod && PyModule_AddIntConstant(mod, "WINDOW", WINDOW) < 0) {
        Py_DECREF(mod);
        return NULL;
    }
    return mod;
}
