"""Packing: exact DP and greedy+swap against brute force, plain greedy and each other."""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Iterator
from fractions import Fraction

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from hivemind_memory.projections.ranking.packing import Item, PackResult, lp_bound, pack

EXACT = 10**9
GREEDY = 0  # exact_max_cells=0 forces greedy+swap for any non-trivial instance


def small_thresholds() -> Iterator[None]:
    """Run a check twice: with the packer's thresholds as shipped, and with the item dropping
    (``_survivors``) and the window lower bound switched on for any size, so small instances
    exercise them too."""
    from hivemind_memory.projections.ranking import packing

    yield
    saved = packing.PRUNE_FROM, packing.WINDOW_FROM_CELLS, packing.FILL_FROM
    packing.PRUNE_FROM, packing.WINDOW_FROM_CELLS, packing.FILL_FROM = 0, 0, 2
    try:
        yield
    finally:
        packing.PRUNE_FROM, packing.WINDOW_FROM_CELLS, packing.FILL_FROM = saved


def brute_force(items: list[Item], budget: int) -> float:
    best = 0.0
    for r in range(len(items) + 1):
        for combo in itertools.combinations(items, r):
            if sum(i.cost for i in combo) <= budget:
                best = max(best, math.fsum(i.value for i in combo))
    return best


def plain_greedy(items: list[Item], budget: int) -> float:
    """Value per token, skipping what does not fit (at least as good as stop-at-first)."""
    room, total = budget, 0.0
    for it in sorted(items, key=lambda i: -i.value / i.cost if i.cost else -math.inf):
        if it.value > 0 and it.cost <= room:
            room -= it.cost
            total += it.value
    return total


def check_valid(res: PackResult, items: list[Item], budget: int) -> None:
    by_key = {i.key: i for i in items}
    assert len(set(res.chosen)) == len(res.chosen)
    chosen = [by_key[k] for k in res.chosen]
    assert res.total_cost == sum(i.cost for i in chosen) <= budget
    assert res.total_value == pytest.approx(math.fsum(i.value for i in chosen), abs=1e-12)
    assert res.upper_bound >= res.total_value - 1e-12
    assert all(i.value > 0 for i in chosen)


def test_twenty_small_beat_one_big_exact_and_greedy() -> None:
    items = [Item("big", 2000, 0.9)] + [Item(f"s{i:02d}", 100, 0.85) for i in range(20)]
    for cells, method in ((EXACT, "exact"), (GREEDY, "greedy+swap")):
        res = pack(items, 2000, cells)
        assert res.method == method
        assert set(res.chosen) == {f"s{i:02d}" for i in range(20)}
        assert res.total_value == pytest.approx(17.0)
        assert res.total_cost == 2000


def test_one_big_beats_small_ones_when_it_is_worth_more() -> None:
    items = [Item("big", 2000, 0.9)] + [Item(f"s{i}", 100, 0.04) for i in range(20)]
    for cells in (EXACT, GREEDY):
        res = pack(items, 2000, cells)
        assert res.chosen == ("big",)
        assert res.total_value == pytest.approx(0.9)


def test_best_single_item_beats_greedy_trap() -> None:
    # density greedy takes "dense" (1 token) and then nothing else fits
    items = [Item("dense", 1, 0.02), Item("whole", 100, 0.9)]
    res = pack(items, 100, GREEDY)
    assert res.method == "greedy+swap"
    assert res.chosen == ("whole",)
    assert pack(items, 100, EXACT).chosen == ("whole",)


def test_swap_one_for_two_improves_greedy() -> None:
    # greedy by density: a (ratio .0125) then nothing else fits; best is b + c
    items = [Item("a", 60, 0.75), Item("b", 50, 0.6), Item("c", 50, 0.6)]
    assert plain_greedy(items, 100) == pytest.approx(0.75)
    res = pack(items, 100, GREEDY)
    assert res.chosen == ("b", "c")
    assert res.total_value == pytest.approx(1.2)
    assert res.upper_bound == pytest.approx(0.75 + 0.6 * 40 / 50)


