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
from itertools import compress
from typing import Any

import msgspec
import redis.cluster
from hiredis import pack_command as _pack
from redis.exceptions import NoScriptError

from hivemind_memory.events.codec import decode_event
from hivemind_memory.events.errors import StoreError
from hivemind_memory.events.positions import Position, parse_pos
from hivemind_memory.events.schema import Event
from hivemind_memory.projections.ranking.config import DEFAULT
from hivemind_memory.projections.ranking.dupsketch import DupSpec, spec_of
from hivemind_memory.projections.reduce import BatchResult, Undecodable, fold_batch, touched_by
from hivemind_memory.projections.state import NoteState, pack_note, unpack_note
from hivemind_memory.projections.store import dupindex, eventdigest, keys
from hivemind_memory.projections.store.lease import changes_tail, wait_for_change
from hivemind_memory.projections.store.log import FIELD
from hivemind_memory.projections.store.scripts import script, source
from hivemind_memory.projections.store.types import (
    Pipe,
    Store,
    as_bytes,
    give_back,
    stream_entries,
)

DEFAULT_BATCH = 2000
"""Events folded per batch (one XRANGE, one HMGET, one SMISMEMBER, one Lua commit)."""
DEFAULT_SPEC = spec_of(DEFAULT)
"""The near-duplicate lookup's spec under the default config (a projector's own config
passes its own)."""


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
    erased: tuple[str, ...] = ()
    """Notes whose content the batch made erasable: their ``note.erased`` applied, or a
    content event about an erased note was dead-lettered (both call for a redaction)."""


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
    index: dupindex.IndexChanges
    """What the batch does to the near-duplicate lookup (``dupindex``)."""
    spec: DupSpec
    digests: list[tuple[str, bytes]]
    """(event_id, keyed digest) of the batch's applied events (``eventdigest``)."""


def _digests(key: bytes, batch: Sequence[tuple[str, Event | Undecodable, bytes]],
             seen: Sequence[str]) -> list[tuple[str, bytes]]:
    """The digests of the events ``seen`` (the batch's applied ids) of ``batch``."""
    want = set(seen)
    out: dict[str, bytes] = {}
    for _, ev, _raw in batch:
        if not isinstance(ev, Undecodable) and ev.event_id in want and ev.event_id not in out:
            out[ev.event_id] = eventdigest.digest(key, ev)
    return list(out.items())


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
    """The distinct note ids (``touched_by`` each event) and event ids of a batch
    (undecodable entries have none)."""
    note_ids: set[str] = set()
    event_ids: set[str] = set()
    for _, ev, _ in decoded:
        if not isinstance(ev, Undecodable):
            note_ids.update(touched_by(ev))
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


def _flagged(ids: list[str], flags: Sequence[Any]) -> set[str]:
    """Those of ``ids`` whose SMISMEMBER flag is set."""
    if len(flags) != len(ids):
        raise StoreError(f"SMISMEMBER answered {len(flags)} flags for {len(ids)} ids")
    return set(compress(ids, flags))


def _priors(note_ids: list[str], event_ids: list[str], replies: Sequence[Any]
            ) -> tuple[dict[str, NoteState], set[str]]:
    """The replies of ``_queue_prior_reads`` as (current states by note id, event ids already
    applied)."""
    blobs = replies[0] if note_ids else []
    flags = replies[-1] if event_ids else []
    current = {nid: unpack_note(b) for nid, b in zip(note_ids, blobs, strict=True) if b}
    seen = _flagged(event_ids, flags)
    return current, seen


def _xrange_after(p: Pipe | Store, ns: str, after: str, count: int) -> Any:
    """XRANGE of up to ``count`` entries strictly after entry id ``after`` ("" = from the
    start), queued on a pipeline or run."""
    return p.xrange(keys.stream(ns), min="(" + after if after else "-", max="+", count=count)


