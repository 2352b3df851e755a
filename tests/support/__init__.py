"""Shared test helpers: private redis-server processes on free ports and the CLI command.

Real-Redis tests skip on a machine without the binary, but fail when ``CI=true``.
Imported by ``conftest.py`` and by tests; nothing imports ``conftest.py``.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
import redis
from redis.crc import key_slot

from hivemind_memory.projections.ranking.config import RankingConfig
from hivemind_memory.projections.ranking.index import build_index
from hivemind_memory.projections.ranking.rank_result import RankResult
from hivemind_memory.projections.ranking.ranker import rank_index
from hivemind_memory.projections.state import NoteState

IN_CI = os.environ.get("CI", "").lower() == "true"
START_ATTEMPTS = 5
"""How many ports a private redis-server (or cluster) tries before its start fails."""


def bound_port(port_file: Path, proc: subprocess.Popen[bytes], what: str,
               timeout_s: float = 30) -> int:
    """The port ``proc`` (started with ``--port 0 --port-file PORT_FILE``, or the worker's
    ``--metrics-port 0 --metrics-port-file``) bound, once it has written it; fail naming
    ``what`` if it exits or takes longer than ``timeout_s``. Servers under test bind port 0:
    a port drawn here, closed and handed over could be taken by anyone in between."""
    deadline = time.monotonic() + timeout_s
    while not port_file.exists():
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode} before binding a port")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not bind a port within {timeout_s} s")
        time.sleep(0.02)  # waiting for an external process to bind its port
    return int(port_file.read_text())


def free_port() -> int:
    """A port free right now, for what cannot bind port 0 itself (redis-server) or a port
    nothing listens on; a server of ours binds port 0 instead (``bound_port``)."""
    return free_ports(1)[0]


def free_ports(n: int) -> list[int]:
    """``n`` distinct ports free right now (all held until all are drawn, so two draws never
    hand out the same port)."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for s in socks:
            s.close()