def test_swap_one_for_one_improves_greedy() -> None:
    # density order a (.01), c (.0086), b (.0067): greedy takes a, skips c, takes b = 0.7;
    # swapping a for c gives b + c = 0.8
    items = [Item("a", 50, 0.5), Item("b", 30, 0.2), Item("c", 70, 0.6)]
    assert plain_greedy(items, 100) == pytest.approx(0.7)
    res = pack(items, 100, GREEDY)
    assert res.total_value == pytest.approx(brute_force(items, 100)) == pytest.approx(0.8)


def test_items_over_budget_and_worthless_items_are_never_chosen() -> None:
    items = [Item("huge", 5000, 100.0), Item("zero", 1, 0.0), Item("neg", 1, -1.0),
             Item("ok", 10, 0.1)]
    for cells in (EXACT, GREEDY):
        res = pack(items, 100, cells)
        assert res.chosen == ("ok",)
    assert pack([Item("huge", 5000, 1.0)], 100, EXACT) == PackResult((), "exact", 0.0, 0, 0.0)


def test_empty_and_zero_budget() -> None:
    assert pack([], 100, EXACT) == PackResult((), "exact", 0.0, 0, 0.0)
    assert pack([Item("a", 1, 1.0)], 0, EXACT).chosen == ()
    assert pack([Item("free", 0, 0.5), Item("a", 1, 1.0)], 0, EXACT).chosen == ("free",)
    assert pack([Item("free", 0, 0.5), Item("a", 1, 1.0)], 1, GREEDY).chosen == ("a", "free")


def test_invalid_items_are_rejected() -> None:
    with pytest.raises(ValueError, match="duplicate item key 'a'"):
        pack([Item("a", 1, 0.1), Item("a", 2, 0.2)], 10, EXACT)
    with pytest.raises(ValueError, match="negative cost"):
        pack([Item("a", -1, 0.1)], 10, EXACT)
    with pytest.raises(ValueError, match="non-finite value"):
        pack([Item("a", 1, math.nan)], 10, EXACT)
    with pytest.raises(ValueError, match="budget must be >= 0"):
        pack([], -1, EXACT)


def test_method_threshold_counts_candidates_times_effective_budget() -> None:
    items = [Item(f"k{i}", 10, 0.1 + i / 100) for i in range(10)]  # total cost 100
    assert pack(items, 1000, 10 * 100).method == "exact"  # everything fits: width = 100
    assert pack(items, 50, 10 * 50).method == "exact"
    # ineligible items do not count
    assert pack([*items, Item("huge", 10**6, 1.0)], 50, 10 * 50).method == "exact"
    # below the full table the reduction fixes every item here (greedy = LP bound): still exact
    assert pack(items, 1000, 1).method == "exact"
    assert pack(items, 50, 1).method == "exact"
    # equal densities: nothing can be fixed, so the core is the whole table (10 x 55 cells)
    flat = [Item(f"f{i}", 10, 0.1) for i in range(10)]
    assert pack(flat, 55, 10 * 55).method == "exact"
    assert pack(flat, 55, 10 * 55 - 1).method == "greedy+swap"
    # 0 turns exact packing off (only an empty table is exact)
    assert pack(items, 50, 0).method == "greedy+swap"


def test_ties_are_broken_by_value_then_key() -> None:
    items = [Item(k, 10, 0.5) for k in ("d", "b", "a", "c")]
    for cells in (EXACT, GREEDY):
        assert pack(items, 20, cells).chosen == ("a", "b")
    items = [Item("x", 10, 0.5), Item("y", 10, 0.7), Item("z", 20, 1.2)]
    # {x, y} and {z} tie on value 1.2: the result is reproducible whatever the input order
    results = {pack(p, 20, EXACT) for p in itertools.permutations(items)}
    assert len(results) == 1


def test_upper_bound_is_lp_relaxation_for_greedy() -> None:
    items = [Item("a", 10, 1.0), Item("b", 10, 0.5), Item("c", 20, 0.6)]
    assert lp_bound(items, 25) == pytest.approx(1.0 + 0.5 + 0.6 * 5 / 20)
    res = pack(items, 25, GREEDY)
    assert res.upper_bound == pytest.approx(1.65)
    assert res.total_value == pytest.approx(1.5)
    assert pack(items, 25, EXACT).upper_bound == pytest.approx(1.5)


