"""The Redis read model: fold one batch after the checkpoint and commit it atomically.

Exactly-once effects from at-least-once delivery: the batch, the seen event_ids, the dead
letters and the new checkpoint are written by one Lua script that first checks the checkpoint
and the replay generation are still the ones the batch was read after. Re-running a batch is
a no-op; a crash at any point either committed everything or nothing.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import msgspec
import redis.cluster
from redis.exceptions import NoScriptError

from hivemind_memory.events.codec import decode_event
from hivemind_memory.events.positions import Position, parse_pos
from hivemind_memory.events.schema import Event
from hivemind_memory.projections.reduce import BatchResult, Undecodable, fold_batch
from hivemind_memory.projections.state import NoteState, pack_note, unpack_note
from hivemind_memory.projections.store import keys
from hivemind_memory.projections.store.log import FIELD
from hivemind_memory.projections.store.scripts import script
from hivemind_memory.projections.store.types import Pipe, Store, as_bytes, stream_entries

DEFAULT_BATCH = 2000
"""Events folded per batch (one XRANGE, one HMGET, one SMISMEMBER, one Lua commit)."""


@dataclass(frozen=True, slots=True)
class BatchInfo:
    """What one committed (or lost) batch did; logged one line per batch."""

    ns: str
    count: int
    first: str
    last: str
    applied: int
    dead: int
    duplicates: int
    committed: bool
    seconds: float


@contextmanager
def no_cycle_collection() -> Iterator[None]:
    """Pause the cyclic garbage collector while folding (reference counting still frees
    everything at once). A batch keeps thousands of reply objects alive for its whole
    duration; the collector, triggered by those allocations, promoted them and ran full
    collections over the process's heap every few batches (a tenth of projection time). The
    fold builds no reference cycles, and any a library makes meanwhile are collected once the
    collector is back on. Nested or concurrent uses are fine: whoever found it enabled turns
    it back on."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def checkpoint(r: Store, ns: str) -> Position:
    """The namespace's last applied stream position ((0, 0) if none)."""
    raw = r.get(keys.checkpoint(ns))
    return parse_pos(None if raw is None else as_bytes(raw))


def _text(b: bytes) -> str:
    return b.decode("utf-8", "backslashreplace")


def decode_entry(fields: dict[bytes, bytes], ns: str) -> tuple[Event | Undecodable, bytes]:
    """A stream entry of namespace ``ns`` as its event, or why it cannot apply. Never raises:
    whatever a rogue writer put on the stream (no ``d`` field, non-UTF-8 field names, bytes
    that are not msgpack, an invalid event, an ``at`` out of range in UTC, an event of
    another namespace) becomes an ``Undecodable`` with a reason, i.e. a dead letter."""
    raw = fields.get(FIELD)
    if raw is None:
        shown = {_text(k): _text(v) for k, v in fields.items()}
        return Undecodable(msgspec.json.encode(shown),
                           "undecodable: entry has no 'd' field"), b""
    try:
        ev = decode_event(raw)
    except (msgspec.ValidationError, msgspec.DecodeError, ValueError) as exc:
        return Undecodable(raw, f"undecodable: {exc}"), raw
    except Exception as exc:  # anything else these bytes provoke must not stall the namespace
        return Undecodable(raw, f"undecodable: {type(exc).__name__}: {exc}"), raw
    if ev.ns != ns:
        return Undecodable(raw, f"wrong_namespace: an event of namespace {ev.ns!r} on the "
                                f"stream of {ns!r}"), raw
    return ev, raw


@dataclass(frozen=True, slots=True)
class Prepared:
    """A folded batch, not yet committed: what ``commit`` will write, if still current."""

    ns: str
    expected: str
    """``checkpoint|generation`` as read before the batch."""
    new_checkpoint: str
    first: str
    count: int
    result: BatchResult