def prepare_batch(r: Store, ns: str, batch_size: int = DEFAULT_BATCH,
                  spec: DupSpec = DEFAULT_SPEC) -> Prepared | None:
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
                    count=len(decoded), result=res,
                    index=dupindex.changes(current, res.notes, spec), spec=spec,
                    digests=_digests(eventdigest.store_key(r), decoded, res.seen)
                    if res.seen else [])


def _commit_keys(ns: str) -> list[str]:
    return [keys.checkpoint(ns), keys.notes(ns), keys.seen(ns), keys.dead(ns),
            keys.changes(ns), keys.generation(ns), keys.projected(ns), keys.lock(ns),
            keys.dupbands(ns), keys.dupspec(ns), keys.event_digests(ns), keys.dupnotes(ns)]


def _commit_args(prep: Prepared, now_ms: int, token: str | None, lease_ms: int) -> list[Any]:
    """ARGV of ``commit_batch.lua`` (its header documents the layout)."""
    res = prep.result
    notes = res.notes  # in the order the batch first touched them: deterministic, no sort
    argv: list[Any] = [prep.expected, prep.new_checkpoint, now_ms, keys.CHANGES_MAXLEN,
                       token or "", lease_ms if token else 0, len(notes)]
    append = argv.append
    for nid, state in notes.items():
        append(nid)
        append(pack_note(state))
    append(len(res.seen))
    argv += res.seen
    append(len(res.dead))
    for d in res.dead:
        argv += [d.entry_id, d.reason, d.raw]
    append(prep.count)
    append(" ".join(notes))
    argv += dupindex.commit_args(prep.index, prep.spec)
    append(len(prep.digests))
    for eid, dig in prep.digests:
        append(eid)
        append(dig)
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
                     committed=ok, seconds=time.perf_counter() - t0,
                     erased=_to_redact(res) if ok else ())


_ERASED_CONTENT = ("note.created: erased_note", "note.revised: erased_note")
"""Dead-letter reasons of content events about an erased note (their payload is content)."""


def _to_redact(res: BatchResult) -> tuple[str, ...]:
    """The notes a committed batch calls a redaction for (``BatchInfo.erased``)."""
    out = [nid for nid, st in res.notes.items() if st.erased]
    for d in res.dead:
        if d.reason.startswith(_ERASED_CONTENT):
            try:
                out.append(decode_event(d.raw).note_id)
            except Exception:  # an unreadable payload names no note
                continue
    return tuple(dict.fromkeys(out))


def project_batch(r: Store, ns: str, batch_size: int = DEFAULT_BATCH,
                  token: str | None = None, lease_ms: int = 0,
                  spec: DupSpec = DEFAULT_SPEC) -> BatchInfo | None:
    """Fold the next batch after the checkpoint and commit it (fenced by the lease ``token``
    when given, which a committed batch renews to ``lease_ms`` when that is > 0). None when
    caught up. (``Folder`` does the same batch after batch in one round trip each.)"""
    t0 = time.perf_counter()
    prep = prepare_batch(r, ns, batch_size, spec)
    if prep is None:
        return None
    return _info(prep, commit(r, prep, int(time.time() * 1000), token, lease_ms), t0)


KNOWN_MAX_NOTES = 20_000
"""Most note states a folder keeps between batches (then it starts over): a few percent of
projection time, so kept small (a worker's memory is for its indexes)."""
KNOWN_MAX_BYTES = 16 * 2**20
"""Most text bytes (plus ``KNOWN_NOTE_OVERHEAD`` per note) it keeps between batches."""
KNOWN_NOTE_OVERHEAD = 300
"""Rough bytes of one kept note besides its text (the struct, its strings and datetimes)."""


@dataclass(slots=True)
class _Next:
    """What the folder knows about the batch it folds next (nothing in flight)."""

    expected: str
    """``checkpoint|generation`` it folds after."""
    batch: list[Decoded]
    """Its entries, decoded (empty: caught up as far as we know)."""
    priors: tuple[dict[str, NoteState], set[str]] | None = None
    """Its notes' current states and its already-applied event ids (None: not read yet)."""
    ahead: list[Decoded] | None = None
    """The batch after it, decoded (None: not read yet)."""