def test_large_instance_greedy_is_near_lp_bound() -> None:
    rng = random.Random(7)
    items = [Item(f"k{i}", rng.randint(20, 2000), rng.random()) for i in range(2000)]
    res = pack(items, 8000, GREEDY)
    assert res.method == "greedy+swap"
    check_valid(res, items, 8000)
    assert res.total_value >= plain_greedy(items, 8000)
    assert res.total_value >= 0.98 * res.upper_bound
    # the full table (2,000 x 8,000) is over the default cap, the reduced core is not
    exact = pack(items, 8000, 4_000_000)
    assert exact.method == "exact" and exact.upper_bound == exact.total_value
    check_valid(exact, items, 8000)
    assert exact.total_value >= res.total_value
    assert exact.total_value <= res.upper_bound + 1e-9


def test_greedy_matches_exact_on_a_medium_instance() -> None:
    rng = random.Random(3)
    items = [Item(f"k{i}", rng.randint(20, 400), round(rng.random(), 3)) for i in range(60)]
    exact = pack(items, 1500, EXACT)
    greedy = pack(items, 1500, GREEDY)
    assert exact.method == "exact" and greedy.method == "greedy+swap"
    assert exact.total_value >= greedy.total_value - 1e-9
    assert greedy.upper_bound >= exact.total_value - 1e-9
    assert greedy.total_value >= 0.97 * exact.total_value


KEYS = st.text("abcdefgh", min_size=1, max_size=3)
VALUES = st.one_of(
    st.floats(0.0, 1.0, allow_subnormal=False),
    st.integers(0, 20).map(lambda v: v / 20),  # many exact ties
    st.floats(-1.0, 0.0),
)


def items_strategy(max_size: int, max_cost: int) -> st.SearchStrategy[list[Item]]:
    return st.dictionaries(
        KEYS, st.tuples(st.integers(0, max_cost), VALUES), max_size=max_size
    ).map(lambda d: [Item(k, c, v) for k, (c, v) in d.items()])


@settings(max_examples=150, deadline=None)
@given(items=items_strategy(9, 60), budget=st.integers(0, 150))
def test_exact_equals_brute_force(items: list[Item], budget: int) -> None:
    res = pack(items, budget, EXACT)
    assert res.method == "exact"
    check_valid(res, items, budget)
    assert res.total_value == pytest.approx(brute_force(items, budget), abs=1e-7)
    assert res.upper_bound == res.total_value


@settings(max_examples=150, deadline=None)
@given(items=items_strategy(25, 300), budget=st.integers(0, 1200))
def test_greedy_never_worse_than_plain_greedy_nor_best_single(
    items: list[Item], budget: int
) -> None:
    res = pack(items, budget, GREEDY)
    check_valid(res, items, budget)
    assert res.total_value >= plain_greedy(items, budget) - 1e-9
    best_single = max((i.value for i in items if i.cost <= budget), default=0.0)
    assert res.total_value >= best_single - 1e-9
    exact = pack(items, budget, EXACT)
    assert exact.total_value >= res.total_value - 1e-7
    assert res.upper_bound >= exact.total_value - 1e-7


@settings(max_examples=80, deadline=None)
@given(
    items=items_strategy(15, 200),
    budget=st.integers(0, 600),
    cells=st.sampled_from([EXACT, GREEDY]),
    seed=st.randoms(use_true_random=False),
)
def test_invariant_to_input_order(
    items: list[Item], budget: int, cells: int, seed: random.Random
) -> None:
    shuffled = list(items)
    seed.shuffle(shuffled)
    for _ in small_thresholds():
        assert pack(items, budget, cells) == pack(shuffled, budget, cells)
        assert pack(iter(reversed(items)), budget, cells) == pack(items, budget, cells)


