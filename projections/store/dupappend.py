"""A checked ``remember`` of a fresh note in two round trips, when nothing can name it: one
read of the near-duplicate lookup's buckets, then one script (``lua/append_unless_named.lua``)
that re-checks what the read could not see and appends, in one atomic step.

The full check (``dupcheck.check``, then ``Client.append_checked``) reads the lookup and the
unprojected tail, decides on the client, then appends in a second round trip. Most writes are
of fresh notes: the lookup names no note that may reach the threshold, the note and event ids
are new, and the tail holds only entries the writer has already compared with its note. This
path reads, in one MULTI, the lookup's spec tag, its checkpoint, the buckets of the write's
twin key and band keys, and the log entries after the newest one the writer compared; it
counts the band hits itself (``dupsketch.band_hits``, the lookup script's rule), so Redis
spends a plain HMGET on the buckets, whose bytes grow with the namespace, instead of a Lua
count over them. Then the script bounds the few notes the bands name on their filed term
digests, checks the ids unused and that every log entry after the checkpoint the buckets were
read at is one the writer compared (the lookup at any later checkpoint is the one read with
those entries folded), and appends; when anything could name the note it writes nothing and
the caller checks as before, so its answer is the full check's, never a guess.

The writer keeps, per namespace, the tail entries it has compared (``Seen``): not their texts,
only what the comparison needs (the twin key's digest, the 64-bit term digests, the note ids
touched, the event id), so a note erased later leaves no text in a writer's memory. An entry
names the write when its twin key is the write's or its term digests overlap the write's by
the threshold (a 64-bit digest shared by two terms only raises the overlap: this never
misses what ``dupcheck`` would name), when it touches the write's note id, or when it carries
the write's event id; then the full check runs. Redis appends only if the log after the
buckets' checkpoint is within what the writer compared (``Seen.floor`` .. ``Seen.known``);
else it returns the entries the writer has not seen, which it compares and sends again.

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
    band_hits,
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
SEEN_WEIGHT = 262_144
"""Most entries plus term digests a store client keeps over all its namespaces' ``Seen``
(about 60 bytes each as Python sets: ~16 MiB), the least recently written namespaces dropped
first; a single namespace's view heavier than this is not kept (its writers read the tail
again, or take the full check). ``SEEN_NAMESPACES`` x ``SEEN_MAX`` entries of long notes
would otherwise come to gigabytes in one server process."""
_SEEN_ATTR = "_hivemind_dupappend_seen"
"""Where ``Seen`` states are kept on a store client (as ``scripts.script`` its scripts)."""
_WEIGHT_ATTR = "_hivemind_dupappend_weight"
"""Where each kept ``Seen``'s weight (``weight``) is kept on a store client."""


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


def _on_client(r: Store, attr: str) -> dict[str, Any]:
    """The dict kept on store client ``r`` under ``attr``, made empty on first need (one
    ``setdefault``: two threads of a server asking at once get the same dict)."""
    got: dict[str, Any] = vars(r).setdefault(attr, {})
    return got


def _states(r: Store) -> dict[str, Seen]:
    return _on_client(r, _SEEN_ATTR)


def weight(s: Seen) -> int:
    """What keeping ``s`` counts against ``SEEN_WEIGHT``: its entries and their digests."""
    return len(s.entries) + sum(len(e.hashes) for e in s.entries)


def _weights(r: Store) -> dict[str, int]:
    return _on_client(r, _WEIGHT_ATTR)


def _keep(r: Store, states: dict[str, Seen], ns: str, s: Seen) -> None:
    """Keep ``s`` as ``ns``'s, most recent last; the oldest dropped past ``SEEN_NAMESPACES``
    or ``SEEN_WEIGHT`` (and ``s`` itself not kept when it alone weighs more)."""
    weights = _weights(r)
    states.pop(ns, None)
    weights.pop(ns, None)
    w = weight(s)
    if w > SEEN_WEIGHT:
        return
    states[ns] = s
    weights[ns] = w
    while len(states) > SEEN_NAMESPACES or (len(states) > 1 and
                                            sum(weights.values()) > SEEN_WEIGHT):
        try:
            oldest = next(iter(states))
            del states[oldest]
            weights.pop(oldest, None)
        except (StopIteration, KeyError, RuntimeError):  # another thread emptied it meanwhile
            break


def kept_namespaces(r: Store) -> list[str]:
    """The namespaces client ``r`` keeps a ``Seen`` of, least recently written first."""
    return list(_states(r))


def forget_seen(r: Store, ns: str) -> None:
    """Drop what this client compared of ``ns``'s tail (the next write reads it again)."""
    _states(r).pop(ns, None)
    _weights(r).pop(ns, None)


def supported(r: Store) -> bool:
    """Whether this store takes the one-step path (one Redis, not a cluster)."""
    return isinstance(r, redis.Redis)


@dataclass(frozen=True, slots=True)
class _Read:
    """The lookup as one MULTI read it: its spec tag (None: none recorded), its checkpoint
    ("" none), the buckets of the probe's twin key then of its band keys (None: empty), and
    the log's entries after the newest one the writer had compared (XRANGE's reply; None
    when the writer had compared none)."""

    tag: str | None
    checkpoint: str
    buckets: list[bytes | None]
    tail: list[Any] | None


