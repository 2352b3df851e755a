"""The LangGraph store over a real ``serve`` and the embedded store: the same sequence of
operations gives what LangGraph's own ``InMemoryStore`` gives (sync and async, batches
included), namespaces map to note ids losslessly and reversibly, reads see every write before
them, ``search(query=...)`` is hivemind's ranking within a namespace prefix, and privacy and
authorship stay hivemind's (where it is stricter than LangGraph)."""

from __future__ import annotations

import re
import uuid
from collections.abc import Awaitable, Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.adapters.conftest import framework

framework("langgraph")  # the [langgraph] extra

from langgraph.store.base import BaseStore, GetOp, Item, PutOp, SearchOp  # noqa: E402
from langgraph.store.memory import InMemoryStore  # noqa: E402

from hivemind_memory import Memory, NotAllowed  # noqa: E402
from hivemind_memory.events.schema import ID_PATTERN  # noqa: E402
from hivemind_memory.integrations.langgraph import (  # noqa: E402
    HivemindStore,
    decode_note_id,
    namespace_prefix,
    note_id_of,
)
from tests.support.frontdoor import ALICE, BOB, start_live  # noqa: E402

ODD_KEY = "key with spaces/ü.x:@%"
"""A key with every separator the mapping escapes."""


def fresh(memory: Memory, **kw: Any) -> HivemindStore:
    """A store of its own in the shared namespace (a root no other test uses)."""
    return HivemindStore(memory, root=f"t{uuid.uuid4().hex[:8]}", **kw)


def seen(x: Any) -> Any:
    """What a result shows, comparable across stores (no timestamps, no scores)."""
    if isinstance(x, Item):
        return ("item", x.namespace, x.key, x.value)
    if isinstance(x, list):
        return [seen(i) for i in x]
    return x


def unordered(items: list[Item]) -> list[Any]:
    return sorted((seen(i) for i in items), key=repr)


# -- the shared sequence ----------------------------------------------------------------------
def sequence(store: BaseStore) -> list[Any]:
    """Operations as an agent graph makes them; what each one shows."""
    out: list[Any] = []
    alice, bob, work = ("memories", "alice"), ("memories", "bob"), ("memories", "alice", "work")
    store.put(alice, "food", {"kind": "food", "text": "likes pizza", "n": 1})
    store.put(alice, "drink", {"kind": "drink", "text": "drinks green tea", "n": 2})
    store.put(bob, "food", {"kind": "food", "text": "likes sushi", "n": 3})
    store.put(work, "deploys", {"kind": "fact", "text": "deploys on tuesdays", "n": 4,
                                "tags": ["ops", "release"], "meta": {"team": "infra"}})
    store.put(("docs",), ODD_KEY, {"text": "odd key", "n": 5})
    store.put(("ü-labels", "with spaces", "a:b@c"), "k", {"text": "odd namespace", "n": 6})

    out.append(seen(store.get(alice, "food")))
    out.append(seen(store.get(alice, "nope")))
    out.append(seen(store.get(("docs",), ODD_KEY)))
    out.append(seen(store.get(("ü-labels", "with spaces", "a:b@c"), "k")))
    # an update is the item's new value
    store.put(alice, "food", {"kind": "food", "text": "likes pizza and pasta", "n": 10})
    out.append(seen(store.get(alice, "food")))
    # search by prefix and by filter (no query)
    out.append(unordered(store.search(("memories",), limit=100)))
    out.append(unordered(store.search(("memories", "alice"), limit=100)))
    out.append(unordered(store.search(("memories",), filter={"kind": "food"})))
    out.append(unordered(store.search((), filter={"n": {"$gte": 4}}, limit=100)))
    out.append(unordered(store.search((), filter={"tags": ["ops", "release"]})))
    out.append(unordered(store.search((), filter={"meta": {"team": "infra"}})))
    out.append(unordered(store.search(("memories", "al"), limit=100)))  # labels are whole
    pages = [store.search(("memories",), limit=2, offset=o) for o in (0, 2, 4)]
    out.append(([len(p) for p in pages], unordered([i for p in pages for i in p])))
    # namespaces
    out.append(store.list_namespaces())
    out.append(store.list_namespaces(prefix=("memories",)))
    out.append(store.list_namespaces(prefix=("memories", "*")))
    out.append(store.list_namespaces(suffix=("alice",)))
    out.append(store.list_namespaces(max_depth=1))
    out.append(store.list_namespaces(prefix=("memories",), max_depth=2, limit=1, offset=1))
    # delete, then the key again
    store.delete(bob, "food")
    out.append(seen(store.get(bob, "food")))
    out.append(unordered(store.search(("memories", "bob"))))
    store.delete(bob, "never-there")
    store.put(bob, "food", {"kind": "food", "text": "likes ramen now"})
    out.append(seen(store.get(bob, "food")))
    # a batch reads the state before its puts; the last put of an item wins
    out.append(seen(store.batch([
        PutOp(alice, "drink", {"text": "drinks coffee"}),
        GetOp(alice, "drink"),
        PutOp(alice, "drink", {"text": "drinks water"}),
        SearchOp(("memories", "alice"), filter={"kind": "drink"}),
    ])))
    out.append(seen(store.get(alice, "drink")))
    out.append(store.list_namespaces(prefix=("memories",)))
    return out