def test_swap_removes_the_least_valuable_item_that_frees_enough_room() -> None:
    # greedy (density): A, then D does not fit, then B (slack 10), E does not fit -> 1.02.
    # Swapping B (the cheap, weak item) for E gives 1.05; swapping A for anything loses.
    items = [Item("A", 60, 0.9), Item("D", 50, 0.6), Item("B", 30, 0.12), Item("E", 40, 0.15)]
    assert plain_greedy(items, 100) == pytest.approx(1.02)
    res = pack(items, 100, GREEDY)
    assert res.chosen == ("A", "E")
    assert res.total_value == pytest.approx(1.05) == pytest.approx(brute_force(items, 100))


def test_greedy_phase_fills_exactly_and_breaks_density_ties_by_value() -> None:
    # The swap pass repairs most greedy slips, so the greedy phase is checked on its own.
    from hivemind_memory.projections.ranking.packing import _density_key, _greedy

    items = [Item("x", 50, 0.5), Item("y", 30, 0.3), Item("z", 20, 0.2)]  # equal density
    order = sorted(range(3), key=lambda i: _density_key(items[i]))
    assert [items[i].key for i in order] == ["x", "y", "z"]
    assert sorted(items[i].key for i in _greedy(items, order, 70)) == ["x", "z"]
    assert sorted(items[i].key for i in _greedy(items, order, 100)) == ["x", "y", "z"]
    assert _density_key(Item("free", 0, 0.1)) < _density_key(Item("dense", 1, 100.0))


def test_swap_pass_fills_room_left_by_the_best_single_item() -> None:
    # greedy: tiny, then big does not fit, filler -> 0.11; the single big item (0.9) is better,
    # and its 3 spare tokens take the filler: 0.91, the optimum.
    items = [Item("tiny", 4, 0.1), Item("big", 100, 0.9), Item("filler", 3, 0.01)]
    assert plain_greedy(items, 103) == pytest.approx(0.11)
    res = pack(items, 103, GREEDY)
    assert res.chosen == ("big", "filler") and res.total_cost == 103
    assert res.total_value == pytest.approx(brute_force(items, 103))


def test_swap_never_removes_what_it_cannot_replace() -> None:
    # X would need 30 tokens freed; no chosen item alone frees that much, so nothing moves.
    items = [Item("X", 100, 1.0), Item("Y", 10, 0.5), Item("Z", 10, 0.4), Item("V", 10, 0.3)]
    res = pack(items, 100, GREEDY)
    assert res.chosen == ("Y", "Z", "V") and res.total_cost == 30
    assert res.total_value == pytest.approx(1.2)


