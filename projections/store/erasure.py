"""Erasure: remove the content of erased notes from everything hivemind wrote in a namespace.

A ``note.erased`` is folded like any event (``projections.reduce``); this module then
redacts, once the read model has folded it (``redact`` checks that each note is erased):

- the event log: every entry carrying an erased note's content (``CONTENT_EVENTS`` with its
  ``note_id``, dead-lettered duplicates included) is rewritten into its redacted form
  (``events.schema.redacted``: same entry id and fields, ``text`` empty, no embedding,
  ``tokens`` explicit, ``redacted`` the digest of what was removed), so replaying the log
  gives the live state. A Redis stream cannot edit an entry in place: the stream is copied,
  redacted, into ``keys.rewrite`` with the same entry ids, then ``swap_stream.lua`` takes
  along whatever was appended meanwhile and RENAMEs the copy over the stream in one atomic
  step, keeping its last id and counters (concurrent appenders and the projector see the
  same ids before and after; nothing uses consumer groups on these streams, which a RENAME
  would drop);
- the dead letters (``keys.dead``): the same, for dead letters whose payload is such an event;
- the audit stream (``keys.audit``): every served query whose text is one of an erased
  note's versions (any revision's text; a note longer than a query's text: its first
  ``QUERY_TEXT_MAX`` characters) is rewritten in place, as the log is: same entry id, every
  field kept but ``text`` emptied and ``redacted`` set to the erased note's id (``query.served``
  is JSON: it is rewritten as JSON, its fields in order). Such queries come from whatever
  wrote them: a duplicate check of the note's own text, an agent's query quoting it;
- the query embeddings (``keys.query_embeddings``): every filed embedding equal to one of the
  erased note's embeddings, or filed under a redacted audit entry's ``embedding_digest``,
  keeps its entry id and digest, its ``value`` emptied and ``redacted`` set to the note id;
- result keys (``keys.result``) that show an erased note, or whose query text is one of its
  versions: replaced by an error object (code ``erased``) that keeps their TTL, so a waiting
  client gets an answer;
- anything else a caller knows of (``redact``'s ``also``: RQ's jobs, whose keys this layer
  does not own; ``api_stub.protocol.job_erasure``), given the versions found;
- the index snapshot (and drafts): deleted, after the erasure fence (``keys.erasure_fence``)
  was raised past the ``note.erased``, so no worker whose index predates it stores one again
  (``publish_snapshot.lua``);
- a ``memory://PATH`` store's file (``embedded.StreamLog.rewrite``): its records of the event
  log, the audit stream and the query embeddings, rewritten as above, crash-safely (new file,
  fsync, rename), and the backups ``fsck`` kept beside it.

Order makes it crash-safe: the note's versions are read from the log (and dead letters)
first, the keyed digests of their quotable texts filed (``keys.erased_texts``), every copy
derived from them is redacted, and only then the log itself (the
``memory://PATH`` file before the Redis stream, a copy of it). A crash at any point leaves
the ``note.erased`` and, until the last step, the versions in the log, so a rerun finds
what is left; a rerun after the log was redacted still finds the redacted audit entries'
embedding digests. Everything here is idempotent: running it again finds nothing left to
change.
"""

from __future__ import annotations

import hashlib
import hmac
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec

from hivemind_memory.events.codec import decode_event, encode_event
from hivemind_memory.events.errors import StoreError
from hivemind_memory.events.positions import format_pos
from hivemind_memory.events.schema import CONTENT_EVENTS, NoteCreated, NoteRevised, redacted
from hivemind_memory.projections.state import unpack_note
from hivemind_memory.projections.store import keys
from hivemind_memory.projections.store.audit_trail import (
    DIGEST_FIELD,
    REDACTED_FIELD,
    VALUE_FIELD,
)
from hivemind_memory.projections.store.eventdigest import ERASED, digest_key
from hivemind_memory.projections.store.log import FIELD
from hivemind_memory.projections.store.readmodel import checkpoint
from hivemind_memory.projections.store.results import AUDIT_FIELD
from hivemind_memory.projections.store.scripts import script
from hivemind_memory.projections.store.types import (
    Pipe,
    Store,
    StreamEntry,
    as_bytes,
    stream_entries,
)

