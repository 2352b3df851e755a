"""Shards in tests: a namespace of a given shard, and a worker's heartbeat without a worker
(for tests of a client's own deadline: a query whose shard is served, by a worker that does
not answer in time, where no heartbeat at all would get ``shard_unavailable`` at once)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from hivemind_memory.api_stub.protocol import jobs
from hivemind_memory.projections.store.beats import served_queues
from hivemind_memory.worker.ops.heartbeat import Heartbeat


def ns_in(shard: int, shards: int, skip: int = 0) -> str:
    """A namespace whose queries go to ``shard`` of ``shards`` (the ``skip``-th such name)."""
    found = (f"ns{i}" for i in range(100_000) if jobs.shard_of(f"ns{i}", shards) == shard)
    for _ in range(skip):
        next(found)
    return next(found)


@contextmanager
def silent_worker(rq: Any, shards: int = 1, name: str = "silent-worker") -> Iterator[Heartbeat]:
    """The heartbeat of a worker that serves every shard of ``shards`` and answers nothing."""
    hb = Heartbeat(rq, name, "worker",
                   [jobs.query_queue_name(k, shards) for k in range(shards)],
                   shards=tuple(range(shards)), shard_count=shards).start()
    try:
        yield hb
    finally:
        hb.stop()


def wait_for_workers(rq: Any, shards: int = 1, within_s: float = 60.0) -> None:
    """Return once live workers serve every shard of ``shards`` (their heartbeats: a worker
    process beats once it has started, a second or two after ``Popen``); a query asked before
    that gets ``shard_unavailable``, as it should."""
    want = {jobs.query_queue_name(k, shards) for k in range(shards)}
    deadline = time.monotonic() + within_s
    while not want <= served_queues(rq):
        assert time.monotonic() < deadline, f"no worker serves {sorted(want)} after {within_s}s"
        time.sleep(0.05)  # polling Redis for another process's first heartbeat
