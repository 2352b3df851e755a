"""What a job needs at run time: connections, settings, the ranking config, the query index.

Installed once by the worker entry point; a job running in a plain ``rq worker`` builds it
lazily from the environment and the job's own connection.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from rq import Queue, get_current_job

from hivemind_memory.api_stub.protocol import jobs
from hivemind_memory.api_stub.protocol.settings import Settings
from hivemind_memory.projections.ranking.config import RankingConfig, load_config
from hivemind_memory.projections.ranking.packing import use_packer
from hivemind_memory.projections.store.connection import connect
from hivemind_memory.projections.store.types import QueueConn, Store


@dataclass
class Runtime:
    """Connections and configuration shared by every job of one worker process."""

    store: Store
    """Redis client for streams, projections and results."""
    rq: QueueConn
    """Redis client for RQ's own keys: a plain Redis (the store itself unless that is a
    cluster)."""
    settings: Settings
    cfg: RankingConfig
    cache: dict[str, Any] = field(default_factory=dict)
    """Per-process state that outlives a job (the query indexes)."""

    def queue(self, name: str) -> Queue:
        """An RQ queue with the JSON serializer (never pickle)."""
        return jobs.queue(self.rq, name, self.settings)

    @property
    def project_queue(self) -> Queue:
        return self.queue(jobs.PROJECT_QUEUE)

    @property
    def query_queue(self) -> Queue:
        """The query queue of shard 0 (the only one with one shard)."""
        return self.queue(jobs.query_queue_name(0, self.settings.shards))

    def query_queues(self, shards: tuple[int, ...] | None = None) -> list[Queue]:
        """The query queues of ``shards`` (None: every shard), in shard order."""
        n = self.settings.shards
        return [self.queue(jobs.query_queue_name(k, n))
                for k in (range(n) if shards is None else shards)]


def build(settings: Settings, store: Store, rq_conn: QueueConn | None = None) -> Runtime:
    """A runtime from settings and open connections (``rq_conn`` may be omitted when the store
    is one plain Redis that also carries the queues)."""
    return Runtime(store=store, rq=jobs.queue_connection(store, rq_conn),
                   settings=settings, cfg=load_config(settings.config_path))


def single_threaded_blas() -> None:
    """Limit the BLAS numpy uses to one thread for the rest of this process (a worker's).

    A worker runs one job at a time and scales by running more processes; BLAS threads only
    compete with it (and with the other workers) for the cores, and a thread pool that went
    to sleep between two queries costs more to wake than the matrix product it then
    computes: a single query's cosines at 10k notes took 8.7 ms worker-side with two threads
    on this 2-core VM, 2.6 ms with one. Only the ``hivemind worker`` process calls this (an
    embedded worker shares its process with the application's numpy)."""
    from threadpoolctl import threadpool_limits

    threadpool_limits(limits=1, user_api="blas")


_current: Runtime | None = None
_thread = threading.local()


def install(rt: Runtime | None) -> None:
    """Make ``rt`` the runtime of this process's jobs (None: uninstall)."""
    global _current
    _current = rt


def install_for_thread(rt: Runtime | None) -> None:
    """Make ``rt`` the runtime of the jobs this thread runs, whatever is installed for the
    process (an in-process worker of one embedded store beside another)."""
    _thread.rt = rt


def installed() -> Runtime | None:
    """The installed runtime, if any (tests save and restore it)."""
    return _current


def current() -> Runtime:
    """The installed runtime, or one built from the environment and the current job."""
    global _current
    mine: Runtime | None = getattr(_thread, "rt", None)
    if mine is not None:
        return mine
    if _current is None:
        job = get_current_job()
        if job is None:
            raise RuntimeError("no hivemind runtime installed and no current RQ job")
        s = Settings.from_env()
        use_packer(s.packer)
        # a plain `rq worker`: the job's connection is RQ's; the store is the same Redis
        # unless the settings name another one (always so for a cluster)
        store = job.connection if s.rq_url is None else connect(s.redis_url)
        _current = build(s, store, job.connection)
    return _current