CHUNK = 1000
"""Entries read (and copied) per round trip while rewriting a stream."""
SWAP_ATTEMPTS = 100
"""Swaps tried before giving up while writers keep appending content to redact."""
LEASE_MS = 120_000
"""Lifetime of the erasure lease of a namespace (renewed per chunk while rewriting)."""
LEASE_WAIT_S = 300.0
"""How long ``redact`` waits for another erasure of the namespace to finish."""
DEAD_RAW = b"raw"
"""The dead-letter field that holds the event's payload (``commit_batch.lua``)."""
ERASED_CODE = "erased"
"""Error code of a result that showed a note erased since."""
QUERY_TEXT_MAX = 16_384
"""Longest text of a query (``QueryRequest.text``): a query quoting a longer note quotes its
first this many characters (the duplicate check cuts the text there)."""
REDACTED_KEY = "redacted"
"""Field set on what an erasure rewrote outside the log: an audit entry's JSON key, a query
embedding entry's field; its value is the erased note's id."""


@dataclass
class Redaction:
    """What ``redact`` did in one namespace."""

    ns: str
    erased: list[str] = field(default_factory=list)
    """The notes whose content is now gone (they are erased in the read model)."""
    not_erased: list[str] = field(default_factory=list)
    """Notes asked for that the read model does not have erased: left untouched."""
    events: int = 0
    """Entries of the event log rewritten."""
    dead: int = 0
    """Dead letters rewritten."""
    results: int = 0
    """Result keys replaced by an ``erased`` error object."""
    snapshots: int = 0
    """Index snapshot keys (and drafts) deleted."""
    log_records: int = 0
    """Records of the ``memory://PATH`` files rewritten."""
    audit: int = 0
    """Audit entries whose query text (and filed embedding) was a version of an erased note."""
    embeddings: int = 0
    """Query embedding entries redacted."""
    jobs: int = 0
    """RQ jobs holding a version, deleted or rewritten (``redact``'s ``also``)."""
    fence: str = ""
    """The erasure fence after this erasure."""


def erasure_counts(red: Redaction) -> dict[str, int]:
    """What a redaction rewrote, by kind (for people and for JSON answers)."""
    return {"log_entries": red.events, "dead_letters": red.dead, "results": red.results,
            "snapshot_keys": red.snapshots, "file_records": red.log_records,
            "audit_entries": red.audit, "query_embeddings": red.embeddings, "jobs": red.jobs}


def redacted_copies(r: Store, ns: str, note_ids: Sequence[str]) -> dict[str, int]:
    """How many copies of ``note_ids``' content the namespace holds redacted now, whoever
    redacted them (an erase call, the redaction job the projector queues when it folds a
    ``note.erased``, an earlier erasure): the log's and the dead letters' content events of
    the notes in their redacted form, and the audit entries and query embeddings marked as
    redacted for them. Unlike ``erasure_counts`` (what one run rewrote), the same after
    every run; the copies an erasure deletes or anonymises (results, jobs, snapshots) leave
    nothing to count."""
    def events(key: str, name: bytes) -> int:
        return sum(ev.redacted is not None
                   for ev in _content_events(r, ns, key, name, note_ids))

    ids = {n.encode() for n in note_ids}
    embeddings = sum(e.fields.get(REDACTED_FIELD) in ids
                     for e in _entries(r, keys.query_embeddings(ns)))
    return {"log_entries": events(keys.stream(ns), FIELD),
            "dead_letters": events(keys.dead(ns), DEAD_RAW),
            "audit_entries": sum(1 for _ in _redacted_audit(r, ns, note_ids)),
            "query_embeddings": embeddings}


