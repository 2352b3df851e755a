"""The near-duplicate lookup (``projections.store.dupindex``): kept by the projector in the
same commit as the notes, rebuilt by replay, read by a checked write with the unprojected
tail; the exact overlap decides, at the threshold inclusive."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import fakeredis
import pytest

from hivemind_memory.api_stub.client import Client
from hivemind_memory.api_stub.protocol.settings import Settings
from hivemind_memory.events.schema import NoteCreated
from hivemind_memory.projections.ranking.dupsketch import probe, spec_of
from hivemind_memory.projections.store import dupindex, keys, readmodel
from hivemind_memory.projections.store.readmodel import (
    DEFAULT_SPEC,
    checkpoint,
    project_batch,
    read_notes,
)
from hivemind_memory.projections.store.rebuild import fold_log, write_back
from tests.support.factories import T0, created, erased, ev, forgotten, revised

NS = "t"


def _client(store: Any = None, config: str | None = None) -> Client:
    r = store if store is not None else fakeredis.FakeRedis(server=fakeredis.FakeServer())
    return Client(r, settings=Settings(redis_url="redis://unused", config_path=config))


def _project(c: Client, spec: Any = DEFAULT_SPEC) -> None:
    while project_batch(c.store, NS, spec=spec) is not None:
        pass


def _note(nid: str, text: str, agent: str = "alice", hours: int = 0, **kw: Any) -> NoteCreated:
    got = ev(created(nid, agent=agent, text=text, at=T0 + timedelta(hours=hours), **kw))
    assert isinstance(got, NoteCreated)
    return got


def _filed(c: Client) -> set[str]:
    return dupindex.note_ids_in(dupindex.members(c.store, NS))


def words(*ns: int) -> str:
    """A text whose analyzed terms are exactly ``w<n>`` for the given numbers (no stop words,
    nothing the stemmer changes)."""
    return " ".join(f"w{n}" for n in ns)


@pytest.mark.parametrize("projected", [False, True], ids=["tail", "index"])
def test_the_same_sentence_three_times_is_one_note_and_two_answers_naming_it(
        store: Any, projected: bool) -> None:
    """Twins: the same normalised text by the same author, active. Found in the unprojected
    tail and through the projector's lookup alike; nothing is appended for them."""
    c = _client(store)
    first = c.remember(_note("n1", "Deploys go through ArgoCD on Tuesdays."))
    assert first.write.appended == 1 and first.duplicate_of is None
    if projected:
        _project(c)
        assert "n1" in _filed(c)
    before = store.xlen(keys.stream(NS))
    second = c.remember(_note("n2", "  deploys GO through argocd\ton Tuesdays. ", hours=1))
    third = c.remember(_note("n3", "Deploys go through ArgoCD on Tuesdays.", hours=2))
    assert second.duplicate_of == third.duplicate_of == "n1"
    assert second.write.appended == third.write.appended == 0
    assert store.xlen(keys.stream(NS)) == before
    assert second.duplicates == [("n1", 1.0)]
    kept = c.remember(_note("n4", "Deploys go through ArgoCD on Tuesdays.", hours=3),
                      duplicates="keep")
    assert kept.write.appended == 1 and kept.duplicate_of is None
    assert kept.duplicates == [("n1", 1.0)]
    ignored = c.remember(_note("n5", "Deploys go through ArgoCD on Tuesdays.", hours=4),
                         duplicates="ignore")
    assert ignored.write.appended == 1 and ignored.duplicates is None
    assert ignored.unchecked is None  # not looked for on purpose: no reason to give


def test_twins_are_the_same_authors_and_active_others_are_reported(store: Any) -> None:
    """Another agent's same words are a near-duplicate (overlap 1), not a twin; a forgotten
    or superseded twin is no twin; punctuation is not whitespace (a different text)."""
    c = _client(store)
    c.remember(_note("a1", "The cache is warmed at boot."))
    bob = c.remember(_note("b1", "The cache is warmed at boot.", agent="bob", hours=1))
    assert bob.duplicate_of is None and bob.write.appended == 1
    assert bob.duplicates == [("a1", 1.0)]
    punct = c.remember(_note("a2", "The cache is warmed at boot!", hours=2))
    assert punct.duplicate_of is None and ("a1", 1.0) in (punct.duplicates or [])
    c.append_checked([forgotten("a1", "f-a1", agent="alice", at=T0 + timedelta(hours=3))])
    c.append_checked([forgotten("a2", "f-a2", agent="alice", at=T0 + timedelta(hours=3))])
    _project(c)
    again = c.remember(_note("a3", "The cache is warmed at boot.", hours=4))
    assert again.duplicate_of is None and again.write.appended == 1
    assert [n for n, _ in again.duplicates or []] == ["b1"]


