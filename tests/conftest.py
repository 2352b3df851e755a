"""Fixtures: one contract suite per store (fakeredis and a real redis-server started here).

The helpers behind them live in ``tests/support/__init__.py``; every fixture that installs a global
(the worker runtime) restores it afterwards.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import fakeredis
import pytest
from hypothesis import HealthCheck, settings

# The machines these tests run on are shared and often loaded: Hypothesis's generation-speed
# health check (too_slow) measures the machine, not the code, so it is off for every test.
# Deadlines stay whatever each test sets.
settings.register_profile("hivemind", suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("hivemind")


class _MutantsFirst(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Under mutmut (``MUTANT_UNDER_TEST`` set) the tests run inside ``mutants/``, next to
    mutated copies of the product folders. mutmut names a mutant after its file
    (``projections/ranking/recency.py`` -> ``projections.ranking.recency``) and its trampolines
    compare that with the function's ``__module__``, so ``hivemind_memory.X`` is imported as
    the plain module ``X`` from this tree and the same module object is returned under both
    names (see tests/MUTATION.md). Folders not copied into ``mutants/`` (``worker``,
    ``api_stub``) still come from the editable install; their imports of the core land here
    too."""

    def __init__(self, tree: Path) -> None:
        self.tree = tree
        self.plain: dict[str, importlib.machinery.ModuleSpec] = {}
        """Each aliased name's original spec (the import system replaces ``__spec__``)."""

    def find_spec(self, fullname: str, path: object = None,
                  target: object = None) -> importlib.machinery.ModuleSpec | None:
        head, _, rest = fullname.partition(".")
        if head != "hivemind_memory" or not rest or not (self.tree / rest.split(".")[0]).is_dir():
            return None
        module = importlib.import_module(rest)
        spec = importlib.util.spec_from_loader(fullname, self,
                                               is_package=hasattr(module, "__path__"))
        self._pending = module
        self.plain[fullname] = module.__spec__
        return spec

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> Any:
        return self._pending

    def exec_module(self, module: Any) -> None:
        """The plain-named module already ran."""

    def get_resource_reader(self, fullname: str) -> Any:
        """Package data (the Lua scripts) through the plain module's own loader."""
        spec = self.plain[fullname]
        return spec.loader.get_resource_reader(spec.name)  # type: ignore[union-attr]


def _product_from_this_tree() -> None:
    tree = Path.cwd()
    if not os.environ.get("MUTANT_UNDER_TEST") or not (tree / "projections").is_dir():
        return
    if str(tree) not in sys.path:
        sys.path.insert(0, str(tree))
    sys.meta_path.insert(0, _MutantsFirst(tree))


_product_from_this_tree()  # before anything (tests.support included) imports the product

from hivemind_memory.projections.store.embedded import fake_server  # noqa: E402
from tests.support import (  # noqa: E402  (after the mutants hook)
    RQ_OF,
    ClusterProc,
    RedisProc,
    need_binary,
    need_cluster_tools,
)


def pytest_configure(config: pytest.Config) -> None:
    """The packer the environment asks for (``HIVEMIND_PACKER=numpy`` under mutmut, see
    tests/MUTATION.md), through the settings like every entry point."""
    from hivemind_memory.api_stub.protocol.settings import Settings
    from hivemind_memory.projections.ranking.packing import use_packer

    use_packer(Settings.from_env().packer)


@pytest.fixture(autouse=True)
def _restore_runtime() -> Iterator[None]:
    """A test that installs a worker runtime does not leak it into the next test."""
    from hivemind_memory.worker import runtime  # imported late: see _product_from_this_tree

    saved = runtime.installed()
    yield
    runtime.install(saved)


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisProc]:
    """One private redis-server for the session (tests flush it)."""
    need_binary()
    rp = RedisProc(0, tmp_path_factory.mktemp("redis"), appendonly=False)
    rp.start()
    yield rp
    rp.stop()


@pytest.fixture
def redis_factory(tmp_path: Path) -> Iterator[Callable[..., RedisProc]]:
    """Start extra private servers (AOF on) for restart and crash tests."""
    need_binary()
    started: list[RedisProc] = []

    def make(appendonly: bool = True) -> RedisProc:
        d = tmp_path / f"redis{len(started)}"
        d.mkdir()
        rp = RedisProc(0, d, appendonly=appendonly)
        rp.start()
        started.append(rp)
        return rp

    yield make
    for rp in started:
        rp.stop(sig_kill=True)


@pytest.fixture(params=["fakeredis", pytest.param("redis-server", marks=pytest.mark.redis_server)])
def store(request: pytest.FixtureRequest) -> Iterator[Any]:
    """A clean store: fakeredis, or a real redis-server (flushed)."""
    if request.param == "fakeredis":
        r = fakeredis.FakeRedis(server=fake_server())  # one database, whoever connects first
        yield r
        return
    rp: RedisProc = request.getfixturevalue("redis_server")
    r = rp.client()
    r.flushall()
    yield r
    r.flushall()
    r.close()


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterProc]:
    """A private 3-master Redis Cluster for the session (tests flush it)."""
    need_cluster_tools()
    cp = ClusterProc(tmp_path_factory.mktemp("cluster"), masters=3)
    cp.start()
    yield cp
    cp.stop()


