"""The terms members of the near-duplicate lookup: a write computes the exact overlap of the
notes the bands name from their filed term digests, and reads (and compares again) only
those that reach the threshold; notes filed without digests are still compared by text."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest

from hivemind_memory.api_stub.client import Client
from hivemind_memory.api_stub.protocol.settings import Settings
from hivemind_memory.projections.ranking.dupsketch import (
    TERMS_MARK,
    overlaps,
    term_hashes,
    terms_member,
)
from hivemind_memory.projections.ranking.similarity import word_overlap
from hivemind_memory.projections.store import dupindex, keys, readmodel
from hivemind_memory.projections.store.readmodel import DEFAULT_SPEC, project_batch
from tests.support.factories import created, ev

NS = "t"


def words(*ns: int) -> str:
    return " ".join(f"w{n}" for n in ns)


def test_overlaps_on_digests_equal_the_word_overlap() -> None:
    """300 random pairs of term sets (empty ones too): the vectorised overlap on packed
    digests is exactly ``word_overlap`` of the sets."""
    rng = random.Random(5)
    vocab = [f"t{i}" for i in range(400)]
    mine = frozenset(rng.sample(vocab, 60))
    theirs = [frozenset(rng.sample(vocab, rng.choice([0, 1, 5, 60, 200]))) for _ in range(300)]
    packed = [term_hashes(t).astype("<u8").tobytes() for t in theirs]
    assert overlaps(term_hashes(mine), packed) == [word_overlap(mine, t) for t in theirs]
    assert overlaps(term_hashes(frozenset()), packed) == [0.0] * 300
    assert terms_member("n1", mine).startswith(TERMS_MARK + b"n1\x00")
    assert np.array_equal(np.frombuffer(terms_member("n1", mine)[len(TERMS_MARK) + 3:], "<u8"),
                          term_hashes(mine))


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


def _probe(c: Client, text: str) -> tuple[Any, int]:
    from hivemind_memory.projections.ranking.dupsketch import probe, spec_of

    spec = spec_of(c.config())
    return probe(text, spec, c.config()), spec.min_hits


@pytest.mark.parametrize("threshold_pair", [(range(1, 5), range(1, 9))])
def test_notes_filed_without_digests_are_compared_by_their_text(
        store: Any, threshold_pair: tuple[range, range]) -> None:
    """A lookup filed before terms members were kept (removed here by hand) still finds a
    near-duplicate: a named note without digests is read and compared on its text."""
    filed, asked = threshold_pair
    c = _projected(store, {"a": words(*filed)})
    gone = [m for m in dupindex.members(store, NS) if m.startswith(TERMS_MARK)]
    assert len(gone) == 1
    store.zrem(keys.dupidx(NS), *gone)
    assert c.check_duplicates(NS, "alice", words(*asked)).near == [("a", 0.5)]