async def asequence(store: BaseStore) -> list[Any]:
    """The async calls (``abatch`` underneath)."""
    out: list[Any] = []
    ns = ("async", "user-1")
    await store.aput(ns, "a", {"text": "first"})
    await store.aput(ns, "b", {"text": "second"})
    out.append(seen(await store.aget(ns, "a")))
    await store.aput(ns, "a", {"text": "first, revised"})
    out.append(seen(await store.aget(ns, "a")))
    out.append(unordered(await store.asearch(("async",))))
    out.append(await store.alist_namespaces(prefix=("async",)))
    await store.adelete(ns, "b")
    out.append(unordered(await store.asearch(("async",))))
    return out


def test_the_same_operations_show_what_langgraphs_in_memory_store_shows(
        memory: Memory) -> None:
    store = fresh(memory)
    assert sequence(store) == sequence(InMemoryStore())


async def test_the_async_calls_too(memory: Memory) -> None:
    assert await asequence(fresh(memory)) == await asequence(InMemoryStore())


def test_items_keep_their_times_and_updates_move_updated_at(memory: Memory) -> None:
    store = fresh(memory)
    store.put(("t",), "k", {"v": 1})
    first = store.get(("t",), "k")
    store.put(("t",), "k", {"v": 2})
    second = store.get(("t",), "k")
    assert first is not None and second is not None and second.value == {"v": 2}
    assert isinstance(first.created_at, datetime) and first.created_at.tzinfo is not None
    assert first.created_at <= first.updated_at <= second.updated_at
    assert second.created_at <= second.updated_at
    # one live note holds the item: the update is a revision, not a second copy
    live = memory.notes(namespace_prefix(store.root, ("t",)))
    assert [decode_note_id(store.root, n.note_id).key for n in live] == ["k"]  # type: ignore[union-attr]
    assert store.search(("t",))[0].value == {"v": 2}


# -- search with a query: hivemind's ranking -------------------------------------------------
def test_a_query_search_is_ranked_by_hivemind_within_the_prefix_and_the_budget(
        memory: Memory) -> None:
    store = fresh(memory)
    store.put(("m", "alice"), "food", {"text": "alice likes pizza with olives"})
    store.put(("m", "alice"), "pets", {"text": "alice has a cat named pizza"})
    store.put(("m", "alice"), "job", {"text": "alice works on the billing service"})
    store.put(("m", "bob"), "food", {"text": "bob likes pizza too"})
    store.put(("other",), "food", {"text": "pizza pizza pizza"})

    got = store.search(("m", "alice"), query="pizza olives")
    assert [i.key for i in got][:1] == ["food"] and {i.key for i in got} == {"food", "pets"}
    assert all(i.namespace == ("m", "alice") for i in got)  # the prefix, on the server
    scores = [i.score for i in got]
    assert all(s is not None and 0 < s <= 1 for s in scores) and scores == sorted(
        scores, reverse=True)  # type: ignore[type-var]
    everyone = store.search(("m",), query="pizza")
    assert {(i.namespace, i.key) for i in everyone} == {
        (("m", "alice"), "food"), (("m", "alice"), "pets"), (("m", "bob"), "food")}
    # the filter applies to what the ranking returns; limit and offset after it
    assert [i.namespace for i in store.search(("m",), query="pizza",
                                              filter={"text": "bob likes pizza too"})] == [
        ("m", "bob")]
    assert len(store.search(("m",), query="pizza", limit=1, offset=1)) == 1
    # the budget bounds what one search may return (each of these notes is 8 or 9 tokens)
    store.search_budget = 12
    assert len(store.search(("m",), query="pizza")) == 1


