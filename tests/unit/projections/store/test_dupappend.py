"""``remember``'s one-step path (``dupappend.append_unless_named``): a fresh note that nothing
can name is checked and appended by one script; anything that could name it (a twin or a near
note in the lookup or in the unprojected tail, its ids already used, another spec) writes
nothing there and the full check answers, so every answer is the full check's."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import fakeredis
import pytest
import redis
from redis.exceptions import ConnectionError as RedisConnectionError

from hivemind_memory.api_stub.client import Client
from hivemind_memory.api_stub.protocol.settings import Settings
from hivemind_memory.events.errors import NoteExists
from hivemind_memory.events.schema import NoteCreated
from hivemind_memory.projections.ranking.dupsketch import filing, probe, spec_of
from hivemind_memory.projections.ranking.similarity import terms, word_overlap
from hivemind_memory.projections.store import dupappend, keys
from hivemind_memory.projections.store.readmodel import (
    DEFAULT_SPEC,
    decode_entries,
    project_batch,
)
from tests.support.factories import T0, created, ev

NS = "t"
QUEUE = "rq:queue:hivemind-project"


def words(*ns: int) -> str:
    """A text whose analyzed terms are exactly ``w<n>`` for the given numbers."""
    return " ".join(f"w{n}" for n in ns)


def _client(store: Any) -> Client:
    return Client(store, settings=Settings(redis_url="redis://unused"))


def _elsewhere(store: Any) -> Client:
    """A client of the same store on a connection of its own (another process's writer: it
    keeps its own view of the tail)."""
    if isinstance(store, fakeredis.FakeRedis):
        server = store.connection_pool.connection_kwargs["server"]
        return _client(fakeredis.FakeRedis(server=server))
    return _client(redis.Redis(port=store.connection_pool.connection_kwargs["port"]))


def _note(nid: str, text: str, agent: str = "alice", hours: int = 0, **kw: Any) -> NoteCreated:
    got = ev(created(nid, agent=agent, text=text, at=T0 + timedelta(hours=hours), **kw))
    assert isinstance(got, NoteCreated)
    return got


def _project(c: Client) -> None:
    while project_batch(c.store, NS, spec=DEFAULT_SPEC) is not None:
        pass


def _created_ids(store: Any) -> list[str]:
    return [e.note_id for _, e, _ in decode_entries(store.xrange(keys.stream(NS)), NS)
            if isinstance(e, NoteCreated)]


class _Paths:
    """Counts, on client ``c``, the one-step script's sends and outcomes and the full checks."""

    def __init__(self, c: Client, monkeypatch: pytest.MonkeyPatch) -> None:
        self.sends = 0
        self.fast: list[bool] = []
        self.full = 0
        store = c.store
        run, check = dupappend.append_unless_named, c.check_duplicates
        evalsha = store.evalsha

        def counted_evalsha(*a: Any, **kw: Any) -> Any:
            self.sends += 1
            return evalsha(*a, **kw)

        def one_step(*a: Any, **kw: Any) -> Any:
            store.evalsha = counted_evalsha
            try:
                got = run(*a, **kw)
            finally:
                del store.evalsha
            self.fast.append(got is not None)
            return got

        def full(*a: Any, **kw: Any) -> Any:
            self.full += 1
            return check(*a, **kw)
        monkeypatch.setattr(dupappend, "append_unless_named", one_step)
        c.check_duplicates = full  # type: ignore[method-assign]


def test_a_fresh_note_is_read_then_checked_and_appended_by_one_command(store: Any) -> None:
    """Nothing resembles the note: one MULTI that reads the lookup's spec tag, checkpoint and
    the write's buckets, and the log after the client's own last entry, then one EVALSHA,
    and nothing else (its projection job is already
    queued here, so none is enqueued); the entry is in the log, the namespace in the
    registry, and the answer has checked and found nothing."""
    c = _client(store)
    c.remember(_note("n1", words(1, 2, 3)))  # the script loaded, the marker set
    _project(c)
    store.set(keys.scheduled(NS), b"1")
    sent: list[str] = []
    orig = store.execute_command

    def execute_command(*a: Any, **kw: Any) -> Any:
        sent.append(str(a[0]))
        return orig(*a, **kw)
    store.execute_command = execute_command
    piped: list[tuple[bool, list[str]]] = []
    pipeline = store.pipeline

    def opened(*a: Any, **kw: Any) -> Any:
        p = pipeline(*a, **kw)
        run = p.execute

        def execute(*ea: Any, **ekw: Any) -> Any:
            piped.append((p.transaction, [str(cmd[0][0]) for cmd in p.command_stack]))
            return run(*ea, **ekw)
        p.execute = execute
        return p
    store.pipeline = opened
    got = c.remember(_note("n2", words(4, 5, 6), hours=1))
    assert piped == [(True, ["GET", "GET", "HMGET", "XRANGE"])] and sent == ["EVALSHA"]
    assert got.write.appended == 1 and got.duplicates == [] and got.unchecked is None
    assert _created_ids(store) == ["n1", "n2"]
    assert store.sismember(keys.NAMESPACES, NS)