@dataclass
class Contents:
    """The content an erasure removes, as other copies may hold it: each version's text
    (and its first ``QUERY_TEXT_MAX`` characters), each version's embedding, and the
    embedding digests of audit entries redacted for the notes; each mapped to its note."""

    texts: dict[str, str] = field(default_factory=dict)
    embeddings: dict[tuple[float, ...], str] = field(default_factory=dict)
    digests: dict[str, str] = field(default_factory=dict)
    secret: bytes = b""
    """The store's digest secret (``digest_key``)."""
    hashed: dict[str, str] = field(default_factory=dict)
    """Keyed digests of the quotable texts (``keys.erased_texts``), this erasure's and those
    filed by an earlier run for the same notes (whose log may be redacted already)."""

    values: dict[bytes, str] = field(default_factory=dict)
    """Each version's metadata values (JSON) -> the note: a query's ``filter`` quoting one is
    redacted too."""

    def add(self, note_id: str, text: str, embedding: Sequence[float] | None,
            metadata: dict[str, Any] | None = None) -> None:
        if text:
            self.texts.setdefault(text, note_id)
            self.texts.setdefault(text[:QUERY_TEXT_MAX], note_id)
        if embedding:
            self.embeddings.setdefault(tuple(embedding), note_id)
        for v in (metadata or {}).values():
            self.values.setdefault(_json_str(v), note_id)

    def filter_quotes(self, flt: object) -> str | None:
        """The erased note one of whose metadata values a query's ``filter`` names (as a
        value, an operator's operand or one of an ``$in`` list), if any."""
        if not self.values or not isinstance(flt, dict):
            return None
        leaves: list[object] = []
        for cond in flt.values():
            ops = cond.values() if isinstance(cond, dict) else [cond]
            for operand in ops:
                leaves += operand if isinstance(operand, list) else [operand]
        for leaf in leaves:
            try:
                nid = self.values.get(_json_str(leaf))
            except (TypeError, msgspec.EncodeError):
                continue
            if nid is not None:
                return nid
        return None

    def text_digest(self, text: str) -> str:
        return hmac.new(self.secret, text.encode("utf-8"), hashlib.sha256).hexdigest()

    def quotes(self, text: object) -> str | None:
        """The erased note whose version ``text`` is, if any."""
        if not isinstance(text, str):
            return None
        nid = self.texts.get(text)
        if nid is None and self.hashed and self.secret:
            nid = self.hashed.get(self.text_digest(text))
        return nid

    only_hashed: bool = False
    """Some versions are known by their digest only (a rerun after the log was redacted): no
    byte pattern finds their quotes, every candidate must be decoded."""

    def __bool__(self) -> bool:
        return bool(self.texts or self.embeddings or self.digests or self.hashed)


_json_str = msgspec.json.encode
_floats = msgspec.json.Decoder(list[float]).decode


def note_contents(r: Store, ns: str, note_ids: Sequence[str]) -> Contents:
    """Every version of ``note_ids`` still in the log or the dead letters (read before they
    are redacted), and the embedding digests audit entries redacted for them recorded."""
    out = Contents()
    wanted = frozenset(note_ids)
    for key, name in ((keys.stream(ns), FIELD), (keys.dead(ns), DEAD_RAW)):
        for ev in _content_events(r, ns, key, name, note_ids):
            if ev.redacted is None:
                out.add(ev.note_id, ev.text, ev.embedding, ev.metadata)
    out.secret = digest_key(r)
    filed = {as_bytes(e.fields.get(DIGEST_FIELD, b"")).decode(): e.fields.get(b"note", b"")
             .decode() for e in _entries(r, keys.erased_texts(ns))}
    new = {d: n for d, n in ((out.text_digest(t), n) for t, n in out.texts.items())
           if d not in filed}
    if new:  # filed before anything is rewritten: a rerun finds the quotes by them
        p = r.pipeline(transaction=False)
        for d, n in new.items():
            p.xadd(keys.erased_texts(ns), {DIGEST_FIELD: d, b"note": n})
        p.execute()
    out.hashed = {d: n for d, n in {**filed, **new}.items() if n in wanted}
    out.only_hashed = len(out.hashed) > len({out.text_digest(t) for t in out.texts})
    for obj in _redacted_audit(r, ns, note_ids):
        digest = obj.get("embedding_digest")
        if isinstance(digest, str) and digest:
            out.digests.setdefault(digest, str(obj[REDACTED_KEY]))
    return out


