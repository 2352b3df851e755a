"""A write's near-duplicate check: the lookup the projector keeps (``dupindex``), the log tail
it has not folded yet (``readmodel``), and the exact word overlap with the few notes they name
(``projections.ranking.similarity``). Reads only; nothing is written anywhere."""

from __future__ import annotations

from dataclasses import dataclass

from hivemind_memory.events.schema import NoteCreated, NoteRevised
from hivemind_memory.projections.ranking.config import RankingConfig
from hivemind_memory.projections.ranking.dupsketch import normalise, probe, spec_of
from hivemind_memory.projections.ranking.similarity import terms, word_overlap
from hivemind_memory.projections.state import NoteState
from hivemind_memory.projections.store import keys, readmodel
from hivemind_memory.projections.store.dupindex import lookup
from hivemind_memory.projections.store.types import Store


@dataclass(frozen=True, slots=True)
class Check:
    """A write's near-duplicate check: ``near`` (``(note_id, overlap)``, most similar first)
    and ``twin`` (an active note of the same author with the same normalised text, the
    earliest created), as of the stream's entry ``tail``; or ``unchecked`` saying why the
    check could not run (then ``near`` is None)."""

    near: list[tuple[str, float]] | None
    twin: str | None
    tail: str
    unchecked: str | None = None


def check(r: Store, ns: str, agent: str, text: str, cfg: RankingConfig,
          exclude: str | None = None) -> Check:
    """The notes ``agent`` may see (active; shared, or private of its own) that nearly say
    what ``text`` says: looked up under its keys (``lookup``), plus every note created or
    revised in the log tail the projector has not folded yet, each as the projector will see
    it once folded (``readmodel.write_view``); the exact overlap
    (``similarity.word_overlap``) then decides. ``exclude``: a note id never reported (the
    note being written). Reads only; writes nothing, anywhere."""
    spec = spec_of(cfg)
    pr = probe(text, spec, cfg)
    found = lookup(r, ns, pr, spec.min_hits)
    if found.tag is not None and found.tag != spec.tag:
        return Check(None, None, "", f"index_mismatch: namespace {ns!r}'s near-duplicate "
                     f"lookup was made as {found.tag!r}, this config makes {spec.tag!r} "
                     f"(run `hivemind replay --ns {ns}` to rebuild it)")
    cp = found.checkpoint
    tail = readmodel.decode_entries(r.xrange(keys.stream(ns), min="(" + cp if cp else "-",
                                             max="+") or [], ns)
    fresh = [d[1].note_id for d in tail
             if isinstance(d[1], NoteCreated | NoteRevised)]
    ids = [i for i in dict.fromkeys([*found.twins, *found.near, *fresh]) if i != exclude]
    view = readmodel.write_view(r, ns, ids, []) if ids else None
    states = view.notes if view is not None else {}
    mine = normalise(text)
    near: list[tuple[str, float]] = []
    twins: list[NoteState] = []
    for nid in ids:
        st = states.get(nid)
        if st is None or not st.active or (st.scope == "private" and st.agent != agent):
            continue
        if st.agent == agent and normalise(st.text) == mine:
            twins.append(st)
        o = round(word_overlap(pr.terms, terms(st.text, cfg)), 6)
        if o >= cfg.duplicate_threshold:
            near.append((nid, o))
    near.sort(key=lambda x: (-x[1], x[0]))
    twin = min(twins, key=lambda s: (s.created_at, s.note_id)).note_id if twins else None
    return Check(near, twin, tail[-1][0] if tail else cp)
