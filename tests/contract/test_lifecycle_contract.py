"""Revisions, supersessions and erasures: random logs fold the same in the projector (any
batching), in replay and in a reference fold written apart from the product's, as of any time;
on fakeredis, a real redis-server and a Redis Cluster alike."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hivemind_memory.projections.store import keys
from hivemind_memory.projections.store.log import append
from hivemind_memory.projections.store.readmodel import project_batch, read_dead, read_notes
from hivemind_memory.projections.store.rebuild import fold_log
from tests.support.factories import T0, created, erased, ev, forgotten, iso, revised, used
from tests.support.reference import lifecycle_fold, state_facts

IDS = ["a", "b", "c", "d"]
AGENTS = ["al", "bo"]
WORDS = ["deploys", "argocd", "flux", "tuesday", "staging", "redis"]
DAY = st.integers(0, 30)


def _at(d: int) -> Any:
    return T0 + timedelta(days=d)


CREATED = st.builds(
    lambda n, k, a, d, scope, sup, emb: created(
        n, eid=f"c{n}{k}", agent=a, at=_at(d), scope=scope,
        **({"supersedes": sup} if sup else {}), **({"embedding": [0.5, 0.25]} if emb else {})),
    st.sampled_from(IDS), st.integers(0, 6), st.sampled_from(["al", "al", "bo"]), DAY,
    st.sampled_from(["shared", "shared", "private"]),
    st.one_of(st.just([]), st.lists(st.sampled_from(IDS), min_size=1, max_size=2)),
    st.booleans())
SUPERSEDING = st.builds(  # a new note (a fresh id, mostly) that supersedes existing ones
    lambda k, a, d, sup: created(f"s{k}", eid=f"cs{k}", agent=a, at=_at(d), supersedes=sup),
    st.integers(0, 40), st.sampled_from(["al", "al", "bo"]), DAY,
    st.lists(st.sampled_from([*IDS, "s1", "s2"]), min_size=1, max_size=2))
USED = st.builds(lambda n, k, a, d: used(n, f"u{k}", agent=a, at=_at(d)),
                 st.sampled_from([*IDS, "s1", "s2"]), st.integers(0, 20),
                 st.sampled_from(AGENTS), DAY)
FORGOTTEN = st.builds(
    lambda n, k, a, d, adm: {**forgotten(n, f"f{k}", agent=a, at=_at(d)),
                             **({"as_admin": True} if adm else {})},
    st.sampled_from(IDS), st.integers(0, 3), st.sampled_from(AGENTS), DAY,
    st.booleans())
REVISED = st.builds(
    lambda n, k, a, d, words, adm, tokens, kind: {
        **revised(n, f"r{k}", agent=a, at=_at(d), text=" ".join(words)),
        **({"as_admin": True} if adm else {}), **({"tokens": tokens} if tokens else {}),
        **({"kind": kind} if kind else {})},
    st.sampled_from(IDS), st.integers(0, 9), st.sampled_from(AGENTS), DAY,
    st.lists(st.sampled_from(WORDS), min_size=1, max_size=4), st.booleans(),
    st.sampled_from([None, 7]), st.sampled_from([None, "scratch", "note"]))
ERASED = st.builds(lambda n, k, d, adm: erased(n, f"e{k}", at=_at(d), as_admin=adm),
                   st.sampled_from(IDS), st.integers(0, 2), DAY,
                   st.sampled_from([True, True, False]))
PRELUDE = st.lists(CREATED.filter(lambda e: "supersedes" not in e), min_size=2, max_size=5)
"""Notes to start from, so that most later events name a note that exists."""
EVENT = st.one_of(CREATED, CREATED, SUPERSEDING, USED, USED, USED, FORGOTTEN, REVISED,
                  REVISED, ERASED)


@pytest.mark.slow
@settings(max_examples=100, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.tuples(PRELUDE, st.lists(EVENT, min_size=5, max_size=40)).map(lambda x: x[0] + x[1]),
       st.lists(st.integers(1, 6), min_size=1, max_size=6),
       st.lists(DAY, min_size=1, max_size=3))
def test_the_projector_replay_and_a_reference_fold_agree_as_of_any_time(
        store: Any, events: list[dict[str, Any]], cuts: list[int], times: list[int]) -> None:
    store.flushall()
    if not events:
        return
    k = 0
    for i in range(0, len(events), 4):  # appended in pieces, projected in random batches
        append(store, [ev(d) for d in events[i:i + 4]])
        while project_batch(store, "t", cuts[k % len(cuts)]) is not None:
            k += 1
    want = lifecycle_fold(events)
    assert state_facts(read_notes(store, "t")) == want
    rb = fold_log(store, "t")
    assert state_facts(rb.projection.notes) == want
    assert [d.entry for d in read_dead(store, "t")] == [d.entry_id for d in rb.projection.dead]
    for d in times:  # as of T: the events whose at <= T, in log order
        as_of = fold_log(store, "t", as_of=_at(d))
        assert state_facts(as_of.projection.notes) == lifecycle_fold(events, iso(_at(d))), d
    assert store.exists(keys.stream("t"))
