"""Audit retention through the SDK on a ``memory://PATH`` store: a recall's audit append drops
the entries older than ``HIVEMIND_AUDIT_RETENTION_DAYS`` (exactly: one on the boundary
stays), ``audit reproduce`` of a dropped query says it is not in the audit (no crash) and still
reproduces a kept one. ``streams.log`` logs the trim with the XADD that made it, so after a
restart the dropped entries stay dropped."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from hivemind_memory import Memory
from hivemind_memory.api_stub.protocol.settings import Settings
from hivemind_memory.projections.store import connection, keys
from hivemind_memory.worker import engine
from hivemind_memory.worker.cli.main import main as hivemind_main

NS = "team-a"


def _ids(url: str) -> list[bytes]:
    r = connection.connect(url)
    try:
        return [e[0] for e in r.xrange(keys.audit(NS))]
    finally:
        connection.release(url)


def _alice(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, days: str) -> tuple[str, Memory]:
    """alice's SDK on a ``memory://PATH`` store in ``tmp_path``, with
    ``HIVEMIND_AUDIT_RETENTION_DAYS`` = ``days``."""
    url = f"memory://{tmp_path / 'store'}"
    monkeypatch.setenv("HIVEMIND_AUDIT_RETENTION_DAYS", days)
    return url, Memory(url, ns=NS, agent="alice", settings=Settings.from_env(redis_url=url))


def _ms(entry_id: bytes) -> int:
    return int(entry_id.split(b"-")[0])


def test_recall_drops_audit_entries_past_the_retention(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    url, m = _alice(tmp_path, monkeypatch, "1")
    try:
        m.remember("deploy the staging cluster on friday")
        qa = m.recall("staging cluster", budget=200).query_id
        qb = m.recall("friday deploy", budget=200).query_id
        ids = _ids(url)
        assert len(ids) == 2 and _ms(ids[0]) < _ms(ids[1]), ids  # a recall takes > 1 ms
        # the clock one day (the retention) after qb's entry: qb is on the boundary (kept),
        # qa before it (dropped); the new entry (server time, later) kept
        later = datetime.fromtimestamp(_ms(ids[1]) / 1000, UTC) + timedelta(days=1)
        real = engine.utcnow
        monkeypatch.setattr(engine, "utcnow", lambda: later)
        m.recall("staging", budget=200)
        kept = _ids(url)
        assert kept[0] == ids[1] and len(kept) == 2 and ids[0] not in kept
    finally:
        m.close()

    capsys.readouterr()
    hivemind_main(["audit", "reproduce", "--ns", NS, qa, qb, "--redis-url", url])
    err = capsys.readouterr().err
    assert f"query {qa} is not in the audit of {NS}" in err
    assert qb not in err.split("audit reproduce:")[0] and "1 identical" in err, err

    # restart: streams.log replays the trim with the record that made it: still dropped
    connection.close_embedded(url)
    assert _ids(url) == kept
    m = Memory(url, ns=NS, agent="alice", settings=Settings.from_env(redis_url=url))
    try:
        m.recall("cluster", budget=200)
    finally:
        m.close()
    after = _ids(url)
    assert ids[0] not in after and after[0] == ids[1] and len(after) == 3
    monkeypatch.setattr(engine, "utcnow", real)


def test_retention_0_keeps_every_entry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url, m = _alice(tmp_path, monkeypatch, "0")
    try:
        m.remember("deploy the staging cluster on friday")
        m.recall("staging cluster", budget=200)
        first = _ids(url)
        monkeypatch.setattr(engine, "utcnow",
                            lambda: datetime.now(UTC) + timedelta(days=36_600))
        m.recall("friday deploy", budget=200)
        got = _ids(url)
        assert got[0] == first[0] and len(got) == 2
    finally:
        m.close()




def _embeddings(url: str) -> list[tuple[bytes, bytes]]:
    r = connection.connect(url)
    try:
        return [(e[0], e[1][b"digest"]) for e in r.xrange(keys.query_embeddings(NS))]
    finally:
        connection.release(url)


def test_a_query_embedding_is_filed_again_past_the_retention_and_dropped_at_twice_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url, m = _alice(tmp_path, monkeypatch, "1")
    vec = [0.6, 0.8]
    try:
        m.remember("deploy the staging cluster on friday", embedding=[0.6, 0.8])
        m.recall("staging cluster", budget=200, embedding=vec)
        first = _embeddings(url)
        assert len(first) == 1
        t0 = _ms(first[0][0])
        # within the retention (1 s off: the worker's clock is read before the server's
        # entry id): the filing is reused
        monkeypatch.setattr(engine, "utcnow", lambda: datetime.fromtimestamp(
            (t0 + 86_400_000 - 1000) / 1000, UTC))
        m.recall("friday", budget=200, embedding=vec)
        assert _embeddings(url) == first
        # past it: filed again, the old filing kept (an audit entry within the retention may
        # still name it) ...
        monkeypatch.setattr(engine, "utcnow", lambda: datetime.fromtimestamp(
            (t0 + 86_400_000 + 1000) / 1000, UTC))
        m.recall("cluster", budget=200, embedding=vec)
        got = _embeddings(url)
        assert got[0] == first[0] and len(got) == 2 and got[1][1] == first[0][1]
        # ... and dropped past twice the retention, at the next filing (another embedding)
        # (the server's ids do not follow the patched clock: the cut is put between the two)
        t1 = _ms(got[1][0])
        assert t1 > t0 + 1, got
        monkeypatch.setattr(engine, "utcnow", lambda: datetime.fromtimestamp(
            ((t0 + t1) // 2 + 2 * 86_400_000) / 1000, UTC))
        m.recall("deploy", budget=200, embedding=[0.8, 0.6])
        after = _embeddings(url)
        assert after[0] == got[1] and len(after) == 2 and after[1][1] != first[0][1]
    finally:
        m.close()


@pytest.mark.parametrize("compact_every", [0.0, 3600.0], ids=["at-once", "at-restart"])
def test_streams_log_loses_the_bytes_of_trimmed_records(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, compact_every: float) -> None:
    """After a trim, ``streams.log`` is compacted: the records of the dropped audit entries
    leave the file (within ``COMPACT_EVERY_S``, and at every start), crash-safely, and a
    restart replays the same audit stream."""
    from hivemind_memory.projections.store import embedded
    from hivemind_memory.projections.store.logfile import LOG_NAME, scan

    def record_bytes(entry_id: bytes) -> list[bytes]:
        data = log_file.read_bytes()
        return [data[r.offset:r.end] for r in scan(data).records
                if r.key == keys.audit(NS).encode() and r.entry_id == entry_id]

    monkeypatch.setattr(embedded, "COMPACT_EVERY_S", compact_every)
    log_file = tmp_path / "store" / LOG_NAME
    url, m = _alice(tmp_path, monkeypatch, "1")
    try:
        m.remember("deploy the staging cluster on friday")
        m.recall("the staging question", budget=200)
        m.recall("friday deploy", budget=200)
        ids = _ids(url)
        [old] = record_bytes(ids[0])
        assert old in log_file.read_bytes()
        later = datetime.fromtimestamp(_ms(ids[1]) / 1000, UTC) + timedelta(days=1)
        monkeypatch.setattr(engine, "utcnow", lambda: later)
        m.recall("staging", budget=200)
        kept = _ids(url)
        assert ids[0] not in kept and kept[0] == ids[1]
    finally:
        m.close()  # its worker's last write (and the compaction after it) is done
    if compact_every == 0:  # read before the store is opened again (which compacts too)
        assert old not in log_file.read_bytes() and record_bytes(ids[0]) == []
    else:
        assert old in log_file.read_bytes()  # kept until COMPACT_EVERY_S passed
    assert len(record_bytes(ids[1])) == 1  # a kept entry stays
    connection.close_embedded(url)
    assert _ids(url) == kept  # the compacted file replays the same stream
    assert old not in log_file.read_bytes() and record_bytes(ids[0]) == []
    assert len(record_bytes(ids[1])) == 1
    assert not list(log_file.parent.glob("*.erase-tmp"))
