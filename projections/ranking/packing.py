"""Choose items that maximise total value within a token budget (0/1 knapsack).

* Exact, in two steps: first a Martello–Toth style reduction fixes every item that the LP
  (Dantzig) bound proves in or out of *every* optimal packing, measured against a known
  packing (density greedy or the best single item; if the core is still too large, the
  greedy+swap result below, which is at least as good); then a dynamic programme over cost
  (numpy, one row of choices per item) solves the items left open (the *core*) while
  ``core items x min(room, their total cost) <= exact_max_cells``. Because fixed items belong
  to every optimum and the DP breaks ties the same way on any subset (strict improvement
  keeps earlier items in canonical order), the reduction returns exactly the packing the
  full table would. ``exact_max_cells = 0`` turns exact packing off.
* Otherwise ``greedy+swap``: value-per-token greedy, the best single item if that beats it,
  then a local search that applies the best improving move (add one item; swap one chosen item
  for one unchosen item; swap one chosen item for two unchosen items from a core of the most
  valuable and most value-dense ones) until none improves. It starts from greedy and only ever
  improves, so it is never worse than plain greedy. ``upper_bound`` is the fractional (LP)
  relaxation, so ``total_value / upper_bound`` bounds the gap to the optimum.

The exact path of ``pack_positions`` (the query path) runs in C where the extension
``projections/ranking/_knapsack.c`` was built (``native``): the same reduction and DP, so the
same packing; the numpy code here is its reference and fallback (``HIVEMIND_PACKER=numpy``,
read by the settings).

Values are compared as integers (``round(value * scale)``, scale 1e9 unless the total is huge)
so results are exact and reproducible. Ties go to the canonical order, value descending then
key, which makes the result independent of the input order. Items with cost > budget or value
<= 0 are never chosen; keys must be unique.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Protocol

import msgspec
import numpy as np
import numpy.typing as npt

from hivemind_memory.projections import ranking
from hivemind_memory.projections.ranking.rank_result import Method

VALUE_SCALE = 1e9
"""Values are compared as ``round(value * VALUE_SCALE)`` integers (1e-9 resolution)."""
MAX_SCALED_TOTAL = 2.0**62
"""The scale shrinks so that the scaled sum of all values stays below this (int64 safe)."""
SWAP_PAIR_CORE = 96
"""Unchosen items considered for one-for-two swaps: this many by value, this many by density."""

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
Int8Array = npt.NDArray[np.int8]


class NativePacker(Protocol):
    """What this module calls of the C packer (checked against ``_knapsack.pyi``)."""

    def solve(self, costs: IntArray, values: FloatArray, budget: int, cap: int,
              prune_from: int, window_from: int, fill_chunk: int, state: Int8Array,
              scaled: IntArray) -> int: ...

    def dp(self, costs: IntArray, values: IntArray, width: int, chosen: Int8Array) -> None: ...


_built: NativePacker | None
try:
    from hivemind_memory.projections.ranking import _knapsack as _built
except ImportError:  # pragma: no cover - an install without a C compiler
    _built = None

native: NativePacker | None = _built
"""The exact path in C (``projections/ranking/_knapsack.c``), when it was built and not turned
off (``use_packer("numpy")``, which ``Settings.packer`` / ``HIVEMIND_PACKER=numpy`` asks the
entry points for); otherwise the numpy code below (the reference: the tests run both and require
the same packing)."""

PACKERS = ranking.PACKERS
"""The packers ``use_packer`` accepts."""


def use_packer(name: str) -> None:
    """Pack with the C path (``"c"``, where it was built) or the numpy reference (``"numpy"``)
    from now on, in this process. Called at the edges with ``Settings.packer``; this module
    reads no environment."""
    global native
    if name not in PACKERS:
        raise ValueError(f"packer must be one of {', '.join(PACKERS)}, got {name!r}")
    native = _built if name == "c" else None




class Item(msgspec.Struct, frozen=True):
    """One candidate: ``cost`` tokens for ``value``."""

    key: str
    cost: int
    value: float


class PackResult(msgspec.Struct, frozen=True):
    """The chosen keys (canonical order: value desc, then key) and how they were found."""

    chosen: tuple[str, ...]
    method: Method
    total_value: float
    total_cost: int
    upper_bound: float


def _canonical(items: Iterable[Item], budget: int) -> list[Item]:
    """Eligible items in canonical order; validates keys, costs and values."""
    seen: set[str] = set()
    out: list[Item] = []
    for it in items:
        if it.key in seen:
            raise ValueError(f"duplicate item key {it.key!r}")
        seen.add(it.key)
        if it.cost < 0:
            raise ValueError(f"item {it.key!r} has negative cost {it.cost}")
        if not math.isfinite(it.value):
            raise ValueError(f"item {it.key!r} has a non-finite value {it.value}")
        if it.cost <= budget and it.value > 0.0:
            out.append(it)
    if not out:
        return out
    # numpy's stable lexsort: value descending, then key (code point order, like str's <)
    keys = np.array([it.key for it in out], dtype=np.str_)
    order = np.lexsort((keys, -np.array([it.value for it in out], dtype=np.float64)))
    return [out[i] for i in order]


def _scaled(values: FloatArray) -> IntArray:
    """Values as integers, ``rint(value * scale)`` (round half to even, like ``round``)."""
    rough = float(values.sum())  # when far from the limit, the exact sum needs no computing
    total = rough if rough * (1 + 1e-6) < MAX_SCALED_TOTAL / VALUE_SCALE else math.fsum(
        values.tolist())
    scale = min(VALUE_SCALE, MAX_SCALED_TOTAL / total) if len(values) else VALUE_SCALE
    return np.rint(values * scale).astype(np.int64)


def _break_density(costs: IntArray, density: FloatArray, budget: int) -> float | None:
    """The density of the LP break item: ``r`` with the items denser than ``r`` fitting
    whole in ``budget`` and those at least as dense not fitting (it does not depend on how
    ties are ordered). None when everything fits. Sorts only the items at least as dense as
    a threshold read off a sample (``BREAK_SAMPLE``), lower thresholds until those items no
    longer fit: a mask and a sum per try, where numpy's (arg)partition took ~0.1 ms per call
    on a common-word query's ~7,000 candidates."""
    n = len(costs)
    if int(costs.sum()) <= budget:
        return None
    step = max(1, n // BREAK_SAMPLE)
    sampled = density[::step]
    by = (-sampled).argsort()
    est = costs[::step][by].cumsum() * step  # the cost of the items at least this dense, roughly
    want = 2 * budget
    while True:
        i = int(est.searchsorted(want, side="right"))
        if i >= len(by):  # every item: their total cost exceeds the budget
            top = np.arange(n)
            break
        top = (density >= sampled[by[i]]).nonzero()[0]
        if int(costs[top].sum()) > budget:
            break
        want *= 4
    top = top[(-density[top]).argsort()]
    pcs = costs[top].cumsum()
    return float(density[top[int(pcs.searchsorted(budget, side="right"))]])


BREAK_SAMPLE = 256
"""``_break_density`` reads its first density threshold off about this many items."""


PRUNE_FROM = 1_500
"""From this many items on, the exact path first drops the items of no optimum
(``_survivors``)."""
FILL_FROM = 64
"""``_survivors`` sorts the items that fit in the room left by the densest ones this many
at a time (more when tied), densest first, as its greedy fill needs them."""


def _survivors(costs: IntArray, values: IntArray, density: FloatArray,
               budget: int) -> IntArray | None:
    """The items that may belong to an optimal packing (ascending), or None when the test
    drops none. O(n) apart from sorting a few items, so the exact path sorts and reduces
    only what is left.

    Dembo–Hammer at the break density: a packing that holds item ``j`` is worth at most
    ``L(r) + g_j``, ``L(r) = r * budget + sum(max(0, g_i))``, ``g_i = v_i - r * c_i``, for any
    ``r >= 0``; an item less dense than the break whose bound falls short of a known
    packing's value by a safe margin is in no optimal packing, and dropping it changes
    neither the optimum nor the packing the DP picks among optima. The known packing: the
    items denser than the break (they fit together), then greedily whatever still fits, in
    the order (density, value descending, cost), or the most valuable item alone if worth
    more. Items equal in all three are interchangeable and the sums are exact integer sums,
    so the result does not depend on the items' order. A dropped item is in no packing worth
    as much as the known one, so it took no part in it (nor in the break or ``L``), and
    skipping it changes no step of the greedy: the test drops nothing more from its own
    survivors, nor from any set between them and all the items."""
    d = _break_density(costs, density, budget)
    if d is None or not math.isfinite(d):
        return None
    # the Lagrangian bound holds for any r >= 0; r in units of the (scaled) values, taken
    # from the items at the break density (all of them: no tie order involved)
    at = density == d
    r = float((values[at] / costs[at]).max())
    g = values - r * costs
    pos = g > 0.0
    lag = r * (budget - int(costs[pos].sum())) + int(values[pos].sum())
    above = density > d
    room = budget - int(costs[above].sum())
    low = int(values[above].sum())
    fits = (~above & (costs <= room)).nonzero()[0]
    while room > 0 and len(fits):  # greedy over the order, sorted a chunk at a time
        if len(fits) > FILL_FROM:  # the densest (ties included: a threshold, not a count)
            t = -np.partition(-density[fits], FILL_FROM - 1)[FILL_FROM - 1]
            chunk, fits = fits[density[fits] >= t], fits[density[fits] < t]
        else:
            chunk, fits = fits, fits[:0]
        chunk = chunk[np.lexsort((costs[chunk], -values[chunk], -density[chunk]))]
        while room > 0 and len(chunk):
            chunk = chunk[costs[chunk] <= room]
            if not len(chunk):
                break
            room -= int(costs[chunk[0]])
            low += int(values[chunk[0]])
            chunk = chunk[1:]
        fits = fits[costs[fits] <= room]
    low = max(low, int(values.max()))
    out = (density < d) & (g + (lag + 1e-9 * abs(lag) + 16.0) < low)
    if not out.any():
        return None
    return (~out).nonzero()[0]


def lp_bound(items: list[Item], budget: int) -> float:
    """The fractional knapsack optimum: an upper bound on any 0/1 packing of ``items``."""
    return _lp_bound(sorted(items, key=_density_key), budget)


def _lp_bound(by_density: list[Item], budget: int) -> float:
    bound = 0.0
    room = budget
    for it in by_density:
        if it.cost <= room:
            bound += it.value
            room -= it.cost
        else:
            bound += it.value * room / it.cost
            break
    return bound


def _density_key(it: Item) -> tuple[float, float, str]:
    density = math.inf if it.cost == 0 else it.value / it.cost
    return (-density, -it.value, it.key)


def _greedy(items: list[Item], by_density: list[int], budget: int) -> list[int]:
    chosen: list[int] = []
    room = budget
    for i in by_density:
        if items[i].cost <= room:
            chosen.append(i)
            room -= items[i].cost
    return chosen


def _best_removal(
    costs: IntArray, values: IntArray, chosen: IntArray, need: IntArray
) -> tuple[IntArray, IntArray]:
    """For each ``need[j]``: the least valuable chosen item with cost >= need[j].

    Returns (index into items, its value); where no chosen item is costly enough the value is
    int64 max, so any gain computed against it is negative. Among equally valuable
    items the costliest goes (it frees the most room). ``chosen`` must not be empty: the search
    starts from a non-empty packing and every move keeps at least one item.
    """
    by_cost = chosen[np.lexsort((chosen, costs[chosen]))]
    # suffix minimum of value over the cost-sorted chosen items
    suf_idx = np.empty(len(by_cost), np.int64)
    best_i = int(by_cost[-1])
    for pos in range(len(by_cost) - 1, -1, -1):
        i = int(by_cost[pos])
        if values[i] < values[best_i]:
            best_i = i
        suf_idx[pos] = best_i
    at = costs[by_cost].searchsorted(need, side="left")
    idx = suf_idx[np.minimum(at, len(by_cost) - 1)]  # meaningless where nothing frees enough
    val = np.where(at < len(by_cost), values[idx], np.iinfo(np.int64).max)
    return idx, val


Move = tuple[int, list[int], list[int]]
"""A local-search move: (scaled gain, items to remove, items to add)."""


def _improve_arrays(
    costs: IntArray, values: IntArray, by_density: IntArray, budget: int, start: list[int]
) -> list[int]:
    """Best-improvement local search from ``start``; terminates (integer value strictly rises).

    Moves: add one item; swap one chosen item for one unchosen; swap one chosen item for two
    unchosen from a core (the ``SWAP_PAIR_CORE`` most valuable and most value-dense unchosen
    items). On equal gains the earlier kind of move wins.
    """
    n = len(costs)
    in_set = np.zeros(n, dtype=np.bool_)
    in_set[start] = True
    by_value = np.arange(n)  # items are already in value-desc order
    dense = np.array(by_density, np.int64)
    while True:
        chosen = in_set.nonzero()[0]
        out = (~in_set).nonzero()[0]
        if len(out) == 0:
            break
        slack = budget - int(costs[chosen].sum())
        moves: list[Move] = []
        fits = out[costs[out] <= slack]
        if len(fits):  # items are in value-descending order: the first that fits is the best
            moves.append((int(values[fits[0]]), [], [int(fits[0])]))
        # rem_val is int64 max where no chosen item frees enough room: a hopeless (negative) gain
        rem_idx, rem_val = _best_removal(costs, values, chosen, costs[out] - slack)
        gain = values[out] - rem_val
        k = int(np.argmax(gain))
        moves.append((int(gain[k]), [int(rem_idx[k])], [int(out[k])]))
        core_mask = np.zeros(n, dtype=np.bool_)
        core_mask[by_value[~in_set[by_value]][:SWAP_PAIR_CORE]] = True
        core_mask[dense[~in_set[dense]][:SWAP_PAIR_CORE]] = True
        core = core_mask.nonzero()[0]
        a, b = np.triu_indices(len(core), k=1)
        if len(a):
            pa, pb = core[a], core[b]
            rem_idx, rem_val = _best_removal(costs, values, chosen, costs[pa] + costs[pb] - slack)
            gain = values[pa] + values[pb] - rem_val
            k = int(np.argmax(gain))
            moves.append((int(gain[k]), [int(rem_idx[k])], [int(pa[k]), int(pb[k])]))
        best_gain, remove, add = max(moves, key=lambda m: m[0])
        if best_gain <= 0:
            break
        in_set[remove] = False
        in_set[add] = True
    return [int(i) for i in in_set.nonzero()[0]]



Keys = Callable[[IntArray], list[str]]
"""The keys of some items, given their indices (read only where needed)."""


def _canonical_order(keys: Keys, values: FloatArray) -> IntArray:
    """Indices in canonical order: value descending, then key (code point order). Keys are
    read only for runs of equal values, so distinct values cost one numpy argsort."""
    order = (-values).argsort(kind="stable")
    sv = values[order]
    tie = sv[1:] == sv[:-1]
    if not tie.any():
        return order
    in_run = np.zeros(len(order), np.bool_)
    in_run[1:] |= tie
    in_run[:-1] |= tie
    pos = in_run.nonzero()[0]  # sorted positions inside a run of equal values
    run_id = np.concatenate(([True], ~tie)).cumsum()[pos]  # same id within a run
    ks = np.array(keys(order[pos]), dtype=np.str_)
    out = order.copy()
    out[pos] = order[pos][np.lexsort((ks, run_id))]
    return out


def _dp(costs: IntArray, values: IntArray, budget: int) -> list[int]:
    """Indices of an optimal packing (DP over cost; strict improvement keeps earlier items).

    The cells of the full table that can matter, no others: for item ``i`` the capacities
    from ``budget - (cost of the items after i)`` (a smaller one is never reached by the walk
    back from ``budget``, nor read by a later item) up to ``top``, the cost of items ``0..i``
    (above it the row is constant: ``best`` cannot grow there, and ``take`` is what it is at
    ``top``), capacities read clamped at ``top``. The same comparisons on the cells kept, so
    the same choice as the full table (a test keeps the full table as the reference)."""
    n = len(costs)
    w_all = costs.tolist()
    v_all = values.tolist()
    best = np.zeros(budget + 1, dtype=np.int64)  # best[c]: best value with total cost <= c
    take = np.zeros((n, budget + 1), dtype=np.bool_)
    tmp = np.empty(budget + 1, dtype=np.int64)
    after = int(costs.sum())  # cost of the items after the current one (once it is removed)
    tops: list[int] = []
    top = 0  # best[c] is exact for c <= top and equal to best[top] above it
    for i in range(n):
        w, v = w_all[i], v_all[i]
        after -= w
        new_top = min(budget, top + w)
        if new_top > top:
            best[top + 1:new_top + 1] = best[top]
        top = new_top
        tops.append(top)
        if w == 0:  # free: always taken (it would lift every best[c] alike, so best stays)
            take[i, :] = True
            continue
        lo = max(w, min(budget - after, top))
        if lo > top:
            continue
        m = top - lo + 1
        cand = tmp[:m]
        np.add(best[lo - w:top - w + 1], v, out=cand)
        np.greater(cand, best[lo:top + 1], out=take[i, lo:top + 1])
        np.maximum(best[lo:top + 1], cand, out=best[lo:top + 1])
    chosen: list[int] = []
    c = budget
    for i in range(n - 1, -1, -1):
        if take[i, min(c, tops[i])]:
            chosen.append(i)
            c -= w_all[i]
    return chosen


def _dp_value(costs: IntArray, values: IntArray, budget: int) -> int:
    """The optimal value alone (``_dp`` without the table of choices)."""
    best = np.zeros(budget + 1, dtype=np.int64)
    tmp = np.empty(budget + 1, dtype=np.int64)
    after = int(costs.sum())
    top = 0
    free = 0
    for w, v in zip(costs.tolist(), values.tolist(), strict=True):
        after -= w
        if w == 0:
            free += v
            continue
        new_top = min(budget, top + w)
        if new_top > top:
            best[top + 1:new_top + 1] = best[top]
        top = new_top
        lo = max(w, min(budget - after, top))
        if lo > top:
            continue
        cand = tmp[:top - lo + 1]
        np.add(best[lo - w:top - w + 1], v, out=cand)
        np.maximum(best[lo:top + 1], cand, out=best[lo:top + 1])
    return int(best[min(budget, top)]) + free


class _Reduction(msgspec.Struct, frozen=True):
    """Items every optimal packing takes (``fixed_in``) and those left open (``core``)."""

    fixed_in: IntArray
    core: IntArray


class _Fixing:
    """Martello–Toth style variable fixing from the Dantzig (LP) bound and a lower bound.

    For an item of the LP solution (the greedy prefix of items that fit whole in density order,
    and the break item after it), the LP bound of the instance *without* it; for the break item
    and every item after it, its value plus the LP bound of the rest with its cost taken out of
    the budget. A bound below ``lower`` (the value of a known
    packing) proves that every optimal packing takes (resp. leaves) the item. Bounds are
    computed in float64 from integer prefix sums and compared with a safety margin, so an item
    is fixed only when the proof holds with room to spare: fixing fewer keeps exactness.

    The bounds do not depend on ``lower``: those of the items left open are kept, so a better
    lower bound found later fixes more items (``tighten``) without computing them again.
    """

    def __init__(self, costs: IntArray, values: IntArray, by_density: IntArray, budget: int,
                 lower: int) -> None:
        c = costs[by_density]
        v = values[by_density]
        n = len(c)
        pc = np.concatenate(([0], c.cumsum()))  # pc[k]: cost of the first k items
        pv = np.concatenate(([0], v.cumsum()))
        b = int(pc.searchsorted(budget, side="right")) - 1  # items fitting whole: 0..b-1
        vf = v.astype(np.float64)
        cf = c.astype(np.float64)

        def lp_rest(m: IntArray, room: IntArray) -> FloatArray:
            """Fraction of the break item at position m filling ``room`` (0 past the end)."""
            inside = m < n
            mm = np.minimum(m, n - 1)
            safe = np.where(cf[mm] > 0, cf[mm], 1.0)
            return np.where(inside, vf[mm] * room / safe, 0.0)

        self.by_density = by_density
        self.margin = margin = 1e-9 * float(pv[-1]) + 16.0
        low = float(lower)
        # Dembo-Hammer first (O(n), no search): the Lagrangian bound
        # L(r) = r * budget + sum(max(0, v_i - r * c_i)) holds for any r >= 0; with x_j forced
        # to 0 it loses max(0, g_j), forced to 1 it becomes L - max(0, g_j) + g_j,
        # g_j = v_j - r c_j.
        r = vf[b] / cf[b] if b < n else 0.0
        g = vf - r * cf
        lag = r * budget + float(np.maximum(g, 0.0).sum())
        pos_g = np.maximum(g, 0.0)
        without = lag - pos_g
        self.fix_in = without + margin < low
        self.fix_out = without + g + margin < low
        # Martello-Toth (tighter, one binary search each) for the items still open. Only the
        # items of the LP solution (the prefix and the break item b) can be proven in:
        # without any other the LP bound stays the same. Only the items from b on can be
        # proven out: with a prefix item forced in it stays the same too.
        pos = np.arange(n)
        rest = (~(self.fix_in | self.fix_out)).nonzero()[0]
        self.rp = rp = rest[pos[rest] <= b]
        self.ro = ro = rest[pos[rest] >= b]
        self.ub_rp = without[rp]  # bound with the item left out
        self.ub_ro = (without + g)[ro]  # bound with the item taken
        if len(rp):  # drop the item; the prefix runs on over its freed room
            cp, vp = c[rp], v[rp]
            m0 = pc.searchsorted(budget + cp, side="right") - 1
            u0 = (pv[m0] - vp).astype(np.float64) + lp_rest(m0, budget - (pc[m0] - cp))
            self.ub_rp = np.minimum(self.ub_rp, u0)
        if len(ro):  # take the item; the rest fills budget - its cost
            rc, rv = c[ro], v[ro]
            m1 = pc.searchsorted(budget - rc, side="right") - 1
            u1 = (rv + pv[m1]).astype(np.float64) + lp_rest(m1, budget - rc - pc[m1])
            self.ub_ro = np.minimum(self.ub_ro, u1)
        self.tighten(lower)

    def tighten(self, lower: int) -> None:
        """Fix what ``lower`` (the value of a known packing) proves."""
        low = float(lower)
        self.fix_in[self.rp] |= self.ub_rp + self.margin < low
        self.fix_out[self.ro] |= (self.ub_ro + self.margin < low) & ~self.fix_in[self.ro]

    def reduction(self) -> _Reduction:
        bd = self.by_density
        return _Reduction(fixed_in=np.sort(bd[self.fix_in]),
                          core=np.sort(bd[~(self.fix_in | self.fix_out)]))


def _reduce(costs: IntArray, values: IntArray, by_density: IntArray, budget: int,
            lower: int) -> _Reduction:
    """``_Fixing``'s reduction at ``lower``."""
    return _Fixing(costs, values, by_density, budget, lower).reduction()


WINDOW = 8
"""Items each side of the core's break item that ``_window_lower`` solves exactly."""
WINDOW_FROM_CELLS = 20_000
"""``_solve_reduced`` looks for a better lower bound when the core's table has more cells."""


def _window_lower(costs: IntArray, values: IntArray, density: FloatArray,
                  by_density: IntArray, red: _Reduction, room: int, cap: int) -> int | None:
    """The value of a good packing, for a better lower bound than greedy's: the fixed items,
    the core's items denser than a window around its break item (in density order, fitting
    in ``room``), and the best choice (a value-only DP) among the window's items, which is
    ``WINDOW`` items each side of the break widened to whole runs of equal density, so that it
    does not depend on how ties are ordered. None when there is no window to solve (the core
    fits whole, or is one run of equal density) or its table exceeds ``cap`` cells."""
    in_core = np.zeros(len(costs), np.bool_)
    in_core[red.core] = True
    cd = by_density[in_core[by_density]]
    cd = cd[costs[cd] <= room]
    pcs = costs[cd].cumsum()
    k = int(pcs.searchsorted(room, side="right"))  # cd[:k] fits whole
    if k >= len(cd):
        return None
    neg = -density[cd]  # non-decreasing
    d = neg[k]
    lo = max(0, int(neg.searchsorted(d, side="left")) - WINDOW)
    hi = min(len(cd), int(neg.searchsorted(d, side="right")) + WINDOW)
    lo = int(neg.searchsorted(neg[lo], side="left"))  # whole runs of equal density
    hi = int(neg.searchsorted(neg[hi - 1], side="right"))
    if lo == 0 and hi == len(cd):
        return None
    before, window = cd[:lo], cd[lo:hi]
    spare = room - int(costs[before].sum())
    width = min(spare, int(costs[window].sum()))
    if len(window) * width > cap:
        return None
    return (int(values[red.fixed_in].sum()) + int(values[before].sum())
            + _dp_value(costs[window], values[window], width))


def _greedy_arrays(costs: IntArray, by_density: IntArray, budget: int) -> list[int]:
    """Density greedy that skips what does not fit: the prefix that fits whole (one cumsum),
    then the first item that still fits, again and again (the room is small by then)."""
    c = costs[by_density]
    b = int(c.cumsum().searchsorted(budget, side="right"))
    chosen: list[int] = [int(i) for i in by_density[:b]]
    room = budget - int(c[:b].sum())
    rest = np.arange(b, len(c))
    while room > 0 and len(rest):
        fits = rest[c[rest] <= room]
        if not len(fits):
            break
        chosen.append(int(by_density[fits[0]]))
        room -= int(c[fits[0]])
        rest = fits[1:]
    return chosen


def _solve_reduced(costs: IntArray, values: IntArray, by_density: IntArray, budget: int,
                   lower: int, cap: int, density: FloatArray,
                   canonical: Callable[[IntArray], IntArray] = np.sort) -> list[int] | None:
    """An optimal packing via reduction then a DP over the core, or None if the core's table
    exceeds ``cap`` cells. ``canonical`` puts a set of indices in canonical order (for items
    already in canonical order, ``np.sort``); the DP runs over the core in that order.

    When the core is more than a small window, a better lower bound (``_window_lower``)
    fixes more items first: any packing's value is a valid lower bound, and fixed items
    belong to every optimum (or none), so the result is the same, from a smaller core."""
    fixing = _Fixing(costs, values, by_density, budget, lower)
    red = fixing.reduction()
    room = budget - int(costs[red.fixed_in].sum())
    if room < 0:  # cannot happen when the lower bound is a real packing; stay safe
        return None
    if len(red.core) > 2 * WINDOW and len(red.core) * room > WINDOW_FROM_CELLS:
        better = _window_lower(costs, values, density, by_density, red, room, cap)
        if better is not None and better > lower:
            fixing.tighten(better)
            red = fixing.reduction()
            room = budget - int(costs[red.fixed_in].sum())
    core = canonical(red.core)
    core = core[costs[core] <= room]
    width = min(room, int(costs[core].sum()))
    if len(core) * width > cap:
        return None
    picked = _dp(costs[core], values[core], width) if len(core) else []
    return [*red.fixed_in.tolist(), *core[picked].tolist()]


def _exact_native(keys: Keys, costs: IntArray, values: FloatArray, budget: int,
                  cap: int) -> Packed | None:
    """``pack_positions``' exact path in C (``_knapsack.solve``): eligibility, ``_scaled``,
    density, ``_survivors``, the density greedy, ``_solve_reduced``'s fixing and window lower
    bound in one call over the raw arrays; then the core is put in canonical order here and
    ``_dp`` runs over it in C (``dp``). None where ``pack_positions``' numpy code must decide:
    the core's table exceeds ``cap`` cells (as ``_solve_reduced``), the reduction failed, or
    the instance is one ``solve`` leaves to it (nothing eligible, nothing costs anything,
    totals near ``MAX_SCALED_TOTAL``)."""
    assert native is not None
    c = np.ascontiguousarray(costs, np.int64)
    f = np.ascontiguousarray(values, np.float64)
    state = np.empty(len(c), np.int8)
    scaled = np.empty(len(c), np.int64)
    room = native.solve(c, f, budget, cap, PRUNE_FROM, WINDOW_FROM_CELLS, FILL_FROM, state,
                        scaled)
    if room < 0:
        return None
    core = (state == 2).nonzero()[0]
    core = core[_canonical_order(lambda i: keys(core[i]), f[core])]
    core = core[c[core] <= room]
    width = min(room, int(c[core].sum()))
    if len(core) * width > cap:
        return None
    picked = np.zeros(len(core), np.int8)
    if len(core):
        native.dp(c[core], scaled[core], width, picked)
    at = np.concatenate(((state == 1).nonzero()[0], core[picked.view(np.bool_)]))
    at.sort()
    total = math.fsum(f[at].tolist())
    return Packed(at=at, method="exact", total_value=total, total_cost=int(c[at].sum()),
                  upper_bound=total)


class Packed(msgspec.Struct, frozen=True):
    """A packing by position (``pack_positions``): what ``PackResult`` says, with the chosen
    items as ascending positions in the given arrays instead of keys in canonical order."""

    at: IntArray
    method: Method
    total_value: float
    total_cost: int
    upper_bound: float


def pack_arrays(keys: Keys, costs: IntArray, values: FloatArray, budget: int,
                exact_max_cells: int) -> PackResult:
    """``pack`` over parallel arrays; ``keys(idx)`` lists the keys of items ``idx`` (keys
    unique, costs >= 0, values finite; not checked). Keys are read only to break ties and
    to name the chosen. See ``pack_positions``."""
    got = pack_positions(keys, costs, values, budget, exact_max_cells)
    at = got.at[_canonical_order(lambda i: keys(got.at[i]), values[got.at])]
    return PackResult(chosen=tuple(keys(at)), method=got.method, total_value=got.total_value,
                      total_cost=got.total_cost, upper_bound=got.upper_bound)


def pack_positions(keys: Keys, costs: IntArray, values: FloatArray, budget: int,
                   exact_max_cells: int) -> Packed:
    """``pack_arrays``'s packing, by position: the chosen items are not named (keys are read
    only to break ties of value).

    The reduction needs no canonical order (the LP bound does not depend on how density ties
    are ordered, and any packing is a lower bound), so only the core is put in canonical
    order; the packing is the one ``pack`` returns. When the core is too large it falls back
    to ``pack``'s path over every item in canonical order.
    """
    if budget < 0:
        raise ValueError(f"budget must be >= 0, got {budget}")
    if native is not None and exact_max_cells > 0 and budget > 0:
        got = _exact_native(keys, costs, values, budget, exact_max_cells)
        if got is not None:
            return got
    ok = ((costs <= budget) & (values > 0.0)).nonzero()[0]
    c = costs[ok].astype(np.int64, copy=False)
    f = values[ok]
    n = len(ok)
    if n and exact_max_cells > 0 and min(budget, int(c.sum())) > 0:
        scaled = _scaled(f)
        density = np.divide(f, c, out=np.full(n, np.inf), where=c > 0)
        keep = _survivors(c, scaled, density, budget) if n >= PRUNE_FROM else None
        if keep is not None:  # the same items the exact path of ``pack`` keeps
            ok, c, f, scaled, density = ok[keep], c[keep], f[keep], scaled[keep], density[keep]
        live = ok

        def canonical(sub: IntArray) -> IntArray:
            return sub[_canonical_order(lambda i: keys(live[sub[i]]), f[sub])]

        by_density = (-density).argsort()
        greedy = _greedy_arrays(c, by_density, budget)
        lower = max(int(scaled[greedy].sum()), int(scaled.max()))
        found = _solve_reduced(c, scaled, by_density, budget, lower, exact_max_cells,
                               density, canonical)
        if found is not None:
            idx = np.array(found, np.int64)
            idx.sort()
            total = math.fsum(f[idx].tolist())
            return Packed(at=ok[idx], method="exact", total_value=total,
                          total_cost=int(c[idx].sum()), upper_bound=total)
        ok = ((costs <= budget) & (values > 0.0)).nonzero()[0]
        f = values[ok]
    canon = ok[_canonical_order(lambda i: keys(ok[i]), f)]
    res, at = _pack_canonical(lambda j: keys(canon[j]), costs[canon].astype(np.int64),
                              values[canon], budget, exact_max_cells)
    chosen = canon[at]
    chosen.sort()
    return Packed(at=chosen, method=res.method, total_value=res.total_value,
                  total_cost=res.total_cost, upper_bound=res.upper_bound)


def _pack_canonical(keys: Keys, costs: IntArray, floats: FloatArray, budget: int,
                    cap: int) -> tuple[PackResult, IntArray]:
    """``pack`` of items already in canonical order; the result and the chosen positions."""
    n = len(costs)
    values = _scaled(floats)
    total_cost = int(costs.sum())
    width = min(budget, total_cost)
    method: Method = "exact"
    idx: list[int] | None = None
    by_density: IntArray | None = None
    if n * width == 0:  # nothing to choose, or nothing fits: the empty table is exact
        idx = _dp(costs, values, width)
    else:
        # value per token, descending; ties keep the canonical order (value desc, then key),
        # exactly the order of _density_key; a free item is infinitely dense
        density = np.divide(floats, costs, out=np.full(n, np.inf), where=costs > 0)
        by_density = (-density).argsort(kind="stable")
        if cap > 0:  # exact over the items that may belong to an optimum
            keep = _survivors(costs, values, density, budget) if n >= PRUNE_FROM else None
            if keep is None:
                kc, kv, kd, kbd = costs, values, density, by_density
            else:
                kc, kv, kd = costs[keep], values[keep], density[keep]
                kbd = (-kd).argsort(kind="stable")
            kg = _greedy_arrays(kc, kbd, budget)
            got = _solve_reduced(kc, kv, kbd, budget, max(int(kv[kg].sum()), int(kv.max())),
                                 cap, kd)
            if got is not None:
                idx = got if keep is None else keep[got].tolist()
        if idx is None:
            greedy = _greedy_arrays(costs, by_density, budget)
            if values[0] > values[greedy].sum():  # the most valuable item alone (it fits)
                greedy = [0]
            improved = _improve_arrays(costs, values, by_density, budget, greedy)
            if cap > 0:  # a better lower bound may shrink the core enough
                idx = _solve_reduced(costs, values, by_density, budget,
                                     int(values[improved].sum()), cap, density)
            if idx is None:
                method = "greedy+swap"
                idx = improved
    idx.sort()
    total_value = math.fsum(floats[idx].tolist())
    bound = total_value
    if method == "greedy+swap":
        assert by_density is not None
        bound = max(total_value, _lp_bound_arrays(costs, floats, by_density, budget))
    at = np.array(idx, np.int64)
    return PackResult(
        chosen=tuple(keys(at)),
        method=method,
        total_value=total_value,
        total_cost=int(costs[idx].sum()),
        upper_bound=bound,
    ), at


def _lp_bound_arrays(costs: IntArray, floats: FloatArray, by_density: IntArray,
                     budget: int) -> float:
    """``_lp_bound`` over arrays: the same additions in the same order."""
    c = costs[by_density]
    b = int(c.cumsum().searchsorted(budget, side="right"))
    bound = 0.0
    for v in floats[by_density[:b]].tolist():
        bound += v
    if b < len(c):
        bound += float(floats[by_density[b]]) * (budget - int(c[:b].sum())) / int(c[b])
    return bound


def pack(items: Iterable[Item], budget: int, exact_max_cells: int) -> PackResult:
    """The packing of ``items`` with the largest total value and total cost <= ``budget``."""
    if budget < 0:
        raise ValueError(f"budget must be >= 0, got {budget}")
    cands = _canonical(items, budget)
    floats = np.array([it.value for it in cands], dtype=np.float64)
    costs = np.array([it.cost for it in cands], dtype=np.int64)
    return _pack_canonical(lambda idx: [cands[i].key for i in idx.tolist()], costs, floats,
                           budget, exact_max_cells)[0]