def decode_entries(reply: Sequence[Any], ns: str
                   ) -> list[tuple[str, Event | Undecodable, bytes]]:
    """An XRANGE reply of namespace ``ns`` as ``(entry_id, event or Undecodable, raw)``.

    The projector's hot loop (every event passes here once): the common entry (a dict with a
    ``d`` field whose bytes decode to an event of ``ns``) takes the short path; anything else
    goes through ``decode_entry``, which names the reason. As in ``stream_entries``, the
    first entry proves the connection returns bytes (it decodes every reply or none).
    """
    if not reply:
        return []
    stream_entries(reply[:1])  # raises StoreError if the connection decodes responses
    out: list[tuple[str, Event | Undecodable, bytes]] = []
    append = out.append
    for item in reply:
        entry_id, fields = item[0], item[1]
        if type(fields) is dict:
            raw = fields.get(FIELD)
        elif fields is not None and len(fields) == 2 and fields[0] == FIELD:
            raw = fields[1]  # a raw reply: the flat list [b"d", blob]
        else:
            raw = None
        if raw is not None:
            try:
                ev = decode_event(raw)
            except Exception:  # decode_entry below names the reason
                pass
            else:
                if ev.ns == ns:
                    append((entry_id.decode(), ev, raw))
                    continue
        full = stream_entries([item])[0]
        append((full.id.decode(), *decode_entry(full.fields, ns)))
    return out


Decoded = tuple[str, Event | Undecodable, bytes]
"""One stream entry as the fold takes it: ``(entry_id, event or Undecodable, raw)``."""


def _touched_ids(decoded: Sequence[Decoded]) -> tuple[list[str], list[str]]:
    """The distinct note ids and event ids of a batch (undecodable entries have none)."""
    note_ids: set[str] = set()
    event_ids: set[str] = set()
    for _, ev, _ in decoded:
        if not isinstance(ev, Undecodable):
            note_ids.add(ev.note_id)
            event_ids.add(ev.event_id)
    return list(note_ids), list(event_ids)


def _queue_prior_reads(p: Pipe, ns: str, note_ids: list[str], event_ids: list[str]) -> int:
    """Queue the reads a batch folds onto (HMGET of its notes, SMISMEMBER of its event ids);
    returns how many replies they add."""
    if note_ids:
        p.hmget(keys.notes(ns), note_ids)
    if event_ids:
        p.smismember(keys.seen(ns), event_ids)
    return bool(note_ids) + bool(event_ids)


def _priors(note_ids: list[str], event_ids: list[str], replies: Sequence[Any]
            ) -> tuple[dict[str, NoteState], set[str]]:
    """The replies of ``_queue_prior_reads`` as (current states by note id, event ids already
    applied)."""
    blobs = replies[0] if note_ids else []
    flags = replies[-1] if event_ids else []
    current = {nid: unpack_note(b) for nid, b in zip(note_ids, blobs, strict=True) if b}
    seen = {e for e, f in zip(event_ids, flags, strict=True) if f}
    return current, seen


def _xrange_after(p: Pipe | Store, ns: str, after: str, count: int) -> Any:
    """XRANGE of up to ``count`` entries strictly after entry id ``after`` ("" = from the
    start), queued on a pipeline or run."""
    return p.xrange(keys.stream(ns), min="(" + after if after else "-", max="+", count=count)


def prepare_batch(r: Store, ns: str,
                  batch_size: int = DEFAULT_BATCH) -> Prepared | None:
    """Read the next batch after the checkpoint and fold it (writes nothing). None: caught up."""
    cp_raw, gen_raw = r.mget([keys.checkpoint(ns), keys.generation(ns)])
    cp_str = as_bytes(cp_raw).decode() if cp_raw else ""
    expected = cp_str + "|" + (as_bytes(gen_raw).decode() if gen_raw else "")
    decoded = decode_entries(_xrange_after(r, ns, cp_str, batch_size), ns)
    if not decoded:
        return None
    note_ids, event_ids = _touched_ids(decoded)
    p = r.pipeline(transaction=False)
    _queue_prior_reads(p, ns, note_ids, event_ids)
    current, seen = _priors(note_ids, event_ids, p.execute())
    res = fold_batch(current, seen, decoded)
    return Prepared(ns=ns, expected=expected, new_checkpoint=decoded[-1][0], first=decoded[0][0],
                    count=len(decoded), result=res)


