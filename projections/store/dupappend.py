"""A checked ``remember`` of a fresh note in one round trip, when nothing can name it
(``lua/append_unless_named.lua``): the lookup, the compare-and-set on the log's tail and the
append in one atomic step.

The full check (``dupcheck.check``, then ``Client.append_checked``) reads the lookup and the
unprojected tail, decides on the client, then appends in a second round trip. Most writes are
of fresh notes: the lookup names no note that may reach the threshold, the note and event ids
are new, and the tail holds only entries the writer has already compared with its note. This
path sends the write with its probe and lets Redis decide that in the same script that
appends; when anything could name the note it writes nothing and the caller checks as before,
so its answer is the full check's, never a guess.

The writer keeps, per namespace, the tail entries it has compared (``Seen``): not their texts,
only what the comparison needs (the twin key's digest, the 64-bit term digests, the note ids
touched, the event id), so a note erased later leaves no text in a writer's memory. An entry
names the write when its twin key is the write's or its term digests overlap the write's by
the threshold (a 64-bit digest shared by two terms only raises the overlap: this never
misses what ``dupcheck`` would name), when it touches the write's note id, or when it carries
the write's event id; then the full check runs. Redis appends only if the tail after the
checkpoint is within what the writer compared (``Seen.floor`` .. ``Seen.known``); else it
returns the entries the writer has not seen, which it compares and sends again.

Plain Redis (and the embedded store) only: the script also adds the namespace to the
registry, a key of another slot on a cluster, where the full check runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import redis
from redis.exceptions import NoScriptError

from hivemind_memory.events.positions import parse_pos
from hivemind_memory.events.schema import Event, NoteCreated, NoteRevised
from hivemind_memory.projections.ranking.config import RankingConfig
from hivemind_memory.projections.ranking.dupsketch import (
    Probe,
    probe,
    spec_of,
    term_hash,
    twin_key,
)
from hivemind_memory.projections.ranking.similarity import terms
from hivemind_memory.projections.reduce import Undecodable, touched_by
from hivemind_memory.projections.store import keys, readmodel
from hivemind_memory.projections.store.log import FIELD
from hivemind_memory.projections.store.scripts import script
from hivemind_memory.projections.store.types import Store, as_bytes

TAIL_MAX = 256
"""Most tail entries the script returns at once (a writer that has more to see sends again)."""
SEEN_MAX = 1024
"""Most unprojected entries a writer keeps and compares on this path; a longer tail (a
projector far behind) is left to the full check."""
ATTEMPTS = 8
"""Sends before this path gives up to the full check (each one after the tail moved: other
writers appended meanwhile)."""
ROUNDING = 1e-6
"""The script names a note whose digest overlap is within this of the threshold: the full
check compares overlaps rounded to 6 decimals, so a note it would name is never missed."""
SEEN_NAMESPACES = 256
"""Most namespaces a store client keeps a ``Seen`` of (the least recently written dropped
first: a server writing to many namespaces keeps a bounded memory)."""
_SEEN_ATTR = "_hivemind_dupappend_seen"
"""Where ``Seen`` states are kept on a store client (as ``scripts.script`` its scripts)."""


@dataclass(frozen=True, slots=True)
class Entry:
    """What a writer keeps of a tail entry: its id, event id, the note ids it touches, and,
    for a note text, the text's twin key and the term digests (``dupsketch.term_hash``)."""

    entry_id: str
    event_id: str
    touched: tuple[str, ...]
    twin: bytes | None = None
    hashes: frozenset[int] = frozenset()


@dataclass(frozen=True, slots=True)
class Seen:
    """The tail entries a writer compared: every entry after the checkpoint ``floor`` up to
    and including ``known`` ("" for either: the log's start, none), made with ``analyzer``."""

    floor: str
    known: str
    entries: tuple[Entry, ...]
    analyzer: str


@dataclass(frozen=True, slots=True)
class Appended:
    """The entry the write became, and whether this write set the projection marker (then
    the caller enqueues the projection job)."""

    entry_id: str
    marked: bool


def entry_of(entry_id: str, ev: Event | Undecodable, cfg: RankingConfig) -> Entry:
    """What a writer keeps of the decoded tail entry ``ev``."""
    if isinstance(ev, Undecodable):
        return Entry(entry_id, "", ())
    if isinstance(ev, NoteCreated | NoteRevised):
        return Entry(entry_id, ev.event_id, touched_by(ev), twin_key(ev.text),
                     frozenset(term_hash(t) for t in terms(ev.text, cfg)))
    return Entry(entry_id, ev.event_id, touched_by(ev))


