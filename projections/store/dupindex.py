"""The near-duplicate lookup in Redis: kept by the projector, read by a checked write.

Two hashes per namespace, digests only (``projections.ranking.dupsketch``):

* ``keys.dupbands``: a field (the twin key's 8-byte digest, or a band's 3-byte bucket) -> an
  entry for each active note filed under it, concatenated: the fingerprint of the band that
  filed it (2 bytes; ``TWIN_FP`` under a twin key), then its ``note_key`` (8 bytes). A write
  reads its own fields with one HMGET; in Redis, the entries of each band's bucket with that
  band's fingerprint are found by a substring search and the notes they name counted.
* ``keys.dupnotes``: a note's ``note_key`` -> its ``record`` (its 16-bit term digests, then
  its id), so a write bounds the overlap of the notes the bands name without reading or
  analysing their texts, and learns their ids.

Only active notes are filed. The projector's commit script removes and adds filings in the
same atomic write as the notes and the checkpoint (``commit_batch.lua``), so the lookup is
exactly the read model's: a note that is revised is filed under its new keys, one forgotten,
superseded or erased leaves it. ``replay`` rebuilds it with the notes. ``keys.dupspec``
holds the spec tag it was made with (set by the first commit of a namespace and by replay
only: a projector of another spec never makes a mixed lookup look trusted).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from redis.exceptions import NoScriptError, RedisError

from hivemind_memory.events.errors import StoreError
from hivemind_memory.events.positions import Position, parse_pos
from hivemind_memory.projections.ranking.dupsketch import (
    DIGEST_BYTES,
    ENTRY_BYTES,
    DupSpec,
    Filing,
    Probe,
    filing,
    parse_record,
    split_member,
)
from hivemind_memory.projections.state import NoteState
from hivemind_memory.projections.store import keys
from hivemind_memory.projections.store.cluster import relearn, slot_master
from hivemind_memory.projections.store.scripts import script
from hivemind_memory.projections.store.types import Store, as_bytes

RECORD_MARK = b"\x00record"
"""Prefixes a record in ``members``' flat form (a filing is a field, 3 or 8 bytes, then an
entry: a fingerprint and a note key)."""


@dataclass(frozen=True, slots=True)
class IndexChanges:
    """What one folded batch does to the lookup: filings (a ``Filing`` key + ``note_key``)
    to remove, then to add; records to delete (by ``note_key``) and to set."""

    removed: list[bytes]
    added: list[bytes]
    dropped: list[bytes] = field(default_factory=list)
    records: list[tuple[bytes, bytes]] = field(default_factory=list)


def _filed(nid: str, state: NoteState | None, spec: DupSpec) -> Filing | None:
    return filing(nid, state.text, spec) if state is not None and state.active else None


def _members(f: Filing | None) -> list[bytes]:
    return [k + f.note for k in f.keys] if f is not None else []


def changes(before: Mapping[str, NoteState], after: Mapping[str, NoteState],
            spec: DupSpec) -> IndexChanges:
    """The filings to remove and add when the notes ``before`` (their states as the batch
    found them; absent: new) become ``after`` (the batch's folded states). A note whose text
    and activity did not change (a use, say) costs nothing."""
    ch = IndexChanges([], [], [], [])
    for nid, post in after.items():
        pre = before.get(nid)
        if pre is not None and pre.text == post.text and pre.active == post.active:
            continue
        old, new = _filed(nid, pre, spec), _filed(nid, post, spec)
        if old == new:
            continue
        was, now = _members(old), _members(new)
        keep, gone = set(now), set(was)
        ch.removed.extend(m for m in was if m not in keep)
        ch.added.extend(m for m in now if m not in gone)
        if new is not None:
            if old is None or old.record != new.record:
                ch.records.append((new.note, new.record))
        elif old is not None:
            ch.dropped.append(old.note)
    return ch


def _grouped(ms: Iterable[bytes]) -> list[bytes]:
    """Filings as ``commit_batch.lua`` takes them: per field, the field then its entries
    concatenated (one read and one write of each bucket a batch touches)."""
    by: dict[bytes, bytearray] = defaultdict(bytearray)
    for m in ms:
        field_, entry = split_member(m)
        by[field_] += entry
    return [x for k, v in by.items() for x in (k, bytes(v))]


def commit_args(ch: IndexChanges, spec: DupSpec) -> list[Any]:
    """The tail of ``commit_batch.lua``'s ARGV for ``ch`` (its header has the layout)."""
    rm, add = _grouped(ch.removed), _grouped(ch.added)
    argv: list[Any] = [len(rm) // 2, *rm, len(add) // 2, *add, len(ch.dropped), *ch.dropped,
                       len(ch.records)]
    for k, rec in ch.records:
        argv += (k, rec)
    argv.append(spec.tag)
    return argv


def _buckets(notes: Mapping[str, NoteState], spec: DupSpec
             ) -> tuple[dict[bytes, bytes], dict[bytes, bytes]]:
    """The two hashes a lookup made from ``notes`` holds (note keys in note id order)."""
    bands: dict[bytes, bytearray] = defaultdict(bytearray)
    recs: dict[bytes, bytes] = {}
    for nid, st in sorted(notes.items()):
        f = _filed(nid, st, spec)
        if f is None:
            continue
        for k in f.keys:
            field_, entry = split_member(k + f.note)
            bands[field_] += entry
        recs[f.note] = f.record
    return {k: bytes(v) for k, v in bands.items()}, recs


def rebuild_commands(ns: str, notes: Mapping[str, NoteState], spec: DupSpec,
                     per_call: int = 2000) -> Iterable[tuple[Any, ...]]:
    """The commands that replace the lookup with one made from ``notes`` (run in ``replay``'s
    MULTI, after the notes). Also drops the sorted set earlier versions kept."""
    yield ("DEL", keys.dupidx(ns), keys.dupbands(ns), keys.dupnotes(ns))
    for key, table in zip((keys.dupbands(ns), keys.dupnotes(ns)), _buckets(notes, spec),
                          strict=True):
        items = list(table.items())
        for i in range(0, len(items), per_call):
            yield ("HSET", key, *[x for kv in items[i:i + per_call] for x in kv])
    yield ("SET", keys.dupspec(ns), spec.tag)


@dataclass(frozen=True, slots=True)
class Found:
    """A lookup's answer: the spec tag the index holds (None: none recorded yet, i.e. nothing
    projected), the checkpoint it stands at, the notes filed under the probe's twin key,
    those filed under at least ``spec.min_hits`` of its counted band keys with their term digests
    (``near_terms``, packed as ``dupsketch.record`` packs them), and the log's entries after
    the checkpoint (``tail``: XRANGE's reply, for ``readmodel.decode_entries``), all read at
    one instant. ``priors``: the notes and event ids the caller asked to read with it
    (``lookup``'s ``note_ids``, ``event_ids``) and the replies of their reads (HMGET of the
    notes, SMISMEMBER of the applied event ids), at that same checkpoint; None when none
    were asked."""

    tag: str | None
    checkpoint: str
    twins: list[str]
    near: list[str]
    tail: list[Any]
    near_terms: list[bytes] = field(default_factory=list)
    priors: tuple[list[str], list[str], list[Any]] | None = None


def lookup(r: Store, ns: str, pr: Probe, spec: DupSpec, note_ids: Sequence[str] = (),
           event_ids: Sequence[str] = ()) -> Found:
    """The notes filed under ``pr``'s keys, with the checkpoint they stand at and the log's
    tail after it, in one atomic read (MULTI): the script ``lua/dup_lookup.lua`` (one HMGET
    of the probe's keys, the band hits counted in Redis, at least ``spec.min_hits``, up to
    ``spec.skips`` bands whose buckets hold more than ``spec.bucket_cap`` notes left
    uncounted, one HMGET of the records of the notes that pass) and one plain XRANGE of
    the stream from the checkpoint this client last saw (``_seen_checkpoint``), cut here at
    the checkpoint the script read (at most ``TAIL_PAGE`` entries: a client that last looked
    long ago reads again from the checkpoint instead of every entry since). The tail does
    not pass through Lua: a script's XRANGE converts every entry to a Lua table and back,
    which cost Redis milliseconds a call behind a lagging projector. ``note_ids``,
    ``event_ids``: the notes' folded states and which event ids are applied, read in the
    same MULTI (``Found.priors``): a write that knows them up front needs no second read for
    its view when the lookup names no other note (``readmodel.write_view``'s ``priors``)."""
    nids, eids = sorted(set(note_ids)), sorted(set(event_ids))

    seen = _seen_checkpoint(r)
    lo = seen.get(ns)
    if lo is None:
        got_cp = r.get(keys.checkpoint(ns))
        lo = as_bytes(got_cp).decode() if got_cp else ""
    node = slot_master(r, keys.stream(ns))  # a cluster pipeline refuses EVALSHA
    s = script(node, "dup_lookup")
    page: int | None = TAIL_PAGE
    # a script cache flushed, a checkpoint moved back (a rebuild), a tail cut at the page
    # twice (from a stale checkpoint, then from the one just read)
    for _ in range(5):
        p = node.pipeline(transaction=True)
        p.evalsha(s.sha, 4, keys.dupbands(ns), keys.dupnotes(ns), keys.dupspec(ns),
                  keys.checkpoint(ns), spec.min_hits, spec.bucket_cap, spec.skips, pr.twin,
                  *pr.bands)
        p.xrange(keys.stream(ns), min="(" + lo if lo else "-", max="+", count=page)
        if nids:
            p.hmget(keys.notes(ns), nids)
        if eids:
            p.smismember(keys.seen(ns), eids)
        try:
            (tag, cp_raw, twins, near), raw_tail, *prior_replies = p.execute()
        except NoScriptError:
            s.sha = node.script_load(s.script)
            continue
        except RedisError:
            relearn(r)  # a failover or a moved slot: the caller's next attempt finds it
            raise
        cp = as_bytes(cp_raw).decode()
        at = parse_pos(cp)
        if at < parse_pos(lo):  # the checkpoint went back: read again from it
            lo = cp
            continue
        if page is not None and len(raw_tail or []) >= page:  # cut: entries may be missing
            if parse_pos(lo) < at:
                lo = cp  # the entries up to the checkpoint were read for nothing
            else:
                page = None  # the unfolded tail itself is longer: read all of it
            continue
        seen[ns] = cp
        tail = [e for e in raw_tail or [] if parse_pos(as_bytes(e[0])) > at]
        twin_ids = [parse_record(as_bytes(x))[0] for x in twins if x]
        got = [parse_record(as_bytes(x)) for x in near if x]
        return Found(tag=as_bytes(tag).decode() or None, checkpoint=cp, twins=twin_ids,
                     near=[i for i, _ in got], tail=tail, near_terms=[t for _, t in got],
                     priors=(nids, eids, prior_replies) if nids or eids else None)
    raise StoreError(f"namespace {ns!r}: the near-duplicate lookup could not read a "
                     "consistent checkpoint and tail in 5 tries")


TAIL_PAGE = 4096
"""Most log entries a lookup's XRANGE returns: more means the checkpoint this client saw last
is long gone (the projector moved far on since, other clients writing) or the projector lags
that far; the read is made again from the checkpoint, then, if still cut, in full."""
_SEEN_ATTR = "_hivemind_seen_cp"
"""Where ``_seen_checkpoint`` keeps its map on a client (as ``scripts.script`` its scripts)."""


def _seen_checkpoint(r: Store) -> dict[str, str]:
    """The checkpoint each namespace's last lookup on client ``r`` read: a lower bound of the
    next one (the projector only moves it on), so the next XRANGE starts there and needs no
    read of its own first."""
    seen: dict[str, str] | None = getattr(r, _SEEN_ATTR, None)
    if seen is None:
        seen = {}
        setattr(r, _SEEN_ATTR, seen)
    return seen


def _flat(bands: Mapping[bytes, bytes], recs: Mapping[bytes, bytes]) -> list[bytes]:
    out = [k + v[i:i + ENTRY_BYTES] for k, v in bands.items()
           for i in range(0, len(v), ENTRY_BYTES)]
    out += [RECORD_MARK + k + rec for k, rec in recs.items()]
    return sorted(out)


def members(r: Store, ns: str) -> list[bytes]:
    """Every filing of the lookup (field, fingerprint, note key) and every record
    (``RECORD_MARK + note_key + record``), sorted (for checks and ``replay --verify``)."""
    bands = {as_bytes(k): as_bytes(v) for k, v in r.hgetall(keys.dupbands(ns)).items()}
    recs = {as_bytes(k): as_bytes(v) for k, v in r.hgetall(keys.dupnotes(ns)).items()}
    return _flat(bands, recs)


def expected_members(notes: Mapping[str, NoteState], spec: DupSpec) -> list[bytes]:
    """The ``members`` a lookup made from ``notes`` holds."""
    return _flat(*_buckets(notes, spec))


def lookup_diffs(r: Store, ns: str, cp: Position, notes: Mapping[str, NoteState],
                 spec: DupSpec) -> list[str]:
    """How the live lookup differs from one made from ``notes`` (the log folded up to the
    live checkpoint ``cp``), in words; empty when equal, or when the checkpoint moved since
    (nothing to compare then)."""
    p = r.pipeline(transaction=True)
    p.get(keys.checkpoint(ns))
    p.get(keys.dupspec(ns))
    p.hgetall(keys.dupbands(ns))
    p.hgetall(keys.dupnotes(ns))
    cp_now, tag, bands, recs = p.execute()
    if parse_pos(as_bytes(cp_now) if cp_now else None) != cp:
        return []
    out: list[str] = []
    want = expected_members(notes, spec)
    if notes and (as_bytes(tag).decode() if tag else None) != spec.tag:
        out.append(f"near-duplicate lookup: made with {tag!r}, this config makes "
                   f"{spec.tag!r} (replay rebuilds it)")
        return out
    have = set(_flat({as_bytes(k): as_bytes(v) for k, v in bands.items()},
                     {as_bytes(k): as_bytes(v) for k, v in recs.items()}))
    differ = set(want) ^ have
    if differ:
        wrong = sorted(note_ids_in([*want, *have], of={_note_of(m) for m in differ}))
        out.append(f"near-duplicate lookup: notes {wrong[:10]} filed differently from the "
                   f"log's ({len(wrong)} in all)")
    return out


def _note_of(m: bytes) -> bytes:
    if m.startswith(RECORD_MARK):
        return m[len(RECORD_MARK):len(RECORD_MARK) + DIGEST_BYTES]
    return m[-DIGEST_BYTES:]


def note_ids_in(ms: Iterable[bytes], of: set[bytes] | None = None) -> set[str]:
    """The note ids ``members`` ``ms`` file (by their records; a filing without a record
    among ``ms`` is named by its note key in hex). ``of``: only those of these note keys."""
    ms = list(ms)
    ids = {m[len(RECORD_MARK):len(RECORD_MARK) + DIGEST_BYTES]:
           parse_record(m[len(RECORD_MARK) + DIGEST_BYTES:])[0]
           for m in ms if m.startswith(RECORD_MARK)}
    notes = {_note_of(m) for m in ms}
    return {ids.get(k, k.hex()) for k in notes if of is None or k in of}
