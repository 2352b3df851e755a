"""Choose items that maximise total value within a token budget (0/1 knapsack).

* Exact: dynamic programming over cost (numpy, one row of choices per item) while
  ``eligible items x min(budget, their total cost) <= exact_max_cells``. Counting cells against
  ``min(budget, total cost)`` rather than the raw budget only ever makes more instances exact
  (when everything fits, the answer is trivially exact).
* Otherwise ``greedy+swap``: value-per-token greedy, the best single item if that beats it,
  then a local search that applies the best improving move (add one item; swap one chosen item
  for one unchosen item; swap one chosen item for two unchosen items from a core of the most
  valuable and most value-dense ones) until none improves. It starts from greedy and only ever
  improves, so it is never worse than plain greedy. ``upper_bound`` is the fractional (LP)
  relaxation, so ``total_value / upper_bound`` bounds the gap to the optimum.

Values are compared as integers (``round(value * scale)``, scale 1e9 unless the total is huge)
so results are exact and reproducible. Ties go to the canonical order, value descending then
key, which makes the result independent of the input order. Items with cost > budget or value
<= 0 are never chosen; keys must be unique.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Literal

import msgspec
import numpy as np
import numpy.typing as npt

Method = Literal["exact", "greedy+swap"]

VALUE_SCALE = 1e9
"""Values are compared as ``round(value * VALUE_SCALE)`` integers (1e-9 resolution)."""
MAX_SCALED_TOTAL = 2.0**62
"""The scale shrinks so that the scaled sum of all values stays below this (int64 safe)."""
SWAP_PAIR_CORE = 96
"""Unchosen items considered for one-for-two swaps: this many by value, this many by density."""

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


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
    total = math.fsum(values.tolist())
    scale = min(VALUE_SCALE, MAX_SCALED_TOTAL / total) if len(values) else VALUE_SCALE
    return np.rint(values * scale).astype(np.int64)


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


def _exact(items: list[Item], values: IntArray, budget: int) -> list[int]:
    """Indices of an optimal packing (DP over cost; strict improvement keeps earlier items)."""
    n = len(items)
    best = np.zeros(budget + 1, dtype=np.int64)  # best[c]: best value with total cost <= c
    take = np.zeros((n, budget + 1), dtype=np.bool_)
    for i, it in enumerate(items):
        w, v = it.cost, values[i]
        if w == 0:  # free: always taken (it would lift every best[c] alike, so best stays)
            take[i, :] = True
            continue
        cand = best[: budget + 1 - w] + v
        better = cand > best[w:]
        take[i, w:] = better
        best[w:] = np.where(better, cand, best[w:])
    chosen: list[int] = []
    c = budget
    for i in range(n - 1, -1, -1):
        if take[i, c]:
            chosen.append(i)
            c -= items[i].cost
    return chosen


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
    at = np.searchsorted(costs[by_cost], need, side="left")
    idx = suf_idx[np.minimum(at, len(by_cost) - 1)]  # meaningless where nothing frees enough
    val = np.where(at < len(by_cost), values[idx], np.iinfo(np.int64).max)
    return idx, val


Move = tuple[int, list[int], list[int]]
"""A local-search move: (scaled gain, items to remove, items to add)."""


def _improve(
    items: list[Item], values: IntArray, by_density: list[int], budget: int, start: list[int]
) -> list[int]:
    """Best-improvement local search from ``start``; terminates (integer value strictly rises).

    Moves: add one item; swap one chosen item for one unchosen; swap one chosen item for two
    unchosen from a core (the ``SWAP_PAIR_CORE`` most valuable and most value-dense unchosen
    items). On equal gains the earlier kind of move wins.
    """
    n = len(items)
    costs = np.array([it.cost for it in items], dtype=np.int64)
    in_set = np.zeros(n, dtype=np.bool_)
    in_set[start] = True
    by_value = np.arange(n)  # items are already in value-desc order
    dense = np.array(by_density, np.int64)
    while True:
        chosen = np.flatnonzero(in_set)
        out = np.flatnonzero(~in_set)
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
        core = np.flatnonzero(core_mask)
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
    return [int(i) for i in np.flatnonzero(in_set)]


def pack(items: Iterable[Item], budget: int, exact_max_cells: int) -> PackResult:
    """The packing of ``items`` with the largest total value and total cost <= ``budget``."""
    if budget < 0:
        raise ValueError(f"budget must be >= 0, got {budget}")
    cands = _canonical(items, budget)
    floats = np.array([it.value for it in cands], dtype=np.float64)
    costs = np.array([it.cost for it in cands], dtype=np.int64)
    values = _scaled(floats)
    width = min(budget, sum(it.cost for it in cands))
    method: Method
    if len(cands) * width <= exact_max_cells:
        method = "exact"
        idx = _exact(cands, values, width)
    else:
        method = "greedy+swap"
        # value per token, descending; ties keep the canonical order (value desc, then key),
        # exactly the order of _density_key; a free item is infinitely dense
        density = np.divide(floats, costs, out=np.full(len(cands), np.inf), where=costs > 0)
        by_density = np.argsort(-density, kind="stable").tolist()
        idx = _greedy(cands, by_density, budget)
        if values[0] > values[idx].sum():  # the most valuable item alone (it fits) is better
            idx = [0]
        idx = _improve(cands, values, by_density, budget, idx)
    idx.sort()
    chosen = [cands[i] for i in idx]
    total_value = math.fsum(it.value for it in chosen)
    bound = total_value
    if method == "greedy+swap":
        bound = max(total_value, _lp_bound([cands[i] for i in by_density], budget))
    return PackResult(
        chosen=tuple(it.key for it in chosen),
        method=method,
        total_value=total_value,
        total_cost=sum(it.cost for it in chosen),
        upper_bound=bound,
    )