def test_private_notes_of_others_are_never_reported_own_ones_are(store: Any) -> None:
    c = _client(store)
    c.remember(_note("secret", words(1, 2, 3, 4), agent="bob", scope="private"))
    c.remember(_note("mine", words(1, 2, 3, 5), agent="alice", scope="private", hours=1))
    _project(c)
    got = c.check_duplicates(NS, "alice", words(1, 2, 3, 4, 5))
    assert got.near == [("mine", 0.8)]
    assert c.check_duplicates(NS, "bob", words(1, 2, 3, 4, 5)).near == [("secret", 0.8)]
    # bob's private twin is bob's only: alice writing the same text is not merged into it
    assert c.remember(_note("a4", words(1, 2, 3, 4), hours=2)).duplicate_of is None


@pytest.mark.parametrize("threshold", [0.5, 0.75])
@pytest.mark.parametrize("projected", [False, True], ids=["tail", "index"])
def test_a_pair_exactly_at_the_threshold_is_reported_one_just_under_is_not(
        tmp_path: Any, threshold: float, projected: bool) -> None:
    """Overlap = |A & B| / |A | B| of analyzed terms: A inside B, so ``|A| / |B|``. At 0.5:
    4/8 is reported, 20/41 (0.488) not; at 0.75: 6/8 is, 11/15 (0.733) not."""
    cfg = tmp_path / "c.toml"
    cfg.write_text(f"duplicate_threshold = {threshold}\n")
    c = _client(config=str(cfg))
    spec = spec_of(c.config())
    at, under = ((range(1, 5), range(1, 9)), (range(1, 21), range(1, 42))) if threshold == 0.5 \
        else ((range(1, 7), range(1, 9)), (range(1, 12), range(1, 16)))
    c.remember(_note("at", words(*at[0]), agent="x"), duplicates="ignore")
    c.remember(_note("under", words(*(100 + i for i in under[0])), agent="x"),
               duplicates="ignore")
    if projected:
        _project(c, spec)
        assert _filed(c) == {"at", "under"}
    got_at = c.check_duplicates(NS, "alice", words(*at[1]))
    got_under = c.check_duplicates(NS, "alice", words(*(100 + i for i in under[1])))
    assert got_at.near == [("at", threshold)]
    assert got_under.near == []


def test_the_lookup_follows_revise_forget_supersede_and_erase(store: Any) -> None:
    """Each note is filed under its current text while active, and under nothing once
    forgotten, superseded or erased: the commit that folds the event updates the lookup."""
    c = _client(store)
    for i, nid in enumerate(["r", "f", "s", "e"]):
        c.remember(_note(nid, f"{nid} original text about the staging cluster {i}",
                         hours=i), duplicates="ignore")
    _project(c)
    assert _filed(c) == {"r", "f", "s", "e"}
    c.append_checked([revised("r", "rev-r", agent="alice", text="completely new words here")])
    c.append_checked([forgotten("f", "fo-f", agent="alice")])
    c.remember(_note("s2", "a replacement", hours=9, supersedes=["s"]), duplicates="ignore")
    c.append_checked([erased("e", "er-e")])
    _project(c)
    assert _filed(c) == {"r", "s2"}
    assert c.check_duplicates(NS, "alice", "r original text about the staging cluster 0"
                              ).near == []
    assert c.check_duplicates(NS, "alice", "completely new words here").twin == "r"
    live = dupindex.members(c.store, NS)
    # replay rebuilds exactly the live lookup; and a verify notices a tampered one
    assert dupindex.lookup_diffs(c.store, NS, checkpoint(c.store, NS), read_notes(c.store, NS),
                                 DEFAULT_SPEC) == []
    c.store.delete(keys.dupbands(NS))
    assert dupindex.lookup_diffs(c.store, NS, checkpoint(c.store, NS), read_notes(c.store, NS),
                                 DEFAULT_SPEC) != []
    assert write_back(c.store, NS, fold_log(c.store, NS))
    assert sorted(dupindex.members(c.store, NS)) == sorted(live)


