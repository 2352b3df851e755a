"""Audit retention (``HIVEMIND_AUDIT_RETENTION_DAYS``): each append to a namespace's audit
stream drops, exactly, the entries older than the retention; 0 keeps everything. On fakeredis
and a real redis-server (``store``), and the setting's bounds."""

from __future__ import annotations

from typing import Any

import pytest

from hivemind_memory.api_stub.protocol.settings import ConfigError, Settings
from hivemind_memory.projections.store import connection, keys, logfile, results

NS = "team-a"
DAY_MS = 86_400_000
NOW_MS = 1_800_000_000_000
"""The append's clock (ms): entry ids in the tests are set relative to it."""


def _seed(r: Any, ages_ms: list[int]) -> list[bytes]:
    ids = [f"{NOW_MS - a}-0".encode() for a in sorted(ages_ms, reverse=True)]
    for i in ids:
        r.xadd(keys.audit(NS), {results.AUDIT_FIELD: b"{}"}, id=i)
    return ids


def _append(r: Any, s: Settings) -> None:
    p = r.pipeline(transaction=True)
    results.stage_audit(p, NS, b'{"new":1}', s.audit_min_id(NOW_MS))
    p.execute()


def _kept(r: Any) -> list[bytes]:
    return [e[0] for e in r.xrange(keys.audit(NS))]


def test_entries_past_the_retention_go_at_the_next_append_those_within_stay(store: Any) -> None:
    s = Settings.from_env({"HIVEMIND_AUDIT_RETENTION_DAYS": "90"})
    # 150 old entries (more than one of Redis' 100-entry macro-nodes: an approximate trim
    # would keep some), one 1 ms past the boundary, one exactly on it, one 1 ms inside
    old = _seed(store, [91 * DAY_MS + i for i in range(150)] + [90 * DAY_MS + 1,
                                                                 90 * DAY_MS, 90 * DAY_MS - 1])
    assert len(_kept(store)) == 153
    _append(store, s)
    kept = _kept(store)
    assert kept[:2] == old[-2:]  # on the boundary (id == MINID) and inside: kept
    assert len(kept) == 3  # and the new entry; every older one gone
    assert f"{NOW_MS - 90 * DAY_MS}-0".encode() == kept[0]


def test_retention_0_keeps_everything(store: Any) -> None:
    s = Settings.from_env({"HIVEMIND_AUDIT_RETENTION_DAYS": "0"})
    assert s.audit_min_id(NOW_MS) is None
    old = _seed(store, [3650 * DAY_MS, 91 * DAY_MS, DAY_MS])
    _append(store, s)
    assert _kept(store)[:3] == old and len(_kept(store)) == 4


def test_default_is_90_days() -> None:
    s = Settings.from_env({})
    assert s.audit_retention_days == 90
    assert s.audit_min_id(NOW_MS) == f"{NOW_MS - 90 * DAY_MS}-0"


@pytest.mark.parametrize("bad", ["-1", "36601", "ninety"])
def test_a_bad_retention_is_refused_naming_the_variable(bad: str) -> None:
    with pytest.raises(ConfigError, match="HIVEMIND_AUDIT_RETENTION_DAYS"):
        Settings.from_env({"HIVEMIND_AUDIT_RETENTION_DAYS": bad})


def test_retention_bounds_accepted() -> None:
    assert Settings.from_env({"HIVEMIND_AUDIT_RETENTION_DAYS": "36600"}).audit_retention_days \
        == 36600
    assert Settings.from_env({"HIVEMIND_AUDIT_RETENTION_DAYS": "1"}).audit_min_id(DAY_MS) \
        == "0-0"


def test_memory_path_keeps_the_trim_across_a_restart(tmp_path: Any) -> None:
    url = f"memory://{tmp_path / 'store'}"
    s = Settings.from_env({"HIVEMIND_AUDIT_RETENTION_DAYS": "90"})
    r = connection.connect(url)
    old = _seed(r, [91 * DAY_MS, 90 * DAY_MS + 1, 90 * DAY_MS, DAY_MS])
    _append(r, s)
    kept = _kept(r)
    assert kept[:2] == old[2:] and len(kept) == 3
    connection.close_embedded(url)
    r = connection.connect(url)
    try:
        assert _kept(r) == kept  # replay trims again: the dropped entries stay dropped
        assert logfile.check(logfile.scan((tmp_path / "store" / logfile.LOG_NAME)
                                          .read_bytes())).openable  # fsck: a sound file
    finally:
        connection.close_embedded(url)


@pytest.mark.redis_cluster
@pytest.mark.redis_server
def test_on_a_cluster_a_served_query_trims_the_audit_exactly(cluster_store: Any) -> None:
    """On Redis Cluster, the worker's own publish (one MULTI in the namespace's slot: result,
    audit XADD with ``MINID =``, filings, fence read) drops the audit entries past the
    retention, exactly (one 1 ms inside it stays; 150 older go, more than a macro-node), and
    ``audit list``'s reader sees the rest."""
    from datetime import UTC, datetime

    from hivemind_memory.api_stub.client import Client
    from hivemind_memory.worker import engine, runtime
    from hivemind_memory.worker.loop import run_worker
    from tests.support import rq_for
    from tests.support.factories import created

    r, rq = cluster_store, rq_for(cluster_store)
    now = datetime.fromtimestamp(NOW_MS / 1000, UTC)
    s = Settings.from_env({"HIVEMIND_AUDIT_RETENTION_DAYS": "90"})
    rt = runtime.build(s, r, rq)
    runtime.install(rt)
    c = Client(r, rq, settings=s)
    c.append([created("n1", ns=NS, text="redis cluster retention note")])
    assert run_worker(rt, burst=True) == 0
    old = _seed(r, [91 * DAY_MS + i for i in range(150)] + [90 * DAY_MS + 1, 90 * DAY_MS - 1])
    real = engine.utcnow
    engine.utcnow = lambda: now  # type: ignore[assignment]
    try:
        [qid] = c.submit_batch([{"ns": NS, "text": "redis retention", "budget": 50}])
        assert run_worker(rt, burst=True) == 0
    finally:
        engine.utcnow = real  # type: ignore[assignment]
    assert "error" not in c.result(qid, timeout=10)
    kept = _kept(r)
    assert kept[0] == old[-1] and len(kept) == 2, kept[:3]  # 1 ms inside, and the new one
    assert all(i not in kept for i in old[:-1])
