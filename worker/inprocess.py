"""The worker inside a server process (``serve`` and ``mcp`` on the embedded store).

The embedded store lives in this process, so no other process can work its queues. A daemon
thread drains them: it sweeps for namespaces left behind (after a restart of a
``memory://PATH`` store every namespace is, so the read model is rebuilt from the log), then
runs RQ ``SimpleWorker`` bursts whenever a queue has work. Writers ``kick()`` it after an
append or a query submission; between kicks it looks at the queue lengths every
``POLL_S`` (cheap: the store is in process). Chosen over "burst after each append in the
request thread" so a request never does the worker's work, and over a blocking
``SimpleWorker.work()`` because that one cannot be stopped promptly from another thread.

It keeps a heartbeat (``worker.ops.heartbeat``) like a ``hivemind worker`` process, so readiness,
``status`` and ``/metrics`` count it the same way, bursts or not; the heartbeat stops when the
thread does.

RQ's default signal handling and job timeouts use signals, which only the main thread may
install; this worker installs none and uses RQ's timer-based death penalty instead.
"""

from __future__ import annotations

import threading

import structlog
from rq.timeouts import TimerDeathPenalty

from hivemind_memory.api_stub.protocol.jobs import worker_records
from hivemind_memory.api_stub.protocol.settings import Settings
from hivemind_memory.projections.ranking.packing import use_packer
from hivemind_memory.projections.store.types import Store
from hivemind_memory.worker import runtime
from hivemind_memory.worker.loop import worker_name
from hivemind_memory.worker.memory import reported
from hivemind_memory.worker.ops.heartbeat import Doing, Heartbeat, held
from hivemind_memory.worker.projector import behind, enqueue_behind
from hivemind_memory.worker.rqworker import HivemindWorker

log = structlog.get_logger("hivemind.inprocess")

POLL_S = 0.05
"""How often the idle thread looks at the queue lengths."""


class _ThreadWorker(HivemindWorker):
    """hivemind's worker (``SafeJob`` allowlist, JSON, heartbeats) outside the main thread."""

    death_penalty_class = TimerDeathPenalty

    def _install_signal_handlers(self) -> None:
        """No signals: the owning thread stops us."""


class InProcessWorker:
    """Drains the project and query queues of ``rt`` in a daemon thread."""

    def __init__(self, rt: runtime.Runtime) -> None:
        self.rt = rt
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="hivemind-worker", daemon=True)
        self.bursts = 0
        self.successful_jobs = 0
        self.failed_jobs = 0
        self._busy = False
        self.heartbeat = Heartbeat(
            rt.rq, f"{worker_name()}-inprocess", "in-process",
            [*(q.name for q in rt.query_queues()), rt.project_queue.name],
            shards=tuple(range(rt.settings.shards)), shard_count=rt.settings.shards,
            healthy=self._thread.is_alive,
            describe=lambda: held(rt, Doing("busy" if self._busy else "idle",
                                            self.successful_jobs, self.failed_jobs,
                                            memory=reported(rt.cache))))
        """Counted by readiness, ``status`` and ``/metrics`` like any worker process."""
        self.caught_up = threading.Event()
        """Set once every namespace behind at start (all of them, after a restart of a
        ``memory://PATH`` store) has been projected."""

    def start(self) -> InProcessWorker:
        if not enqueue_behind(self.rt.store, self.rt.project_queue):
            self.caught_up.set()
        self._thread.start()
        self.heartbeat.start()
        self.kick()
        return self

    def kick(self) -> None:
        """Work is waiting (called after an append or a query submission)."""
        self._wake.set()

    def alive(self) -> bool:
        return self._thread.is_alive()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout)
        self.heartbeat.stop()

    def _pending(self) -> bool:
        return any(len(q) for q in (*self.rt.query_queues(), self.rt.project_queue))

    def _run(self) -> None:
        runtime.install_for_thread(self.rt)
        queues = [*self.rt.query_queues(), self.rt.project_queue]
        while not self._stop.is_set():
            self._wake.wait(POLL_S)
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                while self._pending() and not self._stop.is_set():
                    w = _ThreadWorker(queues, connection=self.rt.rq)
                    self._busy = True
                    try:
                        w.work(burst=True, with_scheduler=False, logging_level="WARNING")
                    finally:
                        self._busy = False
                    self.bursts += 1
                    self._count(w)
                    self.heartbeat.beat()  # status shows the new counters at once
                if not self.caught_up.is_set() and not behind(self.rt.store):
                    self.caught_up.set()
            except Exception:  # keep serving: the next kick retries; the job keeps its retries
                log.exception("inprocess_worker_error")


    def _count(self, w: _ThreadWorker) -> None:
        """Add a finished burst's job counters (RQ keeps a dead worker's hash for 60 s)."""
        [(_, ok, failed)] = worker_records(self.rt.rq, [w.name])
        self.successful_jobs += int(ok or 0)
        self.failed_jobs += int(failed or 0)


def start_embedded(settings: Settings, store: Store) -> InProcessWorker:
    """A started in-process worker over ``store`` (what the SDK runs for ``memory://``)."""
    use_packer(settings.packer)
    return InProcessWorker(runtime.build(settings, store)).start()