def test_pair_swap_draws_on_both_the_value_and_the_density_core(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import hivemind_memory.projections.ranking.packing as packing

    monkeypatch.setattr(packing, "SWAP_PAIR_CORE", 1)
    # greedy takes A only; the best pair is P (most valuable unchosen) + Q (densest unchosen)
    items = [Item("A", 62, 0.8), Item("P", 55, 0.6), Item("Q", 40, 0.45)]
    assert plain_greedy(items, 100) == pytest.approx(0.8)
    res = pack(items, 100, GREEDY)
    assert res.chosen == ("P", "Q")
    assert res.total_value == pytest.approx(1.05)


def test_huge_values_are_scaled_without_overflow() -> None:
    items = [Item("a", 10, 1e12), Item("b", 10, 2e12), Item("c", 15, 2.5e12), Item("d", 5, 1.0)]
    for cells in (EXACT, GREEDY):
        res = pack(items, 20, cells)
        assert res.chosen == ("b", "a")
        assert res.total_value == pytest.approx(3e12)
    assert pack(items, 25, EXACT).chosen == ("c", "b")


def test_pair_swap_picks_the_best_feasible_pair_not_the_first() -> None:
    # unchosen X, P, Q: the pairs (X, P) and (X, Q) do not fit; (P, Q) replaces A for a gain
    items = [Item("A", 62, 0.8), Item("X", 90, 0.7), Item("P", 55, 0.6), Item("Q", 40, 0.45)]
    assert plain_greedy(items, 100) == pytest.approx(0.8)
    res = pack(items, 100, GREEDY)
    assert res.chosen == ("P", "Q")
    assert res.total_value == pytest.approx(brute_force(items, 100))


def test_lp_bound_of_the_greedy_path_orders_by_density() -> None:
    # a free item counts in full; a 1-token item of low density comes last, not first
    items = [Item("a", 10, 1.0), Item("b", 10, 0.9), Item("c", 10, 0.8), Item("low", 1, 0.001)]
    res = pack(items, 25, GREEDY)
    assert res.upper_bound == pytest.approx(1.0 + 0.9 + 0.8 * 5 / 10)
    assert res.total_value == pytest.approx(1.901)
    free = [Item("free", 0, 0.5), Item("a", 10, 1.0), Item("b", 10, 0.5)]
    res = pack(free, 15, GREEDY)
    assert res.upper_bound == pytest.approx(0.5 + 1.0 + 0.25)
    assert res.chosen == ("a", "free")


def test_many_exact_ties_follow_the_key_order_in_both_methods() -> None:
    keys = [f"k{i:03d}" for i in range(300)]
    shuffled = keys[::7] + [k for k in keys if k not in keys[::7]]
    items = [Item(k, 10, 0.5) for k in shuffled]
    for cells in (EXACT, GREEDY):
        res = pack(items, 1000, cells)
        assert res.chosen == tuple(keys[:100])


def test_density_ties_keep_the_canonical_order_among_many_items() -> None:
    # B (20 tokens, 1.0) and A (10 tokens, 0.5) are equally dense; C is less dense.
    # Canonical order is B, C, A (by value); greedy must take every B, then A by key.
    items = [Item(f"B{i:03d}", 20, 1.0) for i in range(100)]
    items += [Item(f"C{i:03d}", 15, 0.6) for i in range(100)]
    items += [Item(f"A{i:03d}", 10, 0.5) for i in range(100)]
    res = pack(reversed(items), 2500, GREEDY)
    assert res.chosen == tuple(f"B{i:03d}" for i in range(100)) + tuple(
        f"A{i:03d}" for i in range(50)
    )


def test_best_single_item_step_wins_where_the_swaps_cannot_reach() -> None:
    # Ten dense items (6 tokens, 0.05) and eight thin fillers (5 tokens, 0.002) fill the budget
    # exactly: greedy takes all 18 for 0.516. "big" (100 tokens, 0.6) is worth more than all of
    # them together but less dense, so greedy never takes it, and it can only enter by removing
    # all 18 items: no add, 1-for-1 or 1-for-2 move of the local search reaches it. Only the
    # best-single-item step (big alone beats greedy) finds the optimum.
    import numpy as np

    from hivemind_memory.projections.ranking.packing import (
        _canonical,
        _density_key,
        _greedy_arrays,
        _improve_arrays,
        _scaled,
    )

    items = [Item(f"d{i}", 6, 0.05) for i in range(10)] + [Item(f"f{i}", 5, 0.002)
                                                          for i in range(8)]
    items.append(Item("big", 100, 0.6))
    assert plain_greedy(items, 100) == pytest.approx(0.516)
    # greedy followed by the swaps alone stays at greedy's 18 items
    cands = _canonical(items, 100)
    costs = np.array([it.cost for it in cands], np.int64)
    values = _scaled(np.array([it.value for it in cands]))
    order = np.array(sorted(range(len(cands)), key=lambda i: _density_key(cands[i])), np.int64)
    swapped = _improve_arrays(costs, values, order, 100, _greedy_arrays(costs, order, 100))
    assert sorted(cands[i].key for i in swapped) == sorted(it.key for it in items[:-1])
    res = pack(items, 100, GREEDY)
    assert res.method == "greedy+swap"
    assert res.chosen == ("big",)
    assert res.total_value == pytest.approx(0.6) and res.total_cost == 100
    assert pack(items, 100, EXACT).chosen == ("big",)  # and it is the optimum


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(items=items_strategy(10, 80), budget=st.integers(0, 200), cap=st.integers(1, 400))
def test_reduced_exact_equals_brute_force(items: list[Item], budget: int, cap: int) -> None:
    # small caps force the reduction + core DP (or the fallback) instead of the full table
    best = brute_force(items, budget)
    for _ in small_thresholds():
        res = pack(items, budget, cap)
        check_valid(res, items, budget)
        if res.method == "exact":
            assert res.total_value == pytest.approx(best, abs=1e-7)
            assert res.upper_bound == res.total_value
        else:
            assert res.upper_bound >= best - 1e-7
        assert res.total_value >= pack(items, budget, GREEDY).total_value - 1e-9


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10**6), n=st.integers(20, 120), budget=st.integers(50, 3000))
def test_reduced_exact_equals_full_table_on_medium_instances(seed: int, n: int,
                                                             budget: int) -> None:
    rng = random.Random(seed)
    items = [Item(f"k{i}", rng.randint(1, 400), rng.choice([rng.random(), 0.25, 0.5]))
             for i in range(n)]
    full = pack(items, budget, EXACT)
    reduced = pack(items, budget, 2_000)  # far below n x budget
    if reduced.method == "exact":
        assert reduced.total_value == pytest.approx(full.total_value, rel=1e-12, abs=1e-9)
    assert reduced.total_value <= full.total_value + 1e-9


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(items=items_strategy(30, 120), budget=st.integers(0, 600),
       cap=st.sampled_from([0, 1, 30, 300, 10**9]))
