"""RQ job entry points: thin, JSON arguments only, the work lives in schedule/query modules."""

from __future__ import annotations

from typing import Any

from worker import runtime
from worker.schedule import run_projection


def project_namespace(ns: str) -> dict[str, Any]:
    """Fold the namespace's pending events (a batch per step) into its read model."""
    rt = runtime.current()
    return run_projection(rt.store, rt.project_queue, ns, rt.cfg, rt.settings)
