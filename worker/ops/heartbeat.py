"""Worker liveness: every worker process keeps one short-lived key alive, and readiness
(``/readyz``), ``hivemind status`` and ``/metrics`` all count those keys, one way for all.

Why not RQ's registry: an RQ worker key outlives the worker's last heartbeat by
``worker_ttl + 60`` s (80 s here), so ``/readyz`` stayed 200 for about a minute after the last
worker was SIGKILLed; and the in-process worker of ``serve`` runs RQ in bursts, so between
bursts RQ lists no worker at all (``/metrics`` said 0 while ``/readyz``, which asked the
thread, said 1).

The record: ``keys.worker_beat(name)`` holds a JSON ``WorkerBeat``, SET with a TTL of
``keys.WORKER_BEAT_TTL_SECONDS`` (10 s) and renewed every ``BEAT_EVERY_S`` (2 s) from a daemon
thread; the names are in the set ``keys.WORKERS``. Expiry runs on Redis's clock, so workers
on hosts whose clocks differ are judged alike. Bound: a worker that dies without a word
(SIGKILL, a frozen host) counts as dead at most ``WORKER_BEAT_TTL_SECONDS`` after its last
beat; a clean stop deletes its record at once. Names whose key has expired are pruned by the
next worker that starts, so readers write nothing.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import msgspec
import structlog
from redis.exceptions import RedisError

from hivemind_memory.projections.store import keys
from hivemind_memory.projections.store.beats import drop_beat, live_beats, prune_beats, write_beat
from hivemind_memory.projections.store.types import QueueConn

if TYPE_CHECKING:
    from hivemind_memory.worker.runtime import Runtime

log = structlog.get_logger("hivemind.heartbeat")

BEAT_EVERY_S = 2.0
"""How often a worker renews its heartbeat (five renewals fit in one TTL)."""


class LoadFailure(msgspec.Struct, frozen=True):
    """Why a worker could not hold a namespace's index (``worker.memory``)."""

    ns: str
    code: str
    """``namespace_too_large``, ``worker_out_of_memory`` or ``index_load_failed``."""
    message: str
    at: float
    """Unix time of the failure (the worker's clock)."""


class IndexMemory(msgspec.Struct, frozen=True, omit_defaults=True):
    """A worker's namespace indexes against its memory budget, as of its last query job."""

    budget: int
    """Bytes (``--memory-budget``)."""
    held: int
    """Bytes of the indexes it holds (``projections.ranking.footprint``)."""
    namespaces: int
    """How many indexes it holds."""
    largest: dict[str, int] = {}
    """The largest held indexes (at most ``worker.memory.REPORTED``), bytes each."""
    evictions: int = 0
    """Indexes evicted to stay within the budget since the worker started."""
    failures: list[LoadFailure] = []
    """The namespaces it could not hold lately, the most recent last."""
    outside: int = 0
    """Bytes it holds outside the indexes that count in the budget too: the ranking rules'
    kept word sets and passages (``ranker.KeptTexts.held``)."""


class WorkerBeat(msgspec.Struct, frozen=True, omit_defaults=True):
    """What a worker process says about itself at each beat."""

    name: str
    kind: str
    """``worker`` (the ``hivemind worker`` process) or ``in-process`` (inside ``serve``,
    ``mcp`` or the SDK on the embedded store)."""
    hostname: str
    pid: int
    queues: list[str]
    started_at: datetime
    beat_at: datetime
    """The worker's clock at this beat (shown, never compared: expiry decides liveness)."""
    state: str = ""
    """What the worker is doing, when it knows better than RQ's registry (in-process)."""
    successful_jobs: int = 0
    failed_jobs: int = 0
    shards: list[int] = []
    """The shards whose query queues it listens on (of ``shard_count``)."""
    shard_count: int = 0
    """``HIVEMIND_SHARDS`` as the worker sees it (0: a worker from before shards)."""
    namespaces: list[str] = []
    """The namespaces whose index it holds in memory (at most ``MAX_BEAT_NAMESPACES``)."""
    namespace_count: int = 0
    """How many it holds (``namespaces`` may be cut short)."""
    rss_bytes: int = 0
    """The process's resident memory at this beat (0: not known)."""
    memory: IndexMemory | None = None
    """Its query indexes against its memory budget (None before its first query job)."""


_enc = msgspec.json.Encoder()
_dec = msgspec.json.Decoder(WorkerBeat)


def read_beats(rq: QueueConn) -> list[WorkerBeat]:
    """The heartbeats alive now (one SMEMBERS and one MGET), by name."""
    out: list[WorkerBeat] = []
    for raw in live_beats(rq):
        with contextlib.suppress(msgspec.DecodeError, msgspec.ValidationError):
            out.append(_dec.decode(raw))
    return out