def _redacted_audit(r: Store, ns: str, note_ids: Sequence[str]) -> Iterator[dict[str, Any]]:
    """The audit entries (decoded) an erasure of one of ``note_ids`` redacted."""
    wanted = frozenset(note_ids)
    mark = b'"' + REDACTED_KEY.encode() + b'":'
    for e in _entries(r, keys.audit(ns)):
        raw = e.fields.get(AUDIT_FIELD, b"")
        if mark in raw:
            obj = _json_obj(raw)
            if obj is not None and obj.get(REDACTED_KEY) in wanted:
                yield obj


def _content_events(r: Store, ns: str, key: str, name: bytes, note_ids: Sequence[str]
                    ) -> Iterator[NoteCreated | NoteRevised]:
    """The content events of ``ns`` about ``note_ids`` (redacted or not) that field ``name``
    of stream ``key``'s entries holds (the log, or the dead letters' payloads)."""
    wanted = frozenset(note_ids)
    found = needles(note_ids)
    for e in _entries(r, key):
        raw = e.fields.get(name)
        if raw is None or not any(n in raw for n in found):
            continue
        try:
            ev = decode_event(raw)
        except Exception:  # an entry this version cannot read carries no content
            continue
        if isinstance(ev, CONTENT_EVENTS) and ev.ns == ns and ev.note_id in wanted:
            assert isinstance(ev, NoteCreated | NoteRevised)
            yield ev


def _entries(r: Store, key: str) -> Iterator[StreamEntry]:
    start = "-"
    while True:
        got = stream_entries(r.xrange(key, min=start, max="+", count=CHUNK))
        if not got:
            return
        yield from got
        start = "(" + got[-1].id.decode()


def _json_obj(raw: bytes) -> dict[str, Any] | None:
    try:
        obj = msgspec.json.decode(raw)
    except msgspec.DecodeError:
        return None
    return obj if isinstance(obj, dict) else None


def text_marks(contents: Contents) -> list[bytes]:
    """Bytes every audit entry (JSON) whose text is one of the versions contains (any text,
    when some versions are known by their digest only)."""
    if contents.only_hashed:
        return [b'"text":']
    marks = [b'"text":' + _json_str(t) for t in contents.texts]
    return [*marks, b'"filter":{'] if contents.values else marks


def audit_change(contents: Contents) -> Callable[[bytes], bytes | None]:
    """The redaction of one audit entry's JSON: the same object with ``text`` emptied and
    ``redacted`` naming the note, when its text is one of the versions; else None. Records
    the entry's ``embedding_digest`` in ``contents`` (its filed embedding goes too)."""
    marks = text_marks(contents)

    def change(raw: bytes) -> bytes | None:
        if not any(m in raw for m in marks):  # cheap: most queries quote no erased note
            return None
        obj = _json_obj(raw)
        if obj is None or obj.get(REDACTED_KEY):
            return None
        nid = contents.quotes(obj.get("text"))
        by_filter = contents.filter_quotes(obj.get("filter"))
        if nid is None and by_filter is None:
            return None
        if nid is not None:
            digest = obj.get("embedding_digest")
            if isinstance(digest, str) and digest:
                contents.digests.setdefault(digest, nid)
            obj["text"] = ""
        if by_filter is not None:  # the filter named a metadata value of the note
            obj["filter"] = None
        obj[REDACTED_KEY] = nid or by_filter
        return _json_str(obj)

    return change


