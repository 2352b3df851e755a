"""The exact packing path in C (``projections/ranking/_knapsack.c``) against the numpy code it
replaces on the query path (``packing.py``, the reference): the same packing, method and
totals on every instance, small and query-sized; its reduction proves only what is true.
Without the compiled module these skip on a laptop and fail under ``CI=true``."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from types import ModuleType

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from hivemind_memory.projections.ranking import packing
from hivemind_memory.projections.ranking.packing import Item, Packed, pack_positions
from tests.support import built_native, numpy_path
from tests.support.reference import pack_full_table
from tests.unit.projections.ranking.test_packing import items_strategy, small_thresholds


@pytest.fixture(scope="module")
def native() -> ModuleType:
    return built_native(packing,
                        "the C packer (hivemind_memory.projections.ranking._knapsack)")


def _both(items: list[Item], budget: int, cap: int) -> tuple[Packed, Packed]:
    """``pack_positions`` with the C path, then with the numpy path."""
    keys = [it.key for it in items]
    costs = np.array([it.cost for it in items], np.int64)
    values = np.array([it.value for it in items], np.float64)

    def run() -> Packed:
        return pack_positions(lambda idx: [keys[i] for i in idx.tolist()], costs, values,
                              budget, cap)

    got = run()
    with numpy_path(packing):
        want = run()
    return got, want


def _same(got: Packed, want: Packed) -> None:
    assert got.at.tolist() == want.at.tolist()
    assert (got.method, got.total_value, got.total_cost, got.upper_bound) == (
        want.method, want.total_value, want.total_cost, want.upper_bound)


def test_the_module_is_what_the_query_path_uses(native: ModuleType) -> None:
    assert native.WINDOW == packing.WINDOW


@pytest.mark.slow
@settings(max_examples=400, deadline=None)
@given(items=items_strategy(40, 120), budget=st.integers(0, 700),
       cap=st.sampled_from([0, 1, 40, 400, 4_000, 10**9]))
@example(items=[Item("a", 0, 0.5), Item("b", 0, 1e-12), Item("c", 3, 0.5)], budget=2, cap=10**9)
def test_c_path_packs_as_the_numpy_path(native: ModuleType, items: list[Item], budget: int,
                                        cap: int) -> None:
    # ties of value and density, free items, values that scale to 0, items over the budget;
    # and with item dropping, the window and a chunked greedy fill switched on for any size
    for _ in small_thresholds():
        _same(*_both(items, budget, cap))


def query_like(rng: random.Random, n: int) -> list[Item]:
    """A query's candidates: costs of notes (tokens + overhead) from tiny to large, scores
    relevance x recency with many near ties and a tail of weak matches."""
    out = []
    for i in range(n):
        cost = rng.choice([rng.randint(8, 60), rng.randint(60, 250), rng.randint(250, 2500)])
        score = rng.random() ** 3 * rng.choice([1.0, 0.35, 0.6])
        out.append(Item(f"note-{i:05d}", cost, round(score, rng.choice([3, 6, 12]))))
    return out


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10**6), n=st.integers(1_500, 9_000),
       budget=st.sampled_from([500, 2_000, 8_000]))
def test_c_path_packs_as_the_numpy_path_on_query_sized_instances(
        native: ModuleType, seed: int, n: int, budget: int) -> None:
    got, want = _both(query_like(random.Random(seed), n), budget, 4_000_000)
    _same(got, want)
    assert got.method == "exact"


def _solve(native: ModuleType, items: list[Item], budget: int,
           prune_from: int = 0) -> tuple[int, np.ndarray, np.ndarray]:
    """``solve`` over ``items`` with a large cap: (room, state, scaled)."""
    costs = np.array([it.cost for it in items], np.int64)
    floats = np.array([it.value for it in items], np.float64)
    state = np.full(len(items), 7, np.int8)
    scaled = np.full(len(items), 7, np.int64)
    room = native.solve(costs, floats, budget, 10**9, prune_from, 0, 2, state, scaled)
    return room, state, scaled


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(items=items_strategy(30, 80), budget=st.integers(1, 300))
def test_reduction_fixes_in_only_what_the_optimum_takes_and_out_only_what_it_leaves(
        native: ModuleType, items: list[Item], budget: int) -> None:
    items = [it for it in items if it.cost <= budget and it.value > 0]
    if not any(it.cost for it in items):  # left to the numpy code (room -2)
        return
    room, state, _ = _solve(native, items, budget)
    assert set(state.tolist()) <= {0, 1, 2}
    optimum = set(pack_full_table([(it.key, it.cost, it.value) for it in items], budget))
    fixed_in = {it.key for it, s in zip(items, state.tolist(), strict=True) if s == 1}
    left_out = {it.key for it, s in zip(items, state.tolist(), strict=True) if s == 0}
    assert fixed_in <= optimum
    assert not left_out & optimum
    assert room == budget - sum(it.cost for it in items if it.key in fixed_in)


def test_reduction_of_a_query_sized_instance_leaves_a_small_core(native: ModuleType) -> None:
    # the point of the reduction: thousands of candidates, a core of tens
    items = [it for it in query_like(random.Random(5), 8_000) if it.value > 0]
    room, state, _ = _solve(native, items, 8_000, prune_from=packing.PRUNE_FROM)
    assert 0 <= room <= 8_000
    assert 0 < int((state == 2).sum()) < 200
    assert int((state == 1).sum()) > 10


def test_dp_chooses_what_the_full_table_chooses(native: ModuleType) -> None:
    from tests.support.reference import full_table_dp

    rng = random.Random(3)
    for _ in range(300):
        n = rng.randint(0, 14)
        costs = [rng.randint(0, 40) for _ in range(n)]
        values = [rng.choice([0, rng.randint(0, 30), 10]) for _ in range(n)]
        width = rng.randint(0, 160)
        chosen = np.zeros(n, np.int8)
        native.dp(np.array(costs, np.int64), np.array(values, np.int64), width, chosen)
        assert sorted(chosen.nonzero()[0].tolist()) == sorted(full_table_dp(costs, values,
                                                                           width))


def test_bad_arguments_are_refused_with_a_clear_error(native: ModuleType) -> None:
    c = np.array([1, 2, 3], np.int64)
    d = np.array([1.0, 1.0, 1.0])
    with pytest.raises(ValueError, match="different lengths"):
        native.solve(c, d[:2].copy(), 5, 100, 0, 0, 2, np.zeros(3, np.int8), c.copy())
    with pytest.raises(ValueError, match="budget < 0"):
        native.solve(c, d, -1, 100, 0, 0, 2, np.zeros(3, np.int8), c.copy())
    with pytest.raises(ValueError, match="different lengths"):
        native.dp(c, c, 5, np.zeros(2, np.int8))
    with pytest.raises(ValueError, match="width < 0"):
        native.dp(c, c, -1, np.zeros(3, np.int8))
    with pytest.raises(ValueError, match="not C-contiguous"):  # never read as if it were
        native.dp(np.arange(6, dtype=np.int64)[::2], c, 5, np.zeros(3, np.int8))


def test_the_numpy_path_can_be_forced() -> None:
    """``HIVEMIND_PACKER=numpy`` reaches the packer through the settings at a process's entry
    point (here the CLI's), and anything else is refused with a message naming the values."""
    code = ("import sys; from hivemind_memory.worker.cli.main import main; "
            "from hivemind_memory.projections.ranking import packing; "
            "before = packing.native is None; "
            "main(['notes', '--ns', 'x', '--redis-url', 'memory://']); "
            "print(before, packing.native is None)")
    env = {**os.environ, "HIVEMIND_PACKER": "numpy"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, check=True)
    assert out.stdout.split()[-2:] == ["False", "True"]
    env["HIVEMIND_PACKER"] = "fortran"
    bad = subprocess.run([sys.executable, "-m", "hivemind_memory.worker.cli.main", "notes",
                          "--ns", "x", "--redis-url", "memory://"], env=env,
                         capture_output=True, text=True)
    assert bad.returncode == 2
    assert "HIVEMIND_PACKER" in bad.stderr and "c, numpy" in bad.stderr


@settings(max_examples=200, deadline=None)
@given(items=items_strategy(40, 120), budget=st.integers(1, 700))
def test_solve_reads_the_raw_arrays_as_the_numpy_path_does(native: ModuleType,
                                                           items: list[Item],
                                                           budget: int) -> None:
    # eligibility (cost <= budget, value > 0), _scaled's integers and the reduction of the
    # eligible items, from arrays that also hold items over the budget and worthless ones
    room, state, scaled = _solve(native, items, budget)
    costs = np.array([it.cost for it in items], np.int64)
    floats = np.array([it.value for it in items], np.float64)
    ok = ((costs <= budget) & (floats > 0.0)).nonzero()[0]
    if not len(ok) or not costs[ok].sum():
        assert room == -2
        return
    assert scaled[ok].tolist() == packing._scaled(floats[ok]).tolist()
    out = np.ones(len(items), np.bool_)
    out[ok] = False
    assert not state[out].any() and not scaled[out].any()
    # the same as solve over the eligible items alone
    want_room, want_state, want_scaled = _solve(native, [items[i] for i in ok.tolist()], budget)
    assert room == want_room
    assert state[ok].tolist() == want_state.tolist()
    assert scaled[ok].tolist() == want_scaled.tolist()


def test_solve_leaves_values_near_the_scaling_limit_to_the_numpy_path(
        native: ModuleType) -> None:
    # _scaled shrinks its scale there; solve does not guess, and pack_positions still packs
    n = 4
    costs = np.array([1, 2, 3, 4], np.int64)
    floats = np.full(n, packing.MAX_SCALED_TOTAL / packing.VALUE_SCALE / 2)
    state, scaled = np.empty(n, np.int8), np.empty(n, np.int64)
    assert native.solve(costs, floats, 6, 10**9, 0, 0, 2, state, scaled) == -2
    got, want = _both([Item(f"k{i}", int(c), float(v)) for i, (c, v) in
                       enumerate(zip(costs, floats, strict=True))], 6, 10**9)
    _same(got, want)
    assert got.at.tolist() == [0, 1, 2]  # equal values: the most items that fit, 1 + 2 + 3


@pytest.mark.timeout(60, method="thread")  # a loop in C never returns to a signal handler
def test_absurd_budgets_and_costs_pack_as_the_numpy_path(native: ModuleType) -> None:
    # the survivors' sampled target cost grows as 2 * budget * 4^k: no int64 overflow (it
    # made the sample's index negative and the selection loop forever)
    items = [Item(f"k{i}", 2**60 + i, 0.5 + i / 100) for i in range(5)]
    items += [Item(f"s{i}", i + 1, 0.01) for i in range(5)]
    for _ in small_thresholds():
        for budget in (2**61, 2**62, 2**63 - 1):
            _same(*_both(items, budget, 10**9))