def _commit_keys(ns: str) -> list[str]:
    return [keys.checkpoint(ns), keys.notes(ns), keys.seen(ns), keys.dead(ns),
            keys.changes(ns), keys.generation(ns), keys.projected(ns), keys.lock(ns)]


def _commit_args(prep: Prepared, now_ms: int, token: str | None, lease_ms: int) -> list[Any]:
    """ARGV of ``commit_batch.lua`` (its header documents the layout)."""
    res = prep.result
    touched = sorted(res.notes)
    argv: list[Any] = [prep.expected, prep.new_checkpoint, now_ms, keys.CHANGES_MAXLEN,
                       token or "", lease_ms if token else 0, len(touched)]
    notes = res.notes
    append = argv.append
    for nid in touched:
        append(nid)
        append(pack_note(notes[nid]))
    append(len(res.seen))
    argv += res.seen
    append(len(res.dead))
    for d in res.dead:
        argv += [d.entry_id, d.reason, d.raw]
    append(prep.count)
    append(" ".join(touched))
    return argv


def _run_commit(r: Store, ns: str, argv: list[Any]) -> Any:
    return script(r, "commit_batch")(keys=_commit_keys(ns), args=argv)


def commit(r: Store, prep: Prepared, now_ms: int, token: str | None = None,
           lease_ms: int = 0) -> bool:
    """Write a prepared batch atomically if the checkpoint and generation are still the ones it
    was read after, and (given ``token``) the committer still holds the projection lease;
    False (nothing written) otherwise. With ``token`` and ``lease_ms`` > 0, a commit that
    applied also renews the lease to ``lease_ms``."""
    return bool(_run_commit(r, prep.ns, _commit_args(prep, now_ms, token, lease_ms)))


def _info(prep: Prepared, ok: bool, t0: float) -> BatchInfo:
    res = prep.result
    return BatchInfo(ns=prep.ns, count=prep.count, first=prep.first, last=prep.new_checkpoint,
                     applied=res.applied, dead=len(res.dead), duplicates=res.duplicates,
                     committed=ok, seconds=time.perf_counter() - t0)


def project_batch(r: Store, ns: str, batch_size: int = DEFAULT_BATCH,
                  token: str | None = None, lease_ms: int = 0) -> BatchInfo | None:
    """Fold the next batch after the checkpoint and commit it (fenced by the lease ``token``
    when given, which a committed batch renews to ``lease_ms`` when that is > 0). None when
    caught up. (``Folder`` does the same batch after batch in one round trip each.)"""
    t0 = time.perf_counter()
    prep = prepare_batch(r, ns, batch_size)
    if prep is None:
        return None
    return _info(prep, commit(r, prep, int(time.time() * 1000), token, lease_ms), t0)


KNOWN_MAX_NOTES = 100_000
"""Most note states a folder keeps between batches (then it starts over)."""
KNOWN_MAX_BYTES = 64 * 2**20
"""Most text bytes (plus ``KNOWN_NOTE_OVERHEAD`` per note) it keeps between batches."""
KNOWN_NOTE_OVERHEAD = 300
"""Rough bytes of one kept note besides its text (the struct, its strings and datetimes)."""


@dataclass(slots=True)
class _Next:
    """What the folder knows about the batch it folds next."""

    expected: str
    """``checkpoint|generation`` it folds after."""
    batch: list[Decoded]
    """Its entries, decoded (empty: caught up as far as we know)."""
    priors: tuple[dict[str, NoteState], set[str]] | None = None
    """Its notes' current states and its already-applied event ids (None: not read yet)."""
    ahead: list[Decoded] | None = None
    """The batch after it, decoded (None: not read yet)."""
    prepared: tuple[Prepared, list[Any]] | None = None
    """It folded already, with its commit's ARGV (None: not yet)."""


def _pipeline(r: Store) -> Pipe:
    return r.pipeline(transaction=False)