def test_pack_arrays_equals_pack(items: list[Item], budget: int, cap: int) -> None:
    import numpy as np

    from hivemind_memory.projections.ranking.packing import pack_arrays

    keys = [it.key for it in items]
    for _ in small_thresholds():
        got = pack_arrays(lambda idx: [keys[i] for i in idx.tolist()],
                          np.array([it.cost for it in items], np.int64),
                          np.array([it.value for it in items], np.float64), budget, cap)
        assert got == pack(items, budget, cap)


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(costs_values=st.lists(st.tuples(st.integers(0, 40), st.integers(0, 30)), max_size=14),
       budget=st.integers(0, 160))
def test_dp_fills_only_the_cells_that_matter_and_chooses_as_the_full_table(
        costs_values: list[tuple[int, int]], budget: int) -> None:
    # budgets below, at and above the total cost; free items; worthless items; many ties
    import numpy as np

    from hivemind_memory.projections.ranking.packing import _dp, _dp_value
    from tests.support.reference import full_table_dp

    costs = [c for c, _ in costs_values]
    values = [v for _, v in costs_values]
    want = full_table_dp(costs, values, budget)
    ca, va = np.array(costs, np.int64), np.array(values, np.int64)
    assert _dp(ca, va, budget) == want
    free = sum(v for c, v in costs_values if c == 0)
    assert _dp_value(ca, va, budget) == sum(values[i] for i in want if costs[i]) + free


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(items=items_strategy(40, 120), budget=st.integers(0, 700),
       cap=st.sampled_from([40, 400, 4_000, 10**9]))
def test_exact_packing_chooses_what_the_full_table_chooses(items: list[Item], budget: int,
                                                           cap: int) -> None:
    # reduction, window lower bound and core DP give the full table's choice, ties included
    from tests.support.reference import pack_full_table

    want = set(pack_full_table([(it.key, it.cost, it.value) for it in items], budget))
    for _ in small_thresholds():
        res = pack(items, budget, cap)
        if res.method == "exact":
            assert set(res.chosen) == want


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10**6), n=st.integers(40, 300), budget=st.integers(200, 4000))
@example(seed=1149, n=202, budget=3997)
def test_exact_packing_chooses_what_the_full_table_chooses_on_query_like_instances(
        seed: int, n: int, budget: int) -> None:
    # many candidates, a core far larger than the window: the window's lower bound matters
    from hivemind_memory.projections.ranking.packing import pack_arrays
    from tests.support.reference import pack_full_table

    rng = random.Random(seed)
    items = [Item(f"n{i}", rng.randint(5, 400), rng.random() * rng.choice([1.0, 0.5, 0.35]))
             for i in range(n)]
    full = pack_full_table([(it.key, it.cost, it.value) for it in items], budget)
    import numpy as np

    keys = [it.key for it in items]
    for _ in small_thresholds():
        res = pack(items, budget, EXACT)
        assert res.method == "exact" and res.chosen == tuple(
            sorted(full, key=lambda k: (-next(i.value for i in items if i.key == k), k)))
        costs = np.array([it.cost for it in items], np.int64)
        values = np.array([it.value for it in items], np.float64)
        arr = pack_arrays(lambda idx: [keys[i] for i in idx.tolist()], costs, values, budget,
                          EXACT)
        assert arr.method == "exact" and set(arr.chosen) == set(full)
        # under a cell limit the reduced core may still not fit (seed 1149, 202 notes, 3,997
        # tokens needs more than 50,000 cells): then the result says greedy+swap, and it
        # never beats the optimum nor breaks the budget
        capped = pack_arrays(lambda idx: [keys[i] for i in idx.tolist()], costs, values,
                             budget, 50_000)
        got = [keys.index(k) for k in capped.chosen]
        assert int(costs[got].sum()) <= budget
        if capped.method == "exact":
            assert set(capped.chosen) == set(full)
        else:
            assert capped.method == "greedy+swap"
            assert float(values[got].sum()) <= float(
                values[[keys.index(k) for k in full]].sum()) + 1e-6