def test_the_mapping_is_documented_and_refuses_what_cannot_fit(memory: Memory) -> None:
    nid = note_id_of("lg", ("memories", "a.b:c"), "k@1", "0661900000000000abcd")
    assert nid == "lg.memories.a@2Eb@3Ac.:k@401:0661900000000000abcd"
    with pytest.raises(ValueError, match="at most 128"):
        fresh(memory).put(("memories",), "k" * 120, {"v": 1})
    with pytest.raises(ValueError, match="root"):
        HivemindStore(memory, root="bad.root")


labels = st.text(st.characters(blacklist_characters=".\x00", blacklist_categories=("Cs",)),
                 min_size=1, max_size=8)


@given(ns=st.lists(labels, min_size=1, max_size=3).map(tuple), key=labels,
       other=st.lists(labels, min_size=1, max_size=3).map(tuple))
def test_namespaces_and_keys_map_losslessly_and_reversibly(
        ns: tuple[str, ...], key: str, other: tuple[str, ...]) -> None:
    try:
        nid = note_id_of("lg", ns, key, "0661900000000000abcd", version=3)
    except ValueError:
        return  # too long for a note id: refused, never truncated
    assert re.match(ID_PATTERN, nid)
    item = decode_note_id("lg", nid)
    assert item is not None and (item.namespace, item.key, item.version) == (ns, key, 3)
    # in a restricted writer's id space (HIVEMIND_NOTE_IDS=owned) the item reads the same
    assert decode_note_id("lg", nid + "@@alice") == item
    # a namespace's prefix covers exactly its own items and those below it
    below = other[:len(ns)] == ns
    try:
        theirs = note_id_of("lg", other, key, "0661900000000000abcd")
    except ValueError:
        return
    assert theirs.startswith(namespace_prefix("lg", ns)) == below


# -- where hivemind is stricter ---------------------------------------------------------------
def test_private_items_and_authorship(tmp_path: Path) -> None:
    live = start_live(f"memory://{tmp_path / 'store'}")
    try:
        alice = Memory(live.base, ns="team-a", token=ALICE)
        bob = Memory(live.base, ns="team-a", token=BOB)
        mine = HivemindStore(alice, scope="private")
        mine.put(("prefs",), "secret", {"text": "alice's secret preference"})
        shared = HivemindStore(alice)
        shared.put(("prefs",), "public", {"text": "alice shares this"})
        theirs = HivemindStore(bob)
        assert theirs.get(("prefs",), "secret") is None
        assert [i.key for i in theirs.search(("prefs",))] == ["public"]
        assert theirs.list_namespaces() == [("prefs",)]
        assert mine.get(("prefs",), "secret") is not None
        with pytest.raises(NotAllowed):
            theirs.delete(("prefs",), "public")
        with pytest.raises(NotAllowed):
            theirs.put(("prefs",), "public", {"text": "bob overwrites"})
        assert shared.get(("prefs",), "public").value == {"text": "alice shares this"}  # type: ignore[union-attr]
    finally:
        live.stop()


def _run(fn: Callable[[], Awaitable[None]]) -> None:
    import anyio

    anyio.run(fn)


def test_over_owned_note_ids_a_restricted_token_puts_in_its_own_id_space(
        tmp_path: Path) -> None:
    """``HIVEMIND_NOTE_IDS=owned``: the store's ids end with ``@@`` and the token's agent
    (asked of the server once), so puts are accepted and read back like any other."""
    live = start_live(f"memory://{tmp_path / 'owned'}", env={"HIVEMIND_NOTE_IDS": "owned"})
    try:
        with Memory(live.base, ns="team-a", token=ALICE) as mem:
            store = fresh(mem)
            store.put(("memories", "alice"), "food", {"text": "likes pizza"})
            store.put(("memories", "alice"), "food", {"text": "likes pasta"})  # a revision
            got = store.get(("memories", "alice"), "food")
            assert got is not None and got.value == {"text": "likes pasta"}
            [note] = mem.notes(store.root + ".")
            assert note.note_id.endswith("@@alice"), note.note_id
            assert [i.key for i in store.search(("memories",), query="pasta")] == ["food"]
            store.delete(("memories", "alice"), "food")
            assert store.get(("memories", "alice"), "food") is None
    finally:
        live.stop()
