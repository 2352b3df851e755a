"""``remember``'s one-step path shared by the threads of one process (the HTTP server's): one
store client, one per-namespace state of the compared tail entries. Threads writing the same
sentence at once leave one note; the others are answered with its id."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

from hivemind_memory.api_stub.client import Client, RememberOutcome
from hivemind_memory.api_stub.protocol.settings import Settings
from hivemind_memory.events.schema import NoteCreated
from hivemind_memory.projections.store import keys
from hivemind_memory.projections.store.readmodel import decode_entries
from tests.support.factories import T0, created, ev

THREADS = 8
SENTENCE = "the staging database password rotates every monday at noon"


def _note(k: int, text: str) -> NoteCreated:
    got = ev(created(f"n{k}", agent="alice", text=text, at=T0 + timedelta(seconds=k)))
    assert isinstance(got, NoteCreated)
    return got


def _race(c: Client, texts: list[str]) -> list[RememberOutcome]:
    out: list[RememberOutcome | None] = [None] * len(texts)
    start = threading.Barrier(len(texts))

    def write(k: int) -> None:
        start.wait()
        out[k] = c.remember(_note(k, texts[k]))

    threads = [threading.Thread(target=write, args=(k,)) for k in range(len(texts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert all(o is not None for o in out)
    return [o for o in out if o is not None]


def _created(store: Any) -> list[str]:
    return [e.note_id for _, e, _ in decode_entries(store.xrange(keys.stream("t")), "t")
            if isinstance(e, NoteCreated)]


def test_threads_writing_one_sentence_at_once_leave_one_note(store: Any) -> None:
    c = Client(store, settings=Settings(redis_url="redis://unused"))
    c.remember(_note(99, "an unrelated note so the namespace exists"))
    got = _race(c, [SENTENCE] * THREADS)
    [kept] = [n for n in _created(store) if n != "n99"]
    assert sum(o.write.appended for o in got) == 1
    assert sorted(o.duplicate_of for o in got if o.write.appended == 0) == [kept] * (THREADS - 1)


def test_threads_writing_distinct_notes_at_once_append_each_once(store: Any) -> None:
    c = Client(store, settings=Settings(redis_url="redis://unused"))
    texts = [f"{SENTENCE.split()[k]} fact {k}: " + " ".join(f"w{k}x{j}" for j in range(12))
             for k in range(THREADS)]
    got = _race(c, texts)
    assert all(o.write.appended == 1 and o.duplicate_of is None for o in got)
    assert sorted(_created(store)) == sorted(f"n{k}" for k in range(THREADS))
