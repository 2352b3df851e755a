"""The worker process: sweep for namespaces left behind, then work the queues."""

from __future__ import annotations

import structlog

from hivemind_memory.worker import runtime
from hivemind_memory.worker.projector import behind, sweep
from hivemind_memory.worker.rqworker import HivemindWorker

log = structlog.get_logger("hivemind.worker")

SWEEP_INTERVAL_S = 60
"""A long-running worker re-sweeps for namespaces left behind after this long idle."""


def run_worker(rt: runtime.Runtime, burst: bool) -> int:
    """Sweep for namespaces left behind, then work; in burst mode loop until all projected.

    A long-running worker returns to sweep whenever it has been idle for ``SWEEP_INTERVAL_S``
    (a job that failed for good leaves its namespace behind until someone sweeps), and exits
    on SIGINT/SIGTERM (RQ's warm shutdown: the current job finishes first).
    """
    queues = [rt.query_queue, rt.project_queue]
    rounds_without_progress = 0
    while True:
        sweep(rt.store, rt.project_queue)
        w = HivemindWorker(queues, connection=rt.rq)
        w.work(burst=burst, with_scheduler=False, logging_level="WARNING",
               max_idle_time=None if burst else SWEEP_INTERVAL_S)
        if not burst:
            if w._stop_requested or getattr(w, "_shutdown_requested_date", None) is not None:
                return 0
            continue
        late = behind(rt.store)
        if not late:
            log.info("burst_done")
            return 0
        rounds_without_progress += 1
        if rounds_without_progress > 5:
            log.error("burst_stuck", namespaces=late)
            return 1