def test_the_write_that_sets_the_marker_enqueues_the_projection(store: Any) -> None:
    """The script sets the projection marker with the append; the call that set it enqueues
    the job, one that found it set does not."""
    c = _client(store)
    c.remember(_note("n1", words(1, 2, 3)))
    assert store.get(keys.scheduled(NS)) == b"1" and store.llen(QUEUE) == 1
    c.remember(_note("n2", words(4, 5, 6), hours=1))
    assert store.llen(QUEUE) == 1
    store.delete(keys.scheduled(NS))
    c.remember(_note("n3", words(7, 8, 9), hours=2))
    assert store.get(keys.scheduled(NS)) == b"1" and store.llen(QUEUE) == 2


@pytest.mark.parametrize("projected", [False, True], ids=["tail", "index"])
def test_another_writers_twin_is_named_and_merged(store: Any, monkeypatch: pytest.MonkeyPatch,
                                                  projected: bool) -> None:
    """Bob's client wrote the text Alice's client never saw: in the unprojected tail (read
    with the buckets after the entry Alice's client last saw; it finds it a twin of her note)
    or in the lookup (under the twin key). Either way nothing is sent to the script and the
    full check answers with the twin."""
    a, b = _client(store), _elsewhere(store)
    a.remember(_note("old", words(90, 91, 92)))
    b.remember(_note("first", words(1, 2, 3, 4, 5), hours=1))
    if projected:
        _project(a)
    paths = _Paths(a, monkeypatch)
    got = a.remember(_note("second", words(1, 2, 3, 4, 5), hours=2))
    assert got.duplicate_of == "first" and got.write.appended == 0
    assert paths.fast == [False] and paths.full == 1
    assert paths.sends == 0  # the read of the buckets and the tail named it
    assert _created_ids(store) == ["old", "first"]


@pytest.mark.parametrize("projected", [False, True], ids=["tail", "index"])
def test_a_near_note_of_another_agent_is_reported_and_a_private_one_is_not(
        store: Any, monkeypatch: pytest.MonkeyPatch, projected: bool) -> None:
    """Bob's shared near-duplicate is named (the full check reports it); Carol's private one
    is named too by the script (it cannot tell), and the full check leaves it out."""
    a, b = _client(store), _elsewhere(store)
    b.remember(_note("bobs", words(*range(1, 11)), agent="bob"))
    b.remember(_note("carols", words(*range(1, 10), 50), agent="carol", hours=1,
                     scope="private"))
    if projected:
        _project(a)
    paths = _Paths(a, monkeypatch)
    got = a.remember(_note("alices", words(*range(1, 10), 60), hours=2))
    assert got.write.appended == 1
    assert [n for n, _ in got.duplicates or []] == ["bobs"]
    assert paths.fast == [False] and paths.full == 1