class Folder:
    """Folds one namespace batch after batch, with one round trip to Redis per batch and the
    commit overlapped with the client's work on the next batch.

    ``project_batch`` makes four round trips per batch (checkpoint, entries, prior states,
    commit), each waiting for the other side. A folder sends, in one write, the reads of the
    batch after this one (HMGET of its notes, SMISMEMBER of its event ids, XRANGE of the batch
    after *it*) and then this batch's commit. It takes the reads' replies, which Redis sends
    before it runs the commit, and while Redis runs the commit it decodes, overlays and folds
    the next batch: the reads saw the state before this commit, and the commit writes exactly
    this batch's folded notes and event ids, so the reads overlaid with them are the state
    after it. Only then does it take the commit's reply.

    Every guarantee stays with the commit script: it applies only if the checkpoint and
    generation are still the ones the batch was folded after and the lease token still holds.
    Whatever was read or folded ahead assumed this commit applied; when it did not, all of it
    is dropped and the next step starts afresh from the stored checkpoint.

    On a Redis Cluster (redis-py sends no EVALSHA in a cluster pipeline) the commit runs
    alone, then the reads: two round trips per batch, nothing overlapped.

    Not thread-safe; one folder per lease holder. ``step`` returns what ``project_batch``
    returns.
    """

    def __init__(self, r: Store, ns: str, batch_size: int = DEFAULT_BATCH,
                 token: str | None = None, lease_ms: int = 0) -> None:
        self.r, self.ns, self.batch_size = r, ns, batch_size
        self.token, self.lease_ms = token, lease_ms
        self._next: _Next | None = None
        """None: read the checkpoint afresh."""
        self._known: dict[str, NoteState] = {}
        """States this folder committed, as stored after its last applied commit (no one else
        wrote a note since: every other writer moves the checkpoint or the generation, and the
        next commit's compare-and-set would fail). A note known here is not read again."""
        self._known_at = ""
        """``checkpoint|generation`` after that commit."""
        self._known_bytes = 0

    def step(self) -> BatchInfo | None:
        """Fold and commit the next batch; None when caught up."""
        try:
            return self._step()
        except BaseException:
            self._forget()  # a failed call leaves nothing we could trust
            raise

    def _forget(self) -> None:
        self._next = None
        self._known.clear()
        self._known_at, self._known_bytes = "", 0

    def _committed(self, prep: Prepared) -> None:
        """Batch ``prep`` applied: its notes are stored as folded."""
        known = self._known
        for nid, state in prep.result.notes.items():
            if nid not in known:
                self._known_bytes += len(state.text) + KNOWN_NOTE_OVERHEAD
            known[nid] = state
        self._known_at = prep.new_checkpoint + "|" + prep.expected.split("|", 1)[1]
        if len(known) > KNOWN_MAX_NOTES or self._known_bytes > KNOWN_MAX_BYTES:
            known.clear()  # bounded memory; they are read again when touched
            self._known_bytes = 0

    def _read_fresh(self) -> _Next:
        """Cold start: the checkpoint and generation, then the batch after it."""
        cp_raw, gen_raw = self.r.mget([keys.checkpoint(self.ns), keys.generation(self.ns)])
        cp = as_bytes(cp_raw).decode() if cp_raw else ""
        expected = cp + "|" + (as_bytes(gen_raw).decode() if gen_raw else "")
        if expected != self._known_at:  # someone else committed (or replayed) since
            self._known.clear()
            self._known_bytes = 0
        return _Next(expected, decode_entries(_xrange_after(self.r, self.ns, cp,
                                                            self.batch_size), self.ns))

    def _to_read(self, note_ids: list[str], folded: dict[str, NoteState]) -> list[str]:
        """Those of ``note_ids`` neither folded just now nor known: read them."""
        known = self._known
        return [nid for nid in note_ids if nid not in folded and nid not in known]

    def _current(self, note_ids: list[str], folded: dict[str, NoteState], fetched: list[str],
                 blobs: Sequence[Any]) -> dict[str, NoteState]:
        """The state of each of ``note_ids`` (absent: none yet): folded just now, else known,
        else as read (``fetched`` with their ``blobs``)."""
        current = {nid: unpack_note(b) for nid, b in zip(fetched, blobs, strict=True) if b}
        known = self._known
        for nid in note_ids:
            state = folded.get(nid)
            if state is None:
                state = known.get(nid)
            if state is not None:
                current[nid] = state
        return current

    def _read_priors(self, nxt: _Next) -> None:
        """The batch's prior states, with the batch after it read ahead (one round trip)."""
        note_ids, event_ids = _touched_ids(nxt.batch)
        fetch = self._to_read(note_ids, {})
        p = self.r.pipeline(transaction=False)
        n = _queue_prior_reads(p, self.ns, fetch, event_ids)
        _xrange_after(p, self.ns, nxt.batch[-1][0], self.batch_size)
        got = p.execute()
        flags = got[n - 1] if event_ids else []
        seen = {e for e, f in zip(event_ids, flags, strict=True) if f}
        nxt.priors = self._current(note_ids, {}, fetch, got[0] if fetch else []), seen
        nxt.ahead = decode_entries(got[n], self.ns)

    def _prepare(self, nxt: _Next) -> tuple[Prepared, list[Any]]:
        """Fold the batch (onto its priors) and build its commit's ARGV."""
        if nxt.prepared is not None:
            return nxt.prepared
        assert nxt.priors is not None
        current, seen = nxt.priors
        batch = nxt.batch
        prep = Prepared(ns=self.ns, expected=nxt.expected, new_checkpoint=batch[-1][0],
                        first=batch[0][0], count=len(batch),
                        result=fold_batch(current, seen, batch))
        return prep, _commit_args(prep, int(time.time() * 1000), self.token, self.lease_ms)

    def _step(self) -> BatchInfo | None:
        t0 = time.perf_counter()
        nxt = self._next if self._next is not None else self._read_fresh()
        self._next = None
        if not nxt.batch:
            return None  # caught up: read afresh next time (entries may arrive)
        if nxt.prepared is None and (nxt.priors is None or nxt.ahead is None):
            self._read_priors(nxt)
        prep, argv = self._prepare(nxt)
        ahead = nxt.ahead if nxt.ahead is not None else []
        note_ids, event_ids = _touched_ids(ahead)
        fetch = self._to_read(note_ids, prep.result.notes)
        reads: list[tuple[Any, ...]] = []
        if ahead:
            if fetch:
                reads.append(("HMGET", keys.notes(self.ns), *fetch))
            if event_ids:
                reads.append(("SMISMEMBER", keys.seen(self.ns), *event_ids))
        after = ahead[-1][0] if ahead else prep.new_checkpoint
        reads.append(("XRANGE", keys.stream(self.ns), "(" + after, "+", "COUNT",
                      self.batch_size))
        if isinstance(self.r, redis.cluster.RedisCluster):
            ok = bool(_run_commit(self.r, self.ns, argv))
            if ok:
                p = _pipeline(self.r)
                for cmd in reads:
                    p.execute_command(*cmd)  # type: ignore[no-untyped-call]
                replies = p.execute()
                self._next = self._following(prep, ahead, note_ids, fetch, event_ids, replies)
                self._committed(prep)
            else:
                self._forget()
            return _info(prep, ok, t0)
        ckeys = _commit_keys(self.ns)
        commit_cmd = ("EVALSHA", script(self.r, "commit_batch").sha, len(ckeys), *ckeys, *argv)
        pool = self.r.connection_pool
        conn = pool.get_connection()
        try:
            conn.send_packed_command(  # type: ignore[no-untyped-call]
                conn.pack_commands([*reads, commit_cmd]))  # type: ignore[no-untyped-call]
            replies = [conn.read_response() for _ in reads]
            # Redis runs the commit now; meanwhile, everything the next step needs
            following = self._following(prep, ahead, note_ids, fetch, event_ids, replies)
            try:
                ok = bool(conn.read_response())
            except NoScriptError:  # a restarted or flushed Redis: load the script, retry
                ok = commit(self.r, prep, int(time.time() * 1000), self.token, self.lease_ms)
        except BaseException:
            conn.disconnect()  # type: ignore[no-untyped-call]  # replies may be left unread
            raise
        finally:
            pool.release(conn)
        if ok:
            self._next = following
            self._committed(prep)
        else:
            self._forget()
        return _info(prep, ok, t0)

    def _following(self, prep: Prepared, ahead: list[Decoded], note_ids: list[str],
                   fetch: list[str], event_ids: list[str], replies: list[Any]) -> _Next:
        """The next step's state, assuming this batch's commit applies, from the replies of
        the reads sent with it (``fetch``: the notes read). Those reads may have run before
        the commit (they always do, but on a cluster): this batch's folded notes and applied
        event ids are laid over them, which is what the commit writes."""
        expected = prep.new_checkpoint + "|" + prep.expected.split("|", 1)[1]
        entries = decode_entries(replies[-1], self.ns)
        if not ahead:
            return _Next(expected, entries)
        blobs = replies[0] if fetch else []
        flags = replies[1 if fetch else 0] if event_ids else []
        current = self._current(note_ids, prep.result.notes, fetch, blobs)
        seen = {e for e, f in zip(event_ids, flags, strict=True) if f}
        applied = prep.result.seen
        if applied:
            seen |= set(applied).intersection(event_ids)
        nxt = _Next(expected, ahead, (current, seen), entries)
        nxt.prepared = self._prepare(nxt)
        return nxt