@dataclass(slots=True)
class _Sent:
    """A commit on the wire, behind the reads for the batch after it."""

    prep: Prepared
    t0: float
    """When its batch began to be folded (``BatchInfo.seconds``)."""
    ahead: list[Decoded]
    """The batch after it, decoded (empty: none was read ahead); the reads are its priors
    (HMGET of ``fetch``, SMISMEMBER of ``event_ids``) and the entries after it (XRANGE)."""
    note_ids: list[str]
    event_ids: list[str]
    fetch: list[str]
    held: dict[str, NoteState]
    """States of the batch-ahead's other notes, as they will be once this commit applied
    (known or folded before): not read."""
    n_reads: int


def _pipeline(r: Store) -> Pipe:
    return r.pipeline(transaction=False)


class _Wire:
    """Commands written to one connection now, their replies read later, in order."""

    def __init__(self, r: redis.Redis, ns: str) -> None:
        self.r, self.ns = r, ns
        self.pool = r.connection_pool
        self.conn: Any = None
        self.sha = ""

    def send(self, reads: list[tuple[Any, ...]], argv: list[Any]) -> None:
        """Write ``reads``, then the commit script with ``argv``."""
        if self.conn is None:
            self.conn = self.pool.get_connection()
            # loaded once per connection taken, so only a Redis restarted (or flushed) while
            # the folder runs answers NOSCRIPT
            sha = self.r.script_load(source("commit_batch"))
            self.sha = sha.decode() if isinstance(sha, bytes) else str(sha)
        ckeys = _commit_keys(self.ns)
        commit_cmd = ("EVALSHA", self.sha, len(ckeys), *ckeys, *argv)
        # packed by hiredis itself: redis-py's packer looks at every argument in Python first
        self.conn.send_packed_command([_pack(cmd) for cmd in (*reads, commit_cmd)])

    def read(self) -> Any:
        return self.conn.read_response()

    def close(self, broken: bool) -> None:
        """Give the connection back (``broken``: replies may be unread; drop it)."""
        conn, self.conn = self.conn, None
        if conn is not None:
            give_back(self.pool, conn, broken=broken)


class _Calls:
    """The same, for a Redis Cluster (whose pipelines refuse EVALSHA): each ``send`` runs at
    once, the reads in a pipeline, then the commit script; the replies wait to be read."""

    def __init__(self, r: Store, ns: str) -> None:
        self.r, self.ns = r, ns
        self.replies: list[Any] = []

    def send(self, reads: list[tuple[Any, ...]], argv: list[Any]) -> None:
        p = _pipeline(self.r)
        for cmd in reads:
            p.execute_command(*cmd)  # type: ignore[no-untyped-call]
        self.replies += p.execute()
        self.replies.append(_run_commit(self.r, self.ns, argv))

    def read(self) -> Any:
        return self.replies.pop(0)

    def close(self, broken: bool) -> None:
        self.replies.clear()


