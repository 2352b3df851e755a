"""The copies an erasure reaches besides the log (``projections.store.erasure`` and
``api_stub.protocol.job_erasure``), on the embedded store: which queries count as quoting a
version (whole texts only; a long note's first ``QUERY_TEXT_MAX`` characters; an embedding
equal to one of the note's), what each RQ job status gets, and a crash at any step finished by
a rerun."""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from typing import Any

import fakeredis
import msgspec
import pytest

from hivemind_memory.api_stub.client import Client
from hivemind_memory.api_stub.protocol import jobs
from hivemind_memory.api_stub.protocol.job_erasure import redact_jobs
from hivemind_memory.api_stub.protocol.settings import Settings
from hivemind_memory.projections.store import erasure, keys
from hivemind_memory.projections.store.erasure import QUERY_TEXT_MAX
from hivemind_memory.worker import runtime
from hivemind_memory.worker.loop import run_worker
from hivemind_memory.worker.projector import ensure_projected
from tests.support.factories import created, revised

SECRET = "the door code is 4471 " + "x" * (QUERY_TEXT_MAX - 10)  # longer than a query
SECRET2 = "the door code is now 9902"
EMB = [0.5, -0.25, 0.125]


@pytest.fixture
def env() -> Iterator[tuple[Any, Client, runtime.Runtime]]:
    r = fakeredis.FakeRedis(server=fakeredis.FakeServer())
    s = Settings()
    rt = runtime.build(s, r, r)
    runtime.install(rt)
    c = Client(r, r, settings=s)
    c.append([created("s", text=SECRET, embedding=EMB),
              revised("s", "r1", text=SECRET2),
              created("k", text="keep the deploy runbook")])
    yield r, c, rt
    r.close()


def _serve(c: Client, rt: runtime.Runtime, reqs: list[dict[str, Any]]) -> list[str]:
    qids = c.submit_batch([{"ns": "t", "budget": 50, **q} for q in reqs])
    assert run_worker(rt, burst=True) == 0
    return qids


def _erase(r: Any, c: Client) -> erasure.Redaction:
    def catch_up(ns: str, target: Any, timeout_s: float) -> None:
        ensure_projected(r, ns, target, Settings(), timeout_s)

    return c.erase("t", ["s"], catch_up=catch_up).redaction


def _audit_texts(r: Any) -> dict[str, tuple[str, str]]:
    out = {}
    for _, f in r.xrange(keys.audit("t")):
        e = msgspec.json.decode(f[b"d"])
        out[e["query_id"]] = (e["text"], e.get("redacted", ""))
    return out


def test_a_query_quotes_a_version_only_whole(env: tuple[Any, Client, runtime.Runtime]) -> None:
    r, c, rt = env
    quoting = {"v0-cut": SECRET[:QUERY_TEXT_MAX], "v1": SECRET2, "emb": "anything else"}
    not_quoting = {"v0-shorter": SECRET[:QUERY_TEXT_MAX - 1], "v1-more": SECRET2 + " ok",
                   "v1-part": SECRET2[:-1], "plain": "door code"}
    reqs = [{"text": t} for t in [*quoting.values(), *not_quoting.values()]]
    reqs[2]["embedding"] = EMB  # the note's embedding, under another text
    reqs.append({"text": "an embedding off by one ulp",
                 "embedding": [0.5, -0.25, 0.12500000000000003]})
    qids = _serve(c, rt, reqs)
    showed = [any(n["note_id"] == "s" for n in msgspec.json.decode(
        r.get(keys.result("t", q)))["notes"]) for q in qids]
    red = _erase(r, c)
    got = _audit_texts(r)
    assert [got[q][1] for q in qids[:2]] == ["s", "s"] and got[qids[0]][0] == ""
    assert got[qids[1]][0] == ""
    assert [got[q] for q in qids[3:7]] == [(t, "") for t in not_quoting.values()]
    assert red.audit == 2
    # the embedding: its entry emptied (filed once, by digest), the off-by-one one kept
    emb = {f[b"digest"]: f for _, f in r.xrange(keys.query_embeddings("t"))}
    assert sorted(f.get(b"redacted", b"") for f in emb.values()) == [b"", b"s"]
    assert red.embeddings == 1
    kept = [f for f in emb.values() if b"redacted" not in f]
    assert msgspec.json.decode(kept[0][b"value"]) == [0.5, -0.25, 0.12500000000000003]
    # the results: those quoting a version's text, or showing the note, are erased errors
    bodies = [msgspec.json.decode(r.get(keys.result("t", q))) for q in qids]
    erased_now = ["error" in b and b["error"]["code"] == "erased" for b in bodies]
    assert erased_now == [i < 2 or showed[i] for i in range(len(qids))]
    assert not all(erased_now[2:])  # some kept
    # a rerun finds nothing left
    again = _erase(r, c)
    assert (again.audit, again.embeddings, again.results, again.jobs, again.events) == \
        (0, 0, 0, 0, 0)


