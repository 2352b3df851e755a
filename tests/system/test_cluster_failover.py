"""Failover: kill a master of a 3-master, 3-replica Redis Cluster during ingest, then another
during projection. Appends wait for one replica (WAIT 1, ``HIVEMIND_WAIT_REPLICAS``), so an
acknowledged append survives the failover of its master (Redis promotes the one replica that
acknowledged it); an append that failed is re-run whole (repeated event_ids apply once). A
projection commit does not wait: if a failover loses it, the checkpoint moves back with it
and the projector folds those events again from the log. Either way the outcome is exact: the
notes equal the pure fold of the input."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fakeredis
import pytest
import redis

from hivemind_memory.api_stub.client import Client
from hivemind_memory.api_stub.protocol.settings import Settings
from hivemind_memory.events.errors import StoreError
from hivemind_memory.projections.store import keys
from hivemind_memory.projections.store.cluster import connect_cluster
from hivemind_memory.projections.store.log import append, iter_all, tail
from hivemind_memory.projections.store.readmodel import (
    checkpoint,
    decode_entry,
    project_batch,
    read_notes,
)
from tests.support import HIVEMIND, ClusterProc, RedisProc, need_cluster_tools, wait_until
from tests.support.factories import ev, used
from tests.system.test_cluster import _log

pytestmark = [pytest.mark.redis_server, pytest.mark.redis_cluster, pytest.mark.slow]

NSS = [f"f{i:02d}" for i in range(18)]


@pytest.fixture
def ha_cluster(tmp_path: Path) -> Iterator[ClusterProc]:
    """A private cluster with one replica per master (node timeout 1 s: fast failover)."""
    need_cluster_tools()
    cp = ClusterProc(tmp_path / "ha", masters=3, replicas=1, node_timeout_ms=1000)
    cp.start()
    yield cp
    cp.stop()


def _events() -> list[dict[str, Any]]:
    out = _log(NSS)
    out += [used(f"n{i % 4}", f"extra{i}", ns=ns) for ns in NSS for i in range(100)]
    return out


def _expected(events: list[dict[str, Any]]) -> dict[str, Any]:
    """The pure fold of the input, projected on the embedded store."""
    ref = fakeredis.FakeRedis(server=fakeredis.FakeServer())
    append(ref, [ev(d) for d in events])
    for ns in NSS:
        while project_batch(ref, ns, 500) is not None:
            pass
    return {ns: read_notes(ref, ns) for ns in NSS}


def test_master_killed_during_ingest_and_projection(
        ha_cluster: ClusterProc, rq_redis: RedisProc, tmp_path: Path) -> None:
    rq = rq_redis.client()
    rq.flushall()
    s = Settings(redis_url=ha_cluster.url, rq_url=rq_redis.url, wait_replicas=1,
                 wait_timeout_ms=2000)
    rc = connect_cluster(ha_cluster.url)
    c = Client(rc, rq, settings=s)
    events = _events()
    chunks = [events[i:i + 40] for i in range(0, len(events), 40)]
    acknowledged: set[str] = set()
    victim = ha_cluster.master_of(keys.stream(NSS[0]))
    retries = 0
    for k, chunk in enumerate(chunks):
        if k == len(chunks) // 3:
            ha_cluster.kill(victim)  # mid-ingest: one master (and its unreplicated writes) gone
        while True:
            try:
                c.append(chunk)
                break
            except (redis.RedisError, StoreError):
                retries += 1  # re-run the chunk: repeated event_ids are applied once
                if victim not in ha_cluster.live_ports():
                    # restarting an empty master before its replica took over would wipe
                    # the replica too (Redis's documented hazard without persistence)
                    wait_until(lambda: ha_cluster.failed_over(victim), "failover (ingest kill)")
                    ha_cluster.restart(victim)  # back as a replica: WAIT 1 can succeed again
                    wait_until(lambda: ha_cluster.all_ok(1), "the old master to rejoin")
                assert retries < 50
        acknowledged |= {d["event_id"] + "@" + d["ns"] for d in chunk}
    assert victim in ha_cluster.live_ports()
    logged = {ev_.event_id + "@" + ev_.ns
              for ns in NSS for _, f in iter_all(rc, ns)
              for ev_ in [decode_entry(f, ns)[0]] if hasattr(ev_, "event_id")}
    assert acknowledged <= logged  # no acknowledged (WAIT 1) append was lost
    assert retries >= 1  # the kill really hit the ingest

    env = {**os.environ, "HIVEMIND_REDIS_URL": ha_cluster.url, "HIVEMIND_RQ_URL": rq_redis.url,
           "HIVEMIND_BATCH_SIZE": "10", "HIVEMIND_MAX_BATCHES_PER_JOB": "3",
           "HIVEMIND_LOCK_LEASE_MS": "3000"}
    w = subprocess.Popen([*HIVEMIND, "worker", "--burst"], env=env,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    late = NSS[-1]
    wait_until(lambda: any(checkpoint(rc, ns) > (0, 0) for ns in NSS), "projection to start")
    second = ha_cluster.master_of(keys.stream(late))
    behind_at_kill = [ns for ns in NSS if checkpoint(rc, ns) < tail(rc, ns)]
    ha_cluster.kill(second)  # mid-projection
    assert behind_at_kill  # the kill really hit the projection
    w.communicate(timeout=300)  # it may fail or finish: the next worker must finish the job
    wait_until(lambda: ha_cluster.failed_over(second), "failover (projection kill)")
    again = subprocess.run([*HIVEMIND, "worker", "--burst"], env=env, capture_output=True,
                           text=True, timeout=300, check=False)
    assert again.returncode == 0, again.stderr[-3000:]
    want = _expected(events)
    for ns in NSS:
        assert checkpoint(rc, ns) == tail(rc, ns)
        assert read_notes(rc, ns) == want[ns], ns
    rc.close()
    rq.close()