def names(e: Entry, pr: Probe, mine: frozenset[int], note_id: str, event_id: str,
          threshold: float) -> bool:
    """Whether tail entry ``e`` may change what the full check answers for a write of note
    ``note_id``, event ``event_id``, probe ``pr`` (term digests ``mine``)."""
    if e.event_id == event_id or note_id in e.touched:
        return True
    if e.twin is None:
        return False
    if e.twin == pr.twin:
        return True
    if not mine or not e.hashes:
        return False
    small, large = sorted((len(mine), len(e.hashes)))
    if small < (threshold - ROUNDING) * large - 1e-9:  # the overlap is at most small / large
        return False
    both = len(mine & e.hashes)
    return both / (len(mine) + len(e.hashes) - both) >= threshold - ROUNDING


def _states(r: Store) -> dict[str, Seen]:
    got: dict[str, Seen] | None = getattr(r, _SEEN_ATTR, None)
    if got is None:
        got = {}
        setattr(r, _SEEN_ATTR, got)
    return got


def _keep(states: dict[str, Seen], ns: str, s: Seen) -> None:
    """Keep ``s`` as ``ns``'s, most recent last; the oldest dropped past ``SEEN_NAMESPACES``."""
    states.pop(ns, None)
    states[ns] = s
    while len(states) > SEEN_NAMESPACES:
        try:
            del states[next(iter(states))]
        except (StopIteration, KeyError, RuntimeError):  # another thread emptied it meanwhile
            break


def kept_namespaces(r: Store) -> list[str]:
    """The namespaces client ``r`` keeps a ``Seen`` of, least recently written first."""
    return list(_states(r))


def forget_seen(r: Store, ns: str) -> None:
    """Drop what this client compared of ``ns``'s tail (the next write reads it again)."""
    _states(r).pop(ns, None)


def supported(r: Store) -> bool:
    """Whether this store takes the one-step path (one Redis, not a cluster)."""
    return isinstance(r, redis.Redis)


def append_unless_named(r: Store, ns: str, ev: NoteCreated, blob: bytes,
                        cfg: RankingConfig) -> Appended | None:
    """Append ``ev`` (encoded: ``blob``) in one step if nothing can name it (the module's
    docstring); None when it wrote nothing and the full check must run. Raises the store's
    errors (a connection lost mid-call: the write's outcome is unknown, its event id tells)."""
    spec = spec_of(cfg)
    pr = probe(ev.text, spec, cfg)
    mine = frozenset(term_hash(t) for t in pr.terms)
    states = _states(r)
    s = states.get(ns)
    if s is None or s.analyzer != cfg.analyzer:
        s = Seen("", "", (), cfg.analyzer)
    checked = 0  # entries of s already compared with this write
    sc = script(r, "append_unless_named")
    base = [keys.dupbands(ns), keys.dupnotes(ns), keys.dupspec(ns), keys.checkpoint(ns),
            keys.stream(ns), keys.notes(ns), keys.seen(ns), keys.scheduled(ns),
            keys.NAMESPACES]
    digests = pr.hashes.astype("<u2").tobytes()
    bar = repr(cfg.duplicate_threshold - ROUNDING)
    for _ in range(ATTEMPTS):
        if any(names(e, pr, mine, ev.note_id, ev.event_id, cfg.duplicate_threshold)
               for e in s.entries[checked:]):
            _keep(states, ns, s)
            return None
        checked = len(s.entries)
        args: list[Any] = [spec.min_hits, spec.bucket_cap, spec.skips, spec.tag, bar, digests,
                           s.known, s.floor, ev.note_id, ev.event_id, FIELD, TAIL_MAX,
                           keys.SCHEDULE_TTL_SECONDS, ns, blob, pr.twin, *pr.bands]
        try:
            status_raw, cp_raw, payload = r.evalsha(sc.sha, len(base), *base, *args)
        except NoScriptError:
            sc.sha = r.script_load(sc.script)
            continue
        status, cp = as_bytes(status_raw), as_bytes(cp_raw).decode()
        at = parse_pos(cp)
        kept = tuple(e for e in s.entries if parse_pos(e.entry_id) > at)
        if status == b"appended":
            eid = as_bytes(payload[0]).decode()
            own = Entry(eid, ev.event_id, (ev.note_id,), pr.twin, mine)
            _keep(states, ns, Seen(cp, eid, (*kept, own), cfg.analyzer))
            return Appended(eid, bool(int(payload[1])))
        if status != b"tail":
            _keep(states, ns, s)
            return None
        decoded = readmodel.decode_entries(payload[:TAIL_MAX], ns)
        extends = bool(s.known) and parse_pos(s.floor) <= at <= parse_pos(s.known)
        if not decoded or (extends and len(kept) + len(decoded) > SEEN_MAX):
            forget_seen(r, ns)
            return None
        more = tuple(entry_of(i, e, cfg) for i, e, _raw in decoded)
        checked = len(kept) if extends else 0
        s = Seen(cp, decoded[-1][0], (*kept, *more) if extends else more, cfg.analyzer)
    _keep(states, ns, s)
    return None

