"""Fixtures: one contract suite per store (fakeredis and a real redis-server started here).

The helpers behind them live in ``tests/support.py``; every fixture that installs a global
(the worker runtime) restores it afterwards.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import fakeredis
import pytest

from tests.support import (
    RQ_OF,
    ClusterProc,
    RedisProc,
    free_port,
    need_binary,
    need_cluster_tools,
)


def _product_from_this_tree() -> None:
    """Under mutmut (``MUTANT_UNDER_TEST`` set) the tests run inside ``mutants/``, next to
    mutated copies of the product folders: import ``hivemind_memory.*`` from those, not through
    the editable install's mapping to the original folders (see tests/MUTATION.md)."""
    tree = Path.cwd()
    if not os.environ.get("MUTANT_UNDER_TEST") or not (tree / "projections").is_dir():
        return
    for top in ("events", "projections", "api_stub", "worker"):
        for init in sorted((tree / top).rglob("__init__.py"), key=lambda f: len(f.parts)):
            rel = init.parent.relative_to(tree)
            name = "hivemind_memory." + ".".join(rel.parts)
            spec = importlib.util.spec_from_file_location(
                name, init, submodule_search_locations=[str(init.parent)])
            assert spec is not None and spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            spec.loader.exec_module(module)


def pytest_configure(config: pytest.Config) -> None:
    _product_from_this_tree()  # before any test module imports the product



@pytest.fixture(autouse=True)
def _restore_runtime() -> Iterator[None]:
    """A test that installs a worker runtime does not leak it into the next test."""
    from hivemind_memory.worker import runtime  # imported late: see pytest_configure

    saved = runtime.installed()
    yield
    runtime.install(saved)


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisProc]:
    """One private redis-server for the session (tests flush it)."""
    need_binary()
    rp = RedisProc(free_port(), tmp_path_factory.mktemp("redis"), appendonly=False)
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
        rp = RedisProc(free_port(), d, appendonly=appendonly)
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
        r = fakeredis.FakeRedis(server=fakeredis.FakeServer())
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
    rp = RedisProc(free_port(), tmp_path_factory.mktemp("rq"), appendonly=False)
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