def _read(r: Store, ns: str, pr: Probe, known: str) -> _Read:
    """One MULTI: the lookup's spec tag, checkpoint and the probe's buckets (as the lookup
    stands at that checkpoint: the projector moves both in one atomic write), and the log's
    entries after ``known`` (up to ``TAIL_MAX`` + 1), so that the script usually finds every
    entry compared at its first send, other writers' included."""
    p = r.pipeline(transaction=True)
    p.get(keys.dupspec(ns))
    p.get(keys.checkpoint(ns))
    p.hmget(keys.dupbands(ns), [pr.twin, *(b[:3] for b in pr.bands)])
    if known:
        p.xrange(keys.stream(ns), min="(" + known, max="+", count=TAIL_MAX + 1)
    tag, cp, vals, *tail = p.execute()
    return _Read(as_bytes(tag).decode() if tag else None, as_bytes(cp).decode() if cp else "",
                 [as_bytes(v) if v else None for v in vals], tail[0] if tail else None)


def _extended(s: Seen, ns: str, cp: str, raw: list[Any], after_known: bool,
              cfg: RankingConfig) -> tuple[Seen, int] | None:
    """``s`` and the log entries ``raw`` of ``ns`` (XRANGE's reply, at most ``TAIL_MAX`` of it
    taken) read after ``s.known`` (``after_known``: ``s``'s entries are kept) or after the
    checkpoint ``cp`` (they are not), as what the writer compared after ``cp``; with how many
    of its entries were compared already (the new ones follow). None when that would be more
    than ``SEEN_MAX`` entries, or nothing at all came back (the full check then)."""
    at = parse_pos(cp)
    got = readmodel.decode_entries(raw[:TAIL_MAX], ns)
    kept = tuple(e for e in s.entries if parse_pos(e.entry_id) > at) if after_known else ()
    more = tuple(entry_of(i, e, cfg) for i, e, _raw in got if parse_pos(i) > at)
    if len(kept) + len(more) > SEEN_MAX:
        return None
    known = got[-1][0] if got else s.known
    return Seen(cp, known, (*kept, *more), s.analyzer), len(kept)


def append_unless_named(r: Store, ns: str, ev: NoteCreated, blob: bytes,
                        cfg: RankingConfig) -> Appended | None:
    """Append ``ev`` (encoded: ``blob``) if nothing can name it (the module's docstring); None
    when it wrote nothing and the full check must run. Raises the store's errors (a
    connection lost mid-call: the write's outcome is unknown, its event id tells)."""
    spec = spec_of(cfg)
    pr = probe(ev.text, spec, cfg)
    mine = frozenset(term_hash(t) for t in pr.terms)
    states = _states(r)
    s = states.get(ns)
    if s is None or s.analyzer != cfg.analyzer:
        s = Seen("", "", (), cfg.analyzer)

    def named(entries: tuple[Entry, ...]) -> bool:
        return any(names(e, pr, mine, ev.note_id, ev.event_id, cfg.duplicate_threshold)
                   for e in entries)
    if named(s.entries):  # the writer's own recent notes: no round trip
        _keep(r, states, ns, s)
        return None
    got = _read(r, ns, pr, s.known)
    if (got.tag is not None and got.tag != spec.tag) or got.buckets[0] is not None:
        _keep(r, states, ns, s)
        return None  # another spec's lookup, or a note filed under the twin key
    cp, at = got.checkpoint, parse_pos(got.checkpoint)
    checked = len(s.entries)  # entries of s already compared with this write
    if got.tail is not None and parse_pos(s.floor) <= at:
        ext = _extended(s, ns, cp, got.tail, True, cfg)
        if ext is None:
            forget_seen(r, ns)
            return None
        s, checked = ext
    near = band_hits(pr.bands, got.buckets[1:], spec.min_hits, spec.bucket_cap, spec.skips)
    sc = script(r, "append_unless_named")
    base = [keys.dupnotes(ns), keys.dupspec(ns), keys.stream(ns), keys.notes(ns),
            keys.seen(ns), keys.scheduled(ns), keys.NAMESPACES]
    digests = pr.hashes.astype("<u2").tobytes()
    bar = repr(cfg.duplicate_threshold - ROUNDING)
    for _ in range(ATTEMPTS):
        if named(s.entries[checked:]):
            _keep(r, states, ns, s)
            return None
        checked = len(s.entries)
        args: list[Any] = [spec.tag, bar, digests, s.known, s.floor, cp, ev.note_id,
                           ev.event_id, FIELD, TAIL_MAX, keys.SCHEDULE_TTL_SECONDS, ns, blob,
                           *near]
        try:
            status_raw, payload = r.evalsha(sc.sha, len(base), *base, *args)
        except NoScriptError:
            sc.sha = r.script_load(sc.script)
            continue
        status = as_bytes(status_raw)
        if status == b"appended":
            eid = as_bytes(payload[0]).decode()
            kept = tuple(e for e in s.entries if parse_pos(e.entry_id) > at)
            own = Entry(eid, ev.event_id, (ev.note_id,), pr.twin, mine)
            _keep(r, states, ns, Seen(cp, eid, (*kept, own), cfg.analyzer))
            return Appended(eid, bool(int(payload[1])))
        if status != b"tail" or not payload:
            _keep(r, states, ns, s)
            return None
        # the script read the tail after s.known when it held every entry after cp, else
        # after cp
        extends = bool(s.known) and parse_pos(s.floor) <= at <= parse_pos(s.known)
        ext = _extended(s, ns, cp, payload, extends, cfg)
        if ext is None:
            forget_seen(r, ns)
            return None
        s, checked = ext
    _keep(r, states, ns, s)
    return None
