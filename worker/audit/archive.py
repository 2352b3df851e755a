"""``hivemind export`` / ``hivemind import``: a namespace's log (and, on request, its audit
trail) as JSON Lines, so an archive replays on another Redis with the same answers.

Event lines are exactly what ``hivemind ingest`` accepts (original ``event_id`` and ``at``, in
log order; unset optional fields left out). With ``--with-audit`` three more line types follow:
``ranking.config`` (``digest``, ``config``), ``query.embedding`` (``digest``, ``embedding``;
one an erasure emptied: ``embedding`` null and ``redacted``, the erased note's id) and
``query.served`` (the audit event, its log positions given as ``log_index`` / ``seen_index`` =
how many of the file's event lines precede or are at that position, because stream ids are
assigned anew on the target). ``import`` appends the events in order and maps the indexes back
to the new stream ids, so each served query's state is the same log prefix.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import IO, Any

import msgspec

from hivemind_memory.api_stub.protocol.messages import QueryServed, encode, ns_of
from hivemind_memory.events.codec import parse_json_event
from hivemind_memory.events.errors import EventError, HivemindError
from hivemind_memory.events.positions import ZERO, Position, format_pos, parse_pos
from hivemind_memory.events.schema import EVENT_TYPES, Event
from hivemind_memory.projections.ranking.config import RankingConfig
from hivemind_memory.projections.reduce import Undecodable
from hivemind_memory.projections.store import audit_trail as audit_store
from hivemind_memory.projections.store.log import append, iter_all
from hivemind_memory.projections.store.log import length as log_length
from hivemind_memory.projections.store.readmodel import decode_entry
from hivemind_memory.projections.store.types import Store
from hivemind_memory.worker.audit.reproduce import all_served

CHUNK = 1000
"""Events per pipelined append on import."""
_served_fields = set(QueryServed.__struct_fields__)


class ArchiveError(HivemindError):
    """An archive line that ``import`` cannot restore (the message names the line)."""


@dataclass
class ExportReport:
    events: int = 0
    skipped: int = 0
    """Log entries this version cannot decode (left out of the archive)."""
    served: int = 0
    configs: int = 0


def _event_line(ev: Event) -> bytes:
    d = {k: v for k, v in msgspec.to_builtins(ev).items() if v is not None}
    return msgspec.json.encode(d)


def _log(r: Store, ns: str, until_ms: int | None) -> Iterator[tuple[Position, Event | None]]:
    for entry in iter_all(r, ns):
        pos = parse_pos(entry.id)
        if until_ms is not None and pos.ms > until_ms:
            return
        ev, _ = decode_entry(entry.fields, ns)
        yield pos, None if isinstance(ev, Undecodable) else ev


def export(r: Store, ns: str, out: IO[bytes], *, until: datetime | None = None,
           with_audit: bool = False,
           on_entry: Callable[[], object] | None = None) -> ExportReport:
    """Write the namespace's log (entries appended up to ``until``: a prefix of the log) and,
    with ``with_audit``, its config history, query embeddings and the audit entries written
    up to ``until``."""
    until_ms = None if until is None else int(until.timestamp() * 1000)
    rep = ExportReport()
    positions: list[Position] = []
    for pos, ev in _log(r, ns, until_ms):
        if on_entry is not None:
            on_entry()  # a progress tick per log entry
        if ev is None:
            rep.skipped += 1
            continue
        out.write(_event_line(ev) + b"\n")
        positions.append(pos)
        rep.events += 1
    if not with_audit:
        return rep
    for digest, raw in dict.fromkeys(audit_store.read_configs(r, ns)):
        out.write(encode({"type": "ranking.config", "digest": digest,
                          "config": msgspec.json.decode(raw)}) + b"\n")
        rep.configs += 1
    for digest, raw in dict.fromkeys(audit_store.read_embeddings(r, ns)):
        out.write(encode({"type": "query.embedding", "digest": digest,
                          "embedding": msgspec.json.decode(raw)}) + b"\n")
    for digest, nid in audit_store.redacted_embeddings(r, ns).items():  # emptied by erasures
        out.write(encode({"type": "query.embedding", "digest": digest, "embedding": None,
                          "redacted": nid}) + b"\n")
    for x in all_served(r, ns):
        if until_ms is not None and parse_pos(x.audit_id).ms > until_ms:
            break
        d = msgspec.to_builtins(x.event)
        d["log_index"] = bisect.bisect_right(positions, parse_pos(x.event.position))
        d["seen_index"] = bisect.bisect_right(positions, parse_pos(x.event.seen)) \
            if x.event.seen else -1
        out.write(encode(d) + b"\n")
        rep.served += 1
    return rep


@dataclass
class ImportReport:
    events: int = 0
    served: int = 0
    configs: int = 0
    embeddings: int = 0
    namespaces: set[str] = field(default_factory=set)


@dataclass
class _Parsed:
    events: int = 0
    nss: set[str] = field(default_factory=set)
    configs: dict[str, bytes] = field(default_factory=dict)
    embeddings: dict[str, bytes] = field(default_factory=dict)
    redacted: dict[str, str] = field(default_factory=dict)
    """Embeddings an erasure emptied: digest -> the erased note."""
    served: list[tuple[int, dict[str, Any]]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def _parse(fh: IO[bytes]) -> _Parsed:
    got = _Parsed()
    for lineno, line in enumerate(fh, start=1):
        if not line.strip():
            continue
        try:
            obj = msgspec.json.decode(line)
            typ = obj.get("type") if isinstance(obj, dict) else None
            if typ in EVENT_TYPES:
                got.nss.add(parse_json_event(line, lineno).ns)
                got.events += 1
            elif typ == "ranking.config":
                cfg = msgspec.convert(obj["config"], RankingConfig)
                got.configs[str(obj["digest"])] = encode(cfg)
            elif typ == "query.embedding" and obj.get("redacted") is not None:
                got.redacted[str(obj["digest"])] = msgspec.convert(obj["redacted"], str)
            elif typ == "query.embedding":
                emb = msgspec.convert(obj["embedding"], list[float])
                got.embeddings[str(obj["digest"])] = encode(emb)
            elif typ == "query.served":
                ix = {k: int(obj.pop(k)) for k in ("log_index", "seen_index")}
                msgspec.convert(obj, QueryServed)  # validate now, map positions later
                got.served.append((lineno, {**obj, **ix}))
            else:
                raise ArchiveError(f"line {lineno}: unknown line type {typ!r}")
        except EventError as exc:
            got.errors.append(str(exc))
        except ArchiveError as exc:
            got.errors.append(str(exc))
        except (msgspec.DecodeError, msgspec.ValidationError, KeyError, TypeError,
                ValueError) as exc:
            got.errors.append(f"line {lineno}: invalid archive line: {exc}")
    return got


def import_archive(r: Store, path: str, *, on_chunk: Callable[[set[str]], None] | None = None,
                   on_error: Callable[[str], None]) -> ImportReport | None:
    """Restore an archive (all or nothing: None after reporting every bad line). An archive
    with audit lines is restored into a namespace whose log is empty, so its positions map."""
    with open(path, "rb") as fh:
        got = _parse(fh)
    if got.served or got.configs or got.embeddings or got.redacted:
        if len(got.nss) > 1:
            got.errors.append("an archive with audit lines must hold one namespace, found "
                              + ", ".join(sorted(got.nss)))
        for lineno, d in got.served:
            ns = ns_of(str(d["query_id"]))
            if got.nss and ns not in got.nss:
                got.errors.append(f"line {lineno}: query {d['query_id']} is not of the "
                                  f"archive's namespace")
        for ns in sorted(got.nss):
            n = log_length(r, ns)
            if n:
                got.errors.append(f"namespace {ns} already has {n} event(s): an archive with "
                                  "audit lines must be imported into an empty namespace")
    for e in got.errors:
        on_error(e)
    if got.errors:
        return None
    wanted = {d[k] for _, d in got.served for k in ("log_index", "seen_index") if d[k] > 0}
    at_index: dict[int, str] = {}
    rep = ImportReport(namespaces=set(got.nss))
    chunk: list[Event] = []

    def flush() -> None:
        if not chunk:
            return
        ids = append(r, chunk)
        for i, eid in enumerate(ids, start=rep.events + 1):
            if i in wanted:
                at_index[i] = eid
        rep.events += len(chunk)
        if on_chunk is not None:
            on_chunk({e.ns for e in chunk})
        chunk.clear()

    with open(path, "rb") as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            typ = msgspec.json.decode(line).get("type")
            if typ in EVENT_TYPES:
                chunk.append(parse_json_event(line, lineno))
                if len(chunk) >= CHUNK:
                    flush()
    flush()

    def pos_of(i: int) -> str:
        return at_index[i] if i > 0 else format_pos(ZERO)

    events: list[bytes] = []
    for _, d in got.served:
        li, si = d.pop("log_index"), d.pop("seen_index")
        d["position"] = pos_of(li)
        d["seen"] = pos_of(si) if si >= 0 else ""
        events.append(encode(msgspec.convert({k: v for k, v in d.items()
                                              if k in _served_fields or k == "type"},
                                             QueryServed)))
    target = sorted(got.nss) or [ns_of(str(d["query_id"])) for _, d in got.served[:1]]
    if target and (got.served or got.configs or got.embeddings or got.redacted):
        audit_store.restore(r, target[0], list(got.configs.items()),
                            list(got.embeddings.items()), events, got.redacted)
        rep.namespaces.add(target[0])
    rep.served, rep.configs, rep.embeddings = len(events), len(got.configs), len(got.embeddings)
    return rep
