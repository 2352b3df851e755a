"""A write's near-duplicate check: the lookup the projector keeps (``dupindex``), the log tail
it has not folded yet (``readmodel``), and the exact word overlap with the few notes they name
(``projections.ranking.similarity``). Reads only; nothing is written anywhere."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from hivemind_memory.events.schema import Event, NoteCreated, NoteRevised
from hivemind_memory.projections.ranking.analyzer import analyze
from hivemind_memory.projections.ranking.bm25_rules import tokenize
from hivemind_memory.projections.ranking.config import RankingConfig
from hivemind_memory.projections.ranking.dupsketch import (
    normalise,
    overlaps,
    probe,
    spec_of,
)
from hivemind_memory.projections.ranking.similarity import word_overlap
from hivemind_memory.projections.reduce import Undecodable, touched_by
from hivemind_memory.projections.state import NoteState
from hivemind_memory.projections.store import keys, readmodel
from hivemind_memory.projections.store.dupindex import lookup
from hivemind_memory.projections.store.types import Store


@dataclass(frozen=True, slots=True)
class Check:
    """A write's near-duplicate check: ``near`` (``(note_id, overlap)``, most similar first)
    and ``twin`` (an active note of the same author with the same normalised text, the
    earliest created), as of the stream's entry ``tail``; or ``unchecked`` saying why the
    check could not run (then ``near`` is None). ``view``: the write's own view read with the
    check (the notes it named, and those of ``touched``; which of ``event_ids`` are logged),
    so the checked append that follows reads the tail no second time."""

    near: list[tuple[str, float]] | None
    twin: str | None
    tail: str
    unchecked: str | None = None
    view: readmodel.WriteView | None = None


CACHED_TEXT_MAX = 2048
"""Longest text (characters) whose terms and normalised form are cached: the caches keep
``CACHE_TEXTS`` texts each, and a note may be 64 KiB (4096 of those, twice over, would be
half a GiB of a serve process's memory)."""
CACHE_TEXTS = 4096
"""Texts each cache keeps (the most recently used)."""


def _terms(text: str, analyzer: str) -> frozenset[str]:
    """``similarity.terms`` by analyzer, cached up to ``CACHED_TEXT_MAX`` characters: the
    tail's notes and the lookup's candidates come back from one write to the next."""
    if len(text) > CACHED_TEXT_MAX:
        return _terms_of(text, analyzer)
    return _cached_terms(text, analyzer)


def _terms_of(text: str, analyzer: str) -> frozenset[str]:
    return frozenset(analyze(tokenize(text), analyzer))


_cached_terms = lru_cache(maxsize=CACHE_TEXTS)(_terms_of)
_cached_normalised = lru_cache(maxsize=CACHE_TEXTS)(normalise)


def _normalised(text: str) -> str:
    """``normalise``, cached up to ``CACHED_TEXT_MAX`` characters: a lagging projector
    leaves the same tail entries to every write that follows, each compared again."""
    return normalise(text) if len(text) > CACHED_TEXT_MAX else _cached_normalised(text)


def _named(ev: Event, mine: str, my_terms: frozenset[str], cfg: RankingConfig) -> bool:
    """Whether a tail event gives its note a text that may be a twin or a near-duplicate of
    the write's (normalised text ``mine``, terms ``my_terms``)."""
    if not isinstance(ev, NoteCreated | NoteRevised):
        return False
    if _normalised(ev.text) == mine:
        return True
    theirs = _terms(ev.text, cfg.analyzer)
    small, large = sorted((len(my_terms), len(theirs)))
    # the overlap is at most small / large: most texts are told apart by their sizes alone
    if large and small < cfg.duplicate_threshold * large - 1e-9:
        return False
    return word_overlap(my_terms, theirs) >= cfg.duplicate_threshold


def check(r: Store, ns: str, agent: str, text: str, cfg: RankingConfig,
          exclude: str | None = None, touched: Sequence[str] = (),
          event_ids: Sequence[str] = ()) -> Check:
    """The notes ``agent`` may see (active; shared, or private of its own) that nearly say
    what ``text`` says: looked up under its keys (``lookup``, which reads the log tail the
    projector has not folded yet in the same atomic read), plus every note a tail entry gives
    a text near enough, each as the projector will see it once folded
    (``readmodel.write_view``, on the tail already read); the exact overlap
    (``similarity.word_overlap``) then decides. ``exclude``: a note id never reported (the
    note being written). ``touched``, ``event_ids``: what the write's own view must also
    hold (``Check.view``). Reads only; writes nothing, anywhere."""
    spec = spec_of(cfg)
    pr = probe(text, spec, cfg)
    found = lookup(r, ns, pr, spec, note_ids=touched, event_ids=event_ids)
    if found.tag is not None and found.tag != spec.tag:
        return Check(None, None, "", f"index_mismatch: namespace {ns!r}'s near-duplicate "
                     f"lookup was made as {found.tag!r}, this config makes {spec.tag!r} "
                     f"(run `hivemind replay --ns {ns}` to rebuild it)")
    cp = found.checkpoint
    tail = readmodel.decode_entries(found.tail, ns)
    mine = normalise(text)
    fresh = [ev.note_id for _, ev, _raw in tail if isinstance(ev, NoteCreated | NoteRevised)
             and _named(ev, mine, pr.terms, cfg)]
    # the overlap of the notes the bands named, bounded on their filed term digests (never
    # below the word overlap): only those reaching the threshold are read and compared on
    # their text as the tail leaves them (a revision there is named above by its own text)
    known = overlaps(pr.hashes, found.near_terms)
    near_ids = [n for n, o in zip(found.near, known, strict=True)
                if round(o, 6) >= cfg.duplicate_threshold]
    ids = [i for i in dict.fromkeys([*found.twins, *near_ids, *fresh]) if i != exclude]
    view = readmodel.write_view(r, ns, [*ids, *touched], event_ids, read=(cp, tail),
                                priors=found.priors) \
        if ids or touched or event_ids else None
    states = view.notes if view is not None else {}
    near: list[tuple[str, float]] = []
    twins: list[NoteState] = []
    for nid in ids:
        st = states.get(nid)
        if st is None or not st.active or (st.scope == "private" and st.agent != agent):
            continue
        if st.agent == agent and normalise(st.text) == mine:
            twins.append(st)
        o = round(word_overlap(pr.terms, _terms(st.text, cfg.analyzer)), 6)
        if o >= cfg.duplicate_threshold:
            near.append((nid, o))
    near.sort(key=lambda x: (-x[1], x[0]))
    twin = min(twins, key=lambda s: (s.created_at, s.note_id)).note_id if twins else None
    at = tail[-1][0] if tail else cp
    return Check(near, twin, at, view=view or readmodel.WriteView(at, {}, set()))


def still_holds(r: Store, ns: str, checked: Check, text: str, cfg: RankingConfig,
                touched: Sequence[str], event_ids: Sequence[str], since: str, until: str
                ) -> bool:
    """Whether a check made at entry ``since`` still holds at ``until`` (the stream moved on
    meanwhile, its write lost the compare-and-set): True unless an entry in between gives a
    note a text that may be a twin or a near-duplicate of ``text``, or touches a note the
    check named or the write touches (``touched``), or carries one of ``event_ids``. Then
    (a real race) the whole check must run again; else only the append is retried, on the
    new tail. One XRANGE of the entries in between."""
    mine = normalise(text)
    my_terms = _terms(text, cfg.analyzer)
    named = {*touched, *(n for n, _ in checked.near or ()),
             *((checked.twin,) if checked.twin else ())}
    eids = set(event_ids)
    for _, ev, _raw in readmodel.decode_entries(
            r.xrange(keys.stream(ns), min="(" + since if since else "-", max=until) or [],
            ns):
        if isinstance(ev, Undecodable):
            continue
        if ev.event_id in eids or not named.isdisjoint(touched_by(ev)) or \
                _named(ev, mine, my_terms, cfg):
            return False
    return True