def test_a_lookup_made_with_another_spec_is_not_trusted_and_the_answer_says_so(
        store: Any) -> None:
    c = _client(store)
    c.remember(_note("n1", "The deploy window is Tuesday."), duplicates="ignore")
    _project(c)
    store.set(keys.dupspec(NS), "minhash1 plain 8x2")
    got = c.remember(_note("n2", "The deploy window is Tuesday.", hours=1))
    assert got.write.appended == 1 and got.duplicates is None and got.duplicate_of is None
    assert got.unchecked is not None and got.unchecked.startswith("index_mismatch")
    assert "hivemind replay --ns t" in got.unchecked


def test_a_store_that_cannot_answer_gives_an_unchecked_reason() -> None:
    import redis

    from tests.support import free_port

    down = redis.Redis(port=free_port(), socket_connect_timeout=1)  # nothing listens there
    c = Client(down, settings=Settings(redis_url="redis://unused"))
    got = c.check_duplicates(NS, "alice", "anything at all")
    assert got.near is None and got.unchecked is not None
    assert got.unchecked.startswith("store_unavailable")


def test_a_write_check_is_not_a_query(store: Any) -> None:
    """No audit entry, no result key, no query embedding, no job: a lookup only."""
    c = _client(store)
    c.remember(_note("n1", "Rollbacks are automatic on failed health checks."))
    _project(c)
    for i in range(3):
        c.remember(_note(f"m{i}", "Rollbacks are automatic on failed health checks!",
                         hours=i + 1))
    assert store.xlen(keys.audit(NS)) == 0
    assert store.xlen(keys.query_embeddings(NS)) == 0
    assert not list(store.scan_iter(match=keys.result(NS, "*")))
    # the only jobs are the projection's (one per namespace: scheduled by the appends)
    origins = {store.hget(k, "origin") for k in store.scan_iter(match="rq:job:*")}
    assert origins <= {b"hivemind-project"}
    assert store.llen("rq:queue:hivemind-query") == 0


def test_notes_sharing_a_bucket_leave_it_one_by_one(store: Any) -> None:
    """Three notes of the same text (three authors) share every bucket: forgetting one, then
    revising another, leaves the rest found under their keys, and the live lookup equal to
    the one replay makes, each step."""
    c = _client(store)
    text = "The on-call rotation changes every Monday at nine."
    for i, who in enumerate(["alice", "bob", "carol"]):
        c.remember(_note(f"n-{who}", text, agent=who, hours=i), duplicates="keep")
    _project(c)
    assert _filed(c) == {"n-alice", "n-bob", "n-carol"}
    steps = [forgotten("n-alice", "fo-a", agent="alice"),
             revised("n-bob", "rv-b", agent="bob", text="Lunch is at noon on Fridays.")]
    for step in steps:
        c.append_checked([step])
        _project(c)
        assert dupindex.lookup_diffs(c.store, NS, checkpoint(c.store, NS),
                                     read_notes(c.store, NS), DEFAULT_SPEC) == []
    assert _filed(c) == {"n-bob", "n-carol"}
    assert c.check_duplicates(NS, "carol", text).twin == "n-carol"
    assert c.check_duplicates(NS, "bob", text).twin is None
    assert [n for n, _ in c.check_duplicates(NS, "bob", text).near or []] == ["n-carol"]
    assert c.check_duplicates(NS, "bob", "lunch is at  noon on Fridays.").twin == "n-bob"


def test_a_projector_of_another_spec_does_not_make_the_lookup_look_trusted(
        store: Any) -> None:
    """The spec tag is set by a namespace's first commit and by replay only: a projector
    filing with another spec leaves the tag as it was, so the check says the lookup does
    not match rather than trust a mixed one; replay makes it whole again."""
    c = _client(store)
    c.remember(_note("n1", "Backups run nightly at two."), duplicates="ignore")
    _project(c)
    assert store.get(keys.dupspec(NS)).decode() == DEFAULT_SPEC.tag
    other = spec_of(c.config())
    other = type(other)(other.analyzer, 8, 2, 1)
    c.remember(_note("n2", "Deploys are frozen in December.", hours=1), duplicates="ignore")
    _project(c, other)
    assert store.get(keys.dupspec(NS)).decode() == DEFAULT_SPEC.tag
    got = c.check_duplicates(NS, "alice", "Deploys are frozen in December.")
    assert got.twin == "n2"  # filed by the other projector: found, but no more than that
    store.set(keys.dupspec(NS), other.tag)
    assert c.check_duplicates(NS, "alice", "Backups run nightly at two.").unchecked
    assert write_back(c.store, NS, fold_log(c.store, NS))
    assert c.check_duplicates(NS, "alice", "Backups run nightly at two.").twin == "n1"