@pytest.fixture(scope="session")
def rq_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisProc]:
    """The plain redis-server that carries RQ beside the cluster (RQ cannot run on one)."""
    need_binary()
    rp = RedisProc(0, tmp_path_factory.mktemp("rq"), appendonly=False)
    rp.start()
    yield rp
    rp.stop()


@pytest.fixture
def cluster_store(redis_cluster: ClusterProc, rq_redis: RedisProc) -> Iterator[Any]:
    """A clean cluster client (flushed), paired with a clean RQ Redis (``rq_for``)."""
    from hivemind_memory.projections.store.cluster import connect_cluster

    rc = connect_cluster(redis_cluster.url)
    rq = rq_redis.client()
    rc.flushall()
    rq.flushall()
    RQ_OF[id(rc)] = rq
    yield rc
    RQ_OF.pop(id(rc), None)
    rc.flushall()
    rq.flushall()
    rc.close()
    rq.close()


@pytest.fixture
def server(redis_server: RedisProc) -> Iterator[str]:
    """The session's private redis-server, flushed, as a URL (for CLI subprocesses)."""
    c = redis_server.client()
    c.flushall()
    yield redis_server.url
    c.flushall()
    c.close()


# -- the fast lane: `pytest -m "not slow"` ------------------------------------------------------
SLOW_FIXTURES = frozenset({"redis_server", "redis_factory", "redis_cluster", "rq_redis",
                           "cluster_store", "server"})
"""Fixtures that start a real redis-server or a Redis Cluster."""
SLOW_MARKS = ("redis_server", "redis_cluster")
"""Marks of tests that need a real redis-server or cluster (the ``store`` fixture's param)."""
SLOW_NAMES = frozenset({"subprocess", "multiprocessing", "Popen", "HIVEMIND", "RedisProc",
                        "ClusterProc", "sync_playwright", "ts_package"})
"""Names whose use starts another process: a child process (the CLI, ``hivemind serve``, a
worker), a redis-server, the browser, node."""


def _process_name(fn: object, seen: set[int]) -> str | None:
    """The first of ``SLOW_NAMES`` that ``fn`` uses, itself or through the functions of the
    test tree (``tests.*``) it calls by name, however deep; None if it uses none."""
    if id(fn) in seen:
        return None
    seen.add(id(fn))
    fn = getattr(fn, "__wrapped__", fn)
    code = getattr(fn, "__code__", None)
    if code is None:
        return None
    names: set[str] = set()
    todo = [code]
    while todo:  # the function's own names and those of the functions nested in it
        c = todo.pop()
        names.update(c.co_names)
        todo.extend(k for k in c.co_consts if hasattr(k, "co_names"))
    if hit := sorted(names & SLOW_NAMES):
        return hit[0]
    spaces = getattr(fn, "__globals__", {})
    for name in sorted(names):
        used = spaces.get(name)
        if callable(used) and str(getattr(used, "__module__", "")).startswith("tests.") \
                and (hit2 := _process_name(used, seen)):
            return hit2
    return None


def slow_reason(item: pytest.Item) -> str | None:
    """Why ``item`` belongs to the slow lane, or None: it needs a real Redis (a fixture or a
    mark), or it or a fixture it uses starts a process (``SLOW_NAMES``)."""
    fixtures = set(getattr(item, "fixturenames", ()))
    if used := sorted(fixtures & SLOW_FIXTURES):
        return f"fixture {used[0]}"
    for mark in SLOW_MARKS:
        if item.get_closest_marker(mark) is not None:
            return f"mark {mark}"
    seen: set[int] = set()
    if hit := _process_name(getattr(item, "function", None), seen):
        return f"uses {hit}"
    info = getattr(item, "_fixtureinfo", None)
    for name in sorted(fixtures):
        for fixdef in (info.name2fixturedefs.get(name, ()) if info else ()):
            if hit := _process_name(fixdef.func, seen):
                return f"fixture {name} uses {hit}"
    return None


LANES: dict[str, str | None] = {}
"""Each collected test's ``slow_reason`` by node id (before ``-m`` deselects any)."""


@pytest.hookimpl(tryfirst=True)  # before ``-m "not slow"`` deselects by the marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark ``slow`` every test that starts a process or a real Redis (``slow_reason``), so a
    new test lands in the right lane by itself; long in-process tests carry the mark by hand.
    ``pytest -m "not slow"`` is the fast lane; plain ``pytest`` (CI) runs everything."""
    for item in items:
        LANES[item.nodeid] = reason = slow_reason(item)
        if item.get_closest_marker("slow") is None and reason is not None:
            item.add_marker(pytest.mark.slow)
