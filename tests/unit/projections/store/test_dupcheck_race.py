"""A checked ``remember`` against other writers: the check reads the tail once and the append
rests on it (compare-and-set on the stream's last entry). When a write lands in between, the
check runs again only if that write could change it (``dupcheck.still_holds``); two writers
of the same text still make exactly one note. These race the full check (``remember``'s path
when its one-step script wrote nothing: a note named, a long tail); the one-step path has no
window between check and append, its races are in ``test_dupappend.py``."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import pytest

from hivemind_memory.api_stub.client import Client
from hivemind_memory.api_stub.protocol.settings import Settings
from hivemind_memory.events.schema import NoteCreated
from hivemind_memory.projections.store import keys
from hivemind_memory.projections.store.readmodel import DEFAULT_SPEC, project_batch
from tests.support.factories import T0, created, ev, forgotten

NS = "t"
TEXT = "The staging cluster is rebuilt every Friday night from the main branch."


def _client(store: Any) -> Client:
    return Client(store, settings=Settings(redis_url="redis://unused"))


@pytest.fixture(autouse=True)
def _full_check(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every ``remember`` here takes the full check (check, then the checked append)."""
    monkeypatch.setattr(Client, "_remember_fresh", lambda self, ev: None)


def _note(nid: str, text: str, agent: str = "alice", hours: int = 0, **kw: Any) -> NoteCreated:
    got = ev(created(nid, agent=agent, text=text, at=T0 + timedelta(hours=hours), **kw))
    assert isinstance(got, NoteCreated)
    return got


def _project(c: Client) -> None:
    while project_batch(c.store, NS, spec=DEFAULT_SPEC) is not None:
        pass


def _created_ids(store: Any) -> list[str]:
    from hivemind_memory.projections.store.readmodel import decode_entries

    return [e.note_id for _, e, _ in decode_entries(store.xrange(keys.stream(NS)), NS)
            if isinstance(e, NoteCreated)]


class _Between:
    """Runs ``meanwhile`` once, after ``c``'s next check and before its append lands (the
    window a concurrent writer can fall into); counts ``c``'s checks."""

    def __init__(self, c: Client, meanwhile: Any) -> None:
        self.checks = 0
        self._done = False
        check, append = c.check_duplicates, c.append_checked

        def counted(*a: Any, **kw: Any) -> Any:
            self.checks += 1
            return check(*a, **kw)

        def racing(*a: Any, **kw: Any) -> Any:
            if not self._done:
                self._done = True
                meanwhile()
            return append(*a, **kw)

        c.check_duplicates = counted  # type: ignore[method-assign]
        c.append_checked = racing  # type: ignore[method-assign]


@pytest.mark.parametrize("projected", [False, True], ids=["tail", "index"])
def test_two_writers_of_the_same_text_make_exactly_one_note(store: Any, projected: bool
                                                            ) -> None:
    """Alice's check finds nothing; before her append, another writer (alice too, in another
    process) writes the same text. Her append loses the race, the entry in between is a twin
    of her text, so the check runs again and her answer names that note: one note."""
    a, b = _client(store), _client(store)
    a.remember(_note("old", "an unrelated note about the coffee machine"))
    if projected:
        _project(a)
    race = _Between(a, lambda: b.remember(_note("first", TEXT, hours=1)))
    got = a.remember(_note("second", TEXT, hours=2))
    assert got.duplicate_of == "first" and got.write.appended == 0
    assert race.checks == 2
    assert _created_ids(store) == ["old", "first"]


def test_a_near_duplicate_landing_in_between_is_reported(store: Any) -> None:
    """Another agent's note of nearly the same words lands between the check and the append:
    the write goes in (no twin), and its answer reports that note."""
    a, b = _client(store), _client(store)
    _Between(a, lambda: b.remember(_note("bobs", TEXT + " Ask Dana.", agent="bob")))
    got = a.remember(_note("alices", TEXT, hours=1))
    assert got.write.appended == 1 and got.duplicate_of is None
    assert [n for n, _ in got.duplicates or []] == ["bobs"]


def test_an_unrelated_write_in_between_costs_no_second_check(store: Any) -> None:
    """What the other writer appended shares no words with the note and touches no note the
    check named: only the append is retried, on the new tail."""
    a, b = _client(store), _client(store)
    a.remember(_note("n0", TEXT + " Ask Dana."))
    race = _Between(a, lambda: b.remember(_note("x", "coffee beans arrive on mondays",
                                                agent="bob")))
    got = a.remember(_note("n1", TEXT, hours=1))
    assert got.write.appended == 1 and [n for n, _ in got.duplicates or []] == ["n0"]
    assert race.checks == 1
    assert _created_ids(store) == ["n0", "x", "n1"]


def test_a_near_duplicate_forgotten_in_between_is_not_reported(store: Any) -> None:
    """The check named ``n0``; it is forgotten before the append lands. That entry touches a
    note the check named, so the check runs again and the answer no longer names it."""
    a = _client(store)
    a.remember(_note("n0", TEXT + " Ask Dana."))
    _project(a)
    race = _Between(a, lambda: _client(store).append_checked(
        [forgotten("n0", "f-n0", agent="alice", at=T0 + timedelta(minutes=30))]))
    got = a.remember(_note("n1", TEXT, hours=1))
    assert got.write.appended == 1 and got.duplicates == []
    assert race.checks == 2


def test_supersede_rests_on_the_notes_as_the_check_read_them(store: Any) -> None:
    """``supersede`` takes the author's near-duplicates from the check's own view: the new
    note supersedes them, in the tail and once projected."""
    from hivemind_memory.projections.store.readmodel import read_notes

    c = _client(store)
    c.remember(_note("n0", TEXT + " Ask Dana."))
    c.remember(_note("bobs", TEXT + " Ask Eve.", agent="bob", hours=1))
    got = c.remember(_note("n1", TEXT, hours=2), duplicates="supersede")
    assert got.write.appended == 1 and got.superseded == ["n0"]
    _project(c)
    notes = read_notes(store, NS)
    assert notes["n0"].superseded_by == "n1" and notes["bobs"].superseded_by is None


@pytest.mark.parametrize("rounds", [5])
def test_writers_of_the_same_text_at_once_leave_one_note(store: Any, rounds: int) -> None:
    """Six threads, each its own client (one connection pool: redis-py's is thread safe),
    write the same text at the same instant, ``rounds`` times over: one note is created each
    time, and the five other answers name it."""
    for k in range(rounds):
        _same_text_at_once(store, f"{TEXT} Round {k}.", f"r{k}-")


def _same_text_at_once(store: Any, text: str, tag: str) -> None:
    clients = [_client(store) for _ in range(6)]
    start = threading.Barrier(len(clients))
    out: list[Any] = [None] * len(clients)

    def run(k: int) -> None:
        start.wait()
        out[k] = clients[k].remember(_note(f"{tag}{k}", text, hours=k))

    threads = [threading.Thread(target=run, args=(k,)) for k in range(len(clients))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    made = [o for o in out if o.write.appended == 1]
    assert len(made) == 1
    mine = [n for n in _created_ids(store) if n.startswith(tag)]
    assert len(mine) == 1
    assert sorted(o.duplicate_of for o in out if o.write.appended == 0) == mine * 5