def test_the_lookups_keys_change_no_config_fingerprint(tmp_path: Any) -> None:
    """The lookup's banding is read at write time only: no fingerprint (recorded with each
    served query) depends on it, while the threshold still counts as before."""
    from hivemind_memory.projections.ranking.config import DEFAULT, with_overrides

    same = with_overrides(DEFAULT, {"duplicate_lsh_bands": 12, "duplicate_lsh_min_hits": 1,
                                    "duplicate_lsh_recall": 0.5})
    assert same.digest() == DEFAULT.digest()
    assert with_overrides(DEFAULT, {"duplicate_threshold": 0.6}).digest() != DEFAULT.digest()


def test_the_tail_is_read_from_the_checkpoint_whatever_the_client_saw_before(
        store: Any) -> None:
    """The lookup reads the tail from the checkpoint the client last saw, cut at the one it
    reads now: a stale one (the projector moved on) gives no folded entry twice, one ahead
    of the store's (a rebuild moved it back) misses no unfolded entry."""
    c = _client(store)
    c.remember(_note("n1", words(1, 2, 3, 4)))
    assert c.check_duplicates(NS, "alice", words(1, 2, 3, 4)).twin == "n1"  # in the tail
    _project(c)
    c.remember(_note("n2", words(5, 6, 7, 8), hours=1))
    seen = dupindex._seen_checkpoint(store)
    seen[NS] = ""  # stale: from the stream's start
    got = c.check_duplicates(NS, "alice", words(1, 2, 3, 4))
    assert got.twin == "n1" and got.near == [("n1", 1.0)]  # through the lookup, once
    assert got.view is not None and set(got.view.notes) == {"n1"}
    cp = store.get(keys.checkpoint(NS)).decode()
    assert seen[NS] == cp
    tail = [e for e, _ in store.xrange(keys.stream(NS), min="(" + cp, max="+")]
    assert len(tail) == 1
    spec = spec_of(c.config())
    seen[NS] = ""
    found = dupindex.lookup(store, NS, probe(words(9), spec, c.config()), spec)
    assert [e[0] for e in found.tail] == tail and found.checkpoint == cp
    seen[NS] = "99999999999999-0"  # ahead of the store's checkpoint
    got = c.check_duplicates(NS, "alice", words(5, 6, 7, 8))
    assert got.twin == "n2" and got.near == [("n2", 1.0)]  # in the tail, not missed
    assert got.tail == tail[0].decode() and seen[NS] == cp


def test_the_lookup_loads_its_script_again_after_a_script_flush(store: Any) -> None:
    """The lookup runs its script by hash inside a MULTI: a store whose script cache was
    flushed (a restart, ``SCRIPT FLUSH``) gets it loaded again, the answer unchanged."""
    c = _client(store)
    c.remember(_note("n1", words(1, 2, 3, 4)))
    assert c.check_duplicates(NS, "alice", words(1, 2, 3, 4)).twin == "n1"
    store.script_flush()
    again = c.check_duplicates(NS, "alice", words(1, 2, 3, 4))
    assert again.twin == "n1" and again.unchecked is None


def _counting_pipelines(r: Any) -> list[bool]:
    """Record each ``pipeline`` opened on ``r`` (its ``transaction`` flag) from now on."""
    opened: list[bool] = []
    orig = r.pipeline

    def pipeline(*a: Any, **kw: Any) -> Any:
        opened.append(bool(kw.get("transaction", a[0] if a else True)))
        return orig(*a, **kw)
    r.pipeline = pipeline
    return opened


