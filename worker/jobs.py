"""RQ job entry points: thin, JSON arguments only; the work lives in ``projector`` and
``engine``. ``api_stub.protocol.jobs.JOB_FUNCTIONS`` names exactly these functions."""

from __future__ import annotations

import re
from typing import Any

import msgspec

from hivemind_memory.api_stub.protocol.job_erasure import redact_jobs
from hivemind_memory.api_stub.protocol.messages import Envelope
from hivemind_memory.events.schema import ID_PATTERN, NS_PATTERN
from hivemind_memory.projections.store import erasure
from hivemind_memory.worker import runtime
from hivemind_memory.worker.engine import QueryEngine
from hivemind_memory.worker.projector import run_projection


def project_namespace(ns: str) -> dict[str, Any]:
    """Fold the namespace's pending events (a batch per step) into its read model."""
    if not isinstance(ns, str) or not re.fullmatch(NS_PATTERN, ns):
        raise ValueError(f"project_namespace: {ns!r} is not a namespace")  # a forged job
    rt = runtime.current()
    return run_projection(rt.store, rt.project_queue, ns, rt.settings)


def _engine(rt: runtime.Runtime) -> QueryEngine:
    engine: QueryEngine | None = rt.cache.get("query_engine")
    if engine is None:
        engine = rt.cache["query_engine"] = QueryEngine(rt.store, rt.cfg, rt.settings,
                                                        project_queue=rt.project_queue)
    return engine


def answer_queries(envelopes: list[dict[str, Any]]) -> dict[str, int]:
    """Answer a chunk of queries (one job carries many: RQ costs ~6 ms a job)."""
    return _engine(runtime.current()).serve([msgspec.convert(e, Envelope) for e in envelopes])


def refresh_snapshot(ns: str) -> dict[str, Any]:
    """Bring the namespace's index snapshot up to date (``QueryEngine.refresh_snapshot``)."""
    if not isinstance(ns, str) or not re.fullmatch(NS_PATTERN, ns):
        raise ValueError(f"refresh_snapshot: {ns!r} is not a namespace")  # a forged job
    return _engine(runtime.current()).refresh_snapshot(ns)



def redact_notes(ns: str, note_ids: list[str]) -> dict[str, Any]:
    """Redact the content of erased notes everywhere (``projections.store.erasure``): what
    the projector enqueues when it folds a ``note.erased``, so an erasure cut short (or one
    appended by ``ingest``) completes."""
    if not isinstance(ns, str) or not re.fullmatch(NS_PATTERN, ns):
        raise ValueError(f"redact_notes: {ns!r} is not a namespace")  # a forged job
    if not isinstance(note_ids, list) or not all(
            isinstance(n, str) and re.fullmatch(ID_PATTERN, n) for n in note_ids):
        raise ValueError(f"redact_notes: {note_ids!r} is not a list of note ids")
    rt = runtime.current()
    red = erasure.redact(rt.store, ns, note_ids, also=lambda c: redact_jobs(
        rt.rq, rt.store, ns, c, rt.settings.result_ttl_seconds))
    return {"ns": ns, "erased": red.erased, "not_erased": red.not_erased,
            **erasure.erasure_counts(red)}