class Folder:
    """Folds one namespace batch after batch, with its commits overlapped with the client's
    work: one write to Redis per batch and (almost) no waiting on it.

    ``project_batch`` makes four round trips per batch (checkpoint, entries, prior states,
    commit), each side waiting for the other. A folder keeps one commit in flight. With the
    commit of batch k it sends, just before it, the reads for batch k+1 (HMGET of its notes,
    SMISMEMBER of its event ids, XRANGE of batch k+2). Then, while Redis runs commit k, it takes
    those reads' replies, decodes batch k+2, folds batch k+1 and sends its reads and commit;
    only then does it take commit k's reply.

    The reads for batch k+1 ran before commit k, which writes exactly batch k's folded notes
    and applied event ids: overlaid with those, they are the state after commit k. Notes the
    folder committed itself are not read again (``_known``: no one else can have written them,
    or the next compare-and-set fails). Every guarantee stays with the commit script: it
    applies only if the checkpoint and generation are still the ones its batch was folded after
    and the lease token still holds. All that was read or folded ahead assumes commit k
    applied; when it did not, the folder drops it (and the connection, whose replies are left
    unread: a commit sent behind it finds the checkpoint it expects only if the state is the
    very one it was folded on) and starts afresh from the stored checkpoint.

    On a Redis Cluster each write runs at once (two round trips per batch, nothing overlapped).
    Not thread-safe; one folder per lease holder. ``step`` returns what ``project_batch``
    returns; ``close`` finishes the commit still in flight and returns its ``BatchInfo``.
    """

    def __init__(self, r: Store, ns: str, batch_size: int = DEFAULT_BATCH,
                 token: str | None = None, lease_ms: int = 0,
                 until: Position | None = None, spec: DupSpec = DEFAULT_SPEC) -> None:
        self.r, self.ns, self.batch_size = r, ns, batch_size
        self.spec = spec
        """How the near-duplicate lookup's keys are made (the projector's config)."""
        self.token, self.lease_ms = token, lease_ms
        self.until = until
        """Send no commit behind one that reaches this position (a catch-up's target)."""
        self._wire: _Wire | _Calls = (_Calls(r, ns) if isinstance(r, redis.cluster.RedisCluster)
                                      else _Wire(r, ns))
        self._next: _Next | None = None
        """Nothing in flight: the batch to fold next (None: read the checkpoint afresh)."""
        self._sent: _Sent | None = None
        """The commit in flight."""
        self._known: dict[str, NoteState] = {}
        """States this folder committed, as stored after its last applied commit (no one else
        wrote a note since: every other writer moves the checkpoint or the generation, and the
        next commit's compare-and-set would fail). A note known here is not read again."""
        self._known_at = ""
        """``checkpoint|generation`` after that commit."""
        self._key: bytes | None = None
        self._known_bytes = 0
        self._settled: BatchInfo | None = None
        """A commit settled but not yet returned by ``step``."""

    @property
    def in_flight(self) -> bool:
        """Whether a commit was sent and its reply not taken yet."""
        return self._sent is not None

    def step(self, more: bool = True) -> BatchInfo | None:
        """Commit the next batch; None when caught up. ``more=False``: this is the last step
        (send no further commit; ``close`` then finishes nothing)."""
        if self._settled is not None:
            info, self._settled = self._settled, None
            return info
        try:
            return self._step(more)
        except BaseException:
            self._abort()  # a failed call leaves nothing we could trust
            raise

    def close(self) -> BatchInfo | None:
        """Wait for the commit still in flight and give the connection back; the info of a
        commit not returned by ``step`` yet (None if there is none)."""
        try:
            if self._settled is not None:
                info, self._settled = self._settled, None
                return info
            if self._sent is None:
                return None
            sent, self._sent = self._sent, None
            for _ in range(sent.n_reads):
                self._wire.read()
            ok = self._commit_reply(sent)
            if ok:
                self._committed(sent.prep)
            else:
                self._forget()
            return _info(sent.prep, ok, sent.t0)
        except BaseException:
            self._abort()
            raise
        finally:
            self._wire.close(broken=False)

    def _abort(self) -> None:
        self._wire.close(broken=True)
        self._forget()

    def _forget(self) -> None:
        self._next, self._sent = None, None
        self._known.clear()
        self._known_at, self._known_bytes = "", 0

    def _committed(self, prep: Prepared) -> None:
        """Batch ``prep`` applied: its notes are stored as folded."""
        known, folded = self._known, prep.result.notes
        self._known_bytes += sum(len(folded[nid].text) + KNOWN_NOTE_OVERHEAD
                                 for nid in folded.keys() - known.keys())
        known.update(folded)
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

    def _read_priors(self, nxt: _Next) -> None:
        """The batch's prior states, with the batch after it read ahead (one round trip)."""
        note_ids, event_ids = _touched_ids(nxt.batch)
        known = self._known
        fetch = [nid for nid in note_ids if nid not in known]
        p = _pipeline(self.r)
        n = _queue_prior_reads(p, self.ns, fetch, event_ids)
        _xrange_after(p, self.ns, nxt.batch[-1][0], self.batch_size)
        got = p.execute()
        flags = got[n - 1] if event_ids else []
        held = {nid: known[nid] for nid in note_ids if nid in known}
        current = _states(fetch, got[0] if fetch else [], held, {})
        nxt.priors = current, _flagged(event_ids, flags)
        nxt.ahead = decode_entries(got[n], self.ns)

    def _digest_key(self) -> bytes:
        """The store's digest secret, read once per projector."""
        if self._key is None:
            self._key = eventdigest.store_key(self.r)
        return self._key

    def _fold(self, expected: str, batch: list[Decoded],
              priors: tuple[dict[str, NoteState], set[str]]) -> tuple[Prepared, list[Any]]:
        """Fold ``batch`` onto its priors and build its commit's ARGV."""
        current, seen = priors
        res = fold_batch(current, seen, batch)
        prep = Prepared(ns=self.ns, expected=expected, new_checkpoint=batch[-1][0],
                        first=batch[0][0], count=len(batch), result=res,
                        index=dupindex.changes(current, res.notes, self.spec), spec=self.spec,
                        digests=_digests(self._digest_key(), batch, res.seen)
                        if res.seen else [])
        return prep, _commit_args(prep, int(time.time() * 1000), self.token, self.lease_ms)

    def _send(self, prep: Prepared, argv: list[Any], ahead: list[Decoded], t0: float,
              pending: dict[str, NoteState]) -> None:
        """Write the reads for ``ahead`` (the batch after ``prep``'s), then ``prep``'s commit.
        ``pending``: the notes of a commit still in flight before this one."""
        note_ids, event_ids = _touched_ids(ahead)
        folded, known = prep.result.notes, self._known
        fetch: list[str] = []
        held: dict[str, NoteState] = {}
        for nid in note_ids:
            if nid in folded:
                continue  # laid over the reads when they are used
            state = pending.get(nid)
            if state is None:
                state = known.get(nid)
            if state is None:
                fetch.append(nid)
            else:
                held[nid] = state
        commands: list[tuple[Any, ...]] = []
        if ahead:
            if fetch:
                commands.append(("HMGET", keys.notes(self.ns), *fetch))
            if event_ids:
                commands.append(("SMISMEMBER", keys.seen(self.ns), *event_ids))
        after = ahead[-1][0] if ahead else prep.new_checkpoint
        commands.append(("XRANGE", keys.stream(self.ns), "(" + after, "+", "COUNT",
                         self.batch_size))
        self._wire.send(commands, argv)
        self._sent = _Sent(prep, t0, ahead, note_ids, event_ids, fetch, held, len(commands))

    def _commit_reply(self, sent: _Sent) -> bool:
        """Whether ``sent``'s commit applied (its reads' replies taken already). If its
        script was missing (a restarted or flushed Redis), whatever was sent behind it is
        settled first (``_settled``), then the script is loaded and the batch committed again."""
        try:
            return bool(self._wire.read())
        except NoScriptError:
            behind, self._sent = self._sent, None
            if behind is not None and behind is not sent:
                self._settled = self._settle(behind)
            self._next = None
            return commit(self.r, sent.prep, int(time.time() * 1000), self.token,
                          self.lease_ms)

    def _settle(self, sent: _Sent) -> BatchInfo:
        """Take every reply of ``sent`` and report its commit. It was folded on the
        assumption that the commit ahead of it applied; when that one was refused, this one
        applies only if someone else committed the very same batch (the same checkpoint and
        generation), which left the state it was folded on: it is then exact, and counted."""
        for _ in range(sent.n_reads):
            self._wire.read()
        try:
            ok = bool(self._wire.read())
        except NoScriptError:
            ok = False
        return _info(sent.prep, ok, sent.t0)

    def _step(self, more: bool) -> BatchInfo | None:
        if self._sent is None:
            t0 = time.perf_counter()
            nxt = self._next if self._next is not None else self._read_fresh()
            self._next = None
            if not nxt.batch:
                return None  # caught up: read afresh next time (entries may arrive)
            if nxt.priors is None or nxt.ahead is None:
                self._read_priors(nxt)
            assert nxt.priors is not None and nxt.ahead is not None
            prep, argv = self._fold(nxt.expected, nxt.batch, nxt.priors)
            self._send(prep, argv, nxt.ahead, t0, {})
        sent = self._sent
        assert sent is not None
        replies = [self._wire.read() for _ in range(sent.n_reads)]
        # Redis runs this commit now; meanwhile the next batch is folded and sent behind it
        t1 = time.perf_counter()
        prep = sent.prep
        expected = prep.new_checkpoint + "|" + prep.expected.split("|", 1)[1]
        entries = decode_entries(replies[-1], self.ns)
        following: _Next | None = None
        if not sent.ahead:
            following = _Next(expected, entries)
        else:
            blobs = replies[0] if sent.fetch else []
            flags = replies[1 if sent.fetch else 0] if sent.event_ids else []
            current = _states(sent.fetch, blobs, sent.held, prep.result.notes)
            seen = _flagged(sent.event_ids, flags)
            if prep.result.seen:
                seen |= set(prep.result.seen).intersection(sent.event_ids)
            if more and (self.until is None or parse_pos(prep.new_checkpoint) < self.until):
                nprep, nargv = self._fold(expected, sent.ahead, (current, seen))
                self._send(nprep, nargv, entries, t1, prep.result.notes)
            else:
                following = _Next(expected, sent.ahead, (current, seen), entries)
        if self._sent is sent:
            self._sent = None
        ok = self._commit_reply(sent)
        if ok and self._settled is None:
            self._committed(prep)
            if self._sent is None:
                self._next = following
        else:  # refused, or committed again after a missing script: start afresh
            if self._sent is not None:
                self._settled = self._settle(self._sent)
            self._forget()
        return _info(prep, ok, sent.t0)