@dataclass
class RedisProc:
    """A private redis-server (stop/start keep its data dir and port). redis-server cannot
    report a port it picked, so with ``port`` 0 the first start draws a free port and, should
    another process take it before redis-server binds it, draws again (up to
    ``START_ATTEMPTS`` times); the port is then kept for restarts."""

    port: int
    dir: Path
    appendonly: bool
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        binary = shutil.which("redis-server")
        assert binary is not None
        draw = self.port == 0
        for attempt in range(START_ATTEMPTS if draw else 1):
            if draw:
                self.port = free_port()
            self.proc = subprocess.Popen(
                [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                 "--appendonly", "yes" if self.appendonly else "no", "--appendfsync", "always",
                 "--dir", str(self.dir), "--protected-mode", "no", "--daemonize", "no"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                _wait_ping(self.port, self.proc)
                return
            except RuntimeError:
                self.proc.kill()
                self.proc.wait(timeout=10)
                self.proc = None
                if attempt == (START_ATTEMPTS if draw else 1) - 1:
                    raise

    def stop(self, sig_kill: bool = False) -> None:
        if self.proc is None:
            return
        if sig_kill:
            self.proc.kill()
        else:
            self.proc.terminate()
        self.proc.wait(timeout=10)
        self.proc = None

    def client(self) -> redis.Redis:
        return redis.Redis(port=self.port)


def built_native(module: ModuleType, what: str) -> ModuleType:
    """``module.native`` (a C path of the ranking core), skipping without it on a laptop and
    failing under ``CI=true``, where every C path must be built."""
    got: ModuleType | None = getattr(module, "native")  # noqa: B009 - every such module has it
    if got is None:
        msg = f"{what} is not built"
        if IN_CI:
            pytest.fail(msg + " (CI=true: it must be)")
        pytest.skip(msg)
    return got


@contextmanager
def numpy_path(module: ModuleType) -> Iterator[None]:
    """Run ``module``'s numpy code (the reference) instead of its C path, within the block."""
    saved = getattr(module, "native")  # noqa: B009 - every such module has it
    setattr(module, "native", None)  # noqa: B010
    try:
        yield
    finally:
        setattr(module, "native", saved)  # noqa: B010


def need_binary() -> None:
    if shutil.which("redis-server") is None:
        msg = "redis-server binary not found"
        if IN_CI:
            pytest.fail(msg + " (CI=true: real-Redis tests must run)")
        pytest.skip(msg)


HIVEMIND = [sys.executable, "-m", "hivemind_memory.worker.cli"]
"""The ``hivemind`` command, run with this interpreter (works without the console script)."""


@dataclass
class ClusterProc:
    """A private Redis Cluster: ``masters`` masters and ``replicas`` replicas per master, each a
    redis-server on free ports (client port and cluster bus port), joined by
    ``redis-cli --cluster create``."""

    dir: Path
    masters: int = 3
    replicas: int = 0
    node_timeout_ms: int = 1000
    nodes: list[RedisProc] | None = None
    procs: dict[int, subprocess.Popen[bytes]] | None = None
    bus: dict[int, int] | None = None

    @property
    def ports(self) -> list[int]:
        return [n.port for n in self.nodes or []]

    @property
    def url(self) -> str:
        """The data-store URL hivemind takes for this cluster."""
        return "redis+cluster://" + ",".join(f"127.0.0.1:{p}" for p in self.ports[:3])

    def _spawn(self, node: RedisProc, bus: int) -> subprocess.Popen[bytes]:
        binary = shutil.which("redis-server")
        assert binary is not None
        return subprocess.Popen(
            [binary, "--port", str(node.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", str(node.dir), "--protected-mode", "no",
             "--daemonize", "no", "--cluster-enabled", "yes", "--cluster-port", str(bus),
             "--cluster-config-file", "nodes.conf",
             "--cluster-node-timeout", str(self.node_timeout_ms)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def start(self) -> None:
        n = self.masters * (1 + self.replicas)
        for attempt in range(START_ATTEMPTS):  # a port may be taken between drawing and binding
            ports = free_ports(2 * n)
            self.nodes, self.procs, self.bus = [], {}, {}
            for i in range(n):
                d = self.dir / f"node{i}"
                shutil.rmtree(d, ignore_errors=True)
                d.mkdir(parents=True)
                node = RedisProc(ports[2 * i], d, appendonly=False)
                self.nodes.append(node)
                self.bus[node.port] = ports[2 * i + 1]
                self.procs[node.port] = self._spawn(node, self.bus[node.port])
            try:
                for node in self.nodes:
                    _wait_ping(node.port, self.procs[node.port])
                break
            except RuntimeError:
                self.stop()
                if attempt == START_ATTEMPTS - 1:
                    raise
        cli = shutil.which("redis-cli")
        assert cli is not None, "redis-cli not found"
        out = subprocess.run(
            [cli, "--cluster", "create", *[f"127.0.0.1:{p}" for p in self.ports],
             "--cluster-replicas", str(self.replicas), "--cluster-yes"],
            capture_output=True, text=True, timeout=60, check=False)
        if out.returncode != 0:
            raise RuntimeError(f"redis-cli --cluster create failed: {out.stdout}{out.stderr}")
        self.wait_ok(expect_replicas=self.replicas)

    def wait_ok(self, expect_replicas: int = 0, timeout_s: float = 30) -> None:
        """Until every live node reports ``cluster_state:ok`` and every master has
        ``expect_replicas`` connected replicas."""
        deadline = time.monotonic() + timeout_s
        while True:
            if self.all_ok(expect_replicas):
                return
            if time.monotonic() > deadline:
                raise RuntimeError("cluster did not reach cluster_state:ok in time")
            time.sleep(0.05)  # waiting for external processes to gossip

    def all_ok(self, expect_replicas: int) -> bool:
        for port in self.live_ports():
            c = redis.Redis(port=port)
            try:
                info = c.execute_command("CLUSTER", "INFO")
                text = info.decode() if isinstance(info, bytes) else str(info)
                if "cluster_state:ok" not in text:
                    return False
                if expect_replicas:
                    rep = c.info("replication")
                    if rep.get("role") == "master" and \
                            int(rep.get("connected_slaves", 0)) < expect_replicas:
                        return False
                    if rep.get("role") == "slave" and rep.get("master_link_status") != "up":
                        return False
            except redis.RedisError:
                return False
            finally:
                c.close()
        return True

    def failed_over(self, port: int) -> bool:
        """Whether every live node reports ``cluster_state:ok`` and serves no slot from
        ``port`` any more (a replica took its slots over)."""
        if not self.all_ok(0):
            return False
        for live in self.live_ports():
            c = redis.Redis(port=live)
            try:
                shards = c.execute_command("CLUSTER", "SLOTS")
            except redis.RedisError:
                return False
            finally:
                c.close()
            if any(int(master[1]) == port for _lo, _hi, master, *_ in shards):
                return False
        return True

    def live_ports(self) -> list[int]:
        return [p for p, pr in (self.procs or {}).items() if pr.poll() is None]

    def master_of(self, key: str) -> int:
        """The port of the live master that serves ``key``'s slot now."""
        slot = key_slot(key.encode())
        for port in self.live_ports():
            c = redis.Redis(port=port)
            try:
                if c.info("replication").get("role") != "master":
                    continue
                shards = c.execute_command("CLUSTER", "SLOTS")
            except redis.RedisError:
                continue
            finally:
                c.close()
            for lo, hi, master, *_ in shards:
                if lo <= slot <= hi:
                    return int(master[1])
        raise RuntimeError(f"no live master for slot {slot}")

    def kill(self, port: int) -> None:
        """SIGKILL one node (its data is gone: no persistence)."""
        assert self.procs is not None
        self.procs[port].kill()
        self.procs[port].wait(timeout=10)

    def restart(self, port: int) -> None:
        """Start a killed node again (empty: no persistence); its nodes.conf makes it rejoin,
        as a replica of whoever took over its slots."""
        assert self.procs is not None and self.bus is not None and self.nodes is not None
        node = next(n for n in self.nodes if n.port == port)
        self.procs[port] = self._spawn(node, self.bus[port])
        _wait_ping(port, self.procs[port])

    def stop(self) -> None:
        for pr in (self.procs or {}).values():
            if pr.poll() is None:
                pr.kill()
                pr.wait(timeout=10)
        self.procs = {}


def _wait_ping(port: int, proc: subprocess.Popen[bytes]) -> None:
    """Until the redis-server ``proc`` answers on ``port``; a RuntimeError if it exits first
    (the port was taken) or if another process's server answers there instead."""
    deadline = time.monotonic() + 10
    client = redis.Redis(port=port)
    try:
        while True:
            try:
                pid = int(client.info("server")["process_id"])
                if pid != proc.pid:
                    raise RuntimeError(f"port {port} is served by another redis-server "
                                       f"(process {pid})")
                return
            except redis.ConnectionError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError(f"redis-server on port {port} did not start") from None
                time.sleep(0.02)  # waiting for an external process to open its port
    finally:
        client.close()


def need_cluster_tools() -> None:
    """Like ``need_binary`` for the cluster tests (redis-server and redis-cli)."""
    need_binary()
    if shutil.which("redis-cli") is None:
        msg = "redis-cli binary not found"
        if IN_CI:
            pytest.fail(msg + " (CI=true: cluster tests must run)")
        pytest.skip(msg)


RQ_OF: dict[int, redis.Redis] = {}
"""The RQ connection paired with a test store that cannot carry RQ itself (a cluster)."""


def rq_for(store: object) -> redis.Redis | None:
    """The RQ connection to use with ``store`` (None: the store carries RQ itself)."""
    return RQ_OF.get(id(store))


def command_keys(rc: object, args: tuple[object, ...]) -> list[bytes]:
    """The keys one command names (EVAL/EVALSHA by their numkeys; others by COMMAND GETKEYS)."""
    name = str(args[0]).upper()
    if name in ("EVAL", "EVALSHA"):
        n = int(args[2])  # type: ignore[call-overload]
        return [_b(k) for k in args[3:3 + n]]
    if name.split(" ")[0] in ("PING", "WAIT", "CLUSTER", "COMMAND", "INFO", "SCRIPT",
                              "FLUSHALL", "READONLY", "CLIENT"):
        return []
    got = rc._get_command_keys(*args)  # type: ignore[attr-defined]
    return [_b(k) for k in got or []]


def _b(k: object) -> bytes:
    return k if isinstance(k, bytes) else str(k).encode()


@dataclass
class SlotRecorder:
    """Records the keys of every call a cluster client makes: each single command and script,
    each MULTI transaction as one call (with the keys it WATCHed), and each command of a
    non-transactional pipeline as its own call (those are not atomic)."""

    calls: list[tuple[str, list[bytes]]]

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        from redis.cluster import ClusterPipeline, RedisCluster, TransactionStrategy

        rec = self
        orig_exec = RedisCluster.execute_command
        orig_pipe = ClusterPipeline.execute
        orig_watch = ClusterPipeline.watch

        def execute_command(self: RedisCluster, *args: object, **kw: object) -> object:
            rec.calls.append((str(args[0]).upper(), command_keys(self, args)))
            return orig_exec(self, *args, **kw)

        def watch(self: ClusterPipeline, *names: object) -> object:
            self._hm_watched = [_b(n) for n in names]  # type: ignore[attr-defined]
            return orig_watch(self, *names)

        def execute(self: ClusterPipeline, raise_on_error: bool = True) -> object:
            queue = list(self._execution_strategy.command_queue)
            if isinstance(self._execution_strategy, TransactionStrategy):
                ks = list(getattr(self, "_hm_watched", []))
                for c in queue:
                    ks += command_keys(self, tuple(c.args))
                rec.calls.append(("MULTI", ks))
                self._hm_watched = []  # type: ignore[attr-defined]
            else:
                for c in queue:
                    rec.calls.append((str(c.args[0]).upper(), command_keys(self, tuple(c.args))))
            return orig_pipe(self, raise_on_error)

        monkeypatch.setattr(RedisCluster, "execute_command", execute_command)
        monkeypatch.setattr(ClusterPipeline, "execute", execute)
        monkeypatch.setattr(ClusterPipeline, "watch", watch)

    def slots_per_call(self) -> list[tuple[str, set[int]]]:
        return [(name, {key_slot(k) for k in ks}) for name, ks in self.calls if ks]


def wait_until(cond: Callable[[], object], what: str, timeout_s: float = 60) -> None:
    """Until ``cond()`` is true, or fail naming ``what`` after ``timeout_s``: for conditions
    that other processes make true (servers gossiping, worker subprocesses), which give us
    nothing to block on."""
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)  # polling an external process's progress


def rank_notes(notes: Iterable[NoteState], relevance: Mapping[str, float], *, agent: str,
               now: datetime, budget: int, cfg: RankingConfig,
               explain: bool = True, why_limit: int = 0) -> RankResult:
    """The product's ranking (``rank_index`` over a ``NamespaceIndex`` of ``notes``) with the
    relevance given per note id (missing: 0), the same arguments as the reference
    ``tests.support.reference.rank`` (and ``why_limit``, passed on)."""
    idx = build_index("t", {n.note_id: n for n in notes})
    keys = [k for k in sorted(relevance) if k in idx.cols.slot]
    slots = np.array([idx.cols.slot[k] for k in keys], np.int64)
    rel = np.array([relevance[k] for k in keys], np.float64)
    return rank_index(idx, slots, rel, agent=agent, now=now, budget=budget, cfg=cfg,
                      explain=explain, why_limit=why_limit)