def live_count(rq: QueueConn) -> int:
    """How many worker processes are alive (what readiness and ``hivemind_workers`` say)."""
    return len(read_beats(rq))


MAX_BEAT_NAMESPACES = 1000
"""Most namespace names one heartbeat carries (their count is always whole)."""


@dataclass(frozen=True, slots=True)
class Doing:
    """What the owner of a heartbeat reports at each beat (when RQ's registry cannot)."""

    state: str = ""
    successful_jobs: int = 0
    failed_jobs: int = 0
    namespaces: tuple[str, ...] = ()
    """The namespaces whose index the worker holds."""
    rss_bytes: int = 0
    memory: IndexMemory | None = None


def rss_bytes() -> int:
    """This process's resident memory now (``VmRSS``; 0 where ``/proc`` has none)."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def held(rt: Runtime, doing: Doing = Doing()) -> Doing:
    """``doing`` plus what the worker of runtime ``rt`` holds: the namespaces its query
    engine keeps an index of, and the process's RSS (read from the heartbeat's thread while
    a job may be changing the engine: a reading that races a change is simply left out)."""
    live = getattr(rt.cache.get("query_engine"), "live", None)
    try:  # the memory budget's LRU (``worker.memory.IndexCache``) names what it holds
        names = tuple(sorted(live.names())) if live is not None else ()
    except RuntimeError:  # changed while read: the next beat has it
        names = ()
    return replace(doing, namespaces=names, rss_bytes=rss_bytes())


class Heartbeat:
    """Keeps ``name``'s heartbeat alive from a daemon thread while ``healthy()`` holds."""

    def __init__(self, rq: QueueConn, name: str, kind: str, queues: list[str], *,
                 shards: tuple[int, ...] = (), shard_count: int = 0,
                 healthy: Callable[[], bool] = lambda: True,
                 describe: Callable[[], Doing] = Doing,
                 every_s: float = BEAT_EVERY_S,
                 ttl_s: int = keys.WORKER_BEAT_TTL_SECONDS) -> None:
        self.rq, self.name, self.kind, self.queues = rq, name, kind, queues
        self.shards, self.shard_count = list(shards), shard_count
        self.healthy, self.describe = healthy, describe
        self.every_s, self.ttl_s = every_s, ttl_s
        self.started_at = datetime.now(UTC)
        self._stop = threading.Event()
        self._failing = False
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name=f"heartbeat-{name}")

    def start(self) -> Heartbeat:
        """Beat once now (a worker counts from its first moment), prune the dead, go on."""
        self.beat()
        with contextlib.suppress(RedisError):
            prune_beats(self.rq)
        self._thread.start()
        return self

    def beat(self) -> None:
        """Write the record with a fresh TTL (and the name into the set)."""
        doing = self.describe()
        rec = WorkerBeat(name=self.name, kind=self.kind, hostname=socket.gethostname(),
                         pid=os.getpid(), queues=self.queues, started_at=self.started_at,
                         beat_at=datetime.now(UTC), state=doing.state,
                         successful_jobs=doing.successful_jobs, failed_jobs=doing.failed_jobs,
                         shards=self.shards, shard_count=self.shard_count,
                         namespaces=list(doing.namespaces[:MAX_BEAT_NAMESPACES]),
                         namespace_count=len(doing.namespaces), rss_bytes=doing.rss_bytes,
                         memory=doing.memory)
        write_beat(self.rq, self.name, _enc.encode(rec), self.ttl_s)

    def stop(self) -> None:
        """Stop beating and delete the record (the worker is gone at once, not in 10 s)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(self.every_s + 5)
        with contextlib.suppress(RedisError):
            drop_beat(self.rq, self.name)

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            if not self.healthy():
                log.warning("heartbeat_stopped", name=self.name, reason="worker not running")
                return  # the record expires within the TTL: the worker counts as dead
            try:
                self.beat()
            except RedisError as exc:  # retried at the next tick, well inside the TTL
                if not self._failing:  # one line per outage, not one every tick
                    log.warning("heartbeat_failed", name=self.name, error=type(exc).__name__)
                self._failing = True
                continue
            if self._failing:
                log.info("heartbeat_restored", name=self.name)
                self._failing = False


__all__ = ["BEAT_EVERY_S", "Doing", "Heartbeat", "IndexMemory", "LoadFailure", "WorkerBeat",
           "held", "live_count", "read_beats", "rss_bytes"]
