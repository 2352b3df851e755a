"""RQ job entry points: thin, JSON arguments only; the work lives in ``projector`` and
``engine``. ``api_stub.protocol.jobs.JOB_FUNCTIONS`` names exactly these functions."""

from __future__ import annotations

import re
from typing import Any

import msgspec

from hivemind_memory.api_stub.protocol.messages import Envelope
from hivemind_memory.events.schema import NS_PATTERN
from hivemind_memory.worker import runtime
from hivemind_memory.worker.engine import QueryEngine
from hivemind_memory.worker.projector import run_projection


def project_namespace(ns: str) -> dict[str, Any]:
    """Fold the namespace's pending events (a batch per step) into its read model."""
    if not isinstance(ns, str) or not re.fullmatch(NS_PATTERN, ns):
        raise ValueError(f"project_namespace: {ns!r} is not a namespace")  # a forged job
    rt = runtime.current()
    return run_projection(rt.store, rt.project_queue, ns, rt.settings)


def answer_queries(envelopes: list[dict[str, Any]]) -> dict[str, int]:
    """Answer a chunk of queries (one job carries many: RQ costs ~6 ms a job)."""
    rt = runtime.current()
    engine = rt.cache.get("query_engine")
    if engine is None:
        engine = rt.cache["query_engine"] = QueryEngine(rt.store, rt.cfg, rt.settings)
    return engine.serve([msgspec.convert(e, Envelope) for e in envelopes])