def _states(fetched: list[str], blobs: Sequence[Any], held: dict[str, NoteState],
            folded: dict[str, NoteState]) -> dict[str, NoteState]:
    """Current note states: as read (``fetched`` with their ``blobs``; absent: none), then
    ``held`` ones, then ``folded`` ones laid over them."""
    current = {nid: unpack_note(b) for nid, b in zip(fetched, blobs, strict=True) if b}
    current.update(held)
    current.update(folded)
    return current


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


def note_count(r: Store, ns: str) -> int:
    """How many notes the read model of ``ns`` holds (HLEN)."""
    return int(r.hlen(keys.notes(ns)))


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


def wait_projected(r: Store, ns: str, target: Position, timeout_s: float) -> bool:
    """Wait, never project, until the namespace's checkpoint reaches ``target``; False when
    ``timeout_s`` ran out first. Woken by each committed batch (the changes stream)."""
    deadline = time.monotonic() + timeout_s
    after = changes_tail(r, ns)
    while checkpoint(r, ns) < target:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        after = wait_for_change(r, ns, after, min(remaining, 1.0))
    return True


@dataclass(frozen=True, slots=True)
class WriteView:
    """What a checked write is decided on: the state of the notes it touches and which of its
    event ids are in the log, both as of the stream's entry ``tail`` ("" = empty stream)."""

    tail: str
    notes: dict[str, NoteState]
    logged: set[str]


