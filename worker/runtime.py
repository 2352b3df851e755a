"""What a job needs at run time: connections, settings, the ranking config, the query index.

Installed once by the worker entry point; a job running in a plain ``rq worker`` builds it
lazily from the environment and the job's own connection.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rq import Queue

from events import keys
from projections.config import RankingConfig, load_config
from worker.serializer import JSONSerializer
from worker.settings import Settings


@dataclass
class Runtime:
    """Connections and configuration shared by every job of one worker process."""

    store: Any
    """Redis client for streams, projections and results."""
    rq: Any
    """Redis client for RQ's own keys (may be the same)."""
    settings: Settings
    cfg: RankingConfig
    cache: dict[str, Any] = field(default_factory=dict)
    """Per-process state that outlives a job (the query indexes)."""

    def queue(self, name: str) -> Queue:
        """An RQ queue with the JSON serializer (never pickle)."""
        return Queue(name, connection=self.rq, serializer=JSONSerializer,
                     default_timeout=self.settings.job_timeout_s)

    @property
    def project_queue(self) -> Queue:
        return self.queue(keys.PROJECT_QUEUE)

    @property
    def query_queue(self) -> Queue:
        return self.queue(keys.QUERY_QUEUE)


def build(settings: Settings, store: Any, rq_conn: Any | None = None) -> Runtime:
    """A runtime from settings and an open connection."""
    return Runtime(store=store, rq=rq_conn if rq_conn is not None else store,
                   settings=settings, cfg=load_config(settings.config_path))


_current: Runtime | None = None


def install(rt: Runtime) -> None:
    """Make ``rt`` the runtime of this process's jobs."""
    global _current
    _current = rt


def current() -> Runtime:
    """The installed runtime, or one built from the environment and the current job."""
    global _current
    if _current is None:
        from rq import get_current_job

        job = get_current_job()
        if job is None:
            raise RuntimeError("no hivemind runtime installed and no current RQ job")
        _current = build(Settings.from_env(), job.connection)
    return _current