def embedding_change(contents: Contents
                     ) -> Callable[[dict[bytes, bytes]], dict[bytes, bytes] | None]:
    """The redaction of one query-embedding entry: digest kept, ``value`` emptied,
    ``redacted`` naming the note, when it is one of the versions' embeddings or was filed
    for a redacted audit entry; else None."""
    red = REDACTED_FIELD

    def change(fields: dict[bytes, bytes]) -> dict[bytes, bytes] | None:
        if red in fields:
            return None
        digest = fields.get(DIGEST_FIELD, b"").decode("utf-8", "replace")
        nid = contents.digests.get(digest)
        if nid is None and contents.embeddings:
            try:
                nid = contents.embeddings.get(tuple(_floats(fields.get(VALUE_FIELD, b""))))
            except (msgspec.DecodeError, msgspec.ValidationError):
                nid = None
        if nid is None:
            return None
        return {DIGEST_FIELD: fields.get(DIGEST_FIELD, b""), VALUE_FIELD: b"",
                red: nid.encode()}

    return change


def embedding_marks(contents: Contents) -> list[bytes]:
    """Bytes a query-embedding entry to redact contains (its digest, or its JSON value)."""
    return [d.encode() for d in contents.digests] + \
        [_json_str(list(v)) for v in contents.embeddings]


def needles(note_ids: Sequence[str]) -> list[bytes]:
    """The bytes every encoded event about one of ``note_ids`` contains: the msgpack of its
    ``note_id`` field and value, as ``encode_event`` writes them (side by side)."""
    key = msgspec.msgpack.encode("note_id")
    return [key + msgspec.msgpack.encode(n) for n in dict.fromkeys(note_ids)]


def content_change(ns: str, note_ids: Sequence[str], key: bytes
                   ) -> Callable[[bytes], bytes | None]:
    """The redaction of one encoded event: its redacted encoding (digest keyed with ``key``)
    when it is a content event of ``ns`` about one of ``note_ids`` that is not redacted yet,
    else None (unchanged)."""
    wanted = frozenset(note_ids)
    found = needles(note_ids)

    def change(raw: bytes) -> bytes | None:
        if not any(n in raw for n in found):  # cheap: most entries are not about them
            return None
        try:
            ev = decode_event(raw)
        except Exception:  # an entry this version cannot read carries no event to redact
            return None
        if not isinstance(ev, CONTENT_EVENTS) or ev.ns != ns or ev.note_id not in wanted:
            return None
        assert isinstance(ev, NoteCreated | NoteRevised)
        if ev.redacted is not None:
            return None
        return encode_event(redacted(ev, key))

    return change


