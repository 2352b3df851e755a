"""The job class every hivemind queue and worker uses: the allowlist is enforced here.

RQ resolves a job's function by importing whatever ``func_name`` the job names, and its
success/failure/stopped callbacks the same way. Whoever can write to RQ's Redis could make a
worker import and call anything. ``SafeJob`` checks the names against ``JOB_FUNCTIONS``
before anything is imported: a job naming another function, a bound instance or any callback,
or whose payload is not hivemind's JSON (a pickle, say), raises ``JobRefused`` from ``func``
(the worker logs ``job_refused`` and RQ moves the job to the failed registry) and is never
retried.
"""

from __future__ import annotations

from typing import Any

from rq.exceptions import DeserializationError
from rq.job import Job

from hivemind_memory.api_stub.protocol.jobs import JOB_FUNCTIONS
from hivemind_memory.events.errors import JobRefused


def _shown(name: object) -> str:
    """A refused name for logs: repr, bounded (it comes from whoever wrote the job)."""
    text = repr(name)
    return text if len(text) <= 120 else text[:117] + "..."


class SafeJob(Job):
    """An RQ job that only ever runs a function of ``JOB_FUNCTIONS``."""

    def refusal(self) -> str | None:
        """Why this job must not run (None: it names an allowed function and nothing else)."""
        try:
            name = self.func_name
            instance = self.instance
        except DeserializationError:
            return "payload is not a hivemind JSON job"
        if not isinstance(name, str) or name not in JOB_FUNCTIONS:
            return f"function {_shown(name)} is not an allowed job function"
        if instance is not None:
            return "jobs may not name an instance"
        for kind in ("success", "failure", "stopped"):
            cb = getattr(self, f"_{kind}_callback_name", None)
            if cb is not None:
                return f"{kind} callback {_shown(cb)} is not allowed"
        return None

    @property
    def func(self) -> Any:
        why = self.refusal()
        if why is not None:
            raise JobRefused(f"job {self.id}: {why}; refused without running")
        return super().func

    @property
    def should_retry(self) -> bool:
        return self.refusal() is None and bool(super().should_retry)

    @property
    def success_callback(self) -> Any:
        return None  # hivemind jobs have no callbacks; a named one is refused above

    @property
    def failure_callback(self) -> Any:
        return None

    @property
    def stopped_callback(self) -> Any:
        return None