def write_view(r: Store, ns: str, note_ids: Sequence[str], event_ids: Sequence[str],
               read: tuple[str, list[tuple[str, Event | Undecodable, bytes]]] | None = None,
               priors: tuple[list[str], list[str], list[Any]] | None = None) -> WriteView:
    """The read model at its checkpoint plus the log tail the projector has not folded yet
    (only the entries about ``note_ids`` and about every note those entries touch, again
    and again: a note created to supersede another in the tail folds onto that one's tail
    too; folded with the projector's own fold): the notes as the projector will see them
    once it reaches the stream's end. ``read``: the checkpoint and the decoded entries after
    it, when the caller already read them (one read of the tail per write, e.g. with the
    near-duplicate lookup); else they are read here. ``priors``: notes, event ids and the
    replies of their ``_queue_prior_reads`` read at that same checkpoint (the lookup's
    ``Found.priors``); when they cover every note and event id the view needs, the view
    reads nothing more (one round trip less a write), else it reads them as without."""
    if read is None:
        cp_raw = r.get(keys.checkpoint(ns))
        cp_str = as_bytes(cp_raw).decode() if cp_raw else ""
        decoded = decode_entries(r.xrange(keys.stream(ns), min="(" + cp_str if cp_str
                                          else "-", max="+") or [], ns)
    else:
        cp_str, decoded = read
    wanted = set(note_ids)
    events = [(d, touched_by(d[1])) for d in decoded if not isinstance(d[1], Undecodable)]
    while True:  # and the entries those notes' states hang on (B supersedes A: A's too)
        hits = [(d, ids) for d, ids in events if not wanted.isdisjoint(ids)]
        about = [d for d, _ in hits]
        grown = wanted.union(*(ids for _, ids in hits))
        if grown == wanted:
            break
        wanted = grown
    about_nids, about_eids = _touched_ids(about)
    eids = sorted(set(event_ids) | set(about_eids))
    nids = sorted(wanted | set(about_nids))
    if read is not None and priors is not None and set(nids) <= set(priors[0]) \
            and set(eids) <= set(priors[1]):  # read with the tail, at its checkpoint
        current, seen = _priors(*priors)
        folded_to = parse_pos(cp_str or None)
    else:
        p = r.pipeline(transaction=True)  # one consistent read: the projector commits atomically
        p.get(keys.checkpoint(ns))
        _queue_prior_reads(p, ns, nids, eids)
        cp2_raw, *replies = p.execute()
        current, seen = _priors(nids, eids, replies)
        folded_to = parse_pos(None if cp2_raw is None else as_bytes(cp2_raw))
    unfolded = [d for d in about if parse_pos(d[0]) > folded_to]
    res = fold_batch(current, seen, unfolded)
    in_tail = {d[1].event_id for d in decoded if not isinstance(d[1], Undecodable)
               and parse_pos(d[0]) > folded_to}
    return WriteView(tail=decoded[-1][0] if decoded else cp_str,
                     notes={**current, **res.notes},
                     logged=(seen | in_tail) & set(event_ids))