def test_a_note_the_bands_name_below_the_threshold_is_appended_in_one_step(
        store: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The bands name a note whose overlap is below the threshold (the texts share 9 of 31
    terms): the script bounds it on its filed term digests and appends; at the threshold
    (14 of 26) the script names it and the full check reports it."""
    c = _client(store)
    a_text = words(*range(1, 21))
    c.remember(_note("a", a_text))
    _project(c)
    cfg = c.config()
    spec = spec_of(cfg)
    below = words(*range(1, 10), *range(107, 118))
    filed = set(filing("a", a_text, spec).keys[1:])
    assert len(filed & set(probe(below, spec, cfg).bands)) >= spec.min_hits  # named...
    assert word_overlap(terms(below, cfg), terms(a_text, cfg)) < cfg.duplicate_threshold
    paths = _Paths(c, monkeypatch)
    got = c.remember(_note("b", below, hours=1))
    assert got.write.appended == 1 and got.duplicates == []
    assert paths.fast == [True] and paths.full == 0 and paths.sends == 1
    _project(c)
    at = words(*range(1, 15), *range(300, 306))
    assert len(filed & set(probe(at, spec, cfg).bands)) >= spec.min_hits
    got = c.remember(_note("c", at, hours=2))
    assert [n for n, _ in got.duplicates or []] == ["a"]
    assert paths.fast == [True, False] and paths.full == 1


def test_an_unrelated_write_in_between_is_read_with_the_buckets(
        store: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Alice's client compared the tail up to its own last note; Bob appends an unrelated
    note meanwhile. The read of the buckets brings Bob's entry, Alice's client compares it:
    one send, no full check, the note appended after Bob's."""
    a, b = _client(store), _elsewhere(store)
    a.remember(_note("n1", words(1, 2, 3)))
    b.remember(_note("x", words(40, 41, 42), agent="bob", hours=1))
    paths = _Paths(a, monkeypatch)
    got = a.remember(_note("n2", words(7, 8, 9), hours=2))
    assert got.write.appended == 1 and got.duplicates == []
    assert paths.fast == [True] and paths.sends == 1 and paths.full == 0
    got = a.remember(_note("n3", words(10, 11, 12), hours=3))  # its own entry: known
    assert paths.fast == [True, True] and paths.sends == 2
    assert _created_ids(store) == ["n1", "x", "n2", "n3"]


def _between(monkeypatch: pytest.MonkeyPatch, then: Any) -> None:
    """Run ``then()`` once, right after a one-step write has read the lookup's buckets and
    before it sends its script (another writer, or the projector, at that instant)."""
    read, done = dupappend._read, []

    def read_then(*a: Any, **kw: Any) -> Any:
        got = read(*a, **kw)
        if not done:
            done.append(then())
        return got
    monkeypatch.setattr(dupappend, "_read", read_then)


@pytest.mark.parametrize("projected", [False, True], ids=["tail", "index"])
def test_a_write_between_the_read_and_the_script_is_sent_back_and_compared(
        store: Any, monkeypatch: pytest.MonkeyPatch, projected: bool) -> None:
    """Bob writes a twin of Alice's note after her client read the buckets, and (``index``)
    the projector folds it into the lookup too, so the lookup Alice's client read is stale
    and the checkpoint has moved past Bob's entry. The script still returns every entry
    after the checkpoint the buckets were read at: Alice's client finds the twin, nothing
    is appended and the full check merges it. (A script that took the checkpoint as it is
    at its own run would find nothing after it and append a second copy.)"""
    a, b = _client(store), _elsewhere(store)
    a.remember(_note("n1", words(90, 91, 92)))
    _project(a)

    def bob() -> None:
        b.append_checked([_note("first", words(1, 2, 3, 4, 5), agent="bob", hours=1)])
        if projected:
            _project(b)
    _between(monkeypatch, bob)
    paths = _Paths(a, monkeypatch)
    got = a.remember(_note("second", words(1, 2, 3, 4, 5), hours=2))
    assert got.duplicate_of is None and got.write.appended == 1  # another author's twin...
    assert [n for n, _ in got.duplicates or []] == ["first"]  # ...is reported, not merged
    assert paths.fast == [False] and paths.sends == 1 and paths.full == 1
    assert _created_ids(store) == ["n1", "first", "second"]


def test_an_unrelated_write_between_the_read_and_the_script_costs_one_more_send(
        store: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Bob's unrelated note lands between Alice's read and her script: the script returns
    it, her client compares it and sends again: two sends, no full check."""
    a, b = _client(store), _elsewhere(store)
    a.remember(_note("n1", words(1, 2, 3)))
    _between(monkeypatch,
             lambda: b.append_checked([_note("x", words(40, 41), agent="bob", hours=1)]))
    paths = _Paths(a, monkeypatch)
    got = a.remember(_note("n2", words(7, 8, 9), hours=2))
    assert got.write.appended == 1 and got.duplicates == []
    assert paths.fast == [True] and paths.sends == 2 and paths.full == 0
    assert _created_ids(store) == ["n1", "x", "n2"]


def test_read_your_writes_the_writers_own_unprojected_note_is_a_twin(
        store: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The writer's own note, not projected yet, is named by what its client kept of it:
    the same text again is merged without a second send."""
    c = _client(store)
    c.remember(_note("n1", words(1, 2, 3, 4)))
    paths = _Paths(c, monkeypatch)
    got = c.remember(_note("n2", words(1, 2, 3, 4), hours=1))
    assert got.duplicate_of == "n1" and paths.sends == 0 and paths.full == 1
    assert _created_ids(store) == ["n1"]


def test_used_ids_take_the_full_check(store: Any) -> None:
    """A note id already in the read model: the script writes nothing and the full check
    refuses it; the same event again (a retry) is appended once."""
    c = _client(store)
    first = _note("n1", words(1, 2, 3))
    c.remember(first)
    _project(c)
    with pytest.raises(NoteExists):
        c.remember(_note("n1", words(20, 21), eid="c-other", hours=1))
    again = c.remember(first)
    assert again.write.appended == 0 and again.write.already == 1
    assert _created_ids(store) == ["n1"]


def test_a_tail_longer_than_a_writer_keeps_takes_the_full_check(
        store: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The script returns the tail a few entries at a time (``TAIL_MAX``); a writer keeps at
    most ``SEEN_MAX``: past it the full check answers, the note written either way."""
    monkeypatch.setattr(dupappend, "TAIL_MAX", 3)
    a, b = _client(store), _elsewhere(store)
    a.remember(_note("n0", words(1000)))
    for i in range(7):
        b.append_checked([_note(f"o{i}", words(100 + i), agent="bob", hours=i)])
    paths = _Paths(a, monkeypatch)
    a.remember(_note("n1", words(1, 2), hours=10))
    # 3 (and 1 more) read with the buckets, then 3 + 1 sent back, 1, then in
    assert paths.fast == [True] and paths.sends == 3 and paths.full == 0
    monkeypatch.setattr(dupappend, "SEEN_MAX", 4)
    dupappend.forget_seen(a.store, NS)
    got = a.remember(_note("n2", words(3, 4), hours=11))
    assert got.write.appended == 1 and paths.fast == [True, False] and paths.full == 1
    assert _created_ids(store) == ["n0", *(f"o{i}" for i in range(7)), "n1", "n2"]


def test_a_store_error_in_the_script_falls_back_to_the_full_check(
        store: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The script's call fails (its outcome unknown): the full check runs and writes the
    note, and a projection job is queued in case the script had set the marker."""
    c = _client(store)

    def failing(*a: Any, **kw: Any) -> Any:
        raise RedisConnectionError("connection reset")
    monkeypatch.setattr(dupappend, "append_unless_named", failing)
    got = c.remember(_note("n1", words(1, 2, 3)))
    assert got.write.appended == 1 and got.duplicates == []
    assert store.llen(QUEUE) >= 1 and store.get(keys.scheduled(NS)) == b"1"
    assert _created_ids(store) == ["n1"]


def test_a_client_keeps_what_it_saw_of_a_bounded_number_of_namespaces(
        store: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past ``SEEN_NAMESPACES`` the least recently written namespace's view is dropped (its
    next write reads the tail again: one more send, the same answer)."""
    monkeypatch.setattr(dupappend, "SEEN_NAMESPACES", 2)
    c = _client(store)
    for i, ns in enumerate(("a", "b", "a", "c")):
        c.remember(_note(f"n{i}", words(i), ns=ns, hours=i))
    assert dupappend.kept_namespaces(store) == ["a", "c"]
    paths = _Paths(c, monkeypatch)
    got = c.remember(_note("n9", words(1), ns="b", hours=9))  # b's n1 a twin, still found
    assert got.duplicate_of == "n1" and paths.sends == 1 and paths.full == 1


def test_a_client_keeps_a_bounded_weight_of_entries_and_digests(
        store: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past ``SEEN_WEIGHT`` (entries plus their term digests, over every namespace) the least
    recently written views are dropped, and a view heavier than the bound alone is not kept;
    a dropped view's next write still finds its twin (one more send, the same answer)."""
    c = _client(store)
    c.remember(_note("n0", words(*range(40)), ns="a"))
    one = dupappend.weight(dupappend._states(store)["a"])
    assert one == 1 + 40  # one entry (the write), its 40 term digests
    monkeypatch.setattr(dupappend, "SEEN_WEIGHT", 2 * one + 1)
    c.remember(_note("n1", words(*range(40, 80)), ns="b", hours=1))
    c.remember(_note("n2", words(*range(80, 120)), ns="c", hours=2))
    assert dupappend.kept_namespaces(store) == ["b", "c"]  # a's dropped by weight, not count
    c.remember(_note("n3", words(*range(200, 400)), ns="d", hours=3))  # too heavy to keep
    assert dupappend.kept_namespaces(store) == ["b", "c"]
    paths = _Paths(c, monkeypatch)
    got = c.remember(_note("n9", words(*range(40)), ns="a", hours=9))
    assert got.duplicate_of == "n0" and paths.full == 1
    got = c.remember(_note("n8", words(*range(200, 400)), ns="d", hours=8))
    assert got.duplicate_of == "n3"