def _arrays(items: list[Item]) -> tuple[object, object, object]:
    import numpy as np

    from hivemind_memory.projections.ranking.packing import _scaled

    costs = np.array([it.cost for it in items], np.int64)
    floats = np.array([it.value for it in items], np.float64)
    density = np.divide(floats, costs, out=np.full(len(items), np.inf), where=costs > 0)
    return costs, _scaled(floats), density


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(items=items_strategy(11, 60), budget=st.integers(1, 150),
       seed=st.randoms(use_true_random=False))
def test_survivors_drop_only_items_of_no_optimum_and_nothing_more_the_second_time(
        items: list[Item], budget: int, seed: random.Random) -> None:

    items = [it for it in items if it.cost <= budget and it.value > 0]
    if not items:
        return
    for _ in small_thresholds():  # FILL_FROM as shipped, then 2 (sorted in small chunks)
        _check_survivors(items, budget, seed)


def _check_survivors(items: list[Item], budget: int, seed: random.Random) -> None:
    from hivemind_memory.projections.ranking.packing import _survivors

    costs, values, density = _arrays(items)
    keep = _survivors(costs, values, density, budget)  # type: ignore[arg-type]
    kept = set(range(len(items))) if keep is None else set(keep.tolist())
    # the optimum of the scaled problem (what the DP maximises), by brute force
    best = -1
    optima: list[set[int]] = []
    for r in range(len(items) + 1):
        for combo in itertools.combinations(range(len(items)), r):
            if sum(items[i].cost for i in combo) <= budget:
                v = sum(int(values[i]) for i in combo)  # type: ignore[index]
                if v > best:
                    best, optima = v, [set(combo)]
                elif v == best:
                    optima.append(set(combo))
    assert all(opt <= kept for opt in optima)
    if keep is not None:  # applied to its own survivors it drops nothing more, nor to a set
        sub = [items[i] for i in keep.tolist()]  # between them and every item
        assert _survivors(*_arrays(sub), budget) is None  # type: ignore[arg-type]
        dropped = sorted(set(range(len(items))) - kept)
        some = set(keep.tolist()) | set(dropped[::2])
        mid = [items[i] for i in sorted(some)]
        again_mid = _survivors(*_arrays(mid), budget)  # type: ignore[arg-type]
        assert again_mid is not None
        assert {mid[i].key for i in again_mid.tolist()} == {items[i].key for i in kept}
    # and it does not depend on the order of the items
    shuffled = list(items)
    seed.shuffle(shuffled)
    again = _survivors(*_arrays(shuffled), budget)  # type: ignore[arg-type]
    kept_keys = {items[i].key for i in kept}
    assert {shuffled[i].key for i in (range(len(items)) if again is None
                                       else again.tolist())} == kept_keys


def test_survivors_drop_the_hopeless_tail_of_a_query_like_instance() -> None:
    from hivemind_memory.projections.ranking.packing import _survivors

    rng = random.Random(5)
    items = [Item(f"n{i}", rng.randint(5, 400), rng.random() ** 3) for i in range(3000)]
    costs, values, density = _arrays(items)
    keep = _survivors(costs, values, density, 2000)  # type: ignore[arg-type]
    assert keep is not None and len(keep) < len(items) // 4
    # the exact packing over the survivors is the full table's choice over every item
    from tests.support.reference import pack_full_table

    full = pack_full_table([(it.key, it.cost, it.value) for it in items[:400]], 600)
    assert set(pack(items[:400], 600, EXACT).chosen) == set(full)