def conflicting(r: Store, ns: str, events: Sequence[Event]) -> tuple[int, str] | None:
    """The first of ``events`` (already in the log: a checked write's ``logged``) whose
    ``event_id`` is logged with other content, as (its place in ``events``, the id); None
    when each is a retry of what is logged. Folded events are compared by their keyed digest
    (``event_digests``), events still in the tail with the tail's own event; an id in
    neither (folded before digests were kept) counts as a retry. Events of one write that
    share an id must share their content too."""
    if not events:
        return None
    ids = list(dict.fromkeys(e.event_id for e in events))
    p = r.pipeline(transaction=True)
    p.hmget(keys.event_digests(ns), ids)
    p.get(keys.checkpoint(ns))
    digs_raw, cp_raw = p.execute()
    digs = {i: as_bytes(d) for i, d in zip(ids, digs_raw, strict=True) if d is not None}
    first: dict[str, Event] = {}
    if len(digs) < len(ids):  # read after the checkpoint read: a commit since keeps it in
        cp = as_bytes(cp_raw).decode() if cp_raw else ""
        for _, ev, _raw in decode_entries(r.xrange(keys.stream(ns), min="(" + cp if cp
                                                   else "-", max="+") or [], ns):
            if not isinstance(ev, Undecodable) and ev.event_id not in digs:
                first.setdefault(ev.event_id, ev)
    key = eventdigest.store_key(r) if digs else b""
    for i, ev in enumerate(events):
        eid = ev.event_id
        if eid in digs:
            if digs[eid] != eventdigest.digest(key, ev):
                return i, eid
        elif eid in first:
            if eventdigest.canonical(first[eid]) != eventdigest.canonical(ev):
                return i, eid
        else:
            first[eid] = ev  # an earlier event of this write is what a later one must match
    return None