def lagging(r: Store, nss: Sequence[str], chunk: int = 500) -> list[str]:
    """Those of ``nss`` whose stream has entries past their checkpoint.

    Cross-namespace, so cluster-safe: single-key reads in non-transactional pipelines of
    ``chunk`` namespaces (a cluster client splits each by node), never a multi-key call.
    """
    late: list[str] = []
    for i in range(0, len(nss), chunk):
        part = nss[i:i + chunk]
        p = r.pipeline(transaction=False)
        for ns in part:
            p.xrevrange(keys.stream(ns), count=1)
            p.get(keys.checkpoint(ns))
        got = p.execute()
        for j, ns in enumerate(part):
            last = stream_entries(got[2 * j])
            cp = got[2 * j + 1]
            if last and parse_pos(last[0].id) > parse_pos(None if cp is None else as_bytes(cp)):
                late.append(ns)
    return late


def read_notes(r: Store, ns: str) -> dict[str, NoteState]:
    """Every projected note of the namespace (forgotten ones included)."""
    raw = r.hgetall(keys.notes(ns))
    return {as_bytes(k).decode(): unpack_note(as_bytes(v)) for k, v in raw.items()}


class DeadLetterRow(msgspec.Struct, frozen=True):
    """One dead letter as listed: its id in the dead-letter stream, the event's stream entry
    id, the reason and when it was recorded (ms; the raw payload left out)."""

    id: str
    entry: str
    reason: str
    at_ms: str


def read_dead(r: Store, ns: str, count: int = 1000) -> list[DeadLetterRow]:
    """The namespace's first ``count`` dead letters, oldest first (``dead_total`` says how many
    there are)."""
    return [DeadLetterRow(_text(e.id), _text(e.fields.get(b"entry", b"")),
                          _text(e.fields.get(b"reason", b"")), _text(e.fields.get(b"at_ms", b"")))
            for e in stream_entries(r.xrange(keys.dead(ns), count=count))]


def dead_total(r: Store, ns: str) -> int:
    """How many dead letters the namespace has."""
    return int(r.xlen(keys.dead(ns)))


__all__ = [
    "BatchInfo",
    "DeadLetterRow",
    "Folder",
    "Prepared",
    "checkpoint",
    "commit",
    "dead_total",
    "decode_entries",
    "lagging",
    "no_cycle_collection",
    "prepare_batch",
    "project_batch",
    "read_dead",
    "read_notes",
]
