"""The adapters' fixtures: one ``Memory`` over a real ``serve`` (HTTP, token auth) and one over
the embedded store, each seeded with the same notes."""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hivemind_memory import Memory
from tests.support.frontdoor import ALICE, start_live

NOTES = [
    ("deploys@@alice", "Deploys happen on Tuesdays after 14:00 UTC."),
    ("deploy-freeze@@alice",
     "No deploys during the end-of-year freeze, December 20 to January 5."),
    ("deploy-tool@@alice",
     "Deploys go through ArgoCD; the deploy pipeline lives in the infra repo."),
    ("deploy-rollback@@alice", "To roll back a deploy, revert the release commit and redeploy."),
    ("staging-db@@alice", "The staging database is read-only on Fridays."),
    ("oncall@@alice", "The on-call rotation changes every Monday at 09:00."),
]
"""Notes about deploys (the example query) and others, with ids of alice's own space
(``KEY@@alice``: what a token without ``admin`` may choose under the default owned ids)."""


def seed(mem: Memory) -> Memory:
    for nid, text in NOTES:
        mem.remember(text, note_id=nid)
    return mem


@pytest.fixture(scope="module", params=["http", "embedded"])
def memory(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[Memory]:
    """Alice's memory of namespace team-a, over ``serve`` or the embedded store, seeded."""
    root: Path = tmp_path_factory.mktemp(request.param)
    if request.param == "http":
        live = start_live(f"memory://{root / 'served'}")
        mem = Memory(live.base, ns="team-a", token=ALICE)
        try:
            yield seed(mem)
        finally:
            mem.close()
            live.stop()
    else:
        mem = Memory(f"memory://{root / 'embedded'}", ns="team-a", agent="alice")
        try:
            yield seed(mem)
        finally:
            mem.close()


def framework(module: str) -> None:
    """Skip the calling test module (or test) when ``module`` (an adapter's framework, or a
    test kit, from an extra) is not installed, naming it, except under ``CI=true``, where
    ``.ci/run`` installs every extra and a missing one fails. Call it before importing
    anything of an extra, so any combination of extras collects."""
    import importlib

    from tests.support import IN_CI

    if IN_CI:
        importlib.import_module(module)
    else:
        pytest.importorskip(module, reason=f"{module} is not installed (an optional extra; "
                            "CI installs every extra)")


@pytest.hookimpl(tryfirst=True)
def pytest_pycollect_makeitem(collector: pytest.Collector, name: str, obj: Any) -> None:
    """Coroutine tests here run on asyncio (pytest-asyncio's strict mode needs the mark, and a
    standard test of ``langchain-tests`` may not be overridden just to add it)."""
    if isinstance(collector, pytest.Class | pytest.Module) and collector.funcnamefilter(name) \
            and inspect.iscoroutinefunction(obj):
        pytest.mark.asyncio(obj)