def _job(r: Any, status: bytes, texts: list[str]) -> tuple[str, list[str]]:
    """A query job holding queries of ``texts``, with ``status``."""
    q = jobs.queue(r, jobs.QUERY_QUEUE, Settings())
    envs = [{"query_id": f"t.q{i}-{status.decode()}", "position": "0-0",
             "request": {"ns": "t", "text": t, "budget": 5}} for i, t in enumerate(texts)]
    job = q.enqueue(jobs.QUERY_JOB, envs)
    r.hset(keys_of(job.id), "status", status)
    return job.id, [e["query_id"] for e in envs]


def keys_of(job_id: str) -> str:
    return f"rq:job:{job_id}"


def _payload(r: Any, job_id: str) -> list[str]:
    data = zlib.decompress(r.hget(keys_of(job_id), "data"))
    return [e["request"]["text"] for e in msgspec.json.decode(data)[2][0]]


@pytest.mark.parametrize(("status", "mixed", "kept", "answered"), [
    (b"finished", False, None, False),
    (b"failed", True, None, False),
    (b"queued", False, None, True),
    (b"queued", True, ["other"], True),
    (b"started", True, ["other"], False),
])
def test_each_job_status(env: tuple[Any, Client, runtime.Runtime], status: bytes, mixed: bool,
                         kept: list[str] | None, answered: bool) -> None:
    r, _, _ = env
    texts = [SECRET2, *(["other"] if mixed else [])]
    job_id, qids = _job(r, status, texts)
    unrelated, _ = _job(r, status, ["not the note"])
    contents = erasure.Contents()
    contents.add("s", SECRET2, None)
    assert redact_jobs(r, r, "t", contents, 60) == 1
    if kept is None:
        assert not r.exists(keys_of(job_id))
    else:
        assert _payload(r, job_id) == kept
    got = r.get(keys.result("t", qids[0]))
    assert (got is not None and msgspec.json.decode(got)["error"]["code"] == "erased") == answered
    if mixed:
        assert r.get(keys.result("t", qids[1])) is None  # its other query is not touched
    assert _payload(r, unrelated) == ["not the note"]
    assert redact_jobs(r, r, "t", contents, 60) == 0  # nothing left


