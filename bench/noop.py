"""The RQ per-job baseline: a no-op job and a plain RQ ``SimpleWorker`` that runs it.

It lives here, not in the product's worker (whose queues only run hivemind's own job
functions): ``python -m bench.noop REDIS_URL`` works the ``bench-noop`` queue with the same
worker class and JSON serializer as ``hivemind worker``, until SIGTERM.
"""

from __future__ import annotations

import sys

import redis
from rq import Queue, SimpleWorker

from hivemind_memory.api_stub.protocol.serializer import JSONSerializer

QUEUE = "bench-noop"
"""The queue of the baseline's jobs."""
JOB = "bench.noop.noop"
"""The baseline's job function."""


def noop() -> None:
    """Does nothing: what RQ itself costs per job."""


def queue(conn: redis.Redis) -> Queue:
    """The baseline queue on ``conn``."""
    return Queue(QUEUE, connection=conn, serializer=JSONSerializer)


def main(argv: list[str]) -> int:
    conn = redis.Redis.from_url(argv[0])
    w = SimpleWorker([queue(conn)], connection=conn, serializer=JSONSerializer)
    w.work(with_scheduler=False, logging_level="WARNING")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