class _Lease:
    """The namespace's erasure lease (one rewrite at a time), renewed while in use."""

    def __init__(self, r: Store, ns: str) -> None:
        self.r, self.ns, self.token = r, ns, uuid.uuid4().hex

    def take(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        delay = 0.01
        while not self.r.set(keys.erasing(self.ns), self.token, nx=True, px=LEASE_MS):
            if time.monotonic() >= deadline:
                raise StoreError(f"namespace {self.ns!r}: another erasure held the erasure "
                                 f"lease for {timeout_s:g}s; try again")
            time.sleep(delay)  # a lease held by another process: no event wakes us
            delay = min(delay * 2, 0.5)

    def renew(self) -> None:
        if not script(self.r, "renew_lease")(keys=[keys.erasing(self.ns)],
                                             args=[self.token, LEASE_MS]):
            raise StoreError(f"namespace {self.ns!r}: the erasure lease was lost "
                             "(expired mid-rewrite); run the erasure again")

    def release(self) -> None:
        script(self.r, "renew_lease")(keys=[keys.erasing(self.ns)], args=[self.token, 0])


EntryChange = Callable[[dict[bytes, bytes]], dict[bytes, bytes] | None]
"""The redaction of one stream entry: its new fields, or None (unchanged)."""


def field_change(name: bytes, change: Callable[[bytes], bytes | None]) -> EntryChange:
    """An ``EntryChange`` that rewrites the one field ``name`` with ``change``."""

    def entry(fields: dict[bytes, bytes]) -> dict[bytes, bytes] | None:
        raw = fields.get(name)
        if raw is None:
            return None
        new = change(raw)
        return None if new is None else {**fields, name: new}

    return entry


def _copy(r: Store, key: str, tmp: str, after: bytes | None, change: EntryChange,
          lease: _Lease) -> tuple[bytes | None, int]:
    """Copy ``key``'s entries after ``after`` (None: all) into ``tmp`` with their own ids,
    redacted; (id of the last entry copied, entries changed)."""
    last, changed = after, 0
    while True:
        start = "-" if last is None else "(" + last.decode()
        got = stream_entries(r.xrange(key, min=start, max="+", count=CHUNK))
        if not got:
            return last, changed
        p = r.pipeline(transaction=False)
        for e in got:
            new = change(e.fields)
            changed += new is not None
            p.xadd(tmp, new or e.fields, id=e.id)  # type: ignore[arg-type]
        p.execute()
        last = got[-1].id
        lease.renew()


def _needs_change(r: Store, key: str, change: EntryChange) -> bool:
    """Whether any entry of ``key`` would change (read only: a rerun writes nothing)."""
    return any(change(e.fields) is not None for e in _entries(r, key))


def rewrite_stream(r: Store, ns: str, key: str, name: bytes, note_ids: Sequence[str],
                   lease: _Lease) -> int:
    """Rewrite stream ``key`` of ``ns`` with field ``name`` of each entry redacted (see the
    module docstring); how many entries changed (0: the stream was left as it is)."""
    change = field_change(name, content_change(ns, note_ids, digest_key(r)))
    return rewrite_entries(r, ns, key, change, needles(note_ids), lease)


def rewrite_entries(r: Store, ns: str, key: str, change: EntryChange, marks: list[bytes],
                    lease: _Lease) -> int:
    """Rewrite stream ``key`` of ``ns`` with each entry ``change`` changes redacted, in place
    (same ids, ``swap_stream.lua``); an entry appended meanwhile that holds one of ``marks``
    is copied redacted too. How many entries changed (0: the stream was left as it is)."""
    if not _needs_change(r, key, change):
        return 0
    tmp = keys.rewrite(ns)
    for _ in range(SWAP_ATTEMPTS):
        r.delete(tmp)
        last, changed = _copy(r, key, tmp, None, change, lease)
        if last is None:
            return 0
        for _ in range(SWAP_ATTEMPTS):
            done, _ = script(r, "swap_stream")(keys=[key, tmp], args=[last, *marks])
            if int(done) == 1:
                return changed
            if int(done) == -1:
                break  # entries were deleted meanwhile: copy afresh
            got, more = _copy(r, key, tmp, last, change, lease)
            last, changed = got or last, changed + more
    r.delete(tmp)
    raise StoreError(f"namespace {ns!r}: {key} kept changing under {SWAP_ATTEMPTS} attempts "
                     "to swap in its redacted copy; run the erasure again")


def forget_digests(r: Store, ns: str, note_ids: Sequence[str]) -> int:
    """Set the ``event_digests`` of the content events of ``note_ids`` in ``ns``'s log to
    ``eventdigest.ERASED``: the keyed digest of an erased text goes too, and the original
    event resent is refused (409 ``event_id_conflict``), never taken for a retry. How many
    were set (a rerun sets them again)."""
    ids = [ev.event_id for ev in _content_events(r, ns, keys.stream(ns), FIELD, note_ids)]
    if ids:
        r.hset(keys.event_digests(ns), mapping=dict.fromkeys(ids, ERASED))
    return len(ids)


def filed_texts(r: Store, ns: str) -> dict[str, str]:
    """The keyed digests of erased texts (``keys.erased_texts``) -> the erased note."""
    return {as_bytes(e.fields.get(DIGEST_FIELD, b"")).decode(): as_bytes(
        e.fields.get(b"note", b"")).decode() for e in _entries(r, keys.erased_texts(ns))}


def quoted_in(filed: dict[str, str], secret: bytes, texts: Sequence[str]) -> list[str]:
    """The erased notes of ``filed`` (``filed_texts``) one of whose versions is one of
    ``texts`` (a query's text: whole, or a long note's first ``QUERY_TEXT_MAX`` characters),
    sorted; ``secret``: the store's digest secret."""
    if not filed:
        return []
    probe = Contents(secret=secret)
    return sorted({n for t in set(texts) if (n := filed.get(probe.text_digest(t)))})


def stage_fence_read(p: Pipe, ns: str) -> None:
    """Queue on ``p`` a read of how many erased texts ``ns`` has filed (``keys.erased_texts``;
    its reply second to last) and of its erasure fence (its reply last), read in the same
    MULTI as the writes staged before them."""
    p.xlen(keys.erased_texts(ns))
    p.get(keys.erasure_fence(ns))


def erased_notes(r: Store, ns: str, note_ids: Sequence[str]) -> tuple[list[str], list[str]]:
    """Those of ``note_ids`` the read model has erased, and the others (in order)."""
    ids = list(dict.fromkeys(note_ids))
    blobs = r.hmget(keys.notes(ns), ids) if ids else []
    yes: list[str] = []
    no: list[str] = []
    for nid, b in zip(ids, blobs, strict=True):
        (yes if b is not None and unpack_note(as_bytes(b)).erased else no).append(nid)
    return yes, no


def _shows(body: bytes, note_ids: frozenset[str], contents: Contents | None) -> bool:
    """Whether a result's JSON shows (or lists as a candidate) one of ``note_ids``, or
    answers a query whose text is one of ``contents``' versions."""
    if not any(n.encode() in body for n in note_ids) and (
            contents is None or (not contents.only_hashed
            and not any(_json_str(t) in body for t in contents.texts))):
        return False
    try:
        obj = msgspec.json.decode(body)
    except msgspec.DecodeError:
        return True  # unreadable, yet it names the note: treat as showing it
    if not isinstance(obj, dict):
        return True
    if contents is not None and (contents.quotes(obj.get("text")) is not None
                                 or contents.filter_quotes(obj.get("filter")) is not None):
        return True
    rows = [*(obj.get("notes") or []), *(obj.get("candidates") or [])]
    return any(isinstance(x, dict) and x.get("note_id") in note_ids for x in rows)


def redact_results(r: Store, ns: str, note_ids: Sequence[str],
                   contents: Contents | None = None) -> int:
    """Replace every result key of ``ns`` that shows one of ``note_ids`` (or whose query text
    is one of ``contents``' versions) by an error object (code ``erased``, TTL kept); how
    many."""
    wanted = frozenset(note_ids)
    quoted = contents
    prefix = keys.result(ns, "")
    n = 0
    batch: list[bytes] = []

    def flush() -> int:
        if not batch:
            return 0
        bodies = r.mget(batch)
        done = 0
        p = r.pipeline(transaction=False)
        for k, body in zip(batch, bodies, strict=True):
            if body is None or not _shows(as_bytes(body), wanted, quoted):
                continue
            qid = k.decode()[len(prefix):]
            p.set(k, erased_result(qid), keepttl=True, xx=True)
            done += 1
        p.execute()
        batch.clear()
        return done

    for k in r.scan_iter(match=prefix + "*", count=1000):
        batch.append(as_bytes(k))
        if len(batch) >= CHUNK:
            n += flush()
    return n + flush()


def erased_result(query_id: str) -> bytes:
    """The error object that replaces an answer an erasure touched."""
    return msgspec.json.encode({"query_id": query_id, "error": {
        "code": ERASED_CODE,
        "message": "this answer showed a note that was erased since; ask again"}})


def drop_snapshots(r: Store, ns: str) -> int:
    """Delete the namespace's index snapshots and drafts (of every layout); how many keys."""
    found = [keys.index_snapshot(ns), *keys.old_index_snapshots(ns)]
    found += [as_bytes(k).decode() for k in
              r.scan_iter(match=keys.index_snapshot_draft(ns, "*"), count=1000)]
    return sum(int(r.delete(k)) for k in found)


def raise_fence(r: Store, ns: str) -> str:
    """Raise the erasure fence to the namespace's checkpoint (past every ``note.erased`` the
    read model has folded); the fence afterwards."""
    pos = format_pos(checkpoint(r, ns))
    return as_bytes(script(r, "raise_fence")(keys=[keys.erasure_fence(ns)], args=[pos])
                    ).decode()


def redact(r: Store, ns: str, note_ids: Sequence[str],
           lease_wait_s: float = LEASE_WAIT_S,
           also: Callable[[Contents], int] | None = None) -> Redaction:
    """Redact the content of ``note_ids`` everywhere hivemind wrote it in ``ns``, for those
    the read model has erased (the caller waits for the projector to fold the
    ``note.erased`` first); the others are reported in ``not_erased`` and left alone.
    ``also`` redacts the copies this layer does not own (RQ's jobs) given the versions, and
    says how many it changed; it runs before the log is redacted."""
    out = Redaction(ns)
    out.erased, out.not_erased = erased_notes(r, ns, note_ids)
    if not out.erased:
        return out
    lease = _Lease(r, ns)
    lease.take(lease_wait_s)
    try:
        out.fence = raise_fence(r, ns)  # first: no older index stores a snapshot from now on
        contents = note_contents(r, ns, out.erased)  # before the log loses them
        if contents.texts or contents.hashed:
            out.audit = rewrite_entries(r, ns, keys.audit(ns),
                                        field_change(AUDIT_FIELD, audit_change(contents)),
                                        text_marks(contents), lease)
        if contents.embeddings or contents.digests:
            out.embeddings = rewrite_entries(r, ns, keys.query_embeddings(ns),
                                             embedding_change(contents),
                                             embedding_marks(contents), lease)
        out.results = redact_results(r, ns, out.erased, contents)
        if also is not None and contents:
            out.jobs = also(contents)
        out.log_records = _rewrite_file(r, ns, out.erased, contents)  # before the log
        forget_digests(r, ns, out.erased)
        out.events = rewrite_stream(r, ns, keys.stream(ns), FIELD, out.erased, lease)
        out.dead = rewrite_stream(r, ns, keys.dead(ns), DEAD_RAW, out.erased, lease)
        out.snapshots = drop_snapshots(r, ns)
    finally:
        lease.release()
    return out


def _rewrite_file(r: Store, ns: str, erased: Sequence[str], contents: Contents) -> int:
    """Rewrite a ``memory://PATH`` store's file (0: not such a store, or nothing to do): its
    records of the event log, the audit stream and the query embeddings."""
    from hivemind_memory.projections.store.embedded import (  # fakeredis: not for plain Redis
        stream_log_of,
    )

    slog = stream_log_of(r)
    if slog is None:
        return 0
    events = field_change(FIELD, content_change(ns, erased, digest_key(r)))
    audit = field_change(AUDIT_FIELD, audit_change(contents))
    embeddings = embedding_change(contents)
    by_key = {keys.stream(ns).encode(): events, keys.audit(ns).encode(): audit,
              keys.query_embeddings(ns).encode(): embeddings}

    def on_record(key: bytes, fields: list[bytes]) -> list[bytes] | None:
        change = by_key.get(key)
        if change is None or len(fields) % 2:
            return None
        new = change(dict(zip(fields[::2], fields[1::2], strict=True)))
        return None if new is None else [x for kv in new.items() for x in kv]

    return slog.rewrite(on_record)