@pytest.mark.parametrize("crash_at", ["audit", "also", "log"])
def test_a_crash_at_any_step_is_finished_by_a_rerun(
        env: tuple[Any, Client, runtime.Runtime], crash_at: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    r, c, rt = env
    _serve(c, rt, [{"text": SECRET2, "embedding": EMB}, {"text": "door code"}])
    real = {"audit": erasure.rewrite_entries, "log": erasure.rewrite_stream}

    class Crash(Exception):
        pass

    def crash(*a: Any, **kw: Any) -> Any:
        raise Crash(crash_at)

    if crash_at == "also":
        monkeypatch.setattr("hivemind_memory.api_stub.client.redact_jobs", crash, raising=False)
        import hivemind_memory.api_stub.protocol.job_erasure as je
        monkeypatch.setattr(je, "redact_jobs", crash)
    elif crash_at == "audit":
        monkeypatch.setattr(erasure, "rewrite_entries", crash)
    else:
        monkeypatch.setattr(erasure, "rewrite_stream", crash)
    with pytest.raises(Crash):
        _erase(r, c)
    monkeypatch.undo()
    assert erasure.rewrite_entries is real["audit"]
    _erase(r, c)
    blob = b"".join(v for k in r.scan_iter() if r.type(k) == b"stream"
                    for _, f in r.xrange(k) for v in f.values())
    blob += b"".join(zlib.decompress(r.hget(k, "data")) for k in r.scan_iter("rq:job:*")
                     if r.type(k) == b"hash" and r.hexists(k, "data"))
    assert b"door code is" not in blob and b"is 4471" not in blob and b"now 9902" not in blob
    assert msgspec.json.encode(EMB)[1:-1] not in blob


def test_a_rerun_after_the_log_was_redacted_finds_a_late_quote(
        env: tuple[Any, Client, runtime.Runtime]) -> None:
    """A query quoting a version answered after the erasure (a job that was running, say):
    the log no longer has the text, the keyed digests filed by the erasure find it."""
    r, c, rt = env
    _erase(r, c)
    assert b"door code is now" not in b"".join(
        v for _, f in r.xrange(keys.stream("t")) for v in f.values())
    filed = r.xrange(keys.erased_texts("t"))
    assert len(filed) == 3  # the two versions and the first's first 16,384 characters
    assert all(b"door" not in v for _, f in filed for v in f.values())
    # served by a worker of a release before workers checked the filings themselves
    import hivemind_memory.worker.engine as engine

    real = erasure.quoted_in
    erasure.quoted_in = lambda *a: []  # type: ignore[assignment]
    try:
        late, other = _serve(c, rt, [{"text": SECRET2}, {"text": SECRET2 + " please"}])
    finally:
        erasure.quoted_in = real  # type: ignore[assignment]
    assert engine.erasure.quoted_in is real
    assert _audit_texts(r)[late] == (SECRET2, "")
    again = _erase(r, c)
    assert (again.audit, again.results) == (1, 1)
    assert _audit_texts(r)[late] == ("", "s") and _audit_texts(r)[other][1] == ""
    assert msgspec.json.decode(r.get(keys.result("t", late)))["error"]["code"] == "erased"
    assert "error" not in msgspec.json.decode(r.get(keys.result("t", other)))


@pytest.mark.parametrize("when", ["while-running", "after"])
def test_a_query_running_at_the_erasure_does_not_publish_the_text(
        env: tuple[Any, Client, runtime.Runtime], monkeypatch: pytest.MonkeyPatch,
        when: str) -> None:
    """A job holding a query that quotes a version is held after ranking, before it
    publishes; the note is erased meanwhile (the erasure sweeps an audit stream and results
    that do not have the answer yet). Once the job publishes, neither its audit entry, its
    result nor its embedding filing holds the text: the first erasure suffices. A quote sent
    after the erasure is redacted the same way."""
    from hivemind_memory.worker.engine import QueryEngine

    r, c, rt = env
    if when == "after":
        _erase(r, c)
    else:
        real = QueryEngine._publish
        held: list[int] = []

        def publish_after_the_erasure(self: QueryEngine, todo: Any, pub: Any) -> None:
            if not held:  # the job is mid-flight: ranked, not yet published
                held.append(1)
                _erase(r, c)
            real(self, todo, pub)

        monkeypatch.setattr(QueryEngine, "_publish", publish_after_the_erasure)
    quoting, plain = _serve(c, rt, [{"text": SECRET2, "embedding": EMB},
                                    {"text": "keep the deploy runbook"}])
    texts = _audit_texts(r)
    assert texts[quoting] == ("", "s") and texts[plain] == ("keep the deploy runbook", "")
    assert msgspec.json.decode(r.get(keys.result("t", quoting)))["error"]["code"] == "erased"
    assert "error" not in msgspec.json.decode(r.get(keys.result("t", plain)))
    blob = b"".join(v for k in r.scan_iter() if r.type(k) == b"stream"
                    for _, f in r.xrange(k) for v in f.values())
    blob += b"".join(r.get(k) or b"" for k in r.scan_iter("hm:*result*")
                     if r.type(k) == b"string")
    assert b"door code is" not in blob and b"is 4471" not in blob and b"now 9902" not in blob
    assert msgspec.json.encode(EMB)[1:-1] not in blob


def test_a_filter_naming_a_metadata_value_is_redacted(
        env: tuple[Any, Client, runtime.Runtime]) -> None:
    """A query's ``filter`` that names one of an erased note's metadata values (as a value,
    an operand, one of an ``$in`` list) loses the filter in its audit entry (``redacted``
    names the note) and in a waiting job; ``audit reproduce`` counts it ``erased``, not
    different. A filter naming other values is kept."""
    from hivemind_memory.projections.ranking.config import DEFAULT
    from hivemind_memory.worker.audit.reproduce import reproduce_queries

    r, c, rt = env
    c.append([created("m", text="the vault room pin", metadata={"room": "vault-7731",
                                                                "pin": 4711}),
              created("l", text="the lobby room", metadata={"room": "lobby"})])
    quoting = [{"room": "vault-7731"}, {"pin": {"$in": [1, 4711]}},
               {"room": {"$ne": "vault-7731"}}]
    plain = [{"room": "lobby"}, {"pin": {"$gt": 5000}}]
    qids = _serve(c, rt, [{"text": "room", "filter": f} for f in quoting + plain])
    q = jobs.queue(r, jobs.QUERY_QUEUE, Settings())
    job = q.enqueue(jobs.QUERY_JOB, [{"query_id": "t.qf", "position": "0-0", "request": {
        "ns": "t", "text": "room", "budget": 5, "filter": {"room": "vault-7731"}}}])
    r.hset(keys_of(job.id), "status", b"queued")

    def catch_up(ns: str, target: Any, timeout_s: float) -> None:
        ensure_projected(r, ns, target, Settings(), timeout_s)

    red = c.erase("t", ["m"], catch_up=catch_up).redaction
    assert red.audit == 3 and red.jobs >= 1
    entries = {e["query_id"]: e for e in (msgspec.json.decode(f[b"d"])
                                          for _, f in r.xrange(keys.audit("t")))}
    for qid in qids[:3]:
        assert entries[qid]["filter"] is None and entries[qid]["redacted"] == "m"
        assert entries[qid]["text"] == "room"  # the text quoted nothing: kept
    for qid, f in zip(qids[3:], plain, strict=True):
        assert entries[qid]["filter"] == f and entries[qid]["redacted"] == ""
    assert not r.exists(keys_of(job.id))  # its only query quoted: the job goes
    blob = b"".join(v for k in r.scan_iter() if r.type(k) == b"stream"
                    for _, f in r.xrange(k) for v in f.values())
    assert b"vault-7731" not in blob
    got = reproduce_queries(r, "t", DEFAULT, qids)
    assert got.different == 0 and got.ok, got  # the note shaped the others' scores too
    views = {v.query_id: v for v in got.reproductions}
    assert all(views[q].erased for q in qids[:3]), got