@pytest.mark.parametrize(("touched", "eids", "covered"), [
    (["x"], ["c-x"], True),              # a new note: nothing of it anywhere yet
    (["n3"], ["r-n3"], True),            # a folded note the tail leaves alone
    (["n1"], ["c-n1"], True),            # a retry of a folded event
    (["n2"], ["r-n2"], False),           # the tail revises it: its entries' ids join
    (["n5"], ["c-n5"], False),           # a retry of a tail entry superseding n2
], ids=["new", "folded", "retry-folded", "revised-in-tail", "retry-in-tail"])
def test_the_view_read_with_the_lookup_is_the_view_read_after_it(
        store: Any, touched: list[str], eids: list[str], covered: bool) -> None:
    """A write's notes and event ids read in the lookup's MULTI (``Found.priors``) give the
    same view as a second read at the same checkpoint; when they cover all the view needs it
    opens no second MULTI, else it reads what it needs as before."""
    c = _client(store)
    for i in range(1, 5):
        c.append_checked([_note(f"n{i}", words(10 * i, 10 * i + 1, 10 * i + 2), hours=i)])
    _project(c)
    c.append_checked([ev(revised("n2", "r-n2", agent="alice", text=words(7, 8, 9)))])
    c.append_checked([_note("n5", words(50, 51, 52), hours=6, supersedes=["n2"])])
    cfg = c.config()
    spec = spec_of(cfg)
    found = dupindex.lookup(store, NS, probe(words(90, 91), spec, cfg), spec,
                            note_ids=touched, event_ids=eids)
    assert found.priors is not None and len(found.tail) == 2
    read = (found.checkpoint, readmodel.decode_entries(found.tail, NS))
    opened = _counting_pipelines(store)
    got = readmodel.write_view(store, NS, touched, eids, read=read, priors=found.priors)
    assert len(opened) == (0 if covered else 1)
    want = readmodel.write_view(store, NS, touched, eids, read=read)
    assert got == want
    assert set(touched) <= set(got.notes) or touched == ["x"]
    assert got.logged == set(eids) & {"c-n1", "c-n2", "c-n3", "c-n4", "r-n2", "c-n5"}


def test_the_full_check_of_a_fresh_note_reads_in_one_round_trip(store: Any) -> None:
    """The full check (``remember``'s when its one-step path wrote nothing) of a note
    nothing resembles: the lookup, the tail and the write's own view in one MULTI."""
    c = _client(store)
    c.remember(_note("n1", words(1, 2, 3)))
    _project(c)
    c.remember(_note("n2", words(4, 5, 6), hours=1))  # an unfolded tail entry
    c.check_duplicates(NS, "alice", words(1, 2, 3))  # the lookup's script loaded once
    opened = _counting_pipelines(store)
    got = c.check_duplicates(NS, "alice", words(7, 8, 9), exclude="n3", touched=("n3",),
                             event_ids=["c-n3"])
    assert got.near == [] and got.view is not None and got.view.logged == set()
    assert opened == [True]
    near = c.check_duplicates(NS, "alice", words(4, 5, 6), exclude="n3", touched=("n3",),
                              event_ids=["c-n3"])
    assert near.twin == "n2" and len(opened) == 3  # a note named: its view read after


def test_a_client_that_looked_long_ago_does_not_read_every_entry_since(
        store: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The tail's XRANGE returns at most ``TAIL_PAGE`` entries: a client whose last lookup
    of the namespace is many folded entries old (others wrote meanwhile) reads again from
    the checkpoint; a projector lagging more than a page behind still gives the whole
    unfolded tail (read in full)."""
    monkeypatch.setattr(dupindex, "TAIL_PAGE", 4)
    c = _client(store)
    c.remember(_note("n1", words(1, 2, 3, 4)))
    _project(c)
    spec = spec_of(c.config())
    pr = probe(words(1, 2, 3, 4), spec, c.config())
    assert dupindex.lookup(store, NS, pr, spec).twins == ["n1"]  # this client saw n1's cp
    for i in range(20):  # another writer's notes, folded
        c.append_checked([_note(f"o{i}", words(100 + i), hours=i + 1)])
    _project(c)
    read: list[int] = []
    orig = store.pipeline

    def pipeline(*a: Any, **kw: Any) -> Any:  # the entries each lookup's XRANGE returned
        p = orig(*a, **kw)
        run, xrange, tails = p.execute, p.xrange, []

        def tail(*xa: Any, **xkw: Any) -> Any:
            tails.append(len(p.command_stack))
            return xrange(*xa, **xkw)

        def execute() -> Any:
            out = run()
            read.extend(len(out[i] or []) for i in tails)
            return out
        p.xrange, p.execute = tail, execute
        return p

    monkeypatch.setattr(store, "pipeline", pipeline)
    found = dupindex.lookup(store, NS, pr, spec)
    assert found.twins == ["n1"] and found.tail == []
    assert read == [4, 0]  # one page of the 20 folded entries, then from the checkpoint
    for i in range(6):  # unfolded: a tail longer than a page
        c.append_checked([_note(f"t{i}", words(200 + i), hours=30 + i)])
    read.clear()
    found = dupindex.lookup(store, NS, pr, spec)
    assert len(found.tail) == 6 and read == [4, 6]