def _lp_exact(items: list[tuple[int, int]], room: int) -> Fraction:
    """The fractional knapsack optimum of (cost, value) pairs, in exact arithmetic."""
    total = Fraction(0)
    for c, v in sorted(items, key=lambda cv: -Fraction(cv[1], cv[0]) if cv[0] else -math.inf):
        if c <= room:
            total += v
            room -= c
        else:
            total += Fraction(v * room, c)
            break
    return total


@settings(max_examples=400, deadline=None)
@given(pairs=st.lists(st.tuples(st.integers(0, 60), st.integers(1, 2_000_000_000)),
                      min_size=1, max_size=10),
       budget=st.integers(1, 200), slack=st.integers(0, 3_000_000_000))
@example(pairs=[(4, 1261819729), (7, 1817195120)], budget=10, slack=0)  # the break item is
# in every optimum (a reduction that only tried the prefix items missed it)
@pytest.mark.slow
def test_reduction_fixes_what_the_lp_bounds_prove_and_only_that(
        pairs: list[tuple[int, int]], budget: int, slack: int) -> None:
    """The variable fixing of the exact path against the rule it implements, recomputed in
    exact arithmetic. In density order, the items of the LP solution (the prefix that fits
    whole and the break item after it) are fixed in iff the LP bound without the item, plus
    the safety margin, stays below the known packing's value; the items from the break item on
    are fixed out iff the item's value plus the LP bound of the rest in the room it leaves
    does. Bounds within one scaled unit of the threshold may go either way (float rounding).
    Fixed-in items are in every optimal packing, fixed-out ones in none (brute force)."""
    import numpy as np

    from hivemind_memory.projections.ranking.packing import _reduce

    pairs = [(c, v) for c, v in pairs if c <= budget]
    if not pairs:
        return
    costs = np.array([c for c, _ in pairs], np.int64)
    values = np.array([v for _, v in pairs], np.int64)
    density = np.divide(values.astype(np.float64), costs, out=np.full(len(pairs), np.inf),
                        where=costs > 0)
    by_density = np.argsort(-density)
    position = {int(j): p for p, j in enumerate(by_density.tolist())}
    fitting = np.cumsum(costs[by_density]) <= budget
    b = int(fitting.sum())  # the break item's position (n: everything fits)
    assert fitting[:b].all()
    n = len(pairs)
    sets = [s for k in range(n + 1) for s in itertools.combinations(range(n), k)
            if sum(pairs[i][0] for i in s) <= budget]
    best = max(sum(pairs[i][1] for i in s) for s in sets)
    optima = [set(s) for s in sets if sum(pairs[i][1] for i in s) == best]
    lower = max(0, best - slack)  # the value of some packing at most as good as the optimum
    red = _reduce(costs, values, by_density, budget, lower)
    fixed_in, core = set(red.fixed_in.tolist()), set(red.core.tolist())
    fixed_out = set(range(n)) - fixed_in - core
    assert not fixed_in & core and len(red.core) == len(core)
    margin = Fraction(1e-9 * float(sum(values.tolist())) + 16.0)
    for j in range(n):
        rest = pairs[:j] + pairs[j + 1:]
        p = position[j]
        drop = _lp_exact(rest, budget) + margin - lower
        take = pairs[j][1] + _lp_exact(rest, budget - pairs[j][0]) + margin - lower
        if p <= b and drop < -1:
            assert j in fixed_in, (j, float(drop))
        elif p >= b and take < -1:
            assert j in fixed_out, (j, float(take))
        elif (p > b or drop > 1) and (p < b or take > 1):
            assert j in core, (j, p, b, float(drop), float(take))
        if j in fixed_in:
            assert all(j in o for o in optima)
        if j in fixed_out:
            assert all(j not in o for o in optima)
