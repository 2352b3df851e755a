"""An erasure's part in RQ's keys: the query jobs whose payload quotes an erased note.

A query job carries its queries' requests (``Envelope``: text, embedding) in RQ's job hash
(``rq:job:<id>``, field ``data``: the JSON payload, zlib-compressed), kept while the job is
queued or running and ``JOB_RESULT_TTL`` / ``JOB_FAILURE_TTL`` seconds after it ended. An
erasure (``projections.store.erasure.redact``, through its ``also``) hands this module the
erased note's versions; every query job of the namespace with a query whose text is one of
them (or whose embedding is one of the note's) is then:

- ended (finished, failed, stopped, canceled): deleted with its results (``Job.delete``);
- waiting (queued, deferred, scheduled): its quoting queries are taken out of the payload
  (the job deleted when none is left) and each gets an ``erased`` error at its result key, so
  a waiting client has its answer;
- running: its quoting queries are taken out of the stored payload (a retry would not run
  them); the running worker answers them as it holds them (an answer it publishes after the
  erasure is audited with the text: erase again to redact it).

Idempotent: a rerun finds no job left that quotes the note.
"""

from __future__ import annotations

import zlib
from typing import Any

from rq.job import Job

from hivemind_memory.api_stub.protocol.jobs import QUERY_JOB
from hivemind_memory.api_stub.protocol.serializer import JSONSerializer
from hivemind_memory.projections.store import results
from hivemind_memory.projections.store.erasure import Contents, erased_result
from hivemind_memory.projections.store.types import QueueConn, Store, as_bytes

SCAN_COUNT = 1000
"""Keys asked for per SCAN step over RQ's job hashes."""
ENDED = frozenset({b"finished", b"failed", b"stopped", b"canceled"})
"""RQ job statuses after which the job never runs again."""
WAITING = frozenset({b"queued", b"deferred", b"scheduled"})
"""RQ job statuses of a job that has not started yet."""


def _quotes(env: Any, ns: str, contents: Contents) -> bool:
    """Whether one envelope (as the job holds it) is a query of ``ns`` quoting a version."""
    req = env.get("request") if isinstance(env, dict) else None
    if not isinstance(req, dict) or req.get("ns") != ns:
        return False
    if contents.quotes(req.get("text")) is not None \
            or contents.filter_quotes(req.get("filter")) is not None:
        return True
    emb = req.get("embedding")
    if isinstance(emb, list) and contents.embeddings:
        try:
            return tuple(float(x) for x in emb) in contents.embeddings
        except (TypeError, ValueError):
            return False
    return False


def _payload(raw: bytes) -> bytes:
    try:
        return zlib.decompress(raw)
    except zlib.error:
        return raw


def redact_jobs(conn: QueueConn, store: Store, ns: str, contents: Contents,
                result_ttl: int) -> int:
    """Delete or rewrite the query jobs that quote one of ``contents``' versions (see the
    module docstring); how many jobs changed."""
    prefix = Job.redis_job_namespace_prefix.encode()
    marks = [b'"text":'] if contents.only_hashed else \
        [JSONSerializer.dumps(t) for t in contents.texts] + \
        [JSONSerializer.dumps(list(v)) for v in contents.embeddings] + \
        ([b'"filter":'] if contents.values else [])
    changed = 0
    for k in conn.scan_iter(match=prefix + b"*", count=SCAN_COUNT):
        key = as_bytes(k)
        job_id = key[len(prefix):]
        if b":" in job_id or conn.type(key) != b"hash":  # :dependents and the like
            continue
        status, raw = conn.hmget(key, ["status", "data"])
        if raw is None:
            continue
        data = _payload(as_bytes(raw))
        if not any(m in data for m in marks):  # cheap: most jobs quote no erased note
            continue
        try:
            func, instance, args, kwargs = JSONSerializer.loads(data)
        except (ValueError, TypeError):
            continue
        if func != QUERY_JOB or not args or not isinstance(args[0], list):
            continue
        envs: list[Any] = args[0]
        hit = [e for e in envs if _quotes(e, ns, contents)]
        if not hit:
            continue
        keep = [e for e in envs if not _quotes(e, ns, contents)]
        state = None if status is None else as_bytes(status)
        if state in ENDED or (state in WAITING and not keep):
            Job.fetch(job_id.decode(), connection=conn, serializer=JSONSerializer).delete()
        else:
            new = JSONSerializer.dumps([func, instance, [keep, *args[1:]], kwargs])
            conn.hset(key, "data", zlib.compress(new))
        if state not in ENDED and state != b"started":
            qids = [str(e.get("query_id", "")) for e in hit]
            results.write_results(store, ns, {q: erased_result(q) for q in qids}, result_ttl)
        changed += 1
    return changed
