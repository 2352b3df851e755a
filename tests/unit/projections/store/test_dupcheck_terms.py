"""The records of the near-duplicate lookup: a write bounds the overlap of the notes the
bands name on their filed 16-bit term digests (never below the word overlap), and reads (and
compares again on the text) only those that reach the threshold."""

from __future__ import annotations

import random
from typing import Any

import numpy as np

from hivemind_memory.api_stub.client import Client
from hivemind_memory.api_stub.protocol.settings import Settings
from hivemind_memory.projections.ranking.dupsketch import (
    overlaps,
    parse_record,
    record,
    short_hashes,
)
from hivemind_memory.projections.ranking.similarity import word_overlap
from hivemind_memory.projections.store import dupindex, readmodel
from hivemind_memory.projections.store.readmodel import DEFAULT_SPEC, project_batch
from tests.support.factories import created, ev

NS = "t"


def words(*ns: int) -> str:
    return " ".join(f"w{n}" for n in ns)


def test_overlaps_on_digests_bound_the_word_overlap_from_above() -> None:
    """300 random pairs of term sets (empty ones too): the vectorised overlap on packed
    16-bit digests is never below ``word_overlap`` of the sets, and equal to it unless two
    distinct terms share a digest; a record gives its id and digests back."""
    rng = random.Random(5)
    vocab = [f"t{i}" for i in range(400)]
    mine = frozenset(rng.sample(vocab, 60))
    theirs = [frozenset(rng.sample(vocab, rng.choice([0, 1, 5, 60, 200]))) for _ in range(300)]
    packed = [parse_record(record(f"n{i}", t))[1] for i, t in enumerate(theirs)]
    got = overlaps(short_hashes(mine), packed)
    want = [word_overlap(mine, t) for t in theirs]
    assert all(g >= w for g, w in zip(got, want, strict=True))
    assert sum(g == w for g, w in zip(got, want, strict=True)) >= 290
    assert overlaps(short_hashes(frozenset()), packed) == [0.0] * 300
    nid, hs = parse_record(record("n1@@bob", mine))
    assert nid == "n1@@bob"
    assert np.array_equal(np.frombuffer(hs, "<u2"), short_hashes(mine))


def test_a_shared_digest_raises_the_bound_never_lowers_it() -> None:
    """Two distinct terms of the same 16-bit digest: the bound counts them shared (above the
    word overlap), so the prefilter can only pass a note on, never drop a near-duplicate."""
    by: dict[int, str] = {}
    pair = None
    for i in range(200_000):
        t = f"x{i}"
        d = int(short_hashes([t])[0])
        if d in by:
            pair = (by[d], t)
            break
        by[d] = t
    assert pair is not None
    a, b = pair
    mine = frozenset({a, "p", "q"})
    theirs = frozenset({b, "p", "q", "r"})
    [got] = overlaps(short_hashes(mine), [parse_record(record("n", theirs))[1]])
    assert got == 3 / 4 > word_overlap(mine, theirs) == 2 / 5


def _projected(store: Any, notes: dict[str, str]) -> Client:
    c = Client(store, settings=Settings(redis_url="redis://unused"))
    for nid, text in notes.items():
        c.remember(ev(created(nid, agent="alice", text=text)), duplicates="ignore")
    while project_batch(store, NS, spec=DEFAULT_SPEC) is not None:
        pass
    return c


def test_only_notes_reaching_the_threshold_are_read(store: Any, monkeypatch: Any) -> None:
    """``far`` shares enough bands to be named by the lookup (its terms are a superset, so
    every band it shares is certain) but overlaps 0.3: it is dropped on its digests, and the
    write's view reads only ``near`` (and the write's own id)."""
    c = _projected(store, {"near": words(*range(1, 11)), "far": words(*range(1, 31)),
                           "other": "completely unrelated words about lunch"})
    probe_text = words(*range(1, 10))  # 9 terms: near 0.9, far 0.3
    read: list[list[str]] = []
    real = readmodel.write_view

    def spy(r: Any, ns: str, note_ids: Any, event_ids: Any, **kw: Any) -> Any:
        read.append(sorted(note_ids))
        return real(r, ns, note_ids, event_ids, **kw)

    monkeypatch.setattr(readmodel, "write_view", spy)
    found = dupindex.lookup(store, NS, *_probe(c, probe_text))
    assert "far" in found.near  # the bands named it: the digests are what drop it
    got = c.check_duplicates(NS, "alice", probe_text, touched=["new"])
    assert got.near == [("near", 0.9)]
    assert read == [["near", "new"]]


def _probe(c: Client, text: str) -> tuple[Any, Any]:
    from hivemind_memory.projections.ranking.dupsketch import probe, spec_of

    spec = spec_of(c.config())
    return probe(text, spec, c.config()), spec


def test_only_texts_up_to_the_cached_size_are_kept_by_the_tail_caches() -> None:
    """A tail entry's terms and normalised text are cached only up to ``CACHED_TEXT_MAX``
    characters (a note may be 64 KiB: the caches would hold half a GiB); a longer text is
    compared the same, computed each time."""
    from hivemind_memory.projections.ranking.dupsketch import normalise
    from hivemind_memory.projections.store import dupcheck

    short = "w1 w2 w3 " * 10
    long = "x" * dupcheck.CACHED_TEXT_MAX + " w1 w2 w3"
    for text in (short, long):
        dupcheck._cached_terms.cache_clear()
        dupcheck._cached_normalised.cache_clear()
        assert dupcheck._normalised(text) == normalise(text)
        assert dupcheck._terms(text, "english") == dupcheck._terms_of(text, "english")
        kept = text is short
        assert dupcheck._cached_terms.cache_info().currsize == kept
        assert dupcheck._cached_normalised.cache_info().currsize == kept
